"""Does an optimization keep what training computes? Both sides built, compared, judged.

``keeps_the_result`` (run in the sandbox child) builds a tiny model with and without the
technique (dropout off) and returns the gradients of both (``Gradients``) or the parameters
one step changed (``Trained``); ``same_result_verdict`` judges them: accumulated gradients
equal the big batch's, checkpointing and compile leave the gradients as they are, freezing
and LoRA train exactly the parameters they should. A compiled side that called no compiled
graph raises (harness.optim.workloads.NothingCompiled: eager against eager proves nothing);
on an emulated device torch.compile is not tried (devices.BeyondEmulation: skipped, with why).
"""
from __future__ import annotations

import dataclasses

from harness.core.records import Status, Verdict
from harness.env import devices
from harness.optim.workloads import Setup, Workload, require_compiled

SAME_GRADIENTS = ("gradient-accumulation", "gradient-checkpointing", "torch-compile")
TRAINS_SOME = ("freeze-backbone", "peft-lora")
TECHNIQUES = SAME_GRADIENTS + TRAINS_SOME
SUBJECT = "optimization_keeps_the_result"   # the checks' subject: optim/optimization_keeps_the_result/<technique>

# A technique that changes what training computes is no optimization, whatever it saves: the
# failure says so as its cause (metrics.cause, harness.report.verdict's failure groups), with
# what was compared and the switch, in the user's terms.
CHANGES_THE_RESULT = "changes-the-result"
WHAT = {
    "gradient-accumulation": "the accumulated gradients are not the big batch's: training with accumulation is not "
                             "the training it stands in for",
    "gradient-checkpointing": "the gradients with checkpointing are not those without it: checkpointing should only "
                              "trade memory for recomputation",
    "torch-compile": "the compiled model's gradients are not eager's: the compiled training step computes something "
                     "else",
    "freeze-backbone": "one step did not train exactly the parameters left trainable: the freeze is not what it says",
    "peft-lora": "one step did not train exactly LoRA's adapters: the adapters are not what trains",
}
SWITCH = {
    "gradient-accumulation": "divide each micro-batch's loss by the number of accumulation steps (the Trainer's "
                             "gradient_accumulation_steps does); where that is done, report it to transformers with "
                             "this record, and train without accumulation until then",
    "gradient-checkpointing": "train without gradient checkpointing (drop gradient_checkpointing=True / "
                              "model.gradient_checkpointing_enable()) until it matches, and report it to transformers "
                              "with this record",
    "torch-compile": "train eager (drop torch.compile) until it matches; torch.compile(model, backend='aot_eager') "
                     "tells whether inductor's kernels are the cause; report it to PyTorch with this record",
    "freeze-backbone": "check each parameter's requires_grad (model.named_parameters()) and that the optimizer is "
                       "built after the freeze, over the trainable parameters only",
    "peft-lora": "check peft's target_modules and that the optimizer is built from the peft model's trainable "
                 "parameters (model.print_trainable_parameters())",
}


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
        require_compiled(wb)   # compiled gradients that are eager's because nothing compiled prove nothing
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


def _changed(technique: str, message: str, metrics: dict) -> Verdict:
    """The failure of a technique that changes the result: its cause, what that means and the
    switch (for a technique this module does not know, the message alone)."""
    if technique in WHAT:
        metrics = {**metrics, "cause_what": WHAT[technique], "switch": SWITCH[technique]}
    return Verdict(Status.FAIL, None, message, metrics, cause=CHANGES_THE_RESULT)


def same_result_verdict(r: Gradients | Trained, technique: str = "") -> Verdict:
    """Judge what ``keeps_the_result`` returned for ``technique``: pass, or fail with what
    diverged, as the cause CHANGES_THE_RESULT with what it means and the switch.

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
                diverged.append((float("inf"), f"{name}: no gradient"))
                continue
            res = accuracy.compare(torch.tensor(b), torch.tensor(a), tol, normwise=True)
            worst = res if worst is None or res["margin"] > worst["margin"] else worst
            if not res["ok"]:
                diverged.append((res["margin"], f"{name} (margin {res['margin']:.3g})"))
        metrics = {"margin": worst["margin"] if worst else None, "max_abs_err": worst["max_abs_err"] if worst else None,
                   "params_compared": len(r.names), "rtol": tol.rtol, "atol": tol.atol,
                   "tolerance_source": tol.source}
        if not r.names:   # nothing was compared: no finding about the technique
            return Verdict(Status.FAIL, None, "no gradients to compare", metrics)
        if diverged:   # how many, how far (the margin: the error over the tolerance), then which, the worst first
            diverged = [said for _, said in sorted(diverged, key=lambda d: -d[0])]
            far = f" (worst {worst['margin']:.3g}x the tolerance)" if worst and not worst["ok"] else ""
            return _changed(technique, f"gradients differ in {len(diverged)} of {len(r.names)} parameters{far}: "
                            + ", ".join(diverged[:5])
                            + (f", and {len(diverged) - 5} more" if len(diverged) > 5 else ""), metrics)
        return Verdict(Status.PASS, None, "", metrics)
    trainable, changed, everything = set(r.trainable), set(r.changed), r.all
    metrics = {"trainable": len(trainable), "changed": len(changed), "params": len(everything)}
    if changed != trainable:
        return _changed(technique, f"trained {len(changed)} parameters, {len(trainable)} are trainable: "
                        f"unexpected {sorted(changed - trainable)[:5]}, untouched {sorted(trainable - changed)[:5]}",
                        metrics)
    if not 0 < len(trainable) < len(everything):
        return _changed(technique, f"{len(trainable)} of {len(everything)} parameters trainable: the technique "
                        "froze nothing or everything", metrics)
    return Verdict(Status.PASS, None, "", metrics)
