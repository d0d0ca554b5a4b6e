"""harness.report.matrix.version_history on small hand-built matrices: where a check starts to
work, where it last worked, and a fix that follows an earlier breakage."""
import pytest

from harness.report.matrix import Column, Matrix, version_history

CHECK = "ops/softmax/float16/forward"


def column(torch: str, host: str = "studio", target: str = "mps", python: str = "3.11.7") -> Column:
    facts = {"host": host, "torch": {"version": torch}, "python": {"version": python}}
    return Column(f"{host}-py{python}-torch{torch}", target, {"facts": facts}, ["run"], True)


def matrix(results: list[tuple[Column, str]], check: str = CHECK) -> Matrix:
    """One check; each column's cell has the given status (or op category, for the ops keys)."""
    cells = {}
    for col, result in results:
        status, category = ("pass", result) if result == "cpu-fallback" else \
            ("fail", result) if result == "unsupported" else (result, "n/a")
        cells[(check, col.id)] = {"check": check, "suite": check.split("/")[0], "status": status,
                                  "category": category}
    return Matrix([col for col, _ in results], [check], {check.split("/")[0]: [check]}, cells)


def history_of(statuses: dict[str, str]):
    """The history of CHECK on one lineage, the torch versions given as keys."""
    found = version_history(matrix([(column(v), s) for v, s in statuses.items()]))
    assert len(found) <= 1
    return found[0] if found else None


# statuses per torch version -> (first works, last worked, regressions)
CASES = [
    pytest.param({"2.6.0": "fail", "2.8.0": "pass", "2.10.0": "pass"}, ("2.8.0", None, ()), id="fixed-in-2.8"),
    pytest.param({"2.6.0": "pass", "2.8.0": "pass", "2.10.0": "fail"}, (None, "2.8.0", (("2.8.0", "2.10.0"),)),
                 id="broke-in-2.10"),
    pytest.param({"2.6.0": "pass", "2.8.0": "error", "2.10.0": "pass"}, ("2.10.0", None, (("2.6.0", "2.8.0"),)),
                 id="flapping-fixed-after-a-regression"),
    pytest.param({"2.6.0": "fail", "2.8.0": "crash"}, (None, None, ()), id="never-worked-but-changed"),
    pytest.param({"2.6.0": "unsupported", "2.8.0": "cpu-fallback", "2.9.0": "xpass"}, ("2.8.0", None, ()),
                 id="fallback-and-xpass-count-as-working"),
    pytest.param({"2.6.0": "xfail", "2.8.0": "pass"}, ("2.8.0", None, ()), id="xfail-is-not-working"),
    pytest.param({"2.6.0": "pass", "2.8.0": "skip", "2.10.0": "fail"}, (None, "2.6.0", (("2.6.0", "2.10.0"),)),
                 id="skips-are-left-out"),
]


@pytest.mark.parametrize("statuses,expected", CASES)
def test_first_works_and_last_worked(statuses, expected):
    h = history_of(statuses)
    assert (h.first_works, h.last_worked, h.regressions) == expected
    assert h.works_now == (expected[0] is not None)


@pytest.mark.parametrize("statuses", [{"2.6.0": "fail", "2.8.0": "fail"}, {"2.6.0": "pass", "2.8.0": "pass"},
                                      {"2.6.0": "skip", "2.8.0": "pass"}, {"2.8.0": "fail"}],
                         ids=["never-worked-same-way", "always-worked", "one-informative-version", "one-version"])
def test_a_result_that_never_changes_is_not_listed(statuses):
    assert history_of(statuses) is None


def test_versions_are_ordered_numerically_whatever_the_column_order():
    h = history_of({"2.10.0": "pass", "2.9.0": "fail", "2.8.0": "fail"})
    assert [v for v, _ in h.steps] == ["2.8.0", "2.9.0", "2.10.0"] and h.first_works == "2.10.0"
    h = history_of({"2.10.0+cu128": "fail", "2.9.1": "pass"})  # the local build tag is not part of the version
    assert h.steps == (("2.9.1", "pass"), ("2.10.0", "fail")) and h.last_worked == "2.9.1"


def test_hosts_targets_and_pythons_are_separate_lineages():
    results = [(column("2.6.0", "studio", "mps"), "fail"), (column("2.8.0", "studio", "mps"), "pass"),
               (column("2.6.0", "studio", "cpu"), "pass"), (column("2.8.0", "studio", "cpu"), "pass"),
               (column("2.6.0", "linux-ci", "cpu"), "pass"), (column("2.8.0", "linux-ci", "cpu"), "fail"),
               (column("2.6.0", "linux-ci", "cpu", "3.12.1"), "fail")]
    found = {(h.host, h.target, h.python): (h.first_works, h.last_worked) for h in version_history(matrix(results))}
    assert found == {("studio", "mps", "3.11.7"): ("2.8.0", None), ("linux-ci", "cpu", "3.11.7"): (None, "2.6.0")}
