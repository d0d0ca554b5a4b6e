"""Whole-model parity: does training on the target give the numbers training on the CPU gives?

Three measurements per model of ``harness.core.models.MODELS``, each a plain function that the
sandbox child runs and that returns plain data (floats, strings, lists):

  forward_backward  the output (logits, or hidden states), the loss and every parameter's
                    gradient after one backward pass
  train             the loss curve of ``STEPS`` AdamW steps over the same seeded batches
  generate          greedy generation (the decoders): the tokens, and how far apart the
                    reference's top two candidates were wherever the tokens part

Sides. The target runs the model in float32 from the same initial weights as every other
side. Its reference is the CPU in float32 when the target is an accelerator (the user's
question: the numbers the CPU gives), and the CPU in float64 when the target is the CPU
itself: float32 on the CPU against the same weights in float64 measures the rounding a
float32 run carries, which is what makes the suite meaningful without an accelerator. On
an accelerator both float32 sides are also measured against float64, so a report can say
which of the two is the more accurate.

The inputs (the sentences, their dataset, each model's batch) are harness.parity.model_batches.

Every model runs in ``eval()`` mode, also while it trains: train-mode dropout draws from
each device's own random stream, so two devices would drop different units and nothing
would be comparable. ``eval()`` changes nothing else in these models (no batch norm) and
gradients flow as in ``train()``.

How the sides are compared, and the verdict the test takes in the pytest process, is
harness.parity.model_judge.
"""
from __future__ import annotations

import copy
import dataclasses

from harness.core import models
from harness.parity import model_batches, model_judge

STEPS = 10                # AdamW steps in the training check
# AdamW learning rates. The config-built models start from random weights: 1e-3 moves them.
# The pretrained MiniLM is fine-tuned at transformers' TrainingArguments default, 5e-5: at
# 1e-3 its loss jumped about (0.28 to 1.1 within 10 steps) and that chaos amplified float32's
# rounding (5e-4 from float64 by step 7, against about 1e-6 at 5e-5), which says nothing
# about a device.
LR = 1e-3
FINE_TUNE_LR = 5e-5
NEW_TOKENS = 16           # greedy generation length
DECODERS = ("gpt2", "t5", "llama")


def learning_rate(name: str) -> float:
    """The AdamW learning rate of the training check for model ``name`` (see LR)."""
    return FINE_TUNE_LR if models.MODELS[name].pretrained else LR


@dataclasses.dataclass(frozen=True)
class Side:
    """One run of the model: where, and in which precision."""
    name: str     # "target" | "cpu" | "float64"
    device: str
    dtype: str


def sides(target: str) -> tuple[Side, ...]:
    """The runs a check needs: the target, the CPU in float32 (accelerators only), float64."""
    cpu = () if target == "cpu" else (Side("cpu", "cpu", "float32"),)
    return (Side("target", target, "float32"), *cpu, Side("float64", "cpu", "float64"))


def reference_of(target: str) -> str:
    """The side greedy generation is judged against (see the module docstring): tokens are
    compared with the CPU's on an accelerator. Outputs, gradients and loss curves are
    judged against float64 on every target (``forward_backward``, ``train``)."""
    return "float64" if target == "cpu" else "cpu"


def _rounded(tree, dtype: str = "float32"):
    """float64 tensors (and Python floats) as ``dtype`` holds them: what the most accurate
    ``dtype`` computation gives."""
    import torch
    from torch.utils import _pytree
    dt = getattr(torch, dtype)

    def leaf(x):
        if isinstance(x, torch.Tensor) and x.dtype == torch.float64:
            return x.to(dt)
        if isinstance(x, float):
            return float(torch.tensor(x, dtype=torch.float64).to(dt))
        return x
    return _pytree.tree_map(leaf, tree)


def runs_on(target: str, compute) -> dict:
    """``compute(side)`` for every side of ``target`` (the CPU and float64 first). A stand-in
    target (harness.core.devices.StandIn) runs it on the CPU, given the CPU's float32 result and
    float64's, rounded to float32."""
    from harness.core import devices
    out = {side.name: compute(side) for side in sides(target) if side.name != "target"}
    side = sides(target)[0]
    stand_in = devices.stand_in(target)
    if stand_in is None:
        out["target"] = compute(side)
    else:
        out["target"] = stand_in.run(lambda: compute(dataclasses.replace(side, device="cpu")), out.get("cpu"),
                                     _rounded(out["float64"]))
    return out


def diagnose(target: str, rerun) -> dict:
    """The cause of a target's failure (harness.parity.causes): ``rerun(trial)`` reruns the target
    side for "nondeterministic" (True when its result differs) and "tf32" (True when it
    passes with TF32 off)."""
    from harness.core import devices
    from harness.parity import causes
    kind = devices.kind_of(target)
    return causes.describe(causes.diagnose(kind, "float32", rerun), kind, "float32")


# --------------------------------------------------------------------------- runs

def place(model, side: Side):
    """The model of one side: moved to its device and dtype, in eval mode (no dropout).

    Every side's model passes through here, so a self-test can wrap it to alter one side.
    """
    import torch
    return model.to(device=side.device, dtype=getattr(torch, side.dtype)).eval()


def _on(batch: dict, device: str) -> dict:
    return {k: v.to(device) for k, v in batch.items()}


def _main_output(output):
    """The output a user reads: logits, or the last hidden state of a bare encoder."""
    logits = getattr(output, "logits", None)
    return ("logits", logits) if logits is not None else ("last_hidden_state", output.last_hidden_state)


def _step(name: str, base, rows: dict, side: Side) -> dict:
    """One forward and backward pass on one side; tensors brought back to the CPU."""
    from harness.ops.audit import loss_of
    model = place(copy.deepcopy(base), side)
    batch = _on(model_batches.model_batch(name, model, rows), side.device)
    output = model(**batch)
    loss = loss_of(output, batch, models.MODELS[name].loss_fn, model)
    loss.backward()
    out_name, out = _main_output(output)
    grads = {n: (p.grad.detach().cpu() if p.grad is not None else None) for n, p in model.named_parameters()}
    return {"output_name": out_name, "output": out.detach().cpu(), "loss": loss.detach().cpu(), "grads": grads}


def forward_backward(name: str, target: str, out_tol, grad_tol) -> dict:
    """Output, loss and gradients of ``name`` on ``target`` against float64.

    ``out_tol`` and ``grad_tol`` are (rtol, atol) pairs from the test's tolerance table:
    outputs compare elementwise, gradients normwise (``model_judge.compare_gradients``). The
    batch is the dataset's first BATCH rows. On an accelerator each item passes when it
    meets the tolerance against float64 or is no less accurate than the CPU in float32
    (``model_judge.measure_accuracy``); ``vs_float64`` holds both float32 sides measured
    against float64, ``vs_cpu`` the target against the CPU (agreement, recorded, not
    judged), and a failure its cause (``diagnose``).
    """
    base, rows = models.MODELS[name].make(), model_batches.dataset()[:model_batches.BATCH]
    out_tol, grad_tol = model_judge.as_tolerance(out_tol), model_judge.as_tolerance(grad_tol)

    def step(side):
        return _step(name, base, rows, side)
    runs = runs_on(target, step)
    result = {"model": name, "target": target, "reference": "float64", "output_name": runs["target"]["output_name"]}
    if target == "cpu":
        return {**result, **model_judge.measure(runs["target"], runs["float64"], out_tol, grad_tol)}
    result.update(model_judge.measure_accuracy(runs, out_tol, grad_tol))

    def against(side: str, reference: str) -> dict:
        return model_judge.side_summary(model_judge.measure(runs[side], runs[reference], out_tol, grad_tol))
    result["vs_cpu"] = against("target", "cpu")
    result["vs_float64"] = {s: against(s, "float64") for s in ("target", "cpu")}
    if not (result["output"]["ok"] and result["loss"]["ok"] and all(g["ok"] for g in result["grads"])):
        def rerun(trial: str):
            import torch

            from harness.core import devices
            if trial == "nondeterministic":
                again = runs_on(target, step)["target"]
                return any(not torch.equal(again[k], runs["target"][k]) for k in ("output", "loss"))
            if trial == "tf32":
                with devices.tf32(False):
                    again = {**runs, "target": runs_on(target, step)["target"]}
                judged = model_judge.measure_accuracy(again, out_tol, grad_tol)
                return judged["output"]["ok"] and judged["loss"]["ok"] and all(g["ok"] for g in judged["grads"])
            return None
        result.update(diagnose(target, rerun))
    return result


def _losses(name: str, base, data, batches: list[list[int]], side: Side) -> list[float]:
    """Train a copy of ``base`` on one side: the loss before each AdamW step.

    A pretrained model is fine-tuned with its input embedding table frozen, a common
    fine-tuning choice and here a matter of time: MiniLM's table is 11.7M of its 22.7M
    parameters, and AdamW over it tripled the check's time on a 2-core CPU. Its gradient
    is still compared, in ``forward_backward``.
    """
    import torch
    from harness.ops.audit import loss_of
    model = place(copy.deepcopy(base), side)
    if models.MODELS[name].pretrained:
        model.get_input_embeddings().weight.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate(name))
    losses = []
    for rows in batches:
        batch = _on(model_batches.model_batch(name, model, data[rows]), side.device)
        loss = loss_of(model(**batch), batch, models.MODELS[name].loss_fn, model)
        losses.append(loss.item())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return losses


def train(name: str, target: str, steps: int = STEPS, tol=None) -> dict:
    """The loss curves of ``steps`` AdamW steps on every side, from the same weights and
    batches. The target's curve is judged against float64's (``model_judge.judge_training``,
    with the CPU's curve as the yardstick on an accelerator); with ``tol`` (rtol, atol), a
    target that fails has its cause diagnosed here, where it can be rerun."""
    base, data = models.MODELS[name].make(), model_batches.dataset()
    batches = model_batches.training_rows(steps)

    def curve(side):
        return _losses(name, base, data, batches, side)
    curves = runs_on(target, curve)
    result = {"model": name, "target": target, "reference": "float64", "lr": learning_rate(name),
              "steps": steps, "batches": batches, "losses": curves}
    if tol is not None and target != "cpu" and not model_judge.judge_training(
            curves["target"], curves["float64"], model_judge.as_tolerance(tol), curves["cpu"])["ok"]:
        tol = model_judge.as_tolerance(tol)

        def rerun(trial: str):
            from harness.core import devices
            if trial == "nondeterministic":
                return runs_on(target, curve)["target"] != curves["target"]
            if trial == "tf32":
                with devices.tf32(False):
                    again = runs_on(target, curve)["target"]
                return model_judge.judge_training(again, curves["float64"], tol, curves["cpu"])["ok"]
            return None
        result.update(diagnose(target, rerun))
    return result


def _pad_id(config) -> int:
    """The pad id generate() needs for a batch; GPT-2 has none and pads with end-of-sequence."""
    return config.pad_token_id if config.pad_token_id is not None else config.eos_token_id


def _greedy(name: str, base, rows: dict, side: Side, new_tokens: int) -> dict:
    """Greedy generation on one side: the new tokens and the scores greedy chose from.

    ``min_new_tokens`` keeps every row going for exactly ``new_tokens`` steps (the
    end-of-sequence candidate is masked until then), so the sides compare position by position.
    """
    import torch
    model = place(copy.deepcopy(base), side)
    batch = _on(model_batches.prompts(name, model, rows), side.device)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=_pad_id(model.config), output_scores=True,
                             return_dict_in_generate=True)
    start = out.sequences.shape[1] - len(out.scores)
    scores = torch.stack([s.detach().cpu() for s in out.scores], dim=1)  # (rows, steps, vocab)
    return {"tokens": out.sequences[:, start:].cpu(), "scores": scores}


def generate(name: str, target: str, out_tol, new_tokens: int = NEW_TOKENS) -> dict:
    """Greedy generation on the target and on its reference, from the same prompts
    (the dataset's first BATCH sentences); see ``model_judge.generation_record``."""
    base, rows = models.MODELS[name].make(), model_batches.dataset()[:model_batches.BATCH]
    ref = reference_of(target)

    def greedy(side):
        return _greedy(name, base, rows, side, new_tokens)

    def passes(record: dict) -> bool:
        judged = model_judge.judge_generation(record, model_judge.as_tolerance(out_tol))
        return record["scores"]["ok"] and judged["verdict"] != "diverged"
    runs = runs_on(target, greedy)
    result = {"model": name, "target": target, "reference": ref, "new_tokens": new_tokens,
              **model_judge.generation_record(runs["target"], runs[ref], out_tol)}
    if target != "cpu" and not passes(result):
        def rerun(trial: str):
            import torch

            from harness.core import devices
            if trial == "nondeterministic":
                return not torch.equal(runs_on(target, greedy)["target"]["scores"], runs["target"]["scores"])
            if trial == "tf32":
                with devices.tf32(False):
                    again = runs_on(target, greedy)["target"]
                return passes(model_judge.generation_record(again, runs[ref], out_tol))
            return None
        result.update(diagnose(target, rerun))
    return result
