"""The optimization suite's models are built from kept initial weights
(harness.optim.workloads.initial_weights, build_model): the same values, bit for bit, as a
model made with the seed, whatever the setup; kept per model size, never trained in place;
the caller's RNG untouched; and kept outside an emulated device's memory."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from harness.env import devices
from harness.optim import workloads
from harness.optim.workloads import Setup
from tests import standins  # noqa: F401  (registers the stand-ins)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import optim_build  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_weights():
    workloads.forget_weights()
    yield
    workloads.forget_weights()


def tensors(model) -> dict:
    return dict([*model.named_parameters(), *model.named_buffers()])


SETUPS = [Setup(model=m, attn=a, dropout=d) for m in ("tiny", "bert-small") for a in ("sdpa", "eager")
          for d in (True, False)] + [Setup(model="tiny", checkpointing=True), Setup(model="tiny", freeze_backbone=True)]


@pytest.mark.parametrize("setup", SETUPS, ids=repr)
def test_a_built_model_has_a_seeded_models_values_and_shape(setup):
    """Every parameter and buffer (the position ids too, which no state dict holds) equals the
    model made directly with the seed, after other sizes and kernels were built first; the
    config and the module tree are that model's."""
    for other in ("bert-small", "tiny"):
        workloads.build_model(Setup(model=other, attn="eager", dropout=False))
    direct, built = optim_build.seeded(setup), workloads.build_model(setup)
    a, b = tensors(direct), tensors(built)
    assert list(a) == list(b) and "bert.embeddings.position_ids" in b
    assert [k for k in a if not (a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]))] == []
    assert repr(built) == repr(direct) and built.config.to_dict() == direct.config.to_dict()
    assert all(p.is_leaf and p.device.type == "cpu" for p in built.parameters())
    if setup.freeze_backbone:
        assert not any(p.requires_grad for p in built.bert.parameters()) and built.classifier.weight.requires_grad
    on = getattr(built, "is_activation_checkpointing", None)
    assert (built.is_gradient_checkpointing if on is None else on) == setup.checkpointing


def test_training_a_built_model_leaves_the_kept_weights_as_they_were():
    """A model's steps change its own tensors, never the kept ones: the next model starts
    from the seed's values again."""
    setup = Setup(model="tiny", batch=4, seq=16)
    w = workloads.Workload(setup, "cpu")
    kept = {k: t.clone() for k, t in workloads.initial_weights(setup).items()}
    w.step()
    assert not torch.equal(w.model.classifier.weight, kept["classifier.weight"])   # it trained
    assert all(torch.equal(t, kept[k]) for k, t in workloads.initial_weights(setup).items())
    again = tensors(workloads.build_model(setup))
    assert all(torch.equal(again[k], kept[k]) for k in kept)


def test_weights_are_kept_per_model_size_and_dtype_and_a_few_at_most():
    tiny, small = Setup(model="tiny"), Setup(model="bert-small")
    first = workloads.initial_weights(tiny)
    assert workloads.initial_weights(tiny.but(attn="eager", dropout=False)) is first   # the same values
    assert workloads.initial_weights(small) is not first
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        doubles = workloads.initial_weights(tiny)
        assert doubles is not first and doubles["classifier.weight"].dtype == torch.float64
        assert workloads.build_model(tiny).classifier.weight.dtype == torch.float64
    finally:
        torch.set_default_dtype(previous)
    assert len(workloads._WEIGHTS) == workloads.KEEP_WEIGHTS   # three kinds asked for, the oldest let go
    assert workloads.initial_weights(tiny) is not first


def test_a_build_leaves_the_callers_random_state_alone():
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    workloads.build_model(Setup(model="tiny"))   # initialises
    workloads.build_model(Setup(model="tiny"))   # from kept weights
    assert torch.equal(torch.random.get_rng_state(), state)


def test_an_unknown_model_size_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        workloads.build_model(Setup(model="huge"))


def test_kept_weights_are_not_the_emulated_devices_memory():
    """On the emulated Mac, building a workload moves the device's reading by the workload's
    own tensors (its model and batches), the first time (weights initialised) as the second
    (weights kept): the kept weights are the process's, as on a Mac they stay on the CPU."""
    mac = devices.stand_in("standin-mps")
    setup = Setup(model="tiny", batch=4, seq=16)
    moved, own = [], []
    for _ in range(2):
        before = mac.reading("current")
        w = workloads.Workload(setup, "standin-mps")
        moved.append(mac.reading("current") - before)
        own.append(sum(t.untyped_storage().nbytes() for t in
                       [*tensors(w.model).values(), *(t for b in w.batches for t in b.values())]))
        del w
    assert moved == own and own[0] > 0


def test_the_build_benchmark_runs_and_finds_the_values_equal(capsys):
    assert optim_build.main(["--models", "tiny", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "MISMATCH" not in out and out.rstrip().endswith("yes")


def test_the_build_benchmark_reports_a_mismatch(monkeypatch, capsys):
    """Its equality check can fail: kept weights that are not the seed's are caught."""
    real = workloads.initial_weights

    def skewed(setup):
        return {k: t + 1 if t.is_floating_point() else t for k, t in real(setup).items()}
    monkeypatch.setattr(workloads, "initial_weights", skewed)
    assert optim_build.main(["--models", "tiny", "--rounds", "1"]) == 1
    assert "MISMATCH: tiny" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--models", "huge"], ["--rounds", "many"], ["--device", "gpu"],
                                  ["--device", "mps"]])   # no Mac here: refused with MPS's reason
def test_the_build_benchmark_refuses_bad_input_in_one_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_:
        optim_build.main(argv)
    assert exit_.value.code == 2
    assert len([line for line in capsys.readouterr().err.splitlines() if "error:" in line]) == 1


def test_checkpointing_is_switched_on_by_the_name_this_transformers_does_not_deprecate():
    """transformers 5.x renamed gradient_checkpointing_enable (the documents' name) to
    activation_checkpointing_enable and warns that the old one goes in v6: the suite's own
    models use the new name where there is one, so a check neither warns nor breaks then."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        model = workloads.build_model(Setup(model="tiny", checkpointing=True))
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
