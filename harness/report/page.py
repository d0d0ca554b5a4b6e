"""matrix.html: the report's sections (harness.report.sections) as one self-contained page.

The page is a Jinja2 template (templates/page.html, autoescaped) fed from a view of the
sections built here; its CSS and JavaScript (static/) are inlined, the charts are embedded
PNGs and nothing is fetched from anywhere. Every string from a run file reaches the page
through the template's escaping (``_finalize``: HTML-escaped, quotes included, and the
U+2028/2029 separators as character references); the records the details panel shows are
JSON in a ``<script type="application/json">`` element that never runs (``script_json``),
read back with JSON.parse.

What the page is made of:

- a compact header (title, when and from what, the search box, the filters folded in a bar);
- a table of contents (``nav#toc``), nested by section level, linking every section by id;
- the sections in their order: a ``kind="verdicts"`` section as one card per column, a
  ``kind="legend"`` one as a line of symbols, every other one as its table (and chart);
  each in a ``<details>``, folded when the section asks for it or has more than
  ``FOLD_ROWS`` rows;
- every table row carries, as data attributes computed here from the records behind its
  cells, the suites, targets and result keys the filters act on.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import json
import re
from functools import lru_cache
from pathlib import Path

from harness.core import records, runfiles
from harness.report.matrix import (KEY_COLOURS, KEY_ORDER, LEGEND, SYMBOL, TARGET_ORDER, TEXT_MAX, cell_key,
                                   host_groups, is_emulated, short, shown, visible)
from harness.report.sections import Bar, Cell, Section

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
TEMPLATES = HERE / "templates"

FOLD_ROWS = 40            # a section with more rows than this starts folded (the table scrolls in its own box)
MIN_WIDTH_EM = 14         # the most a table column is kept from narrowing (em); wider text wraps
METRIC_CHARS = 400        # a metric longer than this is cut in the details panel (matrix.json has it whole)
PANEL_CHARS = 10_000      # a reason in the details panel, where it is read whole (the tables show SHOWN_CHARS)
NAME_CHARS = 200          # a metric's name or a category in the details panel
STATES = ("good", "warn", "bad", "none")   # harness.report.verdict's states: a card's and an aspect's colour

# Ids the page itself uses: a section whose anchor asks for one of them gets another.
RESERVED_IDS = frozenset({"top", "bar", "search", "search-count", "filterbar", "filters", "filters-reset", "shown",
                          "toc", "toc-toggle", "page", "main", "details", "details-close", "records",
                          "run-files"})


def static(name: str) -> str:
    """A file of the page (static/): page.css, page.js (the page's behaviour: it builds
    nothing from strings, text goes in by textContent), errors.js (installed before
    anything else, so an error in any later script, a syntax error included, is recorded
    on the page, where tools.render_check reads it)."""
    return (STATIC / name).read_text(encoding="utf-8")


# What must not appear raw inside a <script> element's JSON: "</script>" or "<!--" could
# end or confuse the element; U+2028/2029 are line breaks to older JavaScript parsers.
_SCRIPT_SAFE = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026", 0x2028: "\\u2028", 0x2029: "\\u2029",
                **{c: f"\\u{c:04x}" for c in range(0x7f, 0xa0)}}   # DEL and C1 (json escapes C0): none raw


def script_json(data) -> str:
    """JSON for a ``<script type="application/json">`` element, read back with JSON.parse."""
    return json.dumps(records.json_safe(data), ensure_ascii=False, allow_nan=False).translate(_SCRIPT_SAFE)


# U+2028/2029 are harmless in HTML text, but a page with none raw is simpler to vouch for.
_SEPARATORS = {0x2028: "&#x2028;", 0x2029: "&#x2029;"}


def _finalize(value):
    """Every ``{{ ... }}`` of the template: markup the page made itself passes (the
    separators still spelled out), anything else is text, escaped here, its control
    characters spelt ``\\xNN`` (a NUL is no character of HTML, and makes git take the page
    for binary) and at most TEXT_MAX characters long; None is empty."""
    from markupsafe import Markup
    if isinstance(value, Markup):
        return Markup(str.translate(str(value), _SEPARATORS))
    text = visible(shown("" if value is None else value, TEXT_MAX))
    return Markup(html.escape(text, quote=True).translate(_SEPARATORS))


# A long run of characters without a space (a check id, a module path, a call with its
# arguments) is one word to the browser: a table cannot be narrower than its longest, so one
# "parity/special.polygamma.special_polygamma_n_0/float16/backward" pushed the failures'
# reason and switch columns past the edge of a 1400 px window. ``<wbr>`` after its
# separators lets such a word wrap there, and nowhere else (a number keeps its digits).
_LONG_WORD = re.compile(r"[^\s<>]{20,}")
_BREAK_AFTER = re.compile(r"([/_=:]|[.,](?!\d))(?=\S)")   # not inside a number: 0.000488340854644775
_BREAK_BEFORE = re.compile(r"(?<=[^\s>])(?=\()")   # a call's arguments wrap with their parenthesis


def breakable(value):
    """A table cell's text as ``_finalize`` gives it, its long words given places to wrap.
    The page's own markup passes unchanged (a break inside a tag would break the tag)."""
    from markupsafe import Markup
    out = _finalize(value)
    if isinstance(value, Markup):
        return out
    return Markup(_LONG_WORD.sub(lambda m: _BREAK_BEFORE.sub("<wbr>", _BREAK_AFTER.sub(r"\1<wbr>", m.group(0))),
                                 str(out)))


@lru_cache(maxsize=1)
def _environment():
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, finalize=_finalize,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                             keep_trailing_newline=False)
    env.filters["thousands"] = lambda n: f"{n:,}"
    env.filters["breakable"] = breakable
    return env


# --------------------------------------------------------------------------- ids


def slugify(text: str) -> str:
    """An id from a title: lower case, runs of anything but letters and digits as one "-"."""
    slug = re.sub(r"[\W_]+", "-", str(text).lower()).strip("-")[:60].strip("-")
    return slug or "section"


class _Ids:
    """Unique ids for the sections: the anchor asked for (or the title's slug), with -2, -3 ...
    where it is taken. ``resolve`` answers what a link to an anchor should point at: the
    first section that asked for it."""

    def __init__(self):
        self.taken: set[str] = set(RESERVED_IDS)
        self.asked: dict[str, str] = {}

    def new(self, asked: str) -> str:
        base, n = asked, 2
        given = base
        while given in self.taken:
            given, n = f"{base}-{n}", n + 1
        self.taken.add(given)
        self.asked.setdefault(asked, given)
        return given

    def resolve(self, anchor: str) -> str | None:
        return self.asked.get(anchor) if anchor else None


# --------------------------------------------------------------------------- records


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
    return {"check": shown(rec.get("check", ""), TEXT_MAX), "column": cell.where, "result": f"{SYMBOL[key]} {key}",
            "category": shown(rec.get("category") or "", NAME_CHARS),
            "reason": shown(rec.get("reason") or "", PANEL_CHARS), "duration_s": rec.get("duration_s"),
            "metrics": [[shown(k, NAME_CHARS), _metric_text(v)] for k, v in (rec.get("metrics") or {}).items()]}


def _metric_text(value) -> str:
    if isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = value if isinstance(value, str) else json.dumps(records.json_safe(value), ensure_ascii=False)
    return text if len(text) <= METRIC_CHARS else text[:METRIC_CHARS] + "… (cut; matrix.json has it whole)"


# --------------------------------------------------------------------------- the view


def _bar(counts: dict) -> dict | None:
    """A stacked bar: its parts (key, count) in legend order and its hover text."""
    parts = [(k, int(counts[k])) for k in KEY_ORDER if counts.get(k)]
    if not parts:
        return None
    return {"parts": parts, "title": ", ".join(f"{SYMBOL[k]} {k}: {n}" for k, n in parts)}


def _cell(value, recs: _Records) -> dict:
    """A table cell: its text, class, hover text, result key, record number, or a bar."""
    if isinstance(value, Bar):
        return {"bar": _bar(value.counts)}
    if not isinstance(value, Cell):
        return {"text": "" if value is None else str(value)}
    out = {"text": value.text, "cls": f"c {value.key}{' wrap' if value.wrap else ''}".strip(), "key": value.key,
           "title": value.title}
    if value.record is not None:
        out["i"] = recs.index(value)
    return out


def _json_list(values) -> str:
    values = sorted({str(v) for v in values if v not in (None, "")})
    return json.dumps(values, ensure_ascii=False) if values else ""


def _row(row: list, recs: _Records, suite: str = "") -> dict:
    """A table row, with what the filters read: the suites and targets of the records behind
    its cells (none: the suite and target filters leave the row alone) and its result keys."""
    cells = [_cell(v, recs) for v in row]
    recs_behind = [v.record for v in row if isinstance(v, Cell) and v.record is not None]
    suites = {r.get("suite") for r in recs_behind} | ({suite} if suite else set())
    return {"cells": cells, "data_suites": _json_list(suites),
            "data_targets": _json_list(r.get("target") for r in recs_behind),
            "data_keys": _json_list(v.key for v in row if isinstance(v, Cell) and v.key)}


def _matrix_head(s: Section) -> dict:
    """Three header rows: one cell per host spanning its columns; torch version and target
    per column; the suite's results per column as a stacked bar."""
    groups = host_groups(s.columns)
    columns = [{"id": c.id, "target": c.target, "group": g, "title": f"{c.label} ({c.env_id})",
                "torch": c.torch_release, "label": _target_label(c) + c.label_suffix, "untrusted": _untrusted(c)}
               for g, (_, members) in enumerate(groups) for c in members]
    return {"lead": s.headers[:len(s.headers) - len(s.columns)],
            "hosts": [{"label": label, "span": len(cols), "group": g} for g, (label, cols) in enumerate(groups)],
            "columns": columns,
            "bars": [{"target": c.target, "bar": _bar(b.counts)} for c, b in zip(s.columns, s.bars)]}


def _target_label(col) -> str:
    """The target under a column's torch version: an emulated Mac says what it is (its device's
    wording, matrix.emulated_device), any other target its name."""
    if not is_emulated(col.target):
        return col.target_label
    return col.device + (f" ({short(col.workload)} workload)" if col.workload else "")


def _untrusted(col) -> str:
    """"" for a column whose instruments passed their controls or had none; else the hover text of
    its "instruments not trustworthy" badge: every failed control, named, with its message."""
    return "\n".join(c.untrusted for c in col.instruments.failed)


def _text(value) -> str:
    if isinstance(value, Cell):
        return value.text
    return "" if value is None or isinstance(value, Bar) else str(value)


def _min_widths(s: Section) -> list[int]:
    """Each column's least width in em, from its longest text: a column of labels is not
    squeezed into a word a line beside a column of long reasons (the table scrolls instead)."""
    longest = [len(str(h)) for h in s.headers]
    for row in s.rows:
        for i, value in enumerate(row[:len(longest)]):
            longest[i] = max(longest[i], len(_text(value)))
    return [min(max(round(n * 0.45), 3), MIN_WIDTH_EM) for n in longest]


def _code_spans(text: str) -> list[tuple[bool, str]]:
    """The report's own text with `code` in backticks (the Markdown's), as (is code, text) parts."""
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an odd backtick: no code spans
        return [(False, str(text))]
    return [(i % 2 == 1, p) for i, p in enumerate(parts) if p]


def _legend_items(s: Section) -> list[dict]:
    """The symbols: from the section's rows (symbol, key, meaning), else from LEGEND."""
    rows = [[c.text if isinstance(c, Cell) else str(c) for c in r] for r in s.rows] or \
           [[sym, key, meaning] for key, sym, meaning in LEGEND]
    return [{"symbol": r[0], "key": r[1] if len(r) > 1 else "", "meaning": " ".join(r[2:]),
             "cls": r[1] if len(r) > 1 and r[1] in KEY_COLOURS else ""} for r in rows]


def _state(value: str) -> str:
    return value if value in STATES else "none"


def _verdicts(s: Section, ids: _Ids) -> list[dict]:
    cards = []
    for v in s.verdicts:
        aspects = [{"name": a.name, "state": _state(a.state), "line": a.line, "detail": list(a.detail or []),
                    "href": ids.resolve(a.anchor)} for a in v.aspects]
        cards.append({"id": ids.new("card-" + slugify(v.column_id)), "column": v.column_id, "title": v.title,
                      "machine": v.machine, "state": _state(v.state),
                      "headline": v.headline, "aspects": aspects, "partial": v.partial, "older_judge": v.older_judge,
                      "instruments_note": v.instruments_note})
    return cards


def _section(s: Section, sid: str, recs: _Records, ids: _Ids, cards_id: str | None) -> dict:
    kind = s.kind if s.kind in ("verdicts", "legend") else ""
    view = {"id": sid, "title": s.title, "level": min(max(int(s.level or 2), 2), 6), "kind": kind,
            "intro": s.intro, "empty": _code_spans(s.empty), "rows": len(s.rows), "table": None, "image": None,
            "cards_id": cards_id}
    if kind == "verdicts":
        view["cards"] = _verdicts(s, ids)
        view["open"] = True
        return view
    if kind == "legend":
        view["legend"] = _legend_items(s)
        view["open"] = not s.fold
        return view
    view["open"] = not (s.fold or len(s.rows) > FOLD_ROWS)
    if s.rows:
        suite = s.suite if s.columns else ""
        view["table"] = {"matrix": bool(s.columns), "suite": s.suite, "long": len(s.rows) > FOLD_ROWS,
                         "head": _matrix_head(s) if s.columns else None,
                         "headers": list(zip(s.headers, _min_widths(s))),
                         "rows": [_row(r, recs, suite) for r in s.rows]}
        if s.image:
            from markupsafe import Markup   # the page's own markup (base64 needs no escaping), never cut
            view["image"] = {"src": Markup("data:image/png;base64," + base64.b64encode(s.image).decode("ascii")),
                             "caption": s.caption, "alt": s.caption or s.title}
    return view


def _toc(views: list[dict]) -> list[dict]:
    """The sections as a tree by level: each node {id, title, rows, children}."""
    top: list[dict] = []
    stack: list[tuple[int, list]] = [(1, top)]
    for v in views:
        node = {"id": v["id"], "title": v["title"], "rows": v["rows"] if v["table"] else 0, "children": []}
        while len(stack) > 1 and stack[-1][0] >= v["level"]:
            stack.pop()
        stack[-1][1].append(node)
        stack.append((v["level"], node["children"]))
    return top


def _filters(secs: list[Section]) -> list[dict]:
    """The filters' options: the suites, targets and result keys the page's tables hold."""
    suites, targets, keys = {}, set(), set()
    for s in secs:
        if s.columns:
            suites.setdefault(s.suite, None)
            targets |= {c.target for c in s.columns}
        for row in s.rows:
            for v in row:
                if isinstance(v, Cell):
                    if v.key:
                        keys.add(v.key)
                    if v.record is not None:
                        suites.setdefault(v.record.get("suite"), None)
                        if v.record.get("target"):
                            targets.add(v.record["target"])
    suites.pop(None, None)
    suites.pop("", None)
    order = sorted(targets, key=lambda t: (TARGET_ORDER.get(t, 9), t))
    return [{"title": "suite", "name": "suite", "options": [{"value": x, "text": x, "cls": ""} for x in suites]},
            {"title": "target", "name": "target", "options": [{"value": t, "text": t, "cls": ""} for t in order]},
            {"title": "result", "name": "key", "options": [{"value": k, "text": f"{SYMBOL[k]} {k}", "cls": k}
                                                           for k in KEY_ORDER if k in keys]}]


@dataclasses.dataclass
class Page:
    """What the template is given."""
    generated: str
    sources: list[str]
    sections: list[dict]
    toc: list[dict]
    filters: list[dict]
    records: list[dict]


def build(secs: list[Section], sources: list[str]) -> Page:
    recs, ids = _Records(), _Ids()
    # The first verdicts section is "#verdicts" (render_check looks there): its own id when it
    # asks for that one, else its cards'. Its id is given first, the others in order.
    first = next((i for i, s in enumerate(secs) if s.kind == "verdicts"), None)
    given: dict[int, str] = {}
    cards_id = None
    if first is not None:
        given[first] = ids.new(secs[first].anchor or slugify(secs[first].title))
        if given[first] != "verdicts":
            cards_id = ids.new("verdicts")
    for i, s in enumerate(secs):  # every id before any section is drawn: aspects link ahead
        if i not in given:
            given[i] = ids.new(s.anchor or slugify(s.title))
    views = [_section(s, given[i], recs, ids, cards_id if i == first else None) for i, s in enumerate(secs)]
    return Page(runfiles.now_iso(), [str(x) for x in sources], views, _toc(views), _filters(secs), recs.items)


def _colours() -> str:
    """The result colours (matrix.KEY_COLOURS): cells, bars, filter labels, legend."""
    return "".join(f".{k}{{background:{c}}}" for k, c in KEY_COLOURS.items()) + ".skip{color:#666}"


def render_html(secs: list[Section], sources: list[str]) -> str:
    from markupsafe import Markup
    page = build(secs, sources)
    return _environment().get_template("page.html").render(
        page=page, css=Markup(static("page.css") + _colours()), errors_js=Markup(static("errors.js").strip()),
        page_js=Markup(static("page.js")), records_json=Markup(script_json(page.records)))
