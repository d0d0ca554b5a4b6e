"""Build the compatibility matrix from run files.

    python -m tools.report [RUN_FILE_OR_DIR ...] [--out DIR] [--kernels DIR]

Default input: every ``reports/runs/*.jsonl``. Writes ``matrix.md``, ``matrix.html``
(one self-contained page, every string escaped) and ``matrix.json`` into ``--out``
(default ``reports/``). A malformed or truncated run file gives one line on stderr naming
the file and line, and exit status 2; the readable records, of that file and the others,
are still reported. With nothing readable at all, no matrix is overwritten.

Kernel tables saved by ``python -m tools.kernels --save`` (``reports/kernels/*.json``)
add a *predicted* section: the static MPS kernel list of each torch version and what
changes between versions.
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import html
import json
import os
import sys
from collections import Counter
from pathlib import Path

from packaging.version import InvalidVersion, Version
from tabulate import tabulate

from harness import journal
from harness.matrix import KEY_ORDER, LEGEND, SYMBOL, Matrix, build, cell_key, key_metric

ROOT = Path(__file__).resolve().parent.parent
REPORT_SCHEMA = 1
SUMMARIZE_OVER = 150      # a suite with more checks is shown as counts plus its non-passing rows
LIST_AT_MOST = 300        # rows of one listing in md/html; matrix.json has everything
CATEGORIES = ("native", "cpu-fallback", "unsupported", "mismatch", "n/a")
PROBLEMS = ("fail", "error", "crash", "timeout", "xpass", "unsupported")


@dataclasses.dataclass
class Cell:
    text: str
    key: str = ""      # a legend key: colours the cell in HTML
    title: str = ""    # hover text in HTML


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


# --------------------------------------------------------------------------- content

def cell_of(rec: dict | None) -> Cell:
    if rec is None:
        return Cell("")
    key = cell_key(rec)
    metric = key_metric(rec.get("metrics") or {})
    return Cell(f"{SYMBOL[key]} {metric}".strip(), key, f"{key}: {rec.get('reason') or ''}".strip())


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
    out = []
    for suite, checks in m.suites.items():
        heads = ["check"] + [c.label for c in m.columns]
        if len(checks) <= SUMMARIZE_OVER:
            rows = [[check] + [cell_of(m.cells.get((check, c.id))) for c in m.columns] for check in checks]
            out.append(Section(suite, heads, rows))
            continue
        counts = {c.id: Counter(_count_key(r) for (ch, col), r in m.cells.items()
                                if col == c.id and r["suite"] == suite)
                  for c in m.columns}
        out.append(Section(f"{suite}: {len(checks)} checks, by category", ["category"] + heads[1:],
                           [[cat] + [str(counts[c.id].get(cat, 0)) for c in m.columns] for cat in
                            (*CATEGORIES, *KEY_ORDER, "skipped") if any(counts[c.id].get(cat) for c in m.columns)],
                           intro="native: ran, no fallback; cpu-fallback: ran with ops on the CPU; unsupported: "
                                 "NotImplementedError; n/a: errors, crashes and timeouts (see below); other "
                                 "suites are counted by result (pass, fail, xfail ...); skipped: target absent "
                                 "or nothing to compare (see the skip reasons below)."))
        odd = [check for check in checks
               if any((r := m.cells.get((check, c.id))) and cell_key(r) != "pass" and r["status"] != "skip"
                      for c in m.columns)]
        rows = [[check] + [cell_of(m.cells.get((check, c.id))) for c in m.columns] for check in odd[:LIST_AT_MOST]]
        more = f" The first {LIST_AT_MOST} of {len(odd)} are listed; matrix.json has all." if len(odd) > LIST_AT_MOST else ""
        out.append(Section(f"{suite}: checks that did not simply pass somewhere", heads, rows, level=3,
                           intro="Skips (target absent) are left out." + more, empty="Every check passed where it ran."))
    return out


def _count_key(rec: dict) -> str:
    """What a large suite's summary counts a record as: its op category, else its result."""
    if rec["status"] == "skip":
        return "skipped"
    return rec["category"] if rec.get("category") in CATEGORIES else cell_key(rec)


def outcome_sections(m: Matrix) -> list[Section]:
    problems, limits, skips, disagreements = [], [], {}, []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            if rec is None:
                continue
            key, reason = cell_key(rec), rec.get("reason", "")
            row = [check, col.label, Cell(f"{SYMBOL[key]} {key}", key), reason]
            if (rec.get("metrics") or {}).get("disagreement"):
                disagreements.append([check, col.label, rec["metrics"]["disagreement"],
                                      rec["metrics"].get("pytorch_expects", ""), Cell(f"{SYMBOL[key]} {key}", key)])
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


def _more(rows: list) -> str:
    return f"The first {LIST_AT_MOST} of {len(rows)} are listed." if len(rows) > LIST_AT_MOST else ""


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
            rows.append([met["model"], col.label, cell_of(rec), " / ".join(str(ops.get(p, "")) for p in
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
    summary, worst = [], []
    for key in keys:
        recs = measured[key]
        margins = sorted(r["metrics"]["margin"] for _, r in recs)
        statuses = Counter(cell_key(r) for _, r in recs)
        summary.append([labels.get(key[0], key[0]), key[1], str(len(recs)), str(statuses.get("pass", 0)),
                        str(statuses.get("fail", 0)), str(statuses.get("xfail", 0)),
                        _num(margins[len(margins) // 2]), _num(margins[-1])])
        for check, rec in sorted(recs, key=lambda cr: -cr[1]["metrics"]["margin"])[:WORST_PER_DTYPE]:
            met = rec["metrics"]
            worst.append([check, labels.get(key[0], key[0]), key[1], cell_of(rec), _num(met["margin"]),
                          _num(met.get("max_abs_err")), _num(met.get("max_rel_err")),
                          f"rtol {_num(met.get('rtol'))}, atol {_num(met.get('atol'))}", met.get("reference") or ""])
    return [
        Section("Numerical parity: margins per column and dtype",
                ["column", "dtype", "compared", "pass", "fail", "xfail", "median margin", "worst margin"], summary,
                empty="No parity checks measured anything.",
                intro="margin = largest error / allowed error: <= 1 passes. On the cpu target the reference is "
                      "float64 on the same inputs; on an accelerator, the CPU in the same dtype. xfail: a "
                      "float16/bfloat16 precision limit (the reason says which)."),
        Section(f"Numerical parity: the {WORST_PER_DTYPE} worst checks per column and dtype",
                ["check", "column", "dtype", "result", "margin", "max abs err", "max rel err", "tolerance",
                 "against"], worst, level=3, empty="No parity checks measured anything."),
    ]


PATH_CHECK = "seed_003_path_never_raises_peak_memory"


def optim_sections(m: Matrix) -> list[Section]:
    """The optimization claims: each measured ratio against the claim's bound, and seed
    003's path with a chart of it (measured against the seed, both as x baseline)."""
    labels = {c.id: c.label for c in m.columns}
    claims_rows, paths = [], []
    for (check, col_id), rec in sorted(m.cells.items()):
        if rec.get("suite") != "optim" or rec["status"] == "skip":
            continue
        met = rec.get("metrics") or {}
        if rec.get("subject") == PATH_CHECK and met.get("rows"):
            paths.append((labels.get(col_id, col_id), rec))
            continue
        ratio = met.get("mem_ratio", met.get("time_ratio"))
        if ratio is None:
            continue
        claims_rows.append([rec["subject"], rec["variant"], labels.get(col_id, col_id), cell_of(rec),
                            rec.get("category") or "", _num(ratio),
                            f"[{_num(met.get('ci_low'))}, {_num(met.get('ci_high'))}]",
                            f"{'<' if met.get('kind') == 'lower' else '<='} {_num(met.get('bound'))}",
                            _num(met.get("claimed_ratio")), str(met.get("rounds", "")), met.get("source") or ""])
    out = [Section("Optimizations: the documents' claims, measured",
                   ["claim", "quantity", "column", "result", "verdict", "ratio", "95% interval", "holds if",
                    "claimed", "rounds", "source"], claims_rows, empty="No optimization claim was measured.",
                   intro="ratio = variant / baseline (peak memory: tracked storage bytes, exact; time: median of "
                         "interleaved rounds, per sample, with a bootstrap interval). A claim holds when the whole "
                         "interval is within the bound (the claimed ratio with the claim's tolerance).")]
    for label, rec in paths:
        out.append(_path_section(label, rec))
    return out


def _path_section(label: str, rec: dict) -> Section:
    from harness.claims import SEED_003_PATH
    rows = rec["metrics"]["rows"]
    base, seed = rows[0], SEED_003_PATH.steps
    table = [[r["row"], f"{r['peak_bytes'] / 2**20:.1f}", f"{r['peak_bytes'] / base['peak_bytes']:.2f}",
              f"{s.memory_gb / seed[0].memory_gb:.2f}", f"{r['step_s']:.3f}", f"{r['step_s'] / base['step_s']:.2f}",
              f"{s.time_s / seed[0].time_s:.2f}"] for r, s in zip(rows, seed)]
    return Section(f"Seed 003's path on {label}", ["row", "peak MiB", "x baseline", "seed: x baseline", "step s",
                                                   "x baseline", "seed: x baseline"], table,
                   level=3, image=_path_chart(label, rows), image_name=f"seed003_{_slug(label)}.png",
                   intro=f"workload {rec['metrics'].get('workload')}; {cell_of(rec).text}. Each row adds one "
                         "technique to the row before it, as seed 003's macbert-large table does.")


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")[:60]


def _path_chart(label: str, rows: list[dict]) -> bytes:
    import io

    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    base = rows[0]
    names = [r["row"] for r in rows]
    mem = [r["peak_bytes"] / base["peak_bytes"] for r in rows]
    step = [r["step_s"] / base["step_s"] for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.2), dpi=100)
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], mem, width=0.4, label="peak memory")
    ax.bar([x + 0.2 for x in xs], step, width=0.4, label="step time")
    ax.axhline(1.0, color="#888", linewidth=0.8)
    ax.set_xticks(list(xs), names, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("x baseline")
    ax.set_title(f"seed 003's path on {label}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def load_kernel_tables(directory: Path) -> tuple[list[dict], list[str]]:
    """Saved kernel tables (tools.kernels --save), oldest torch first; problems as lines."""
    tables, errors = [], []
    if not directory.is_dir():
        return tables, errors
    for path in sorted(directory.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
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
    out.append(Section("Summary per column", ["column"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER],
                       [[c.label] + [str(m.summary(c).get(k, 0)) for k in KEY_ORDER] for c in m.columns]))
    out += suite_sections(m)
    out += model_sections(m)
    out += parity_sections(m)
    out += optim_sections(m)
    out += outcome_sections(m)
    out += predicted_sections(kernel_tables)
    out.append(Section("Legend", ["symbol", "result", "meaning"], [[s, k, t] for k, s, t in LEGEND]))
    if errors:
        out.append(Section("Problems reading the input", ["problem"], [[e] for e in errors]))
    return out


# --------------------------------------------------------------------------- markdown

def _md(value) -> str:
    text = value.text if isinstance(value, Cell) else str(value if value is not None else "")
    return text.replace("|", "\\|").replace("\n", " ")


def render_md(secs: list[Section], sources: list[str]) -> str:
    out = ["# mps-compat compatibility matrix", "",
           f"Generated {journal.now_iso()} from {len(sources)} run file(s). "
           "Rows are checks; columns are environment x target.", ""]
    for s in secs:
        out += [f"{'#' * s.level} {s.title}", ""]
        if s.intro:
            out += [s.intro, ""]
        out.append(tabulate([[_md(v) for v in r] for r in s.rows], headers=s.headers, tablefmt="github")
                   if s.rows else s.empty)
        out.append("")
        if s.image:
            out += [f"![{s.title}]({s.image_name})", ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- html

CSS = """
body{font:14px/1.4 -apple-system,system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.c{text-align:center;white-space:nowrap}
.pass{background:#dff5df}.cpu-fallback{background:#fff2cc}.unsupported{background:#fde2c8}.fail,.error,.crash,
.timeout{background:#f8d0d0}.xfail{background:#ececff}.xpass{background:#d8f0ff}.skip{background:#f4f4f4;color:#777}
.small{color:#666;font-size:12px}
"""


def _h(text) -> str:
    return html.escape(str(text if text is not None else ""), quote=True)


def _td(value) -> str:
    if isinstance(value, Cell):
        return f"<td class='c {_h(value.key)}' title='{_h(value.title)}'>{_h(value.text)}</td>"
    return f"<td>{_h(value)}</td>"


def render_html(secs: list[Section], sources: list[str]) -> str:
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>mps-compat compatibility matrix</title>", f"<style>{CSS}</style></head><body>",
             "<h1>mps-compat compatibility matrix</h1>",
             f"<p class='small'>Generated {_h(journal.now_iso())} from {len(sources)} run file(s). Rows are checks; "
             "columns are environment x target. Hover a cell for its reason.</p>"]
    for s in secs:
        parts.append(f"<h{s.level}>{_h(s.title)}</h{s.level}>")
        if s.intro:
            parts.append(f"<p class='small'>{_h(s.intro)}</p>")
        if not s.rows:
            parts.append(f"<p>{_h(s.empty)}</p>")
            continue
        head = "".join(f"<th>{_h(x)}</th>" for x in s.headers)
        body = "".join("<tr>" + "".join(_td(v) for v in r) + "</tr>" for r in s.rows)
        parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        if s.image:
            data = base64.b64encode(s.image).decode("ascii")
            parts.append(f"<img alt='{_h(s.title)}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------- json

def render_json(m: Matrix, sources: list[str], errors: list[str], kernel_tables: list[dict]) -> str:
    doc = {
        "report_schema": REPORT_SCHEMA, "record_schema": journal.SCHEMA, "generated": journal.now_iso(),
        "sources": sources, "errors": errors,
        "legend": [{"key": k, "symbol": s, "meaning": t} for k, s, t in LEGEND],
        "columns": [{"id": c.id, "label": c.label, "env_id": c.env_id, "target": c.target, "runs": c.runs,
                     "complete": c.complete, "summary": dict(m.summary(c)), "facts": c.facts,
                     "targets": c.header.get("targets"), "mps_fallback": c.header.get("mps_fallback")}
                    for c in m.columns],
        "suites": m.suites,
        "cells": {check: {col.id: {**{k: rec[k] for k in ("status", "category", "metrics", "reason", "duration_s")},
                                   "key": cell_key(rec), "symbol": SYMBOL[cell_key(rec)]}
                          for col in m.columns if (rec := m.cells.get((check, col.id)))}
                  for check in m.rows},
        "predicted": [{k: t.get(k) for k in ("torch_version", "source", "counts", "caveat")} | {
            "mps_op_count": len(t["mps_ops"])} for t in kernel_tables],
    }
    return json.dumps(doc, indent=1, ensure_ascii=False)


# --------------------------------------------------------------------------- entry point

def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.report", description=__doc__.splitlines()[0])
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
        print(f"error: {e}", file=sys.stderr)
    if not any(r.records for r in runs):
        if not errors:  # otherwise the problem is already said, in one line per input
            print("error: no check records in " + ", ".join(inputs) + "; no matrix written", file=sys.stderr)
        return 2
    m = build(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    secs = sections(m, tables, errors)
    for sec in secs:
        if sec.image:
            tmp = out / f".{sec.image_name}.tmp{os.getpid()}"
            tmp.write_bytes(sec.image)
            os.replace(tmp, out / sec.image_name)
    _write_atomic(out / "matrix.md", render_md(secs, files))
    _write_atomic(out / "matrix.html", render_html(secs, files))
    _write_atomic(out / "matrix.json", render_json(m, files, errors, tables))
    print(f"wrote {out / 'matrix.md'}, matrix.html, matrix.json: {len(m.rows)} checks x {len(m.columns)} columns "
          f"from {len(runs)} run(s) in {len(files)} file(s)")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
