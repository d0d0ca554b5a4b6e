"""The tolerance table and the comparison that parity checks stand on."""
import math

import pytest
import torch

from harness.parity.numerics import accuracy, causes, tolerances as T


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
    r = accuracy.compare(x, x.clone(), T.tolerance("add", "float32"))
    assert r["ok"] and r["max_abs_err"] == 0 and r["margin"] == 0 and r["elements"] == 256


def test_an_error_of_1e_3_fails_float32_softmax_and_the_margin_says_by_how_much():
    x = torch.softmax(torch.randn(8, 32), dim=-1)
    tol = T.tolerance("softmax", "float32")
    r = accuracy.compare(x + 1e-3, x, tol)
    assert not r["ok"] and r["margin"] > 1 and math.isclose(r["max_abs_err"], 1e-3, rel_tol=1e-3)
    assert "Tensor-likes are not close" in r["reason"]
    inside = accuracy.compare(x + 0.5 * tol.atol, x, tol)
    assert inside["ok"] and 0.3 < inside["margin"] <= 1


def test_nan_and_inf_positions_must_agree():
    e = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    tol = T.tolerance("add", "float32")
    assert accuracy.compare(e.clone(), e, tol)["ok"]
    moved = torch.tensor([float("nan"), 1.0, float("inf"), 2.0])
    assert not accuracy.compare(moved, e, tol)["ok"]
    flipped = torch.tensor([1.0, float("nan"), -float("inf"), 2.0])
    assert not accuracy.compare(flipped, e, tol)["ok"]


def test_integer_results_must_match_exactly():
    e = torch.arange(10)
    assert accuracy.compare(e.clone(), e, T.tolerance("argmax", "int64"))["ok"]
    off = e.clone()
    off[3] += 1
    r = accuracy.compare(off, e, T.tolerance("argmax", "int64"))
    assert not r["ok"] and r["max_abs_err"] == 1


def test_nested_outputs_and_shape_mismatch():
    tol = T.tolerance("var_mean", "float32")
    v, m = torch.var_mean(torch.randn(5, 7), dim=1)
    assert accuracy.compare((v, m), (v.clone(), m.clone()), tol)["ok"]
    assert not accuracy.compare((v,), (v, m), tol)["ok"]
    assert not accuracy.compare(v[:3], v, tol)["ok"]


def test_low_precision_result_against_a_float64_reference():
    x = torch.randn(64, 64, dtype=torch.float64)
    ref = torch.softmax(x, -1)
    half = torch.softmax(x.half(), -1)
    r = accuracy.compare(half, ref, T.tolerance("softmax", "float16"))
    assert r["ok"] and 0 < r["max_abs_err"] < 1e-2


def test_a_sample_fingerprint_sees_values_strides_and_arguments_only():
    from types import SimpleNamespace

    from harness.parity.ops import samples

    def sample(t, *args, **kwargs):
        return SimpleNamespace(input=t, args=args, kwargs=kwargs)
    x = torch.arange(6.0).reshape(2, 3)
    base = samples.fingerprint(sample(x, 1, dim=0))
    assert samples.fingerprint(sample(x.clone(), 1, dim=0)) == base             # same values, new storage
    assert samples.fingerprint(sample(x.clone().requires_grad_(), 1, dim=0)) == base
    assert samples.fingerprint(sample(x + 1e-6, 1, dim=0)) != base              # one value moved
    assert samples.fingerprint(sample(x.t().contiguous().t(), 1, dim=0)) != base  # same values, other strides
    assert samples.fingerprint(sample(x, 2, dim=0)) != base
    assert samples.fingerprint(sample(x, 1, dim=1)) != base
    assert samples.fingerprint(sample(x.to(torch.bfloat16), 1, dim=0)) != base  # bfloat16 has no numpy dtype
    f = lambda v: v  # noqa: E731: a callable argument counts by name, not by its address
    assert samples.fingerprint(sample(x, f)) == samples.fingerprint(sample(x, f))


# --------------------------------------------------------------------------- accuracy on an accelerator

def _accuracy(target, cpu, ref, dtype=torch.float16, **kw):
    from harness.parity.numerics import tolerances as T
    tol = T.tolerance("add", str(dtype).removeprefix("torch."))
    return accuracy.compare_accuracy(target, cpu, ref, tol, dtype, T.ACCURACY_FACTOR, T.ACCURACY_ULPS, **kw)


def test_one_unit_in_the_last_place_is_the_spacing_of_the_dtype_there():
    x = torch.tensor([0.0, 1.0, 1.5, 2.0, 65504.0, 1e-6], dtype=torch.float64)
    assert accuracy.ulp(x, torch.float16).tolist() == [2 ** -24, 2 ** -10, 2 ** -10, 2 ** -9, 32.0, 2 ** -24]
    assert accuracy.ulp(x, torch.float32)[1] == 2 ** -23 and accuracy.ulp(x, torch.bfloat16)[1] == 2 ** -7


def test_a_target_no_less_accurate_than_the_cpu_passes_where_same_dtype_agreement_fails():
    """The H100's grid_sampler_2d float16: the CPU off float64, the target on it. A
    same-dtype judge failed the target for the CPU's error."""
    ref = torch.linspace(-2, 2, 101, dtype=torch.float64)
    exact = ref.to(torch.float16)
    cpu_off = (ref + 0.013).to(torch.float16)
    assert not accuracy.compare(exact, cpu_off, T.tolerance("add", "float16"))["ok"]  # what the old judge saw
    got = _accuracy(exact, cpu_off, exact)
    assert got["ok"] and got["max_abs_err"] == 0 and got["cpu_max_abs_err"] > 0.01


def test_both_sides_at_the_rounding_level_pass_and_a_target_far_worse_than_the_cpu_fails():
    """tanh float16 backward on the H100: target 2 units off, CPU 1. A target 8 units off where
    the CPU is exact fails: no rule of the CPU target allows it and the CPU does better."""
    ref = torch.linspace(0.5, 0.99, 64, dtype=torch.float64)
    rounded = ref.to(torch.float16)
    up = lambda x, n: torch.tensor([float(v) + n * 2 ** -11 for v in x.tolist()], dtype=torch.float16)  # noqa: E731
    assert _accuracy(up(rounded, 2), up(rounded, 1), ref)["ok"]
    far = _accuracy(up(rounded, 8), rounded, ref, normwise=False)
    assert not far["ok"] and "the CPU's own error" in far["reason"]


def test_noise_of_one_unit_passes_on_every_element_and_nan_never_where_float64_is_a_number():
    ref = torch.randn(500, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rounded = ref.to(torch.float16)
    noisy = torch.nextafter(rounded, torch.full_like(rounded, torch.inf))
    assert _accuracy(noisy, rounded, ref, normwise=False)["ok"]
    nan_here = rounded.clone()
    nan_here[3] = torch.nan
    alone = _accuracy(nan_here, rounded, ref)
    assert not alone["ok"] and alone["non_finite"] == 1 and "(the CPU does not)" in alone["reason"]
    assert alone["non_finite_on_cpu"] == 0
    shared = _accuracy(nan_here, nan_here.clone(), ref)                     # the CPU has it too: still wrong
    assert not shared["ok"] and shared["non_finite"] == 1 and "the CPU gives NaN or inf at 1" in shared["reason"]
    assert shared["non_finite_on_cpu"] == 1
    two = nan_here.clone()
    two[7] = torch.inf                                                      # one the CPU shares, one it does not
    partly = _accuracy(two, nan_here.clone(), ref)
    assert (partly["non_finite"], partly["non_finite_on_cpu"]) == (2, 1)
    # the same count for the model checks, which judge whole outputs (harness.parity.models.runs)
    assert accuracy.non_finite_shared(two, nan_here.clone(), ref) == 1
    assert accuracy.non_finite_shared(two, rounded, ref) == 0 and accuracy.non_finite_shared(two, two, ref) == 2
    nan_ref = ref.clone()
    nan_ref[3] = torch.nan
    assert _accuracy(nan_here, rounded, nan_ref)["ok"]                      # where float64 is NaN, NaN is right


def test_inf_is_right_where_the_exact_value_is_past_the_dtypes_range_and_a_non_finite_cause_otherwise():
    ref = torch.tensor([1.0, 7e4, -7e4, 100.0], dtype=torch.float64)       # float16 holds at most 65504
    rounded = ref.to(torch.float16)
    assert _accuracy(rounded, rounded, ref)["ok"] and accuracy.non_finite(rounded, ref) == 0
    overflowed = rounded.clone()
    overflowed[3] = torch.inf                                               # 100 fits: an intermediate overflowed
    assert accuracy.non_finite(overflowed, ref) == 1
    assert accuracy.non_finite(overflowed, ref, slack=torch.tensor([0, 0, 0, math.inf])) == 0  # free there
    picked = causes.diagnose("cuda", "float16", lambda trial: True, {"ok": False, "non_finite": 1})
    assert picked == "non-finite"                                           # no rerun excuses a NaN
    assert "float32" in causes.describe(picked, "cuda", "float16")["switch"]


def test_a_number_where_float64_is_nan_or_inf_is_not_called_a_nan_of_the_targets():
    """A finite target element where float64, rounded, is NaN or inf read "1 element(s) NaN or
    inf where neither float64 nor the CPU is": the target had given no NaN. Each kind is now
    told as it is, and both still fail."""
    inf, nan = math.inf, math.nan
    f16 = lambda *v: torch.tensor(v, dtype=torch.float16)   # noqa: E731
    # an exact 7e4 rounds to inf in float16 (the reference given rounded); the target saturates at 65504
    saturated = _accuracy(f16(65504.0, 1.0), f16(inf, 1.0), f16(7e4, 1.0))
    assert not saturated["ok"] and "non_finite" not in saturated, saturated
    assert saturated["reason"] == ("1 element(s) finite where float64, rounded to float16, is NaN or inf, and the CPU "
                                   "gives NaN or inf there too")
    zero = _accuracy(f16(0.0, 1.0), f16(nan, 1.0), torch.tensor([nan, 1.0], dtype=torch.float64))
    assert not zero["ok"] and zero["reason"] == saturated["reason"]
    other = _accuracy(f16(0.0, 2.0), f16(1.0, 1.0), torch.tensor([nan, nan], dtype=torch.float64))
    assert not other["ok"] and other["reason"] == ("2 element(s) finite where float64, rounded to float16, is NaN or "
                                                   "inf (the CPU gives other numbers there)")
    # the target's own NaN or inf where float64 has another: said so, and not "neither float64 ... is"
    swapped = _accuracy(f16(inf, 1.0), f16(0.0, 1.0), torch.tensor([nan, 1.0], dtype=torch.float64))
    assert not swapped["ok"] and swapped["reason"].startswith(
        "1 element(s) NaN or inf where float64, rounded to float16, is another NaN or inf"), swapped["reason"]
    assert not any("neither" in r["reason"] for r in (saturated, zero, other, swapped))


def test_a_cpu_nan_excuses_no_number_of_the_targets():
    """Where the CPU gives NaN or inf and float64 a number, the CPU's error is infinite: taken as
    the yardstick, it let any finite target value pass with margin 0 (1000 for 3, -5 for 7e4).
    There the target must meet the rules; a right number still passes."""
    inf, nan = math.inf, math.nan
    f16 = lambda *v: torch.tensor(v, dtype=torch.float16)   # noqa: E731
    ref = torch.tensor([3.0, 7e4 - 1e4, 1.0], dtype=torch.float64)
    wild = _accuracy(f16(1000.0, -5.0, 1.0), f16(nan, inf, 1.0), ref)
    assert not wild["ok"] and "2 / 3 elements off float64" in wild["reason"], wild
    right = _accuracy(f16(3.0, 6e4, 1.0), f16(nan, inf, 1.0), ref)
    assert right["ok"], right


def test_integer_outputs_of_the_accuracy_judge_must_equal_the_cpus():
    idx = torch.tensor([0, 2, 1])
    assert _accuracy(idx, idx.clone(), torch.tensor([0, 1, 2]))["ok"]      # float64's ties are not asked
    assert not _accuracy(idx, torch.tensor([0, 1, 2]), idx)["ok"]


def test_an_output_of_another_dtype_than_the_cpus_fails_naming_both():
    """Integer and bool outputs were compared by value alone (assert_close with
    check_dtype=False), floats against float64: int32 indices where the CPU gives int64, a
    uint8 mask where it gives bool, float16 where it gives float32 all passed. Each output
    leaf's dtype is now the CPU's or a failure that names both; float64, the reference's
    dtype by construction, is never asked of the target."""
    idx = torch.tensor([0, 2, 1])
    narrow = _accuracy(idx.to(torch.int32), idx, idx)
    assert not narrow["ok"] and narrow["reason"].startswith("dtype int32 where the CPU gives int64"), narrow["reason"]
    assert ".to(torch.int64)" in narrow["reason"]
    mask = torch.tensor([True, False, True])
    byte = _accuracy(mask.to(torch.uint8), mask, mask)
    assert not byte["ok"] and byte["reason"].startswith("dtype uint8 where the CPU gives bool"), byte["reason"]
    ref = torch.tensor([0.5, 1.5], dtype=torch.float64)
    half = _accuracy(ref.to(torch.float16), ref.float(), ref, dtype=torch.float32)
    assert not half["ok"] and half["reason"].startswith("dtype float16 where the CPU gives float32"), half["reason"]
    # in a tuple, the output is named; the same dtypes pass, whatever the reference's dtype
    both = _accuracy((ref.float(), idx.to(torch.int32)), (ref.float(), idx), (ref, idx), dtype=torch.float32)
    assert not both["ok"] and both["reason"].startswith("output 1: dtype int32 where the CPU gives int64")
    assert _accuracy((ref.float(), idx), (ref.float(), idx), (ref, idx), dtype=torch.float32)["ok"]
    assert _accuracy(mask, mask.clone(), mask)["ok"] and _accuracy(idx, idx.clone(), idx)["ok"]
    # where integer inputs give no float64 reference, the ops suite compares with the CPU directly
    tol = T.tolerance("eq", "int32")
    assert not accuracy.compare(mask.to(torch.uint8), mask, tol, check_dtype=True)["ok"]
    assert accuracy.compare(mask.to(torch.uint8), mask, tol)["ok"]     # against float64, no dtype is asked
    eager = accuracy.compare(idx.to(torch.int32), idx, tol, check_dtype=True, yardstick="eager")
    assert eager["reason"].startswith("dtype int32 where eager gives int64"), eager["reason"]


def test_a_tolerance_per_output_dtype_judges_floats_of_integer_inputs_at_their_own_precision():
    """atan2 of int32 is a float32: an exact rule for it failed 226 checks on the H100."""
    got = accuracy.compare((torch.tensor([0.5880026]), torch.tensor([3])),
                         (torch.tensor([0.5880026]) * (1 + 1e-7), torch.tensor([3])),
                         lambda dtype: T.tolerance("atan2", dtype))
    assert got["ok"] and got["rtol"] == T.tolerance("atan2", "float32").rtol
    assert not accuracy.compare(torch.tensor([3]), torch.tensor([4]), lambda dtype: T.tolerance("atan2", dtype))["ok"]
