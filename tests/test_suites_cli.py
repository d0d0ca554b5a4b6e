"""The real suites, as a user runs them on this machine (Linux, no GPU, no Mac)."""
import subprocess
import sys

import pytest

from harness.core import runfiles
from tests.conftest import ROOT


def pytest_suites(tmp_path, *args):
    run_file = tmp_path / "run.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/", "-p", "no:cacheprovider",
                          "--run-file", str(run_file), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return res, run_file


@pytest.mark.slow
def test_mps_selection_is_all_skipped_with_a_reason_each(tmp_path):
    res, run_file = pytest_suites(tmp_path, "-m", "mps")
    assert res.returncode == 0, res.stdout[-3000:]
    rf = runfiles.read_file(run_file)
    records = [r for run in rf.runs for r in run.records]
    assert records and rf.errors == []
    assert {r["target"] for r in records} == {"mps"}
    assert all(r["status"] == "skip" and r["reason"] for r in records)


def test_env_suite_runs_for_real_on_cpu(tmp_path):
    res, run_file = pytest_suites(tmp_path, "-m", "env and cpu")
    assert res.returncode == 0, res.stdout[-3000:]
    records = [r for run in runfiles.read_file(run_file).runs for r in run.records]
    statuses = {r["subject"]: r["status"] for r in records}
    assert statuses["threads"] == "pass" and statuses["tokenizers-native"] == "pass"
    assert "mps-compat: this run" in res.stdout


def test_naming_the_absent_mps_device_is_a_usage_error(tmp_path):
    res, run_file = pytest_suites(tmp_path, "--device", "mps")
    assert res.returncode == 4 and not run_file.exists()
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        next(ln for ln in res.stderr.splitlines() if ln.startswith("ERROR: --device mps: MPS unavailable"))]


@pytest.mark.slow
def test_a_kept_baseline_passes_an_unchanged_rerun(tmp_path):
    kept = tmp_path / "baseline.jsonl"
    res, _ = pytest_suites(tmp_path, "-m", "env and cpu", "--save-baseline", str(kept))
    assert res.returncode == 0 and kept.exists(), res.stdout[-3000:]
    again, _ = pytest_suites(tmp_path, "-m", "env and cpu", "--baseline", str(kept))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "mps-compat: against the baseline" in again.stdout and "0 regression(s)" in again.stdout


def test_a_bad_baseline_is_a_usage_error_before_anything_runs(tmp_path):
    truncated = tmp_path / "cut.jsonl"
    truncated.write_text('{"kind": "header", "schema": 1, "run": "r", "env_id": "e", "fac')
    for path, says in ((tmp_path / "missing.jsonl", "no such file"), (truncated, "truncated last line")):
        res, run_file = pytest_suites(tmp_path, "-m", "env and cpu", "--baseline", str(path))
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 4 and not run_file.exists(), res.stderr
        assert len(lines) == 1 and lines[0].startswith("ERROR: --baseline: ") and says in lines[0]


def test_an_unwritable_baseline_is_a_usage_error_before_anything_runs(tmp_path):
    """Said at the start: the run's results would have nowhere to go. (A place that breaks
    during the run: tests/test_plugin.py.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res, run_file = pytest_suites(tmp_path, "-m", "env and cpu", "--save-baseline", str(blocker / "baseline.jsonl"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and not run_file.exists() and "Traceback" not in res.stdout + res.stderr
    assert len(lines) == 1 and lines[0].startswith("ERROR: --save-baseline ") and "is not a directory" in lines[0]
