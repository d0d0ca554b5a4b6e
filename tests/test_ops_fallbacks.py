"""Whose fallback an ops check reports, and MPS kernels' own fallbacks, on the emulated Mac
(standin-mps, tests/emulated_mps.py).

* OpInfo's sample functions for 27 linalg ops call torch.linalg.svd on the device, which MPS
  runs through its CPU fallback in the releases whose _linalg_svd has no MPS kernel. Those
  samples are made before the op runs, outside the check's own phase: linalg.inv, linalg.solve
  and linalg.det are native there, svd's own check still falls back.
* Some MPS kernels send their operands to the CPU themselves, with a warning of their own
  (nonzero of a complex input, avg_pool2d with a divisor on an int64 one): the emulated Mac
  gives those warnings, the ops sweep reads them as cpu-fallback named "(in-kernel)", and the
  ops control in-kernel-fallback-seen holds there, and fails, naming itself, where the suite
  reads them as native or where the device words them in a way the suite does not know.
"""
from __future__ import annotations

import re
import warnings

import pytest
import torch

from harness.core.records import REASON_MAX, Category, Status
from harness.env import devices, instruments
from harness.ops import controls, fallback, opsweep
from tests import emulated_mps as em
from tests import standins  # noqa: F401  (registers the stand-ins, the emulated Mac among them)

MAC = "standin-mps"
SVD = ("_linalg_svd", "_linalg_svd.U")


@pytest.fixture(autouse=True)
def fallback_on(monkeypatch):
    monkeypatch.setenv(em.FALLBACK_VAR, "1")


@pytest.fixture
def svd_falls_back(monkeypatch):
    """The emulated Mac of a torch release whose _linalg_svd has no MPS kernel (MPS runs it on
    the CPU through its fallback); its decisions, kept per op, made afresh for this test."""
    snap = em.kernel_snapshot()
    table = {**snap.table, **{k: {**snap.table[k], "mps": False} for k in SVD}}
    monkeypatch.setattr(em, "kernel_snapshot", lambda: type(snap)(snap.source, snap.torch_version, table))
    monkeypatch.setattr(devices.stand_in(MAC), "decisions", {})


@pytest.mark.parametrize("op_key", ["linalg.inv", "linalg.solve", "linalg.det"])
def test_an_op_whose_samples_call_a_falling_back_op_is_native_on_the_emulated_mac(svd_falls_back, op_key):
    run = opsweep.run_case(op_key, MAC, "float32", "forward")
    assert (run.category, run.fallback_ops) == (Category.NATIVE, ()), run
    assert "aten::_linalg_svd" in run.fallback_by_phase["samples"], run.fallback_by_phase
    verdict = opsweep.judge(run, None, on_mps=True)
    assert (verdict.status, verdict.category, verdict.message) == (Status.PASS, Category.NATIVE, "")


def test_svd_s_own_check_still_falls_back_on_the_emulated_mac(svd_falls_back):
    run = opsweep.run_case("linalg.svd", MAC, "float32", "forward")
    assert run.category == Category.CPU_FALLBACK and "aten::_linalg_svd" in run.fallback_ops, run


def test_the_emulated_mac_s_own_kernels_fall_back_in_kernel_with_mps_s_words(monkeypatch):
    """nonzero of a complex input and avg_pool2d with a divisor on int64 warn MPS's own texts,
    each once per process at its own site (warn-always: every call), whatever the fallback
    setting says, and compute what the CPU computes; other inputs of the same ops warn nothing."""
    monkeypatch.setattr(em.PROCESS, "warned_sites", set())
    monkeypatch.setenv(em.FALLBACK_VAR, "0")          # in-kernel: the setting plays no part
    z = torch.tensor([1 + 1j, 0j, 2j], dtype=torch.complex64)
    x = torch.arange(16, dtype=torch.int64).view(1, 1, 4, 4)
    expected = (torch.nonzero(z), torch.nn.functional.avg_pool2d(x, 2, divisor_override=3))

    def warned(call, times=2):
        with warnings.catch_warnings(record=True) as caught, devices.stand_in(MAC).context():
            warnings.simplefilter("always")
            results = [call() for _ in range(times)]
        return results[0], [str(w.message) for w in caught]
    was = torch.is_warn_always_enabled()
    torch.set_warn_always(False)
    try:
        got, said = warned(lambda: torch.nonzero(z))
        assert torch.equal(got, expected[0]) and said == [em.NONZERO_COMPLEX.format(stop="")]
        got, said = warned(lambda: torch.nn.functional.avg_pool2d(x, 2, divisor_override=3))
        assert torch.equal(got, expected[1]) and said == [em.AVG_POOL_DIVISOR]
        assert warned(lambda: torch.nonzero(z))[1] == []          # that site's once is spent
        assert warned(lambda: torch.nonzero(z.real))[1] == []
        assert warned(lambda: torch.nn.functional.avg_pool2d(x, 2))[1] == []
        torch.set_warn_always(True)
        assert warned(lambda: torch.nonzero(z))[1] == [em.NONZERO_COMPLEX.format(stop="")] * 2
    finally:
        torch.set_warn_always(was)


@pytest.mark.parametrize("op_key, dtype, name", [
    ("nonzero", "complex64", "aten::nonzero (in-kernel)"),
    ("argwhere", "complex64", "aten::nonzero (in-kernel)"),
    ("nn.functional.avg_pool2d", "int64", "nn.functional.avg_pool2d (in-kernel)"),
])
def test_an_in_kernel_fallback_is_cpu_fallback_in_the_sweep_on_the_emulated_mac(op_key, dtype, name):
    run = opsweep.run_case(op_key, MAC, dtype, "forward")
    assert (run.category, run.fallback_ops) == (Category.CPU_FALLBACK, (name,)), run
    assert opsweep.judge(run, None, on_mps=True).message == f"fell back to the CPU: {name}"
    assert opsweep.run_case(op_key, MAC, "float32", "forward").category == Category.NATIVE


# --------------------------------------------------------------------------- the control

CONTROL = "in-kernel-fallback-seen"


def control(target: str):
    return instruments.verdict(controls.in_kernel_fallback_seen(target))


def test_the_in_kernel_control_is_one_of_the_ops_controls_on_every_target():
    case = next(c for c in controls.cases() if c.name == CONTROL)
    assert case.entry == "harness.ops.controls:in_kernel_fallback_seen" and case.id == f"controls-{CONTROL}"
    assert set(case.targets) == set(devices.TARGETS) | set(devices.STAND_INS)


@pytest.mark.parametrize("setting", ["1", "0"])
def test_the_in_kernel_control_holds_on_the_emulated_mac(monkeypatch, setting):
    monkeypatch.setenv(em.FALLBACK_VAR, setting)
    verdict = control(MAC)
    assert (verdict.status, verdict.category) == (Status.PASS, Category.CONTROL), verdict.message
    assert verdict.metrics["control"] == CONTROL and verdict.metrics["expected"]
    calls = verdict.metrics["calls"]
    assert calls["nonzero"]["warned_ops"] == ["aten::nonzero (in-kernel)"]
    assert calls["avg_pool2d"]["warned_ops"] == ["avg_pool2d (in-kernel)"]


def test_the_in_kernel_control_does_not_apply_off_mps():
    verdict = control("cpu")
    assert verdict.status == Status.SKIP and "only MPS's kernels fall back to the CPU in-kernel" in verdict.message


def _fails_naming_itself(verdict) -> None:
    assert verdict.status == Status.FAIL, verdict
    assert verdict.message.startswith(f"instrument not trustworthy here: {CONTROL}: expected ")
    assert ", saw " in verdict.message and "\n" not in verdict.message and len(verdict.message) <= REASON_MAX


def test_the_in_kernel_control_fails_where_the_suite_reads_them_as_native(monkeypatch):
    """The suite's instrument broken as it was: only MPSFallback.mm's text read as a fallback."""
    monkeypatch.setattr(fallback, "IN_KERNEL_RE", re.compile(r"(?!)"))
    verdict = control(MAC)
    _fails_naming_itself(verdict)
    assert "torch.nonzero of a complex64 tensor read native though MPS warned" in verdict.message


def test_the_in_kernel_control_fails_where_a_torch_words_it_anew(monkeypatch):
    """A torch whose kernels say it otherwise ("falls back to CPU"): the device's warning, read
    wider than the suite reads it, shows the suite missed it."""
    reworded = {name: (given, text.replace("Falling back on CPU", "This op falls back to CPU"), site)
                for name, (given, text, site) in em.IN_KERNEL_FALLBACKS.items()}
    monkeypatch.setattr(em, "IN_KERNEL_FALLBACKS", reworded)
    _fails_naming_itself(control(MAC))


def test_the_in_kernel_control_is_skipped_where_mps_s_kernels_run_them_on_the_device(monkeypatch):
    monkeypatch.setattr(em, "IN_KERNEL_FALLBACKS", {})
    verdict = control(MAC)
    assert verdict.status == Status.SKIP and "no in-kernel fallback to see here" in verdict.message
