"""A test-only pytest plugin (-p tests.perturb) that perturbs one layer of one model on purpose.

MPS_COMPAT_PERTURB="<model>:<parameter>", e.g. "bert:bert.encoder.layer.1.output.dense.weight":
every whole-model parity run of that model (harness.parity.models.runs) reaches the sandbox
child through ``perturbed`` below, which scales the target side's gradient of that
parameter by (1 + FACTOR) as backward computes it. The reference side is left alone, so
the forward/backward check of that model must fail and name that parameter, and no other.

FACTOR is 1e-2, not 1e-3: the tiny BERT's encoder gradients are about 1e-3 of its largest
(the classifier's), and on a gradient that small the model-grad tolerance resolves relative
errors down to about 1.3e-3 (rtol + atol * largest / own largest), not 1e-3.
"""
import importlib
import os

from harness.core import isolate

VAR = "MPS_COMPAT_PERTURB"
FACTOR = 1e-2

_real_call = isolate.Sandbox.call


def _perturbed_model_and_parameter() -> tuple[str, str]:
    model, _, parameter = os.environ.get(VAR, "").partition(":")
    return model, parameter


def _perturbing_call(self, target, *args, timeout=None):
    model, _ = _perturbed_model_and_parameter()
    if target.startswith("harness.parity.models.runs:") and args and args[0] == model:
        return _real_call(self, "tests.perturb:perturbed", target, *args, timeout=timeout)
    return _real_call(self, target, *args, timeout=timeout)


def perturbed(target: str, *args):
    """In the child: run ``target(*args)`` with the target side's gradient of the named parameter scaled."""
    from harness.parity.models import runs
    _, parameter = _perturbed_model_and_parameter()
    real_place = runs.place

    def place(model, side):
        model = real_place(model, side)
        if side.name == "target":
            dict(model.named_parameters())[parameter].register_hook(lambda grad: grad * (1 + FACTOR))
        return model

    module, _, function = target.partition(":")
    runs.place = place
    try:
        return getattr(importlib.import_module(module), function)(*args)
    finally:
        runs.place = real_place


isolate.Sandbox.call = _perturbing_call
