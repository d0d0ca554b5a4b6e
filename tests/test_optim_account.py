"""benchmarks/optim_account.py: where an optimization-suite run's seconds went.

Read on the H100 run recorded on 2026-11-24 (cut off at its limit: a lower bound, with the
seconds of the check running then unrecorded) and on a small run file whose timing family
says where its seconds went; bad input is one line and exit 2."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.core import runfiles
from harness.env.facts import env_id
from tests.conftest import load_facts

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "optim_account.py"
FACTS = load_facts("linux_x86_64")
H100 = ROOT / "tests" / "fixtures" / "recorded" / "h100-torch2.11-2026-11-24" / "optim-after.jsonl.gz"


def account(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_h100_run_is_a_cut_off_lower_bound_led_by_the_family():
    res = account(H100)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "28 of 61 selected optim checks recorded, cut off (pytest exit 2)" in out
    assert "lower bound: the checks after it are not in the file (33 of them)" in out
    assert "budget 600 s: not shown to fit: it was cut off before its end" in out
    assert "wall 536 s" in out and "outside the recorded checks: 172 s" in out and "lower bound" in out
    longest = out.split("longest checks")[1].splitlines()[2]
    assert longest.split()[:3] == ["optim/gradient-accumulation/time", "xfail", "239"], longest


def record(check: str, seconds: float, **metrics) -> dict:
    suite, subject, *variant = check.split("/")
    return {"kind": "check", "run": "r1", "check": check, "suite": suite, "subject": subject,
            "variant": "/".join(variant), "target": "cuda", "status": "pass", "category": "holds",
            "metrics": metrics, "reason": "", "duration_s": seconds}


def test_a_family_s_seconds_are_split_into_timing_building_and_the_rest(tmp_path):
    family = {"rounds": 6, "seconds": 100.0, "build_s": 30.0, "together": True,
              "warmup_s": {"baseline": [2.0, 0.2], "gradient-checkpointing": [5.0, 4.0]},
              "pairs": {"gradient-checkpointing": {"rounds": 6, "seconds": 40.0, "category": "holds",
                                                   "stopped": "decided"}}}
    path = tmp_path / "run.jsonl"
    w = runfiles.Writer(path)   # written as the suites write one, read back by their reader
    w.write({**runfiles.header("r1", env_id(FACTS), FACTS), "started": "2026-11-25T00:00:00+00:00"})
    for rec in (record("optim/gradient-accumulation/time", 140.0, family=family, rounds=6, workload="large"),
                record("optim/torch-compile/time", 200.0, rounds=10, median_b_s=0.1, warmup_b_s=[150.0, 0.1]),
                record("optim/controls/memory-sees-allocation", 5.0)):
        w.write(rec)
    w.write({"kind": "end", "run": "r1", "finished": "2026-11-25T00:06:00+00:00", "exitstatus": 0})
    w.close()
    out = account(path, "--budget", "300").stdout
    assert "wall 360 s" in out and "budget 300 s: over by 60 s" in out
    assert "140 s = 100 s timing (6 rounds of every row, their warm-ups included) + 30 s building the rows + " \
           "10 s else" in out
    compile_row = next(line for line in out.splitlines() if line.startswith("optim/torch-compile/time"))
    assert "150" in compile_row.split()   # the variant's first call: the compile


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "bad.jsonl").write_text("not json\n")
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    for path in (tmp_path / "missing.jsonl", tmp_path / "bad.jsonl", tmp_path / "bad.jsonl.gz"):
        res = account(path)
        assert res.returncode == 2 and res.stdout == "" and res.stderr.count("\n") == 1, res.stderr


def test_the_whole_suite_on_an_h100_fits_the_budget_with_the_family_first():
    """The recording of 2026-11-28: the 61 checks ended on an H100 within the 600 s the issue
    gives the suite, and the account says how much was left and what took the most."""
    res = account(ROOT / "tests" / "fixtures" / "recorded" / "h100-torch2.11-2026-11-28" / "optim.jsonl.gz")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "61 of 61 selected optim checks recorded, ended (pytest exit 0)" in out
    assert "checks' seconds 462, wall 458 s (header to end line); budget 600 s: within, 142 s to spare" in out
    longest = out.split("longest checks")[1].splitlines()[2]
    assert longest.split()[:3] == ["optim/gradient-accumulation/time", "xfail", "199"], longest
