"""Does an optimization keep what training computes? Both sides built, compared, judged.

``keeps_the_result`` (run in the sandbox child) builds a tiny model with and without the
technique (dropout off) and returns the gradients of both (``Gradients``) or the parameters
one step changed (``Trained``); ``same_result_verdict`` judges them: accumulated gradients
equal the big batch's, checkpointing and compile leave the gradients as they are, freezing
and LoRA train exactly the parameters they should.
"""
from __future__ import annotations

import dataclasses

from harness.core.records import Status, Verdict
from harness.env import devices
from harness.optim.workloads import Setup, Workload

SAME_GRADIENTS = ("gradient-accumulation", "gradient-checkpointing", "torch-compile")
TRAINS_SOME = ("freeze-backbone", "peft-lora")
TECHNIQUES = SAME_GRADIENTS + TRAINS_SOME


@dataclasses.dataclass
class Gradients:
    """Both sides' gradients of one step, by parameter name: ``a`` without the technique,
    ``b`` with it (None where the variant has no gradient), as plain lists."""
    names: list
    a: list
    b: list


@dataclasses.dataclass
class Trained:
    """Which parameters one step with the technique changed, of the trainable ones and of all."""
    trainable: list
    changed: list
    all: list


def gradients_of(workload) -> dict:
    """The gradients of one step of ``workload`` without the update, by parameter name, on the CPU."""
    workload.optimizer.zero_grad(set_to_none=True)
    workload.step_without_update()
    with devices.on_device(workload.target):   # a read from the device: its queued work lands first
        return {n: p.grad.detach().cpu().clone() for n, p in workload.model.named_parameters() if p.grad is not None}


def parameters_of(workload) -> dict:
    """The parameters of ``workload``'s model, by name, copied to the CPU."""
    with devices.on_device(workload.target):
        return {n: p.detach().cpu().clone() for n, p in workload.model.named_parameters()}


def keeps_the_result(name: str, device: str) -> Gradients | Trained:
    """Does the optimization change what training computes? (dropout off on both sides)

      gradient-accumulation   the accumulated gradients equal the big batch's
      gradient-checkpointing  the gradients equal those without checkpointing
      torch-compile           the compiled model's gradients equal eager's
      freeze-backbone / peft-lora   one step changes exactly the parameters it should
    Returns the gradients (or the parameters changed) as plain lists for the judge to compare.
    """
    base = Setup(model="tiny", batch=4, seq=16, dropout=False)
    if name in SAME_GRADIENTS:
        variant = {"gradient-accumulation": base.but(grad_accum=4), "gradient-checkpointing": base.but(checkpointing=True),
                   "torch-compile": base.but(compile=True)}[name]
        wa, wb = Workload(base, device), Workload(variant, device)
        if name == "gradient-accumulation":  # the same samples: the big batch is the micro-batches stacked
            import torch
            with devices.on_device(device):
                wa.batches = [{k: torch.cat([b[k] for b in wb.batches]) for k in wb.batches[0]}]
        ga, gb = gradients_of(wa), gradients_of(wb)
        return Gradients(sorted(ga), [ga[n].tolist() for n in sorted(ga)],
                         [gb[n].tolist() if n in gb else None for n in sorted(ga)])
    variant = {"freeze-backbone": base.but(freeze_backbone=True), "peft-lora": base.but(lora=True)}[name]
    w = Workload(variant, device)
    before = parameters_of(w)
    w.step()
    after = parameters_of(w)
    trainable = sorted(n for n, p in w.model.named_parameters() if p.requires_grad)
    changed = sorted(n for n in before if not bool((before[n] == after[n]).all()))
    return Trained(trainable, changed, sorted(before))


def same_result_verdict(r: Gradients | Trained) -> Verdict:
    """Judge what ``keeps_the_result`` returned: pass, or fail with what diverged.

    Gradients are compared normwise per parameter against the whole-model gradient tolerance
    (harness.parity.numerics.tolerances, "model-grad" float32); a parameter without a gradient on the variant
    side is a divergence. Trained parameters must be exactly the trainable ones, and neither
    none nor all of the model's.
    """
    if isinstance(r, Gradients):
        import torch

        from harness.parity.numerics import accuracy
        from harness.parity.numerics.tolerances import TABLE
        tol = TABLE[("model-grad", "float32")]
        worst, diverged = None, []
        for name, a, b in zip(r.names, r.a, r.b):
            if b is None:
                diverged.append(f"{name}: no gradient")
                continue
            res = accuracy.compare(torch.tensor(b), torch.tensor(a), tol, normwise=True)
            worst = res if worst is None or res["margin"] > worst["margin"] else worst
            if not res["ok"]:
                diverged.append(f"{name} (margin {res['margin']:.3g})")
        metrics = {"margin": worst["margin"] if worst else None, "max_abs_err": worst["max_abs_err"] if worst else None,
                   "params_compared": len(r.names), "rtol": tol.rtol, "atol": tol.atol,
                   "tolerance_source": tol.source}
        ok = bool(r.names) and not diverged
        message = "" if ok else ("no gradients to compare" if not r.names else
                                 "gradients differ: " + ", ".join(diverged))
        return Verdict(Status.PASS if ok else Status.FAIL, None, message, metrics)
    trainable, changed, everything = set(r.trainable), set(r.changed), r.all
    metrics = {"trainable": len(trainable), "changed": len(changed), "params": len(everything)}
    if changed != trainable:
        return Verdict(Status.FAIL, None, f"trained {len(changed)} parameters, {len(trainable)} are trainable: "
                       f"unexpected {sorted(changed - trainable)[:5]}, untouched {sorted(trainable - changed)[:5]}",
                       metrics)
    if not 0 < len(trainable) < len(everything):
        return Verdict(Status.FAIL, None, f"{len(trainable)} of {len(everything)} parameters trainable: the technique "
                       "froze nothing or everything", metrics)
    return Verdict(Status.PASS, None, "", metrics)
