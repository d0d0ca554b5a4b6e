"""OpInfo samples for op parity: moved between dtypes and devices with their sizes, strides
and storage offset kept (relayout, convert), evaluated on the CPU (evaluate), their float64
reference and its sensitivity trials (wide_reference, TRIALS), and a digest of each
sample's inputs (fingerprint).
"""
from __future__ import annotations

import hashlib
import re

from harness.env import devices
from harness.ops.opsweep import GRAD_SEED


def relayout(t, dtype=None, device=None, fn=None):
    """``t`` in another dtype / on another device with the same sizes, strides and offset.

    ``fn``, if given, maps the underlying storage's values (as a flat tensor) first.
    """
    import torch
    if t.layout != torch.strided:
        out = t.detach().to(device=device or t.device, dtype=dtype or t.dtype)
        out = fn(out) if fn else out
    elif t.numel() == 0 or t.is_contiguous() and t.storage_offset() == 0:
        out = t.detach().to(device=device or t.device, dtype=dtype or t.dtype, copy=True).contiguous()
        out = fn(out) if fn else out
    else:
        extent = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1
        flat = t.detach().as_strided((extent,), (1,), 0).to(device=device or t.device, dtype=dtype or t.dtype)
        out = (fn(flat) if fn else flat).as_strided(t.size(), t.stride(), t.storage_offset())
    return out.requires_grad_(t.requires_grad)


def convert(sample, from_dtype, to_dtype, device):
    """The sample with every ``from_dtype`` tensor (and dtype argument) in ``to_dtype``."""
    import torch

    def f(x):
        if isinstance(x, torch.dtype):
            return to_dtype if x == from_dtype else x
        return relayout(x, to_dtype if x.dtype == from_dtype else None, device)
    return sample.transform(f)


def _tensors(tree):
    import torch
    from torch.utils import _pytree
    return [t for t in _pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def evaluate(op, sample, pass_: str, seed: int, grad_dtype):
    """The processed output (forward) or the inputs' gradients (backward), on the CPU.

    A forward output defined only up to a choice (harness.parity.numerics.outputs.DEFINED: an LU's pivots,
    unique's order) is reduced to what is defined instead of OpInfo's processing, on the CPU
    (the reduction's own arithmetic is the judge's: float64, which MPS does not have)."""
    import torch

    from harness.parity.numerics import outputs  # torch at import: not when the suite is collected
    torch.manual_seed(seed)
    raw = op(sample.input, *sample.args, **sample.kwargs)
    reduce = outputs.defined(op.name) if pass_ == "forward" else None
    if reduce:
        out = _to_cpu(raw)
        with devices.host_work():
            out = reduce(out, sample)
    else:
        out = sample.output_process_fn_grad(raw)
    if pass_ == "forward":
        return _to_cpu(out)
    outs = [t for t in _tensors(out) if t.requires_grad]
    ins = [t for t in _tensors((sample.input, sample.args, sample.kwargs)) if t.requires_grad]
    if not outs or not ins:
        return None
    gen = torch.Generator().manual_seed(GRAD_SEED)
    grads = [torch.randn(o.shape, generator=gen).to(grad_dtype or o.dtype).to(o.dtype).to(o.device) for o in outs]
    got = torch.autograd.grad(outs, ins, grads, allow_unused=True)
    return [None if g is None else g.detach().cpu() for g in got]


def _to_cpu(tree):
    import torch
    from torch.utils import _pytree

    def leaf(x):
        if isinstance(x, torch.Tensor):
            x = x.detach()
            if x.layout != torch.strided:
                x = x.to_dense()
            return x.cpu()
        return x
    return _pytree.tree_map(leaf, tree)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def fingerprint(sample) -> str:
    """A short digest of one sample's inputs (values, dtypes, shapes, strides, other
    arguments). OpInfo generates the samples anew in each torch release; comparing digests
    tells a result that changed on the same inputs (the kernel) from one that changed
    because the inputs did."""
    h = hashlib.blake2b(digest_size=4)

    def feed(x) -> None:
        import torch
        if isinstance(x, torch.Tensor):
            t = x.detach()
            h.update(f"T{t.dtype}{tuple(t.shape)}{t.stride() if t.layout == torch.strided else t.layout}".encode())
            try:
                flat = t.resolve_conj().resolve_neg().contiguous().reshape(-1)
                h.update(flat.view(torch.uint8).numpy().tobytes())
            except (RuntimeError, TypeError):  # sparse, quantized ...: described, not read
                h.update(repr(t.layout).encode())
        elif isinstance(x, (list, tuple)):
            h.update(f"{type(x).__name__}{len(x)}".encode())
            for v in x:
                feed(v)
        elif isinstance(x, dict):
            for k in sorted(x, key=str):
                h.update(str(k).encode())
                feed(x[k])
        elif callable(x):
            h.update(getattr(x, "__qualname__", type(x).__name__).encode())
        else:
            h.update(_ADDRESS.sub("", repr(x)).encode())

    feed(sample.input)
    feed(tuple(sample.args))
    feed(dict(sample.kwargs))
    return h.hexdigest()


def narrowed(tree, wide, dt):
    """``tree`` with each ``wide`` tensor (a float64 result) rounded to ``dt``; others as they are."""
    import torch
    from torch.utils import _pytree
    return _pytree.tree_map(lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.dtype == wide else x, tree)


# How far the float64 inputs move in a sensitivity trial: K units of the low-precision
# dtype's epsilon, relatively (a kernel rounds several times per output element: a few
# units of error each) (zeros and signs stay), with these sign patterns: all up,
# all down, alternating between input tensors (a / b moves when a and b move apart),
# and random per element (a sum or a difference within one tensor moves).
K_EPS = 8
TRIALS = ("up", "down", "alternate", "random")


def _perturb(sample, wide, eps: float, trial: int):
    import torch
    gen = torch.Generator().manual_seed(trial)
    counter = iter(range(10**9))

    def f(x):
        if not isinstance(x, torch.Tensor) or x.dtype != wide or x.numel() == 0:
            return x
        j = next(counter)

        def move(values):  # values: the tensor's storage, so a shared (expanded) value moves once
            if TRIALS[trial] == "random":
                sign = torch.randint(0, 2, values.shape, generator=gen).to(values.dtype) * 2 - 1
            else:
                sign = {"up": 1.0, "down": -1.0, "alternate": (-1.0) ** j}[TRIALS[trial]]
            return values * (1 + sign * K_EPS * eps)
        return relayout(x, fn=move)
    return sample.transform(f)


def wide_reference(op, sample, dt, wide, pass_: str, trial: int | None = None, like=None):
    """The op in float64 on the sample's values, rounded to ``dt`` (the best ``dt`` can hold).

    With ``trial``, on inputs moved by a rounding-sized amount first (see TRIALS). With
    ``like`` (the result in ``dt``), each output is rounded to that output's dtype instead:
    an output that is float64 by design (``float_power``) stays float64.
    """
    import torch
    from torch.utils import _pytree
    s64 = convert(sample, dt, wide, "cpu")
    if trial is not None:
        s64 = _perturb(s64, wide, torch.finfo(dt).eps, trial)
    out = evaluate(op, s64, pass_, 0, dt)
    if like is not None:
        leaves, spec = _pytree.tree_flatten(out)
        shapes = _pytree.tree_flatten(like)[0]
        if len(shapes) == len(leaves):
            return _pytree.tree_unflatten(
                [x.to(t.dtype) if isinstance(x, torch.Tensor) and x.dtype == wide and isinstance(t, torch.Tensor)
                 else x for x, t in zip(leaves, shapes)], spec)
    return narrowed(out, wide, dt)
