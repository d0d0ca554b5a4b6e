"""The op parity suite: what it compares, and that it fails where a kernel is wrong."""

import pytest
import torch

from harness import opparity, parity, tolerances as T
from tests.conftest import run_suite

SOFTMAX_SLICE = "softmax or log_softmax or softmin or (layer_norm and float32) or add-float32-forward"


def run(tmp_path, *args, env=None):
    return run_suite(tmp_path, "suites/parity/test_op_parity.py", "parity and cpu", *args, env=env)


@pytest.mark.slow
def test_a_softmax_off_by_1e3_in_float32_fails_exactly_the_float32_softmax_checks(tmp_path):
    clean, clean_records = run(tmp_path, "-k", SOFTMAX_SLICE)
    assert clean.returncode == 0, clean.stdout[-3000:]
    mutated, records = run(tmp_path, "-k", SOFTMAX_SLICE, "-p", "tests.mutate")
    assert mutated.returncode == 1, mutated.stdout[-3000:]
    assert len(records) == len(clean_records) > 30
    failed = {(r["subject"], r["variant"]) for r in records if r["status"] == "fail"}
    # the ops that reach aten._softmax in float32 (log_softmax has its own kernel)
    reaching = {"softmax", "softmax.with_dtype", "nn.functional.softmin", "nn.functional.softmin.with_dtype",
                "masked.softmax", "masked.softmin", "torch.ops.aten._safe_softmax.default"}
    assert {("softmax", "float32/forward"), ("softmax", "float32/backward")} <= failed
    assert {subject for subject, _ in failed} <= reaching, failed
    assert all(variant.startswith("float32/") for _, variant in failed), failed
    worst = next(r for r in records if r["subject"] == "softmax" and r["variant"] == "float32/forward")
    assert worst["metrics"]["max_abs_err"] == pytest.approx(1e-3, rel=0.01) and worst["metrics"]["margin"] > 5
    untouched = {(r["subject"], r["variant"]): r["status"] for r in records if (r["subject"], r["variant"]) not in failed}
    assert untouched == {(r["subject"], r["variant"]): r["status"] for r in clean_records
                         if (r["subject"], r["variant"]) not in failed}


@pytest.mark.slow
def test_records_carry_errors_margins_and_the_tolerance_with_its_source(tmp_path):
    res, records = run(tmp_path, "-k", "cpu-add-float32-forward or cpu-cumsum-float16-forward or cpu-mm-bfloat16-forward")
    assert res.returncode == 0, res.stdout[-2000:]
    assert {r["subject"] for r in records} == {"add", "cumsum", "mm"}
    for r in records:
        m = r["metrics"]
        assert r["category"] == "parity" and m["reference"] == "float64"
        assert m["compared"] > 0 and 0 <= m["margin"] <= 1 and m["max_abs_err"] >= 0
        assert m["rtol"] > 0 and m["tolerance_source"]
    assert next(r for r in records if r["subject"] == "mm")["metrics"]["rtol"] == T.tolerance("mm", "bfloat16").rtol


def test_the_reference_keeps_strides_and_storage_offset():
    base = torch.arange(24.0).reshape(4, 6)
    view = base[:, 1::2]
    wide = opparity._relayout(view, torch.float64)
    assert wide.stride() == view.stride() and wide.storage_offset() == view.storage_offset()
    # as_strided reads the storage: the same call on both gives the same values
    assert torch.equal(wide.as_strided((3,), (7,), 2).float(), view.as_strided((3,), (7,), 2))


def test_cancellation_in_low_precision_passes_normwise_but_a_wrong_value_does_not():
    tol = T.tolerance("sub", "float16")
    exact = torch.tensor([0.49, 100.0], dtype=torch.float64)   # 1000.49 - 1000: float16 holds 1000.5
    got = torch.tensor([0.5, 100.0], dtype=torch.float16)
    assert not parity.compare(got, exact, tol)["ok"]               # 2% off on the small element
    assert parity.compare(got, exact, tol, normwise=True)["ok"]    # against the tensor's magnitude: fine
    wrong = torch.tensor([0.5, 101.0], dtype=torch.float16)
    assert not parity.compare(wrong, exact, tol, normwise=True)["ok"]


def test_slack_is_the_references_own_movement_and_infinite_where_finiteness_flips():
    ref = torch.tensor([1.0, 2.0, 3.0])
    moved = [torch.tensor([1.0, 2.5, float("inf")]), torch.tensor([0.9, 2.0, 3.0])]
    slack = parity.slack_of(ref, moved)
    assert torch.allclose(slack, torch.tensor([0.1, 0.5, float("inf")], dtype=torch.float64))
    tol = T.Tolerance(0.0, 0.0, "test")
    assert parity.compare(torch.tensor([1.05, 2.4, float("nan")]), ref, tol, slack=slack)["ok"]
    assert not parity.compare(torch.tensor([1.2, 2.0, 3.0]), ref, tol, slack=slack)["ok"]


def test_pytorch_declarations_are_read_with_their_reasons():
    table = opparity.opsweep.op_table()
    assert opparity.pytorch_compare_cpu(table["bernoulli"], "cpu", torch.float32) == (
        "skip", "output is non-deterministic")
    assert opparity.pytorch_compare_cpu(table["add"], "mps", torch.float32) is None


@pytest.mark.parametrize("result,status", [
    ({"verdict": {"ok": True, "margin": 0.2, "max_abs_err": 1e-7, "max_rel_err": 1e-6}}, "pass"),
    ({"verdict": {"ok": False, "margin": 3.0, "max_abs_err": 1e-3, "max_rel_err": 1e-2, "reason": "x"}}, "fail"),
    ({"verdict": {"ok": False, "margin": 3.0, "max_abs_err": 1e-3, "max_rel_err": 1e-2, "reason": "x",
                  "precision_limit": "narrow-dtype"}}, "xfail"),
    ({"verdict": None, "random": 3}, "skip"),
    ({"verdict": None, "error": "NotImplementedError: no kernel"}, "skip"),
    ({"verdict": {"ok": True, "margin": 0.2, "max_abs_err": 0, "max_rel_err": 0}, "declared": ("xfail", "")}, "xpass"),
])
def test_judge(result, status):
    assert opparity.judge({"tolerance": {"rtol": 1e-3, "atol": 1e-5, "source": "s"}, **result}).status == status


@pytest.mark.parametrize("op_key,dtype", [("add", "float32"), ("add", "int64"), ("nn.functional.gelu", "float16")])
def test_the_accelerator_path_with_the_cpu_standing_in(op_key, dtype):
    result = opparity.run_case(op_key, "cpu", dtype, "forward", stand_in=True)
    verdict = opparity.judge(result)
    assert verdict.status == "pass" and result["reference"] == "cpu" and result["compared"] > 0
    assert verdict.metrics["margin"] == 0  # the same kernel on both sides
    if dtype == "int64":
        assert result["tolerance"]["rtol"] == result["tolerance"]["atol"] == 0  # integers: exact
    else:  # both sides measured against float64, so the record says which is nearer
        assert verdict.metrics["more_accurate"] == "same" and verdict.metrics["cpu_ref_err"] >= 0


def _declaring(*decorate_infos):
    """An op that declares tolerances the way OpInfo entries do (torch's own DecorateInfo and
    toleranceOverride), whatever the installed torch's op_db happens to declare."""
    import types
    return types.SimpleNamespace(name="fake_op", decorators=list(decorate_infos))


def test_pytorch_per_op_tolerances_apply_to_their_device_test_dtype_and_pass_only():
    from torch.testing._internal.common_device_type import tol, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo
    op = _declaring(
        DecorateInfo(toleranceOverride({torch.float32: tol(atol=1e-3, rtol=2e-6)}), "TestConsistency",
                     "test_output_grad_match", device_type="mps"),
        DecorateInfo(toleranceOverride({torch.float16: tol(atol=5e-2, rtol=5e-2)}), "TestCommon",
                     "test_compare_cpu", device_type="cuda"))
    grad = opparity.pytorch_tolerance(op, "mps", torch.float32, "backward")
    assert (grad.rtol, grad.atol) == (2e-6, 1e-3) and "fake_op in TestConsistency.test_output_grad_match" in grad.source
    assert opparity.pytorch_tolerance(op, "mps", torch.float32, "forward") is None      # another test
    assert opparity.pytorch_tolerance(op, "mps", torch.float16, "backward") is None     # another dtype
    cuda = opparity.pytorch_tolerance(op, "cuda", torch.float16, "forward")
    assert (cuda.rtol, cuda.atol) == (5e-2, 5e-2) and "TestCommon.test_compare_cpu (cuda)" in cuda.source
    assert opparity.pytorch_tolerance(op, "mps", torch.float16, "forward") is None      # CUDA's, not MPS's


def test_the_installed_op_db_declarations_are_read_without_error():
    """Every op of the installed torch's OpInfo database, any device: a declared tolerance
    names its op; most ops declare none (``add`` never has)."""
    table = opparity.opsweep.op_table()
    found = [t for op in table.values() for dev in ("mps", "cuda") for dtype in (torch.float32, torch.float16)
             for pass_ in ("forward", "backward")
             if (t := opparity.pytorch_tolerance(op, dev, dtype, pass_)) is not None]
    assert all(t.rtol >= 0 and t.atol >= 0 and "PyTorch's toleranceOverride for " in t.source for t in found)
    assert opparity.pytorch_tolerance(table["add"], "mps", torch.float32, "forward") is None


