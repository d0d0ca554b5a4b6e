"""Whole-model parity with the weights in half precision (suites/parity/test_model_half_weights.py):
the runs compute in the half dtype throughout, the judge takes a run without gradients, the
tolerances are the half weights' own and can fail, a failure's switch is the model's dtype,
and the faults users meet there (NaN with padding, a half-precision kernel wrong past 64
query rows, sums kept in the half dtype) fail the checks built to catch them, through the
sandbox children.
"""
import os

import pytest
import torch

from harness.core import isolate, models
from harness.core.records import Status
from harness.parity.models import inputs, judge, precision, runs
from harness.parity.models.judge import StepRun
from harness.parity.numerics import causes
from harness.parity.numerics.tolerances import TABLE
from tests import half_attention_faults  # noqa: F401  registers standin-long-q
from tests import model_faults, standins  # noqa: F401  registers standin-half-sums, standin-noisy
from tests.conftest import run_suite

SUITE = "suites/parity/test_model_half_weights.py"


def _tol(dtype: str):
    return TABLE[("model-weights", dtype)]


def _pair(tol):
    return tol.rtol, tol.atol


@pytest.fixture
def fault():
    """``fault(name)`` injects a fault of tests/model_faults.py into this process until the test ends."""
    yield lambda name: model_faults.install([name])
    model_faults.uninstall()


# --------------------------------------------------------------------------- the runs

def test_every_side_but_float64_computes_with_its_weights_in_the_half_dtype():
    assert [(s.name, s.device, s.dtype, s.autocast) for s in precision.weights_sides("standin-noisy", "float16")] == [
        ("target", "standin-noisy", "float16", ""), ("cpu", "cpu", "float16", ""), ("float64", "cpu", "float64", "")]
    assert [s.name for s in precision.weights_sides("cpu", "bfloat16")] == ["target", "float64"]
    assert runs.in_half_weights(runs.Side("target", "cpu", "float16"))
    assert not runs.in_half_weights(runs.Side("target", "cpu", "float32", "float16"))   # autocast is not half weights
    assert runs.in_float32(runs.Side("target", "cpu", "bfloat16")).dtype == "float32"


def test_a_half_weights_forward_is_inference_in_the_dtype_at_the_real_positions():
    base = inputs.kernel_model("llama")
    side = runs.Side("target", "cpu", "float16")
    out = runs.step("llama", base, lambda m: inputs.padded_batch("llama", m), side,
                    lambda m, b: inputs.real_positions("llama", m, b), backward=False)
    assert out["output"].dtype == torch.float16 and out["grads"] == {}
    mask = inputs.padded_batch("llama", base)["attention_mask"]
    assert out["output"].shape[0] == int(mask.sum())   # the real positions only
    assert inputs.head_dim(base) == inputs.KERNEL_HEAD_DIM


def test_the_cpu_runs_every_model_within_the_half_weights_tolerance_and_a_quarter_of_it_fails():
    """The measured tolerances leave room (margin under 0.6 for the model that sets them) and
    can fail: at a quarter of float16's rtol the tiny BERT's logits miss."""
    for dtype in precision.HALF:
        run = precision.half_weights_forward("bert", "cpu", dtype, _pair(_tol(dtype)))
        verdict = judge.judge_forward_backward(run, _tol(dtype), _tol(dtype))
        assert verdict.status == Status.PASS and verdict.metrics["margin"] < 0.6, verdict.metrics
        assert verdict.metrics["weights"] == dtype and "grad_margin" not in verdict.metrics
    tight = torch.tensor(_pair(_tol("float16"))) / torch.tensor([4.0, 1.0])
    run = precision.half_weights_forward("bert", "cpu", "float16", tuple(tight.tolist()))
    assert judge.judge_forward_backward(run, judge.as_tolerance(tuple(tight.tolist())), _tol("float16")).status == \
        Status.FAIL


def test_the_half_weights_need_their_own_tolerance_autocasts_is_too_tight():
    """In float16 the tiny BERT with float16 weights misses by more than autocast's rtol allows
    (norms and softmax in float16): judged by autocast's table it would fail on a correct CPU."""
    run = precision.half_weights_forward("bert", "cpu", "float16", _pair(TABLE[("model", "float16")]))
    assert run.output["margin"] > 0.75


def _step_run(output_off: float) -> StepRun:
    expected = {"output": torch.linspace(-1, 1, 8, dtype=torch.float64), "loss": torch.tensor(2.0, dtype=torch.float64),
                "grads": {}}
    actual = {"output": (expected["output"] * (1 + output_off)).half(), "loss": expected["loss"].half(), "grads": {}}
    tol = _tol("float16")
    return StepRun("m", "cpu", "float64", "logits", **judge.measure(actual, expected, tol, tol, normwise=True),
                   dtype="float16")


def test_the_judge_takes_a_run_without_gradients_and_still_fails_its_output():
    tol = _tol("float16")
    right = judge.judge_forward_backward(_step_run(0.0), tol, tol)
    assert right.status == Status.PASS and "params_compared" not in right.metrics
    wrong = judge.judge_forward_backward(_step_run(0.02), tol, tol)
    assert wrong.status == Status.FAIL and "output out of tolerance" in wrong.message


# --------------------------------------------------------------------------- causes and switches

def test_a_half_weights_failure_gets_the_models_dtype_as_its_switch_not_one_ops():
    for cause in ("non-finite", "reduced-precision", "half-kernel"):
        weights = causes.describe(cause, "mps", "float16", weights=True)["switch"]
        autocast = causes.describe(cause, "mps", "float16", autocast=True)["switch"]
        assert weights != autocast and ("torch_dtype=torch.float32" in weights or "65504" in weights), cause
    assert "65504" in causes.describe("non-finite", "mps", "float16", weights=True)["switch"]
    assert "without autocast" in causes.describe("half-kernel", "cuda", "bfloat16", weights=True)["switch"]
    # float32 has no half weights: the full-precision switch, as before
    assert causes.describe("non-finite", "cpu", "float32", weights=True) == causes.describe("non-finite", "cpu",
                                                                                           "float32")
    assert runs.diagnose("cpu", None, "float16", 2, weights=True)["switch"] == causes.switch_for(
        causes.CAUSES["non-finite"], "cpu", "float16", weights=True)


def test_nan_with_padding_fails_every_half_weights_run_as_non_finite_with_the_weights_switch(fault):
    fault("nan-half")
    for dtype in precision.HALF:
        run = precision.half_weights_forward("gpt2", "cpu", dtype, _pair(_tol(dtype)))
        verdict = judge.judge_forward_backward(run, _tol(dtype), _tol(dtype))
        assert (verdict.status, verdict.cause) == (Status.FAIL, "non-finite"), verdict.message
        assert verdict.metrics["switch"] == causes.switch_for(causes.CAUSES["non-finite"], "cpu", dtype, weights=True)
    model_faults.uninstall()
    clean = precision.half_weights_forward("gpt2", "cpu", "float16", _pair(_tol("float16")))
    assert clean.non_finite == 0


@pytest.mark.parametrize("dtype", precision.HALF)
def test_rows_past_64_wrong_in_half_precision_fail_the_long_prompt_as_the_half_kernel(dtype):
    tol = _tol(dtype)
    wrong = judge.judge_generation_run(precision.half_weights_generate("llama", "standin-long-q", dtype, _pair(tol),
                                                                       precision.LONG_NEW_TOKENS, True), tol)
    assert wrong.status == Status.FAIL and wrong.cause == causes.HALF_KERNEL, wrong.message
    assert "without autocast" in wrong.metrics["switch"]
    right = precision.half_weights_generate("llama", "cpu", dtype, _pair(tol), precision.LONG_NEW_TOKENS, True)
    assert judge.judge_generation_run(right, tol).status == Status.PASS
    assert right.setting["weights"] == dtype and "193" in right.setting["inputs"]


def test_sums_kept_in_the_half_dtype_are_reduced_precision_with_the_weights_switch():
    """standin-half-sums (every running sum of a float16 sum or matmul rounded to float16): the
    float32 rerun meets float64 and the miss is within half precision's reach, so the cause
    is reduced precision, and its switch is the model's dtype."""
    found = []
    for name in models.MODELS:
        for dtype in precision.HALF:
            run = precision.half_weights_forward(name, "standin-half-sums", dtype, _pair(_tol(dtype)))
            verdict = judge.judge_forward_backward(run, _tol(dtype), _tol(dtype))
            if verdict.status == Status.FAIL:
                found.append(verdict)
    assert found
    for verdict in found:
        assert verdict.cause == "reduced-precision", verdict.message
        assert verdict.metrics["switch"] == causes.HALF_WEIGHTS


# --------------------------------------------------------------------------- which targets run the dtype

def test_a_target_that_cannot_run_the_dtype_is_skipped_with_the_reason(monkeypatch):
    """The emulated Mac on macOS 13 (tests/emulated_mps.py, MacOS13: not a target of its own,
    registered here): float16 runs, bfloat16 is skipped with the reason MPS gives."""
    from harness.env import devices
    from tests import emulated_mps
    mac13 = emulated_mps.MacOS13()
    monkeypatch.setitem(devices.STAND_INS, mac13.name, mac13)
    assert precision.weights_unsupported("cpu", "float16") is None
    assert precision.weights_unsupported(mac13.name, "float16") is None
    why = precision.weights_unsupported(mac13.name, "bfloat16")
    assert "does not offer bfloat16" in why and "macOS 14" in why
    assert precision.weights_unsupported("standin-mps", "bfloat16") is None   # the recorded Mac: macOS 14 or newer


def test_a_dtype_whose_kernels_raise_is_skipped_with_the_error(monkeypatch):
    real = torch.nn.functional.layer_norm

    def no_half(x, *a, **k):
        if x.dtype == torch.float16:
            raise RuntimeError('"LayerNormKernelImpl" not implemented for \'Half\'')
        return real(x, *a, **k)
    monkeypatch.setattr(torch.nn.functional, "layer_norm", no_half)
    why = precision.weights_unsupported("cpu", "float16")
    assert "not implemented for 'Half'" in why and "load it in float32" in why
    assert precision.half_weights_forward("bert", "cpu", "float16", (1e-3, 1e-5)) == why


# --------------------------------------------------------------------------- the suite, in child pytest runs

def _child_env(faults: str = "") -> dict:
    preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m and m != "tests.model_faults"]
    return {isolate.PRELOAD_VAR: ",".join([*preload, "tests.model_faults"]), model_faults.VAR: faults,
            isolate.THREADS_VAR: "1"}


EXPECTED = ([f"parity/model_half_weights_forward/{m}/{d}" for m in models.MODELS for d in precision.HALF]
            + [f"parity/model_half_weights_greedy_generation/{m}/{d}" for m in runs.DECODERS for d in precision.HALF]
            + [f"parity/model_half_weights_long_prompt/{m}/{d}" for m in inputs.LONG_DECODERS for d in precision.HALF])


@pytest.mark.slow
def test_a_clean_run_passes_every_check_under_its_documented_id(tmp_path):
    res, records = run_suite(tmp_path, SUITE, "parity and cpu", "-n", "0", env=_child_env())
    assert res.returncode == 0, res.stdout[-3000:]
    assert {r["check"] for r in records} == set(EXPECTED)
    assert {r["status"] for r in records} == {Status.PASS}
    assert all(r["metrics"]["margin"] < 1 and r["metrics"]["weights"] in precision.HALF for r in records)


@pytest.mark.slow
def test_nan_half_in_the_sandbox_children_fails_every_check_as_non_finite(tmp_path):
    res, records = run_suite(tmp_path, SUITE, "parity and cpu", "-n", "0", env=_child_env("nan-half"))
    assert res.returncode == 1, res.stdout[-3000:]
    assert {r["check"] for r in records} == set(EXPECTED)
    for record in records:
        if models.sdpa_missing(record["variant"].split("/")[0]):
            continue   # the fault is sdpa's (tests/model_faults.py); this transformers builds the model without it
        assert (record["status"], record["metrics"].get("cause")) == (Status.FAIL, "non-finite"), record["check"]
        assert record["metrics"]["switch"] == causes.CAUSES["non-finite"].switch["weights"], record["check"]
