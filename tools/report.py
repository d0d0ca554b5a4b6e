"""Build the compatibility matrix from run files.

    python -m tools.report [RUN_FILE_OR_DIR ...] [--out DIR]

Default input: every ``reports/runs/*.jsonl``. Writes ``matrix.md``, ``matrix.html``
(one self-contained page, every string escaped) and ``matrix.json`` into ``--out``
(default ``reports/``). A malformed or truncated run file gives one line on stderr naming
the file and line, and exit status 2; the readable records, of that file and the others,
are still reported. With nothing readable at all, no matrix is overwritten.
"""
from __future__ import annotations

import argparse
import html
import json
import os
import sys
from pathlib import Path

from tabulate import tabulate

from harness import journal
from harness.matrix import LEGEND, SYMBOL, KEY_ORDER, Matrix, build, cell_key, key_metric

ROOT = Path(__file__).resolve().parent.parent
REPORT_SCHEMA = 1


# --------------------------------------------------------------------------- model helpers

def env_rows(m: Matrix) -> list[dict]:
    rows = []
    for col in m.columns:
        f, h = col.facts, col.header
        pk = f.get("packages") or {}
        mac = f.get("mac") or {}
        rows.append({
            "column": col.label, "target": col.target, "host": f.get("host"),
            "os": (f.get("os") or {}).get("platform"), "python": f"{(f.get('python') or {}).get('version')} "
                                                                 f"({(f.get('python') or {}).get('arch')})",
            "torch": pk.get("torch"), "transformers": pk.get("transformers"), "datasets": pk.get("datasets"),
            "accelerate": pk.get("accelerate"), "macOS": mac.get("version") or "-",
            "chip / CPU": mac.get("chip") or (f.get("cpu") or {}).get("model"),
            "target available": (h.get("targets") or {}).get(col.target, {}).get("available"),
            "MPS fallback": (h.get("mps_fallback") or {}).get("setting"),
            "suite rev": f.get("suite_revision"),
            "runs": len(col.runs), "complete": "yes" if col.complete else "no (cut off)",
        })
    return rows


def cell_text(rec: dict | None) -> str:
    if rec is None:
        return ""
    metric = key_metric(rec.get("metrics") or {})
    return f"{SYMBOL[cell_key(rec)]} {metric}".strip()


PROBLEMS = ("fail", "error", "crash", "timeout", "xpass", "unsupported")


def outcome_lists(m: Matrix) -> dict[str, list]:
    """What did not pass: problems one by one, limitations one by one, skips grouped by reason."""
    problems, limits, skips = [], [], {}
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            if rec is None:
                continue
            key = cell_key(rec)
            row = {"check": check, "column": col.label, "result": f"{SYMBOL[key]} {key}", "reason": rec.get("reason", "")}
            if key in PROBLEMS:
                problems.append(row)
            elif key == "xfail":
                limits.append(row)
            elif key == "skip":
                group = skips.setdefault((col.target, rec.get("reason", "")), {"checks": 0, "columns": []})
                group["checks"] += 1
                if col.label not in group["columns"]:
                    group["columns"].append(col.label)
    skipped = [{"target": t, "checks": g["checks"], "columns": len(g["columns"]), "reason": r}
               for (t, r), g in sorted(skips.items())]
    return {"problems": problems, "limits": limits, "skipped": skipped}


SECTIONS = (("problems", "Failures, errors, crashes", "No failures."),
            ("limits", "Known limitations (xfail), with what would lift them", "None."),
            ("skipped", "Skipped, grouped by reason", "Nothing skipped."))


# --------------------------------------------------------------------------- markdown

def _md_escape(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def render_md(m: Matrix, sources: list[str], errors: list[str]) -> str:
    out = ["# mps-compat compatibility matrix", "",
           f"Generated {journal.now_iso()} from {len(sources)} run file(s). "
           "Rows are checks; columns are environment x target.", ""]
    out += ["## Environments", ""]
    envs = env_rows(m)
    if envs:
        out.append(tabulate([[_md_escape(v) for v in r.values()] for r in envs], headers=list(envs[0]),
                            tablefmt="github"))
    out += ["", "## Summary per column", ""]
    heads = ["column"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER]
    rows = [[col.label] + [m.summary(col).get(k, 0) for k in KEY_ORDER] for col in m.columns]
    out.append(tabulate(rows, headers=heads, tablefmt="github"))
    for suite, checks in m.suites.items():
        out += ["", f"## {suite}", ""]
        heads = ["check"] + [c.label for c in m.columns]
        rows = [[check] + [_md_escape(cell_text(m.cells.get((check, c.id)))) for c in m.columns] for check in checks]
        out.append(tabulate(rows, headers=heads, tablefmt="github"))
    lists = outcome_lists(m)
    for key, title, empty in SECTIONS:
        out += ["", f"## {title}", ""]
        rows = lists[key]
        out.append(tabulate([[_md_escape(v) for v in r.values()] for r in rows], headers=list(rows[0]),
                            tablefmt="github") if rows else empty)
    out += ["", "## Legend", ""]
    out += [f"- {sym} **{key}**: {meaning}" for key, sym, meaning in LEGEND]
    if errors:
        out += ["", "## Problems reading the run files", ""] + [f"- {_md_escape(e)}" for e in errors]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- html

CSS = """
body{font:14px/1.4 -apple-system,system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 7px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.c{text-align:center;white-space:nowrap}
.pass{background:#dff5df}.cpu-fallback{background:#fff2cc}.unsupported{background:#fde2c8}.fail,.error,.crash,
.timeout{background:#f8d0d0}.xfail{background:#ececff}.xpass{background:#d8f0ff}.skip{background:#f4f4f4;color:#777}
code{font-size:12px}.small{color:#666;font-size:12px}
"""


def _h(text) -> str:
    return html.escape(str(text if text is not None else ""), quote=True)


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    """``rows`` hold already-escaped HTML fragments (cells)."""
    head = "".join(f"<th>{_h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(rows_cell if rows_cell.startswith("<td") else f"<td>{rows_cell}</td>"
                                    for rows_cell in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_html(m: Matrix, sources: list[str], errors: list[str]) -> str:
    parts = ["<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
             "<title>mps-compat compatibility matrix</title>", f"<style>{CSS}</style></head><body>",
             "<h1>mps-compat compatibility matrix</h1>",
             f"<p class='small'>Generated {_h(journal.now_iso())} from {len(sources)} run file(s). Rows are checks; "
             "columns are environment x target. Hover a cell for its reason.</p>"]
    envs = env_rows(m)
    parts.append("<h2>Environments</h2>")
    if envs:
        parts.append(_html_table(list(envs[0]), [[_h(v) for v in r.values()] for r in envs]))
    parts.append("<h2>Summary per column</h2>")
    parts.append(_html_table(["column"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER],
                             [[_h(c.label)] + [_h(m.summary(c).get(k, 0)) for k in KEY_ORDER] for c in m.columns]))
    for suite, checks in m.suites.items():
        parts.append(f"<h2>{_h(suite)}</h2>")
        rows = []
        for check in checks:
            row = [f"<code>{_h(check)}</code>"]
            for col in m.columns:
                rec = m.cells.get((check, col.id))
                if rec is None:
                    row.append("<td class='c'></td>")
                    continue
                key = cell_key(rec)
                row.append(f"<td class='c {_h(key)}' title='{_h(key + ': ' + (rec.get('reason') or ''))}'>"
                           f"{_h(cell_text(rec))}</td>")
            rows.append(row)
        parts.append(_html_table(["check"] + [c.label for c in m.columns], rows))
    lists = outcome_lists(m)
    for key, title, empty in SECTIONS:
        rows = lists[key]
        parts.append(f"<h2>{_h(title)}</h2>")
        parts.append(_html_table(list(rows[0]), [[_h(v) for v in r.values()] for r in rows]) if rows
                     else f"<p>{_h(empty)}</p>")
    parts.append("<h2>Legend</h2><ul>" + "".join(
        f"<li><span class='{_h(k)}'>{_h(s)}</span> <b>{_h(k)}</b>: {_h(t)}</li>" for k, s, t in LEGEND) + "</ul>")
    if errors:
        parts.append("<h2>Problems reading the run files</h2><ul>" + "".join(f"<li>{_h(e)}</li>" for e in errors)
                     + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------- json

def render_json(m: Matrix, sources: list[str], errors: list[str]) -> str:
    doc = {
        "report_schema": REPORT_SCHEMA, "record_schema": journal.SCHEMA, "generated": journal.now_iso(),
        "sources": sources, "errors": errors,
        "legend": [{"key": k, "symbol": s, "meaning": t} for k, s, t in LEGEND],
        "columns": [{"id": c.id, "label": c.label, "env_id": c.env_id, "target": c.target, "runs": c.runs,
                     "complete": c.complete, "summary": dict(m.summary(c)), "facts": c.facts,
                     "targets": c.header.get("targets"), "mps_fallback": c.header.get("mps_fallback")}
                    for c in m.columns],
        "suites": m.suites,
        "outcomes": outcome_lists(m),
        "cells": {check: {col.id: {**{k: rec[k] for k in ("status", "category", "metrics", "reason", "duration_s")},
                                   "key": cell_key(rec), "symbol": SYMBOL[cell_key(rec)]}
                          for col in m.columns if (rec := m.cells.get((check, col.id)))}
                  for check in m.rows},
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
    args = parser.parse_args(argv)
    inputs = args.inputs or [str(ROOT / "reports" / "runs")]
    runs, files, errors = load(inputs)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if not any(r.records for r in runs):
        if not errors:  # otherwise the problem is already said, in one line per input
            print("error: no check records in " + ", ".join(inputs) + "; no matrix written", file=sys.stderr)
        return 2
    m = build(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, render in (("matrix.md", render_md), ("matrix.html", render_html), ("matrix.json", render_json)):
        _write_atomic(out / name, render(m, files, errors))
    print(f"wrote {out / 'matrix.md'}, matrix.html, matrix.json: {len(m.rows)} checks x {len(m.columns)} columns "
          f"from {len(runs)} run(s) in {len(files)} file(s)")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
