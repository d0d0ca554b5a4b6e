"""The self-tests' own rules (tests/conftest.py): the quick loop leaves the slow self-tests
out and `--slow` (CI) runs them; where CI forbids skips, a skipped self-test fails with its
reason, so a browser or a tool missing from CI cannot pass unnoticed. And two rules on the
self-tests' source: none asserts a wall-clock time against a number (a busy machine is no
fault of the code), and none reads a path outside the repository (a clone has nothing there).
Each source rule is shown to catch planted violations."""
import ast
import re

import pytest

from tests import conftest

EXAMPLE = '''
import ast
import re

import pytest

def test_quick():
    pass

@pytest.mark.slow
def test_slow():
    pass

def test_needs_a_browser():
    pytest.skip("Chromium not found")

@pytest.mark.xfail(reason="a known gap")
def test_known_gap():
    assert False
'''


@pytest.fixture
def example(pytester, monkeypatch):
    for var in (conftest.SLOW_ENV, conftest.FORBID_SKIPS_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTHONPATH", str(conftest.ROOT))  # the child imports tests.conftest
    pytester.makeconftest("from tests.conftest import pytest_addoption, pytest_collection_modifyitems, "
                          "pytest_runtest_makereport\n")
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_example=EXAMPLE)
    return pytester


def test_the_quick_loop_deselects_slow_self_tests(example):
    example.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1, skipped=1, xfailed=1,
                                                                           deselected=1)


@pytest.mark.parametrize("how", ["option", "env"])
def test_slow_self_tests_run_on_request(example, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv(conftest.SLOW_ENV, "1")
    args = ["--slow"] if how == "option" else []
    example.runpytest_subprocess("-p", "no:cacheprovider", *args).assert_outcomes(passed=2, skipped=1, xfailed=1)


def test_where_skips_are_forbidden_a_skip_fails_with_its_reason_and_an_xfail_stays(example, monkeypatch):
    monkeypatch.setenv(conftest.FORBID_SKIPS_ENV, "1")
    res = example.runpytest_subprocess("-p", "no:cacheprovider", "--slow")
    res.assert_outcomes(passed=2, failed=1, xfailed=1)
    res.stdout.fnmatch_lines(["*allows no skip*Chromium not found*"])


# --------------------------------------------------------------------------- the cores shared among workers

@pytest.mark.parametrize("workers, cores, user, want", [
    ("2", 2, None, "1"),        # CI: two workers on two cores, a thread each for their children
    ("2", 16, None, "8"),
    ("1", 2, None, None),       # one worker: torch's default
    (None, 2, None, None),      # not on xdist
    ("2", 2, "3", "3"),         # what the user set is kept
])
def test_xdist_workers_give_the_children_they_start_a_share_of_the_cores(monkeypatch, workers, cores, user, want):
    """Two workers whose child processes each start a thread per core oversubscribe the
    machine; the variable set here is what every child the self-tests start inherits."""
    import sys
    import types

    from harness.core import isolate
    monkeypatch.setattr(isolate.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    for var, value in (("PYTEST_XDIST_WORKER_COUNT", workers), ("OMP_NUM_THREADS", user)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    set_to = []
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=set_to.append))
    conftest.pytest_configure(None)
    assert conftest.os.environ.get("OMP_NUM_THREADS") == want
    assert set_to == ([int(want)] if want and user is None else [])   # torch already imported: told too


# --------------------------------------------------------------------------- no timed assertion, nothing outside

# Words that make a name a wall-clock reading (split on "_" and camelCase: "wall_s", "tookMs",
# "elapsed", time.perf_counter()), and this project's unit suffixes for seconds ("budget_s",
# "median_a_s"). "timeout" and "times" are one word each, so a configured limit or a count is no
# reading.
DURATION_WORDS = {"second", "seconds", "sec", "secs", "elapsed", "duration", "durations", "wall", "took", "time",
                  "perf_counter", "monotonic"}
UNIT_SUFFIXES = {"s", "ms", "us", "ns"}
RATIO_WORDS = {"ratio", "ratios"}             # two readings divided: load can move it either way
SPEED_WORDS = {"speedup", "slowdown"}         # a ratio of readings by its very name
# Timed comparisons that are not wall time, each with the reason it cannot fail on a busy machine:
# {(path relative to the root, the comparison as ast.unparse writes it): why}. None today.
TIMED_ALLOWED: dict[tuple[str, str], str] = {}


def _words(name: str) -> list[str]:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return [name] + [w for w in re.split(r"[_\W]+", name) if w]


def _names(node: ast.AST):
    """The names a comparison's operand reads: variables, attributes and string keys, but not
    what only a len() of it says (a count of durations is no duration)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len":
        return
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
    elif isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            yield key.value   # result["seconds"]
    for child in ast.iter_child_nodes(node):
        yield from _names(child)


def _reading(node: ast.AST) -> str | None:
    """``"ratio"`` for a ratio of wall-clock readings, ``"duration"`` for a reading, else None."""
    words = {w for name in _names(node) for w in _words(name)}
    parts = [_words(name)[1:] for name in _names(node)]
    if words & SPEED_WORDS:
        return "ratio"
    if not (words & DURATION_WORDS or any(len(p) > 1 and p[-1] in UNIT_SUFFIXES for p in parts)):
        return None
    return "ratio" if words & RATIO_WORDS else "duration"


def _constant(node: ast.AST) -> bool:
    """A number written in the test (or arithmetic of numbers, or a module's UPPER_CASE constant)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand)
    if isinstance(node, ast.BinOp):
        return _constant(node.left) and _constant(node.right)
    return isinstance(node, ast.Name) and node.id.isupper()


UPPER = (ast.Lt, ast.LtE)    # left < right: the left side is bounded from above
LOWER = (ast.Gt, ast.GtE)


def timed_assertions(source: str, name: str) -> list[str]:
    """The asserts in ``source`` that hold a wall-clock reading to a number written in the test.

    A duration bounded from above (``elapsed < 5``, ``20 > result["seconds"]``,
    ``time.perf_counter() - t0 <= 2``) fails when the machine is busy, not when the code is
    wrong; so does a ratio of two readings bounded either way (``time_ratio > 1``), since load
    can land on either side. A duration bounded from below (``out.seconds >= 1.5`` after a
    1.5 s timeout) can only grow under load, and an equality with a number (a value read back
    from a recorded run or a fake clock) is no timing, so neither is reported.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        for compare in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
            operands = [compare.left, *compare.comparators]
            for left, op, right in zip(operands, compare.ops, operands[1:]):
                for reading, other, bounded_above in ((left, right, isinstance(op, UPPER)),
                                                      (right, left, isinstance(op, LOWER))):
                    kind = _reading(reading) if _constant(other) else None
                    if kind is None or not isinstance(op, UPPER + LOWER):
                        continue
                    if kind == "ratio" or bounded_above:
                        text = ast.unparse(compare)
                        if (name, text) not in TIMED_ALLOWED:
                            found.append((compare.lineno, f"{name}:{compare.lineno}: assert {text}: a {kind} of "
                                                          "wall-clock time against a fixed number"))
                        break
    return [text for _, text in sorted(set(found))]


def test_no_self_test_asserts_a_wall_clock_time_against_a_number():
    """A self-test that asserts how long something took fails on a busy machine with nothing
    wrong (on a shared 2-core VM, a 5 s budget came out "inconclusive"). Time the decision with
    a fake clock instead, or accept "inconclusive" as the honest answer; benchmarks/ prints
    figures without asserting them."""
    found = []
    for path in sorted((conftest.ROOT / "tests").rglob("*.py")):
        if "__pycache__" not in path.parts:
            rel = str(path.relative_to(conftest.ROOT))
            found += timed_assertions(path.read_text(encoding="utf-8"), rel)
    assert found == []


@pytest.mark.parametrize("line, kind", [
    ("assert elapsed < 5", "duration"),
    ("assert time.perf_counter() - t0 <= 2.0", "duration"),
    ("assert 20 > result['seconds']", "duration"),
    ("assert out.wall_s < 1", "duration"),
    ("assert run['median_a_s'] < BUDGET", "duration"),
    ("assert 0 < took < 3", "duration"),
    ("assert all((d.duration < 0.5 for d in runs))", "duration"),
    ("assert timing_of(x).tookMs <= 100", "duration"),
    ("assert result['time_ratio'] > 1", "ratio"),
    ("assert 0.5 < r.speedup", "ratio"),
])
def test_a_timed_assertion_is_found(line, kind):
    found = timed_assertions(f"def test_x():\n    {line}\n", "t.py")
    assert len(found) == 1 and found[0].startswith("t.py:2: assert ") and f"a {kind} of wall-clock" in found[0]


@pytest.mark.parametrize("line", [
    "assert out.seconds >= 1.5",                        # a lower bound: load only lengthens it
    "assert len(result['durations_a']) == 4",           # a count
    "assert rows[0]['time_ratio'] == 1.0",              # the baseline against itself, exactly
    "assert result['seconds'] == clock.now",            # a fake clock's reading
    "assert result['median_b_s'] < result['median_a_s']",   # two readings, no number
    "assert x.times < 3 and timeout < 5",               # a count and a configured limit
    "assert C.expected_ratio('tf32', 'time', 'mps') is None",
])
def test_what_is_not_a_timed_assertion_is_left_alone(line):
    assert timed_assertions(f"def test_x():\n    {line}\n", "t.py") == []


def test_an_allowed_comparison_is_left_alone_and_every_allowance_still_matters(monkeypatch):
    source = "def test_x():\n    assert elapsed < 5\n"
    monkeypatch.setitem(TIMED_ALLOWED, ("t.py", "elapsed < 5"), "a planted allowance")
    assert timed_assertions(source, "t.py") == []
    monkeypatch.delitem(TIMED_ALLOWED, ("t.py", "elapsed < 5"))
    # each real allowance names a comparison that is still in that file (a stale one hides nothing)
    stale = [key for key in TIMED_ALLOWED
             if key[1] not in {ast.unparse(n) for n in ast.walk(ast.parse((conftest.ROOT / key[0]).read_text(
                 encoding="utf-8"))) if isinstance(n, ast.Compare)}]
    assert stale == []


def _parents_of_file(node: ast.AST) -> int:
    """How many ``.parent`` steps a path expression climbs from ``__file__`` (0 when it does not
    start there): ``Path(__file__).resolve().parent.parent`` climbs 2."""
    steps = 0
    while True:
        if isinstance(node, ast.Attribute):
            steps += node.attr == "parent"
            node = node.value
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and any(isinstance(a, ast.Name) and a.id == "__file__"
                                                       for a in node.args):
                return steps
            node = node.func
        else:
            return 0


def outside_the_repository(source: str, name: str) -> list[str]:
    """Where a self-test reaches for a path outside the repository: above ``ROOT`` (``ROOT.parent``,
    ``ROOT.parents[...]``, ``ROOT / ".."``), or three ``.parent`` steps up from a test file's
    ``__file__`` (tests/x.py, tests/, the root, and then out). A clone has nothing there, so a
    test that reads it skips or fails on every machine but its author's."""
    found = []
    for node in ast.walk(ast.parse(source)):
        climbs = False
        if isinstance(node, ast.Attribute) and node.attr in ("parent", "parents"):
            climbs = isinstance(node.value, ast.Name) and node.value.id == "ROOT" or _parents_of_file(node) >= 3
            climbs = climbs and not (isinstance(node.value, ast.Attribute) and node.value.attr == "parent"
                                     and _parents_of_file(node.value) >= 3)   # report a chain once
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            climbs = (isinstance(node.left, ast.Name) and node.left.id == "ROOT"
                      and isinstance(node.right, ast.Constant) and str(node.right.value).startswith(".."))
        if climbs:
            found.append((node.lineno, f"{name}:{node.lineno}: {ast.unparse(node)} is outside the repository"))
    return [text for _, text in sorted(found)]


def test_no_self_test_reads_outside_the_repository():
    """Everything a self-test reads is in the repository (the source documents the claims quote
    are in tests/fixtures/seeds, the recorded runs in tests/fixtures/recorded), so a clone runs
    them all, and CI, which forbids skips, never meets one for want of a folder beside it."""
    found = []
    for path in sorted((conftest.ROOT / "tests").rglob("*.py")):
        if "__pycache__" not in path.parts:
            found += outside_the_repository(path.read_text(encoding="utf-8"), str(path.relative_to(conftest.ROOT)))
    assert found == []


def test_a_path_outside_the_repository_is_found():
    source = ("SEEDS = ROOT.parent / 'shared' / 'seeds'\nUP = ROOT / '..' / 'data'\nOLD = ROOT.parents[1]\n"
              "HERE = Path(__file__).resolve().parent.parent.parent / 'shared'\n"
              "ROOT2 = Path(__file__).resolve().parent.parent\nFIX = ROOT / 'tests' / 'fixtures'\n")
    assert outside_the_repository(source, "t.py") == [
        "t.py:1: ROOT.parent is outside the repository", "t.py:2: ROOT / '..' is outside the repository",
        "t.py:3: ROOT.parents is outside the repository",
        "t.py:4: Path(__file__).resolve().parent.parent.parent is outside the repository"]
