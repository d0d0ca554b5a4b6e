"""torch.compile against eager (suites/parity/test_compiled.py, harness/parity/compiled.py): a
compiled kernel off by 2^-8 fails exactly the checks that compile its op, naming inductor's
kernel as the cause; a compile error is recorded as compile-failed with its first line; a
target that cannot compile skips with what to install; the cases and their ids are stable."""
import dataclasses
import os

import pytest

from harness.env import devices

from harness.core import models, records
from harness.core.cases import check_table
from harness.core.records import Category, Status
from harness.parity import compiled
from harness.parity.ops import check
from harness.parity.numerics.tolerances import TABLE, Tolerance
from tests import compile_faults
from tests.conftest import dynamo_refuses, run_suite

SUITE = "suites/parity/test_compiled.py"
OUTPUTS = TABLE[("model", "float32")]
GRADIENTS = TABLE[("model-grad", "float32")]
OFF, FAILS = "gelu", "softmax"      # the op whose compiled kernel is off, the op that cannot compile
# The slice the fault run takes: both faulty ops in every dtype and pass, one check each of two
# neighbours that must stay right (silu; log_softmax, whose name holds "softmax"), a model with
# gelu (BERT) and one without (Llama). Each compiled check costs a C++ build on a 2-core machine.
SLICE = ("gelu or (softmax and not log_softmax) or log_softmax-float32-forward or silu-float16-backward "
         "or bert or llama")


# --------------------------------------------------------------------------- the cases

def _suite_module():
    import importlib.util

    from tests.conftest import ROOT
    spec = importlib.util.spec_from_file_location("_compiled_suite", ROOT / SUITE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_cases_have_stable_readable_ids_one_per_op_dtype_pass_and_model():
    ops, models_ = compiled.op_cases(), compiled.model_cases()
    assert ops == compiled.op_cases() and models_ == compiled.model_cases()   # the same table, in the same order
    check_table([*ops, *models_], SUITE)                                      # ids unique per target
    assert {c.op_key for c in ops} == set(compiled.OPS)
    assert {(c.dtype, c.pass_) for c in ops} <= {(d, p) for d in compiled.DTYPES for p in ("forward", "backward")}
    for op in compiled.OPS:   # every op in float32, both passes, on every real target OpInfo declares
        assert {c.pass_ for c in ops if c.op_key == op and c.dtype == "float32" and "cpu" in c.targets} == {
            "forward", "backward"}, op
    # no plain stand-in (they perturb eager kernels); an emulated device is held to its device's gates
    assert all(set(c.targets) <= set(compiled.targets()) for c in ops)
    assert not any(t in devices.STAND_INS and not devices.is_emulated(t) for c in ops for t in c.targets)
    assert [c.model for c in models_] == list(models.MODELS)

    def check_id(case) -> str:
        name = "test_compiled_model" if isinstance(case, compiled.CompiledModel) else "test_compiled_op"
        where = ("suites", "parity", "test_compiled.py")
        return records.identity_for(where, name, {"case": case, "target": "cpu"}).check
    ids = {check_id(c) for c in [*ops, *models_]}
    # what a record says of its compile marker (a comparison reads -m "parity" by it): every id of the family
    assert all(records.opt_in_of(i.split("/")[1]) == ("compile",) for i in ids)
    marks = getattr(_suite_module(), "pytestmark", [])
    assert any(m.name == "compile" for m in (marks if isinstance(marks, list) else [marks]))
    assert {"parity/compiled.softmax/float16/backward", "parity/compiled.nn.functional.gelu/float32/forward",
            "parity/compiled.bert/float32/forward-backward", "parity/compiled.minilm/float32/forward-backward"} <= ids
    softmax = next(c for c in ops if c.op_key == "softmax" and c.dtype == "float16" and c.pass_ == "backward")
    assert softmax.id == "compiled.softmax-float16-backward"


def test_compile_failed_is_a_parity_category_of_the_record_contract():
    assert Category.COMPILE_FAILED == "compile-failed" and Category.COMPILE_FAILED in records.CATEGORIES["parity"]
    records.Verdict(Status.FAIL, Category.COMPILE_FAILED, "x")   # a judge may say it


# --------------------------------------------------------------------------- judging

TOL = Tolerance(1.3e-6, 1e-5, "test")


def test_a_compile_error_fails_as_compile_failed_with_its_first_line_and_the_stage():
    run = compiled.CompiledOpRun("cpu", TOL, samples=3, chosen=[2], inputs=["abcd1234"], error_sample=2,
                                 compile_error="BackendCompilerFailed: backend='inductor' raised: RuntimeError: boom",
                                 compile_stage="inductor")
    v = compiled.judge_op(run)
    assert v.status == Status.FAIL and v.category == Category.COMPILE_FAILED and v.cause == "compile-error"
    assert "RuntimeError: boom" in v.message and "backend='aot_eager'" in v.message
    assert v.metrics["compile_error"] == run.compile_error and v.metrics["worst_sample"] == 2
    assert v.metrics["inputs"] == "abcd1234"


def test_nothing_compiled_or_eager_failing_is_a_skip_with_its_reason_not_a_pass():
    v = compiled.judge_op(compiled.CompiledOpRun("cpu", TOL, samples=2, chosen=[0, 1], not_compiled=2,
                                                 graph_breaks=["a call dynamo cannot trace"]))
    assert v.status == Status.SKIP and "no graph" in v.message and "a call dynamo cannot trace" in v.message
    v = compiled.judge_op(compiled.CompiledOpRun("cpu", TOL, eager_error="RuntimeError: no kernel"))
    assert v.status == Status.SKIP and "eager fails here too" in v.message
    v = compiled.judge_op(compiled.CompiledOpRun("mps", TOL, unsupported="upgrade torch"))
    assert v.status == Status.SKIP and v.message == "upgrade torch"


def _model_run(**changes) -> compiled.CompiledModelRun:
    ok = {"ok": True, "max_abs_err": 1e-7, "max_rel_err": 1e-7, "margin": 0.1, "reason": ""}
    grad = {"ok": True, "margin": 0.1, "max_abs_err": 1e-9, "rel_err": 1e-7, "scale": 1.0, "reason": ""}
    summary = {"output_max_abs_err": 1e-7, "loss_abs_err": 1e-8, "grad_worst": "a", "grad_worst_rel_err": 1e-7}
    run = compiled.CompiledModelRun("minilm", "cpu", output_name="last_hidden_state", output=ok,
                                    loss={**ok, "value": 0.5, "reference": 0.5},
                                    grads=[{**grad, "name": "a"}, {**grad, "name": "pooler.dense.weight"}],
                                    scale=1.0, vs_eager=summary, vs_float64={"compiled": summary, "eager": summary},
                                    graphs=1)
    return dataclasses.replace(run, **changes)


def test_a_zero_gradient_where_eager_has_none_is_named_as_its_own_cause():
    """AOTAutograd gives parameters the loss does not use an all-zero gradient where eager
    leaves None: an optimizer's weight decay then moves them under compile only."""
    import torch
    assert compiled.zero_for_none({"a": torch.ones(2), "p": torch.zeros(2), "q": torch.zeros(2)},
                                  {"a": torch.ones(2), "p": None, "q": torch.zeros(2)}) == ["p"]
    unused = {"name": "pooler.dense.weight", "ok": False, "margin": float("inf"), "max_abs_err": float("nan"),
              "rel_err": float("nan"), "scale": 0.0, "reason": "no gradient on the reference side"}
    run = _model_run(grads=[_model_run().grads[0], unused], zero_grads=["pooler.dense.weight"])
    v = compiled.judge_model(run, OUTPUTS, GRADIENTS)
    assert v.status == Status.FAIL and v.cause == "unused-zero-grad" and "pooler.dense.weight" in v.message
    assert "requires_grad_(False)" in v.message and v.metrics["zero_grads"] == ["pooler.dense.weight"]
    assert compiled.judge_model(_model_run(), OUTPUTS, GRADIENTS).status == Status.PASS


# --------------------------------------------------------------------------- NaN: eager's, or the compiler's

EAGER_NAN_EVERY = 5


def _gelu_nan_in_float32(x):
    """gelu whose float32 result is NaN at every EAGER_NAN_EVERY-th element (flat order): an
    op that gives NaN eagerly, in that precision (float64, the reference, stays right).
    Dynamo traces the NaN into the graph, so the compiled op gives them too."""
    import torch
    import torch.nn.functional as F
    out = F.gelu(x)
    if x.dtype == torch.float32:
        every = (torch.arange(out.numel()) % EAGER_NAN_EVERY == 0).reshape(out.shape)
        out = torch.where(every, torch.full_like(out, float("nan")), out)
    return out


@pytest.mark.slow   # inductor's first C++ compile in the process: 15-20 s on 2 cores
@pytest.mark.parametrize("faults, cause", [([], "eager-non-finite"), ([("nan", OFF)], "inductor-kernel"),
                                           ([("off", OFF)], "inductor-kernel")],
                         ids=["eager-alone", "and-nan-of-inductor-s", "and-an-error-of-inductor-s"])
def test_a_compiled_nan_counts_eager_s_share_and_eager_s_own_nan_names_no_compiler_stage(
        tmp_path, monkeypatch, faults, cause):
    """An op that gives NaN eagerly at 28 of 140 elements: compiled, it gives the same NaN, which
    are eager's, not the compiler's (``eager-non-finite``, no rerun). With inductor's kernel
    giving NaN at 20 more places (tests/compile_faults.py, nan:gelu), or off by 2^-8 elsewhere
    (off:gelu), the reruns with backend="eager" and "aot_eager" still carry eager's 28: a rerun
    that counted them as a miss would blame graph capture; what the lighter backends do not
    give names inductor. Each way the record counts the NaN and eager's share, and says
    "eager", never "the CPU"."""
    import torch
    import torch._inductor.compile_fx as compile_fx
    from torch.testing._internal.opinfo.core import SampleInput

    from harness.parity.numerics import tolerances
    if compiled.unsupported("cpu"):
        pytest.fail(f"this machine cannot compile for the CPU: {compiled.unsupported('cpu')}")
    monkeypatch.setattr(compile_faults, "FAULTS", faults)
    monkeypatch.setattr(compile_fx, "compile_fx", compile_fx.compile_fx)   # the wrapper below goes with the test
    compile_faults.wrap(compile_fx)
    compiled.prepare(str(tmp_path))
    torch.manual_seed(0)
    sample = SampleInput(torch.randn(4, 35))
    run = compiled.CompiledOpRun("cpu", tolerances.tolerance("nn.functional.gelu", "float32"), samples=1, chosen=[0])
    found = compiled._op_sample(compiled._Call("gelu", _gelu_nan_in_float32), sample, 0, "cpu", torch.float32,
                                "forward", run)
    eager = len(range(0, 140, EAGER_NAN_EVERY))                                    # 28
    own = len(set(range(0, 140, compile_faults.NAN_EVERY)) - set(range(0, 140, EAGER_NAN_EVERY))) if faults == [
        ("nan", OFF)] else 0
    assert not found["ok"] and found["non_finite"] == eager + own and found["non_finite_in_eager"] == eager, found
    assert found["cause"] == cause, found
    v = compiled.judge_op(run)
    assert v.status == Status.FAIL and v.cause == cause and v.metrics["non_finite"] == eager + own
    assert v.metrics["non_finite_in_eager"] == eager and "non_finite_on_cpu" not in v.metrics
    assert f"{eager + own} element(s) NaN or inf" in v.message and f"eager gives NaN or inf at {eager} of them" in v.message
    assert not any(w in v.message for w in ("the CPU gives", "the CPU does not", "the CPU's own", "off float64 by 0")), \
        v.message   # eager is the yardstick here, and a NaN has no distance
    if cause == "eager-non-finite":      # the switch, for float32 on the CPU: no "compute it in float32"
        assert "compute that part in float64" in v.message and "autocast" not in v.message, v.message
    assert ("; elsewhere: " in v.message) == (faults == [("off", OFF)]), v.message   # the error beside eager's NaN


@pytest.mark.parametrize("kind, cause", [("flaky", "nondeterministic"), ("drift", "inductor-kernel")])
def test_a_compiled_rerun_with_other_bits_names_nondeterminism_only_where_it_passes(tmp_path, monkeypatch, kind,
                                                                                     cause):
    """As for eager ops (test_op_parity_suite): the same compiled code run again with other bits
    names nondeterminism only where that second run passes. Compiled gelu off by 2^-8 on its
    first run and right on the second (flaky:gelu) is nondeterministic; off by another amount
    on every run (drift:gelu) is inductor's kernel, which the lighter backends do not share."""
    import torch
    import torch._inductor.compile_fx as compile_fx
    import torch.nn.functional as F
    from torch.testing._internal.opinfo.core import SampleInput

    from harness.parity.numerics import tolerances
    if compiled.unsupported("cpu"):
        pytest.fail(f"this machine cannot compile for the CPU: {compiled.unsupported('cpu')}")
    monkeypatch.setattr(compile_faults, "FAULTS", [(kind, OFF)])
    monkeypatch.setattr(compile_fx, "compile_fx", compile_fx.compile_fx)   # the wrapper below goes with the test
    compile_faults.wrap(compile_fx)
    compiled.prepare(str(tmp_path))
    torch.manual_seed(0)
    run = compiled.CompiledOpRun("cpu", tolerances.tolerance("nn.functional.gelu", "float32"), samples=1, chosen=[0])
    found = compiled._op_sample(compiled._Call("gelu", F.gelu), SampleInput(torch.randn(4, 35)), 0, "cpu",
                                torch.float32, "forward", run)
    assert not found["ok"] and found["cause"] == cause, found


def test_a_model_step_out_of_the_rule_only_by_eager_s_own_nan_is_not_the_compiler_s():
    """compiled.step_passes, what the reruns of a compiled model step ask: NaN eager gives at
    the same elements do not make a rerun miss; NaN of its own, or an error, do. Judged, the
    step's record counts the NaN and eager's share, under eager's name."""
    import torch
    nan = float("nan")
    ref = {"output": torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64), "loss": torch.tensor(0.5, dtype=torch.float64),
           "grads": {"w": torch.tensor([0.1, 0.2], dtype=torch.float64)}}
    eager = {"output": torch.tensor([1.0, nan, 3.0, 4.0]), "loss": torch.tensor(0.5), "grads": {"w": torch.tensor([0.1, 0.2])}}
    sides = {"cpu": eager, "float64": ref}
    assert compiled.step_passes({**eager}, sides, OUTPUTS, GRADIENTS)                                 # eager's NaN alone
    assert not compiled.step_passes({**eager, "output": torch.tensor([1.0, nan, nan, 4.0])}, sides, OUTPUTS, GRADIENTS)
    assert not compiled.step_passes({**eager, "output": torch.tensor([1.0, nan, 3.5, 4.0])}, sides, OUTPUTS, GRADIENTS)
    beside = compiled.beyond_eager_nan({**eager, "output": torch.tensor([1.0, nan, 3.5, 4.0])}, sides, OUTPUTS,
                                       GRADIENTS)["output"]
    assert not beside["ok"] and "NaN" not in beside["reason"] and "1 / 4 elements off" in beside["reason"], beside
    assert not compiled.step_passes({**eager, "grads": {"w": torch.tensor([nan, 0.2])}}, sides, OUTPUTS, GRADIENTS)
    assert compiled.step_passes({**eager, "grads": {"w": torch.tensor([nan, 0.2])}},
                                {"cpu": {**eager, "grads": {"w": torch.tensor([nan, 0.2])}}, "float64": ref},
                                OUTPUTS, GRADIENTS)
    nan_out = {"ok": False, "max_abs_err": 0.0, "max_rel_err": 0.0, "margin": float("inf"),
               "reason": "1 element(s) NaN or inf where float64, rounded to float32, is a number (eager gives NaN or "
                         "inf at 1 of them too)"}
    run = _model_run(output=nan_out, non_finite=1, non_finite_in_eager=1,
                     diagnosis=compiled.said("eager-non-finite", "float32"))
    v = compiled.judge_model(run, OUTPUTS, GRADIENTS)
    assert v.status == Status.FAIL and v.cause == "eager-non-finite", v.message
    assert v.metrics["non_finite"] == 1 and v.metrics["non_finite_in_eager"] == 1 and "non_finite_on_cpu" not in v.metrics
    assert "eager gives NaN or inf at the same elements" in v.message
    run = _model_run(output=nan_out, non_finite=1, non_finite_in_eager=1, elsewhere="output elsewhere: 1 / 4 off",
                     diagnosis=compiled.said("inductor-kernel", "float32"))
    v = compiled.judge_model(run, OUTPUTS, GRADIENTS)
    assert v.cause == "inductor-kernel" and "(eager gives NaN or inf at 1 of them too); output elsewhere: 1 / 4 off" \
        in v.message, v.message


# --------------------------------------------------------------------------- in the child's shoes

def test_a_backend_error_reads_as_one_line_with_the_backend_s_own_error():
    import torch

    def refuses(gm, example_inputs):
        raise RuntimeError("no kernel for you\nsecond line")
    try:
        torch.compile(lambda x: x.sin() + 1, backend=refuses)(torch.ones(3))
    except Exception as exc:  # dynamo wraps it: BackendCompilerFailed
        line = compiled.compile_error_line(exc)
    else:
        pytest.fail("the backend's error did not reach the caller")
    finally:
        torch._dynamo.reset()
    assert line == "BackendCompilerFailed: backend='refuses' raised: RuntimeError: no kernel for you"


def test_a_target_that_cannot_compile_skips_with_what_to_install(monkeypatch):
    import torch._inductor.config as inductor_config
    assert compiled.unsupported("cpu") is None                       # this machine has g++ (the self-tests need it)
    # torch's own patch, not monkeypatch: pytest >= 9 undoes a setattr on torch's config proxy
    # with a delattr, which hides cpp.cxx for the rest of the process (every later compile fails)
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/g++")}):
        why = compiled.unsupported("cpu")
    assert why and "C++ compiler" in why and "CXX" in why
    assert inductor_config.cpp.cxx != (None, "/nonexistent/g++")
    monkeypatch.setattr(compiled, "_torch_version", lambda: (2, 6))
    why = compiled.unsupported("mps")
    assert "2.7" in why and "upgrade torch" in why
    from torch.utils import _triton
    monkeypatch.setattr(_triton, "has_triton", lambda: False)
    assert "pip install triton" in compiled.unsupported("cuda")


def test_the_fault_scales_only_the_named_op_in_graphs_inductor_compiles(monkeypatch):
    """tests/compile_faults.py on a graph: the named op's output times (1 + 2^-8), nothing else."""
    import torch
    import torch.nn.functional as F
    monkeypatch.setattr(compile_faults, "FAULTS", [("off", "gelu")])

    class Inner:
        compile_fx = staticmethod(lambda gm, inputs, **kw: gm)   # "inductor": returns the graph to run
    compile_faults.wrap(Inner)
    gm = torch.fx.symbolic_trace(lambda x: F.gelu(x) + F.silu(x))
    x = torch.randn(5, dtype=torch.float64)
    got = Inner.compile_fx(gm, [x])(x)
    assert torch.allclose(got, F.gelu(x) * compile_faults.FACTOR + F.silu(x), rtol=0, atol=1e-15)
    assert compile_faults.calls(gm, "silu") and not compile_faults.calls(gm, "softmax")


# --------------------------------------------------------------------------- the suite, with the faults

@pytest.fixture(scope="module")
def fault_run(tmp_path_factory):
    """One child pytest over SLICE on the CPU: gelu's compiled kernel off by 2^-8, softmax
    refusing to compile (tests/compile_faults.py)."""
    return run_suite(tmp_path_factory.mktemp("compiled"), SUITE, "compile and cpu", "-k", SLICE, "-n", "0",
                     "-p", "tests.compile_faults",
                     env={compile_faults.VAR: f"off:{OFF},fail:{FAILS}", "MPS_COMPAT_SANDBOX_PRELOAD": ""})


def _by_check(records_: list[dict]) -> dict:
    return {r["check"]: r for r in records_}


@pytest.mark.slow
def test_a_compiled_kernel_off_by_2_to_the_minus_8_fails_exactly_its_checks_naming_inductor(fault_run):
    """float32 and float16 gelu, forward and backward, and BERT (whose activation is gelu)
    fail, each naming inductor's kernel and the aot_eager switch. A 2^-8 error is within
    bfloat16's own tolerance (1.6e-2), so gelu in bfloat16 passes; silu, log_softmax and
    Llama compile no gelu and pass. Where dynamo cannot capture a model at all (BERT and Llama
    on torch 2.6 under transformers 5.24, ``dynamo_refuses``), its check fails earlier, as
    compile-failed in graph capture in dynamo's own words, and the fault is never reached."""
    res, records_ = fault_run
    assert res.returncode == 1, res.stdout[-3000:]
    got = _by_check(records_)
    gelu = {c: r for c, r in got.items() if c.startswith(f"parity/compiled.nn.functional.{OFF}/")}
    failing = {c for c, r in gelu.items() if r["status"] == Status.FAIL}
    assert failing == {f"parity/compiled.nn.functional.{OFF}/{d}/{p}" for d in ("float32", "float16")
                       for p in ("forward", "backward")}, {c: r["status"] for c, r in gelu.items()}
    model_checks = {m: f"parity/compiled.{m}/float32/forward-backward" for m in ("bert", "llama")}
    refused = {model_checks[m]: why for m in model_checks if (why := dynamo_refuses(m))}
    for check, why in refused.items():
        r = got[check]
        assert r["status"] == Status.FAIL and r["category"] == Category.COMPILE_FAILED, r["reason"]
        assert r["metrics"]["compile_stage"] == "eager" and why.split(": ")[-1] in r["reason"], (why, r["reason"])
        if "has no attribute" in why:   # a version gap: the versions to change, no bug to report
            assert "upgrade torch (or downgrade it, where torch removed the name), or install a transformers release" in r["reason"], r["reason"]
            assert r["metrics"]["cause"] == "version-gap: transformers", r["metrics"]
            assert compiled.REPORT not in r["reason"], r["reason"]
    bert = got[model_checks["bert"]]
    for r in [*(gelu[c] for c in failing), *([] if bert["check"] in refused else [bert])]:
        assert r["category"] == Category.PARITY and r["metrics"]["cause"] == "inductor-kernel", r["reason"]
        assert "backend='aot_eager'" in r["reason"] and r["metrics"]["margin"] > 1
    assert bert["check"] in refused or bert["metrics"]["grads_diverged"], bert["reason"]
    others = {c: r["status"] for c, r in got.items()
              if c not in failing | {bert["check"]} | set(refused) and not c.startswith(f"parity/compiled.{FAILS}/")}
    assert others and set(others.values()) == {Status.PASS}, others
    assert {"parity/compiled.log_softmax/float32/forward", "parity/compiled.nn.functional.silu/float16/backward",
            *({model_checks["llama"]} - set(refused))} <= set(others)


@pytest.mark.slow
def test_a_compile_error_is_recorded_as_compile_failed_with_its_first_line(fault_run):
    _, records_ = fault_run
    softmax = [r for r in records_ if r["subject"] == f"compiled.{FAILS}"]
    assert len(softmax) >= 4
    for r in softmax:
        assert r["status"] == Status.FAIL and r["category"] == Category.COMPILE_FAILED, r["reason"]
        assert compile_faults.INJECTED in r["reason"] and r["reason"].count("\n") == 0
        assert r["metrics"]["compile_error"].startswith(
            "BackendCompilerFailed: backend='inductor' raised: RuntimeError")
        assert r["metrics"]["compile_stage"] == "inductor"   # aot_eager compiles it: the fault is inductor's


def test_the_compile_checks_stay_out_of_a_selection_that_does_not_name_them(tmp_path):
    """`-m "parity and cpu"` keeps its budget: the compile checks are deselected unless the
    marker expression names compile (the plugin's opt-in markers)."""
    from harness.plugin import hooks
    if "compile" not in getattr(hooks, "OPT_IN", ()):
        pytest.skip("harness/plugin/hooks.py has no OPT_IN marker list yet: the lead applies the change "
                    "(issue 24's report)")
    res, records_ = run_suite(tmp_path, SUITE, "parity and cpu", "-n", "0", "--collect-only")
    assert "no tests collected" in res.stdout or " deselected" in res.stdout, res.stdout[-2000:]
    assert "test_compiled_op[" not in res.stdout and records_ == []
    res, _ = run_suite(tmp_path, SUITE, "compile and cpu", "-n", "0", "--collect-only", "-k", "silu")
    assert "test_compiled_op[cpu-compiled.nn.functional.silu-float32-forward]" in res.stdout, res.stdout[-2000:]


def test_the_fault_plugin_reaches_the_sandbox_children(monkeypatch):
    from harness.core import isolate
    monkeypatch.setenv(isolate.PRELOAD_VAR, "tests.standins")
    compile_faults.pytest_configure(None)
    assert os.environ[isolate.PRELOAD_VAR] == "tests.standins,tests.compile_faults"
    compile_faults.pytest_configure(None)   # once
    assert os.environ[isolate.PRELOAD_VAR] == "tests.standins,tests.compile_faults"


def test_a_compiled_pointwise_op_wrong_on_its_small_elements_fails_though_the_whole_output_rule_passes_it(
        monkeypatch):
    """The compiled family withholds the whole-output rule where the op sums nothing
    (check.accumulates), as the op parity family does: gelu whose compiled float16 result is
    2^-6 (1.6%) off wherever it is under 5% of its largest value passed by that rule (at most
    8e-4 x the largest value off, where 1e-3 x it is allowed)."""
    import torch
    from torch.utils import _pytree
    real = compiled._compile_and_run

    def skewed(t):
        if not (isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel()):
            return t
        small = t.abs() < 0.05 * t.abs().max()
        return torch.where(small, t * (1 + 2 ** -6), t)

    def skewing(call, sample, device, dt, pass_, backend=None, **inductor):
        out, fresh, fn = real(call, sample, device, dt, pass_, backend="eager")   # no C++ compile: quick
        return (_pytree.tree_map(skewed, out) if backend is None else out), fresh, fn
    monkeypatch.setattr(compiled, "_compile_and_run", skewing)
    found = compiled.judge_op(compiled.run_op("nn.functional.gelu", "cpu", "float16", "forward"))
    assert found.status == Status.FAIL and found.metrics["pointwise"] == check.POINTWISE, found.message
    assert check.POINTWISE in found.message
    monkeypatch.setattr(check, "accumulates", lambda *a: True)   # were it a sum, the rule would pass it
    assert compiled.judge_op(compiled.run_op("nn.functional.gelu", "cpu", "float16", "forward")).status == Status.PASS
