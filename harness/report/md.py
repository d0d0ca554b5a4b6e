"""matrix.md: the sections as Markdown tables, every cell escaped (harness.core.markdown)."""
from __future__ import annotations

from collections import Counter

from tabulate import tabulate

from harness.core import journal, markdown
from harness.report.matrix import format_counts, host_groups
from harness.report.model import Bar, Cell, Section


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
