"""Build the compatibility matrix from run files.

    python -m tools.report [RUN_FILE_OR_DIR ...] [--out DIR] [--kernels DIR]

Default input: every ``reports/runs/*.jsonl``. Writes ``matrix.md``, ``matrix.html``,
``matrix.json`` and the charts' PNGs into ``--out`` (default ``reports/``), all or none:
everything is rendered and written beside the old files before any of them is replaced.
A malformed or truncated run file gives one line on stderr naming the file and line, and
exit status 2; the readable records, of that file and the others, are still reported.
With nothing readable at all, no matrix is overwritten. An ``--out`` that cannot be
written, or an internal error, is one line and exit 2 too, and the old files stay whole
(tools/cli.py).

The HTML is one self-contained page (inline CSS, vanilla JS, charts as embedded PNG, no
external URL): columns grouped by host, filters by suite / target / result, a details
panel per cell. Every string from a run file is escaped, and the data the script reads
is JSON in a script element that never runs. ``python -m tools.render_check`` checks
that the page renders in headless Chromium.

Kernel tables saved by ``python -m tools.kernels --save`` (``reports/kernels/*.json``)
add a *predicted* section: the static MPS kernel list of each torch version and what
changes between versions.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import math
import os
import sys
import warnings
from collections import Counter
from pathlib import Path

from packaging.version import InvalidVersion, Version
from tabulate import tabulate

from harness import journal, markdown, records
from harness.matrix import (KEY_ORDER, LEGEND, NOT_SHOWN, PREFERRED_METRICS, SYMBOL, TARGET_ORDER, WORKS, History,
                            Matrix, build, cell_key, format_counts, host_groups, key_metric, version_history)
from tools import cli

ROOT = Path(__file__).resolve().parent.parent
REPORT_SCHEMA = 1
SUMMARIZE_OVER = 150      # a suite with more checks is shown as counts plus its non-passing rows
LIST_AT_MOST = 300        # rows of one listing in md/html; matrix.json has everything
PROBLEMS = ("fail", "error", "crash", "timeout", "xpass", "unsupported")
TITLE_METRICS = 5         # scalar metrics in a cell's hover text; the click panel shows all
METRIC_CHARS = 400        # a metric longer than this is cut in the HTML panel (matrix.json has it whole)
CHART_ROWS = 60           # rows of one chart at most
WORST_CHARTED = 25        # parity checks in the worst-margins chart

# Cell colours, one per legend key: the matrix cells, the summary bars, the filters and
# the charts all use these, so a colour means the same thing everywhere on the page.
KEY_COLOURS = {
    "pass": "#bfe8bf", "cpu-fallback": "#ffe39a", "unsupported": "#fbc28e", "fail": "#f3a0a0", "error": "#eeb0d0",
    "xfail": "#cfcffa", "xpass": "#a9daf7", "does-not-hold": "#f7b8a0", "inconclusive": "#dedede",
    "skip": "#e4e4e4", "crash": "#d98f8f", "timeout": "#dcb6e8",
}


@dataclasses.dataclass
class Cell:
    text: str
    key: str = ""      # a legend key: colours the cell in HTML
    title: str = ""    # hover text in HTML
    record: dict | None = None   # the record behind it: the HTML details panel shows all its metrics
    where: str = ""              # the column it belongs to, for that panel


@dataclasses.dataclass
class Bar:
    """Counts per legend key: a stacked bar in HTML, the short count line in Markdown."""
    counts: dict


@dataclasses.dataclass
class Section:
    title: str
    headers: list[str]
    rows: list[list]   # str or Cell
    intro: str = ""
    empty: str = "Nothing to show."
    level: int = 2
    image: bytes | None = None   # a PNG: embedded in the HTML, written beside the Markdown
    image_name: str = ""
    # A matrix table: the Column behind each header after the leading ones (grouped by host
    # in HTML), the suite its rows belong to and a Bar per column (both for the HTML filters).
    columns: list = dataclasses.field(default_factory=list)
    suite: str = ""
    bars: list = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------- content

def cell_of(rec: dict | None, where: str = "") -> Cell:
    if rec is None:
        return Cell("")
    key = cell_key(rec)
    metric = key_metric(rec.get("metrics") or {})
    return Cell(f"{SYMBOL[key]} {metric}".strip(), key, _title(key, rec), rec, where)


def _title(key: str, rec: dict) -> str:
    """Hover text: the result with its reason, then the first few scalar metrics."""
    metrics = rec.get("metrics") or {}
    names = [n for n in PREFERRED_METRICS if n in metrics] + [n for n in metrics if n not in PREFERRED_METRICS]
    shown = [f"{n}={_scalar(metrics[n])}" for n in names
             if n not in NOT_SHOWN and isinstance(metrics[n], (int, float, str, bool))][:TITLE_METRICS]
    return "\n".join([f"{key}: {rec.get('reason') or ''}".strip(), *shown])


def _scalar(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def env_rows(m: Matrix) -> list[dict]:
    rows = []
    for col in m.columns:
        f, h = col.facts, col.header
        pk = f.get("packages") or {}
        mac = f.get("mac") or {}
        py = f.get("python") or {}
        rows.append({
            "column": col.label, "host": f.get("host"), "os": (f.get("os") or {}).get("platform"),
            "python": f"{py.get('version')} ({py.get('arch')})", "torch": pk.get("torch"),
            "transformers": pk.get("transformers"), "datasets": pk.get("datasets"), "accelerate": pk.get("accelerate"),
            "macOS": mac.get("version") or "-", "chip / CPU": mac.get("chip") or (f.get("cpu") or {}).get("model"),
            "target available": (h.get("targets") or {}).get(col.target, {}).get("available"),
            "MPS fallback": (h.get("mps_fallback") or {}).get("setting"), "suite rev": f.get("suite_revision"),
            "runs": len(col.runs), "complete": "yes" if col.complete else "no (cut off)",
        })
    return rows


def suite_sections(m: Matrix) -> list[Section]:
    bars = _suite_bars(m)
    out = []
    for suite, checks in m.suites.items():
        heads = ["check"] + [c.label for c in m.columns]
        matrix = {"columns": m.columns, "suite": suite, "bars": [Bar(bars[(suite, c.id)]) for c in m.columns]}
        if len(checks) <= SUMMARIZE_OVER:
            out.append(Section(suite, heads, _check_rows(m, checks), **matrix))
            continue
        counts = {c.id: Counter(_count_key(r) for (ch, col), r in m.cells.items()
                                if col == c.id and r["suite"] == suite)
                  for c in m.columns}
        out.append(Section(f"{suite}: {len(checks)} checks, by category", ["category"] + heads[1:],
                           [[cat] + [str(counts[c.id].get(cat, 0)) for c in m.columns] for cat in
                            (*records.OP_CATEGORIES, *KEY_ORDER, "skipped") if any(counts[c.id].get(cat) for c in m.columns)],
                           intro="native: ran, no fallback; cpu-fallback: ran with ops on the CPU; unsupported: "
                                 "NotImplementedError; n/a: errors, crashes and timeouts (see below); other "
                                 "suites are counted by result (pass, fail, xfail ...); skipped: target absent "
                                 "or nothing to compare (see the skip reasons below).", **matrix))
        odd = [check for check in checks
               if any((r := m.cells.get((check, c.id))) and cell_key(r) != "pass" and r["status"] != "skip"
                      for c in m.columns)]
        more = f" The first {LIST_AT_MOST} of {len(odd)} are listed; matrix.json has all." if len(odd) > LIST_AT_MOST else ""
        out.append(Section(f"{suite}: checks that did not simply pass somewhere", heads,
                           _check_rows(m, odd[:LIST_AT_MOST]), level=3,
                           intro="Skips (target absent) are left out." + more,
                           empty="Every check passed where it ran.", **matrix))
    return out


def _check_rows(m: Matrix, checks: list[str]) -> list[list]:
    return [[check] + [cell_of(m.cells.get((check, c.id)), c.label) for c in m.columns] for check in checks]


def _suite_bars(m: Matrix) -> dict[tuple[str, str], Counter]:
    """(suite, column id) -> counts per legend key, for the bars under a matrix's header."""
    counts: dict[tuple[str, str], Counter] = {(s, c.id): Counter() for s in m.suites for c in m.columns}
    for (_, col_id), rec in m.cells.items():
        counts[(rec["suite"], col_id)][cell_key(rec)] += 1
    return counts


def _count_key(rec: dict) -> str:
    """What a large suite's summary counts a record as: its op category, else its result."""
    if rec["status"] == "skip":
        return "skipped"
    return rec["category"] if rec.get("category") in records.OP_CATEGORIES else cell_key(rec)


def outcome_sections(m: Matrix) -> list[Section]:
    problems, limits, skips, disagreements = [], [], {}, []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            if rec is None:
                continue
            key, reason = cell_key(rec), rec.get("reason", "")
            result = Cell(f"{SYMBOL[key]} {key}", key, record=rec, where=col.label)
            row = [check, col.label, result, reason]
            if (rec.get("metrics") or {}).get("disagreement"):
                disagreements.append([check, col.label, rec["metrics"]["disagreement"],
                                      rec["metrics"].get("pytorch_expects", ""), result])
            if key in PROBLEMS:
                problems.append(row)
            elif key == "xfail":
                limits.append(row)
            elif key == "skip":
                group = skips.setdefault((col.target, reason), [0, set()])
                group[0] += 1
                group[1].add(col.label)
    skipped = [[t, str(n), str(len(cols)), r] for (t, r), (n, cols) in sorted(skips.items())]
    return [
        Section("Failures, errors, crashes", ["check", "column", "result", "reason"], problems[:LIST_AT_MOST],
                empty="No failures.", intro=_more(problems)),
        Section("Disagreements with PyTorch's own MPS expectations", ["check", "column", "disagreement",
                                                                    "PyTorch expects", "result"],
                disagreements[:LIST_AT_MOST], empty="None (or no MPS column).",
                intro="From torch.testing._internal.common_mps of each column's torch: what an upgrade reviewer "
                      "reads first." + _more(disagreements)),
        Section("Known limitations (xfail), with what would lift them", ["check", "column", "result", "reason"],
                limits[:LIST_AT_MOST], empty="None.", intro=_more(limits)),
        Section("Skipped, grouped by reason", ["target", "checks", "columns", "reason"], skipped,
                empty="Nothing skipped."),
    ]


def _more(rows: list, lead: str = "") -> str:
    return f"{lead}The first {LIST_AT_MOST} of {len(rows)} are listed." if len(rows) > LIST_AT_MOST else ""


def model_sections(m: Matrix) -> list[Section]:
    """Does this model run natively: measured fallbacks and, from the kernel table, the
    ops that would lack an MPS kernel."""
    rows = []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            met = (rec or {}).get("metrics") or {}
            if not rec or rec.get("suite") != "ops" or "model" not in met or rec["status"] == "skip":
                continue
            ops = met.get("ops") or {}
            rows.append([met["model"], col.label, cell_of(rec, col.label), " / ".join(str(ops.get(p, "")) for p in
                                                                          ("forward", "backward", "optimizer")),
                         ", ".join(met.get("fallback_ops") or []) or "none",
                         ", ".join(met.get("predicted_without_mps_kernel") or []) or "none"])
    return [Section("Does this model run natively", ["model", "column", "result", "ops fwd / bwd / optim",
                                                     "fell back to the CPU (measured)",
                                                     "no MPS kernel (predicted from the kernel table)"], rows,
                    empty="No model checks ran.",
                    intro="One training step (forward, backward, AdamW) per model. The prediction is static: "
                          "composites and device-generic ops are not counted against a model.")]


DTYPES = ("float32", "float16", "bfloat16", "complex64", "float64", "int64", "int32", "uint8", "bool")
WORST_PER_DTYPE = 10


def _dtype_of(rec: dict) -> str:
    met = rec.get("metrics") or {}
    if met.get("dtype"):
        return str(met["dtype"]).removeprefix("torch.")
    parts = [p for part in (rec.get("variant") or "").split("/") for p in part.split("-")]
    return next((p for p in parts if p in DTYPES), "float32")


def _num(value) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else ""


def parity_sections(m: Matrix) -> list[Section]:
    """Errors and margins of the parity suite: a summary per column and dtype, then the
    checks that came closest to (or went past) their tolerance."""
    measured = {}
    for (check, col_id), rec in m.cells.items():
        if rec.get("suite") == "parity" and isinstance((rec.get("metrics") or {}).get("margin"), (int, float)):
            measured.setdefault((col_id, _dtype_of(rec)), []).append((check, rec))
    labels = {c.id: c.label for c in m.columns}
    order = {c.id: i for i, c in enumerate(m.columns)}
    keys = sorted(measured, key=lambda k: (order.get(k[0], 0), DTYPES.index(k[1]) if k[1] in DTYPES else 99))
    summary, worst, charted = [], [], []
    for key in keys:
        recs = measured[key]
        margins = sorted(r["metrics"]["margin"] for _, r in recs)
        statuses = Counter(cell_key(r) for _, r in recs)
        summary.append([labels.get(key[0], key[0]), key[1], str(len(recs)), str(statuses.get("pass", 0)),
                        str(statuses.get("fail", 0)), str(statuses.get("xfail", 0)),
                        _num(margins[len(margins) // 2]), _num(margins[-1])])
        for check, rec in sorted(recs, key=lambda cr: -cr[1]["metrics"]["margin"])[:WORST_PER_DTYPE]:
            met = rec["metrics"]
            worst.append([check, labels.get(key[0], key[0]), key[1], cell_of(rec, labels.get(key[0], "")),
                          _num(met["margin"]),
                          _num(met.get("max_abs_err")), _num(met.get("max_rel_err")),
                          f"rtol {_num(met.get('rtol'))}, atol {_num(met.get('atol'))}", met.get("reference") or ""])
        charted += [(f"{check} · {labels.get(key[0], key[0])}", r["metrics"]["margin"], cell_key(r))
                    for check, r in recs if r["metrics"]["margin"] > 0]
    charted = sorted(charted, key=lambda p: -p[1])[:WORST_CHARTED]
    return [
        Section("Numerical parity: margins per column and dtype",
                ["column", "dtype", "compared", "pass", "fail", "xfail", "median margin", "worst margin"], summary,
                empty="No parity checks measured anything.",
                intro="margin = largest error / allowed error: <= 1 passes. The reference is float64 on the same "
                      "inputs; on an accelerator the allowed error is also the CPU's own error in the same dtype "
                      "(x 2, + 2 units in the last place), so an accelerator no less accurate than the CPU passes. "
                      "xfail: a float16/bfloat16 precision limit or a known float32 limit (the reason says which)."),
        Section(f"Numerical parity: the {WORST_PER_DTYPE} worst checks per column and dtype",
                ["check", "column", "dtype", "result", "margin", "max abs err", "max rel err", "tolerance",
                 "against"], worst, level=3, empty="No parity checks measured anything.",
                image=_margin_chart(charted) if charted else None, image_name="parity_worst_margins.png"),
    ]


CAUSE_EXAMPLES = 4


def cause_sections(m: Matrix) -> list[Section]:
    """Parity on accelerators: the failures grouped by the cause their reruns found
    (harness.causes), with the switch that changes each; then the checks where the CPU,
    not the target, was the inaccurate side."""
    from harness import causes
    labels = {c.id: c.label for c in m.columns}
    groups: dict[tuple[str, str], list[str]] = {}
    found, cpu_off = {}, []
    for (check, col_id), rec in sorted(m.cells.items()):
        met = rec.get("metrics") or {}
        if rec.get("suite") != "parity":
            continue
        if met.get("cause") and cell_key(rec) in PROBLEMS:
            groups.setdefault((met["cause"], col_id), []).append(check)
            found[(met["cause"], col_id)] = met
        finding = met.get("cpu_finding")
        if isinstance(finding, dict):
            cpu_off.append([check, labels.get(col_id, col_id), _num(finding.get("cpu_err")),
                            _num(finding.get("target_err")), _num(finding.get("cpu_margin"))])
    order = {name: i for i, name in enumerate((*causes.ORDER, "unexplained"))}
    rows = [[Cell(cause, "fail"), labels.get(col_id, col_id), str(len(checks)),
             ", ".join(checks[:CAUSE_EXAMPLES]) + (f" and {len(checks) - CAUSE_EXAMPLES} more"
                                                   if len(checks) > CAUSE_EXAMPLES else ""),
             found[(cause, col_id)].get("cause_what", ""), found[(cause, col_id)].get("switch", "")]
            for (cause, col_id), checks in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1]))]
    return [
        Section("Numerical parity on accelerators: failures by cause",
                ["cause", "column", "checks", "for example", "what happened", "the switch"], rows,
                empty="No parity failure on an accelerator.",
                intro="An accelerator is judged by its accuracy against float64, the CPU's own error as the "
                      "yardstick. A failing sample is run again there with TF32 off, on float32 inputs, and a "
                      "second time; the first rerun that changes the verdict names the cause."),
        Section("Numerical parity: where the CPU is the inaccurate side", ["check", "column", "CPU's error",
                                                                          "target's error", "CPU's margin"],
                cpu_off[:LIST_AT_MOST], level=3, empty="None: wherever the target passed, the CPU met float64 too.",
                intro="The target passed; the CPU in the same dtype misses float64's rules. A finding about the "
                      "CPU, not a failure of the target." + _more(cpu_off)),
    ]


def _has_bug(rec: dict) -> str:
    """Whether the column shows the reported bug, in words."""
    status, category = rec.get("status"), rec.get("category")
    if status == "pass":
        return "no"
    if status == "skip":
        return "not run"
    if status in ("crash", "timeout"):
        return f"{status} (a crash or hang in the op: report it with this shape)"
    if category == "raises":
        return "yes: raises"
    if category == "unrepeatable":
        return "yes: other bits on a rerun"
    met = rec.get("metrics") or {}
    if met.get("cause") not in (None, "unexplained"):
        return f"no, but differs: {met['cause']}"
    return "yes: wrong result" + (" (intermittent)" if met.get("intermittent") else "")


def known_bug_sections(m: Matrix) -> list[Section]:
    """The known-bug cases (harness/known_bug_cases.py): the issue each comes from, and
    per column whether this machine has the bug, with its result on a rerun."""
    labels = {c.id: c.label for c in m.columns}
    cases: dict[str, dict] = {}
    for (check, col_id), rec in sorted(m.cells.items()):
        met = rec.get("metrics") or {}
        kind = records.kind_of(rec)
        if kind not in ("known-bug", "repeatable") or not met.get("known_bug"):
            continue
        case = cases.setdefault(met["known_bug"], {"met": met, "columns": {}})
        if kind == "known-bug":
            case["met"] = met
        case["columns"].setdefault(col_id, {})[kind] = rec
    rows, sources = [], []
    for name, case in cases.items():
        met = case["met"]
        sources.append([name, f"pytorch#{met.get('issue')}", met.get("issue_title") or "", met.get("reported") or "",
                        met.get("affected") or "", met.get("fixed") or "", met.get("issue_url") or ""])
        for col_id, recs in case["columns"].items():
            label = labels.get(col_id, col_id)
            bug, again = recs.get("known-bug"), recs.get("repeatable")
            shape = ((bug or again or {}).get("metrics") or {}).get("shape") or ""
            said = [_has_bug(r) for r in (bug, again) if r]
            found = [w for w in said if w not in ("no", "not run")]
            rows.append([name, f"pytorch#{met.get('issue')}", label, cell_of(bug, label), cell_of(again, label),
                         found[0] if found else "no" if "no" in said else "not run", shape])
    return [
        Section("Known accelerator bugs: does this machine have them",
                ["case", "source", "column", "known-bug check", "repeatable", "has the bug", "shape run"], rows,
                empty="No known-bug case ran (suites/parity/test_known_bugs.py).",
                intro="Wrong results users reported against an accelerator backend, confirmed in PyTorch's issue "
                      "tracker and run here at the reported edge: against float64 with the CPU as the yardstick, "
                      "after a dirty allocator cache and, where the report says so, in rapid succession (the "
                      "known-bug check); and again back to back and after the cache was churned, for the same bits "
                      "(repeatable). On the CPU column a case shows the harness works; the bugs live on "
                      "accelerators."),
        Section("Known accelerator bugs: the sources", ["case", "issue", "title", "reported", "affected", "fixed",
                                                          "link"], sources, level=3,
                empty="No known-bug case ran."),
    ]




def optim_sections(m: Matrix) -> list[Section]:
    """The optimization claims: each measured ratio against the claim's bound, and seed
    003's path with a chart of it (measured against the seed, both as x baseline)."""
    labels = {c.id: c.label for c in m.columns}
    claims_rows, paths, points = [], [], []
    for (check, col_id), rec in sorted(m.cells.items()):
        if rec.get("suite") != "optim" or rec["status"] == "skip":
            continue
        met = rec.get("metrics") or {}
        if records.kind_of(rec) == "seed-003-path" and met.get("rows"):
            paths.append((labels.get(col_id, col_id), rec))
            continue
        ratio = met.get("mem_ratio", met.get("time_ratio"))
        if ratio is None:
            continue
        label = labels.get(col_id, col_id)
        claims_rows.append([rec["subject"], rec["variant"], label, cell_of(rec, label),
                            rec.get("category") or "", _num(ratio),
                            f"[{_num(met.get('ci_low'))}, {_num(met.get('ci_high'))}]",
                            f"{'<' if met.get('kind') == 'lower' else '<='} {_num(met.get('bound'))}",
                            _num(met.get("claimed_ratio")), str(met.get("rounds", "")), met.get("source") or ""])
        points.append((f"{rec['subject']} {rec['variant']} · {label}", _finite(ratio), _finite(met.get("ci_low")),
                       _finite(met.get("ci_high")), _finite(met.get("bound")), cell_key(rec)))
    points = [p for p in points if p[1] is not None and p[1] > 0]
    out = [Section("Optimizations: the documents' claims, measured",
                   ["claim", "quantity", "column", "result", "verdict", "ratio", "95% interval", "holds if",
                    "claimed", "rounds", "source"], claims_rows, empty="No optimization claim was measured.",
                   intro="ratio = variant / baseline (peak memory: tracked storage bytes, exact; time: median of "
                         "interleaved rounds, per sample, with a bootstrap interval). A claim holds when the whole "
                         "interval is within the bound (the claimed ratio with the claim's tolerance)."
                         + (f" The chart shows the first {CHART_ROWS} of {len(points)}." if len(points) > CHART_ROWS
                            else ""),
                   image=_ratio_chart(points[:CHART_ROWS]) if points else None, image_name="optim_ratios.png")]
    for label, rec in paths:
        out.append(_path_section(label, rec))
    return out


def _path_section(label: str, rec: dict) -> Section:
    from harness.claims import SEED_003_PATH
    from harness.techniques import time_cell
    rows = rec["metrics"]["rows"]
    base, seed = rows[0], SEED_003_PATH.steps
    table = [[r["row"], f"{r['peak_bytes'] / 2**20:.1f}", f"{r['peak_bytes'] / base['peak_bytes']:.2f}",
              f"{s.memory_gb / seed[0].memory_gb:.2f}", r.get("peak_phase", ""), f"{r['step_s']:.3f}",
              time_cell(r, base), f"{s.time_s / seed[0].time_s:.2f}"] for r, s in zip(rows, seed)]
    return Section(f"Seed 003's path on {label}", ["row", "peak MiB", "x baseline", "seed: x baseline", "peak phase",
                                                   "step s", "x baseline [95% interval]", "seed: x baseline"], table,
                   level=3, image=_path_chart(label, rows), image_name=f"seed003_{_slug(label)}.png",
                   intro=f"workload {rec['metrics'].get('workload')} "
                         f"({rec['metrics'].get('shape') or 'shape not recorded'}); {cell_of(rec).text}. Each row "
                         "adds one technique to the row before it, as seed 003's macbert-large table does.")


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")[:60]


def _finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    return plt


def _plain(text: str, at_most: int = 80) -> str:
    """A label for matplotlib: no mathtext (a "$" in a check id or host name is just a dollar)."""
    text = text if len(text) <= at_most else text[:at_most - 1] + "…"
    return text.replace("$", r"\$")


def _png(fig) -> bytes:
    import io
    buf = io.BytesIO()
    with warnings.catch_warnings():  # glyphs the font lacks (CJK, emoji in a host name) are drawn as boxes
        warnings.simplefilter("ignore")
        fig.tight_layout()
        fig.savefig(buf, format="png", metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def _path_chart(label: str, rows: list[dict]) -> bytes:
    plt = _pyplot()
    base = rows[0]
    names = [_plain(r["row"]) for r in rows]
    mem = [r["peak_bytes"] / base["peak_bytes"] for r in rows]
    step = [r.get("time_ratio", r["step_s"] / base["step_s"]) for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], mem, width=0.4, label="peak memory")
    ax.bar([x + 0.2 for x in xs], step, width=0.4, label="step time")
    ax.axhline(1.0, color="#888", linewidth=0.8)
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("x baseline")
    ax.set_title(_plain(f"seed 003's path on {label}"), fontsize=10)
    ax.legend(fontsize=8)
    return _png(fig)


def _dot_chart(labels: list[str], height_per_row: float = 0.22):
    """A figure with one row per label, top to bottom, ready for dots on a log x axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 1.3 + height_per_row * len(labels)), dpi=90)
    ys = list(range(len(labels)))[::-1]
    ax.set_yticks(ys, [_plain(t) for t in labels], fontsize=7)
    ax.set_ylim(-0.7, len(labels) - 0.3)
    ax.set_xscale("log")
    ax.grid(axis="x", color="#ddd", linewidth=0.6)
    return fig, ax, ys


def _ratio_chart(points: list[tuple]) -> bytes:
    """Each claim x quantity x column: the measured ratio (dot, coloured by verdict) with
    its interval, and the bound it had to stay under (red tick)."""
    fig, ax, ys = _dot_chart([p[0] for p in points])
    for y, (_, ratio, low, high, bound, key) in zip(ys, points):
        if low and high:
            ax.plot([low, high], [y, y], color="#555", linewidth=1)
        if bound:
            ax.plot([bound], [y], marker="|", color="#c62828", markersize=11, markeredgewidth=2)
        ax.plot([ratio], [y], "o", color=KEY_COLOURS.get(key, "#999"), markeredgecolor="#333", markersize=6)
    ax.axvline(1.0, color="#888", linewidth=0.8)
    ax.set_xlabel("variant / baseline (log); red tick: the bound for the claim to hold")
    ax.set_title("Optimization claims: measured ratio vs the documents' bound", fontsize=10)
    return _png(fig)


def _margin_chart(charted: list[tuple[str, float, str]]) -> bytes:
    """The worst parity margins (largest error / allowed error), log scale; 1 is the tolerance."""
    fig, ax, ys = _dot_chart([c[0] for c in charted])
    for y, (_, margin, key) in zip(ys, charted):
        ax.plot([min(margin, 1.0), margin], [y, y], color="#bbb", linewidth=1)
        ax.plot([margin], [y], "o", color=KEY_COLOURS.get(key, "#999"), markeredgecolor="#333", markersize=6)
    ax.axvline(1.0, color="#c62828", linewidth=1)
    ax.set_xlabel("margin = largest error / allowed error (log); past the red line: outside tolerance")
    ax.set_title(f"Numerical parity: the {len(charted)} worst margins", fontsize=10)
    return _png(fig)


def load_kernel_tables(directory: Path) -> tuple[list[dict], list[str]]:
    """Saved kernel tables (tools.kernels --save), oldest torch first; problems as lines."""
    tables, errors = [], []
    if not directory.is_dir():
        return tables, errors
    for path in sorted(directory.glob("*.json")):
        try:
            doc = journal.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            errors.append(f"{path}: not a readable kernel table ({type(exc).__name__})")
            continue
        if not isinstance(doc, dict) or "mps_ops" not in doc:
            continue  # a saved diff, not a table
        if doc.get("schema") != 1 or not isinstance(doc["mps_ops"], list):
            errors.append(f"{path}: kernel table schema {doc.get('schema')!r}, this reader understands 1")
            continue
        tables.append(doc)

    def order(doc):
        try:
            return (0, Version(str(doc.get("torch_version")).split("+")[0]))
        except InvalidVersion:
            return (1, str(doc.get("torch_version")))
    return sorted(tables, key=order), errors


def predicted_sections(tables: list[dict]) -> list[Section]:
    if not tables:
        return [Section("Predicted for MPS: static kernel tables", [], [], empty=(
            "No kernel tables saved. `python -m tools.kernels --save` (installed torch) or "
            "`python -m tools.kernels --torch-version X --save` (any release, downloaded) adds them."))]
    caveat = tables[-1].get("caveat", "")
    rows = [[str(t.get("torch_version")), str(len(t["mps_ops"])), str((t.get("counts") or {}).get("entries", "")),
             str(t.get("source", ""))] for t in tables]
    out = [Section("Predicted for MPS: static kernel tables", ["torch", "ops with an MPS kernel", "yaml entries",
                                                               "source"], rows,
                   intro="Read from native_functions.yaml, no Mac needed. " + caveat)]
    for old, new in zip(tables, tables[1:]):
        a, b = set(old["mps_ops"]), set(new["mps_ops"])
        gained, lost = sorted(b - a), sorted(a - b)
        out.append(Section(f"torch {old.get('torch_version')} -> {new.get('torch_version')}: "
                           f"{len(gained)} ops gain an MPS kernel, {len(lost)} lose one",
                           ["change", "ops"], [["gained", ", ".join(gained) or "-"], ["lost", ", ".join(lost) or "-"]],
                           level=3))
    return out


def sections(m: Matrix, kernel_tables: list[dict], errors: list[str]) -> list[Section]:
    envs = env_rows(m)
    out = [Section("Environments", list(envs[0]) if envs else [], [list(r.values()) for r in envs])]
    out.append(Section("Summary per column", ["column", "all suites"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER],
                       [[c.label, Bar(m.summary(c))] + [str(m.summary(c).get(k, 0)) for k in KEY_ORDER]
                        for c in m.columns]))
    out.append(history_section(m))
    out += suite_sections(m)
    out += model_sections(m)
    out += parity_sections(m)
    out += cause_sections(m)
    out += known_bug_sections(m)
    out += optim_sections(m)
    out += outcome_sections(m)
    out += predicted_sections(kernel_tables)
    out.append(Section("Legend", ["symbol", "result", "meaning"], [[s, k, t] for k, s, t in LEGEND]))
    if errors:
        out.append(Section("Problems reading the input", ["problem"], [[e] for e in errors]))
    return out


def history_section(m: Matrix) -> Section:
    """Where a result changed across torch versions: what breaks first, then what got fixed."""
    hist = version_history(m)
    row_of = {check: i for i, check in enumerate(m.rows)}
    hist.sort(key=lambda h: (0 if h.last_worked else 1 if h.first_works else 2, row_of[h.check], h.host, h.target))
    works = " ".join(SYMBOL[k] for k in WORKS)
    rows = [[h.check, f"{h.host} {h.target} py{h.python}",
             " → ".join(f"{v} {SYMBOL[k]}" for v, k in h.steps),
             Cell(h.first_works, "pass") if h.first_works else "-",
             Cell(h.last_worked, "fail") if h.last_worked else "-", _history_note(h)] for h in hist]
    return Section("Across torch versions: where a result changed",
                   ["check", "host / target", "versions tried (oldest first)", "first works", "last worked", "note"],
                   rows[:LIST_AT_MOST], empty="No result changed between the torch versions of any host, target and "
                                              "Python (or only one version was run).",
                   intro=f"Per host, target and Python, the torch versions in numeric order; works = {works}. "
                         "first works: the first version of the final unbroken run of working versions. last "
                         "worked: when the newest version does not work, the newest that did. Skips are left out; "
                         "a check whose result is the same everywhere is not listed." + _more(rows, " "))


def _history_note(h: History) -> str:
    if h.last_worked:
        broke = next(b for w, b in h.regressions if w == h.last_worked)
        return f"regression: worked in {h.last_worked}, broke in {broke}"
    if not h.first_works:
        return "never worked here; the way it fails changed"
    earlier = "; ".join(f"worked in {w}, broke in {b}" for w, b in h.regressions)
    if earlier:
        return f"fixed in {h.first_works}; it had regressed before ({earlier})"
    if h.first_works == h.steps[0][0]:
        return "works in every version tried; the result changed"
    return f"fixed in {h.first_works}"


# --------------------------------------------------------------------------- markdown

def _md(value) -> str:
    if isinstance(value, Bar):
        return markdown.escape(format_counts(Counter(value.counts)))
    return markdown.escape(value.text if isinstance(value, Cell) else value)


def _md_hosts(columns: list) -> str:
    """Markdown has one header row, so the host groups are said in a line above the table."""
    return "Columns by host: " + "; ".join(f"**{_md(label)}**: {_md(', '.join(c.sublabel for c in cols))}"
                                           for label, cols in host_groups(columns))


def render_md(secs: list[Section], sources: list[str]) -> str:
    out = ["# mps-compat compatibility matrix", "",
           f"Generated {journal.now_iso()} from {len(sources)} run file(s). "
           "Rows are checks; columns are environment x target.", ""]
    for s in secs:  # every string that can hold data is escaped; s.empty is the report's own Markdown
        out += [f"{'#' * s.level} {_md(s.title)}", ""]
        if s.intro:
            out += [_md(s.intro), ""]
        if s.columns and s.rows:
            out += [_md_hosts(s.columns), ""]
        out.append(tabulate([[_md(v) for v in r] for r in s.rows], headers=[_md(h) for h in s.headers],
                            tablefmt="github") if s.rows else s.empty)
        out.append("")
        if s.image:
            out += [f"![{_md(s.title)}]({s.image_name})", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- html

CSS = """
body{font:14px/1.4 -apple-system,system-ui,sans-serif;margin:0 1.5em 1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.c{text-align:center;white-space:nowrap;max-width:18em;overflow:hidden;
text-overflow:ellipsis}td[data-i]{cursor:pointer}
td[data-i]:hover{outline:2px solid #555}.scroll{overflow-x:auto}.small{color:#666;font-size:12px}
th.host{text-align:center;background:#e4e6f0}tr.cols th{text-align:center;font-weight:600;white-space:nowrap}
.bar{display:flex;min-width:6em;height:.9em;border:1px solid #aaa;background:#fff}.bar span{display:block}
#filters{position:sticky;top:0;z-index:2;background:#fafafa;border-bottom:1px solid #ccc;padding:.4em 0;
display:flex;flex-wrap:wrap;gap:.3em 1.2em;align-items:center}#filters fieldset{border:0;margin:0;padding:0}
#filters legend{float:left;font-weight:600;margin-right:.4em}#filters label{padding:0 .3em;margin-right:.2em;
border-radius:3px;white-space:nowrap}#details{position:fixed;right:1em;top:4em;bottom:1em;width:min(38em,46vw);
overflow:auto;z-index:3;background:#fff;border:1px solid #999;box-shadow:0 2px 14px #0005;padding:.3em 1em}
#details td{white-space:pre-wrap;word-break:break-word}#details-close{float:right}[hidden]{display:none!important}
"""

# Installed before anything else, so an error in any later script (a syntax error
# included) is recorded on the page, where tools.render_check reads it.
ERROR_TRAP = ("(function(){function note(m){var r=document.documentElement;"
              "r.setAttribute('data-js-errors',(r.getAttribute('data-js-errors')||'')+m+'\\n');}"
              "window.addEventListener('error',function(e){note(e.message||'error');});"
              "window.addEventListener('unhandledrejection',function(e){"
              "note('unhandled rejection: '+((e.reason&&e.reason.message)||e.reason));});})();")

# The page's behaviour. It builds nothing from strings: text goes in by textContent.
SCRIPT = """
(function () {
  "use strict";
  var root = document.documentElement;
  var records = JSON.parse(document.getElementById("records").textContent);
  var form = document.getElementById("filters");
  var panel = document.getElementById("details");
  function each(list, fn) { Array.prototype.forEach.call(list, fn); }

  function selected(name) {
    var on = {};
    each(form.querySelectorAll("input[name=" + name + "]"), function (box) { on[box.value] = box.checked; });
    return on;
  }

  function showColumns(table, targets) {
    var shown = [];
    each(table.querySelectorAll("[data-target]"), function (cell) {
      cell.hidden = targets[cell.getAttribute("data-target")] === false;
    });
    each(table.querySelectorAll("tr.cols th"), function (th) { shown[th.cellIndex] = !th.hidden; });
    each(table.querySelectorAll("tr.hosts th[data-group]"), function (th) {
      var group = "tr.cols th[data-group='" + th.getAttribute("data-group") + "']:not([hidden])";
      var n = table.querySelectorAll(group).length;
      th.hidden = n === 0;
      if (n) { th.colSpan = n; }
    });
    return shown;
  }

  function filterTable(table, suites, targets, keys) {
    var shown = showColumns(table, targets);
    var suiteOn = suites[table.getAttribute("data-suite")] !== false;
    var count = 0;
    each(table.tBodies[0].rows, function (tr) {
      var keyed = false, match = false;
      each(tr.cells, function (td) {
        var key = td.getAttribute("data-k");
        td.hidden = shown[td.cellIndex] === false;
        keyed = keyed || !!key;
        match = match || (!!key && !td.hidden && keys[key] !== false);
      });
      tr.hidden = !suiteOn || (keyed && !match);
      count += tr.hidden ? 0 : 1;
    });
    return [count, table.tBodies[0].rows.length];
  }

  function apply() {
    var suites = selected("suite"), targets = selected("target"), keys = selected("key");
    var shown = 0, total = 0;
    each(document.querySelectorAll("table.matrix"), function (table) {
      var n = filterTable(table, suites, targets, keys);
      shown += n[0];
      total += n[1];
    });
    document.getElementById("shown").textContent = shown + " of " + total + " matrix rows shown";
    return total;
  }

  function addRow(table, name, value) {
    var tr = table.insertRow();
    var th = document.createElement("th");
    th.textContent = name;
    tr.appendChild(th);
    tr.insertCell().textContent = value === null || value === undefined ? "" : String(value);
  }

  function showRecord(rec) {
    var table = document.createElement("table");
    [["check", rec.check], ["column", rec.column], ["result", rec.result], ["category", rec.category],
     ["reason", rec.reason], ["duration s", rec.duration_s]].forEach(function (p) { addRow(table, p[0], p[1]); });
    addRow(table, "metrics", rec.metrics.length ? rec.metrics.length + " below" : "none");
    rec.metrics.forEach(function (p) { addRow(table, p[0], p[1]); });
    var body = panel.querySelector(".body");
    while (body.firstChild) { body.removeChild(body.firstChild); }
    body.appendChild(table);
    panel.hidden = false;
  }

  form.addEventListener("change", apply);
  document.getElementById("filters-reset").addEventListener("click", function () {
    each(form.querySelectorAll("input"), function (box) { box.checked = true; });
    apply();
  });
  document.addEventListener("click", function (ev) {
    var td = ev.target.closest && ev.target.closest("td[data-i]");
    if (td) { showRecord(records[Number(td.getAttribute("data-i"))]); }
  });
  document.getElementById("details-close").addEventListener("click", function () { panel.hidden = true; });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") { panel.hidden = true; } });
  root.setAttribute("data-matrix-rows", String(apply()));
  root.setAttribute("data-rendered", "yes");
}());
"""

# What must not appear raw inside a <script> element's JSON: "</script>" or "<!--" could
# end or confuse the element; U+2028/2029 are line breaks to older JavaScript parsers.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def script_json(data) -> str:
    """JSON for a ``<script type="application/json">`` element, read back with JSON.parse."""
    return json.dumps(journal.json_safe(data), ensure_ascii=False, allow_nan=False).translate(_SCRIPT_SAFE)


# U+2028/2029 are harmless in HTML text, but a page with none raw is simpler to vouch for.
_SEPARATORS = {0x2028: "&#x2028;", 0x2029: "&#x2029;"}


def _h(text) -> str:
    return html.escape(str(text if text is not None else ""), quote=True).translate(_SEPARATORS)


class _Records:
    """The records behind clickable cells, each once, in the order the page numbers them."""

    def __init__(self):
        self.items: list[dict] = []
        self._index: dict[tuple[int, str], int] = {}

    def index(self, cell: Cell) -> int:
        key = (id(cell.record), cell.where)
        if key not in self._index:
            self._index[key] = len(self.items)
            self.items.append(_details(cell))
        return self._index[key]


def _details(cell: Cell) -> dict:
    rec = cell.record
    key = cell_key(rec)
    return {"check": rec.get("check", ""), "column": cell.where, "result": f"{SYMBOL[key]} {key}",
            "category": rec.get("category") or "", "reason": rec.get("reason") or "",
            "duration_s": rec.get("duration_s"),
            "metrics": [[str(k), _metric_text(v)] for k, v in (rec.get("metrics") or {}).items()]}


def _metric_text(value) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = value if isinstance(value, str) else json.dumps(journal.json_safe(value), ensure_ascii=False)
    return text if len(text) <= METRIC_CHARS else text[:METRIC_CHARS] + "… (cut; matrix.json has it whole)"


def _bar_html(counts: dict) -> str:
    parts = [(k, counts[k]) for k in KEY_ORDER if counts.get(k)]
    if not parts:
        return ""
    title = ", ".join(f"{SYMBOL[k]} {k}: {n}" for k, n in parts)
    spans = "".join(f"<span class='{_h(k)}' style='flex-grow:{int(n)}'></span>" for k, n in parts)
    return f"<div class='bar' title='{_h(title)}'>{spans}</div>"


def _td(value, recs: _Records) -> str:
    if isinstance(value, Bar):
        return f"<td>{_bar_html(value.counts)}</td>"
    if not isinstance(value, Cell):
        return f"<td>{_h(value)}</td>"
    attrs = f" class='c {_h(value.key)}'"
    if value.key:
        attrs += f" data-k='{_h(value.key)}'"
    if value.title:
        attrs += f" title='{_h(value.title)}'"
    if value.record is not None:
        attrs += f" data-i='{recs.index(value)}'"
    return f"<td{attrs}>{_h(value.text)}</td>"


def _matrix_head(s: Section) -> str:
    """Three header rows: one cell per host spanning its columns; torch version and target
    per column; the suite's results per column as a stacked bar."""
    lead = len(s.headers) - len(s.columns)
    groups = host_groups(s.columns)
    hosts = "".join(f"<th class='host' colspan='{len(cols)}' data-group='{g}'>{_h(label)}</th>"
                    for g, (label, cols) in enumerate(groups))
    cols = "".join(f"<th>{_h(x)}</th>" for x in s.headers[:lead])
    bars = ""
    for g, (_, members) in enumerate(groups):
        for c in members:
            target = _h(c.target)
            cols += (f"<th data-col='{_h(c.id)}' data-target='{target}' data-group='{g}' title='{_h(c.label)} "
                     f"({_h(c.env_id)})'>torch {_h(c.torch_release)}<br>{_h(c.target_label + c.label_suffix)}</th>")
    for c, bar in zip(s.columns, s.bars):
        bars += f"<th data-target='{_h(c.target)}'>{_bar_html(bar.counts)}</th>"
    return (f"<tr class='hosts'><th colspan='{lead}'></th>{hosts}</tr><tr class='cols'>{cols}</tr>"
            + (f"<tr class='bars'><th colspan='{lead}' class='small'>results</th>{bars}</tr>" if bars else ""))


def _table_html(s: Section, recs: _Records) -> str:
    body = "".join("<tr>" + "".join(_td(v, recs) for v in r) + "</tr>" for r in s.rows)
    if not s.columns:
        head = "<tr>" + "".join(f"<th>{_h(x)}</th>" for x in s.headers) + "</tr>"
        return f"<div class='scroll'><table><thead>{head}</thead><tbody>{body}</tbody></table></div>"
    return (f"<div class='scroll'><table class='matrix' data-suite='{_h(s.suite)}'><thead>{_matrix_head(s)}</thead>"
            f"<tbody>{body}</tbody></table></div>")


def _section_html(s: Section, recs: _Records) -> str:
    parts = [f"<h{s.level}>{_h(s.title)}</h{s.level}>"]
    if s.intro:
        parts.append(f"<p class='small'>{_h(s.intro)}</p>")
    if not s.rows:
        parts.append(f"<p>{_h(s.empty)}</p>")
        return "\n".join(parts)
    parts.append(_table_html(s, recs))
    if s.image:
        data = base64.b64encode(s.image).decode("ascii")
        parts.append(f"<img alt='{_h(s.title)}' src='data:image/png;base64,{data}'>")
    return "\n".join(parts)


def _filters_html(secs: list[Section]) -> str:
    """Checkboxes for what the matrix tables offer: suites, targets, and results that occur."""
    matrix = [s for s in secs if s.columns]
    suites = list(dict.fromkeys(s.suite for s in matrix))
    targets = sorted({c.target for s in matrix for c in s.columns}, key=lambda t: (TARGET_ORDER.get(t, 9), t))
    keys = {v.key for s in matrix for r in s.rows for v in r if isinstance(v, Cell) and v.key}
    groups = (("suite", "suite", [(x, x, "") for x in suites]), ("target", "target", [(t, t, "") for t in targets]),
              ("result", "key", [(k, f"{SYMBOL[k]} {k}", k) for k in KEY_ORDER if k in keys]))
    sets = "".join(f"<fieldset><legend>{title}</legend>" + "".join(
        f"<label class='{_h(cls)}'><input type='checkbox' name='{name}' value='{_h(value)}' checked> {_h(text)}</label>"
        for value, text, cls in options) + "</fieldset>" for title, name, options in groups)
    return (f"<form id='filters'>{sets}<button type='button' id='filters-reset'>show all</button>"
            "<span id='shown' class='small'></span></form>")


def render_html(secs: list[Section], sources: list[str]) -> str:
    recs = _Records()
    body = [_section_html(s, recs) for s in secs]  # first: numbers the records the JSON below holds
    colours = "".join(f".{k}{{background:{c}}}" for k, c in KEY_COLOURS.items()) + ".skip{color:#777}"
    return "\n".join([
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>mps-compat compatibility matrix</title><script>{ERROR_TRAP}</script>",
        f"<style>{CSS}{colours}</style></head><body>",
        _filters_html(secs),
        "<h1>mps-compat compatibility matrix</h1>",
        f"<p class='small'>Generated {_h(journal.now_iso())} from {len(sources)} run file(s). Rows are checks; "
        "columns are environment x target, grouped by host and ordered by torch version. The filters above hide "
        "matrix rows and columns; hover a cell for its reason and key metrics, click it for every metric.</p>",
        *body,
        "<aside id='details' hidden><button type='button' id='details-close'>close</button><h3>Record</h3>"
        "<div class='body'></div></aside>",
        f"<script type='application/json' id='records'>{script_json(recs.items)}</script>",
        f"<script>{SCRIPT}</script></body></html>"])


# --------------------------------------------------------------------------- json

def render_json(m: Matrix, sources: list[str], errors: list[str], kernel_tables: list[dict]) -> str:
    doc = {
        "report_schema": REPORT_SCHEMA, "record_schema": journal.SCHEMA, "generated": journal.now_iso(),
        "sources": sources, "errors": errors,
        "legend": [{"key": k, "symbol": s, "meaning": t} for k, s, t in LEGEND],
        "columns": [{"id": c.id, "label": c.label, "host": c.host_label, "env_id": c.env_id, "target": c.target,
                     "workload": c.workload,
                     "runs": c.runs, "complete": c.complete, "summary": dict(m.summary(c)), "facts": c.facts,
                     "targets": c.header.get("targets"), "mps_fallback": c.header.get("mps_fallback")}
                    for c in m.columns],
        "suites": m.suites,
        "cells": {check: {col.id: {**{k: rec[k] for k in ("status", "category", "metrics", "reason", "duration_s")},
                                   "key": cell_key(rec), "symbol": SYMBOL[cell_key(rec)]}
                          for col in m.columns if (rec := m.cells.get((check, col.id)))}
                  for check in m.rows},
        "history": [dataclasses.asdict(h) for h in version_history(m)],
        "predicted": [{k: t.get(k) for k in ("torch_version", "source", "counts", "caveat")} | {
            "mps_op_count": len(t["mps_ops"])} for t in kernel_tables],
    }
    return json.dumps(doc, indent=1, ensure_ascii=False)


# --------------------------------------------------------------------------- entry point

def load(paths: list[str]) -> tuple[list[journal.Run], list[str], list[str]]:
    files, errors = journal.find_run_files(paths)
    runs = []
    for f in files:
        rf = journal.read_file(f)
        runs.extend(rf.runs)
        if rf.errors:
            more = f" (and {len(rf.errors) - 1} more problem line(s))" if len(rf.errors) > 1 else ""
            errors.append(rf.errors[0] + more)
    return runs, files, errors


def _cause(exc: OSError, out: Path) -> str:
    where = f"{exc.filename}: " if exc.filename and str(exc.filename) != str(out) else ""
    return where + (exc.strerror or str(exc)).lower()


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.report", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="*", help="run files or directories (default: reports/runs)")
    parser.add_argument("--out", default=str(ROOT / "reports"), help="output directory (default: reports/)")
    parser.add_argument("--kernels", default=str(ROOT / "reports" / "kernels"),
                        help="saved kernel tables for the predicted section (default: reports/kernels)")
    args = parser.parse_args(argv)
    inputs = args.inputs or [str(ROOT / "reports" / "runs")]
    runs, files, errors = load(inputs)
    tables, kernel_errors = load_kernel_tables(Path(args.kernels))
    errors += kernel_errors
    for e in errors:
        cli.error(e)
    if not any(r.records for r in runs):
        if not errors:  # otherwise the problem is already said, in one line per input
            cli.error("no check records in " + ", ".join(inputs) + "; no matrix written")
        return 2
    m = build(runs)
    secs = sections(m, tables, errors)
    rendered = {s.image_name: s.image for s in secs if s.image} | {
        "matrix.md": render_md(secs, files).encode("utf-8"),
        "matrix.html": render_html(secs, files).encode("utf-8"),
        "matrix.json": render_json(m, files, errors, tables).encode("utf-8")}
    out = Path(args.out)
    try:
        journal.write_files(out, rendered)
    except OSError as exc:
        return cli.error(f"cannot write the matrix to {out}: {_cause(exc, out)}; no file there was changed")
    cli.say(f"wrote {out / 'matrix.md'}, matrix.html, matrix.json: {len(m.rows)} checks x {len(m.columns)} "
            f"columns from {len(runs)} run(s) in {len(files)} file(s)\n")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
