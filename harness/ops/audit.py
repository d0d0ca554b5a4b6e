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

The static half, which ops of an audit have a native MPS kernel, is ``predict_native``
(below): it takes the audited op names and the ops that have a native MPS kernel
(native_functions.yaml entries whose ``dispatch`` names MPS, from harness.ops.kernels) and
splits the audit into ops with a kernel, composites (when told which ops are) and ops
without. A table cannot see which composites run natively, nor the ops MPSFallback.mm
registers to the CPU fallback; running on a Mac is the ground truth.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from harness.core import errors, models
from harness.core.records import REASON_MAX, Category, Status, Verdict
from harness.env import devices
from harness.ops import fallback

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


def make_optimizer(name: str, params):
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; known: {', '.join(OPTIMIZERS)}")
    cls, options = OPTIMIZERS[name]
    return getattr(torch.optim, cls)(params, lr=LR, **options)


def _one_line(phase: str, exc: BaseException) -> str:
    """The phase and the exception as one line (harness.core.errors: with the library and the
    versions to change where a library asks this torch for a name it lacks)."""
    return f"{phase}: {errors.one_line(exc)}"[:REASON_MAX]


@dataclasses.dataclass
class Audit:
    """One training step of a model audited on a device (``audit_model``).

    ``ops`` (phase -> sorted op names), ``calls`` (phase -> {op: calls}), ``fallback_ops``
    (ops named by MPS fallback warnings, first-seen order) and ``fallback_by_phase``,
    ``optimizer`` (name, class, options and the kernel ``path`` taken: single-tensor,
    foreach or fused), ``device``, ``model`` (class name), ``attn_implementation``,
    ``loss``, ``seconds`` (wall time per phase, device work included, recorder overhead
    too: a rough figure), ``warnings`` (first lines of other warnings) and ``error``: None,
    or one line naming the phase that failed (the phases before it keep their ops)."""
    model: str
    attn_implementation: str | None = None
    device: str = ""
    optimizer: dict = dataclasses.field(default_factory=dict)
    loss: float | None = None
    ops: dict = dataclasses.field(default_factory=lambda: {p: [] for p in PHASES})
    calls: dict = dataclasses.field(default_factory=lambda: {p: {} for p in PHASES})
    fallback_ops: list = dataclasses.field(default_factory=list)
    fallback_by_phase: dict = dataclasses.field(default_factory=lambda: {p: [] for p in PHASES})
    seconds: dict = dataclasses.field(default_factory=dict)
    warnings: list = dataclasses.field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def audit_model(model, batch, device, optimizer: str = "adamw", loss_fn: Callable | None = None,
                seed: int = SEED) -> Audit:
    """Audit one training step of ``model`` on ``device``; never raises for a failing model.

    ``batch`` is the forward input: a mapping (``model(**batch)``, labels included for a
    transformers model), a list or tuple (``model(*batch)``) or one tensor. The loss is
    ``harness.core.models.loss_of(output, batch, loss_fn)``. The model is put in train
    mode, moved to ``device`` and trained one step in place; ``torch.manual_seed(seed)`` is
    set before the forward so dropout is repeatable. What it found: an ``Audit``.
    """
    result = Audit(type(model).__name__, getattr(getattr(model, "config", None), "_attn_implementation", None),
                   str(device), {"name": optimizer})
    phase = "setup"
    target = str(device)
    try:
        # a stand-in (the emulated Mac) trains on the CPU inside its context, where its rules hold
        with devices.on_device(target):
            dev = torch.device(devices.place(target))
            sync = devices.synchronizer(target)
            result.device = target if devices.stand_in(target) is not None else str(dev)
            model.to(dev)
            model.train()
            batch = models.to_device(batch, dev)
            opt = make_optimizer(optimizer, [p for p in model.parameters() if p.requires_grad])
            cls, options = OPTIMIZERS[optimizer]
            result.optimizer.update({"class": cls, "options": dict(options)})
            opt.zero_grad(set_to_none=True)
            torch.manual_seed(seed)
            state: dict[str, Any] = {}

            def forward():
                state["loss"] = models.loss_of(models.call_model(model, batch), batch, loss_fn, model)

            steps = (("forward", forward), ("backward", lambda: state["loss"].backward()), ("optimizer", opt.step))
            for phase, step in steps:
                failure = None
                t0 = time.perf_counter()
                with fallback.capture() as cap, OpRecorder() as rec:
                    try:
                        step()
                        sync()
                    except Exception as exc:  # leave the blocks normally so the capture is read
                        failure = exc
                result.seconds[phase] = round(time.perf_counter() - t0, 4)
                _record(result, phase, rec, cap)
                if failure is not None:
                    raise failure
                if phase == "forward" and state["loss"].numel() == 1:
                    result.loss = float(state["loss"].detach().float().cpu())
            result.optimizer["path"] = optimizer_path(result.ops["optimizer"])
    except Exception as exc:
        result.error = _one_line(phase, exc)
    return result


def _record(result: Audit, phase: str, rec: OpRecorder, cap) -> None:
    calls = dict(sorted(rec.calls.items()))
    result.calls[phase] = calls
    result.ops[phase] = list(calls)
    result.fallback_by_phase[phase] = list(cap.ops)
    result.fallback_ops.extend(op for op in cap.ops if op not in result.fallback_ops)
    result.warnings.extend(w for w in cap.other_warnings if w not in result.warnings)


def audit_builtin(name: str, device: str, attn_implementation: str = "sdpa") -> Audit:
    """Audit one of harness.core.models' built-in examples (a plain call for the sandbox child)."""
    ex = models.example(name, attn_implementation)
    result = audit_model(ex.model, ex.batch, device, loss_fn=ex.loss_fn)
    result.attn_implementation = ex.attn_implementation
    return result


def judge_builtin(name: str, result: Audit, mps_kernel_ops: Iterable[str], composite_ops: Iterable[str]) -> Verdict:
    """The verdict on built-in model ``name``'s audited training step (``audit_builtin``'s
    result), with the static prediction for MPS from the kernel table (``predict_native``).

    Category: "cpu-fallback" when MPS fallback warnings named ops, else "native"; a step that
    raised fails as "unsupported" (an op without a kernel here: harness.ops.fallback.no_kernel) or
    "n/a" (anything else); a phase that recorded no op at all fails, since the audit then
    says nothing about it.
    """
    predicted = predict_native(result.ops, mps_kernel_ops, composite_ops=composite_ops)
    metrics = {"model": name, "attn": result.attn_implementation,
               "ops": {phase: len(names) for phase, names in result.ops.items()},
               "fallback_ops": result.fallback_ops,
               "optimizer_path": result.optimizer.get("path"),
               # ops another device chose for itself (its own SDPA kernel...) carry a note instead
               "predicted_without_mps_kernel": [op for op in predicted["without_kernel"]
                                                if op not in predicted["notes"]],
               "predicted_notes": predicted["notes"]}
    category = Category.CPU_FALLBACK if result.fallback_ops else Category.NATIVE
    error = result.error
    if error and fallback.no_kernel(error):
        switch = ("; PYTORCH_ENABLE_MPS_FALLBACK=1 runs the ops MPS lacks on the CPU"
                  if devices.rules_of(result.device.split(":")[0]) == "mps" else "")
        return Verdict(Status.FAIL, Category.UNSUPPORTED,
                       f"{error} (an op has no kernel on {result.device}{switch})", metrics)
    if error:
        return Verdict(Status.FAIL, Category.NA, error, metrics)
    silent = [phase for phase in PHASES if not result.ops[phase]]
    if silent:
        return Verdict(Status.FAIL, category, f"no op was recorded in the {', '.join(silent)} phase of the step, so "
                                              f"the audit says nothing about it (ops per phase: {metrics['ops']})",
                       metrics)
    return Verdict(Status.PASS, category, "", metrics)


# --------------------------------------------------------------------------- the static prediction


def normalize_op(name: str) -> str:
    """The native_functions.yaml name of an aten op: ``name`` or ``name.overload``.

    ``aten::add.Tensor`` / ``aten.add.Tensor`` / ``add.Tensor`` -> ``add.Tensor``;
    ``aten::addmm`` / ``aten.addmm.default`` / ``addmm.default`` -> ``addmm``.
    Ops of other namespaces keep theirs (``prims::view_of``): the yaml has no entry for them.
    """
    name = name.strip()
    if "::" in name:
        ns, _, rest = name.partition("::")
        if ns != "aten":
            return name
        name = rest
    elif name.startswith("aten."):
        name = name[len("aten."):]
    if name.endswith(".default"):
        name = name[: -len(".default")]
    return name


def _base(name: str) -> str:
    """``add_.Tensor`` -> ``add``: the op family (in-place trailing underscore dropped)."""
    base = name.split(".", 1)[0]
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


_SDPA_ON_MPS = ("on MPS, scaled_dot_product_attention takes its own path "
                "(_scaled_dot_product_attention_math_for_mps, or the math decomposition into matmul + softmax)")
# Ops that are another device's own choice: an audit taken there shows them, but MPS would
# dispatch something else in their place. The prediction notes them rather than judging them.
DEVICE_CHOICES: dict[str, str] = {
    "_scaled_dot_product_flash_attention_for_cpu": "the CPU's SDPA kernel; " + _SDPA_ON_MPS,
    "_scaled_dot_product_flash_attention_for_cpu_backward": "the CPU's SDPA backward; " + _SDPA_ON_MPS,
    "_scaled_dot_product_flash_attention": "a CUDA SDPA kernel; " + _SDPA_ON_MPS,
    "_scaled_dot_product_flash_attention_backward": "a CUDA SDPA backward; " + _SDPA_ON_MPS,
    "_scaled_dot_product_efficient_attention": "a CUDA SDPA kernel; " + _SDPA_ON_MPS,
    "_scaled_dot_product_efficient_attention_backward": "a CUDA SDPA backward; " + _SDPA_ON_MPS,
    "_scaled_dot_product_cudnn_attention": "a CUDA SDPA kernel; " + _SDPA_ON_MPS,
    "_scaled_dot_product_cudnn_attention_backward": "a CUDA SDPA backward; " + _SDPA_ON_MPS,
}
# Ops that aten/src/ATen/mps/MPSFallback.mm sends to the CPU fallback whatever the yaml says
# (pytorch main at 035290b7; the list changes between versions: bitwise_* left it once they
# got MPS kernels). Noted, not judged, since the audited torch may differ.
_REGISTERED = "MPSFallback.mm registers this op to the CPU fallback on MPS (recent torch; varies by version)"
REGISTERED_FALLBACKS: dict[str, str] = {name: _REGISTERED for name in (
    "embedding_renorm_", "linalg_svd", "linalg_svd.U", "col2im", "upsample_nearest3d.vec")}


def predict_native(ops, mps_kernel_ops: Iterable[str], delegates: Mapping[str, str] | None = None,
                   composite_ops: Iterable[str] | None = None, by_name: bool = False) -> dict:
    """Split audited ops into those with a native MPS kernel and those without.

    Plain data in, so any source of the kernel table will do (harness/ops/kernels.py reads it
    from the torch wheel's native_functions.yaml):

    ``ops``: op names (any spelling ``normalize_op`` takes), or an audit's ``ops`` mapping
    (phase -> names; the phases are merged). ``mps_kernel_ops``: the yaml names with an MPS
    kernel (``add.out``, ``addmm.out``, ``_softmax.out``...). A functional or in-place op
    usually has no MPS line of its own (``add.Tensor`` and ``add_.Tensor`` are
    ``structured_delegate: add.out``) and gets the kernel of its ``out`` form: either the
    set already holds those names (``harness.ops.kernels.mps_ops`` resolves delegates) or
    ``delegates`` (yaml name -> its ``structured_delegate``) resolves them here. For a raw
    list with neither, ``by_name=True`` counts an op as having a kernel when another
    overload of the same family has one: right for structured ops, wrong when only some
    overloads are native.
    ``composite_ops``: yaml names with a CompositeExplicitAutograd(NonFunctional) kernel,
    or none at all (CompositeImplicitAutograd): device-generic code that runs as other
    ops, so "no MPS kernel" is no verdict on them (``t``, ``_to_copy``, ``mul.Scalar``).

    Returns ``with_kernel``, ``composite`` (empty unless ``composite_ops`` is given) and
    ``without_kernel`` (audited names, sorted; together they are all of ``ops``),
    ``matched`` (op -> "exact" | "structured_delegate" | "composite" | "same-name") and
    ``notes`` (op -> a caveat: another device's own choice, DEVICE_CHOICES, or a registered
    CPU fallback, REGISTERED_FALLBACKS).

    What the table cannot see: an op "without kernel" falls back to the CPU on MPS or is a
    composite not in ``composite_ops``; the ops MPSFallback.mm registers to the CPU
    fallback (``col2im``, ``linalg_svd``...) can look native or composite here; and an
    audit taken on another device holds that device's choices (its SDPA kernel, its
    optimizer path). Running on a Mac and reading the fallback warnings
    (``audit_model(..., "mps").fallback_ops``) is the ground truth.
    """
    if isinstance(ops, Mapping):
        ops = [op for names in ops.values() for op in names]
    kernels = {normalize_op(k) for k in mps_kernel_ops}
    delegates = {normalize_op(k): normalize_op(v) for k, v in (delegates or {}).items()}
    composites = {normalize_op(k) for k in (composite_ops or ())}
    families = {_base(k) for k in kernels} if by_name else set()
    out = {"with_kernel": [], "composite": [], "without_kernel": [], "matched": {}, "notes": {}}
    for op in sorted(set(ops)):
        name = normalize_op(op)
        how = None
        if name in kernels:
            how = "exact"
        elif delegates.get(name) in kernels:
            how = "structured_delegate"
        elif name in composites:
            how = "composite"
        elif by_name and "::" not in name and _base(name) in families:
            how = "same-name"
        bucket = "composite" if how == "composite" else "with_kernel" if how else "without_kernel"
        out[bucket].append(op)
        if how:
            out["matched"][op] = how
        note = DEVICE_CHOICES.get(name) or REGISTERED_FALLBACKS.get(name)
        if note:
            out["notes"][op] = note
    return out
