"""--workload auto (harness/optim/workloads.py): the estimates against the real models, and the choice
for devices reported by stand-ins (an H100, a 16 GB Mac, a small GPU, this CPU)."""
import warnings

import pytest

from harness.env import devices
from harness.optim import workloads as sizing
from harness.optim.workloads import SCALES, Setup, build_model

GIB = 2 ** 30


@pytest.mark.parametrize("model", ["tiny", "bert-small", "bert-base"])
def test_the_parameter_estimate_is_the_models_own_count(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        real = sum(p.numel() for p in build_model(Setup(model=model)).parameters())
    assert sizing.estimate(Setup(model=model))["params"] == real


def test_the_memory_estimate_is_near_the_tracked_peak_of_the_small_workload():
    from harness.optim import measure
    from harness.optim.workloads import Workload
    w = Workload(SCALES["small"].but(dropout=False), "cpu")
    w.step()
    peak = measure.measure_memory(w.step, resident=w.resident())["peak_bytes"]
    assert 0.8 < sizing.estimate(w.setup)["memory_bytes"] / peak < 1.25


def standin(memory_gib: float, tflops: float, device="stand-in") -> sizing.Capacity:
    """A device that reports these figures (no device is touched)."""
    return sizing.Capacity(device, int(memory_gib * GIB), "reported by the stand-in", tflops * 1e12,
                           "reported by the stand-in")


@pytest.mark.parametrize("capacity, name, says", [
    # H100: 80 GB, ~50 TFLOP/s in float32: small's step is launch overhead (0.4 ms), large's 0.15 s
    (standin(79, 50), "large", "the first whose step"),
    # a 16 GB Apple M2: ~3.5 TFLOP/s, Metal's working-set limit ~10.7 GB
    (standin(10.7, 3.5), "medium", "the first whose step"),
    # an 8 GB Mac: medium's ~4.6 GiB does not fit in half of ~5.3 GiB
    (standin(5.3, 3.5), "small", "no shape that fits"),
    # a 2-core CPU: small already takes a few tenths of a second
    (standin(8, 0.06), "small", "the first whose step"),
    # a fast accelerator with a little memory: the largest that fits
    (standin(12, 50), "medium", "the largest that fits"),
    (standin(0.1, 50), "small", "nothing fits"),
], ids=["h100", "m2-16gb", "mac-8gb", "two-core-cpu", "fast-small-gpu", "nothing-fits"])
def test_auto_chooses_by_the_devices_memory_and_speed(capacity, name, says):
    choice = sizing.choose(capacity)
    assert choice["name"] == name and says in choice["reason"]
    assert choice["setup"] == sizing.describe(SCALES[name])
    assert f"{capacity.memory_bytes / GIB:.3g} GiB" in choice["reason"]


def test_a_longer_minimum_step_or_less_memory_moves_the_choice(monkeypatch):
    h100 = standin(79, 50)
    monkeypatch.setattr(sizing, "MIN_STEP_S", 0.01)
    assert sizing.choose(h100)["name"] == "medium"
    monkeypatch.setattr(sizing, "MIN_STEP_S", 0.1)
    monkeypatch.setattr(sizing, "MEMORY_FRACTION", 0.1)
    assert sizing.choose(h100)["name"] == "medium"


def test_this_cpu_is_probed_and_gets_the_small_workload():
    capacity = sizing.probe("cpu")
    assert capacity.flops > 1e8 and 0 < capacity.memory_bytes <= devices.CPU_MEMORY_CAP
    choice = sizing.resolve("auto", "cpu")
    assert choice["name"] == "small" and choice["reason"].startswith("auto on cpu: small")


def test_a_named_workload_is_taken_as_named_and_an_unknown_one_refused():
    assert sizing.resolve("large", "cpu") == {"name": "large", "setup": "macbert-large, batch 32, length 128",
                                              "reason": "--workload large", "candidates": []}
    with pytest.raises(ValueError, match="unknown workload 'huge'"):
        sizing.resolve("huge", "cpu")


def test_the_tool_shows_the_ladder_for_a_described_device_and_refuses_bad_figures(capsys):
    from tools import workload
    assert workload.main(["--memory-gib", "79", "--tflops", "50"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("auto on the described device: large (macbert-large, batch 32, length 128)")
    assert [line.split()[0] for line in out.splitlines() if line.endswith("<- chosen")] == ["large"]
    for argv in (["--memory-gib", "79"], ["--memory-gib", "nan", "--tflops", "1"], ["--tflops", "0", "--memory-gib", "1"],
                 ["--device", "cuda,nowhere"]):
        try:
            code = workload.main(argv)
        except SystemExit as exc:  # argparse's usage errors exit from inside
            code = exc.code
        assert code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("error:"), err
