"""Comparing a result with its reference: the verdict and the margins behind it.

The verdict is ``torch.testing.assert_close`` (NaN positions must agree, inf positions and
signs too, integers exactly); the measurements are what a matrix shows so a reader sees
how close a pass was, not only that it passed:

  max_abs_err  largest |actual - expected| over finite elements
  max_rel_err  largest |actual - expected| / |expected| where expected != 0
  margin       largest |actual - expected| / (atol + rtol * |expected|): <= 1 passes;
               0.5 means half the allowed error was used; 3.0 means three times too much
"""
from __future__ import annotations

import math

import torch
from torch.utils import _pytree

from harness.tolerances import Tolerance


def _leaves(tree) -> list:
    return [x for x in _pytree.tree_leaves(tree) if isinstance(x, (torch.Tensor, int, float, complex, bool))]


def compare(actual, expected, tol: Tolerance) -> dict:
    """Compare two outputs (tensors or nested structures of them) under ``tol``."""
    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    result = {"rtol": tol.rtol, "atol": tol.atol, "max_abs_err": 0.0, "max_rel_err": 0.0, "margin": 0.0,
              "elements": 0, "ok": True, "reason": ""}
    if len(a_leaves) != len(e_leaves):
        return {**result, "ok": False, "reason": f"{len(a_leaves)} outputs against {len(e_leaves)} expected"}
    for a, e in zip(a_leaves, e_leaves):
        a_t = torch.as_tensor(a).detach().cpu()
        e_t = torch.as_tensor(e).detach().cpu()
        _measure(a_t, e_t, tol, result)
        try:
            torch.testing.assert_close(a_t, e_t, rtol=tol.rtol, atol=tol.atol, equal_nan=True,
                                       check_device=False, check_dtype=False, check_layout=False)
        except AssertionError as exc:
            if result["ok"]:
                result["ok"] = False
                result["reason"] = " ".join(str(exc).split())[:300]
    return result


def _measure(a: torch.Tensor, e: torch.Tensor, tol: Tolerance, out: dict) -> None:
    if a.shape != e.shape or a.numel() == 0:
        return
    if a.is_sparse or e.is_sparse:
        a, e = a.to_dense(), e.to_dense()
    if not (a.is_floating_point() or a.is_complex()):
        a, e = a.to(torch.float64), e.to(torch.float64)
    wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    a64, e64 = a.to(wide), e.to(wide)
    finite = torch.isfinite(a64) & torch.isfinite(e64)
    out["elements"] += int(a.numel())
    if not bool(finite.any()):
        return
    diff = (a64 - e64).abs()[finite]
    mag = e64.abs()[finite]
    out["max_abs_err"] = max(out["max_abs_err"], float(diff.max()))
    nonzero = mag > 0
    if bool(nonzero.any()):
        out["max_rel_err"] = max(out["max_rel_err"], float((diff[nonzero] / mag[nonzero]).max()))
    allowed = tol.atol + tol.rtol * mag
    used = torch.where(allowed > 0, diff / allowed.clamp_min(1e-300), torch.where(diff > 0, math.inf, 0.0))
    out["margin"] = max(out["margin"], float(used.max()))
