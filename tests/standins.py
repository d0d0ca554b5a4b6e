"""Stand-in accelerators: a test-only pytest plugin (``-p tests.standins``).

Each registers a target that takes the accelerator path on the CPU while differing from
the CPU the way a real device can (harness.env.devices.StandIn). Select one by name:

    pytest suites/ -m parity -p tests.standins --device standin-oracle

  standin-oracle  computes in float64 and rounds to the dtype: the most accurate device
                  there can be. Every check must pass.
  standin-noisy   the CPU's result with one unit in the last place added or taken on about
                  a third of the floating elements (a kernel that rounds differently).
                  Every check must pass.
  standin-ties    sort, topk, kthvalue, mode, median and nanmedian run on their input
                  flipped along the dimension, with the indices mapped back: the same
                  values, another valid order of equal ones (an unstable sort is free to
                  do that; a stable one is left alone); unique with sorted=False
                  lists its values in descending order. Every check must pass.
  standin-reorder  sums, means, products, norms, variances, log-sum-exp, softmax (and its
                  gradient) and matmuls add their terms in another order: each reduced
                  dimension (a matmul's inner one) shuffled, the same real number rounded
                  otherwise, as a GPU's tree reduction, split-K matmul or blocked softmax
                  rounds it. Every check the CPU passes must pass (on torch 2.15: all of
                  suites/parity but the complex64 pseudo-inverse of a singular product, a
                  known limit, and the CPU's own float16 NaNs).
  standin-atomic  as standin-reorder, in a new order on every call (as atomic adds land):
                  two runs on the same inputs differ in their last bits. Every check the
                  CPU passes must pass; the repeatable checks record it as nondeterministic.
  standin-half-sums  float16 and bfloat16 sums, means and matmuls keep their running sum in
                  the dtype itself (one rounding per term, or per block of a long sum), as a
                  kernel with a half-precision accumulator does (a GPU's atomic adds in
                  half, cuBLAS's reduced-precision reductions). float32 is the CPU's. Where
                  it fails a check, the cause must be named reduced-precision.
  standin-half-atomic  as standin-half-sums, in a new order on every call, as CUDA's float16
                  atomic adds land (grid_sampler's and trilinear interpolation's backward).
                  Where a second run, in another order, misses too, the cause must be
                  reduced-precision (a fixed order would not help); where it passes,
                  nondeterministic, with float32 as the switch in half precision.
  standin-known-bugs  reproduces each known-bug case's reported wrong result at its edge
                  (tests/reported_bugs.py): every known-bug case must fail on it.
  standin-tf32    rounds the float32 inputs of matmuls and convolutions (mm, bmm, addmm,
                  baddbmm, addbmm, convolution and its backward) to TF32, 10 bits of
                  mantissa, as an Ampere-or-newer GPU does with TF32 allowed, unless the
                  run turned TF32 off (harness.env.devices.tf32(False) sets
                  torch.backends.cudnn.allow_tf32 to False). The matmul and convolution
                  family fails in float32, with TF32 as the cause.
  standin-mps     an emulated Mac (tests/emulated_mps.py): MPS's kernel table of the
                  installed torch, its fallback warning and NotImplementedError, no
                  float64, bf16 from macOS 14 (the recorded Mac's), its memory API and a
                  queue of matmul and convolution work. Every suite takes its mps branches
                  for it; the controls must pass on it.
  standin-mps-mute, -once, -nokernels, -frozen, -stale-peak, -frozen-driver, -blind,
  -zeroclock, -skewed
                  the emulated Mac with one instrument broken on purpose (fallback
                  warnings swallowed; warned once even with warn-always; an empty kernel
                  table; memory readings frozen; a peak whose reset does nothing; the
                  driver reading frozen; synchronize that runs nothing; a clock that
                  reads zero; results 1% off): the controls watching that instrument
                  must fail on it.

The sandbox children import this module too (harness.core.isolate.PRELOAD_VAR), so the checks
that run there see the same targets.
"""
from __future__ import annotations

import contextlib
import math
import os

import torch
from torch.utils import _pytree
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

from harness.core import isolate
from harness.env import devices
from tests import emulated_mps

_preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m]
if __name__ not in _preload:
    os.environ[isolate.PRELOAD_VAR] = ",".join([*_preload, __name__])


def _floating(x) -> bool:
    return isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())


class Oracle(devices.StandIn):
    name = "standin-oracle"
    summary = "computes in float64 and rounds to the dtype (the most accurate device there can be)"

    def run(self, compute, cpu, reference):
        return compute() if reference is None else reference


class Noisy(devices.StandIn):
    name = "standin-noisy"
    summary = "the CPU's result, one unit in the last place off on about a third of the floating elements"
    SEED = 0

    def finish(self, result, cpu, reference):
        gen = torch.Generator().manual_seed(self.SEED)  # the same noise on every rerun

        def nudge(x):
            if not _floating(x) or x.numel() == 0 or x.layout != torch.strided:  # sparse: as it is
                return x
            if x.is_complex():  # conj() and neg views hold their values lazily: view_as_real refuses them
                x = x.resolve_conj().resolve_neg()
            real = torch.view_as_real(x) if x.is_complex() else x
            finite = torch.isfinite(x).unsqueeze(-1).expand(real.shape) if x.is_complex() else torch.isfinite(x)
            hit = torch.rand(real.shape, generator=gen) < 1 / 3
            toward = torch.where(torch.rand(real.shape, generator=gen) < 0.5, torch.inf, -torch.inf).to(real.dtype)
            moved = torch.nextafter(real, toward)
            keep = ~hit | ~finite | ~torch.isfinite(moved)  # a non-finite value as it is; no new inf
            out = torch.where(keep, real, moved)
            return torch.view_as_complex(out.contiguous()) if x.is_complex() else out
        return _pytree.tree_map(nudge, result)


# unique's aten ops -> the position of their ``sorted`` argument
_UNORDERED = {torch.ops.aten._unique2.default: 1, torch.ops.aten.unique_dim.default: 2}

# aten op -> (where its dimension argument is: a position or a keyword name; its default)
_TIE_BREAKERS = {
    torch.ops.aten.sort.default: (1, -1),
    torch.ops.aten.sort.stable: ("dim", -1),
    torch.ops.aten.topk.default: (2, -1),
    torch.ops.aten.kthvalue.default: (2, -1),
    torch.ops.aten.mode.default: (1, -1),
    torch.ops.aten.median.dim: (1, None),
    torch.ops.aten.nanmedian.dim: (1, None),
}


class ModeStandIn(devices.StandIn):
    """A stand-in that differs from the CPU through a dispatch mode (``mode()``), and only
    where the mode changed an op. Merely running under a Python dispatch mode can change a
    kernel's result (torch 2.15's linalg.polar complex64 returns a wrong H, reconstruction
    off by 0.5, under a pass-through mode), which no real device would share: where the
    mode changed nothing, the result is the plain computation's."""

    Mode: type | None = None   # the dispatch mode (a CountingMode), made anew for each run

    def mode(self) -> "CountingMode":
        return self.Mode()

    running = False

    def run(self, compute, cpu, reference):
        mode = self.mode()
        self.running = True
        try:
            with mode:
                result = compute()
        finally:
            self.running = False
        return self.finish(result if mode.changed else compute(), cpu, reference)

    @contextlib.contextmanager
    def host(self):
        """The harness's own arithmetic (devices.host_work) runs outside the mode, as on a
        device whose results it has copied to the CPU."""
        if not self.running:
            yield
            return
        with _disable_current_modes():
            yield


class CountingMode(TorchDispatchMode):
    changed = 0  # ops this mode computed differently


class FlippedTies(CountingMode):
    """The tie-breaking ops on their input flipped along the dimension: another valid
    choice among equal values, the indices mapped back (n - 1 - i)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _UNORDERED:
            return self.reversed_unique(func, args, kwargs)
        spec = _TIE_BREAKERS.get(func)
        if spec is None or kwargs.get("stable"):
            return func(*args, **kwargs)
        where, default = spec
        dim = kwargs.get(where, default) if isinstance(where, str) else (
            args[where] if len(args) > where else kwargs.get("dim", default))
        x = args[0]
        if dim is None or x.dim() == 0:
            return func(*args, **kwargs)
        if (func is torch.ops.aten.mode.default and x.numel() and x.dtype != torch.bool
                and not x.is_floating_point()):
            # another of several modes, as CUDA's kernel returned for int64, int32 and uint8
            # on the H100 (its float32 modes, where every distinct value is a mode, matched
            # the CPU's, and so did their gradients): the mode of the values in reverse order
            # (top - x, exact in integers, unsigned too) is the largest of the tied ones
            self.changed += 1
            top = x.max()
            values, indices = func(top - x, *args[1:], **kwargs)
            return top - values, indices
        self.changed += 1
        values, indices = func(x.flip(dim), *args[1:], **kwargs)
        return values, (x.size(dim) - 1) - indices


    def reversed_unique(self, func, args, kwargs):
        """unique with sorted=False in descending order, its inverse indices and counts
        following: another order the call leaves free."""
        at = _UNORDERED[func]
        ordered = args[at] if len(args) > at else kwargs.get("sorted", True)
        values, inverse, counts = func(*args, **kwargs)
        if ordered or values.dim() == 0:
            return values, inverse, counts
        dim = args[1] if func is torch.ops.aten.unique_dim.default else 0
        self.changed += 1
        return values.flip(dim), (values.size(dim) - 1) - inverse, counts.flip(0)


class Ties(ModeStandIn):
    name = "standin-ties"
    summary = ("breaks ties in sort, topk, kthvalue, mode and median the other way round; picks another of several "
               "modes; lists unique's values in descending order where sorted=False")
    Mode = FlippedTies


_TF32_OPS = {torch.ops.aten.mm.default, torch.ops.aten.bmm.default, torch.ops.aten.addmm.default,
             torch.ops.aten.baddbmm.default, torch.ops.aten.addbmm.default, torch.ops.aten.convolution.default,
             torch.ops.aten.convolution_backward.default}


def to_tf32(x: torch.Tensor) -> torch.Tensor:
    """float32 rounded to TF32 (the 10 high bits of the 23-bit mantissa, to nearest even);
    NaN and inf as they are."""
    bits = x.contiguous().view(torch.int32)
    rounded = ((bits + 0xFFF + ((bits >> 13) & 1)) & ~0x1FFF).view(torch.float32).reshape(x.shape)
    return torch.where(torch.isfinite(x), rounded, x)


class RoundedToTF32(CountingMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in _TF32_OPS and torch.backends.cudnn.allow_tf32:
            self.changed += 1
            args, kwargs = _pytree.tree_map(
                lambda a: to_tf32(a) if isinstance(a, torch.Tensor) and a.dtype == torch.float32
                and a.layout == torch.strided else a,  # a sparse operand as it is
                (args, kwargs or {}))
        return func(*args, **(kwargs or {}))


class TF32(ModeStandIn):
    name = "standin-tf32"
    summary = "rounds the float32 inputs of matmuls and convolutions to TF32, as a GPU with TF32 allowed does"
    Mode = RoundedToTF32


_A = torch.ops.aten
# op -> how its sum runs: ("reduce", the argument naming the reduced dims; None: every dim),
# ("contract", {argument: the dim summed over}), ("along", the arguments permuted along "dim",
# the result permuted back)
_REORDERED = {
    _A.sum.dim_IntList: ("reduce", "dim"), _A.sum.default: ("reduce", None), _A.nansum.default: ("reduce", "dim"),
    _A.mean.dim: ("reduce", "dim"), _A.mean.default: ("reduce", None),
    _A.prod.dim_int: ("reduce", "dim"), _A.prod.default: ("reduce", None),
    _A.logsumexp.default: ("reduce", "dim"), _A.linalg_vector_norm.default: ("reduce", "dim"),
    _A.var.correction: ("reduce", "dim"), _A.std.correction: ("reduce", "dim"),
    _A.var_mean.correction: ("reduce", "dim"), _A.std_mean.correction: ("reduce", "dim"),
    _A.mm.default: ("contract", {"self": 1, "mat2": 0}), _A.bmm.default: ("contract", {"self": 2, "mat2": 1}),
    _A.addmm.default: ("contract", {"mat1": 1, "mat2": 0}),
    _A.baddbmm.default: ("contract", {"batch1": 2, "batch2": 1}),
    _A.addbmm.default: ("contract", {"batch1": 2, "batch2": 1}),
    _A.dot.default: ("contract", {"self": 0, "tensor": 0}), _A.vdot.default: ("contract", {"self": 0, "other": 0}),
    _A.mv.default: ("contract", {"self": 1, "vec": 0}), _A.addmv.default: ("contract", {"mat": 1, "vec": 0}),
    _A._softmax.default: ("along", ("self",)), _A._log_softmax.default: ("along", ("self",)),
    _A._softmax_backward_data.default: ("along", ("grad_output", "output")),
    _A._log_softmax_backward_data.default: ("along", ("grad_output", "output")),
}


def _permutation(n: int) -> torch.Tensor:
    """The same shuffled order of n terms on every call and in every process."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(n))


_CALLS = [0]   # the calls of _new_permutation in this process


def _new_permutation(n: int) -> torch.Tensor:
    """Another shuffled order of n terms on every call, as atomic adds land in the order the
    threads finish (the same sequence of orders in every process that calls alike)."""
    _CALLS[0] += 1
    return torch.randperm(n, generator=torch.Generator().manual_seed(n * 1_000_003 + _CALLS[0]))


class Reordered(CountingMode):
    """Sums, means, norms, variances, softmax and matmuls over their terms in another order:
    each reduced dimension (a matmul's inner one, a softmax's own) shuffled, the result the
    same real number, rounded differently, as a GPU's tree reduction, split-K matmul or
    blocked softmax rounds it. Integers add up exactly in any order: unchanged. An operand
    that is a conjugated or negated view (a complex matrix's ``.mH``) is not reordered."""

    def order(self, n: int) -> torch.Tensor:
        return _permutation(n)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        spec = _REORDERED.get(func)
        tensors = [a for a in _pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        # A conjugated or negated view is left alone: under a dispatch mode, index_select of
        # one gives its values conjugated on some strides and as stored on others (torch
        # 2.15: a (2, 1) view of stride (1, 2) came back unconjugated), which would add up a
        # conjugated operand unconjugated. A sparse one is left alone as well.
        if spec is None or any(t.layout != torch.strided or t.is_conj() or t.is_neg() for t in tensors):
            return func(*args, **kwargs)
        named = {a.name: v for a, v in zip(func._schema.arguments, args)} | kwargs
        how, where = spec
        if how == "reduce":
            x = named["self"]
            dims = named.get(where) if where else None
            dims = [dims] if isinstance(dims, int) else list(dims or range(x.dim()))
            dims = [d % max(x.dim(), 1) for d in dims if x.dim()]
            if not any(x.size(d) > 1 for d in dims):
                return func(*args, **kwargs)
            for d in dims:
                x = x.index_select(d, self.order(x.size(d)))
            self.changed += 1
            return func(**(named | {"self": x}))
        if how == "contract":
            first = named[next(iter(where))]
            n = first.size(where[next(iter(where))])
            if n < 2:
                return func(*args, **kwargs)
            order = self.order(n)
            self.changed += 1
            return func(**(named | {name: named[name].index_select(d, order) for name, d in where.items()}))
        dim = named["dim"] % max(named[where[0]].dim(), 1)
        n = named[where[0]].size(dim) if named[where[0]].dim() else 1
        if n < 2:
            return func(*args, **kwargs)
        order = self.order(n)
        self.changed += 1
        out = func(**(named | {name: named[name].index_select(dim, order) for name in where}))
        return out.index_select(dim, torch.argsort(order))


class Unrepeatable(Reordered):
    """Reordered, in a new order on every call: as atomic adds land in the order the threads
    finish, two runs of the same op on the same inputs differ in their last bits."""

    def order(self, n: int) -> torch.Tensor:
        return _new_permutation(n)


class Reorder(ModeStandIn):
    name = "standin-reorder"
    summary = ("adds up sums, means, norms, variances, softmax and matmuls in another order (each reduced dimension "
               "shuffled), as a GPU's tree reduction or split-K matmul does")
    Mode = Reordered


class Atomic(ModeStandIn):
    name = "standin-atomic"
    summary = ("adds up sums, norms, softmax and matmuls in another order on every call, as atomic adds do: two "
               "runs on the same inputs differ in their last bits")
    Mode = Unrepeatable


_HALF = (torch.float16, torch.bfloat16)
_HALF_SUMS = {_A.sum.dim_IntList, _A.sum.default, _A.mean.dim, _A.mean.default, _A.mm.default, _A.bmm.default,
              _A.addmm.default, _A.baddbmm.default}
_STEPS = 256   # at most this many roundings per sum: longer ones add blocks of terms in float32 first


class HalfAccumulated(CountingMode):
    """float16 and bfloat16 sums, means and matmuls with their running sum kept in the dtype:
    each term (or block of terms, for long sums) added to a half-precision accumulator and
    rounded there, where the CPU keeps it in float32. The same op on float32 inputs is the
    CPU's: the reduced-precision rerun must name it."""

    def blocks(self, n: int) -> list[tuple[int, int]]:
        """The blocks of terms i..j-1 added to the accumulator, in the order they are added."""
        step = -(-n // _STEPS)
        return [(i, min(i + step, n)) for i in range(0, n, step)]

    def running_sum(self, terms, n: int, dtype: torch.dtype) -> torch.Tensor:
        """sum over i < n of ``terms(i, j)`` (float32 partial sums of the terms i..j-1), kept in
        ``dtype`` between steps: rounded once per step, as a half-precision accumulator is."""
        acc = None
        for i, j in self.blocks(n):
            part = terms(i, j)
            acc = part.to(dtype) if acc is None else (acc.float() + part).to(dtype)
        return acc

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        tensors = [a for a in _pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        if (func not in _HALF_SUMS or not tensors or any(t.dtype not in _HALF or t.layout != torch.strided
                                                         for t in tensors) or kwargs.get("dtype") is not None):
            return func(*args, **kwargs)
        named = {a.name: v for a, v in zip(func._schema.arguments, args)} | kwargs
        dtype = tensors[0].dtype
        if func in (_A.sum.dim_IntList, _A.sum.default, _A.mean.dim, _A.mean.default):
            x = named["self"]
            dims = named.get("dim") if func in (_A.sum.dim_IntList, _A.mean.dim) else None
            dims = sorted({d % max(x.dim(), 1) for d in (dims or range(x.dim()))}) if x.dim() else []
            n = math.prod(x.size(d) for d in dims)
            if n < 2:
                return func(*args, **kwargs)
            rows = x.float().movedim(dims, list(range(x.dim() - len(dims), x.dim()))).flatten(x.dim() - len(dims))
            out = self.running_sum(lambda i, j: rows[..., i:j].sum(-1), n, dtype)
            if func in (_A.mean.dim, _A.mean.default):
                out = (out.float() / n).to(dtype)
            if named.get("keepdim"):
                for d in dims:
                    out = out.unsqueeze(d)
            self.changed += 1
            return out
        a, b = (named["self"], named["mat2"]) if func in (_A.mm.default, _A.bmm.default) else (
            (named["mat1"], named["mat2"]) if func is _A.addmm.default else (named["batch1"], named["batch2"]))
        n = a.size(-1)
        if n < 2:
            return func(*args, **kwargs)
        a32, b32 = a.float(), b.float()
        product = self.running_sum(lambda i, j: a32[..., i:j] @ b32[..., i:j, :], n, dtype)
        self.changed += 1
        if func in (_A.mm.default, _A.bmm.default):
            return product
        beta, alpha = named.get("beta", 1), named.get("alpha", 1)
        return (beta * named["self"].float() + alpha * product.float()).to(dtype)


class HalfSums(ModeStandIn):
    name = "standin-half-sums"
    summary = ("keeps the running sum of float16 and bfloat16 sums, means and matmuls in the dtype itself, as a "
               "kernel with a half-precision accumulator does")
    Mode = HalfAccumulated


class HalfAtomicAdds(HalfAccumulated):
    """HalfAccumulated, its blocks added in a new order on every call: float16 atomic adds
    (CUDA's grid_sampler and trilinear interpolation backward) round into a half-precision
    accumulator in the order the threads finish. Two runs differ, and each order loses about
    as much (a lucky one now and then passes the judge): the cause is the precision, not the
    order."""

    def blocks(self, n: int) -> list[tuple[int, int]]:
        ordered = super().blocks(n)
        return [ordered[k] for k in _new_permutation(len(ordered)).tolist()]


class HalfAtomic(ModeStandIn):
    name = "standin-half-atomic"
    summary = ("as standin-half-sums, adding in a new order on every call, as float16 atomic adds do: two runs "
               "differ, and each loses about as much")
    Mode = HalfAtomicAdds


class Reproducing(CountingMode):
    """Each selected reproduction of tests/reported_bugs.py sees every op's result and may
    replace it (or raise)."""

    def __init__(self, state: "KnownBugs"):
        super().__init__()
        from tests import reported_bugs
        self.state, self.reproductions = state, reported_bugs.selected()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        for reproduce in self.reproductions:
            wrong = reproduce(self.state, func, args, kwargs, out)
            if wrong is not None:
                self.changed += 1
                out = wrong
        return out


class KnownBugs(ModeStandIn):
    name = "standin-known-bugs"
    summary = ("reproduces the wrong results of the known-bug cases at their edges (tests/reported_bugs.py; "
               "MPS_COMPAT_REPRODUCE picks which)")

    def __init__(self):
        self.dirty = False   # the allocator's cache holds freed garbage (Target.churn without emptying)
        self.calls: dict = {}

    def mode(self):
        return Reproducing(self)

    def churned(self, emptied: bool) -> None:
        self.dirty = not emptied


class Unlucky(devices.StandIn):
    """Not registered: the self-tests of the cause "nondeterministic" register it for a test.
    The CPU's result with 1e-3 x (its call count) added to every float32 tensor (and a
    loss curve's numbers moved by as many hundredths of themselves): on its first call only
    (an unlucky order that a second run does not repeat), or on every call (each run off, by
    another amount: other bits that miss as well)."""
    name = "standin-unlucky"
    summary = "off on the first call only, or off by another amount on every call"

    def __init__(self, every_call: bool):
        self.every_call, self.calls = every_call, 0

    def finish(self, result, cpu, reference):
        self.calls += 1
        if not self.every_call and self.calls > 1:
            return result

        def spoil(x):
            if isinstance(x, torch.Tensor) and x.dtype == torch.float32:
                return x + 1e-3 * self.calls
            return x * (1 + 1e-2 * self.calls) if isinstance(x, float) else x
        return _pytree.tree_map(spoil, result)


STAND_INS = (Oracle(), Noisy(), Ties(), Reorder(), Atomic(), TF32(), HalfSums(), HalfAtomic(), KnownBugs(),
             *emulated_mps.STAND_INS)
for _stand_in in STAND_INS:
    devices.register_stand_in(_stand_in)
