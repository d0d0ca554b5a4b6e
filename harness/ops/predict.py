"""Which of an audit's ops have a native MPS kernel: the static half of the model audit.

``predict_native`` takes the audited op names (harness.ops.audit) and the ops that have a
native MPS kernel (native_functions.yaml entries whose ``dispatch`` names MPS, from
harness.ops.kernels) and splits the audit into ops with a kernel, composites (when told
which ops are) and ops without. A table cannot see which composites run natively, nor the
ops MPSFallback.mm registers to the CPU fallback; running on a Mac is the ground truth.
"""
from __future__ import annotations

from typing import Iterable, Mapping


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
    (``audit_model(..., "mps")["fallback_ops"]``) is the ground truth.
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
