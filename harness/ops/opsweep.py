"""Op coverage: every OpInfo op x dtype x pass, run on a target and classified.

PyTorch's OpInfo database is the op table (harness.ops.declarations.op_table): each entry
knows its dtypes per device type, whether it supports autograd, and how to make sample
inputs. ``cases()`` turns it into one check per op x dtype x pass, naming the targets each
applies to; ``run_case()`` runs one check's samples on a device (in the sandbox child, see
harness.core.isolate) and returns an ``OpRun`` classified as

  native        every sample ran, no fallback warning
  cpu-fallback  every sample ran, and MPS fallback warnings named these ops: the aten ops of
                MPS's generic fallback, and "<op> (in-kernel)" for an MPS kernel that sent
                its input to the CPU itself (harness.ops.fallback)
  unsupported   a sample raised NotImplementedError (no kernel, fallback off or impossible)
  error         a sample raised anything else (its first line is kept)
  crash/timeout the child process died or ran out of time (``run_of`` a sandbox outcome)
  n/a           an emulated device cannot tell what the device would do (the CPU it runs on
                lacks the dtype's kernel): the check is skipped with that reason; so is one
                whose error the emulated device doubts (``OpRun.doubt``) where PyTorch's
                MPS tests expect a pass, and one for which OpInfo could make no sample on
                the device (``device_samples``: the op never ran)

and ``judge`` makes it the check's Verdict, on MPS against PyTorch's own expectation
(harness.ops.declarations.mps_expectations).

Whose fallback a check reports: its own phase's (``PHASES``). Each sample is made by OpInfo's
sample function first, under a capture of its own whose fallbacks are not the op's (27 linalg
sample functions call torch.linalg.svd on the device, which MPS runs on the CPU: counted, they
made linalg.inv, linalg.solve, linalg.det, lu_factor... read "cpu-fallback: aten::_linalg_svd"
though their own kernels are native). Then the op runs forward, and for a backward check
autograd runs backward, each under its own capture: a forward check reports what its forward
fell back on, a backward check what its backward did (the forward's is its forward check's).
The others are kept in ``OpRun.fallback_by_phase``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
from pathlib import Path

from harness.core.cases import DtypePass
from harness.core.records import Category, Status, Verdict, error_line
from harness.env import devices
from harness.ops import declarations, fallback
from harness.ops.declarations import op_table

OP_DTYPES = ("float32", "float16", "bfloat16", "int64", "int32", "uint8", "bool", "complex64")
# bfloat16 is how most people train in half precision now (on a Mac since macOS 14): its
# backward is swept like float16's
GRAD_DTYPES = ("float32", "float16", "bfloat16")
GRAD_SEED = 1234
# The phases of a check's run (run_case), each under its own fallback capture; a check counts
# the fallbacks of its own pass's phase only
SAMPLES, FORWARD, BACKWARD = "samples", "forward", "backward"
PHASES = (SAMPLES, FORWARD, BACKWARD)


@dataclasses.dataclass(frozen=True)
class OpCase(DtypePass):
    name: str            # OpInfo name, e.g. "nn.functional.conv2d"
    variant_name: str    # OpInfo variant_test_name, often ""
    dtype: str
    pass_: str           # "forward" or "backward"
    targets: tuple[str, ...]

    @property
    def op_key(self) -> str:
        return f"{self.name}.{self.variant_name}" if self.variant_name else self.name

    # identity in the journal: ops/<op_key>/<dtype>/<pass> (DtypePass)
    @property
    def subject(self) -> str:
        return self.op_key


def _dtype_names(dtypes) -> set[str]:
    return {str(d).removeprefix("torch.") for d in dtypes}


# Bump when the way cases are derived changes: it keys the cache below.
CASES_FORMAT = 1


def _torch_build_id() -> str:
    """torch's version.py (release and git revision of the build), read without importing torch."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return "no-torch"
    try:
        return (Path(spec.origin).parent / "version.py").read_text()
    except OSError:
        return spec.origin


def _cache_path(targets) -> Path:
    from harness.ops.kernels import cache_root
    build = f"{_torch_build_id()}|{CASES_FORMAT}|{OP_DTYPES}|{GRAD_DTYPES}|{targets}"
    return cache_root() / "opcases" / f"{hashlib.sha256(build.encode()).hexdigest()[:20]}.json"


def cases(targets=("cpu", "cuda", "mps")) -> list[OpCase]:
    """The case table, from a cache keyed by the torch build (else built and cached).

    Building it means importing op_db (several seconds, mostly torch._inductor); the table
    depends only on the torch build, so collection reads it back instead, and only the
    sandbox child, which runs the ops, imports op_db.
    """
    path = _cache_path(tuple(targets))
    try:
        rows = json.loads(path.read_text())
        return [OpCase(r[0], r[1], r[2], r[3], tuple(r[4])) for r in rows]
    except (OSError, ValueError, IndexError, TypeError):
        pass
    built = build_cases(targets)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps([[c.name, c.variant_name, c.dtype, c.pass_, list(c.targets)] for c in built]))
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs time
    return built


def emulated(table: list) -> list:
    """``table`` with each registered emulating stand-in (harness.env.devices.StandIn.emulates)
    added to the cases of the device it emulates: the emulated Mac has MPS's cases, MPS's
    dtypes included (no float64), and nothing else. The suites add them (``cases`` stays the
    torch build's table, as cached): which stand-ins are registered is the run's."""
    emulating = [(name, devices.rules_of(name)) for name in devices.STAND_INS if devices.is_emulated(name)]
    if not emulating:
        return table
    return [dataclasses.replace(c, targets=c.targets + tuple(n for n, rules in emulating if rules in c.targets))
            for c in table]


def build_cases(targets=("cpu", "cuda", "mps")) -> list[OpCase]:
    """One case per op x dtype x pass, each naming the targets whose dtype support covers it.

    MPS dtypes come from the OpInfo's MPS entry where torch has one, else from its generic
    dtypes: the sweep then finds out what MPS lacks instead of assuming it.
    """
    out = []
    for key, op in sorted(op_table().items()):
        only = declarations.device_only(op)
        fwd = {t: _dtype_names(op.supported_dtypes(t)) for t in targets if only in (None, t)}
        bwd = {t: _dtype_names(op.supported_backward_dtypes(t)) if op.supports_autograd else set()
               for t in fwd}
        for dtype in OP_DTYPES:
            ts = tuple(t for t in fwd if dtype in fwd[t])
            if ts:
                out.append(OpCase(op.name, op.variant_test_name, dtype, "forward", ts))
            if dtype in GRAD_DTYPES:
                ts = tuple(t for t in fwd if dtype in fwd[t] and dtype in bwd[t])
                if ts:
                    out.append(OpCase(op.name, op.variant_test_name, dtype, "backward", ts))
    return out


# --------------------------------------------------------------------------- running

def _tensors(tree):
    import torch
    from torch.utils import _pytree
    return [t for t in _pytree.tree_leaves(tree) if isinstance(t, torch.Tensor)]


def _backward(sample, out, device: str) -> bool:
    """autograd.grad of the (processed) outputs with fixed random grad_outputs.

    Returns False when the sample has nothing differentiable (then it does not count).
    """
    import torch
    out = sample.output_process_fn_grad(out)
    outs = [t for t in _tensors(out) if t.requires_grad]
    ins = [t for t in _tensors((sample.input, sample.args, sample.kwargs)) if t.requires_grad]
    if not outs or not ins:
        return False
    gen = torch.Generator().manual_seed(GRAD_SEED)
    grads = [torch.randn(o.shape, generator=gen, dtype=o.dtype).to(device) for o in outs]
    torch.autograd.grad(outs, ins, grads, allow_unused=True)
    return True


def sample_device(target: str) -> str:
    """The device string OpInfo's samples are made for on ``target``, as PyTorch's own
    device-generic tests pass it (torch.testing._internal.common_device_type:
    ``cuda:<current device>``, ``mps:0``; the CPU's is ``cpu``). A sample function that adds
    samples only when ``device == "cuda"`` never meets them in PyTorch's CI, and one of those
    is malformed: ``_softmax_backward_data``'s float32 gradient with a float16 output, which
    real autograd never passes, failed on an H100 with torch 2.11 ("expected scalar type Float
    but found Half"). Made as PyTorch's tests make them, the op's checks test what PyTorch
    tests.

    The emulated Mac's samples are made for ``mps:0`` too (inside its ``device_names``, where
    that name places them on the CPU it runs on): the sample functions that leave out float64
    operands for MPS (``highest_precision_float``, ``like`` ops' ``dtype=``) leave them out
    there as on a Mac; made for the CPU, 99 of its 5,482 checks (torch 2.15) failed on float64
    operands a Mac is never given. A plain stand-in's are made for the CPU its work runs on."""
    kind = devices.rules_of(target)
    if kind == "cuda":
        import torch
        return f"cuda:{torch.cuda.current_device()}"
    if kind == "mps":
        return "mps:0"
    return devices.place(target)


@dataclasses.dataclass(frozen=True)
class OpRun:
    """What running one op x dtype x pass on a target gave (``run_case``), for ``judge``."""
    category: str                 # native, cpu-fallback, unsupported, error, crash or timeout
    samples: int = 0              # samples that ran
    samples_without_grad: int = 0  # backward samples with nothing differentiable (not counted)
    fallback_ops: tuple[str, ...] = ()   # ops the MPS fallback warnings named in the check's own phase
    error_type: str | None = None
    message: str = ""             # the error's first line, or what happened to the child
    seconds: float | None = None
    failed_in: str | None = None  # a backward check's failure: in "forward" (making the sample or
    #                               running the op) or in "backward" (autograd.grad)
    doubt: str = ""               # an emulated device's doubt about its own error (devices.doubted)
    samples_from_cpu: str = ""    # why the samples were made on the CPU and moved (``device_samples``)
    fallback_by_phase: dict = dataclasses.field(default_factory=dict)   # phase -> the ops its warnings
    #                               named (PHASES: the samples' making, forward, backward), every phase run


def run_case(op_key: str, device: str, dtype: str, pass_: str) -> OpRun:
    """Run every sample of one op x dtype x pass on ``device`` (a target); return the
    classification.

    Seeded, and warn-always on during the run, so the result does not depend on which
    checks ran before it in the same process. The samples are made for the target's device
    name (``sample_device``) and run there: a stand-in's on the CPU inside its context
    (devices.on_device), where an emulated device's rules hold (the emulated Mac's missing
    kernels fall back or raise, its float64 is refused) and its device's name places tensors
    (devices.device_names), as they would on the device itself.
    """
    import torch
    op = op_table()[op_key]
    torch.manual_seed(0)
    dt = getattr(torch, dtype)
    sync = devices.synchronizer(device)
    made_for = sample_device(device)
    stage = [FORWARD]
    phases = fallback.Phases(op_key)
    counted = BACKWARD if pass_ == "backward" else FORWARD

    moved: list[str] = []

    def samples():
        with devices.device_names(device):
            made = device_samples(op, made_for, dt, pass_ == "backward", moved)
            while True:
                stage[0] = FORWARD        # the sample is made, and run forward, first
                with phases.phase(SAMPLES):   # OpInfo's test code, not the op: its fallbacks are not the op's
                    sample = next(made, None)
                if sample is None:
                    return
                with phases.phase(FORWARD):
                    out = op(sample.input, *sample.args, **sample.kwargs)
                    if pass_ != "backward":
                        sync()
                if pass_ == "backward":
                    stage[0] = BACKWARD
                    with phases.phase(BACKWARD):
                        differentiable = _backward(sample, out, made_for)
                        if differentiable:
                            sync()
                    if not differentiable:
                        yield False
                        continue
                yield True
    run = classified(device, samples(), phases=phases, counted=counted)
    if pass_ == "backward" and run.category not in Category.RAN:
        run = dataclasses.replace(run, failed_in=stage[0])
    return dataclasses.replace(run, samples_from_cpu=moved[0]) if moved else run


class SamplesNotMade(Exception):
    """OpInfo could make no sample for the device: its sample function failed there, and the
    samples it makes on the CPU could not be moved there either. The op never ran."""


def device_samples(op, made_for: str, dt, requires_grad: bool, moved: list[str]):
    """OpInfo's samples of ``op`` made for ``made_for`` (``sample_device``), one at a time.

    A sample function is test code, and some of it does what a device refuses while it makes
    an input: torch 2.6's ``index_variable`` draws its indices as float64 on the device, which
    MPS refuses ("Cannot convert a MPS Tensor to float64 dtype"), so every sample of
    ``__getitem__``, ``index_put`` and ``randint`` failed before the op was called, and the
    sweep said those ops fail on MPS. Where the sample function raises on the device (an
    emulated device's BeyondEmulation aside), the samples it has not yet given are made on the
    CPU and moved to the device (a leaf again where it asks for a gradient), as PyTorch's own
    MPS consistency test makes its samples; why is appended to ``moved``, for the record.
    Samples that cannot be moved either raise SamplesNotMade: the op never ran."""
    import torch
    made, given = iter(op.sample_inputs(made_for, dt, requires_grad=requires_grad)), 0
    while True:
        try:
            sample = next(made)
        except StopIteration:
            return
        except devices.BeyondEmulation:
            raise
        except Exception as exc:   # the sample function failed, not the op
            if torch.device(made_for).type == "cpu":
                raise
            moved.append(f"OpInfo's sample function failed on {made_for} ({error_line(exc)}), so the samples were "
                         "made on the CPU and moved there")
            break
        given += 1
        yield sample

    def to_device(t):
        if not isinstance(t, torch.Tensor):
            return t
        out = t.detach().to(made_for)
        return out.requires_grad_(t.requires_grad) if t.requires_grad else out
    on_cpu, i = iter(op.sample_inputs("cpu", dt, requires_grad=requires_grad)), 0
    while True:
        try:
            sample = next(on_cpu)
            there = sample.transform(to_device) if i >= given else None
        except StopIteration:
            return
        except devices.BeyondEmulation:
            raise
        except Exception as exc:
            raise SamplesNotMade(f"{moved[0]}; making them there failed too ({error_line(exc)}): the op never ran, "
                                 "so this check says nothing of it") from exc
        i += 1
        if there is not None:
            yield there


def classified(device: str, runs, phases: fallback.Phases | None = None, counted: str = FORWARD,
               op: str | None = None) -> OpRun:
    """Drive ``runs`` (an iterator that runs one sample per step on ``device`` and yields
    whether it counted: False for a backward sample with nothing differentiable) under the
    fallback capture and the target's context, and classify what happened: NotImplementedError
    (or an older torch's RuntimeError for a kernel without the dtype) is unsupported, any other
    error is an error, and a run whose fallback warnings named ops is
    cpu-fallback. The ops controls (harness.ops.controls) classify through here too, so a
    control sees exactly what a check sees.

    Which fallbacks are the check's: where ``runs`` captures its own phases in ``phases``
    (fallback.Phases: run_case's samples, forward and backward), those of the ``counted`` phase,
    and any warning given outside every phase; the others are kept per phase
    (``OpRun.fallback_by_phase``). Without ``phases``, every fallback seen while ``runs`` ran.
    ``op`` names an MPS kernel's own fallback whose warning names no op (fallback.in_kernel)."""
    started = time.perf_counter()
    ran = skipped = 0
    category, message, error_type, doubt = Category.NATIVE, "", None, ""
    naming = op if op is not None else phases.op if phases is not None else None
    with fallback.capture(naming) as cap, devices.on_device(device):
        try:
            for counts in runs:
                ran, skipped = ran + bool(counts), skipped + (not counts)
        except devices.BeyondEmulation as exc:   # the emulated device cannot answer: not judged
            category, error_type, message = Category.NA, type(exc).__name__, error_line(exc)
        except SamplesNotMade as exc:            # OpInfo made nothing to run: not judged either
            category, error_type, message = Category.NA, type(exc).__name__, str(exc)
        except Exception as exc:  # no kernel here (fallback.no_kernel), or the op failed on this device
            unsupported = fallback.no_kernel(exc)
            category = Category.UNSUPPORTED if unsupported else Category.ERROR
            error_type, message = type(exc).__name__, error_line(exc)
            doubt = "" if unsupported else devices.doubt_of(exc)
    by_phase = {name: list(ops) for name, ops in phases.ops.items()} if phases is not None else {}
    ops = phases.of(counted) if phases is not None else []
    ops += [o for o in cap.ops if o not in ops]     # a warning outside every phase counts: nothing else owns it
    if category == Category.NATIVE and ops:
        category = Category.CPU_FALLBACK
    return OpRun(category, ran, skipped, tuple(ops), error_type, message, round(time.perf_counter() - started, 4),
                 doubt=doubt, fallback_by_phase=by_phase)


# --------------------------------------------------------------------------- judging

def expectations_macos(target: str) -> float:
    """The macOS whose PyTorch MPS expectations judge ``target``: an emulated Mac's recorded
    macOS (devices.facts_for), else declarations.DEFAULT_MACOS (on a real Mac the installed
    common_mps reads the machine's own)."""
    from harness.env import fitness
    version = fitness.macos_version(devices.facts_for(target, {})) if devices.is_emulated(target) else None
    return float(f"{version.major}.{version.minor}") if version is not None else declarations.DEFAULT_MACOS


_EXPECTATIONS: dict[float, declarations.Expectations] = {}


def pytorch_expectations(target: str) -> declarations.Expectations:
    """PyTorch's MPS expectations that judge ``target`` (for its macOS: expectations_macos),
    read once per macOS in a process."""
    macos = expectations_macos(target)
    if macos not in _EXPECTATIONS:
        _EXPECTATIONS[macos] = declarations.mps_expectations(declarations.op_table(), OP_DTYPES, macos)
    return _EXPECTATIONS[macos]


ITSELF_FAILED = "the check itself failed"   # an error of the sandbox around the op, not the op's (run_of)


def run_of(outcome) -> OpRun:
    """A sandbox outcome (harness.core.isolate.Outcome) as an OpRun: the child's, or a crash,
    a timeout or the check itself failing, as this check's category."""
    if outcome.kind == "ok":
        return outcome.value
    seconds = round(outcome.seconds, 4)
    if outcome.kind in (Category.CRASH, Category.TIMEOUT):
        return OpRun(outcome.kind, message=outcome.detail, seconds=seconds)
    return OpRun(Category.ERROR, message=f"{ITSELF_FAILED}: {outcome.detail}", seconds=seconds)


def judge(run: OpRun, expected: str | None = None, on_mps: bool = False,
          forward_expected: str | None = None) -> Verdict:
    """The check's verdict from its category and, on MPS (``on_mps``), PyTorch's
    expectation (``expected``: None for a pass, or xfail or skip, from
    harness.ops.declarations.mps_expectations).

    A backward check runs the op forward first: where it failed there (``run.failed_in``)
    and PyTorch expects the forward to fail in this dtype (``forward_expected``), that
    expectation is the check's (``to``'s float32 backward converts to float64 first, as its
    forward does, and PyTorch's forward test expects that to fail on MPS). An emulated
    device's error it doubts itself (``run.doubt``) where PyTorch expects a pass is not
    judged: the check is skipped with both, as only the device can answer it."""
    cat, msg = run.category, run.message
    metrics = {"samples": run.samples, "fallback_ops": list(run.fallback_ops), "seconds": run.seconds,
               "fallback_reader": fallback.READER}
    fell = {phase: list(ops) for phase, ops in run.fallback_by_phase.items() if ops}
    if fell:   # where each phase fell back: the samples' making and another pass's are not this check's
        metrics["fallback_by_phase"] = fell

    def verdict(status: str, category: str, message: str, dis: str | None) -> Verdict:
        if on_mps:  # PyTorch's expectations describe MPS only
            metrics.update(pytorch_expects=expected or Status.PASS, disagreement=dis)
        return Verdict(status, category, message, metrics)
    if cat in (Category.CRASH, Category.TIMEOUT):
        return verdict(cat, Category.NA, msg, None)
    if run.samples_from_cpu:
        metrics["samples_from_cpu"] = run.samples_from_cpu
    if cat == Category.NA and run.error_type == SamplesNotMade.__name__:   # no sample to run the op on
        return verdict(Status.SKIP, Category.NA, msg, None)
    if cat == Category.NA:   # an emulated device that cannot tell (classified): only the device can
        return devices.cannot_tell(msg, metrics)
    ran = cat in Category.RAN
    dis = declarations.disagreement(expected, cat) if expected is not None or not ran else None
    if ran:
        forward = [o for o in fell.get(FORWARD, ()) if o not in run.fallback_ops]   # a backward check's forward
        note = "; ".join(filter(None, (
            f"fell back to the CPU: {', '.join(run.fallback_ops)}" if cat == Category.CPU_FALLBACK else "",
            f"its forward fell back to the CPU ({', '.join(forward)}), which the forward check counts" if forward else "",
            run.samples_from_cpu)))
        if expected == declarations.XFAIL:
            return verdict(Status.XPASS, cat, "ran, although PyTorch's MPS test expects a failure here"
                           + (f"; {note}" if note else ""), dis)
        return verdict(Status.PASS, cat, note, None)
    if expected in (declarations.XFAIL, declarations.SKIP):
        return verdict(Status.XFAIL, cat, f"PyTorch expects this ({expected}): {msg}", None)
    failing = (declarations.XFAIL, declarations.SKIP)
    if on_mps and expected is None and run.failed_in == "forward" and forward_expected in failing:
        inherited = verdict(Status.XFAIL, cat, f"PyTorch expects this op's forward to fail in this dtype "
                                               f"({forward_expected}), and it failed there: {msg}", None)
        inherited.metrics.update(pytorch_expects=f"{forward_expected} (forward)", failed_in=run.failed_in)
        return inherited
    if on_mps and expected is None and run.doubt:
        return devices.cannot_tell(f"the emulated Mac cannot tell: {run.doubt}; PyTorch's own MPS test expects this "
                                   f"check to pass on a Mac; only a Mac answers it ({msg})",
                                   {**metrics, "pytorch_expects": Status.PASS})
    return verdict(Status.FAIL, cat, f"{cat}: {msg}", dis if expected is not None else None)
