"""Whole-model parity: moving training from the CPU to the target gives the same numbers.

For each built-in model (harness.core.models.MODELS): the outputs, loss and every parameter's
gradient of one step; the loss curve of 10 AdamW steps; greedy generation for the
decoders. The target runs float32 and is judged against the same model in float64 on the
CPU; on an accelerator, the CPU's float32 run is the yardstick (no less accurate than the
CPU also passes) and a failure names its cause (harness/parity/model_parity.py says why). Greedy
tokens are compared with the CPU's. Each run happens in the sandbox child, so a crash or a
hang on the device costs that check only; the verdict is taken here, from the tolerance
table.
"""
import math

import pytest

from harness.parity import model_parity as mp
from harness.core import models
from harness.parity.tolerances import TABLE

MODEL_NAMES = list(models.MODELS)
OUTPUTS = TABLE[("model", "float32")]
GRADIENTS = TABLE[("model-grad", "float32")]


def _pair(tol) -> tuple[float, float]:
    return tol.rtol, tol.atol


def _run(sandbox, record, function: str, *args):
    """The child's result, or the check fails here (crash / timeout recorded as such)."""
    outcome = sandbox.call(f"harness.parity.model_parity:{function}", *args)
    record.value_of(outcome, "the run itself")
    return outcome.value


def _tolerance_metrics(tol, prefix: str = "") -> dict:
    return {f"{prefix}rtol": tol.rtol, f"{prefix}atol": tol.atol, f"{prefix}tolerance_source": tol.source}


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_forward_backward(model, target, backend, sandbox, record):
    """Output, loss and every parameter's gradient on the target match the reference's."""
    record.category = "parity"
    r = _run(sandbox, record, "forward_backward", model, target, _pair(OUTPUTS), _pair(GRADIENTS))
    diverged = mp.diverged_gradients(r["grads"])
    worst = max(r["grads"], key=lambda g: g["margin"])
    record.metric(max_abs_err=r["output"]["max_abs_err"], max_rel_err=r["output"]["max_rel_err"],
                  margin=max(r["output"]["margin"], r["loss"]["margin"], worst["margin"]),
                  reference=f"cpu-{r['reference']}",
                  output=r["output_name"], output_margin=r["output"]["margin"],
                  loss=r["loss"]["value"], loss_reference=r["loss"]["reference"],
                  loss_abs_err=r["loss"]["max_abs_err"], loss_margin=r["loss"]["margin"],
                  grad_worst=worst["name"], grad_worst_max_abs_err=worst["max_abs_err"],
                  grad_worst_rel_err=worst["rel_err"], grad_worst_scale=worst["scale"], grad_margin=worst["margin"],
                  grad_scale=r["scale"],
                  params_compared=len(r["grads"]), params_without_grad=r["without_grad"],
                  grads_diverged=[g["name"] for g in diverged],
                  **_tolerance_metrics(OUTPUTS), **_tolerance_metrics(GRADIENTS, "grad_"))
    if "vs_float64" in r:  # an accelerator: which float32 side is nearer float64, and the agreement
        vs = r["vs_float64"]
        errs = {side: vs[side]["output_max_abs_err"] for side in ("target", "cpu")}
        nearer = "equal" if errs["target"] == errs["cpu"] else min(errs, key=errs.get)
        record.metric(vs_float64=vs, more_accurate=nearer, vs_cpu=r["vs_cpu"], yardstick="cpu-float32")
    cause = _cause(record, r)
    problems = [f"{what} out of tolerance: {r[what]['reason']}" for what in ("output", "loss") if not r[what]["ok"]]
    if diverged:
        problems.append("gradients diverged (worst first): " + ", ".join(
            f"{g['name']} (margin {g['margin']:.3g}, "
            f"{g['reason'] if math.isinf(g['margin']) else 'relative error %.3g' % g['rel_err']})" for g in diverged))
    assert not problems, cause + "; ".join(problems)


def _cause(record, r: dict) -> str:
    """A failing accelerator run's cause (harness.parity.causes), recorded; the message's lead."""
    if not r.get("cause"):
        return ""
    record.metric(cause=r["cause"], cause_what=r["cause_what"], switch=r["switch"])
    return f"{r['cause_what']}; {r['switch']}: "


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_training_10_steps(model, target, backend, sandbox, record):
    """10 AdamW steps from the same weights over the same batches: the loss curve stays
    within a bound of float64's that grows by the model tolerance per step
    (model_parity.curve_bound), or, on an accelerator, no further from it than the CPU's."""
    record.category = "parity"
    r = _run(sandbox, record, "train", model, target, mp.STEPS, _pair(OUTPUTS))
    curves = r["losses"]
    verdict = mp.judge_training(curves["target"], curves["float64"], OUTPUTS, curves.get("cpu"))
    record.metric(max_divergence=verdict["max_divergence"], margin=verdict["margin"],
                  divergence=verdict["divergence"], bound=verdict["bound"], worst_step=verdict["worst_step"],
                  losses=curves["target"], reference_losses=curves["float64"], lr=r["lr"], steps=mp.STEPS,
                  **_tolerance_metrics(OUTPUTS))
    if "cpu" in curves:  # an accelerator: both float32 curves against float64
        record.metric(vs_float64={side: max(mp.curve_divergence(curves[side], curves["float64"]))
                                  for side in ("target", "cpu")})
    assert verdict["ok"], (_cause(record, r) + f"loss curves diverged past the bound at steps "
                           f"{verdict['over_steps']}: divergence {verdict['max_divergence']:.3g} at step "
                           f"{verdict['worst_step']} (bound {verdict['bound'][verdict['worst_step']]:.3g})")


@pytest.mark.parametrize("model", [name for name in MODEL_NAMES if name in mp.DECODERS])
def test_model_greedy_generation(model, target, backend, sandbox, record):
    """Greedy generation gives the reference's tokens; where they part, the reference's
    top two candidates were tied within the tolerance."""
    record.category = "parity"
    r = _run(sandbox, record, "generate", model, target, _pair(OUTPUTS), mp.NEW_TOKENS)
    verdict = mp.judge_generation(r, OUTPUTS)
    record.metric(max_abs_err=r["scores"]["max_abs_err"], max_rel_err=r["scores"]["max_rel_err"],
                  margin=r["scores"]["margin"], verdict=verdict["verdict"], first_divergence_step=verdict["step"],
                  first_divergence_row=verdict["row"], gap=verdict["gap"], allowed_gap=verdict["allowed_gap"],
                  closest_gap=verdict["closest"], near_ties=verdict["near_ties"],
                  comparable_steps=verdict["comparable_steps"], new_tokens=r["new_tokens"],
                  **_tolerance_metrics(OUTPUTS))
    if verdict["verdict"] == "tie":
        record.metric(note=f"tokens part at step {verdict['step']} (row {verdict['row']}), where the reference's "
                           f"top two were {verdict['gap']:.3g} apart, within the {verdict['allowed_gap']:.3g} "
                           "the tolerance allows: a tie, not a divergence")
    cause = _cause(record, r)
    assert r["scores"]["ok"], f"{cause}scores out of tolerance before the tokens parted: {r['scores']['reason']}"
    assert verdict["verdict"] != "diverged", (
        f"{cause}tokens diverged at step {verdict['step']} (row {verdict['row']}) although the reference's top candidate "
        f"led by {verdict['gap']:.3g}, more than the {verdict['allowed_gap']:.3g} the tolerance allows")
