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
- a control character other than tab (a NUL, an escape) is spelt ``\\xNN``, never written raw:
  git takes a file with a NUL for binary, a terminal acts on an escape sequence;
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

import dataclasses
import json
import re
from collections import Counter

from tabulate import tabulate

from harness.core import records, runfiles
from harness.report.matrix import (LEGEND, SYMBOL, TEXT_MAX, Matrix, cell_key,
                                   format_counts, host_groups, shown, version_history)
from harness.report.sections import Bar, Cell, Section


# --------------------------------------------------------------------------- Markdown

_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_SPECIAL = re.compile(r"^>|[<&\\`*~$|]|\](?=\()|(?<![^\W_])_|_(?![^\W_])|\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029]"
                      r"|[\x00-\x08\x0e-\x1b\x1f\x7f-\x84\x86-\x9f]")
_LINE_BREAKS = frozenset("\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029")


def _replace(match: re.Match) -> str:
    char = match.group()
    if char in _ENTITIES:
        return _ENTITIES[char]
    if char == "\r\n" or char in _LINE_BREAKS:
        return " "
    if len(char) == 1 and (ord(char) < 0x20 or 0x7f <= ord(char) <= 0x9f):   # a control: shown as \xNN
        return f"\\\\x{ord(char):02x}"
    return "\\" + char


def escape(text) -> str:
    """``text`` (or ``str(text)``; None is empty) as Markdown inline text, on one line."""
    return _SPECIAL.sub(_replace, "" if text is None else str(text))



def _md(value) -> str:
    """A value of a section as Markdown text: escaped, and at most TEXT_MAX characters (a text
    from a run file can be any length; matrix.json keeps it whole)."""
    if isinstance(value, Bar):
        return escape(format_counts(Counter(value.counts)))
    return escape(shown(value.text if isinstance(value, Cell) else value, TEXT_MAX))


def _md_hosts(columns: list) -> str:
    """Markdown has one header row, so the host groups are said in a line above the table."""
    return "Columns by host: " + "; ".join(f"**{_md(label)}**: {_md(', '.join(c.sublabel for c in cols))}"
                                           for label, cols in host_groups(columns))


def _md_instruments(columns: list) -> list[str]:
    """A line per column of the table whose controls failed (the HTML's badge in its header)."""
    return [f"**{_md(c.label)}**: " + _md("; ".join(x.untrusted for x in c.instruments.failed))
            for c in columns if c.instruments.failed]


def render_md(secs: list[Section], sources: list[str]) -> str:
    out = ["# mps-compat compatibility matrix", "",
           f"Generated {runfiles.now_iso()} from {len(sources)} run file(s). "
           "Rows are checks; columns are environment x target.", ""]
    for s in secs:  # every string that can hold data is escaped; s.empty is the report's own Markdown
        out += [f"{'#' * s.level} {_md(s.title)}", ""]
        if s.intro:
            out += [_md(s.intro), ""]
        if s.kind == "verdicts":
            out += _md_verdicts(s.verdicts)
            continue
        if s.columns and s.rows:
            out += [_md_hosts(s.columns), ""]
            out += [line for marked in _md_instruments(s.columns) for line in (marked, "")]
        out.append(tabulate([[_md(v) for v in r] for r in s.rows], headers=[_md(h) for h in s.headers],
                            tablefmt="github") if s.rows else s.empty)
        out.append("")
        if s.image:
            out += [f"![{_md(s.title)}]({s.image_name})", ""]
    return "\n".join(out)


def _md_verdicts(found: list) -> list[str]:
    """The verdicts: with more than one, a table of every column's state and headline first; then a
    list per column: its state and headline, then each aspect's line."""
    from harness.report.verdict import SYMBOL_KEY, SYMBOLS
    out = [SYMBOL_KEY, ""] if found else []
    if len(found) > 1:   # every machine on the first screen, however many there are: the lists follow
        out += [tabulate([[f"`{SYMBOLS[v.state]}`", _md(v.title), _md(v.headline)] for v in found],
                         headers=["", "machine · torch · target", "verdict"], tablefmt="github"), ""]
    for v in found:
        # the state first, as the page's badge: "`XX` fit; ..." read as "not fit"
        out += [f"- `{SYMBOLS[v.state]}` **{_md(v.title)}** ({_md(v.machine)}): {_md(v.headline)}"]
        out += [f"  - `{SYMBOLS[a.state]}` {_md(a.name)}: {_md(a.line)}" for a in v.aspects]
        out += [f"  - {_md(note)}" for note in (v.partial, v.older_judge, v.instruments_note) if note]
    return out + [""]


# --------------------------------------------------------------------------- HTML

# The page is harness/report/page.py's (a Jinja2 template); imported here, where tools.report
# and the tests have always found it.
from harness.report.page import render_html, script_json, static  # noqa: E402,F401


# --------------------------------------------------------------------------- JSON


REPORT_SCHEMA = 2   # 2: verdicts, failures by cause, notes, each column's machine, device and partial note


def json_doc(m: Matrix, sources: list[str], errors: list[str], kernel_tables: list[dict],
             found: list | None = None) -> dict:
    """matrix.json's document (docs/matrix.schema.json describes it)."""
    from harness.report import verdict
    found = verdict.verdicts(m) if found is None else found
    partial = {c.id: verdict.partial_note(c.headers or [c.header],
                                          [r for (_, cid), r in m.cells.items() if cid == c.id], c.target, c.cut_off)
               for c in m.columns}
    by_cause = []
    for col in m.columns:
        recs = [r for (_, cid), r in m.cells.items() if cid == col.id]
        by_cause += [{"column": col.id, **dataclasses.asdict(g)} for g in verdict.failure_groups(recs)]
    return {
        "report_schema": REPORT_SCHEMA, "record_schema": records.SCHEMA, "generated": runfiles.now_iso(),
        "sources": sources, "errors": errors, "notes": list(m.notes),
        "legend": [{"key": k, "symbol": s, "meaning": t} for k, s, t in LEGEND],
        "verdicts": [dataclasses.asdict(v) for v in found],
        "failures_by_cause": by_cause,
        "columns": [{"id": c.id, "label": c.label, "host": c.host_label, "machine": c.host_label,
                     "device": c.device, "partial": partial[c.id], "env_id": c.env_id, "target": c.target,
                     "workload": c.workload, "instruments": c.instruments.as_json(),
                     "runs": c.runs, "complete": c.complete, "summary": dict(m.summary(c)), "facts": c.facts,
                     "targets": c.header.get("targets"), "mps_fallback": c.header.get("mps_fallback")}
                    for c in m.columns],
        "suites": m.suites,
        "cells": {check: {col.id: {**{k: rec.get(k) for k in ("status", "category", "metrics", "reason",
                                                              "duration_s")},
                                   **({"judged_again": rec["judged_again"]} if rec.get("judged_again") else {}),
                                   "key": cell_key(rec), "symbol": SYMBOL[cell_key(rec)]}
                          for col in m.columns if (rec := m.cells.get((check, col.id)))}
                  for check in m.rows},
        "history": [dataclasses.asdict(h) for h in version_history(m)],
        "predicted": [{k: t.get(k) for k in ("torch_version", "source", "counts", "caveat")} | {
            "mps_op_count": len(t["mps_ops"])} for t in kernel_tables],
    }


JSON_DEPTH = 40   # matrix.json's nesting kept as JSON: a record's metrics sit 5 levels down, seed 003's rows 7


def json_text(doc: dict) -> str:
    """matrix.json's text: strict JSON, whatever the run files held. A NaN or an infinity
    (Python's json reads the NaN and Infinity literals of a hand-made file) is written as
    json_safe spells it ("nan", "inf"), never as a literal that other JSON readers refuse;
    a record's metrics stay objects and lists down to JSON_DEPTH levels."""
    return json.dumps(records.json_safe(doc, limit=JSON_DEPTH), indent=1, ensure_ascii=False, allow_nan=False)


def render_json(m: Matrix, sources: list[str], errors: list[str], kernel_tables: list[dict],
                found: list | None = None) -> str:
    return json_text(json_doc(m, sources, errors, kernel_tables, found))
