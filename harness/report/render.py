"""The writers: the report's sections (harness.report.sections) as matrix.md, matrix.html and
matrix.json.

matrix.md: text from a run file (check ids, reasons, host names) is written as Markdown that
shows it as text (``escape``), in every table cell and header, heading and paragraph of
data, and in the ``--format md`` comparison (harness.report.compare), on GitHub and in any
CommonMark renderer, raw HTML allowed or not:

- ``<`` and ``&`` become entities: no tag, comment or entity of the data reaches the page.
  A ``>`` is left as it is (``a -> b`` stays readable in the raw file): with no ``<`` before
  it, it opens nothing in HTML or Markdown, but at the start (a block quote) it is ``&gt;``;
- a ``|`` is escaped and line breaks become spaces: a table keeps its columns;
- the characters of inline syntax are escaped with a backslash: ``\\`` itself (so data cannot
  undo an escape), backticks (a code span would show the entities above literally), ``*``,
  ``~`` and ``$`` (emphasis, strikethrough, GitHub's math), the ``]`` of a ``](`` (a link or
  an image; ``[0.5, 0.9]`` stays as it is), and ``_`` at the edge of a word (inside one, as in
  ``snake_case``, it can never be emphasis).

matrix.html: one self-contained page. Its CSS and JavaScript are files beside this
module (static/), inlined; the records the script reads are JSON in a script element
that never runs; every string from a run file is escaped.

matrix.json: every column and every record, for other tools.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import re
from collections import Counter
from pathlib import Path

from tabulate import tabulate

from harness.core import records, runfiles
from harness.report.matrix import (KEY_COLOURS, KEY_ORDER, LEGEND, SYMBOL, TARGET_ORDER, Matrix, cell_key,
                                   format_counts, host_groups, version_history)
from harness.report.sections import Bar, Cell, Section


# --------------------------------------------------------------------------- Markdown

_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_SPECIAL = re.compile(r"^>|[<&\\`*~$|]|\](?=\()|(?<![^\W_])_|_(?![^\W_])|\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]")


def _replace(match: re.Match) -> str:
    char = match.group()
    if char in _ENTITIES:
        return _ENTITIES[char]
    return " " if char.isspace() else "\\" + char


def escape(text) -> str:
    """``text`` (or ``str(text)``; None is empty) as Markdown inline text, on one line."""
    return _SPECIAL.sub(_replace, "" if text is None else str(text))



def _md(value) -> str:
    if isinstance(value, Bar):
        return escape(format_counts(Counter(value.counts)))
    return escape(value.text if isinstance(value, Cell) else value)


def _md_hosts(columns: list) -> str:
    """Markdown has one header row, so the host groups are said in a line above the table."""
    return "Columns by host: " + "; ".join(f"**{_md(label)}**: {_md(', '.join(c.sublabel for c in cols))}"
                                           for label, cols in host_groups(columns))


def render_md(secs: list[Section], sources: list[str]) -> str:
    out = ["# mps-compat compatibility matrix", "",
           f"Generated {runfiles.now_iso()} from {len(sources)} run file(s). "
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


# --------------------------------------------------------------------------- HTML

STATIC = Path(__file__).resolve().parent / "static"


def static(name: str) -> str:
    """A file of the page (static/): page.css, page.js (the page's behaviour: it builds
    nothing from strings, text goes in by textContent), errors.js (installed before
    anything else, so an error in any later script, a syntax error included, is recorded
    on the page, where tools.render_check reads it)."""
    return (STATIC / name).read_text(encoding="utf-8")


METRIC_CHARS = 400        # a metric longer than this is cut in the HTML panel (matrix.json has it whole)


# What must not appear raw inside a <script> element's JSON: "</script>" or "<!--" could
# end or confuse the element; U+2028/2029 are line breaks to older JavaScript parsers.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def script_json(data) -> str:
    """JSON for a ``<script type="application/json">`` element, read back with JSON.parse."""
    return json.dumps(records.json_safe(data), ensure_ascii=False, allow_nan=False).translate(_SCRIPT_SAFE)


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
        text = value if isinstance(value, str) else json.dumps(records.json_safe(value), ensure_ascii=False)
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
        f"<title>mps-compat compatibility matrix</title><script>{static('errors.js').strip()}</script>",
        f"<style>{static('page.css')}{colours}</style></head><body>",
        _filters_html(secs),
        "<h1>mps-compat compatibility matrix</h1>",
        f"<p class='small'>Generated {_h(runfiles.now_iso())} from {len(sources)} run file(s). Rows are checks; "
        "columns are environment x target, grouped by host and ordered by torch version. The filters above hide "
        "matrix rows and columns; hover a cell for its reason and key metrics, click it for every metric.</p>",
        *body,
        "<aside id='details' hidden><button type='button' id='details-close'>close</button><h3>Record</h3>"
        "<div class='body'></div></aside>",
        f"<script type='application/json' id='records'>{script_json(recs.items)}</script>",
        f"<script>{static('page.js')}</script></body></html>"])


# --------------------------------------------------------------------------- JSON


REPORT_SCHEMA = 1


def render_json(m: Matrix, sources: list[str], errors: list[str], kernel_tables: list[dict]) -> str:
    doc = {
        "report_schema": REPORT_SCHEMA, "record_schema": records.SCHEMA, "generated": runfiles.now_iso(),
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
