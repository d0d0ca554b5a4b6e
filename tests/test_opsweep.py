"""The op sweep's classifier and isolation, against real stand-ins.

The ``meta`` device is a real backend with partial op coverage: ops without a meta kernel
raise NotImplementedError there, the rest run. An MPS fallback warning injected into one
op's run must come out as cpu-fallback naming that op. Crashes and hangs are real child
processes that abort, segfault or sleep.
"""
import copy
import warnings

import pytest
import torch

from harness.ops import declarations, fallback, opsweep
from harness.ops.declarations import op_table
from harness.core.isolate import Sandbox

FALLBACK_TEXT = ("The operator '{}' is not currently supported on the MPS backend and will fall back to run on "
                 "the CPU. This may have performance implications.")


def test_cases_cover_the_op_database_with_readable_ids():
    cases = opsweep.cases()
    ids = {c.id for c in cases}
    assert len(cases) > 4000 and len(ids) == len(cases)
    assert "softmax-float16-forward" in ids and "softmax-float32-backward" in ids
    assert {"softmax-float16-backward", "softmax-bfloat16-backward", "mm-bfloat16-backward"} <= ids  # how people train now
    assert not any(c.pass_ == "backward" and c.dtype not in opsweep.GRAD_DTYPES for c in cases)
    jit = [c for c in cases if c.name.startswith("jiterator")]
    assert jit and all(c.targets == ("cuda",) for c in jit)  # onlyCUDA ops never run elsewhere


@pytest.mark.parametrize("op_key,dtype", [("add", "float32"), ("mm", "float32"), ("softmax", "float16"),
                                          ("nn.functional.relu", "float32")])
def test_ops_with_meta_kernels_are_native_on_meta(op_key, dtype):
    assert opsweep.run_case(op_key, "meta", dtype, "forward").category == "native"


@pytest.mark.parametrize("op_key,dtype", [("argwhere", "float32"), ("equal", "float32")])
def test_ops_without_meta_kernels_are_unsupported_on_meta(op_key, dtype):
    result = opsweep.run_case(op_key, "meta", dtype, "forward")
    assert result.category == "unsupported", result
    assert result.error_type == "NotImplementedError"


def test_other_exceptions_are_errors_with_their_first_line():
    result = opsweep.run_case("allclose", "meta", "float32", "forward")  # data-dependent: .item() on meta
    assert result.category == "error"
    assert result.message == "RuntimeError: Tensor.item() cannot be called on meta tensors"


@pytest.mark.parametrize("raised, category", [
    (RuntimeError('"ndtri_cpu" not implemented for \'Half\''), "unsupported"),   # torch 2.6's missing dtype
    (NotImplementedError('"ndtri_cpu" not implemented for \'Half\''), "unsupported"),   # torch 2.11's
    (RuntimeError("The size of tensor a (3) must match the size of tensor b (4)"), "error"),
    (RuntimeError("not implemented for this reason"), "error")])
def test_a_kernel_without_the_dtype_is_unsupported_whichever_error_torch_raises(raised, category):
    def runs():
        yield True
        raise raised
    found = opsweep.classified("cpu", runs())
    assert (found.category, found.samples, found.error_type) == (category, 1, type(raised).__name__)


def test_meta_sweep_splits_native_and_unsupported():
    """Across a slice of the database, meta gives both classes and nothing is lost."""
    keys = sorted(op_table())[:80]
    cats = {k: opsweep.run_case(k, "meta", "float32", "forward").category
            for k in keys if "float32" in {str(d)[6:] for d in op_table()[k].supported_dtypes("cpu")}}
    assert {"native", "unsupported", "error"} <= set(cats.values())


@pytest.mark.parametrize("where, made_for", [("cuda", "cuda:0"), ("mps", "mps:0"), ("cpu", "cpu"),
                                              ("meta", "meta")])
def test_samples_are_made_for_the_device_string_pytorch_s_own_tests_pass(monkeypatch, where, made_for):
    """PyTorch's device-generic tests make OpInfo samples for "cuda:0" and "mps:0": a sample
    function's extra samples for device == "cuda" exactly (_softmax_backward_data's malformed
    float16 one) never run there, and must not run here. run_case asks for samples through
    sample_device: seen with a fake op that records what it was asked for."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    asked = []

    class Op:
        def sample_inputs(self, device, dtype, requires_grad=False):
            asked.append(device)
            return iter(())
    monkeypatch.setattr(opsweep, "op_table", lambda: {"fake": Op()})
    monkeypatch.setattr(opsweep.devices, "place", lambda target: target)
    monkeypatch.setattr(opsweep.devices, "synchronizer", lambda target: lambda: None)
    opsweep.run_case("fake", where, "float32", "forward")
    assert asked == [made_for] and opsweep.sample_device(where) == made_for


def test_an_injected_fallback_warning_is_cpu_fallback_naming_that_op(monkeypatch):
    op = op_table()["add"]
    real = op.op

    def add_that_falls_back(*args, **kwargs):
        warnings.warn(FALLBACK_TEXT.format("aten::add.out"), UserWarning)
        return real(*args, **kwargs)

    monkeypatch.setattr(op, "op", add_that_falls_back)
    result = opsweep.run_case("add", "cpu", "float32", "forward")
    assert result.category == "cpu-fallback" and result.fallback_ops == ("aten::add.out",)
    monkeypatch.undo()
    assert opsweep.run_case("add", "cpu", "float32", "forward").category == "native"  # order-independent


WARN_ONCE_SCRIPT = """
import warnings, torch
from harness.ops import fallback
boundaries, values = torch.arange(10.0), torch.rand(4, 3).t()  # non-contiguous values
def warned(run):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        run()
    return sum("non-contiguous" in str(x.message) for x in w)
plain = [warned(lambda: torch.searchsorted(boundaries, values)) for _ in range(2)]
captured = []
for _ in range(2):
    with fallback.capture() as cap:
        torch.searchsorted(boundaries, values)
    captured.append(sum("non-contiguous" in m for m in cap.other_warnings))
print(plain, captured, torch.is_warn_always_enabled())
"""


def test_capture_defeats_warn_once_so_order_does_not_matter():
    """torch.searchsorted warns about a non-contiguous input with TORCH_WARN_ONCE, the
    same C++ mechanism as the MPS fallback warning: without capture() the second call is
    silent, with it every call is seen, and warn-always is restored afterwards."""
    import subprocess
    import sys
    from tests.conftest import ROOT
    res = subprocess.run([sys.executable, "-c", WARN_ONCE_SCRIPT], cwd=ROOT, capture_output=True, text=True)
    assert res.stdout.strip().splitlines()[-1] == "[1, 0] [1, 1] False", res.stdout + res.stderr


def test_fallback_messages_name_their_ops_once_each():
    msgs = [FALLBACK_TEXT.format("aten::foo"), "unrelated", FALLBACK_TEXT.format("aten::bar.out"),
            FALLBACK_TEXT.format("aten::foo")]
    assert fallback.ops_named(msgs) == ["aten::foo", "aten::bar.out"]


def test_backward_runs_autograd_with_fixed_grad_outputs():
    result = opsweep.run_case("nn.functional.gelu", "cpu", "float32", "backward")
    assert result.category == "native" and result.samples > 0


@pytest.mark.parametrize("category,expected,status,disagree", [
    ("native", None, "pass", None),
    ("cpu-fallback", None, "pass", None),
    ("native", "xfail", "xpass", "unexpected pass"),
    ("unsupported", "xfail", "xfail", None),
    ("error", "skip", "xfail", None),
    ("unsupported", None, "fail", None),
    ("crash", "xfail", "crash", None),
    ("timeout", None, "timeout", None),
])
def test_judgement(category, expected, status, disagree):
    result = opsweep.OpRun(category, message="m", fallback_ops=("aten::x",) if category == "cpu-fallback" else ())
    j = opsweep.judge(result, expected, on_mps=True)
    assert (j.status, j.metrics["disagreement"]) == (status, disagree)
    assert j.metrics["pytorch_expects"] == (expected or "pass")
    assert "disagreement" not in opsweep.judge(result, expected).metrics   # PyTorch's expectations are MPS's


@pytest.mark.parametrize("category,failed_in,forward,on_mps,status", [
    ("error", "forward", "xfail", True, "xfail"),     # to(float64)'s backward fails where its forward does
    ("error", "forward", "skip", True, "xfail"),
    ("unsupported", "forward", "xfail", True, "xfail"),
    ("error", "backward", "xfail", True, "fail"),     # a forward that ran, then a broken backward: a finding
    ("error", "forward", None, True, "fail"),         # PyTorch expects the forward to pass: a finding
    ("error", "forward", "xfail", False, "fail"),     # PyTorch's expectations are MPS's
    ("native", None, "xfail", True, "pass"),          # a backward that runs is no unexpected pass of it
])
def test_a_backward_check_that_failed_in_its_forward_takes_the_forward_s_expectation(category, failed_in, forward,
                                                                                     on_mps, status):
    run = opsweep.OpRun(category, message="TypeError: no float64", failed_in=failed_in)
    j = opsweep.judge(run, None, on_mps=on_mps, forward_expected=forward)
    assert j.status == status, j
    if status == "xfail":
        assert j.message.startswith(f"PyTorch expects this op's forward to fail in this dtype ({forward})")
        assert j.metrics["pytorch_expects"] == f"{forward} (forward)" and j.metrics["disagreement"] is None


class _BrokenBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.abs()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("a broken backward")


def _failing(stage: str):
    """OpInfo's ``abs`` with an op that raises in ``stage`` ("forward" or "backward")."""
    op = copy.copy(op_table()["abs"])

    def forward_fails(x, *args, **kwargs):
        raise TypeError("a broken forward")
    op.op = forward_fails if stage == "forward" else _BrokenBackward.apply
    return op


def test_a_backward_check_says_where_it_failed(monkeypatch):
    """run_case names the stage a backward check failed in: the op forward (its sample made
    first) or autograd's backward; a forward check and a check that ran name none."""
    table = {"fails-forward": _failing("forward"), "fails-backward": _failing("backward"), **op_table()}
    monkeypatch.setattr(opsweep, "op_table", lambda: table)
    run = opsweep.run_case("fails-forward", "cpu", "float32", "backward")
    assert (run.category, run.failed_in, run.message) == ("error", "forward", "TypeError: a broken forward"), run
    assert opsweep.run_case("fails-forward", "cpu", "float32", "forward").failed_in is None
    run = opsweep.run_case("fails-backward", "cpu", "float32", "backward")
    assert (run.category, run.failed_in, run.message) == ("error", "backward", "RuntimeError: a broken backward"), run
    assert opsweep.run_case("fails-backward", "cpu", "float32", "forward").category == "native"
    assert opsweep.run_case("abs", "cpu", "float32", "backward").failed_in is None


def test_unexpected_failure_is_marked_where_pytorch_expects_a_pass():
    j = opsweep.judge(opsweep.OpRun("error", message="boom"), expected=None)
    assert j.status == "fail"
    assert declarations.disagreement(None, "error") == "unexpected failure"


def test_pytorch_expectations_are_read_from_the_installed_torch():
    ex = declarations.mps_expectations(op_table(), opsweep.OP_DTYPES)
    if not ex.available:
        pytest.skip(ex.note)
    assert len(ex) > 50, ex.source
    assert set(ex.table.values()) <= {"xfail", "skip"}
    assert {k[2] for k in ex.table} == {"forward", "backward"}
    assert not torch.backends.mps.is_available() or "MPS available" in ex.source  # the patch did not leak


# --------------------------------------------------------------------------- isolation

@pytest.fixture
def box():
    b = Sandbox(timeout=30)
    yield b
    b.close()


def test_sandbox_returns_values_and_survives_crashes(box):
    assert box.call("tests.sandbox_targets:double", 21).value == 42
    crashed = box.call("tests.sandbox_targets:aborts")
    assert crashed.kind == "crash" and "SIGABRT" in crashed.detail
    assert box.call("tests.sandbox_targets:double", 1).value == 2  # a fresh child took over
    segv = box.call("tests.sandbox_targets:segfaults")
    assert segv.kind == "crash" and "SIGSEGV" in segv.detail
    assert box.call("tests.sandbox_targets:double", 3).value == 6
    assert box.starts == 3  # one child per crash, and no more


def test_sandbox_cuts_a_hang(box):
    out = box.call("tests.sandbox_targets:hangs", timeout=1.5)
    assert out.kind == "timeout" and out.seconds >= 1.5   # it waited its limit, then cut (the target never returns)
    assert box.call("tests.sandbox_targets:double", 2).value == 4


def test_sandbox_reports_a_raising_function_in_one_line(box):
    out = box.call("tests.sandbox_targets:raises")
    assert out.kind == "raised" and out.detail == "ValueError: bad input"


def test_sandbox_child_inherits_the_fallback_setting(box, monkeypatch):
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")
    assert box.call("tests.sandbox_targets:env", "PYTORCH_ENABLE_MPS_FALLBACK").value == "1"


def test_case_table_cache_is_rebuilt_when_corrupt(tmp_path, monkeypatch):
    monkeypatch.setenv("MPS_COMPAT_CACHE", str(tmp_path))
    first = opsweep.cases()
    cached = list((tmp_path / "opcases").glob("*.json"))
    assert len(cached) == 1 and opsweep.cases() == first
    cached[0].write_text('[["add", "", "float32"')  # truncated
    assert opsweep.cases() == first == opsweep.build_cases()


def test_threads_are_split_between_xdist_workers(monkeypatch):
    from harness.core.isolate import threads_per_worker
    assert threads_per_worker(1, cores=8) is None and threads_per_worker(2, cores=2) == 1
    assert threads_per_worker(3, cores=8) == 2 and threads_per_worker(4, cores=2) == 1
    box = Sandbox(threads=1)
    try:
        assert box.call("torch:get_num_threads").value == 1
    finally:
        box.close()


@pytest.mark.parametrize("error,none_here", [
    (NotImplementedError("anything"), True),
    (RuntimeError("\"ndtri_cpu\" not implemented for 'Half'"), True),                 # torch 2.6, 2.7
    (RuntimeError("\"exp_vml_cpu\" not implemented for 'Float8_e4m3fn'"), True),
    (RuntimeError("MKL FFT doesn't support tensors of type: Half"), True),            # until pytorch#192349
    (RuntimeError("The size of tensor a (3) must match the size of tensor b (4)"), False),
    ("RuntimeError: MKL FFT doesn't support tensors of type: BFloat16", True),       # a record's line
    ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)", False),
])
def test_a_missing_dtype_kernel_is_no_kernel_whichever_class_an_older_torch_raised(error, none_here):
    assert fallback.no_kernel(error) is none_here


# --------------------------------------------------------------------------- whose fallback a check reports

def _warning_op():
    """OpInfo's ``abs`` whose sample function warns MPS's fallback for aten::_linalg_svd before
    each sample, as 27 linalg sample functions call torch.linalg.svd on the device (MPS runs it on
    the CPU), and whose op runs as it is."""
    op = copy.copy(op_table()["abs"])
    made = op.sample_inputs

    def sample_inputs(device, dtype, requires_grad=False, **kwargs):
        for sample in made(device, dtype, requires_grad=requires_grad, **kwargs):
            warnings.warn(FALLBACK_TEXT.format("aten::_linalg_svd"), UserWarning)
            yield sample
    op.sample_inputs = sample_inputs
    return op


@pytest.mark.parametrize("pass_", ["forward", "backward"])
def test_a_fallback_while_the_samples_are_made_is_not_the_op_s(monkeypatch, pass_):
    """The sample function's fallbacks are OpInfo's test code, not the op: the check reads
    native and keeps them apart (fallback_by_phase["samples"]). Before, the samples were made
    inside the check's capture and linalg.inv read "cpu-fallback: aten::_linalg_svd"."""
    table = {"svd-samples": _warning_op(), **op_table()}
    monkeypatch.setattr(opsweep, "op_table", lambda: table)
    run = opsweep.run_case("svd-samples", "cpu", "float32", pass_)
    assert (run.category, run.fallback_ops) == ("native", ()), run
    assert run.samples > 0 and run.fallback_by_phase["samples"] == ["aten::_linalg_svd"]
    verdict = opsweep.judge(run, None, on_mps=True)
    assert (verdict.status, verdict.category, verdict.message) == ("pass", "native", "")
    assert verdict.metrics["fallback_ops"] == [] and verdict.metrics["fallback_by_phase"] == {
        "samples": ["aten::_linalg_svd"]}


class _FallsBackBothWays(torch.autograd.Function):
    """An op whose forward warns MPS's fallback for aten::foo and whose backward warns it for
    aten::foo_backward (``backward_falls_back``)."""
    backward_falls_back = True

    @staticmethod
    def forward(ctx, x):
        warnings.warn(FALLBACK_TEXT.format("aten::foo"), UserWarning)
        return x * 2

    @classmethod
    def backward(cls, ctx, grad):
        if cls.backward_falls_back:
            warnings.warn(FALLBACK_TEXT.format("aten::foo_backward"), UserWarning)
        return grad * 2


class _FallsBackForward(_FallsBackBothWays):
    backward_falls_back = False


def test_each_pass_names_only_the_fallbacks_of_its_own_phase(monkeypatch):
    """A forward check names what its forward fell back on; a backward check what its backward
    did, the forward's kept apart (fallback_by_phase) and said in a note; a backward that is
    native reads native. Before, a backward check named the forward's fallbacks as its own."""
    both, forward_only = copy.copy(op_table()["abs"]), copy.copy(op_table()["abs"])
    both.op, forward_only.op = _FallsBackBothWays.apply, _FallsBackForward.apply
    table = {"both": both, "forward-only": forward_only, **op_table()}
    monkeypatch.setattr(opsweep, "op_table", lambda: table)

    forward = opsweep.run_case("both", "cpu", "float32", "forward")
    assert (forward.category, forward.fallback_ops) == ("cpu-fallback", ("aten::foo",)), forward
    backward = opsweep.run_case("both", "cpu", "float32", "backward")
    assert (backward.category, backward.fallback_ops) == ("cpu-fallback", ("aten::foo_backward",)), backward
    assert backward.fallback_by_phase == {"samples": [], "forward": ["aten::foo"], "backward": ["aten::foo_backward"]}
    said = opsweep.judge(backward, None, on_mps=True)
    assert said.metrics["fallback_ops"] == ["aten::foo_backward"]
    assert said.message == ("fell back to the CPU: aten::foo_backward; its forward fell back to the CPU (aten::foo), "
                            "which the forward check counts")

    native_backward = opsweep.run_case("forward-only", "cpu", "float32", "backward")
    assert (native_backward.category, native_backward.fallback_ops) == ("native", ()), native_backward
    said = opsweep.judge(native_backward, None, on_mps=True)
    assert (said.status, said.category) == ("pass", "native")
    assert said.metrics["fallback_by_phase"] == {"forward": ["aten::foo"]}


def test_a_fallback_outside_every_phase_still_counts():
    """A warning given outside the phases a run captures (no phase owns it) is the check's:
    nothing is dropped."""
    phases = fallback.Phases("x")

    def runs():
        with phases.phase(opsweep.FORWARD):
            pass
        warnings.warn(FALLBACK_TEXT.format("aten::stray"), UserWarning)
        yield True
    run = opsweep.classified("cpu", runs(), phases=phases, counted=opsweep.FORWARD)
    assert (run.category, run.fallback_ops) == ("cpu-fallback", ("aten::stray",))


def test_a_phase_that_raises_keeps_what_it_saw():
    """capture() reads its warnings when its block raises too: a backward check that failed
    still says what its phases fell back on."""
    phases = fallback.Phases()
    with pytest.raises(RuntimeError):
        with phases.phase("forward"):
            warnings.warn(FALLBACK_TEXT.format("aten::foo"), UserWarning)
            raise RuntimeError("broke")
    assert phases.of("forward") == ["aten::foo"]


# --------------------------------------------------------------------------- MPS kernels' own fallbacks

# The texts of MPS kernels that send their operands to the CPU themselves, as PyTorch's sources
# write them (harness/ops/fallback.py says where), and the name each is recorded under for a
# check of op "the.check" (and with no op given).
IN_KERNEL_TEXTS = [
    ("MPS: nonzero op is not supported for complex datatypes. Falling back on CPU. This may have performance "
     "implications.", "aten::nonzero (in-kernel)", "aten::nonzero (in-kernel)"),
    ("MPS: nonzero op is not supported for complex datatypes Falling back on CPU. This may have performance "
     "implications.", "aten::nonzero (in-kernel)", "aten::nonzero (in-kernel)"),
    ("MPS: nonzero op is not natively supported for the provided input on MacOS14Falling back on CPU. This may have "
     "performance implications.See github.com/pytorch/pytorch/issues/122916 for further info",
     "aten::nonzero (in-kernel)", "aten::nonzero (in-kernel)"),
    ("MPS: passing divisor to Average Pooling op with int64 input is not supported on MPS backend. Falling back on "
     "CPU. This may have performance implications. (Triggered internally at /Users/runner/work/pytorch/aten/src/ATen/"
     "native/mps/operations/Pooling.mm:322.)", "the.check (in-kernel)",
     "passing divisor to Average Pooling op with int64 input is not supported on MPS backend (in-kernel)"),
    ("MPS: median op is supported natively starting from macOS 13.0. Falling back on CPU. This may have performance "
     "implications.", "aten::median (in-kernel)", "aten::median (in-kernel)"),
    ("MPS: grid_sampler_2d op is supported natively starting from macOS 13.2. Falling back on CPU. This may have "
     "performance implications.", "aten::grid_sampler_2d (in-kernel)", "aten::grid_sampler_2d (in-kernel)"),
    ("MPS: FFT operations are only supported natively starting from macOS 14.0. Falling back on CPU. This may have "
     "performance implications.", "the.check (in-kernel)",
     "FFT operations are only supported natively starting from macOS 14.0 (in-kernel)"),
]
NOT_A_FALLBACK = [
    # runs on the device, through other ops (Pad.mm): no CPU in it
    "MPS: The constant padding of more than 3 dimensions is not currently supported natively. It uses View Ops "
    "default implementation to run. This may have performance implications.",
    "Falling back on CPU for this reason",                 # not MPS's
    "torch.meshgrid: in an upcoming release, it will be required to pass the indexing argument.",
]


@pytest.mark.parametrize("text, named, unnamed", IN_KERNEL_TEXTS, ids=lambda v: v[:40] if isinstance(v, str) else v)
def test_an_mps_kernel_s_own_fallback_is_cpu_fallback_named_in_kernel(text, named, unnamed):
    """MPS kernels that run their operands on the CPU themselves warn in their own words, not
    MPSFallback.mm's: read as cpu-fallback, named by the op the message names, else the check's
    own op, else what the message says, marked in-kernel. Before, they landed among the other
    warnings and the check read native."""
    def runs():
        warnings.warn(text, UserWarning)
        yield True
    found = opsweep.classified("cpu", runs(), op="the.check")
    assert (found.category, found.fallback_ops) == ("cpu-fallback", (named,)), found
    assert fallback.ops_named([text]) == [unnamed] and fallback.is_in_kernel(named)
    with fallback.capture("the.check") as cap:
        warnings.warn(text, UserWarning)
    assert cap.ops == [named] and cap.other_warnings == []


@pytest.mark.parametrize("text", NOT_A_FALLBACK)
def test_other_warnings_are_no_fallback(text):
    def runs():
        warnings.warn(text, UserWarning)
        yield True
    found = opsweep.classified("cpu", runs(), op="the.check")
    assert (found.category, found.fallback_ops) == ("native", ()), found
    assert fallback.ops_named([text]) == [] and not fallback.is_fallback(text)
