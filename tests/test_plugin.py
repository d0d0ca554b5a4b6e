"""The pytest wiring, run for real in child pytest processes: targets and markers, usage
errors, the journal (serial, -n 2, a crashing worker, SIGKILL), the process environment."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from harness.core import runfiles
from harness.core.records import SCHEMA
from harness.env import timing
from tests.conftest import ROOT

SYNTHETIC = '''
import os
import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_passes(target, record):
    record.category = "native"
    record.metric(max_abs_err=1.5e-7)

def test_odd_metrics_cross_workers(target, record):
    import torch
    record.metric(err=float("nan"), dtype=torch.bfloat16)

def test_fails(target):
    pytest.fail("wrong <b>answer</b>")

def test_skips(target):
    pytest.skip("not here")

@pytest.mark.xfail(reason="known gap")
def test_xfails(target):
    assert False

@pytest.mark.xfail(reason="was a gap")
def test_xpasses(target):
    pass

def test_setup_errors(target, fixture_that_does_not_exist):
    pass

def test_teardown_errors(target, broken_teardown):
    pass

def test_needs_device(backend):
    pass

def test_sees_the_process_env(target):
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    assert os.environ["PYTORCH_ENABLE_MPS_FALLBACK"] == os.environ["EXPECT_FALLBACK"]
'''
EXPECTED_CPU = {"passes": "pass", "fails": "fail", "skips": "skip", "xfails": "xfail", "xpasses": "xpass",
                "setup_errors": "error", "teardown_errors": "error", "needs_device": "pass",
                "sees_the_process_env": "pass", "odd_metrics_cross_workers": "pass"}


# The toy runs judge no figure, so they take a timing lock of their own (harness.env.timing):
# on the machine-wide one, a check of theirs waited while a perf self-test on the other worker
# measured, and that wait was booked to the check's duration (the warm-up test then failed).
TOY_LOCK = os.path.join(tempfile.gettempdir(), f"mps-compat-toy-runs-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}")


def _env(**extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "EXPECT_FALLBACK": "1", timing.LOCK_VAR: TOY_LOCK, **extra}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def run_pytest(cwd, *args, env=None, timeout=300):
    cmd = [sys.executable, "-m", "pytest", "-p", "harness.plugin.hooks", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "suites" / "env").mkdir(parents=True)
    (tmp_path / "suites" / "env" / "test_synthetic.py").write_text(SYNTHETIC)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "test_not_a_check.py").write_text("def test_plain():\n    pass\n")
    return tmp_path


def records_of(path):
    rf = runfiles.read_file(path)
    assert rf.errors == [], rf.errors
    return rf, [r for run in rf.runs for r in run.records]


def comparable(records):
    return sorted((r["check"], r["target"], r["status"], r["category"], json.dumps(r["metrics"]), r["reason"])
                  for r in records)


def test_every_outcome_is_journaled_once_with_its_status(project):
    run_file = project / "run.jsonl"
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file))
    assert res.returncode == 1, res.stdout + res.stderr
    rf, records = records_of(run_file)
    got = {r["subject"]: r["status"] for r in records}
    assert got == EXPECTED_CPU
    by = {r["subject"]: r for r in records}
    assert by["passes"]["category"] == "native" and by["passes"]["metrics"] == {"max_abs_err": 1.5e-7}
    assert by["fails"]["reason"] == "wrong <b>answer</b>"
    assert by["odd_metrics_cross_workers"]["metrics"] == {"err": "nan", "dtype": "torch.bfloat16"}
    assert by["skips"]["reason"] == "not here"
    assert by["xfails"]["reason"] == "known gap"
    assert by["teardown_errors"]["reason"].startswith("teardown: RuntimeError: teardown broke")
    header = rf.runs[0].header
    assert header["schema"] == SCHEMA and header["facts"]["python"]["version"]
    assert header["mps_fallback"]["setting"] == "on" and header["targets"]["cpu"]["available"]
    assert rf.runs[0].complete and rf.runs[0].end["exitstatus"] == 1
    assert "mps-compat: this run" in res.stdout  # the short matrix at the end of the run


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_run_stopped_by_x_reads_as_stopped_early_though_it_ends_well(project, workers):
    """pytest -x exits 1 and writes its end line; only the end line's counts say that checks
    were never reached (runfiles.Run.complete), so the report and compare call it partial."""
    run_file = project / "run.jsonl"
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file), "-x", *workers)
    stop = 2 if workers else 1     # xdist reports its -x stop as an interruption; pytest alone as failures
    assert res.returncode == stop, res.stdout + res.stderr
    rf, records = records_of(run_file)
    run = rf.runs[0]
    assert run.end["exitstatus"] == stop and run.end["reached"] < run.end["selected"]
    assert len(records) < len(EXPECTED_CPU) and not run.complete
    # the same run whole is complete: serially test_every_outcome_is_journaled_once_with_its_status,
    # on workers test_xdist_gives_the_same_records_as_serial (slow, in CI)


def test_absent_targets_are_skipped_with_an_actionable_reason(project):
    run_file = project / "run.jsonl"
    res = run_pytest(project, "-m", "mps", "--run-file", str(run_file), "-k", "needs_device")
    assert res.returncode == 0, res.stdout + res.stderr
    _, records = records_of(run_file)
    assert [(r["target"], r["status"]) for r in records] == [("mps", "skip")]
    assert records[0]["reason"].startswith("MPS unavailable: this is Linux")


def test_target_markers_select_exactly_that_target(project):
    res = run_pytest(project, "-m", "cuda", "--collect-only", "-q")
    ids = [line for line in res.stdout.splitlines() if "::" in line]
    assert ids and all("[cuda" in i for i in ids), res.stdout


# CUDA is hidden from the child (CUDA_VISIBLE_DEVICES=""), so the case holds on a machine
# with a GPU too: there the reason is that the variable hides every GPU.
@pytest.mark.parametrize("args,says,env", [
    (("--device", "mps"), "--device mps: MPS unavailable: this is Linux", {}),
    (("--device", "cuda"), "--device cuda: CUDA unavailable", {"CUDA_VISIBLE_DEVICES": ""}),
    (("--device", "cpu,tpu"), "--device: unknown target 'tpu'", {}),
    (("--mps-fallback", "maybe"), "--mps-fallback must be one of on, off", {}),
])
def test_usage_errors_are_one_line_and_run_nothing(project, args, says, env):
    run_file = project / "run.jsonl"
    res = run_pytest(project, *args, "--run-file", str(run_file), env=_env(**env))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1 and says in lines[0], res.stderr
    assert "Traceback" not in res.stdout + res.stderr
    assert not run_file.exists()


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["serial", "xdist"])
@pytest.mark.parametrize("args,says", [
    (("-m", "mps and"), "Wrong expression passed to '-m'"),
    (("-m", "mpss", "--strict-markers"), "Unknown marker(s) in '-m' expression: mpss"),
    (("-k", "softmax and ("), "Wrong expression passed to '-k'"),
])
def test_a_bad_selection_is_one_line_before_anything_is_collected(project, args, says, workers):
    """pytest says these only after collecting every suite file, and under xdist every worker
    met them and the controller ended in an INTERNALERROR; the plugin has pytest read them
    first (harness.plugin.hooks.selection_problem)."""
    run_file = project / "run.jsonl"
    res = run_pytest(project, *args, *workers, "--run-file", str(run_file))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1 and says in lines[0], res.stdout[-2000:] + res.stderr
    assert "INTERNALERROR" not in res.stdout + res.stderr and "collecting the checks" not in res.stdout
    assert not run_file.exists()


@pytest.mark.parametrize("option,value,says", [
    ("--run-file", "{blocker}/run.jsonl", "--run-file {blocker}/run.jsonl: cannot write there: {blocker} is not a directory"),
    ("--run-file", "{project}", "cannot write there: it is a directory"),
    ("--save-baseline", "{blocker}/deeper/base.jsonl", "--save-baseline {blocker}/deeper/base.jsonl: cannot write there"),
    ("--compare-out", "{blocker}/cmp.md", "--compare-out {blocker}/cmp.md: cannot write there"),
    ("--check-timeout", "-1", "--check-timeout must be a number of seconds above 0"),
    ("--check-timeout", "0", "not '0'"),
    ("--check-timeout", "nan", "not 'nan'"),
    ("--check-timeout", "soon", "not 'soon'"),
])
def test_a_place_that_cannot_take_the_results_or_a_bad_timeout_is_said_before_anything_runs(project, option, value,
                                                                                          says):
    """Said at the start, not after a long run whose results would then be lost; a run
    file already there keeps every line."""
    blocker = project / "a-file"
    blocker.write_text("not a directory")
    run_file = project / "kept.jsonl"
    run_file.write_bytes(before := b'{"kind": "header", "run": "earlier"}\n')  # an earlier run's lines
    fill = {"blocker": blocker, "project": project}
    args = [option, value.format(**fill)] + (["--run-file", str(run_file)] if option != "--run-file" else [])
    res = run_pytest(project, "--device", "cpu", *args)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1 and says.format(**fill) in lines[0], res.stderr
    assert "Traceback" not in res.stdout + res.stderr and "passed" not in res.stdout
    assert run_file.read_bytes() == before and blocker.read_text() == "not a directory"


BREAKS_ITS_BASELINE_PLACE = '''
import os
from pathlib import Path

def test_removes_the_place(target):
    place = Path(os.environ["PLACE"])
    place.rmdir()
    place.write_text("a file now")
'''


def test_a_baseline_place_that_breaks_during_the_run_is_one_error_line_and_the_run_file_is_kept(project):
    (project / "suites" / "env" / "test_synthetic.py").write_text(BREAKS_ITS_BASELINE_PLACE)
    place, run_file = project / "keep", project / "run.jsonl"
    place.mkdir()
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file),
                     "--save-baseline", str(place / "base.jsonl"), env=_env(PLACE=str(place)))
    assert res.returncode == 1 and "Traceback" not in res.stdout + res.stderr
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("ERROR: --save-baseline")]
    _, records = records_of(run_file)
    assert [(r["subject"], r["status"]) for r in records] == [("removes_the_place", "pass")]


def test_fallback_off_is_set_before_torch_and_recorded(project):
    run_file = project / "run.jsonl"
    res = run_pytest(project, "--device", "cpu", "--mps-fallback", "off", "-k", "process_env",
                     "--run-file", str(run_file), env=_env(EXPECT_FALLBACK="0"))
    assert res.returncode == 0, res.stdout + res.stderr
    rf, _ = records_of(run_file)
    assert rf.runs[0].header["mps_fallback"] == {**rf.runs[0].header["mps_fallback"], "setting": "off",
                                                 "env_value": "0", "effective": True}


@pytest.mark.slow
def test_xdist_gives_the_same_records_as_serial(project):
    serial, parallel = project / "serial.jsonl", project / "parallel.jsonl"
    run_pytest(project, "--run-file", str(serial), "-p", "no:randomly")
    res = run_pytest(project, "-n", "2", "--run-file", str(parallel))
    assert "2 workers" in res.stdout, res.stdout
    _, a = records_of(serial)
    rf, b = records_of(parallel)
    assert res.returncode == 1 and rf.runs[0].complete, rf.runs[0].end   # every check reached (what -x breaks)
    assert len(a) == 3 * len(EXPECTED_CPU)  # every test on every target, nothing twice
    assert comparable(a) == comparable(b)


THREADS = '''
import torch
from harness.env import facts

def test_threads(target, record):
    record.metric(threads=torch.get_num_threads(), facts_threads=facts.current()["torch"]["num_threads"])
'''


@pytest.mark.slow
def test_xdist_workers_compute_on_their_share_of_the_cores_and_the_facts_keep_the_users_count(project):
    """A check computed in the worker itself (the property checks) takes the worker's share of
    the cores, as the sandbox child does; the env facts, which env/threads judges, still say
    the thread count the user's torch starts with."""
    from harness.core.isolate import threads_per_worker
    (project / "suites" / "env" / "test_synthetic.py").write_text(THREADS)
    env = _env()
    env.pop("OMP_NUM_THREADS", None)   # the self-tests' own share (tests/conftest.py) is not the user's
    got = {}
    for how, args in (("serial", ["-p", "no:xdist"]), ("workers", ["-n", "2"])):
        run_file = project / f"{how}.jsonl"
        res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file), *args, env=env)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        (rec,) = records_of(run_file)[1]
        got[how] = rec["metrics"]
    users = got["serial"]["threads"]
    assert got["serial"]["facts_threads"] == got["workers"]["facts_threads"] == users
    assert got["workers"]["threads"] == min(users, threads_per_worker(2)), got


CRASHING = '''
import os
def test_before(target):
    pass
def test_aborts(target):
    os.abort()
def test_after(target):
    pass
'''


def test_a_worker_that_dies_is_recorded_as_crash_and_the_run_goes_on(project):
    (project / "suites" / "env" / "test_synthetic.py").write_text(CRASHING)
    run_file = project / "run.jsonl"
    res = run_pytest(project, "-n", "2", "--device", "cpu", "--run-file", str(run_file))
    _, records = records_of(run_file)
    assert {r["subject"]: r["status"] for r in records} == {"before": "pass", "aborts": "crash", "after": "pass"}, \
        res.stdout
    assert "crashed" in next(r for r in records if r["subject"] == "aborts")["reason"]


HANGING = '''
import os, time
import pytest

@pytest.mark.parametrize("i", range(5))
def test_quick(target, i):
    pass

def test_hangs(target):
    open(os.environ["MARKER"], "w").close()
    time.sleep(600)
'''


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_sigkill_keeps_every_record_written_before_it(project, workers):
    (project / "suites" / "env" / "test_synthetic.py").write_text(HANGING)
    run_file, marker = project / "run.jsonl", project / "hanging"
    cmd = [sys.executable, "-m", "pytest", "-p", "harness.plugin.hooks", "-p", "no:cacheprovider",
           "--device", "cpu", "--run-file", str(run_file), *workers]
    proc = subprocess.Popen(cmd, cwd=project, env=_env(MARKER=str(marker)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = run_file.exists() and run_file.read_text().count('"kind": "check"') >= 5
            if marker.exists() and done:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the hanging check never started")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    rf, records = records_of(run_file)
    assert sorted(r["variant"] for r in records) == ["0", "1", "2", "3", "4"]
    assert all(r["status"] == "pass" for r in records)
    assert not rf.runs[0].complete  # no end line: the reader can tell a cut-off run


def test_tests_outside_suites_write_no_run_file(project):
    run_file = project / "run.jsonl"
    res = run_pytest(project, "other", "--run-file", str(run_file))
    assert res.returncode == 0 and not run_file.exists()


HANGS_ONCE = '''
import time
import pytest

def test_before(target):
    pass

@pytest.mark.timeout(1)
def test_hangs(target):
    time.sleep(60)

def test_after(target):
    pass
'''


def test_a_hanging_check_is_recorded_as_timeout_and_the_run_goes_on(project):
    (project / "suites" / "env" / "test_synthetic.py").write_text(HANGS_ONCE)
    run_file = project / "run.jsonl"
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file))
    _, records = records_of(run_file)
    assert {r["subject"]: r["status"] for r in records} == {"before": "pass", "hangs": "timeout", "after": "pass"}, \
        res.stdout
    assert "Timeout (>1.0s)" in next(r for r in records if r["subject"] == "hangs")["reason"]


def test_torch_imported_before_the_suite_is_recorded_as_not_effective(project):
    (project / "conftest.py").write_text("import torch  # a user conftest that loads torch first\n")
    run_file = project / "run.jsonl"
    res = run_pytest(project, "--device", "cpu", "-k", "passes", "--run-file", str(run_file),
                     env=_env(PYTORCH_ENABLE_MPS_FALLBACK="0"))
    assert res.returncode == 0, res.stdout + res.stderr
    rf, _ = records_of(run_file)
    decision = rf.runs[0].header["mps_fallback"]
    assert decision["effective"] is False and "'0'" in decision["note"]
