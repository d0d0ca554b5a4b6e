"""A half-precision gradient behind a gate (T5's ReLU FFN) misses float64 by as much as the
weights' draw puts its gates near zero: over eight seeds of the tiny T5 in float16 on the CPU,
0.13 to 6.8 of the tolerance table's, and transformers 4.57 drew weights that missed (2.19x)
where 5.24's passed (0.23x). The model judge now measures float64's own movement under a
few units of rounding of the weights (harness.parity.models.runs.gradient_sensitivity) where
a gradient misses, and passes a miss within it. These tests hold the rule to both sides: the
T5 seeds that missed pass, and a gradient really wrong still fails, in the sensitive tensor too.
"""
import math

import pytest
import torch

from harness.core import models
from harness.parity.models import inputs
from harness.parity.models import judge as model_judge
from harness.parity.models import runs
from harness.parity.models.runs import Side
from harness.parity.numerics.tolerances import TABLE

OUT, GRAD = TABLE[("model", "float16")], TABLE[("model-grad", "float16")]
T5_WI = "encoder.block.1.layer.1.DenseReluDense.wi.weight"


def test_a_perturbed_side_moves_every_weight_by_at_most_its_units_and_the_same_each_time():
    base = models.tiny_bert()
    side = Side("float64", "cpu", "float64", perturb=("float16", 1))
    a, b = runs.place(models.tiny_bert(), side), runs.place(models.tiny_bert(), side)
    other = runs.place(models.tiny_bert(), Side("float64", "cpu", "float64", perturb=("float16", 2)))
    size = runs.SENSITIVITY_UNITS * runs.HALF_ROUNDING["float16"]
    for (name, p0), pa, pb, po in zip(base.named_parameters(), a.parameters(), b.parameters(), other.parameters()):
        ref = p0.detach().double()
        assert torch.equal(pa, pb), name                      # a draw is the same every time
        assert bool(((pa - ref).abs() <= size * ref.abs() * (1 + 1e-12)).all()), name
    moved = [bool((pa != ref.double()).any()) for pa, ref in zip(a.parameters(), base.parameters()) if bool(ref.any())]
    assert moved and all(moved)   # every weight that is not all zeros (a bias starts at zero: relative noise)
    assert any(not torch.equal(pa, po) for pa, po in zip(a.parameters(), other.parameters()))   # draws differ


def _entry(name, err, margin):
    return {"name": name, "ok": False, "margin": margin, "max_abs_err": err, "rel_err": err, "scale": 1.0,
            "reason": "out"}


def test_a_miss_within_float64s_own_movement_passes_and_one_beyond_it_or_nan_never_does():
    grads = [_entry("gated", 0.02, 2.0), _entry("wrong", 0.05, 5.0), _entry("nan", 0.02, 2.0)]
    target = {"grads": {"gated": torch.ones(2), "wrong": torch.ones(2), "nan": torch.tensor([float("nan"), 1.0])}}
    reference = {"grads": {k: torch.ones(2) for k in ("gated", "wrong", "nan")}}
    moved = {"gated": 0.015, "wrong": 0.015, "nan": 0.5}
    assert runs.excuse_sensitive(grads, target, reference, moved) == ["gated"]
    gated, wrong, nan = grads
    assert gated["ok"] and gated["rule"] == "within-reference-sensitivity" and gated["tolerance_margin"] == 2.0
    assert gated["margin"] == pytest.approx(0.02 / 0.025)   # the tolerance's 0.01 plus float64's own 0.015
    assert not wrong["ok"] and not nan["ok"]


def test_the_sensitivity_is_the_most_each_gradient_moved_over_the_draws():
    seen = []

    def step_of(side):
        seen.append(side.perturb)
        return {"grads": {"w": torch.tensor([1.0 + 0.01 * side.perturb[1]]), "none": None}}
    moved = runs.gradient_sensitivity(step_of, {"grads": {"w": torch.tensor([1.0]), "none": None}}, "bfloat16")
    assert seen == [("bfloat16", d) for d in range(1, runs.SENSITIVITY_DRAWS + 1)]
    assert moved == {"w": pytest.approx(0.01 * runs.SENSITIVITY_DRAWS)}


def _autocast_step(name, base, wrong=None):
    """compare_steps on the CPU in float16 autocast, with ``wrong`` = (parameter, factor)
    scaling that gradient on the target side only (a device computing it wrong)."""
    def step_of(side):
        got = inputs.padded_step(name, base, side)
        if wrong and side.name == "target":
            got["grads"][wrong[0]] = got["grads"][wrong[0]] * wrong[1]
        return got
    run = runs.compare_steps(name, "cpu", step_of, (OUT.rtol, OUT.atol), (GRAD.rtol, GRAD.atol),
                             (Side("target", "cpu", "float32", "float16"), Side("float64", "cpu", "float64")),
                             "float16")
    return run, model_judge.judge_forward_backward(run, OUT, GRAD)


def test_t5_seeds_whose_ffn_gradient_misses_the_table_pass_as_within_float64s_own_movement():
    missed = []
    for seed in range(8):
        run, verdict = _autocast_step("t5", models.tiny_t5(seed=seed))
        excused = [g for g in run.grads if g.get("rule") == "within-reference-sensitivity"]
        assert verdict.status == "pass", (seed, verdict.message)
        assert run.output["ok"] and run.loss["ok"] and "rule" not in run.output and "rule" not in run.loss
        if excused:
            missed.append(seed)
            assert all(g["tolerance_margin"] > 1 and g["margin"] <= 1 for g in excused)
            worst = max(excused, key=lambda g: g["tolerance_margin"])
            assert "within float64's own movement" in verdict.message and worst["name"] in verdict.message
            assert verdict.metrics["within_reference_sensitivity"] == [g["name"] for g in excused]
    assert len(missed) >= 3, missed   # measured: 6 of the 8 seeds miss the table (transformers 5.24)


@pytest.mark.parametrize("name,parameter,factor", [
    ("bert", "classifier.weight", 1.1),     # a tensor float64 barely moves: 0.23 of its tolerance
    ("t5", T5_WI, 1.5),                     # the sensitive tensor itself: up to 6.4x its tolerance
], ids=["bert-classifier-10pc", "t5-ffn-50pc"])
def test_a_gradient_really_wrong_still_fails_under_autocast(name, parameter, factor):
    run, verdict = _autocast_step(name, models.MODELS[name].make(), (parameter, factor))
    wrong = next(g for g in run.grads if g["name"] == parameter)
    assert verdict.status == "fail" and not wrong["ok"] and parameter in verdict.message, verdict.message
    assert math.isfinite(wrong["margin"]) and wrong["margin"] > 1
