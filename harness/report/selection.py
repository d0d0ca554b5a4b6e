"""What a run selected, and whether the other runs merged beside it make up for what it left out.

A column of the report (and a side of tools.compare) merges every run of one environment:
the newest record of each check stands. A run narrowed by ``-k``, by a ``-m`` expression, by
a path inside a suite or by ``--deselect``, or a run cut off before its end, leaves checks
out; whether the column lacks them depends on the other runs. Such a run is *covered*, and
says nothing about the column, when for every suite and target it holds standing records of,
another run merged beside it was whole for that suite and target, reached its end, and still
holds standing records there (before or after it: where the narrowed run ran nothing newer,
the whole run's records stand). A run none of whose records stand any more is covered too:
newer runs re-ran everything it did. Only the other runs make a column partial.

Whole for a suite and target means: no ``-k``; no path narrower than ``suites/<suite>``; no
``--deselect`` or ``--lf`` (checks deselected with neither ``-m`` nor ``-k``); and a ``-m``
expression, if any, that selects every check of that suite on that target whatever other
markers a check carries (pytest's own expression evaluator decides), and that names the
opt-in markers of the suite's costly families (records.OPT_IN), without which ``-m`` leaves
them out (harness.plugin.hooks.opted_out).
"""
from __future__ import annotations

import re
from typing import Collection, Iterable

from harness.core import records
from harness.env import devices


def selection_of(header: dict) -> dict:
    """What a run selected: ``header["selection"]`` where the run wrote it, else read from its
    pytest arguments (-m, -k, paths)."""
    sel = dict(header.get("selection") or {})
    args = [str(a) for a in header.get("pytest_args") or []]
    if "markexpr" not in sel or "keyword" not in sel:
        for flag, key in (("-m", "markexpr"), ("-k", "keyword")):
            for i, a in enumerate(args):
                if a == flag and i + 1 < len(args):
                    sel.setdefault(key, args[i + 1])
                elif a.startswith(flag) and len(a) > 2:
                    sel.setdefault(key, a[2:])
    sel.setdefault("args", args)
    return sel


def _within_suites(arg: str) -> tuple[str, ...] | None:
    """The parts of a path argument below ``suites/`` (() for suites/ itself, ("ops",) for
    suites/ops, ("parity", "test_op_parity.py", "test_op_parity[...]") for a node id); None for
    an argument that is no path into the suites (an option, its value, a path elsewhere)."""
    if arg.startswith("-"):
        return None
    path, _, node = arg.partition("::")
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    if "suites" not in parts:
        return None
    below = tuple(parts[len(parts) - 1 - parts[::-1].index("suites") + 1:])
    return below + ((node,) if node else ())


def _paths_whole(args: Iterable[str], suite: str) -> bool:
    """Whether the run's path arguments select the whole of ``suite``: none given (pytest's
    testpaths), or ``suites/`` or ``suites/<suite>`` among them."""
    paths = [p for p in (_within_suites(a) for a in args) if p is not None]
    return not paths or any(p in ((), (suite,)) for p in paths)


def _marks_whole(markexpr: str, suite: str, target: str) -> bool:
    """Whether the -m expression selects every check of ``suite`` on ``target``: true with the
    suite's and target's markers set, the other suites' and targets' unset, and any other
    marker either way; and naming the opt-in markers of the suite."""
    try:
        from _pytest.mark.expression import Expression   # pytest's own -m evaluator
        expression = Expression.compile(markexpr)
    except Exception:      # an expression (or a pytest) this cannot read: not known to be whole
        return False
    known_false = (set(records.CATEGORIES) | set(devices.TARGETS)) - {suite, target}
    if any(suite in suites and not _names(markexpr, marker) for marker, suites in records.OPT_IN.items()):
        return False

    def evaluated(others: bool) -> bool:
        def matcher(name: str, /, **_kwargs) -> bool:
            return True if name in (suite, target) else False if name in known_false else others
        return expression.evaluate(matcher)
    return evaluated(True) and evaluated(False)


def _names(markexpr: str, marker: str) -> bool:
    return re.search(rf"\b{re.escape(marker)}\b", markexpr) is not None


def whole_for(sel: dict, suite: str, target: str) -> bool:
    """Whether a run with selection ``sel`` selected every check of ``suite`` on ``target``."""
    if sel.get("keyword"):
        return False
    if not _paths_whole(sel.get("args") or [], suite):
        return False
    if sel.get("markexpr"):
        return _marks_whole(sel["markexpr"], suite, target)
    return not (isinstance(sel.get("deselected"), int) and sel["deselected"] > 0)   # --deselect, --lf


def narrowed_paths(sel: dict) -> list[str]:
    """The path arguments narrower than a suite (a file, a folder inside one, a node id)."""
    return [a for a in sel.get("args") or [] if len(_within_suites(a) or ()) > 1]


def _standing(header: dict, recs: list[dict]) -> set[tuple[str, str]]:
    """The (suite, target) pairs where ``header``'s run still holds a standing record."""
    run = header.get("run")
    return {(r.get("suite"), records.target_of(r)) for r in recs if r.get("run") == run}


def uncovered(headers: list[dict], recs: list[dict], cut_off: Collection[str] = ()) -> tuple[list, list]:
    """``(narrowed, cut)``: the headers of the merged runs that leave checks out of the merge
    (narrowed, or cut off before their end: run ids in ``cut_off``) and that no other merged run
    covers (this module's docstring). ``recs``: the standing records, one per check."""
    standing = {id(h): _standing(h, recs) for h in headers}
    selections = {id(h): selection_of(h) for h in headers}

    def whole_somewhere_else(h: dict, pair: tuple[str, str]) -> bool:
        return any(other is not h and other.get("run") not in cut_off and pair in standing[id(other)]
                   and whole_for(selections[id(other)], *pair) for other in headers)

    narrowed, cut = [], []
    for h in headers:
        pairs = standing[id(h)]
        if not pairs or all(whole_somewhere_else(h, p) for p in pairs):
            continue
        if h.get("run") in cut_off:
            cut.append(h)
        if not all(whole_for(selections[id(h)], *p) for p in pairs):
            narrowed.append(h)
    return narrowed, cut
