"""Backends: target parsing, availability reasons, and the readings that run here."""
import pytest
import torch

from harness.env import devices
from tests.conftest import load_facts


@pytest.mark.parametrize("value,targets", [(None, ["cpu", "cuda", "mps"]), ("all", ["cpu", "cuda", "mps"]),
                                           ("cpu", ["cpu"]), ("CPU, cuda,cpu", ["cpu", "cuda"])])
def test_device_option(value, targets):
    assert devices.parse_device_option(value) == targets


def test_unknown_device_option_names_the_choices():
    with pytest.raises(ValueError, match="unknown target 'tpu'.*cpu, cuda, mps"):
        devices.parse_device_option("cpu,tpu")


@pytest.mark.parametrize("machine,available,says", [
    ("linux_x86_64", False, "this is Linux x86_64"),
    ("rosetta", False, "install an arm64 Python"),
    ("macos_12_2", False, "update macOS"),
    ("torch_no_mps", False, "no MPS backend"),
    ("apple_silicon_native", True, "is_available() is True"),
    ("intel_mac", True, "is_available() is True"),
])
def test_mps_availability_reasons_come_from_the_facts(machine, available, says):
    avail = devices.backend("mps", load_facts(machine)).availability()
    assert avail.available is available and says in avail.reason


def test_mps_dtypes_follow_macos_and_torch():
    """bfloat16 and complex64 on MPS from macOS 14 and torch 2.3: torch 2.2, an Intel Mac's last,
    has neither on any macOS ("BFloat16 is not supported on MPS" in its binary)."""
    mac = load_facts("apple_silicon_native")
    assert torch.float64 not in devices.backend("mps", mac).dtypes()
    assert {torch.bfloat16, torch.complex64} <= set(devices.backend("mps", mac).dtypes())
    assert torch.bfloat16 not in devices.backend("mps", load_facts("intel_mac")).dtypes()  # macOS 13
    for version, offered in (("2.2.2", False), ("2.3.0", True), ("2.3.0.dev20240101", True), ("2.15.0", True)):
        mac["torch"]["version"] = version
        got = set(devices.backend("mps", mac).dtypes()) & {torch.bfloat16, torch.complex64}
        assert got == ({torch.bfloat16, torch.complex64} if offered else set()), version


def test_cuda_absent_here_with_reason():
    avail = devices.backend("cuda", load_facts("linux_x86_64")).availability()
    assert not avail.available and avail.reason.startswith("CUDA unavailable: no NVIDIA GPU")


CPU_READING = """
import gc, json, torch
from harness.env import devices
cpu = devices.backend("cpu")
gc.disable()
before = cpu.memory_current()
block = torch.ones(64 * 2**20 // 4)  # 64 MiB, every page written
after = cpu.memory_current()
print(json.dumps({"moved": after - before, "device": str(block.device), "peak": cpu.memory_peak(),
                  "reset": cpu.reset_peak()}))
"""


def test_cpu_memory_reading_sees_a_large_allocation():
    """The resident set moves by what torch.ones writes, read in a process of its own: in an
    xdist worker that had run hundreds of tests, CI once saw it not move by a byte (1,055,461,376
    before and after; the collector held off), a state of that worker this reading is not about."""
    import json
    import subprocess
    import sys
    from tests.conftest import ROOT
    out = subprocess.run([sys.executable, "-c", CPU_READING], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["device"] == "cpu" and seen["moved"] >= 48 * 2**20, seen
    assert seen["peak"] is None and seen["reset"] is False  # no resettable peak on the CPU


def test_cpu_autocast_bf16_runs_and_an_unsupported_dtype_is_refused():
    cpu = devices.backend("cpu")
    assert cpu.autocast_probe(torch.bfloat16)[0]
    ok, detail = cpu.autocast_probe(torch.float64)  # not an autocast dtype: torch disables autocast
    assert not ok and detail


def _switches():
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.enabled


def test_tf32_switches_hold_in_the_block_only_after_opinfo_froze_the_cudnn_flags():
    import torch.testing._internal.common_utils  # noqa: F401  what the ops and parity checks import
    assert torch.backends.flags_frozen()
    with pytest.raises(RuntimeError, match="disable_global_flags"):  # why a plain assignment cannot be used
        setattr(torch.backends.cudnn, "allow_tf32", False)
    before = _switches()
    for enabled in (True, False):
        with devices.tf32(enabled):
            assert _switches() == (enabled, enabled, before[2])  # cuDNN stays enabled: only TF32 moves
        assert _switches() == before


def test_an_optimization_step_on_cuda_sets_its_tf32_switch_after_opinfo(monkeypatch):
    """A sandbox child that ran op or parity checks first has OpInfo's frozen flags; the
    optimization checks run there next. The step is taken on the CPU, with CUDA claimed
    present, so the CUDA code path runs here too."""
    import torch.testing._internal.common_utils  # noqa: F401
    from harness.optim.workloads import Setup, Workload
    before, seen = _switches(), []
    for tf32 in (True, False):
        w = Workload(Setup(model="tiny", batch=2, seq=8, tf32=tf32), "cpu")
        forward = w.forward
        w.forward = lambda **batch: (seen.append(_switches()[:2]), forward(**batch))[1]
        with monkeypatch.context() as m:
            m.setattr(torch.cuda, "is_available", lambda: True)
            w.step_without_update()
    assert seen == [(True, True), (False, False)] and _switches() == before


def test_mps_memory_to_plan_with_is_the_working_set_limit_less_what_the_process_holds(monkeypatch):
    """recommended_max_memory is Metal's limit, which does not shrink as this process allocates:
    a second sizing in a child that already holds a model would plan as if nothing were resident."""
    import types
    gib = 2 ** 30
    monkeypatch.setattr(torch, "mps", types.SimpleNamespace(recommended_max_memory=lambda: 16 * gib,
                                                            driver_allocated_memory=lambda: 3 * gib), raising=False)
    assert devices.memory_of("mps") == (13 * gib, "torch.mps.recommended_max_memory less torch.mps.driver_allocated_memory")
    monkeypatch.setattr(torch, "mps", types.SimpleNamespace(recommended_max_memory=lambda: 16 * gib), raising=False)
    assert devices.memory_of("mps") == (16 * gib, "torch.mps.recommended_max_memory")
