"""matrix.html: one self-contained page. Its CSS and JavaScript are files beside this
module (static/), inlined; the records the script reads are JSON in a script element
that never runs; every string from a run file is escaped."""
from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from harness.core import journal, outcomes
from harness.report.matrix import KEY_ORDER, SYMBOL, TARGET_ORDER, cell_key, host_groups
from harness.report.model import Bar, Cell, KEY_COLOURS, Section

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
    return json.dumps(outcomes.json_safe(data), ensure_ascii=False, allow_nan=False).translate(_SCRIPT_SAFE)


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
        text = value if isinstance(value, str) else json.dumps(outcomes.json_safe(value), ensure_ascii=False)
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
        f"<p class='small'>Generated {_h(journal.now_iso())} from {len(sources)} run file(s). Rows are checks; "
        "columns are environment x target, grouped by host and ordered by torch version. The filters above hide "
        "matrix rows and columns; hover a cell for its reason and key metrics, click it for every metric.</p>",
        *body,
        "<aside id='details' hidden><button type='button' id='details-close'>close</button><h3>Record</h3>"
        "<div class='body'></div></aside>",
        f"<script type='application/json' id='records'>{script_json(recs.items)}</script>",
        f"<script>{static('page.js')}</script></body></html>"])
