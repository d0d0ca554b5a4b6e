"""torch.compile against eager: does compiling a training step change its numbers?

Users meet torch.compile bugs on accelerators (on MPS: pytorch#150121, the feature tracker;
pytorch#161905, a compiled model that fails in backward). This family runs one computation
three ways: eagerly on the target, through ``torch.compile`` (the default backend, inductor)
on the target, and eagerly in float64 on the CPU; and judges the compiled result by the
parity rules.

  ops     ``OPS``, the ops a transformer's training step lives on, each on up to
          MAX_SAMPLES of OpInfo's samples (the largest; samples drawn from the RNG set
          aside), forward and backward, in float32, float16 and bfloat16 where OpInfo says
          the target supports the dtype (harness.parity.ops.check's case table)
  models  harness.core.models.MODELS: the output, the loss and every parameter's gradient
          of one forward + backward step in float32 (as harness.parity.models.runs prepares
          the step), the compiled model built with ``torch.compile(model)``

**The judge: as accurate as eager.** The compiled result is measured against float64 with
eager's result as the yardstick (harness.parity.numerics.accuracy.compare_accuracy, the rule
an accelerator meets against the CPU): each element meets the tolerance table's rules
against float64, or is within ACCURACY_FACTOR x eager's own error + ACCURACY_ULPS units in
the last place. Why not agreement with eager under the tolerance table: inductor fuses ops,
sums in another order and keeps float16 / bfloat16 intermediates in float32, so a correct
compiled kernel can sit further from eager than eager sits from float64 while being nearer
float64 itself; a same-dtype agreement rule fails it for being more accurate (the project's
first H100 run failed 356 checks on such a rule, about fifteen of them real). Agreement
with eager is recorded (``vs_eager_*``), not judged. Models: harness.parity.models.judge's
measure_accuracy, the same rule with the model tolerances (outputs and loss elementwise,
gradients normwise per parameter).

**A failure names its cause** (``CAUSES``), from reruns of the failing sample: the compiled
function a second time (other bits that pass: nondeterministic), compiled with ``backend="eager"``
(dynamo's graph run by eager kernels: graph capture changed the computation), with
``backend="aot_eager"`` (AOTAutograd's decompositions, no inductor), and for float16 /
bfloat16 inductor with ``emulate_precision_casts`` (it rounds intermediates as eager does);
the first rerun that explains the miss names it, else inductor's generated kernel is the
cause. Each cause carries the switch a user flips. Two differences need no rerun: a model
parameter the loss does not use gets no gradient eagerly and an all-zero one compiled
(``unused-zero-grad``; AdamW's weight decay then moves it under compile only), and NaN or
inf where float64 has a number that eager gives at the same elements (``eager-non-finite``:
the computation's in that precision on this device, which compiling did not cause; it
still fails, as a NaN always does, and the op or model parity check has it too). The
records count such elements (``non_finite``) and eager's share of them
(``non_finite_in_eager``); where some are the compiled function's own, a rerun misses when
it gives NaN or inf that eager does not, so eager's own NaN never names a compiler stage.

**A compile failure is its own category** (Category.COMPILE_FAILED): eager computes, the
compiled function raises. The record's reason is the error's first line (a dynamo
``BackendCompilerFailed`` with the backend's own error joined to it) and the stage that
fails (graph capture, decompositions or inductor), found by compiling again with the
lighter backends.

**Where the target cannot compile** (no torch.compile in this torch, a Python that dynamo
does not support, torch < 2.7 on MPS, no C++ compiler for inductor's CPU kernels, no Triton
for CUDA), every check is a skip whose reason says what to install or upgrade
(``unsupported``). The emulated Mac (an emulating stand-in, ``targets``) is held to MPS's
gates and then skips too: inductor would generate CPU code for it, not Metal kernels, and
compiled kernels run beneath the dispatcher where the emulation's rules live, so nothing of
MPS would be checked.

**Order does not matter.** Each compiled sample starts from ``torch._dynamo.reset()``
(dynamo's caches and guards emptied, so no recompile limit or earlier graph is in play),
and inductor writes its on-disk caches to a directory of this pytest run (the
``cache_dir`` argument, a pytest temporary directory), so no kernel compiled by an earlier
run, another torch or an injected fault is reused; within a run a cache hit is keyed by
the graph's content and gives the same code a fresh compile would. An op's graph (one or two
kernels) is compiled with ``compile_threads=1``: inductor's pool of compile workers only adds
its start-up there (half the time of an op check on a 2-core CPU); the code is the same.

Everything that needs torch runs in the sandbox child (``run_op``, ``run_model``); the
judges (``judge_op``, ``judge_model``) take the plain dataclasses back in the pytest
process. torch is imported where it is used, so collecting the suite does not load it.
"""
from __future__ import annotations

import copy
import dataclasses
import os
import time

from harness.core import errors, models
from harness.core.cases import DtypePass
from harness.core.records import Category, Status, Verdict, error_line, with_cause
from harness.env import devices
from harness.parity.numerics import causes, tolerances
from harness.parity.numerics.tolerances import Tolerance

PREFIX = "compiled."          # parity/compiled.<op or model>/<dtype>/<pass>
TARGETS = devices.TARGETS     # real devices (and emulating stand-ins: ``targets``); a stand-in perturbs eager kernels
DTYPES = ("float32", "float16", "bfloat16")
MAX_SAMPLES = 2               # per op x dtype x pass: each sample is a compile (1 to 2 s on a 2-core CPU)
MODEL_VARIANT = "float32/forward-backward"
# A model compiles forward and backward graphs of a few hundred ops: 20 to 100 s a model on a
# 2-core CPU (MiniLM's six layers the longest), more when a failure is rerun to name its cause:
# past the default check timeout.
MODEL_TIMEOUT_S = 600.0
MIN_TORCH_MPS = (2, 7)        # inductor's Metal backend (a prototype in 2.7)

# The ops: what a transformer's forward and backward are made of (projections, attention,
# norms, activations, the loss, embeddings, reductions and index ops).
OPS = (
    "nn.functional.linear", "matmul", "bmm", "addmm", "baddbmm",
    "softmax", "log_softmax", "nn.functional.layer_norm", "nn.functional.rms_norm",
    "nn.functional.gelu", "nn.functional.silu",
    "nn.functional.scaled_dot_product_attention",
    "nn.functional.cross_entropy", "nn.functional.embedding",
    "cumsum", "sum", "mean", "var", "topk", "gather", "index_select", "masked_fill",
)
# OpInfo calls a few ops through a wrapper of its own that dynamo does not trace (sdpa's
# resets the RNG seed around the call): compiled as it is, the wrapper runs eagerly and
# nothing is compiled. These ops are called as a user calls them, with the same arguments.
CALLS = {
    "nn.functional.scaled_dot_product_attention": ("torch.nn.functional", "scaled_dot_product_attention"),
}

# Why a compiled result misses, in the order the reruns ask (see the module docstring).
REPORT = "report it to PyTorch with this sample (the record's worst_sample and inputs)"
EAGERLY = ("run this function or model eagerly (drop torch.compile, or wrap the part in "
           "torch.compiler.disable)")
CAUSES = {c.name: c for c in (
    causes.Cause("nondeterministic", "the compiled function gives other bits when run again on the same inputs, "
                 "and the second run is within the rules: the first run's order was an unlucky one",
                 {"*": "torch.use_deterministic_algorithms(True) (inductor honours it; CUDA also needs "
                       "CUBLAS_WORKSPACE_CONFIG=:4096:8), or " + EAGERLY}),
    causes.Cause("dynamo-capture", "dynamo's captured graph computes otherwise: compiled with backend='eager' "
                 "(the graph run by eager kernels) it misses too",
                 {"*": f"{EAGERLY}; {REPORT}"}),
    causes.Cause("aot-decomposition", "AOTAutograd's decompositions compute otherwise: compiled with "
                 "backend='aot_eager' (no inductor) it misses too, with backend='eager' it does not",
                 {"*": f"{EAGERLY}; {REPORT}"}),
    causes.Cause("inductor-precision", "inductor keeps {dtype} intermediates in another precision than eager: "
                 "with torch._inductor.config.emulate_precision_casts = True it meets the rule",
                 {"*": "torch._inductor.config.emulate_precision_casts = True, or compute this part in float32"}),
    causes.Cause("unused-zero-grad", "the compiled backward gives an all-zero gradient, where eager gives none, to "
                 "parameters the loss does not use (AOTAutograd materialises the gradients of unused graph outputs as "
                 "zeros: pytorch#131794, pytorch#186355); an optimizer then updates them where eager leaves them alone "
                 "(AdamW's weight decay shrinks them every step)",
                 {"*": "freeze what the loss does not use (requires_grad_(False)) or leave it out of the model (a BERT "
                       "encoder without its pooler: add_pooling_layer=False), or run the model eagerly"}),
    causes.Cause("eager-non-finite", "eager gives NaN or inf at the same elements, in {dtype} on this device: the "
                 "computation's own in that precision, not something compiling did (the op or model parity check "
                 "records it on eager)",
                 causes.CAUSES["non-finite"].switch),
    causes.Cause("inductor-kernel", "inductor's generated kernel computes otherwise: compiled with "
                 "backend='aot_eager' (the same graph, eager kernels) it meets the rule",
                 {"*": f"torch.compile(..., backend='aot_eager') keeps graph capture without inductor's kernels, "
                       f"or {EAGERLY}; {REPORT}"}),
)}
COMPILE_STAGES = {   # where a compile error comes from: the lightest backend that already fails
    "eager": "graph capture (dynamo: it fails with backend='eager' too)",
    "aot_eager": "AOTAutograd (it fails with backend='aot_eager' too, not with backend='eager')",
    "inductor": "inductor (backend='aot_eager' compiles it)",
}


# --------------------------------------------------------------------------- the cases

@dataclasses.dataclass(frozen=True)
class CompiledOp(DtypePass):
    """One op x dtype x pass compiled: ``parity/compiled.<op>/<dtype>/<pass>``."""
    op_key: str
    dtype: str
    pass_: str
    targets: tuple[str, ...]

    @property
    def subject(self) -> str:
        return PREFIX + self.op_key


@dataclasses.dataclass(frozen=True)
class CompiledModel:
    """One model's training step compiled: ``parity/compiled.<model>/float32/forward-backward``."""
    model: str
    targets: tuple[str, ...] = TARGETS

    @property
    def subject(self) -> str:
        return PREFIX + self.model

    @property
    def variant(self) -> str:
        return MODEL_VARIANT

    @property
    def id(self) -> str:
        return f"{self.subject}-{MODEL_VARIANT.replace('/', '-')}"


def op_cases() -> list[CompiledOp]:
    """OPS x DTYPES x pass, on the real targets whose dtype support OpInfo declares (op
    parity's table, read from its cache: collecting loads no torch)."""
    from harness.parity.ops import check
    wanted = set(OPS)
    out = []
    every = targets()
    for c in check.cases(TARGETS):
        if c.op_key in wanted and c.dtype in DTYPES:
            targets_ = tuple(t for t in c.targets if t in every)
            if targets_:
                out.append(CompiledOp(c.op_key, c.dtype, c.pass_, targets_))
    order = {key: i for i, key in enumerate(OPS)}
    return sorted(out, key=lambda c: (order[c.op_key], DTYPES.index(c.dtype), c.pass_ != "forward"))


def model_cases() -> list[CompiledModel]:
    return [CompiledModel(name, targets()) for name in models.MODELS]


def targets() -> tuple[str, ...]:
    """The real targets and the registered emulating stand-ins (the emulated Mac: held to
    MPS's gates, then skipped with the reason, ``unsupported``); a plain stand-in perturbs
    eager kernels, not compiled ones, and has no compiled checks."""
    return TARGETS + tuple(name for name in devices.STAND_INS if devices.is_emulated(name))


# --------------------------------------------------------------------------- can this target compile?

def _torch_version() -> tuple[int, int]:
    import torch
    from packaging.version import Version
    v = Version(torch.__version__.split("+")[0])
    return v.major, v.minor


def unsupported(target: str) -> str | None:
    """Why ``target`` cannot compile with this torch and machine, in words a user can act on;
    None when it can. Static checks only: a compile that fails for another reason is the
    check's own result (compile-failed), not a skip."""
    import torch
    version = ".".join(map(str, _torch_version()))
    if not hasattr(torch, "compile"):
        return f"torch.compile arrived in torch 2.0 and this is torch {version}: upgrade torch to compile"
    from torch._dynamo import eval_frame
    try:
        eval_frame.check_if_dynamo_supported()
    except Exception as exc:  # the Python version or build: dynamo says which
        return f"torch.compile cannot run here: {error_line(exc)}; use a Python this torch supports, or upgrade torch"
    kind = devices.rules_of(target)
    if kind == "mps" and _torch_version() < MIN_TORCH_MPS:
        return (f"torch.compile generates Metal kernels for MPS from torch {'.'.join(map(str, MIN_TORCH_MPS))} "
                f"(a prototype there) and this is torch {version}: upgrade torch to compile for MPS")
    if devices.is_emulated(target):
        where = "a Mac" if kind == "mps" else f"a real {kind} device"
        return (f"{target} emulates {kind} on this CPU at the dispatcher, and torch.compile would generate CPU code "
                f"for it, not {kind}'s kernels: nothing of {kind} would be checked; run -m compile on {where}")
    if kind == "cpu":
        found = _cpp_compiler()
        if found:
            return found
    if kind == "cuda":
        try:
            from torch.utils._triton import has_triton
            triton = has_triton()
        except ImportError:
            import importlib.util
            triton = importlib.util.find_spec("triton") is not None
        if not triton:
            return ("torch.compile generates CUDA kernels with Triton, which is missing or does not support this "
                    "GPU: pip install triton (torch's Linux CUDA wheels bring the matching version), on a GPU of "
                    "compute capability 7.0 or newer")
    return None


def _cpp_compiler() -> str | None:
    """Why inductor finds no C++ compiler for CPU kernels, or None. Inductor's own search
    (torch._inductor.cpp_builder.get_cpp_compiler: $CXX, else g++ / clang++) where this torch
    has it, else the same names on PATH."""
    import shutil
    import sys
    try:
        from torch._inductor import cpp_builder
        search = cpp_builder.get_cpp_compiler
    except (ImportError, AttributeError):
        search = None
    name = os.environ.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    if search is not None:
        try:
            search()
            return None
        except Exception as exc:
            why = error_line(exc)
    elif shutil.which(name):
        return None
    else:
        why = f"{name} is not on PATH"
    fix = {"darwin": "xcode-select --install", "win32": "install Visual Studio's C++ build tools and run from its "
           "developer prompt"}.get(sys.platform, "apt install g++ (Debian, Ubuntu) or dnf install gcc-c++ (Fedora)")
    return (f"torch.compile builds CPU kernels with a C++ compiler and finds none ({why}): {fix}, or point CXX "
            f"at one")


# --------------------------------------------------------------------------- in the child: setting up

def prepare(cache_dir: str | None) -> None:
    """Inductor's on-disk caches in this run's ``cache_dir`` (see the module docstring); set
    before the first compile of the child and kept for the run."""
    if cache_dir and os.environ.get("TORCHINDUCTOR_CACHE_DIR") != cache_dir:
        os.makedirs(cache_dir, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        try:
            from torch._inductor.utils import clear_caches
            clear_caches()   # in-memory caches that point into the previous directory
        except (ImportError, AttributeError):
            pass


class _Fresh:
    """Compiling from a clean slate: dynamo's caches reset, its counters cleared, errors
    raised (never suppressed into a silent eager run), and the graphs dynamo captured and
    the graph breaks it took counted on the way out. ``inductor``: inductor settings for
    the block (torch._inductor.config.patch)."""

    def __init__(self, **inductor):
        self.inductor = inductor

    def __enter__(self):
        import torch._dynamo
        import torch._inductor.config
        from torch._dynamo.utils import counters
        torch._dynamo.reset()
        counters.clear()
        self._patches = [torch._dynamo.config.patch(suppress_errors=False)]
        if self.inductor:
            self._patches.append(torch._inductor.config.patch(**self.inductor))
        for patch in self._patches:
            patch.__enter__()
        self.graphs, self.breaks = 0, []
        return self

    def __exit__(self, *exc):
        from torch._dynamo.utils import counters
        for patch in reversed(self._patches):
            patch.__exit__(*exc)
        self.graphs = int(counters["stats"].get("unique_graphs", 0))
        self.breaks = [" ".join(str(reason).split())[:160] for reason in counters["graph_break"]]
        return False


def compile_error_line(exc: BaseException) -> str:
    """A compile error in one line: its first line, and the backend's own error where dynamo
    wraps one (``BackendCompilerFailed: backend='inductor' raised:`` says nothing alone)."""
    line = error_line(exc)
    inner = getattr(exc, "inner_exception", None)
    if isinstance(inner, BaseException):
        line = f"{line.rstrip(':')}: {error_line(inner)}" if line.endswith(":") else f"{line} ({error_line(inner)})"
    return line[:400]


def _compiled(fn, backend: str | None = None):
    import torch
    return torch.compile(fn) if backend is None else torch.compile(fn, backend=backend)


# --------------------------------------------------------------------------- in the child: an op

@dataclasses.dataclass
class CompiledOpRun:
    """What compiling one op x dtype x pass on a target gave (``run_op``), for ``judge_op``.

    ``worst`` is the deciding comparison (accuracy.compare_accuracy's fields, with ``sample``
    and, on a miss, the cause's fields): the first sample that misses, else the one with the
    largest margin. ``vs_eager`` (compiled against eager at the tolerance), ``eager_ref``
    and ``compiled_ref`` (each side against float64) are recorded, not judged."""
    target: str
    tolerance: Tolerance
    unsupported: str | None = None       # the target cannot compile: why (a skip)
    samples: int = 0                     # OpInfo's samples of the case
    chosen: list = dataclasses.field(default_factory=list)   # their indices, as compiled
    inputs: list = dataclasses.field(default_factory=list)   # a digest per chosen sample (samples.fingerprint)
    compared: int = 0
    random: int = 0                      # set aside while choosing: the output is drawn from the RNG
    no_reference: int = 0                # no float64 kernel: judged against eager at the tolerance
    not_compiled: int = 0                # dynamo captured no graph: the sample ran eagerly
    graphs: int = 0
    graph_breaks: list = dataclasses.field(default_factory=list)
    worst: dict | None = None
    vs_eager: dict | None = None
    eager_ref: dict | None = None
    compiled_ref: dict | None = None
    eager_error: str | None = None       # eager itself fails: nothing to compare
    compile_error: str | None = None     # eager computes, the compiled function raises
    compile_stage: str | None = None     # the lightest backend that fails too (COMPILE_STAGES)
    error_sample: int | None = None
    seconds: float = 0.0


class _Call:
    """The op as ``samples.evaluate`` calls it (``op(input, *args, **kwargs)``, ``op.name``):
    OpInfo's callable, the plain function (CALLS), or either compiled."""

    def __init__(self, name: str, fn):
        self.name, self._fn = name, fn

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


def _plain_call(op, op_key: str):
    if op_key in CALLS:
        import importlib
        module, name = CALLS[op_key]
        return getattr(importlib.import_module(module), name)
    return op


def _elements(sample) -> int:
    import torch
    from torch.utils import _pytree
    leaves = _pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return sum(t.numel() for t in leaves if isinstance(t, torch.Tensor))


def choose_samples(op, call, dt, pass_: str, run: CompiledOpRun) -> list[tuple[int, object]]:
    """Up to MAX_SAMPLES of OpInfo's samples (made on the CPU from seed 0): the ones with
    the most input elements, OpInfo's order among equals; empty ones, ones with nothing to
    differentiate (backward) and ones whose output is drawn from the RNG are passed over."""
    import torch

    from harness.parity.ops import check
    from harness.parity.ops.samples import evaluate
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dt, requires_grad=pass_ == "backward"))
    run.samples = len(samples)
    order = sorted(range(len(samples)), key=lambda i: (-_elements(samples[i]), i))
    chosen = []
    for i in order:
        if len(chosen) == MAX_SAMPLES:
            break
        sample = samples[i]
        if _elements(sample) == 0:
            continue
        try:
            first = evaluate(call, sample, pass_, 0, None)
        except Exception:  # a sample the CPU cannot run says nothing here (the op parity check has it)
            continue
        if first is None:
            continue
        if check.random_output(call, sample, pass_, first):
            run.random += 1
            continue
        chosen.append((i, sample))
    return chosen


def run_op(op_key: str, target: str, dtype: str, pass_: str, cache_dir: str | None = None) -> CompiledOpRun:
    """Compile one op x dtype x pass on ``target`` and compare, sample by sample, with eager
    there and float64 on the CPU; the first sample that misses decides (the rest are not run)."""
    run = CompiledOpRun(target, tolerances.tolerance(op_key, dtype))
    run.unsupported = unsupported(target)
    if run.unsupported:
        return run
    prepare(cache_dir)
    import torch

    from harness.ops import declarations
    from harness.parity.ops.samples import fingerprint
    op = declarations.op_table()[op_key]
    call = _Call(op.name, _plain_call(op, op_key))
    dt = getattr(torch, dtype)
    started = time.perf_counter()
    for index, sample in choose_samples(op, call, dt, pass_, run):
        run.chosen.append(index)
        run.inputs.append(fingerprint(sample))
        found = _op_sample(call, sample, index, target, dt, pass_, run)
        if run.eager_error or run.compile_error or (found is not None and not found["ok"]):
            break
    run.seconds = round(time.perf_counter() - started, 3)
    return run


def _run(fn, sample, device: str, dt, pass_: str):
    """``fn`` (the op, eager or compiled) on the sample moved to ``device``: the output, or
    the inputs' gradients, on the CPU."""
    from harness.parity.ops.samples import convert, evaluate
    out = evaluate(fn, convert(sample, dt, dt, device), pass_, 0, None)
    devices.synchronizer(device)()
    return out


def _compile_and_run(call, sample, device: str, dt, pass_: str, backend: str | None = None, **inductor):
    """The sample through a freshly compiled op (inductor, or ``backend``): (result, what
    dynamo captured, the compiled op, to run again without compiling). Inductor compiles
    an op's graph (one or two kernels) in this process: a pool of compile workers would
    only add its start-up (``compile_threads=1``; the generated code is the same)."""
    with _Fresh(**({"compile_threads": 1, **inductor} if backend is None else {})) as fresh:
        fn = _Call(call.name, _compiled(call, backend))
        out = _run(fn, sample, device, dt, pass_)
    return out, fresh, fn


def _op_sample(call, sample, index: int, target: str, dt, pass_: str, run: CompiledOpRun) -> dict | None:
    """One sample: eager, compiled, float64; the comparison, or None when the sample says
    nothing (it failed eagerly, failed to compile, or nothing was compiled)."""
    import torch

    from harness.parity.numerics import accuracy, outputs
    from harness.parity.ops.check import accumulates, elementwise, withheld, worse
    from harness.parity.ops.samples import TRIALS, wide_reference
    tol = run.tolerance
    try:
        eager = _run(call, sample, target, dt, pass_)
    except Exception as exc:
        run.eager_error, run.error_sample = error_line(exc), index
        return None
    try:
        got, fresh, fn = _compile_and_run(call, sample, target, dt, pass_)
    except Exception as exc:
        run.compile_error, run.error_sample = compile_error_line(exc), index
        run.compile_stage = _failing_stage(call, sample, target, dt, pass_)
        return None
    run.graphs += fresh.graphs
    run.graph_breaks = list(dict.fromkeys([*run.graph_breaks, *fresh.breaks]))[:5]
    if fresh.graphs == 0:
        run.not_compiled += 1
        return None
    wide = torch.complex128 if dt.is_complex else torch.float64
    try:
        ref = wide_reference(call, sample, dt, wide, pass_, like=eager)
    except Exception:  # no float64 kernel
        ref = None
        run.no_reference += 1

    def settled(result):  # gradients among ties in a canonical order (harness.parity.numerics.outputs)
        return outputs.canonical_grad(call.name, sample, result) if pass_ == "backward" else result

    def prepared(result):  # and index outputs that only break ties otherwise, settled to eager's
        if pass_ == "forward":
            return outputs.settle_ties(call.name, sample, result, eager)[0]
        return settled(result)
    eager_s, got_s = settled(eager), prepared(got)
    ref_s = prepared(ref) if ref is not None else None
    slack = None

    summing = []   # does the op's computation sum anything (check.accumulates), asked where it matters

    def sums() -> bool:
        if not summing:
            summing.append(accumulates(call, sample, pass_))
        return summing[0]

    def judged(result, yard=None) -> dict:
        yard = eager_s if yard is None else yard
        if ref_s is None:
            return accuracy.compare(result, yard, tol, check_dtype=True, yardstick="eager")

        def compared(normwise: bool) -> dict:
            return in_eager_terms(accuracy.compare_accuracy(result, yard, ref_s, tol, dt, tolerances.ACCURACY_FACTOR,
                                                            tolerances.ACCURACY_ULPS, slack=slack, normwise=normwise,
                                                            yardstick="eager"))
        found = compared(True)
        return elementwise(compared(False)) if withheld(found, sums) else found

    def besides_eager_nan(result, found: dict) -> dict | None:
        """``result``'s comparison once eager's own NaN are set aside (``mended``), where
        ``found`` missed by NaN that eager gives at every element: None when nothing else is
        out of the rule, else that comparison (its reason says what)."""
        if not eager_shares_every_nan(found):
            return found
        again = judged(*mended(result, eager_s, ref_s))
        return None if again["ok"] else again

    def own_miss(result) -> bool:   # what a rerun is asked: out of the rule, eager's own NaN aside
        found = judged(result)
        return not found["ok"] and besides_eager_nan(result, found) is not None
    found = judged(got_s)
    if not found["ok"] and ref_s is not None:  # a rounding-sized move of the inputs may explain it
        slack = settled(accuracy.slack_of(ref, [wide_reference(call, sample, dt, wide, pass_, trial, like=eager)
                                                for trial in range(len(TRIALS))]))
        found = judged(got_s)
    run.vs_eager = worse(run.vs_eager, accuracy.compare(got_s, eager_s, tol))
    if ref_s is not None:
        run.compiled_ref = worse(run.compiled_ref, accuracy.compare(got_s, ref_s, tol))
        run.eager_ref = worse(run.eager_ref, accuracy.compare(eager_s, ref_s, tol))
    beyond = None if found["ok"] else besides_eager_nan(got_s, found)
    if not found["ok"] and beyond is None:
        found.update(said("eager-non-finite", str(dt).removeprefix("torch."), target))
    elif not found["ok"]:
        if beyond is not found:   # eager's NaN, and an error of the compiled function's own elsewhere
            found["reason"] = f"{found['reason']}; elsewhere: {beyond['reason']}"

        def misses(backend=None, **inductor) -> bool:
            return own_miss(prepared(_compile_and_run(call, sample, target, dt, pass_, backend, **inductor)[0]))

        def rerun(trial: str) -> bool:
            if trial == "nondeterministic":  # the same compiled code again (no compile): other bits that pass
                again = prepared(_run(fn, sample, target, dt, pass_))
                return not accuracy.compare(again, got_s, tolerances.EXACT)["ok"] and not own_miss(again)
            if trial == "dynamo-capture":
                return misses("eager")
            if trial == "aot-decomposition":
                return misses("aot_eager")
            if trial == "inductor-precision":
                import torch._inductor.config as inductor_config
                return hasattr(inductor_config, "emulate_precision_casts") and not misses(emulate_precision_casts=True)
            return False
        found.update(diagnose(str(dt).removeprefix("torch."), rerun))
    found["sample"] = index
    run.compared += 1
    run.worst = worse(run.worst, found)
    return found


def _failing_stage(call, sample, target, dt, pass_) -> str:
    """Where a compile error comes from: the lightest backend that fails as well."""
    for backend in ("eager", "aot_eager"):
        try:
            _compile_and_run(call, sample, target, dt, pass_, backend)
        except Exception:
            return backend
    return "inductor"


def in_eager_terms(found: dict) -> dict:
    """accuracy.compare_accuracy's comparison with its ``cpu`` side named for what it is here,
    eager on the same device: the count of NaN or inf eager gives too is ``non_finite_in_eager``
    (``non_finite_on_cpu`` would tell the report the CPU gives them)."""
    if "non_finite_on_cpu" in found:
        found["non_finite_in_eager"] = found.pop("non_finite_on_cpu")
    return found


def eager_shares_every_nan(found: dict) -> bool:
    """Whether a comparison's NaN or inf where float64 has a number (``non_finite``) are all
    eager's too, at the same elements: the computation's in that precision, not the compiler's."""
    bad = found.get("non_finite") or 0
    return bad > 0 and (found.get("non_finite_in_eager") or 0) >= bad


def mended(got, eager, reference):
    """``got`` and ``eager`` (the same structure of tensors) with the elements both give as NaN
    or inf, where ``reference`` (float64, rounded to their dtype) is a number, set to that
    number (accuracy.set_aside_shared): eager's own NaN set aside, so that the rest is judged
    as any result is. A rerun that kept eager's NaN would otherwise always miss, and name a
    stage that changed nothing. Where the structures differ, both as they are."""
    from torch.utils import _pytree

    from harness.parity.numerics import accuracy
    g_leaves, g_spec = _pytree.tree_flatten(got)
    e_leaves, e_spec = _pytree.tree_flatten(eager)
    r_leaves, r_spec = _pytree.tree_flatten(reference)
    if not (g_spec == e_spec == r_spec):
        return got, eager
    pairs = [accuracy.set_aside_shared(g, e, r) for g, e, r in zip(g_leaves, e_leaves, r_leaves)]
    return (_pytree.tree_unflatten([p[0] for p in pairs], g_spec),
            _pytree.tree_unflatten([p[1] for p in pairs], e_spec))


def said(name: str, dtype: str, target: str = "") -> dict:
    """Cause ``name`` (``CAUSES``) as record fields: cause, cause_what, and the switch for the
    dtype, and for the CPU on the CPU target (causes.switch_for)."""
    cause = CAUSES[name]
    return {"cause": name, "cause_what": cause.what.format(dtype=dtype),
            "switch": causes.switch_for(cause, "cpu" if target == "cpu" else "*", dtype)}


def diagnose(dtype: str, rerun) -> dict:
    """The cause of a compiled miss: the first rerun that explains it (``rerun(name)`` True),
    else inductor's kernel; as record fields (cause, cause_what, switch)."""
    trials = ["nondeterministic", "dynamo-capture", "aot-decomposition"]
    if dtype in ("float16", "bfloat16"):
        trials.append("inductor-precision")
    name = "inductor-kernel"
    for trial in trials:
        try:
            if rerun(trial):
                name = trial
                break
        except Exception:  # a rerun that cannot run tells nothing
            continue
    return said(name, dtype)


# --------------------------------------------------------------------------- in the child: a model

@dataclasses.dataclass
class CompiledModelRun:
    """One model's forward + backward compiled on a target (``run_model``), for ``judge_model``:
    ``output``, ``loss`` and ``grads`` as harness.parity.models.judge.measure_accuracy gives
    them (compiled against float64, eager as the yardstick); ``vs_eager`` the agreement with
    eager and ``vs_float64`` both sides' errors (recorded, not judged); ``diagnosis`` the cause
    of a miss."""
    model: str
    target: str
    unsupported: str | None = None
    output_name: str = ""
    output: dict | None = None
    loss: dict | None = None
    grads: list = dataclasses.field(default_factory=list)
    without_grad: list = dataclasses.field(default_factory=list)
    scale: float = 0.0
    vs_eager: dict | None = None
    vs_float64: dict | None = None
    graphs: int = 0
    graph_breaks: list = dataclasses.field(default_factory=list)
    zero_grads: list = dataclasses.field(default_factory=list)   # zero where eager has none (zero_for_none)
    non_finite: int = 0               # elements (output, loss, gradients) NaN or inf where float64 has a number
    non_finite_in_eager: int | None = None   # of them, NaN or inf in eager's step too
    elsewhere: str = ""               # beside NaN: output or loss out of the rule, eager's NaN set aside
    eager_error: str | None = None
    compile_error: str | None = None
    compile_stage: str | None = None
    diagnosis: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0


class _Step:
    """One forward and backward pass of a copy of ``base`` (harness.parity.models.runs' step)
    on ``device`` in ``dtype``, eager or through torch.compile (inductor, or ``backend``);
    each call starts from no gradients and returns the output, the loss and every
    parameter's gradient on the CPU. Called again, a compiled step reruns the compiled
    code without compiling."""

    def __init__(self, name: str, base, rows: dict, device: str, dtype: str, compiled: bool = False,
                 backend: str | None = None):
        from harness.parity.models import runs
        self.name, self.device = name, device
        side = runs.Side(name="compiled" if compiled else "eager", device=device, dtype=dtype)
        self.model = runs.place(copy.deepcopy(base), side)
        self.batch = {k: v.to(device) for k, v in runs.model_batch(name, self.model, rows).items()}
        self.forward = _compiled(self.model, backend) if compiled else self.model

    def __call__(self) -> dict:
        self.model.zero_grad(set_to_none=True)
        output = self.forward(**self.batch)
        loss = models.loss_of(output, self.batch, models.MODELS[self.name].loss_fn, self.model)
        loss.backward()
        logits = getattr(output, "logits", None)
        out_name, out = ("logits", logits) if logits is not None else ("last_hidden_state", output.last_hidden_state)
        devices.synchronizer(self.device)()
        grads = {n: (p.grad.detach().cpu() if p.grad is not None else None) for n, p in self.model.named_parameters()}
        return {"output_name": out_name, "output": out.detach().cpu(), "loss": loss.detach().cpu(), "grads": grads}


def zero_for_none(compiled: dict, eager: dict) -> list[str]:
    """The parameters eager leaves without a gradient (the loss does not use them) and the
    compiled step gives an all-zero one (``UNUSED_ZERO_GRAD``)."""
    return [name for name, g in compiled.items()
            if g is not None and eager.get(name, g) is None and not bool(g.any())]


def run_model(name: str, target: str, out_tol, grad_tol, cache_dir: str | None = None) -> CompiledModelRun:
    """Model ``name``'s step compiled on ``target``, against eager there and float64 on the
    CPU (the first BATCH rows of harness.parity.models.runs' dataset, every side from the
    same weights). ``out_tol`` and ``grad_tol``: (rtol, atol) pairs of the model tolerances."""
    from harness.parity.models import judge, runs
    run = CompiledModelRun(name, target)
    run.unsupported = unsupported(target)
    if run.unsupported:
        return run
    prepare(cache_dir)
    import torch
    out_tol, grad_tol = judge.as_tolerance(out_tol), judge.as_tolerance(grad_tol)
    base, rows = models.MODELS[name].make(), runs.dataset()[:runs.BATCH]
    started = time.perf_counter()
    try:
        eager = _Step(name, base, rows, target, "float32")()
    except Exception as exc:
        run.eager_error = error_line(exc)
        return run
    sides = {"cpu": eager, "float64": _Step(name, base, rows, "cpu", "float64")()}

    def compiled(backend=None) -> tuple[dict, _Fresh, _Step]:
        with _Fresh() as fresh:
            step = _Step(name, base, rows, target, "float32", compiled=True, backend=backend)
            out = step()
        return out, fresh, step
    try:
        got, fresh, step = compiled()
    except Exception as exc:
        run.compile_error = compile_error_line(exc)
        run.compile_stage = "inductor"
        for backend in ("eager", "aot_eager"):
            try:
                compiled(backend)
            except Exception:
                run.compile_stage = backend
                break
        run.seconds = round(time.perf_counter() - started, 3)
        return run
    run.graphs, run.graph_breaks = fresh.graphs, fresh.breaks[:5]
    run.zero_grads = zero_for_none(got["grads"], eager["grads"])
    sides["target"] = got
    run.output_name = got["output_name"]
    measured = judge.measure_accuracy(sides, out_tol, grad_tol, yardstick="eager")
    run.output, run.loss = measured["output"], measured["loss"]
    run.grads, run.without_grad, run.scale = measured["grads"], measured["without_grad"], measured["scale"]
    run.vs_eager = judge.side_summary(judge.measure(got, eager, out_tol, grad_tol))
    run.vs_float64 = {side: judge.side_summary(judge.measure(sides[key], sides["float64"], out_tol, grad_tol))
                      for side, key in (("compiled", "target"), ("eager", "cpu"))}
    run.non_finite = runs.non_finite(got, sides["float64"])
    if run.non_finite:
        run.non_finite_in_eager = runs.non_finite_on_cpu(sides)   # sides' "cpu" is eager on the target

    def passes(result: dict) -> bool:
        return step_passes(result, sides, out_tol, grad_tol, run.zero_grads)
    if not passes(got):
        if run.non_finite and (run.non_finite_in_eager or 0) >= run.non_finite:
            # NaN that are all eager's, and something else out of the rule: said beside them
            mended_m = beyond_eager_nan(got, sides, out_tol, grad_tol)
            run.elsewhere = "; ".join(f"{key} elsewhere: {mended_m[key]['reason']}" for key in ("output", "loss")
                                      if not mended_m[key]["ok"])

        def rerun(trial: str) -> bool:
            if trial == "nondeterministic":  # the same compiled step again (no compile): other bits that pass
                again = step()
                return any(not torch.equal(again[k], got[k]) for k in ("output", "loss")) and passes(again)
            if trial == "dynamo-capture":
                return not passes(compiled("eager")[0])
            if trial == "aot-decomposition":
                return not passes(compiled("aot_eager")[0])
            return False
        run.diagnosis = diagnose("float32", rerun)
    elif run.non_finite:   # out of the rule by eager's own NaN alone
        run.diagnosis = said("eager-non-finite", "float32", target)
    run.seconds = round(time.perf_counter() - started, 3)
    return run


def step_passes(result: dict, sides: dict, out_tol, grad_tol, zero_grads=()) -> bool:
    """Whether a compiled step's ``result`` (output, loss, grads) is within the rule against
    ``sides``' float64 run with its eager run (``sides["cpu"]``) as the yardstick, once the
    NaN or inf eager gives at the same elements are set aside (``mended``: those are
    ``eager-non-finite``, not the compiler's), and the zero gradients of unused parameters
    (``zero_grads``, a cause of their own). What a rerun (backend="eager", "aot_eager") is asked."""
    m = beyond_eager_nan(result, sides, out_tol, grad_tol)
    return m["output"]["ok"] and m["loss"]["ok"] and all(g["ok"] or g["name"] in zero_grads for g in m["grads"])


def beyond_eager_nan(result: dict, sides: dict, out_tol, grad_tol) -> dict:
    """judge.measure_accuracy of a compiled step's ``result`` with the NaN or inf eager gives
    at the same elements set aside (``mended``), on both sides: what is out of the rule
    besides eager's own NaN."""
    from harness.parity.models import judge
    eager, ref = sides["cpu"], sides["float64"]
    got, yard = {**result, "grads": dict(result["grads"])}, {**eager, "grads": dict(eager["grads"])}
    for key in ("output", "loss"):
        got[key], yard[key] = mended(result[key], eager[key], ref[key])
    for name, g in result["grads"].items():
        e, r = eager["grads"].get(name), ref["grads"].get(name)
        if g is not None and e is not None and r is not None:   # a parameter some side has no gradient for: as it is
            got["grads"][name], yard["grads"][name] = mended(g, e, r)
    return judge.measure_accuracy({"target": got, "cpu": yard, "float64": ref}, out_tol, grad_tol, yardstick="eager")


# --------------------------------------------------------------------------- judging (the pytest process)

def _compile_failed(error: str, stage: str | None, where: str, metrics: dict) -> Verdict:
    stage_words = COMPILE_STAGES.get(stage or "", "an unknown stage")
    # a library asking this torch for a name it lacks is a version mismatch: the error line
    # already says which versions to change (harness.core.errors), there is nothing to report
    if gap := errors.gap_metrics(error):   # in words every check the same gap broke shares
        said, tail = gap, f"or {EAGERLY}"    # the error line says the versions already
    else:
        switch = f"{EAGERLY}" + ("; or torch.compile(..., backend='aot_eager'), which compiles it"
                                 if stage == "inductor" else "") + f"; {REPORT}"
        said = {"cause": "compile-error", "cause_what": f"torch.compile raises where eager computes, in {stage_words}",
                "switch": switch}
        tail = switch
    metrics = {**metrics, "compile_error": error, "compile_stage": stage, **said}
    return Verdict(Status.FAIL, Category.COMPILE_FAILED,
                   f"{where}: torch.compile fails in {stage_words}: {error}; {tail}", metrics, cause=said["cause"])


def _graph_metrics(run) -> dict:
    out = {"graphs": run.graphs}
    if run.graph_breaks:
        out["graph_breaks"] = run.graph_breaks
    return out


def judge_op(run: CompiledOpRun) -> Verdict:
    """The check's verdict and metrics from ``run_op``'s CompiledOpRun."""
    from harness.parity.ops.check import more_accurate
    tol = run.tolerance
    metrics = {"reference": "float64", "yardstick": "eager", "samples": run.samples, "chosen": run.chosen,
               "compared": run.compared, "rtol": tol.rtol, "atol": tol.atol, "tolerance_source": tol.source,
               "accuracy_source": tolerances.ACCURACY_SOURCE, "seconds": run.seconds, **_graph_metrics(run)}
    if run.inputs:
        metrics["inputs"] = " ".join(run.inputs)
    for key in ("random", "no_reference", "not_compiled"):
        if getattr(run, key):
            metrics[f"samples_{key}"] = getattr(run, key)
    if run.compile_error:
        metrics["worst_sample"] = run.error_sample
    settled = _not_compared(run, metrics, "eager fails here too, nothing to compare the compiled op with (the ops "
                            "suite's record says more)", f"sample {run.error_sample}")
    if settled:
        return settled
    worst = run.worst
    if worst is None:
        why = ("dynamo captured no graph (the function ran eagerly" + (
            f"; graph breaks: {'; '.join(run.graph_breaks)})" if run.graph_breaks else ")")
            if run.not_compiled else "every sample is drawn from the RNG" if run.random
            else "the op has no sample with elements to compare")
        return Verdict(Status.SKIP, Category.PARITY, f"nothing compiled to compare: {why}", metrics)
    metrics.update({k: worst[k] for k in ("max_abs_err", "max_rel_err", "margin", "rule", "non_finite",
                                          "non_finite_in_eager", "pointwise") if k in worst})
    metrics["worst_sample"] = worst.get("sample")
    if run.vs_eager:
        metrics.update(vs_eager_max_abs_err=run.vs_eager["max_abs_err"], vs_eager_margin=run.vs_eager["margin"])
    metrics.update(more_accurate(("compiled", run.compiled_ref), ("eager", run.eager_ref)))
    if worst["ok"]:
        return Verdict(Status.PASS, Category.PARITY, "", metrics)
    metrics.update({k: worst[k] for k in ("cause", "cause_what", "switch") if worst.get(k)})
    eager_err = worst.get("cpu_max_abs_err")
    against = "float64" if run.eager_ref is not None else "eager"
    if worst.get("non_finite"):   # no distance to state: the reason counts the NaN, and eager's share
        seen = f"sample {worst.get('sample')}: {worst['reason']}"
    else:
        seen = (f"sample {worst.get('sample')}: off {against} by {worst['max_abs_err']:.3g}"
                + (f" (eager: {eager_err:.3g})" if eager_err is not None else "") + f", margin {worst['margin']:.3g}"
                + (f"; {worst['reason']}" if worst.get("reason") else ""))
    return Verdict(Status.FAIL, Category.PARITY,
                   with_cause(seen, {"cause_what": worst.get("cause_what", "compiled differs"),
                                     "switch": worst.get("switch", REPORT)}), metrics, cause=worst.get("cause"))


def _not_compared(run, metrics: dict, eager_fails: str, where: str) -> Verdict | None:
    """The verdict of a run that compared nothing, an op's or a model's: a target that cannot
    compile or an eager run that fails (skips), or a compile error (compile-failed); None when
    there are numbers to judge."""
    if run.unsupported:
        return Verdict(Status.SKIP, Category.PARITY, run.unsupported, metrics)
    if run.eager_error:
        return Verdict(Status.SKIP, Category.PARITY, f"{eager_fails}: {run.eager_error}", metrics)
    if run.compile_error:
        return _compile_failed(run.compile_error, run.compile_stage, where, metrics)
    return None


def judge_model(run: CompiledModelRun, out_tol: Tolerance, grad_tol: Tolerance) -> Verdict:
    """The check's verdict from ``run_model``'s CompiledModelRun: output, loss and every
    parameter's gradient of the compiled step as accurate as eager's (harness.parity.models.judge)."""
    from harness.parity.models import judge
    metrics = {"reference": "cpu-float64", "yardstick": "eager", "seconds": run.seconds,
               "rtol": out_tol.rtol, "atol": out_tol.atol, "tolerance_source": out_tol.source,
               "grad_rtol": grad_tol.rtol, "grad_atol": grad_tol.atol, "grad_tolerance_source": grad_tol.source,
               **_graph_metrics(run)}
    settled = _not_compared(run, metrics, "the eager step fails here too, nothing to compare the compiled one "
                            "with (the model parity check says more)", f"model {run.model}")
    if settled:
        return settled
    if run.graphs == 0:
        return Verdict(Status.SKIP, Category.PARITY, "nothing compiled to compare: dynamo captured no graph of "
                       "the model" + (f" (graph breaks: {'; '.join(run.graph_breaks)})" if run.graph_breaks else ""),
                       metrics)
    diverged = judge.diverged_gradients(run.grads)
    zero = [g["name"] for g in diverged if g["name"] in run.zero_grads]
    numeric = [g for g in diverged if g["name"] not in run.zero_grads]
    worst = max(run.grads, key=lambda g: g["margin"])
    metrics.update({"max_abs_err": run.output["max_abs_err"], "max_rel_err": run.output["max_rel_err"],
                    "margin": max(run.output["margin"], run.loss["margin"], worst["margin"]),
                    "output": run.output_name, "output_margin": run.output["margin"],
                    "loss": run.loss["value"], "loss_reference": run.loss["reference"],
                    "loss_abs_err": run.loss["max_abs_err"], "loss_margin": run.loss["margin"],
                    "grad_worst": worst["name"], "grad_worst_rel_err": worst["rel_err"],
                    "grad_margin": worst["margin"], "grad_scale": run.scale, "params_compared": len(run.grads),
                    "grads_diverged": [g["name"] for g in diverged], "vs_eager": run.vs_eager,
                    "vs_float64": run.vs_float64})
    if run.zero_grads:
        metrics["zero_grads"] = run.zero_grads
    if run.non_finite:
        metrics.update(non_finite=run.non_finite, non_finite_in_eager=run.non_finite_in_eager)
    errs = {side: run.vs_float64[side]["output_max_abs_err"] for side in ("compiled", "eager")}
    metrics["more_accurate"] = "same" if errs["compiled"] == errs["eager"] else min(errs, key=errs.get)
    problems = [f"{what} out of tolerance: {side['reason']}"
                for what, side in (("output", run.output), ("loss", run.loss)) if not side["ok"]]
    if run.elsewhere:
        problems.append(run.elsewhere)
    if numeric:
        problems.append("gradients diverged (worst first): " + ", ".join(
            f"{g['name']} (margin {g['margin']:.3g}, relative error {g['rel_err']:.3g})" for g in numeric[:8])
            + (f" and {len(numeric) - 8} more" if len(numeric) > 8 else ""))
    if zero:
        problems.append(f"an all-zero gradient where eager has none: {', '.join(zero)}")
    if not problems:
        return Verdict(Status.PASS, Category.PARITY, "", metrics)
    if zero and len(problems) == 1:   # nothing but the zero gradients of unused parameters
        cause = CAUSES["unused-zero-grad"]
        found = {"cause": cause.name, "cause_what": cause.what, "switch": cause.switch["*"]}
    else:
        found = run.diagnosis or diagnose("float32", lambda trial: False)
    metrics.update(found)
    return Verdict(Status.FAIL, Category.PARITY, with_cause("; ".join(problems), found), metrics, cause=found["cause"])
