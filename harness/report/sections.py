"""The report's sections, from a Matrix: what the page is made of (``Section`` of rows, each
``Cell`` with the record behind it, ``Bar`` of counts) and every section of it: what to act
on first, the environments, each suite's matrix, the models, what changed across torch
versions, the parity margins and failures by cause, the known bugs, the optimization claims
and seed 003's path, the kernel tables (the perf suite's are harness/report/speed.py's). The writers (harness.report.render) turn the
sections into Markdown and HTML.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.core import records, runfiles
from harness.core.records import Category, RecordKind, Status
from harness.report.charts import CHART_ROWS, WORST_CHARTED, margin_chart, path_chart, ratio_chart
from harness.report.matrix import (KEY_ORDER, LEGEND, NOT_SHOWN, PREFERRED_METRICS, SYMBOL, WORKS, History, Matrix,
                                   cell_key, key_metric, version_history)

SUMMARIZE_OVER = 150      # a suite with more checks is shown as counts plus its non-passing rows


LIST_AT_MOST = 300        # rows of one listing in md/html; matrix.json has everything


PROBLEMS = (*Status.BAD, Status.XPASS, Category.UNSUPPORTED)   # cell keys to act on


TITLE_METRICS = 5         # scalar metrics in a cell's hover text; the click panel shows all


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
    shown = [f"{n}={scalar(metrics[n])}" for n in names
             if n not in NOT_SHOWN and isinstance(metrics[n], (int, float, str, bool))][:TITLE_METRICS]
    return "\n".join([f"{key}: {rec.get('reason') or ''}".strip(), *shown])


def scalar(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def more(rows: list, lead: str = "") -> str:
    return f"{lead}The first {LIST_AT_MOST} of {len(rows)} are listed." if len(rows) > LIST_AT_MOST else ""


DTYPES = ("float32", "float16", "bfloat16", "complex64", "float64", "int64", "int32", "uint8", "bool")


def dtype_of(rec: dict) -> str:
    met = rec.get("metrics") or {}
    if met.get("dtype"):
        return str(met["dtype"]).removeprefix("torch.")
    parts = [p for part in (rec.get("variant") or "").split("/") for p in part.split("-")]
    return next((p for p in parts if p in DTYPES), "float32")


def num(value) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else ""


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")[:60]


def finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


# --------------------------------------------------------------------------- the page


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
                            (*Category.OPS, *KEY_ORDER, "skipped") if any(counts[c.id].get(cat) for c in m.columns)],
                           intro="native: ran, no fallback; cpu-fallback: ran with ops on the CPU; unsupported: "
                                 "NotImplementedError; n/a: errors, crashes and timeouts (see below); other "
                                 "suites are counted by result (pass, fail, xfail ...); skipped: target absent "
                                 "or nothing to compare (see the skip reasons below).", **matrix))
        odd = [check for check in checks
               if any((r := m.cells.get((check, c.id))) and cell_key(r) != Status.PASS and r["status"] != Status.SKIP
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
    if rec["status"] == Status.SKIP:
        return "skipped"
    return rec["category"] if rec.get("category") in Category.OPS else cell_key(rec)


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
            elif key == Status.XFAIL:
                limits.append(row)
            elif key == Status.SKIP:
                group = skips.setdefault((col.target, reason), [0, set()])
                group[0] += 1
                group[1].add(col.label)
    skipped = [[t, str(n), str(len(cols)), r] for (t, r), (n, cols) in sorted(skips.items())]
    return [
        Section("Failures, errors, crashes", ["check", "column", "result", "reason"], problems[:LIST_AT_MOST],
                empty="No failures.", intro=more(problems)),
        Section("Disagreements with PyTorch's own MPS expectations", ["check", "column", "disagreement",
                                                                    "PyTorch expects", "result"],
                disagreements[:LIST_AT_MOST], empty="None (or no MPS column).",
                intro="From torch.testing._internal.common_mps of each column's torch: what an upgrade reviewer "
                      "reads first." + more(disagreements)),
        Section("Known limitations (xfail), with what would lift them", ["check", "column", "result", "reason"],
                limits[:LIST_AT_MOST], empty="None.", intro=more(limits)),
        Section("Skipped, grouped by reason", ["target", "checks", "columns", "reason"], skipped,
                empty="Nothing skipped."),
    ]


def model_sections(m: Matrix) -> list[Section]:
    """Does this model run natively: measured fallbacks and, from the kernel table, the
    ops that would lack an MPS kernel."""
    rows = []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            met = (rec or {}).get("metrics") or {}
            if not rec or rec.get("suite") != "ops" or "model" not in met or rec["status"] == Status.SKIP:
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


def load_kernel_tables(directory: Path) -> tuple[list[dict], list[str]]:
    """Saved kernel tables (tools.kernels --save), oldest torch first; problems as lines."""
    tables, errors = [], []
    if not directory.is_dir():
        return tables, errors
    for path in sorted(directory.glob("*.json")):
        try:
            doc = runfiles.loads(path.read_text(encoding="utf-8"))
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


# What a user must act on, by kind, in the order the findings section lists them.
ACT_ON = (
    ("fails", "checks that fail: the machine or the setup is wrong; each reason names the cause and the switch"),
    ("crash / timeout", "checks that crashed or hung: a kernel bug to report with the record"),
    ("known bugs present", "reported accelerator bugs this machine has (the known-bugs section)"),
    ("unsupported ops", "ops with no kernel and no fallback on this target"),
    ("unexpected passes", "checks that pass against an expectation of failure: an expectation to update"),
    ("claims that do not hold", "documented optimizations that did not do what the document says here"),
)


def _act_on(rec: dict) -> str | None:
    key = cell_key(rec)
    if records.kind_of(rec) in RecordKind.KNOWN_BUGS and key in PROBLEMS:
        return "known bugs present"
    if key in (Status.CRASH, Status.TIMEOUT):
        return "crash / timeout"
    if key in (Status.FAIL, Status.ERROR):
        return "fails"
    return {Category.UNSUPPORTED: "unsupported ops", Status.XPASS: "unexpected passes",
            Category.DOES_NOT_HOLD: "claims that do not hold"}.get(key)


def findings_section(m: Matrix) -> Section:
    """The page's first section: per column, what needs acting on, counted by kind, with
    the first few checks of each (their reasons are in the sections below)."""
    rows = []
    for col in m.columns:
        found: dict[str, list[str]] = {}
        for check in m.rows:
            rec = m.cells.get((check, col.id))
            kind = _act_on(rec) if rec else None
            if kind:
                found.setdefault(kind, []).append(check)
        for kind, what in ACT_ON:
            checks = found.get(kind)
            if checks:
                rows.append([col.label, Cell(kind, "fail" if kind != "unexpected passes" else "xpass"),
                             str(len(checks)), ", ".join(checks[:3]) + (f" and {len(checks) - 3} more"
                                                                      if len(checks) > 3 else ""), what])
    return Section("What to act on", ["column", "finding", "checks", "for example", "what it means"], rows,
                   empty="Nothing: every check passed, or was skipped or a known limitation, with its reason below.",
                   intro="First what needs a decision, per column; then the matrix. Failures are grouped by cause "
                         "below, and every reason names the switch that changes it.")


def sections(m: Matrix, kernel_tables: list[dict], errors: list[str], speed: list[Section] = ()) -> list[Section]:
    """The page: what to act on first (findings, failures by cause, the failures), then the
    environments and the matrix, suite by suite, then the rest of the outcomes. ``speed``: the
    perf suite's sections (harness.report.speed), placed after the optimizations'."""
    envs = env_rows(m)
    failures, *rest_of_outcomes = outcome_sections(m)
    by_cause, *cpu_side = cause_sections(m)
    out = [findings_section(m), by_cause, failures]
    out.append(Section("Environments", list(envs[0]) if envs else [], [list(r.values()) for r in envs]))
    out.append(Section("Summary per column", ["column", "all suites"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER],
                       [[c.label, Bar(m.summary(c))] + [str(m.summary(c).get(k, 0)) for k in KEY_ORDER]
                        for c in m.columns]))
    out.append(history_section(m))
    out += suite_sections(m)
    out += model_sections(m)
    out += parity_sections(m)
    out += cpu_side
    out += known_bug_sections(m)
    out += optim_sections(m)
    out += list(speed)
    out += rest_of_outcomes
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
             Cell(h.last_worked, "fail") if h.last_worked else "-", history_note(h)] for h in hist]
    return Section("Across torch versions: where a result changed",
                   ["check", "host / target", "versions tried (oldest first)", "first works", "last worked", "note"],
                   rows[:LIST_AT_MOST], empty="No result changed between the torch versions of any host, target and "
                                              "Python (or only one version was run).",
                   intro=f"Per host, target and Python, the torch versions in numeric order; works = {works}. "
                         "first works: the first version of the final unbroken run of working versions. last "
                         "worked: when the newest version does not work, the newest that did. Skips are left out; "
                         "a check whose result is the same everywhere is not listed." + more(rows, " "))


def history_note(h: History) -> str:
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


# --------------------------------------------------------------------------- parity


WORST_PER_DTYPE = 10


def margin_of(rec: dict) -> float | None:
    """A parity record's margin as a number: inf where the result had NaN or inf where float64
    has a number (no allowed error covers it; the run file spells it "inf"), None if none."""
    value = (rec.get("metrics") or {}).get("margin")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.inf if value == "inf" else None


def parity_sections(m: Matrix) -> list[Section]:
    """Errors and margins of the parity suite: a summary per column and dtype, then the
    checks that came closest to (or went past) their tolerance."""
    measured = {}
    for (check, col_id), rec in m.cells.items():
        if rec.get("suite") == "parity" and margin_of(rec) is not None:
            measured.setdefault((col_id, dtype_of(rec)), []).append((check, rec))
    labels = {c.id: c.label for c in m.columns}
    order = {c.id: i for i, c in enumerate(m.columns)}
    keys = sorted(measured, key=lambda k: (order.get(k[0], 0), DTYPES.index(k[1]) if k[1] in DTYPES else 99))
    summary, worst, charted = [], [], []
    for key in keys:
        recs = measured[key]
        margins = sorted(margin_of(r) for _, r in recs)
        statuses = Counter(cell_key(r) for _, r in recs)
        summary.append([labels.get(key[0], key[0]), key[1], str(len(recs)), str(statuses.get("pass", 0)),
                        str(statuses.get("fail", 0)), str(statuses.get("xfail", 0)),
                        num(margins[len(margins) // 2]),
                        "NaN/inf" if margins[-1] == math.inf else num(margins[-1])])
        for check, rec in sorted(recs, key=lambda cr: -margin_of(cr[1]))[:WORST_PER_DTYPE]:
            met = rec["metrics"]
            worst.append([check, labels.get(key[0], key[0]), key[1], cell_of(rec, labels.get(key[0], "")),
                          "NaN/inf" if margin_of(rec) == math.inf else num(met["margin"]),
                          num(met.get("max_abs_err")), num(met.get("max_rel_err")),
                          f"rtol {num(met.get('rtol'))}, atol {num(met.get('atol'))}", met.get("reference") or ""])
        charted += [(f"{check} · {labels.get(key[0], key[0])}", margin_of(r), cell_key(r))
                    for check, r in recs if 0 < margin_of(r) < math.inf]
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
                image=margin_chart(charted) if charted else None, image_name="parity_worst_margins.png"),
    ]


CAUSE_EXAMPLES = 4


def cause_sections(m: Matrix) -> list[Section]:
    """Parity on accelerators: the failures grouped by the cause their reruns found
    (harness.parity.numerics.causes), with the switch that changes each; then the checks where the CPU,
    not the target, was the inaccurate side."""
    from harness.parity.numerics import causes
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
            cpu_off.append([check, labels.get(col_id, col_id), num(finding.get("cpu_err")),
                            num(finding.get("target_err")), num(finding.get("cpu_margin"))])
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
                      "CPU, not a failure of the target." + more(cpu_off)),
    ]


def _has_bug(rec: dict) -> str:
    """Whether the column shows the reported bug, in words."""
    status, category = rec.get("status"), rec.get("category")
    if status == Status.PASS:
        return "no"
    if status == Status.SKIP:
        return "not run"
    if status in (Status.CRASH, Status.TIMEOUT):
        return f"{status} (a crash or hang in the op: report it with this shape)"
    if category == Category.RAISES:
        return "yes: raises"
    if category == Category.UNREPEATABLE:
        return "yes: other bits on a rerun"
    met = rec.get("metrics") or {}
    if met.get("cause") not in (None, "unexplained"):
        return f"no, but differs: {met['cause']}"
    return "yes: wrong result" + (" (intermittent)" if met.get("intermittent") else "")


def known_bug_sections(m: Matrix) -> list[Section]:
    """The known-bug cases (harness/parity/known_bugs/cases.py): the issue each comes from, and
    per column whether this machine has the bug, with its result on a rerun."""
    labels = {c.id: c.label for c in m.columns}
    cases: dict[str, dict] = {}
    for (check, col_id), rec in sorted(m.cells.items()):
        met = rec.get("metrics") or {}
        kind = records.kind_of(rec)
        if kind not in RecordKind.KNOWN_BUGS or not met.get("known_bug"):
            continue
        case = cases.setdefault(met["known_bug"], {"met": met, "columns": {}})
        if kind == RecordKind.KNOWN_BUG:
            case["met"] = met
        case["columns"].setdefault(col_id, {})[kind] = rec
    rows, sources = [], []
    for name, case in cases.items():
        met = case["met"]
        sources.append([name, f"pytorch#{met.get('issue')}", met.get("issue_title") or "", met.get("reported") or "",
                        met.get("affected") or "", met.get("fixed") or "", met.get("issue_url") or ""])
        for col_id, recs in case["columns"].items():
            label = labels.get(col_id, col_id)
            bug, again = recs.get(RecordKind.KNOWN_BUG), recs.get(RecordKind.REPEATABLE)
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


# --------------------------------------------------------------------------- optimizations


def optim_sections(m: Matrix) -> list[Section]:
    """The optimization claims: each measured ratio against the claim's bound, and seed
    003's path with a chart of it (measured against the seed, both as x baseline)."""
    labels = {c.id: c.label for c in m.columns}
    claims_rows, paths, points = [], [], []
    for (check, col_id), rec in sorted(m.cells.items()):
        if rec.get("suite") != "optim" or rec["status"] == Status.SKIP:
            continue
        met = rec.get("metrics") or {}
        if records.kind_of(rec) == RecordKind.SEED_003_PATH and met.get("rows"):
            paths.append((labels.get(col_id, col_id), rec))
            continue
        ratio = met.get("mem_ratio", met.get("time_ratio"))
        if ratio is None:
            continue
        label = labels.get(col_id, col_id)
        claims_rows.append([rec["subject"], rec["variant"], label, cell_of(rec, label),
                            rec.get("category") or "", num(ratio),
                            f"[{num(met.get('ci_low'))}, {num(met.get('ci_high'))}]",
                            f"{'<' if met.get('kind') == 'lower' else '<='} {num(met.get('bound'))}",
                            num(met.get("claimed_ratio")), str(met.get("rounds", "")), met.get("source") or ""])
        points.append((f"{rec['subject']} {rec['variant']} · {label}", finite(ratio), finite(met.get("ci_low")),
                       finite(met.get("ci_high")), finite(met.get("bound")), cell_key(rec)))
    points = [p for p in points if p[1] is not None and p[1] > 0]
    out = [Section("Optimizations: the documents' claims, measured",
                   ["claim", "quantity", "column", "result", "verdict", "ratio", "95% interval", "holds if",
                    "claimed", "rounds", "source"], claims_rows, empty="No optimization claim was measured.",
                   intro="ratio = variant / baseline (peak memory: tracked storage bytes, exact; time: median of "
                         "interleaved rounds, per sample, with a bootstrap interval). A claim holds when the whole "
                         "interval is within the bound (the claimed ratio with the claim's tolerance)."
                         + (f" The chart shows the first {CHART_ROWS} of {len(points)}." if len(points) > CHART_ROWS
                            else ""),
                   image=ratio_chart(points[:CHART_ROWS]) if points else None, image_name="optim_ratios.png")]
    for label, rec in paths:
        out.append(_path_section(label, rec))
    return out


def _path_section(label: str, rec: dict) -> Section:
    from harness.optim.claims import SEED_003_PATH
    from harness.optim.seedpath import time_cell
    rows = rec["metrics"]["rows"]
    base, seed = rows[0], SEED_003_PATH.steps
    table = [[r["row"], f"{r['peak_bytes'] / 2**20:.1f}", f"{r['peak_bytes'] / base['peak_bytes']:.2f}",
              f"{s.memory_gb / seed[0].memory_gb:.2f}", r.get("peak_phase", ""), f"{r['step_s']:.3f}",
              time_cell(r, base), f"{s.time_s / seed[0].time_s:.2f}"] for r, s in zip(rows, seed)]
    return Section(f"Seed 003's path on {label}", ["row", "peak MiB", "x baseline", "seed: x baseline", "peak phase",
                                                   "step s", "x baseline [95% interval]", "seed: x baseline"], table,
                   level=3, image=path_chart(label, rows), image_name=f"seed003_{slug(label)}.png",
                   intro=f"workload {rec['metrics'].get('workload')} "
                         f"({rec['metrics'].get('shape') or 'shape not recorded'}); {cell_of(rec).text}. Each row "
                         "adds one technique to the row before it, as seed 003's macbert-large table does.")
