"""Text from a run file (check ids, reasons, host names) as Markdown that shows it as text.

Used for every table cell and header, heading and paragraph of data in ``matrix.md``
(tools.report) and in the ``--format md`` comparison (harness.report.compare), on GitHub and in
any CommonMark renderer, raw HTML allowed or not:

- ``<`` and ``&`` become entities: no tag, comment or entity of the data reaches the page.
  A ``>`` is left as it is (``a -> b`` stays readable in the raw file): with no ``<`` before
  it, it opens nothing in HTML or Markdown, but at the start (a block quote) it is ``&gt;``;
- a ``|`` is escaped and line breaks become spaces: a table keeps its columns;
- the characters of inline syntax are escaped with a backslash: ``\\`` itself (so data cannot
  undo an escape), backticks (a code span would show the entities above literally), ``*``,
  ``~`` and ``$`` (emphasis, strikethrough, GitHub's math), the ``]`` of a ``](`` (a link or
  an image; ``[0.5, 0.9]`` stays as it is), and ``_`` at the edge of a word (inside one, as in
  ``snake_case``, it can never be emphasis).
"""
from __future__ import annotations

import re

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
