"""Outputs judged by what they mean, where two correct kernels may return different bits.

- **Ties in index outputs.** sort, argsort, msort, topk, kthvalue, mode, median, nanmedian,
  cummax and cummin return indices; among equal values any of them is a correct answer
  (PyTorch documents a defined order only for ``stable=True`` sorts, and its MPS
  consistency test lets ties differ: "duplicate indices"). So an index output is right
  when it selects values equal to those the CPU's indices select (``settle_ties``), and
  exactly equal only for a stable sort. Their gradients scatter to the positions those
  indices chose, so a gradient is compared after sorting it within each group of equal
  input values along the op's dimension (``canonical_grad``).
- **Several modes.** ``torch.mode`` returns "a value which appears most often" in each
  row (its docstring): where two values appear equally often, either is right, and CUDA's
  kernel picks another than the CPU's. A mode that appears as often in its row as the
  CPU's, at an index that holds it, is settled to the CPU's value and index
  (``settle_modes``); a value that appears less often stays wrong.
- **Results defined up to a choice.** An LU factorization depends on the pivots chosen,
  which differ between libraries for equal candidates; what is defined is P @ L @ U, the
  matrix it factors (``defined``). The forward outputs of these ops are compared as
  that product (and any ``info`` output as it is). ``torch.unique(sorted=False)`` may
  list the unique values in any order (PyTorch's own comparison skips the op for it):
  its result is compared in ascending order, its inverse indices and counts following.

The tables are data: an op not listed is compared as it is.
"""
from __future__ import annotations

from typing import Callable

import torch
from torch.utils import _pytree


def _arg(sample, position: int, name: str, default):
    if name in sample.kwargs:
        return sample.kwargs[name]
    return sample.args[position] if len(sample.args) > position else default


def _sorted(sample):
    return _arg(sample, 0, "dim", -1), bool(sample.kwargs.get("stable", False))


# op name -> (the dimension the indices run along, or None for the whole tensor; stable)
TIES: dict[str, Callable] = {
    "sort": _sorted,
    "argsort": _sorted,
    "msort": lambda s: (0, False),
    "topk": lambda s: (_arg(s, 1, "dim", -1), False),
    "kthvalue": lambda s: (_arg(s, 1, "dim", -1), False),
    "mode": lambda s: (_arg(s, 0, "dim", -1), False),
    "median": lambda s: (_arg(s, 0, "dim", None), False),
    "nanmedian": lambda s: (_arg(s, 0, "dim", None), False),
    "cummax": lambda s: (_arg(s, 0, "dim", 0), False),
    "cummin": lambda s: (_arg(s, 0, "dim", 0), False),
}


def tie_spec(op_name: str, sample) -> tuple[int | None, bool] | None:
    """(dim, stable) of an op whose indices may break ties either way; None for any other."""
    spec = TIES.get(op_name)
    if spec is None or not isinstance(sample.input, torch.Tensor):
        return None
    try:
        return spec(sample)
    except (IndexError, TypeError):
        return None


def _index_leaf(op_name: str, leaves: list) -> int | None:
    """Which output leaf holds the indices: argsort's only one, the others' second."""
    if op_name == "argsort" and len(leaves) == 1:
        return 0
    return 1 if len(leaves) == 2 else None


def _selected(values: torch.Tensor, dim: int | None, index: torch.Tensor) -> torch.Tensor:
    if values.dim() == 0 or dim is None:
        return values.reshape(-1)[index.reshape(-1)]
    if index.dim() < values.dim():
        index = index.unsqueeze(dim)
    return values.gather(dim, index)


def settle_ties(op_name: str, sample, target, cpu) -> tuple[object, int]:
    """``target`` with each index output that selects the same values as the CPU's replaced
    by the CPU's (so an exact comparison passes), and how many elements were ties.
    A stable sort's indices, and indices that select other values, stay as they are. The
    replacement keeps the target's dtype: int32 indices where the CPU gives int64 are still
    judged as int32 (accuracy.dtype_differs)."""
    if op_name == "mode":
        target, modes = settle_modes(sample, target, cpu)
        if modes:
            return target, modes
    spec = tie_spec(op_name, sample)
    t_leaves, spec_t = _pytree.tree_flatten(target)
    c_leaves, _ = _pytree.tree_flatten(cpu)
    at = _index_leaf(op_name, t_leaves) if spec else None
    if at is None or len(c_leaves) != len(t_leaves):
        return target, 0
    (dim, stable), t_idx, c_idx = spec, t_leaves[at], c_leaves[at]
    if stable or not isinstance(t_idx, torch.Tensor) or t_idx.shape != c_idx.shape or torch.equal(t_idx, c_idx):
        return target, 0
    x = sample.input.detach().cpu()
    try:
        a, b = _selected(x, dim, t_idx.cpu()), _selected(x, dim, c_idx.cpu())
    except (RuntimeError, IndexError):  # an index out of range: not a tie, a wrong answer
        return target, 0
    same = a == b
    if a.is_floating_point() or a.is_complex():
        same = same | (torch.isnan(a) & torch.isnan(b))
    if not bool(same.all()):
        return target, 0
    t_leaves = list(t_leaves)
    t_leaves[at] = c_idx.to(t_idx.dtype)
    return _pytree.tree_unflatten(t_leaves, spec_t), int((t_idx != c_idx).sum())


def settle_modes(sample, target, cpu) -> tuple[object, int]:
    """``target``'s (values, indices) from ``torch.mode`` with each row whose mode differs
    from the CPU's but appears as often in that row (and sits at the returned index)
    replaced by the CPU's, in the target's dtypes; and how many rows were settled. Anything
    else stays as it is."""
    t_leaves, spec_t = _pytree.tree_flatten(target)
    c_leaves, _ = _pytree.tree_flatten(cpu)
    if len(t_leaves) != 2 or len(c_leaves) != 2 or not isinstance(sample.input, torch.Tensor):
        return target, 0
    (t_val, t_idx), (c_val, c_idx) = [x.cpu() for x in t_leaves], c_leaves
    if t_val.shape != c_val.shape or t_idx.shape != c_idx.shape or torch.equal(t_val, c_val):
        return target, 0
    x = sample.input.detach().cpu()
    if x.dim() == 0:
        return target, 0
    dim = _arg(sample, 0, "dim", -1) % x.dim()
    rows = x.movedim(dim, -1)                               # (..., n)
    t_v, c_v = t_val.reshape(rows.shape[:-1]), c_val.reshape(rows.shape[:-1])
    t_i = t_idx.reshape(rows.shape[:-1]).clamp(0, rows.shape[-1] - 1)
    count = lambda v: (rows == v.unsqueeze(-1)).sum(-1)    # noqa: E731 - how often each row holds v
    held = rows.gather(-1, t_i.unsqueeze(-1)).squeeze(-1) == t_v
    in_range = (t_idx.reshape(t_i.shape) == t_i)
    several = (t_v != c_v) & (count(t_v) == count(c_v)) & held & in_range
    if not bool(((t_v == c_v) | several).all()):
        return target, 0                                    # a value that is not a mode: wrong
    return _pytree.tree_unflatten([c_val.to(t_val.dtype), c_idx.to(t_idx.dtype)], spec_t), int(several.sum())


def canonical_grad(op_name: str, sample, grads):
    """The gradients with the input's own gradient sorted within each group of equal input
    values along the op's dimension (by value, then by gradient): the same for any choice
    among ties. Other ops' gradients are returned as they are."""
    spec = tie_spec(op_name, sample)
    if spec is None or not grads or grads[0] is None:
        return grads
    dim, _ = spec
    x, g = sample.input.detach().cpu(), grads[0]
    if x.shape != g.shape or x.dim() == 0:
        return grads
    xr, gr = (x.reshape(-1), g.reshape(-1)) if dim is None else (x.movedim(dim, -1), g.movedim(dim, -1))
    by_grad, order = gr.sort(dim=-1, stable=True)
    _, by_value = xr.gather(-1, order).sort(dim=-1, stable=True)
    return [by_grad.gather(-1, by_value), *grads[1:]]


# --------------------------------------------------------------------------- results defined up to a choice

def _product(p, lower, upper):
    """P @ L @ U in double precision, in the factors' dtype: the judge's own arithmetic adds
    no error, and no device setting (TF32) touches it."""
    wide = torch.complex128 if lower.is_complex() else torch.float64
    return (p.to(wide) @ lower.to(wide) @ upper.to(wide)).to(lower.dtype)


def _plu(lu, pivots):
    return _product(*torch.lu_unpack(lu, pivots))


def _ascending(values: torch.Tensor, dim: int | None) -> torch.Tensor:
    """The order that sorts ``values`` ascending: its elements (dim None), or its slices
    along ``dim`` compared lexicographically (the first element that differs decides)."""
    if dim is None:
        return values.argsort(stable=True)
    rows = values.movedim(dim, 0)
    rows = rows.reshape(rows.shape[0], -1) if rows.numel() else rows.new_empty(rows.shape[0], 0)
    order = torch.arange(rows.shape[0])
    for col in reversed(range(rows.shape[1])):    # a stable sort per key, the least significant first
        order = order[rows[order, col].argsort(stable=True)]
    return order


def _unique(out, sample):
    """torch.unique's result in ascending order, with its inverse indices and counts
    following: with ``sorted=False`` the order of the unique values is not defined (CUDA and
    the CPU sort anyway; another kernel need not), and what is defined is which values (or
    slices along ``dim``) occur, where each input element went and how often each occurs."""
    leaves = list(out) if isinstance(out, (tuple, list)) else [out]
    dim = sample.kwargs.get("dim")
    values = leaves[0]
    if values.dim() == 0:
        return out
    order = _ascending(values, dim)
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel())
    ordered = [values.index_select(0 if dim is None else dim, order)]
    rest = leaves[1:]
    if sample.kwargs.get("return_inverse") and rest:
        inverse, *rest = rest
        ordered.append(rank[inverse] if inverse.numel() else inverse)
    if sample.kwargs.get("return_counts") and rest:
        counts, *rest = rest
        ordered.append(counts[order])
    ordered += rest
    return tuple(ordered) if isinstance(out, (tuple, list)) else ordered[0]


# op name -> the defined part of its raw output (before OpInfo's output_process_fn_grad),
# given the output (already on the CPU: the judge's arithmetic is not the device's, and
# MPS refuses float64) and the sample
DEFINED: dict[str, Callable] = {
    "lu": lambda out, sample: (_plu(out[0], out[1]), *out[2:]),
    "linalg.lu_factor": lambda out, sample: _plu(out[0], out[1]),
    "linalg.lu_factor_ex": lambda out, sample: (_plu(out[0], out[1]), out[2]),
    "linalg.lu": lambda out, sample: _product(*out),
    "unique": _unique,
}


def defined(op_name: str) -> Callable | None:
    """How to reduce an op's forward output (on the CPU) to what is defined, as
    ``reduce(output, sample)``, or None to compare it as it is."""
    return DEFINED.get(op_name)
