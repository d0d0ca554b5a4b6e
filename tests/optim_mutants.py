"""Sabotaged optimizations, for self-tests only: the optimization suite must catch them.

In the sandbox child, MPS_COMPAT_OPTIM_SABOTAGE (comma-separated) switches on:
  no-checkpointing    switching checkpointing on silently does nothing (``activation_checkpointing_enable``
                      and its deprecated alias ``gradient_checkpointing_enable``)
  adafactor-is-adamw  the "adafactor" optimizer is really AdamW
  ga-unscaled         gradient accumulation forgets to divide each micro-batch's loss
  nan-with-checkpointing  a step with checkpointing on computes a NaN loss (and NaN gradients): a technique
                      that saves memory and breaks training on this device, as half precision does on MPS
                      (the plain loop's step, and the Trainer's compute_loss where its arguments checkpoint)
  workers-in-main     DataLoader ignores num_workers (and persistent_workers): every batch is loaded in the
                      main process, whatever the arguments say, so workers preload nothing
  loader-waits        not a sabotage, a condition: each row of the loading claims' loader also waits
                      LOADER_WAIT_S, as a read from a slow disk does, using no CPU: a loader whose cost
                      workers can hide even on 2 cores (forked workers inherit it)
then the claim is measured (or the result compared) as usual. tests/optim_sabotage.py sends the suite's calls here.
"""
import os

from harness.optim import same_result, techniques, trainer_runs, workloads


def _sabotage() -> set[str]:
    return {s for s in os.environ.get("MPS_COMPAT_OPTIM_SABOTAGE", "").split(",") if s}


def _ga_unscaled(self, tracker=None, micro_batches=None):  # the real one's signature: step() passes both
    total = 0.0
    for batch in self.batches[:micro_batches]:
        loss = self.forward(**batch).loss
        loss.backward()
        total += float(loss.detach())
    return total


_real_step_without_update = workloads.Workload.step_without_update


def _nan_with_checkpointing(self, tracker=None, micro_batches=None):
    """The real step, its loss (and so its gradients) NaN where the setup checkpoints."""
    if not self.setup.checkpointing:
        return _real_step_without_update(self, tracker, micro_batches)
    real_forward = self.forward

    def forward(**batch):
        out = real_forward(**batch)
        out.loss = out.loss * float("nan")
        return out
    self.forward = forward
    try:
        return _real_step_without_update(self, tracker, micro_batches)
    finally:
        self.forward = real_forward


def _trainer_nan_with_checkpointing():
    from transformers import Trainer
    real = Trainer.compute_loss
    if getattr(real, "sabotaged", False):
        return

    def compute_loss(self, model, inputs, return_outputs=False, **kwargs):
        out = real(self, model, inputs, return_outputs=return_outputs, **kwargs)
        if not self.args.gradient_checkpointing:
            return out
        return (out[0] * float("nan"), *out[1:]) if return_outputs else out * float("nan")
    compute_loss.sabotaged = True
    Trainer.compute_loss = compute_loss


def _workers_in_main() -> None:
    from torch.utils.data import DataLoader
    real = DataLoader.__init__
    if getattr(real, "sabotaged", False):
        return

    def __init__(self, *args, **kwargs):
        kwargs.update(num_workers=0, persistent_workers=False, prefetch_factor=None)
        real(self, *args, **kwargs)
    __init__.sabotaged = True
    DataLoader.__init__ = __init__


LOADER_WAIT_S = 0.01


def _loader_waits() -> None:
    import time
    real = trainer_runs.Tokenize.__call__
    if getattr(real, "waits", False):
        return

    def __call__(self, batch):
        time.sleep(LOADER_WAIT_S * len(batch["text"]))
        return real(self, batch)
    __call__.waits = True
    trainer_runs.Tokenize.__call__ = __call__


def measure_trainer_claim_sabotaged(name, quantity, device, scale="small"):
    if "nan-with-checkpointing" in _sabotage():
        _trainer_nan_with_checkpointing()
    if "workers-in-main" in _sabotage():
        _workers_in_main()
    if "loader-waits" in _sabotage():
        _loader_waits()
    return trainer_runs.measure_trainer_claim(name, quantity, device, scale)


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
    if "nan-with-checkpointing" in chosen:
        workloads.Workload.step_without_update = _nan_with_checkpointing
    return techniques.measure_claim(name, quantity, device, scale, family)
