"""The self-tests' own rules (tests/conftest.py): the quick loop leaves the slow self-tests
out and `--slow` (CI) runs them; where CI forbids skips, a skipped self-test fails with its
reason, so a browser or a tool missing from CI cannot pass unnoticed."""
import pytest

from tests import conftest

EXAMPLE = '''
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
