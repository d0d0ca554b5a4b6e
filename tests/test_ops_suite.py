"""The ops suite as pytest runs it: crash and hang isolation, and -n 2 against serial."""
import pytest

from tests.conftest import run_suite

SLICE = "add-float32-forward or sub-float32-forward or mul-float32-forward or softmax or gelu"


def run(tmp_path, *args, env=None):
    return run_suite(tmp_path, "suites/ops/test_ops.py", "ops and cpu", *args, env=env)


@pytest.mark.slow   # the suite in a child pytest with a fault injected: 18 s of the quick loop; CI runs it
def test_a_crashing_and_a_hanging_op_are_recorded_and_the_rest_goes_on(tmp_path):
    res, records = run(tmp_path, "-k", "add-float32-forward or sub-float32-forward or mul-float32-forward",
                       "-p", "tests.sabotage",
                       env={"MPS_COMPAT_SABOTAGE_CRASH": "add", "MPS_COMPAT_SABOTAGE_HANG": "sub"})
    got = {r["subject"]: (r["status"], r["reason"]) for r in records}
    assert res.returncode == 1, res.stdout[-2000:]
    assert got["add"][0] == "crash" and "SIGABRT" in got["add"][1]
    assert got["sub"][0] == "timeout" and "no answer within 2 s" in got["sub"][1]
    assert got["mul"][0] == "pass"


@pytest.mark.slow(seconds=25)
def test_xdist_gives_the_same_op_records_as_serial(tmp_path):
    _, serial = run(tmp_path, "-k", SLICE)
    _, parallel = run(tmp_path, "-k", SLICE, "-n", "2")
    key = lambda recs: sorted((r["check"], r["status"], r["category"], r["metrics"]["samples"],  # noqa: E731
                               tuple(r["metrics"]["fallback_ops"])) for r in recs)
    assert len(serial) > 20 and key(serial) == key(parallel)
    assert {r["category"] for r in serial} == {"native"}
