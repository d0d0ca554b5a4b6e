"""The controls (known-answer checks of each suite's instruments, harness/env/instruments.py and
its siblings), each shown to hold where its instrument works and to fail, naming itself,
where that instrument is broken.

Works: the CPU, and the emulated Mac (standin-mps, tests/emulated_mps.py). Broken: the
emulated Mac's variant that breaks the one instrument a control watches (fallback warnings
swallowed, the warning once per process whatever warn-always says, an empty kernel table,
frozen memory readings, a synchronize that leaves the queue, results 1% off), or for the
parity judge, which is the harness's own code, a fault in the harness (tests/instrument_faults.py:
its tolerance widened a million-fold, its reference computed in the case's dtype). A control
that watches more than one instrument fails on each one's variant (``ALSO_BROKEN``: a peak
whose reset does nothing, a driver reading that never moves, a clock that reads zero).

The controls are called here as the sandbox child calls them, in this process; the plugin's
part (records, the one-line failure, -k keeping the controls and running them first, the
faults reaching the sandbox child) is run end to end in child pytest processes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.core.records import REASON_MAX, Category, RecordKind, Status
from harness.env import devices, instruments, timing
from harness.ops import controls as ops_controls
from harness.optim import controls as optim_controls
from harness.parity import controls as parity_controls
from tests import instrument_faults
from tests import standins  # noqa: F401  (registers the stand-ins, the emulated Mac among them)
from tests.conftest import ROOT

FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"
WORKS = ("cpu", "standin-mps")


def perf_timing(target):
    return instruments.timing_sees_queued_work(target, "clock", alone=True)


# (suite, control) -> (the sandbox child's entry, what breaks it: a broken variant of the
# emulated Mac, or "fault:<kind>" of tests/instrument_faults.py)
CONTROLS = {
    ("ops", "fallback-seen"): (ops_controls.fallback_seen, "standin-mps-mute"),
    ("ops", "native-seen"): (ops_controls.native_seen, "standin-mps-nokernels"),
    ("ops", "fallback-seen-again"): (ops_controls.fallback_seen_again, "standin-mps-once"),
    ("parity", "exact-passes"): (parity_controls.exact_passes, "standin-mps-skewed"),
    ("parity", "perturbed-fails"): (parity_controls.perturbed_fails, "fault:tolerance"),
    ("parity", "reference-float64-cpu"): (parity_controls.reference_float64_cpu, "fault:reference"),
    ("optim", "memory-sees-allocation"): (optim_controls.memory_sees_allocation, "standin-mps-frozen"),
    ("optim", "timing-sees-queued-work"): (optim_controls.timing_sees_queued_work, "standin-mps-blind"),
    ("optim", "smaller-batch-lowers-memory"): (optim_controls.smaller_batch_lowers_memory, "standin-mps-frozen"),
    ("perf", "memory-sees-allocation"): (optim_controls.memory_sees_allocation, "standin-mps-frozen"),
    ("perf", "timing-sees-queued-work"): (perf_timing, "standin-mps-blind"),
}
IDS = [f"{suite}-{name}" for suite, name in CONTROLS]
# The other instruments a control watches, each broken by a variant of its own: the memory
# controls read the peak after a reset and MPS's driver reading besides the current one; the
# timing controls must not take a clock that reads zero (a ratio of zeros) for one that works.
ALSO_BROKEN = {
    ("optim", "memory-sees-allocation"): ("standin-mps-stale-peak", "standin-mps-frozen-driver"),
    ("perf", "memory-sees-allocation"): ("standin-mps-stale-peak", "standin-mps-frozen-driver"),
    ("optim", "timing-sees-queued-work"): ("standin-mps-zeroclock",),
    ("perf", "timing-sees-queued-work"): ("standin-mps-zeroclock",),
}
ALSO = [(key, breaks) for key, variants in ALSO_BROKEN.items() for breaks in variants]
# what each of those variants makes the control say it saw
ALSO_SEEN = {"standin-mps-stale-peak": " (not reset)",
             "standin-mps-frozen-driver": "driver +0.0 MiB",
             "standin-mps-zeroclock": "readings of zero or no number"}


@pytest.fixture(autouse=True)
def fallback_on_and_a_lock_of_our_own(monkeypatch, tmp_path):
    """The fallback on, as a run's default (the emulated Mac reads it at each call); a timing
    lock of this test's own, so a perf measurement of another session does not hold it up."""
    monkeypatch.setenv(FALLBACK_VAR, "1")
    monkeypatch.setenv(timing.LOCK_VAR, str(tmp_path / "timing"))


def run(entry, target: str, breaks: str | None = None):
    """The control on ``target``, as its record's verdict; with the harness fault ``breaks``
    ("fault:<kind>") in force."""
    if breaks and breaks.startswith("fault:"):
        with instrument_faults.applied(breaks.removeprefix("fault:")):
            return instruments.verdict(entry(target))
    return instruments.verdict(entry(target))


def the_record_is_a_control(verdict, name: str) -> None:
    assert verdict.category == Category.CONTROL
    assert verdict.metrics["record_kind"] == RecordKind.CONTROL and verdict.metrics["control"] == name
    assert verdict.metrics["expected"] and verdict.metrics["seen"]


@pytest.mark.parametrize("where", WORKS)
@pytest.mark.parametrize("key", list(CONTROLS), ids=IDS)
def test_a_control_holds_where_its_instrument_works(key, where):
    entry, _ = CONTROLS[key]
    verdict = run(entry, where)
    assert verdict.status == Status.PASS, f"{key[1]} on {where}: {verdict.message or verdict.metrics['seen']}"
    the_record_is_a_control(verdict, key[1])


@pytest.mark.parametrize("key", list(CONTROLS), ids=IDS)
def test_a_control_fails_naming_itself_where_its_instrument_is_broken(key):
    entry, breaks = CONTROLS[key]
    target = "cpu" if breaks.startswith("fault:") else breaks
    verdict = run(entry, target, breaks)
    assert verdict.status == Status.FAIL, f"{key[1]} on {breaks}: {verdict.status}: {verdict.metrics['seen']}"
    assert verdict.message.startswith(f"instrument not trustworthy here: {key[1]}: expected ")
    assert ", saw " in verdict.message and "\n" not in verdict.message
    assert len(verdict.message) <= REASON_MAX, "the record would cut the cause and the switch off"
    the_record_is_a_control(verdict, key[1])


@pytest.mark.parametrize("key,breaks", ALSO, ids=[f"{s}-{n}-{b.removeprefix('standin-mps-')}" for (s, n), b in ALSO])
def test_a_control_fails_naming_itself_where_another_of_its_instruments_is_broken(key, breaks):
    """A peak counter whose reset does nothing, a driver reading frozen while the current one
    moves, a clock that reads zero: each one instrument of a control that watches several; the
    control fails on it, naming itself and what it saw. (Before: the memory controls held on the
    first two, as their allocation after the reset was no larger than the one before it and the
    driver reading was read but not judged; the timing controls held on the third, "infx".)"""
    entry, _ = CONTROLS[key]
    if breaks == "standin-mps-stale-peak" and not devices.backend(breaks).reset_peak():
        pytest.skip("this torch's MPS keeps no peak counter (torch.accelerator's serve MPS from 2.13): nothing to reset")
    verdict = run(entry, breaks)
    assert verdict.status == Status.FAIL, f"{key[1]} on {breaks}: {verdict.status}: {verdict.metrics['seen']}"
    assert verdict.message.startswith(f"instrument not trustworthy here: {key[1]}: expected ")
    assert ALSO_SEEN[breaks] in verdict.metrics["seen"], verdict.metrics["seen"]
    assert "\n" not in verdict.message and len(verdict.message) <= REASON_MAX
    the_record_is_a_control(verdict, key[1])


@pytest.mark.parametrize("kind", instrument_faults.KINDS)
def test_a_harness_fault_breaks_its_control_on_the_emulated_mac_too_and_no_other(kind):
    """The parity judge's faults are the harness's, not the device's: they break their control
    on any target, and leave the control that watches something else holding."""
    broken = {"tolerance": "perturbed-fails", "reference": "reference-float64-cpu"}[kind]
    for (suite, name), (entry, _) in CONTROLS.items():
        if suite != "parity":
            continue
        verdict = run(entry, "standin-mps", f"fault:{kind}")
        assert verdict.status == (Status.FAIL if name == broken else Status.PASS), (kind, name, verdict.message)


def test_with_the_fallback_off_an_op_without_a_kernel_must_raise(monkeypatch):
    """The fallback off: fallback-seen asks for MPS's NotImplementedError (unsupported), the
    emulated Mac raises it, and a device whose missing kernels run silently fails;
    fallback-seen-again does not apply and says why."""
    monkeypatch.setenv(FALLBACK_VAR, "0")
    held = run(ops_controls.fallback_seen, "standin-mps")
    assert held.status == Status.PASS and held.metrics["category_seen"] == Category.UNSUPPORTED
    mute = run(ops_controls.fallback_seen, "standin-mps-mute")
    assert mute.status == Status.FAIL and "NotImplementedError" in mute.metrics["expected"]
    again = run(ops_controls.fallback_seen_again, "standin-mps")
    assert again.status == Status.SKIP and "fallback is off" in again.message and "--mps-fallback on" in again.message


def test_the_ops_controls_pick_their_ops_from_the_kernel_table():
    """The ops are the table's answer, not a guess: on MPS one without a kernel (and with a CPU
    kernel for the fallback to run), one with; on the CPU and CUDA, ones without their kernel."""
    table = ops_controls.kernels.load_installed().table
    for rules, key in (("mps", "MPS"), ("cpu", "CPU"), ("cuda", "CUDA")):
        missing, native = ops_controls.pick(table, rules, False), ops_controls.pick(table, rules, True)
        assert missing is not None and native is not None, rules
        assert not ops_controls.has_kernel(table, missing.aten, rules) and not table[missing.aten]["composite"]
        assert ops_controls.has_kernel(table, native.aten, rules)
        if key == "MPS":   # the fallback runs the op on the CPU: it must have a CPU kernel
            assert "CPU" in ops_controls.kernel_keys(table, missing.aten)
    assert ops_controls.pick({}, "mps", False) is None


def test_an_op_table_without_a_missing_kernel_skips_with_the_reason(monkeypatch):
    table = ops_controls.kernels.load_installed().table
    every = {name: {**row, "mps": True, "dispatch_keys": [*row["dispatch_keys"], "CPU", "CUDA", "MPS"]}
             for name, row in table.items()}
    monkeypatch.setattr(ops_controls, "_table", lambda: (every, "a table where every op has every kernel"))
    verdict = run(ops_controls.fallback_seen, "cpu")
    assert verdict.status == Status.SKIP and "lacks a CPU kernel" in verdict.message
    assert "every op has every kernel" in verdict.message


def test_a_timer_that_reads_nothing_fails_and_a_busy_machine_is_inconclusive():
    """The timing judge by its figures: under the floor with the small job never reaching the
    calibration time is the timer's fault; under the floor with steady readings at any size (the
    machine's stalls, both sides alike) is no verdict, never a failure."""
    def attempt(calibrated, small, large, share=1.0):
        return {"n": 512, "calibrated": calibrated, "calibration_small_s": small, "small_s": [small] * 5,
                "large_s": [large] * 5, "cpu_share": share}
    blind = instruments.timing_judged({"matmuls": 4, "on_cpu": True, "attempts": [attempt(False, 1e-4, 1.1e-4)]})
    assert blind.held is False and "at the largest size, under 3 ms" in blind.seen
    assert "returns before the device has worked" in blind.cause
    stalled = instruments.timing_judged({"matmuls": 4, "on_cpu": True, "attempts": [attempt(True, 0.09, 0.095)] * 3})
    assert stalled.held is None and stalled.seen.startswith("inconclusive")
    starved = instruments.timing_judged({"matmuls": 4, "on_cpu": True,
                                         "attempts": [attempt(True, 0.09, 0.12, share=0.2)]})
    assert starved.held is None and "had the CPU 20%" in starved.seen
    fine = instruments.timing_judged({"matmuls": 4, "on_cpu": True, "attempts": [attempt(True, 0.005, 0.04)]})
    assert fine.held is True


@pytest.mark.parametrize("small,large", [(0.0, 0.0), (0.0, 0.04), (0.005, 0.0), (float("nan"), 0.04),
                                         (0.005, float("inf")), (-1e-3, 0.04)],
                         ids=["zero", "small-zero", "large-zero", "nan", "inf", "negative"])
def test_a_timer_that_reads_zero_or_no_number_fails_before_any_ratio(small, large):
    """A median that is not a finite time above zero fails, named, with the cause and the switch,
    calibrated or not: the ratio of two zeros is no evidence (before, a small job of 0 made the
    ratio infinite and the control held, "infx"). No ratio is recorded for it."""
    for calibrated in (False, True):
        attempt = {"n": 512, "calibrated": calibrated, "calibration_small_s": 0.0 if not calibrated else 0.004,
                   "small_s": [small] * 5, "large_s": [large] * 5, "cpu_share": 1.0}
        seen = instruments.timing_judged({"matmuls": 4, "on_cpu": True, "attempts": [attempt]})
        assert seen.held is False and seen.name == instruments.TIMING, (small, large, calibrated, seen.seen)
        assert seen.seen.endswith("readings of zero or no number") and "infx" not in seen.seen
        assert seen.cause == instruments.TIMING_ZERO_CAUSE and "reads zero or no number" in seen.cause and seen.switch
        assert seen.figures["ratio"] is None
        verdict = instruments.verdict(seen)
        assert verdict.message.startswith(f"instrument not trustworthy here: {instruments.TIMING}: expected ")
        assert len(verdict.message) <= REASON_MAX


def test_an_uncalibrated_attempt_fails_whatever_its_ratio():
    """A small job that never read the calibration time at the largest size fails, even where
    its twin read 8x as long: a timer reading a thousandth of the time (the wrong unit) keeps
    the ratio (before, such an attempt held on its ratio alone)."""
    attempt = {"n": 4096, "calibrated": False, "calibration_small_s": 4e-5, "small_s": [4e-5] * 5,
               "large_s": [3.2e-4] * 5, "cpu_share": 1.0}
    seen = instruments.timing_judged({"matmuls": 4, "on_cpu": False, "attempts": [attempt]})
    assert seen.held is False and "at the largest size, under 3 ms" in seen.seen and seen.seen.startswith("8.00x")


def test_the_cpu_target_calibrates_past_the_stand_ins_cap():
    """An uncalibrated attempt fails, so the CPU target itself climbs past the stand-ins' cap
    (a CPU core with a matrix unit runs four 512 x 512 matmuls in about 1 ms); a stand-in on
    this CPU stops there, a device goes on to the largest size."""
    assert max(instruments._sizes("cpu")) == instruments.HOST_CAP > instruments.CPU_CAP
    assert max(instruments._sizes("standin-mps")) == instruments.CPU_CAP
    assert max(instruments._sizes("cuda")) == instruments.SIZES[-1]


def test_the_memory_judge_takes_ten_percent_and_says_what_moved():
    base = {"allocated_bytes": 64 * 2 ** 20, "current_before": 10, "keeps_peak": True, "reading": "r",
            "driver_before": None, "driver_after": None, "current_freed": 10}
    near = instruments.memory_judged({**base, "current_after": 10 + 60 * 2 ** 20, "peak_after": 10 + 70 * 2 ** 20})
    assert near.held is True
    peak_stuck = instruments.memory_judged({**base, "current_after": 10 + 64 * 2 ** 20, "peak_after": 10})
    assert peak_stuck.held is False and "peak +0.0 MiB" in peak_stuck.seen
    none = instruments.memory_judged({**base, "current_before": None, "current_after": None, "peak_after": None})
    assert none.held is None


def test_the_memory_judge_needs_a_reset_peak_and_a_driver_reading_that_grows():
    """The peak after a reset that follows a block twice the allocation: a reset that did
    nothing reads that block, and fails saying so. MPS's driver reading counts whole heaps: it
    must grow by at least the allocation (less 10%) while it is held, by more is fine (a 1 GiB
    heap for 64 MiB on a Mac); frozen, it fails. Where the device offers none, it is not judged."""
    n = 64 * 2 ** 20
    base = {"allocated_bytes": n, "current_before": 10, "current_after": 10 + n, "keeps_peak": True,
            "peak_after": 10 + n, "reading": "mps allocated memory", "driver_before": 500 * 2 ** 20,
            "driver_after": 500 * 2 ** 20 + n, "current_freed": 10, "stale_bytes": 2 * n}
    assert instruments.memory_judged(base).held is True
    heap = instruments.memory_judged({**base, "driver_after": 500 * 2 ** 20 + 2 ** 30})
    assert heap.held is True and "driver +1024.0 MiB" in heap.seen
    stale = instruments.memory_judged({**base, "peak_after": 10 + 2 * n})
    assert stale.held is False and "peak +128.0 MiB (not reset)" in stale.seen
    frozen = instruments.memory_judged({**base, "driver_after": base["driver_before"]})
    assert frozen.held is False and "driver +0.0 MiB" in frozen.seen
    assert "driver (at least)" in frozen.expected and frozen.figures["driver_moved"] == 0
    short = instruments.memory_judged({**base, "driver_after": base["driver_before"] + n // 2})
    assert short.held is False
    none = instruments.memory_judged({**base, "driver_before": None, "driver_after": None})
    assert none.held is True and "driver" not in none.seen and "driver" not in none.expected


def test_every_suite_that_measures_a_device_has_its_controls_on_every_target():
    """The public ids (``<suite>/controls/<name>``) on the real targets and every registered
    stand-in; the env suite reads facts and has none."""
    from harness.env import devices
    names = {suite: {c.name for c in table} for suite, table in (
        ("ops", ops_controls.cases()), ("parity", parity_controls.cases()), ("optim", optim_controls.cases()))}
    assert names == {"ops": {"fallback-seen", "native-seen", "fallback-seen-again", "in-kernel-fallback-seen"},
                     "parity": {"exact-passes", "perturbed-fails", "reference-float64-cpu"},
                     "optim": {"memory-sees-allocation", "timing-sees-queued-work", "smaller-batch-lowers-memory"}}
    for case in ops_controls.cases() + parity_controls.cases() + optim_controls.cases():
        assert case.subject == "controls" and case.variant == case.name and case.id == f"controls-{case.name}"
        assert set(case.targets) == set(devices.TARGETS) | set(devices.STAND_INS)
    assert not (ROOT / "suites" / "env" / "test_env_controls.py").exists()


# --------------------------------------------------------------------------- the plugin's part

SYNTHETIC = '''
import pytest
from harness.env import instruments

class Case:
    def __init__(self, subject, variant):
        self.subject, self.variant, self.id = subject, variant, f"{subject}-{variant}"
        self.targets = ("cpu", "cuda", "mps")

CASES = [Case("alpha", "one"), Case("beta", "two"),
         instruments.ControlCase("first-control", "x:y", ("cpu", "cuda", "mps")),
         instruments.ControlCase("second-control", "x:y", ("cpu", "cuda", "mps"))]

@pytest.mark.cases(CASES)
def test_check(case, target, record):
    pass
'''


def run_pytest(cwd, *args, env=None, timeout=600):
    env = {**os.environ, "PYTHONPATH": str(ROOT), FALLBACK_VAR: "1", **(env or {})}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def synthetic(tmp_path):
    (tmp_path / "suites" / "ops").mkdir(parents=True)
    (tmp_path / "suites" / "ops" / "test_synthetic.py").write_text(SYNTHETIC)
    return tmp_path


def collected(out: str) -> list[str]:
    return [line.split("::", 1)[1] for line in out.splitlines() if "::" in line]


def test_k_and_m_keep_a_suites_controls_where_its_checks_run_and_they_run_first(synthetic):
    done = run_pytest(synthetic, "-p", "harness.plugin.hooks", "suites", "--co", "-q", "--device", "cpu",
                      "-k", "beta")
    assert done.returncode == 0, done.stdout + done.stderr
    assert collected(done.stdout) == ["test_check[cpu-controls-first-control]",
                                      "test_check[cpu-controls-second-control]", "test_check[cpu-beta-two]"]
    assert "2 controls kept beside the -k / -m selection" in done.stdout
    assert "3/4 tests collected (1 deselected)" in done.stdout   # the kept controls are not counted deselected
    marked = run_pytest(synthetic, "-p", "harness.plugin.hooks", "suites", "--co", "-q", "-m", "ops and cpu",
                        "-k", "alpha or second")
    assert collected(marked.stdout) == ["test_check[cpu-controls-first-control]",
                                        "test_check[cpu-controls-second-control]", "test_check[cpu-alpha-one]"]


def test_no_control_is_added_where_no_check_of_its_suite_runs_and_deselect_is_obeyed(synthetic):
    none = run_pytest(synthetic, "-p", "harness.plugin.hooks", "suites", "--co", "-q", "--device", "cpu",
                      "-k", "nothing-matches-this")
    assert collected(none.stdout) == [] and "kept beside" not in none.stdout
    named = run_pytest(synthetic, "-p", "harness.plugin.hooks", "suites", "--co", "-q", "--device", "cpu", "-k",
                       "alpha", "--deselect", "suites/ops/test_synthetic.py::test_check[cpu-controls-first-control]")
    assert collected(named.stdout) == ["test_check[cpu-controls-second-control]", "test_check[cpu-alpha-one]"]


@pytest.fixture
def split(tmp_path):
    """The synthetic suite with its controls in a module of their own, as the real suites keep them."""
    (tmp_path / "suites" / "ops").mkdir(parents=True)
    head, cases = SYNTHETIC.split("CASES = ")
    checks, controls = cases.split("\n         instruments.ControlCase", 1)
    (tmp_path / "suites" / "ops" / "test_synthetic.py").write_text(
        head + "CASES = " + checks.rstrip(", ") + "]\n" + cases.split("]\n", 1)[1])
    (tmp_path / "suites" / "ops" / "test_synthetic_controls.py").write_text(
        head + "CASES = [instruments.ControlCase" + controls)
    return tmp_path


def test_a_run_of_one_file_or_one_check_of_a_suite_opens_with_that_suites_controls(split):
    """Naming a suite's file, or one check in it, collects the suite's controls module too, so
    the run opens with them (as a run of the whole suite does); a path that names the controls or
    their folder adds nothing, and --deselect still takes them out."""
    plain = run_pytest(split, "-p", "harness.plugin.hooks", "suites", "--co", "-q", "--device", "cpu")
    assert plain.returncode == 0, plain.stdout + plain.stderr
    assert "collected beside the named paths" not in plain.stdout
    one_file = run_pytest(split, "-p", "harness.plugin.hooks", "suites/ops/test_synthetic.py", "--co", "-q",
                          "--device", "cpu", "-k", "beta")
    assert collected(one_file.stdout) == ["test_check[cpu-controls-first-control]",
                                          "test_check[cpu-controls-second-control]", "test_check[cpu-beta-two]"]
    assert ("collected beside the named paths, so that the run opens with their suites' controls: "
            "suites/ops/test_synthetic_controls.py") in one_file.stdout
    one_check = run_pytest(split, "-p", "harness.plugin.hooks", "suites/ops/test_synthetic.py::test_check[cuda-alpha-one]",
                           "--co", "-q")
    # the controls of the one target a check was named on; the others' are deselected, not run
    assert collected(one_check.stdout) == ["test_check[cuda-controls-first-control]",
                                           "test_check[cuda-controls-second-control]", "test_check[cuda-alpha-one]"]
    assert "3/7 tests collected (4 deselected)" in one_check.stdout
    refused = run_pytest(split, "-p", "harness.plugin.hooks", "suites/ops/test_synthetic.py", "--co", "-q",
                         "--device", "cpu", "--deselect", "suites/ops/test_synthetic_controls.py")
    assert collected(refused.stdout) == ["test_check[cpu-alpha-one]", "test_check[cpu-beta-two]"]
    named = run_pytest(split, "-p", "harness.plugin.hooks", "suites/ops/test_synthetic.py",
                       "suites/ops/test_synthetic_controls.py::test_check[cpu-controls-second-control]",
                       "--co", "-q", "--device", "cpu")
    assert collected(named.stdout) == ["test_check[cpu-controls-second-control]", "test_check[cpu-alpha-one]",
                                       "test_check[cpu-beta-two]"]
    assert "collected beside" not in named.stdout


def test_the_controls_collected_beside_a_named_file_run_first_and_the_header_keeps_the_users_paths(split):
    done = run_pytest(split, "-p", "harness.plugin.hooks", "suites/ops/test_synthetic.py", "--device", "cpu",
                      "-k", "alpha", "--run-file", str(split / "run.jsonl"))
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [json.loads(line) for line in (split / "run.jsonl").read_text().splitlines()]
    header = next(r for r in lines if r.get("kind") == "header")
    assert header["selection"]["args"] == ["suites/ops/test_synthetic.py"]
    assert [r["check"] for r in lines if r.get("kind") == "check"] == [
        "ops/controls/first-control", "ops/controls/second-control", "ops/alpha/one"]


def records_of(path) -> dict[str, dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {r["check"]: r for r in lines if r.get("kind") == "check"}


@pytest.mark.slow
def test_a_broken_emulated_mac_fails_its_control_in_one_line_and_the_record_says_so(tmp_path):
    """The ops suite's controls through the plugin on the emulated Mac with its fallback warnings
    swallowed: fallback-seen and fallback-seen-again fail, each in one line naming it; native-seen
    holds, and so does in-kernel-fallback-seen (the stand-in swallows the generic fallback's
    warnings, not an MPS kernel's own); each record is a control's."""
    run_file = tmp_path / "run.jsonl"
    done = run_pytest(ROOT, "suites/ops/test_ops_controls.py", "-p", "tests.standins", "--device", "standin-mps-mute",
                      "--run-file", str(run_file))
    assert done.returncode == 1, done.stdout + done.stderr
    recs = records_of(run_file)
    assert {check: r["status"] for check, r in recs.items()} == {
        "ops/controls/fallback-seen": "fail", "ops/controls/native-seen": "pass",
        "ops/controls/fallback-seen-again": "fail", "ops/controls/in-kernel-fallback-seen": "pass"}
    for check, rec in recs.items():
        assert rec["category"] == Category.CONTROL and rec["metrics"]["record_kind"] == RecordKind.CONTROL
        assert rec["metrics"]["control"] == check.rsplit("/", 1)[1]
    assert recs["ops/controls/fallback-seen"]["reason"].startswith(
        "instrument not trustworthy here: fallback-seen: expected torch.special.")
    assert "instrument not trustworthy here: fallback-seen: expected" in done.stdout


@pytest.mark.slow
def test_the_harness_faults_reach_the_sandbox_child(tmp_path):
    """-p tests.instrument_faults puts the faults where the controls run (the sandbox child):
    the parity suite's controls fail there on the CPU, the exact result still passes."""
    run_file = tmp_path / "run.jsonl"
    done = run_pytest(ROOT, "suites/parity/test_parity_controls.py", "-p", "tests.instrument_faults", "--device", "cpu",
                      "--run-file", str(run_file), env={instrument_faults.VAR: "tolerance,reference"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert {check: r["status"] for check, r in records_of(run_file).items()} == {
        "parity/controls/exact-passes": "pass", "parity/controls/perturbed-fails": "fail",
        "parity/controls/reference-float64-cpu": "fail"}
