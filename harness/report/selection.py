"""What a pytest selection selects: the one reader of ``-m`` / ``-k`` expressions (pytest's own
evaluator) for tools.suiteplan, which plans ``./compat suites`` runs by them, and for the
report, which reads what a recorded run selected and whether the other runs merged beside it
make up for what it left out.

A column of the report (and a side of tools.compare) merges every run of one environment:
the newest record of each check stands. A run narrowed by ``-k``, by a ``-m`` expression, by
a path inside a suite or by ``--deselect``, or a run cut off before its end, leaves checks
out; whether the column lacks them depends on the other runs. Such a run is *covered*, and
says nothing about the column, when for every suite, target and workload (the optimization
and perf suites' small or large training workload) it holds standing records of, another run
merged beside it was whole for that suite and target, reached its end, and still holds
standing records there, at that workload (before or after it: where the narrowed run ran nothing newer,
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

import functools
import itertools
import re
from typing import Callable, Collection, Iterable

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
    if not isinstance(arg, str) or arg.startswith("-"):
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


# --------------------------------------------------------------------------- -m and -k expressions

_TOKEN = re.compile(r"\s*(\(|\)|[\w:+\-.\[\]\\/]+|\S)")


def compile_expression(text: str) -> Callable[[Callable[[str], bool]], bool] | None:
    """A pytest ``-m`` / ``-k`` expression as a function of how a name is judged, read by
    pytest's own expression parser (``_pytest.mark.expression``, what ``-m`` and ``-k`` use);
    None for what it cannot read (a syntax error, a marker with arguments ``mark(x=1)``, which
    is not weighed here): the caller decides what an unreadable expression may select."""
    if not text.strip():
        return lambda look: True
    tokens = _TOKEN.findall(text)
    if any(b == "(" and a not in ("and", "or", "not", "(", ")") for a, b in zip(tokens, tokens[1:])):
        return None   # a name called with arguments
    compiled = _parsed(text)
    if compiled is None:
        return None
    return lambda look: compiled.evaluate(lambda name, **kwargs: look(name))


def _parsed(text: str):
    """``text`` read by pytest's own expression parser (``_pytest.mark.expression``, what -m
    and -k use), or None where it cannot (a syntax error, or no such parser in this pytest)."""
    try:
        from _pytest.mark.expression import Expression
        return Expression.compile(text)
    except Exception:   # SyntaxError in pytest 8-9, ParseError before, ImportError: not readable here
        return None


def readable(text: str | None) -> bool:
    """Whether pytest's expression parser reads ``text`` as a -m / -k expression (an empty or
    absent one: yes)."""
    return not text or not text.strip() or _parsed(text) is not None


def names_in(text: str) -> set[str]:
    return {t for t in _TOKEN.findall(text) if t not in ("and", "or", "not", "(", ")")}


def _assignments(text: str, known: dict[str, bool], most_free: int):
    """Every assignment of the names of ``text`` that ``known`` leaves free (None: more than
    ``most_free`` of them)."""
    free = sorted(names_in(text) - set(known))
    if len(free) > most_free:
        return None
    return ({**known, **dict(zip(free, values))} for values in itertools.product((False, True), repeat=len(free)))


def _weigh(text: str | None, known: dict[str, bool], most_free: int, every: bool) -> bool:
    """The expression over every assignment of its free names: true for all (``every``) or for
    one; an unreadable expression, or one with too many free names, counts as selecting some
    items (True for one, False for all)."""
    if not text:
        return True
    fn, assignments = compile_expression(text), _assignments(text, known, most_free)
    if fn is None or assignments is None:
        return not every
    results = (fn(lambda name: assigned.get(name, False)) for assigned in assignments)
    return all(results) if every else any(results)


def satisfiable(text: str | None, known: dict[str, bool], most_free: int = 12) -> bool:
    """Whether a ``-m`` expression can hold for an item with the ``known`` markers, whatever
    the other names are (an unreadable expression: True, the item may be selected)."""
    return _weigh(text, known, most_free, every=False)


def always(text: str | None, known: dict[str, bool], most_free: int = 12) -> bool:
    """Whether a ``-m`` expression holds for every item with the ``known`` markers, whatever
    the other names are (an unreadable expression: False, not known to select them all)."""
    return _weigh(text, known, most_free, every=True)


def names(markexpr: str, marker: str) -> bool:
    """Whether the expression names ``marker`` (a word of it: "compile", "not compile")."""
    return re.search(rf"\b{re.escape(marker)}\b", markexpr) is not None


def _known(suite: str, target: str, suites: Iterable[str]) -> dict[str, bool]:
    """The suite and target markers of a check of ``suite`` on ``target`` (a stand-in target
    carries none)."""
    return {s: s == suite for s in suites} | {t: t == target for t in devices.TARGETS}


def marker_selects(markexpr: str | None, suite: str, target: str, opt_in: Iterable[str], suites: Iterable[str]) -> bool:
    """Whether ``-m markexpr`` may select a check of ``suite`` on ``target`` that carries the
    opt-in markers ``opt_in``: the suite and target markers are known, others free; an
    opt-in marker the expression does not name leaves the check out
    (harness.plugin.hooks.opted_out)."""
    opt_in = set(opt_in)
    if markexpr and any(not names(markexpr, m) for m in opt_in):
        return False
    return satisfiable(markexpr, _known(suite, target, suites) | {m: m in opt_in for m in records.OPT_IN})


def marker_selects_every(markexpr: str | None, suite: str, target: str, suites: Iterable[str] = tuple(records.CATEGORIES)) -> bool:
    """Whether ``-m markexpr`` selects every check of ``suite`` on ``target``: each of its
    checks without an opt-in marker and, where the suite holds an opt-in family
    (records.OPT_IN), each check of that family, whatever other markers a check carries."""
    families = [m for m, holders in records.OPT_IN.items() if suite in holders]
    if markexpr and any(not names(markexpr, m) for m in families):
        return False
    known = _known(suite, target, suites)
    return all(always(markexpr, known | {m: m == family for m in records.OPT_IN}) for family in (None, *families))


def keyword_selects(keyword: str | None, nodeid: str, markers: Iterable[str]) -> bool:
    """Whether ``-k keyword`` selects the check ``nodeid``, roughly as pytest matches: each
    name a case-insensitive substring of a part of the node id or a marker."""
    if not keyword:
        return True
    fn = compile_expression(keyword)
    if fn is None:
        return True
    hay = [p.lower() for p in re.split(r"::|/", nodeid) if p] + [m.lower() for m in markers]
    return fn(lambda name: any(name.lower() in h for h in hay))


# --------------------------------------------------------------------------- whole runs, and what makes up for a narrowed one

def whole_for(sel: dict, suite: str, target: str) -> bool:
    """Whether a run with selection ``sel`` selected every check of ``suite`` on ``target``."""
    if sel.get("keyword"):
        return False
    if not _paths_whole(sel.get("args") or [], suite):
        return False
    if sel.get("markexpr"):
        return marker_selects_every(sel["markexpr"], suite, target)
    return not (isinstance(sel.get("deselected"), int) and sel["deselected"] > 0)   # --deselect, --lf


def selects(sel: dict, rec: dict) -> bool:
    """Whether a run with selection ``sel`` certainly selected the check of record ``rec``: its
    paths take the check's suite whole, its ``-m`` holds for the check's markers (suite,
    target, and the opt-in family its subject says: records.opt_in_of) whatever other markers
    it carries, and its ``-k`` matches the check's node id as pytest reads it
    (``keyword_selects``; a record without a node id, from an older file, is not known to
    match). Without ``-m`` or ``-k``, a run that deselected checks (``--deselect``, ``--lf``)
    does not say which."""
    suite, target = rec.get("suite"), rec.get("target")
    if not _paths_whole(sel.get("args") or [], suite):
        return False   # a path inside the suite: which of its checks, only pytest's collection knew
    families = records.opt_in_of(str(rec.get("subject") or ""))
    markexpr, keyword = sel.get("markexpr"), sel.get("keyword")
    if markexpr and not _marks_select(markexpr, suite, target, families):
        return False
    if not markexpr and not keyword and isinstance(sel.get("deselected"), int) and sel["deselected"] > 0:
        return False
    if keyword:
        nodeid = rec.get("nodeid")
        return isinstance(nodeid, str) and keyword_selects(keyword, nodeid, (suite, target, *families))
    return True


@functools.lru_cache(maxsize=4096)
def _marks_select(markexpr: str, suite: str, target: str, families: tuple[str, ...]) -> bool:
    """Whether ``-m markexpr`` selects every check of ``suite`` on ``target`` that carries the
    opt-in markers ``families`` (and no other opt-in one), whatever its other markers."""
    if any(not names(markexpr, m) for m in families):
        return False   # an opt-in marker the expression does not name leaves the check out
    return always(markexpr, _known(suite, target, records.CATEGORIES) | {m: m in families for m in records.OPT_IN})


def narrowed_paths(sel: dict) -> list[str]:
    """The path arguments narrower than a suite (a file, a folder inside one, a node id)."""
    return [a for a in sel.get("args") or [] if len(_within_suites(a) or ()) > 1]


def _standing(header: dict, recs: list[dict]) -> set[tuple[str, str, str]]:
    """The (suite, target, workload) places where ``header``'s run still holds a standing
    record. The workload (records.workload_of: the optimization and perf suites' small or large
    training workload, "" for the rest) is part of the place: a whole run of the small workload
    makes up for nothing of a cut-off or ``-k`` run of the large one, whose checks it never ran."""
    run = header.get("run")
    return {(r.get("suite"), r.get("target"), records.workload_of(r)) for r in recs if r.get("run") == run}


def uncovered(headers: list[dict], recs: list[dict], cut_off: Collection[str] = ()) -> tuple[list, list]:
    """``(narrowed, cut)``: the headers of the merged runs that leave checks out of the merge
    (narrowed, or cut off before their end: run ids in ``cut_off``) and that no other merged run
    covers (this module's docstring). ``recs``: the standing records, one per check."""
    standing = {id(h): _standing(h, recs) for h in headers}
    selections = {id(h): selection_of(h) for h in headers}

    def whole_somewhere_else(h: dict, place: tuple[str, str, str]) -> bool:
        return any(other is not h and other.get("run") not in cut_off and place in standing[id(other)]
                   and whole_for(selections[id(other)], *place[:2]) for other in headers)

    narrowed, cut = [], []
    for h in headers:
        places = standing[id(h)]
        if not places or all(whole_somewhere_else(h, p) for p in places):
            continue
        if h.get("run") in cut_off:
            cut.append(h)
        if not all(whole_for(selections[id(h)], *p[:2]) for p in places):
            narrowed.append(h)
    return narrowed, cut
