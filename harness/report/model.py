"""What the report is made of: sections of rows, each cell the record behind it, and
the small formatting helpers every section shares."""
from __future__ import annotations

import dataclasses
import math

from harness.report.matrix import NOT_SHOWN, PREFERRED_METRICS, SYMBOL, cell_key, key_metric


SUMMARIZE_OVER = 150      # a suite with more checks is shown as counts plus its non-passing rows


LIST_AT_MOST = 300        # rows of one listing in md/html; matrix.json has everything


PROBLEMS = ("fail", "error", "crash", "timeout", "xpass", "unsupported")


TITLE_METRICS = 5         # scalar metrics in a cell's hover text; the click panel shows all


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
