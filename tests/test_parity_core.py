"""The tolerance table and the comparison that parity checks stand on."""
import math

import pytest
import torch

from harness import parity, tolerances as T


@pytest.mark.parametrize("op,cls", [
    ("softmax", "low-precision"), ("log_softmax.with_dtype", "low-precision"), ("nn.functional.layer_norm",
                                                                               "low-precision"),
    ("var_mean.unbiased", "low-precision"), ("cumsum", "low-precision"), ("masked.sum", "low-precision"),
    ("nn.functional.scaled_dot_product_attention", "low-precision"), ("mm", "matmul"), ("addmm.decomposed", "matmul"),
    ("nn.functional.conv2d", "matmul"), ("nn.functional.linear", "matmul"), ("__rmatmul__", "matmul"),
    ("add", "default"), ("nn.functional.gelu", "default"), ("summary_statistics", "default"), ("mmx", "default"),
])
def test_op_classes(op, cls):
    assert T.op_class(op) == cls


def test_every_tolerance_has_a_source_and_defaults_are_the_installed_torch_testing_ones():
    assert all(t.source for t in T.TABLE.values())
    precisions = pytest.importorskip("torch.testing._comparison")._DTYPE_PRECISIONS
    for dtype in ("float32", "float16", "bfloat16", "complex64", "float64"):
        tol = T.tolerance("add", dtype)
        assert (tol.rtol, tol.atol) == precisions[getattr(torch, dtype)], dtype


def test_integers_are_exact_and_low_precision_is_looser():
    assert T.tolerance("add", "int64") == T.EXACT and T.tolerance("softmax", "bool") == T.EXACT
    assert T.tolerance("softmax", "float16").rtol > T.tolerance("add", "float16").rtol
    assert T.tolerance("mm", "bfloat16").rtol > T.tolerance("add", "bfloat16").rtol


def test_identical_results_pass_with_zero_margin():
    x = torch.randn(16, 16)
    r = parity.compare(x, x.clone(), T.tolerance("add", "float32"))
    assert r["ok"] and r["max_abs_err"] == 0 and r["margin"] == 0 and r["elements"] == 256


def test_an_error_of_1e_3_fails_float32_softmax_and_the_margin_says_by_how_much():
    x = torch.softmax(torch.randn(8, 32), dim=-1)
    tol = T.tolerance("softmax", "float32")
    r = parity.compare(x + 1e-3, x, tol)
    assert not r["ok"] and r["margin"] > 1 and math.isclose(r["max_abs_err"], 1e-3, rel_tol=1e-3)
    assert "Tensor-likes are not close" in r["reason"]
    inside = parity.compare(x + 0.5 * tol.atol, x, tol)
    assert inside["ok"] and 0.3 < inside["margin"] <= 1


def test_nan_and_inf_positions_must_agree():
    e = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    tol = T.tolerance("add", "float32")
    assert parity.compare(e.clone(), e, tol)["ok"]
    moved = torch.tensor([float("nan"), 1.0, float("inf"), 2.0])
    assert not parity.compare(moved, e, tol)["ok"]
    flipped = torch.tensor([1.0, float("nan"), -float("inf"), 2.0])
    assert not parity.compare(flipped, e, tol)["ok"]


def test_integer_results_must_match_exactly():
    e = torch.arange(10)
    assert parity.compare(e.clone(), e, T.tolerance("argmax", "int64"))["ok"]
    off = e.clone()
    off[3] += 1
    r = parity.compare(off, e, T.tolerance("argmax", "int64"))
    assert not r["ok"] and r["max_abs_err"] == 1


def test_nested_outputs_and_shape_mismatch():
    tol = T.tolerance("var_mean", "float32")
    v, m = torch.var_mean(torch.randn(5, 7), dim=1)
    assert parity.compare((v, m), (v.clone(), m.clone()), tol)["ok"]
    assert not parity.compare((v,), (v, m), tol)["ok"]
    assert not parity.compare(v[:3], v, tol)["ok"]


def test_low_precision_result_against_a_float64_reference():
    x = torch.randn(64, 64, dtype=torch.float64)
    ref = torch.softmax(x, -1)
    half = torch.softmax(x.half(), -1)
    r = parity.compare(half, ref, T.tolerance("softmax", "float16"))
    assert r["ok"] and 0 < r["max_abs_err"] < 1e-2


def test_a_sample_fingerprint_sees_values_strides_and_arguments_only():
    from types import SimpleNamespace

    from harness import opparity

    def sample(t, *args, **kwargs):
        return SimpleNamespace(input=t, args=args, kwargs=kwargs)
    x = torch.arange(6.0).reshape(2, 3)
    base = opparity.fingerprint(sample(x, 1, dim=0))
    assert opparity.fingerprint(sample(x.clone(), 1, dim=0)) == base             # same values, new storage
    assert opparity.fingerprint(sample(x.clone().requires_grad_(), 1, dim=0)) == base
    assert opparity.fingerprint(sample(x + 1e-6, 1, dim=0)) != base              # one value moved
    assert opparity.fingerprint(sample(x.t().contiguous().t(), 1, dim=0)) != base  # same values, other strides
    assert opparity.fingerprint(sample(x, 2, dim=0)) != base
    assert opparity.fingerprint(sample(x, 1, dim=1)) != base
    assert opparity.fingerprint(sample(x.to(torch.bfloat16), 1, dim=0)) != base  # bfloat16 has no numpy dtype
    f = lambda v: v  # noqa: E731: a callable argument counts by name, not by its address
    assert opparity.fingerprint(sample(x, f)) == opparity.fingerprint(sample(x, f))
