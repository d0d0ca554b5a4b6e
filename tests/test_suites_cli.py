"""The real suites, as a user runs them on this machine (Linux, no GPU, no Mac)."""
import subprocess
import sys

from harness import journal
from tests.conftest import ROOT


def pytest_suites(tmp_path, *args):
    run_file = tmp_path / "run.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/", "-p", "no:cacheprovider",
                          "--run-file", str(run_file), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return res, run_file


def test_mps_selection_is_all_skipped_with_a_reason_each(tmp_path):
    res, run_file = pytest_suites(tmp_path, "-m", "mps")
    assert res.returncode == 0, res.stdout[-3000:]
    rf = journal.read_file(run_file)
    records = [r for run in rf.runs for r in run.records]
    assert records and rf.errors == []
    assert {r["target"] for r in records} == {"mps"}
    assert all(r["status"] == "skip" and r["reason"] for r in records)


def test_env_suite_runs_for_real_on_cpu(tmp_path):
    res, run_file = pytest_suites(tmp_path, "-m", "env and cpu")
    assert res.returncode == 0, res.stdout[-3000:]
    records = [r for run in journal.read_file(run_file).runs for r in run.records]
    statuses = {r["subject"]: r["status"] for r in records}
    assert statuses["threads"] == "pass" and statuses["tokenizers-native"] == "pass"
    assert "mps-compat: this run" in res.stdout


def test_naming_the_absent_mps_device_is_a_usage_error(tmp_path):
    res, run_file = pytest_suites(tmp_path, "--device", "mps")
    assert res.returncode == 4 and not run_file.exists()
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        next(ln for ln in res.stderr.splitlines() if ln.startswith("ERROR: --device mps: MPS unavailable"))]
