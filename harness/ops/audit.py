"""Which aten ops a model dispatches in one training step, and which of them fell back.

``audit_model`` runs forward (with the loss), ``loss.backward()`` and one optimizer step,
each under an ``OpRecorder`` (a ``TorchDispatchMode``) and under
``harness.ops.fallback.capture()``, and returns per phase the op overloads dispatched, how
many calls each, and on MPS the ops that ran on the CPU instead.

Op names: ``aten::name`` or ``aten::name.overload`` (the default overload has no suffix:
``aten::addmm``, ``aten::add.Tensor``). That is ``OpOverload.name()`` in Python, built
from ``_schema.name`` + "." + ``_schema.overload_name`` when the overload is not empty,
and it is exactly how the MPS fallback warning prints the op: MPSFallback.mm streams
``op.schema().operator_name()``, whose ``operator<<`` (aten/src/ATen/core/operator_name.cpp)
writes the name and appends "." + overload only when there is one. So a recorded name
and a name in a fallback warning compare as plain strings.

What a dispatch mode sees: the ops that reach the backend kernels, after autograd and
after CompositeImplicitAutograd ops have decomposed (``aten::linear`` shows as
``aten::t`` + ``aten::addmm``); an op with a CompositeExplicitAutograd kernel shows as
itself, not as what it calls. The ops also depend on the device they ran on: SDPA picks a
per-device kernel (``aten::_scaled_dot_product_flash_attention_for_cpu`` on the CPU) and
AdamW's default path is per device (single-tensor on CPU and MPS, foreach on CUDA), so an
audit on the CPU predicts MPS only in part.

The static half, which ops of an audit have a native MPS kernel, is harness.ops.predict.
"""
from __future__ import annotations

import collections
import time
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.core.verdict import Verdict
from harness.ops import fallback, predict

PHASES = ("forward", "backward", "optimizer")

# name -> (torch.optim class name, keyword options). Unset (torch's default) lets torch
# choose: foreach only when every parameter is on cuda / xpu / mtia / privateuse1
# (torch 2.15 torch/optim/optimizer.py _get_foreach_kernels_supported_devices: not mps,
# not cpu), fused never by default. So on the CPU and on MPS the default AdamW takes the single-tensor loop.
OPTIMIZERS: dict[str, tuple[str, dict]] = {
    "adamw": ("AdamW", {}),
    "adamw-loop": ("AdamW", {"foreach": False, "fused": False}),
    "adamw-foreach": ("AdamW", {"foreach": True}),
    "adamw-fused": ("AdamW", {"fused": True}),
    "sgd": ("SGD", {"momentum": 0.9}),
}
LR = 1e-3
SEED = 0
# Bookkeeping ops that compute nothing (torch.optim wraps step() in a record_function).
IGNORED_NAMESPACES = ("profiler",)


def op_name(func) -> str:
    """``aten::name[.overload]`` for an OpOverload; ``str(func)`` for anything else."""
    name = getattr(func, "name", None)
    if callable(name):
        try:
            return str(name())
        except Exception:  # a non-OpOverload callable with its own name()
            pass
    return str(func)


class OpRecorder(TorchDispatchMode):
    """Count every op overload dispatched while the mode is active: ``calls[name] -> n``.

    All namespaces are kept (a custom op matters as much as an aten one) except
    IGNORED_NAMESPACES.
    """

    def __init__(self):
        super().__init__()
        self.calls: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = op_name(func)
        if name.split("::", 1)[0] not in IGNORED_NAMESPACES:
            self.calls[name] += 1
        return func(*args, **(kwargs or {}))


def optimizer_path(ops: Iterable[str]) -> str:
    """The kernel path an optimizer step took, read from the ops it dispatched."""
    ops = list(ops)
    if any(op.split("::")[-1].startswith("_fused_") for op in ops):
        return "fused"
    if any(op.split("::")[-1].startswith("_foreach_") for op in ops):
        return "foreach"
    return "single-tensor"


def _to(obj, device):
    """Move the tensors of a batch (tensor, mapping, list or tuple, nested) to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, Mapping):
        return {k: _to(v, device) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return type(obj)(*(_to(v, device) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to(v, device) for v in obj)
    return obj


def call_model(model, batch):
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (list, tuple)):
        return model(*batch)
    return model(batch)


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for v in out:
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


def loss_of(output, batch, loss_fn: Callable | None = None, model=None):
    """The scalar to call ``backward()`` on.

    ``loss_fn(output, batch)`` when given; else ``output.loss`` (a transformers model
    given ``labels``); else the first floating tensor of the output, summed.

    A transformers loss computed in a narrower dtype than the model's logits (a float64
    model whose causal-LM loss came back float32: see ``wide_loss``) is computed again in
    the logits' dtype; that needs ``model``, to know which loss the head computes.
    """
    if loss_fn is not None:
        return loss_fn(output, batch)
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, Mapping):
        loss = output.get("loss")
    if isinstance(loss, torch.Tensor):
        logits = getattr(output, "logits", None)
        if (isinstance(logits, torch.Tensor) and loss.is_floating_point() and logits.is_floating_point()
                and torch.finfo(logits.dtype).bits > torch.finfo(loss.dtype).bits):
            return wide_loss(model, logits, batch)
        return loss
    tensor = _first_tensor(output)
    if tensor is None or not tensor.is_floating_point():
        raise TypeError(f"cannot make a loss from a {type(output).__name__} output: give loss_fn or labels")
    return tensor.sum()


def _shifted_cross_entropy(logits, labels):
    """Token t predicts token t + 1; the last position has no target (ignore index -100)."""
    shifted = torch.nn.functional.pad(labels, (0, 1), value=-100)[..., 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shifted.reshape(-1),
                                             ignore_index=-100)


def _flat_cross_entropy(logits, labels):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                             ignore_index=-100)


# transformers' losses that upcast the logits with ``logits.float()`` "to avoid potential
# precision issues" (transformers/loss/loss_utils.py: ForCausalLMLoss, ForMaskedLMLoss,
# ForTokenClassification; the causal one is also what "ForConditionalGeneration" maps to).
# ``.float()`` casts float64 *down*, so a float64 reference model would get a float32
# loss, and training curves only float32-accurate. The same definitions, in the logits'
# dtype. Keyed by the name of the function the model's ``loss_function`` returns.
WIDE_LOSSES: dict[str, Callable] = {
    "ForCausalLMLoss": _shifted_cross_entropy,
    "ForMaskedLMLoss": _flat_cross_entropy,
    "ForTokenClassification": _flat_cross_entropy,
}
# transformers before 4.46 has no ``loss_function``: its heads, by class name.
WIDE_LOSSES_BY_CLASS = (("ForCausalLM", _shifted_cross_entropy), ("LMHeadModel", _shifted_cross_entropy),
                        ("ForMaskedLM", _flat_cross_entropy), ("ForTokenClassification", _flat_cross_entropy))


def wide_loss(model, logits, batch):
    """The model's loss computed in its logits' dtype (see WIDE_LOSSES)."""
    labels = batch.get("labels") if isinstance(batch, Mapping) else None
    name = getattr(getattr(model, "loss_function", None), "__name__", None) if model is not None else None
    fn = WIDE_LOSSES.get(name)
    if fn is None and model is not None and not getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        fn = next((f for suffix, f in WIDE_LOSSES_BY_CLASS if type(model).__name__.endswith(suffix)), None)
    if fn is None or labels is None:
        what = type(model).__name__ if model is not None else "this model (pass model= to loss_of)"
        raise TypeError(f"{what} computed its loss in a narrower dtype than its {logits.dtype} logits and its loss "
                        f"({name or 'unknown'}) cannot be recomputed here: give loss_fn")
    return fn(logits, labels.to(logits.device))


def make_optimizer(name: str, params):
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    cls, options = OPTIMIZERS[name]
    return getattr(torch.optim, cls)(params, lr=LR, **options)


def synchronize(dev) -> None:
    """Wait for the device's queued work (``torch.mps`` / ``torch.cuda`` / ``torch.cpu``), if it can."""
    fn = getattr(getattr(torch, dev.type, None), "synchronize", None)
    if callable(fn):
        fn()


def _one_line(phase: str, exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return f"{phase}: {line[:400]}"


def audit_model(model, batch, device, optimizer: str = "adamw", loss_fn: Callable | None = None,
                seed: int = SEED) -> dict:
    """Audit one training step of ``model`` on ``device``; never raises for a failing model.

    ``batch`` is the forward input: a mapping (``model(**batch)``, labels included for a
    transformers model), a list or tuple (``model(*batch)``) or one tensor. The loss is
    ``loss_of(output, batch, loss_fn)``. The model is put in train mode, moved to
    ``device`` and trained one step in place; ``torch.manual_seed(seed)`` is set before
    the forward so dropout is repeatable.

    Returns ``ops`` (phase -> sorted op names), ``calls`` (phase -> {op: calls}),
    ``fallback_ops`` (ops named by MPS fallback warnings, first-seen order) and
    ``fallback_by_phase``, ``optimizer`` (name, class, options and the kernel ``path``
    taken: single-tensor, foreach or fused), ``device``, ``model`` (class name),
    ``attn_implementation``, ``loss``, ``seconds`` (wall time per phase, device work
    included, recorder overhead too: a rough figure), ``warnings`` (first lines of other
    warnings) and ``error``: None, or one line naming the phase that failed (the
    phases before it keep their ops).
    """
    result: dict[str, Any] = {
        "model": type(model).__name__,
        "attn_implementation": getattr(getattr(model, "config", None), "_attn_implementation", None),
        "device": str(device), "optimizer": {"name": optimizer}, "loss": None,
        "ops": {p: [] for p in PHASES}, "calls": {p: {} for p in PHASES},
        "fallback_ops": [], "fallback_by_phase": {p: [] for p in PHASES},
        "seconds": {}, "warnings": [], "error": None,
    }
    phase = "setup"
    try:
        dev = torch.device(device)
        result["device"] = str(dev)
        model.to(dev)
        model.train()
        batch = _to(batch, dev)
        opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
        cls, options = OPTIMIZERS[optimizer]
        result["optimizer"].update({"class": cls, "options": dict(options)})
        opt.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        state: dict[str, Any] = {}

        def forward():
            state["loss"] = loss_of(call_model(model, batch), batch, loss_fn, model)

        steps = (("forward", forward), ("backward", lambda: state["loss"].backward()), ("optimizer", opt.step))
        for phase, step in steps:
            failure = None
            t0 = time.perf_counter()
            with fallback.capture() as cap, OpRecorder() as rec:
                try:
                    step()
                    synchronize(dev)
                except Exception as exc:  # leave the blocks normally so the capture is read
                    failure = exc
            result["seconds"][phase] = round(time.perf_counter() - t0, 4)
            _record(result, phase, rec, cap)
            if failure is not None:
                raise failure
            if phase == "forward" and state["loss"].numel() == 1:
                result["loss"] = float(state["loss"].detach().float().cpu())
        result["optimizer"]["path"] = optimizer_path(result["ops"]["optimizer"])
    except Exception as exc:
        result["error"] = _one_line(phase, exc)
    return result


def _record(result: dict, phase: str, rec: OpRecorder, cap) -> None:
    calls = dict(sorted(rec.calls.items()))
    result["calls"][phase] = calls
    result["ops"][phase] = list(calls)
    result["fallback_by_phase"][phase] = list(cap.ops)
    result["fallback_ops"].extend(op for op in cap.ops if op not in result["fallback_ops"])
    result["warnings"].extend(w for w in cap.other_warnings if w not in result["warnings"])


def audit_builtin(name: str, device: str, attn_implementation: str = "sdpa") -> dict:
    """Audit one of harness.core.models' built-in examples (a plain call for the sandbox child)."""
    from harness.core import models
    ex = models.example(name, attn_implementation)
    result = audit_model(ex.model, ex.batch, device, loss_fn=ex.loss_fn)
    result["attn_implementation"] = ex.attn_implementation
    return result


def judge_builtin(name: str, result: dict, mps_kernel_ops: Iterable[str], composite_ops: Iterable[str]) -> Verdict:
    """The verdict on built-in model ``name``'s audited training step (``audit_builtin``'s
    result), with the static prediction for MPS from the kernel table (``predict_native``).

    Category: "cpu-fallback" when MPS fallback warnings named ops, else "native"; a step that
    raised fails as "unsupported" (NotImplementedError: an op without a kernel here) or
    "n/a" (anything else); a phase that recorded no op at all fails, since the audit then
    says nothing about it.
    """
    predicted = predict.predict_native(result["ops"], mps_kernel_ops, composite_ops=composite_ops)
    metrics = {"model": name, "attn": result.get("attn_implementation"),
               "ops": {phase: len(names) for phase, names in result["ops"].items()},
               "fallback_ops": result["fallback_ops"],
               "optimizer_path": (result.get("optimizer") or {}).get("path"),
               # ops another device chose for itself (its own SDPA kernel...) carry a note instead
               "predicted_without_mps_kernel": [op for op in predicted["without_kernel"]
                                                if op not in predicted["notes"]],
               "predicted_notes": predicted["notes"]}
    category = "cpu-fallback" if result["fallback_ops"] else "native"
    error = result["error"]
    if error and "NotImplementedError" in error:
        switch = ("; PYTORCH_ENABLE_MPS_FALLBACK=1 runs the ops MPS lacks on the CPU"
                  if str(result.get("device", "")).startswith("mps") else "")
        return Verdict("fail", "unsupported", f"{error} (an op has no kernel on {result.get('device')}{switch})",
                       metrics)
    if error:
        return Verdict("fail", "n/a", error, metrics)
    silent = [phase for phase in PHASES if not result["ops"][phase]]
    if silent:
        return Verdict("fail", category, f"no op was recorded in the {', '.join(silent)} phase of the step, so the "
                                         f"audit says nothing about it (ops per phase: {metrics['ops']})", metrics)
    return Verdict("pass", category, "", metrics)
