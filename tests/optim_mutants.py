"""Sabotaged optimizations, for self-tests only: the optimization suite must catch them.

In the sandbox child, MPS_COMPAT_OPTIM_SABOTAGE (comma-separated) switches on:
  no-checkpointing    switching checkpointing on silently does nothing (``activation_checkpointing_enable``
                      and its deprecated alias ``gradient_checkpointing_enable``)
  adafactor-is-adamw  the "adafactor" optimizer is really AdamW
  ga-unscaled         gradient accumulation forgets to divide each micro-batch's loss
then the claim is measured (or the result compared) as usual. tests/optim_sabotage.py sends the suite's calls here.
"""
import os

from harness.optim import same_result, techniques, workloads


def _sabotage() -> set[str]:
    return {s for s in os.environ.get("MPS_COMPAT_OPTIM_SABOTAGE", "").split(",") if s}


def _ga_unscaled(self, tracker=None, micro_batches=None):  # the real one's signature: step() passes both
    total = 0.0
    for batch in self.batches[:micro_batches]:
        loss = self.forward(**batch).loss
        loss.backward()
        total += float(loss.detach())
    return total


def keeps_the_result_sabotaged(name, device):
    if "ga-unscaled" in _sabotage():
        workloads.Workload.step_without_update = _ga_unscaled
    return same_result.keeps_the_result(name, device)


def measure_claim_sabotaged(name, quantity, device, scale="small", family=()):
    chosen = _sabotage()
    if "no-checkpointing" in chosen:
        from transformers import PreTrainedModel
        for method in ("activation_checkpointing_enable", "gradient_checkpointing_enable"):
            if hasattr(PreTrainedModel, method):
                setattr(PreTrainedModel, method, lambda self, *args, **kwargs: None)
    if "adafactor-is-adamw" in chosen:
        real = workloads.build_optimizer

        def build_optimizer(setup, params):
            return real(setup.but(optimizer="adamw") if setup.optimizer == "adafactor" else setup, params)
        workloads.build_optimizer = build_optimizer
    return techniques.measure_claim(name, quantity, device, scale, family)
