"""A baseline's times are measured in fresh processes (suites/perf with ``--save-baseline``, as
``./compat baseline`` runs it), the fastest kept: no later run can measure the old version's
figure again, and a baseline figure a neighbour slowed hid the candidate's real slowdown
(read "faster", or unchanged). The processes of one version also tell the comparison how
widely this machine spreads a time (harness.perf.against.spread).
"""
import json
import os
import subprocess
import sys

import pytest

from harness.core import runfiles
from harness.core.records import Category, Status, Verdict
from harness.perf import against
from tests.conftest import ROOT

CHECK = "perf/softmax/float32/forward"


def _run(median: float) -> dict:
    return {"median_s": median, "ci_low": median * 0.98, "ci_high": median * 1.02}


def test_a_figure_kept_as_a_baseline_says_so_and_keeps_the_fastest_process():
    def judge(run):
        return Verdict(Status.PASS, Category.TIMED, f"{run['median_s'] * 1e3:.3g} ms", dict(run))
    v = against.confirmed([_run(0.016), _run(0.001), _run(0.0011)], judge, for_baseline=True)
    assert v.metrics["median_s"] == 0.001 and v.metrics["confirmation"]["figures_s"] == [0.016, 0.001, 0.0011]
    assert "it is kept as a baseline, so it was measured in 3 processes" in v.message
    assert "looked slower" in against.confirmed([_run(0.002)], judge).message
    assert against.is_time(v) and not against.is_time(Verdict(Status.SKIP, Category.NA, "not timed"))


def test_a_baseline_measures_ops_and_warm_model_calls_again_not_cold_starts_or_new_shapes():
    timed = Verdict(Status.PASS, Category.TIMED, "", _run(1e-3))
    assert against.kept_again("perf/softmax/float32/forward", timed)
    assert against.kept_again("perf/model-gpt2/generate", timed)
    for what in ("cold-start", "cold-inference", "varying-length"):   # several processes already; a difference
        assert not against.kept_again(f"perf/model-gpt2/{what}", timed), what
    assert not against.kept_again("perf/softmax/float32/forward", Verdict(Status.SKIP, Category.NA, "not timed"))


def test_the_baselines_own_processes_say_how_widely_this_machine_spreads_a_time():
    def rec(median, figures=None):
        metrics = {**_run(median), **({"confirmation": {"processes": len(figures), "figures_s": figures}}
                                      if figures else {})}
        return {"check": "perf/x/float32/forward", "category": Category.TIMED, "metrics": metrics}
    pairs = [(rec(1e-3, [1e-3, 1.1e-3, 1.2e-3]), rec(1e-3)) for _ in range(4)]
    assert against.spread(pairs) > 0.05
    assert against.spread([(rec(1e-3), rec(1e-3)) for _ in range(4)]) == 0.0


def _side(tmp_path, side: str, baseline, env: dict, keyword: str):
    report = tmp_path / f"{side}.md"
    ours = ["--baseline-file", str(baseline)] + (["--report", str(report)] if side == "candidate" else [])
    res = subprocess.run([sys.executable, "-m", "tools.upgrade", side, *ours, "--", "-m", "perf and cpu", "-k", keyword,
                          "-p", "no:cacheprovider", "--run-file", str(tmp_path / f"{side}-runs.jsonl")],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=900)
    return res, report


@pytest.mark.slow(seconds=60)
def test_a_baseline_a_neighbour_disturbed_still_shows_the_candidates_slowdown(tmp_path):
    """The baseline's first process computes softmax 64 times over (a neighbour's burst), the
    candidate's softmax truly 16 times over. Measured once, the baseline read the candidate
    "faster" (a warning at best); measured in two processes, the faster kept, it regresses."""
    disturb = tmp_path / "disturb"
    disturb.mkdir()
    baseline = tmp_path / "kept" / "baseline.jsonl"
    env = {"MPS_COMPAT_SANDBOX_PRELOAD": "tests.perf_faults", "MPS_COMPAT_PERF_DISTURB_DIR": str(disturb)}
    kept, _ = _side(tmp_path, "baseline", baseline, {**env, "MPS_COMPAT_PERF_FAULTS": "disturbed:softmax:64"},
                    "softmax-float32-forward")
    assert kept.returncode == 0, kept.stdout[-3000:] + kept.stderr
    (softmax,) = [r for run in runfiles.read_file(baseline).runs for r in run.records if r["check"] == CHECK]
    figures = softmax["metrics"]["confirmation"]["figures_s"]
    assert len(figures) == 1 + against.BASELINE_CONFIRMATIONS and figures[0] > 8 * min(figures[1:]), figures
    assert softmax["metrics"]["median_s"] == pytest.approx(min(figures), rel=1e-3)   # figures_s: rounded to 1 ns
    slow, report = _side(tmp_path, "candidate", baseline, {**env, "MPS_COMPAT_PERF_FAULTS": "slow:softmax"},
                         "softmax-float32-forward")
    found = json.loads(report.with_suffix(".json").read_text())
    flagged = {(c["check"], c["rule"], c["kind"]) for c in found["changes"]}
    assert slow.returncode == 1 and (CHECK, "perf-time", "regression") in flagged, slow.stdout[-3000:]
    # the candidate measures again what looks slower, in as many processes as before; not every figure
    mine = [r for run in runfiles.read_file(tmp_path / "candidate-runs.jsonl").runs for r in run.records
            if r["check"] == CHECK]
    assert len(mine[-1]["metrics"]["confirmation"]["figures_s"]) == 1 + against.CONFIRMATIONS
    assert "looked slower" in mine[-1]["reason"]
