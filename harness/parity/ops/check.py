"""Op parity: every OpInfo op x dtype x pass, its numbers on a target against the CPU.

The cases (``cases``): the ops suite's op x dtype x pass that have something to compare,
each with what is known of it before it runs (``ParityCase.known``: a float32 limit of a
correct CPU, ``KNOWN_LIMITS``). ``run_case`` (in the sandbox child) compares every sample of
a case and returns an ``OpParityRun``; ``judge`` (in the pytest process) makes it the
check's Verdict.

For each sample input of an op (OpInfo's own samples, made on the CPU from a fixed seed;
moved, evaluated and fingerprinted by harness.parity.ops.samples):

  cpu        the op on the CPU in the case's dtype
  reference  the op on the CPU in float64 (complex128) on the same values: the sample
             upcast exactly, with its strides and storage offset kept, so views such as
             ``as_strided`` and non-contiguous inputs mean the same thing
  target     the op on the target device in the case's dtype (same layout), when the
             target is not the CPU

Backward cases compare the gradients of the inputs, with the same fixed grad_outputs.
The verdict:

  target == cpu   cpu against the float64 reference: elementwise, normwise (where the
                  computation sums: ``accumulates``), or with the reference's own
                  sensitivity (``against_reference``): a low-precision sum's error on a
                  small element that cancelled is not a bug, a kernel that is off by 1e-3
                  is, and so is a pointwise kernel off on its small elements.
  target != cpu   the target by its accuracy against the same reference, the CPU's own
                  error in the same dtype as the yardstick (accuracy.compare_accuracy;
                  ``_on_target``): it passes when it meets the cpu target's rules or is no
                  less accurate than the CPU. Outputs by their kind (harness.parity.numerics.
                  outputs): integer and bool outputs exactly, index outputs among ties by the
                  values they select, an LU as P @ L @ U. Agreement with the CPU is recorded,
                  not judged. A failure is rerun to name its cause (harness.parity.numerics.
                  causes). With no float64 reference (integer inputs, no float64 kernel),
                  against the CPU at each output dtype's tolerance.

Samples that cannot be compared are set aside, not judged: a sample whose output changes
with the RNG seed (random ops), and ops that PyTorch itself declares not comparable with
the CPU (``DecorateInfo(unittest.skip(...), "TestCommon", "test_compare_cpu")`` on the
OpInfo, read by harness.ops.declarations: uninitialised ``empty*``, random ops, and
others), with PyTorch's reason. A few of PyTorch's skips are wider than what they are for
(``PYTORCH_SKIPS``): a failure on its CI, a slow test, index ties, samples with dropout,
conversions of values out of range, shifts by the width or more, unique's order; those ops are compared all the same
(the samples the skip is for set aside, or their results put in a defined order), and their
records say which skip was not followed.

torch and the numerics (which import it) are imported where they are used: the suite
collects the cases without loading torch.
"""
from __future__ import annotations

import dataclasses
import math
import time

from harness.core.cases import Known
from harness.core.records import Category, Status, Verdict, error_line, with_cause
from harness.env import devices
from harness.ops import declarations, fallback, opsweep
from harness.parity.numerics import causes, tolerances
from harness.parity.numerics.tolerances import Tolerance
from harness.parity.ops.samples import TRIALS, convert, evaluate, fingerprint, narrowed, wide_reference

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "complex64")
EXACT_DTYPES = ("int64", "int32", "uint8", "bool")
WIDE = {"float32": "float64", "float16": "float64", "bfloat16": "float64", "complex64": "complex128"}

# Checks whose float32 gradient misses the float64 reference on a correct CPU or on a real
# accelerator where the CPU is near its own limit: long computations whose rounding adds up
# beyond the elementwise float32 tolerance and beyond the reference's sensitivity to the
# inputs. A miss here is recorded as a known limit (xfail, margin kept, the reason in the
# record's reason); a pass stays a pass.
MEASURED_ON_CPU = "measured on torch 2.15's CPU"
KNOWN_LIMITS = {
    ("grid_sampler_3d", "float32", "backward"):
        Known("limit", "3-D interpolation weights summed over many voxels", MEASURED_ON_CPU),
    ("linalg.eig", "float32", "backward"):
        Known("limit", "the eigendecomposition's gradient divides by differences of eigenvalues",
              "an H100 with torch 2.11 (recorded run, 3x the CPU's error on 2 of 50 elements)"),
    ("linalg.householder_product", "float32", "backward"):
        Known("limit", "a product of Householder reflections", MEASURED_ON_CPU),
    ("linalg.svd", "float32", "backward"):
        Known("limit", "the SVD's gradient divides by differences of singular values", MEASURED_ON_CPU),
    ("svd", "float32", "backward"):
        Known("limit", "the SVD's gradient divides by differences of singular values", MEASURED_ON_CPU),
    ("logcumsumexp", "float32", "backward"):
        Known("limit", "exp of differences of running log-sum-exps", MEASURED_ON_CPU),
    ("nn.functional.ctc_loss", "float32", "backward"):
        Known("limit", "CTC's dynamic programme over every alignment", MEASURED_ON_CPU),
    ("torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", "float32", "backward"):
        Known("limit", "blockwise online-softmax attention recomputed in the backward", MEASURED_ON_CPU),
    # OpInfo's singular samples take the pseudo-inverse of a product of two thin matrices: the
    # product's smallest singular value is rounding noise near the rank cutoff, and a matmul
    # that adds its terms in another order (a GPU's, or the CPU's own with FMA in another
    # order) moves it across: the result jumps (0.9 off float64 where the CPU is 2e-7 off).
    # The reference cannot see it: float64 keeps the product's rank whatever the inputs' rounding.
    ("linalg.pinv.singular", "complex64", "forward"):
        Known("limit", "the pseudo-inverse of a singular product jumps where rounding moves its smallest singular "
              "value across the rank cutoff", "the stand-in standin-reorder (the CPU's matmul, its terms added in "
              "another order), torch 2.15"),
}


@dataclasses.dataclass(frozen=True)
class PyTorchSkip:
    """One of PyTorch's ``test_compare_cpu`` skips, as this suite reads it. ``says``: the
    reason PyTorch's declaration gives (the entry applies only while it says that: a new
    reason is new information, followed as declared); ``why``: what the skip is for, from
    the comment beside it in common_methods_invocations.py; ``compared``: whether this
    suite compares the op all the same, because the skip is not about the op's output."""
    says: str
    why: str
    compared: bool


CONVERSIONS = {"byte": "uint8", "char": "int8", "short": "int16", "int": "int32", "long": "int64"}   # op -> its dtype
SHIFTS = ("bitwise_left_shift", "bitwise_right_shift")

# PyTorch's test_compare_cpu skips (torch 2.15's op_db) that say only "Skipped!", or that
# cover a whole op for some of its samples (dropout; a conversion of a value out of range; a
# shift by the width or more; an order left undefined). Where the skip is not about the output (a
# failure on PyTorch's CI, a slow test), or covers what this suite's judge handles on its
# own (indices among ties, and unique's order: harness.parity.numerics.outputs; samples with
# dropout: set aside when their output is drawn from the RNG, random_output), the op is compared. Checked
# on the CPU and on every stand-in, where each passed (standin-tf32 fails conv3d, SDPA and
# multi-head attention in float32, with TF32 as the cause, as it fails the other matmuls).
# mode's skip is CUDA's alone, in float32: its other dtypes, never skipped, pass with this
# judge on the recorded H100 (tests/fixtures/recorded/h100-torch2.11-2026-11-24).
PYTORCH_SKIPS = {
    "nn.functional.embedding": PyTorchSkip(
        "Skipped!", "a failure on PyTorch's CI (pytorch#85377, open since 2022); embedding's output is a "
        "deterministic gather of its weight (with max_norm, the weight is renormalised in place once, on the "
        "first side, and the later sides renormalise rows already at the norm: a rounding-sized change)", True),
    "nn.functional.conv3d": PyTorchSkip(
        "Skipped!", "kept out of PyTorch's slow tests for their time (the comment beside the skip: 'break slow "
        "tests'), not for its output", True),
    "mode": PyTorchSkip(
        "Skipped!", "a mismatch of the returned indices on CUDA in float32 (the comment beside the skip: "
        "'Expected 2114 but got 1123'): among equal values every index is right, and this suite judges an "
        "index by the value it selects", True),
    "nn.functional.scaled_dot_product_attention": PyTorchSkip(
        "output is non-deterministic (when dropout_p > 0)", "its samples with dropout_p > 0 draw from the RNG; "
        "here those are set aside sample by sample when their output differs, and the others are compared", True),
    "nn.functional.multi_head_attention_forward": PyTorchSkip(
        "output is non-deterministic", "its samples with dropout draw from the RNG (the comment beside the skip: "
        "'randomness'); here those are set aside sample by sample when their output differs, and the others are "
        "compared", True),
    **{conversion: PyTorchSkip(
        "Overflow when downcasting signed type is undefined", "converting a value outside the output dtype's "
        "range is undefined in C++; here the samples holding such a value are set aside (``in_range``), and the "
        "others, whose conversion is exact, are compared", True) for conversion in CONVERSIONS},
    **{shift: PyTorchSkip(
        "Some inputs produce undefined outputs", "a shift by the width of the dtype or more, or by a negative "
        "amount, is undefined in C++, and PyTorch's CPU and CUDA kernels disagree there (pytorch#70904); here the "
        "samples holding such an amount are set aside (``in_range``), and the others are compared", True)
       for shift in SHIFTS},
    "unique": PyTorchSkip(
        "Output order is undefined when sorted=False", "with sorted=False the unique values may come in any "
        "order; here every result is compared in ascending order, its inverse indices and counts following "
        "(harness.parity.numerics.outputs.DEFINED), so which values occur, where each element went and how often "
        "each occurs are compared, and the order is not", True),
    "empty_strided": PyTorchSkip("Skipped!", "its output is uninitialised memory", False),
    "normal.number_mean": PyTorchSkip("Skipped!", "its output is drawn from the RNG", False),
    "torch._scaled_mm": PyTorchSkip("Skipped!", "a float8 matmul of CUDA alone, with no CPU kernel", False),
    "torch._scaled_mm_v2": PyTorchSkip("Skipped!", "a float8 matmul of CUDA alone, with no CPU kernel", False),
}


def in_range(op_key: str, sample) -> bool:
    """Is a sample's result defined? A conversion op's sample must hold only values its
    output dtype can take (finite, and within the dtype's range once truncated toward zero);
    a shift's amounts must lie in [0, the result's width): a shift by the width or more, or
    by a negative amount, is undefined in C++ and differs between PyTorch's own kernels
    (pytorch#70904, #88547). True for any other op."""
    import torch
    if op_key in SHIFTS:
        amount = sample.args[0] if sample.args else sample.kwargs.get("other")
        amounts = torch.as_tensor(amount)
        if amounts.is_floating_point() or amounts.is_complex() or amounts.dtype == torch.bool:
            return True
        bits = torch.iinfo(torch.result_type(sample.input, amount)).bits
        return bool(((amounts >= 0) & (amounts < bits)).all())
    if op_key not in CONVERSIONS or not isinstance(sample.input, torch.Tensor) or sample.input.numel() == 0:
        return True
    info = torch.iinfo(getattr(torch, CONVERSIONS[op_key]))
    x = sample.input.real if sample.input.is_complex() else sample.input
    if x.is_floating_point():
        if not bool(torch.isfinite(x).all()):
            return False
        x = x.double().trunc()
    else:   # compared in int64: a narrower integer tensor would take the bounds in its own dtype
        x = x.to(torch.int64)
    return bool((x >= info.min).all()) and bool((x <= info.max).all())


def lacking_dtype(kind: str, sample) -> str:
    """The dtype a sample asks for (a ``dtype=`` or a dtype argument: full_like(...,
    dtype=torch.float64), to(torch.float64); or an operand of that dtype, which the device
    cannot hold: to(other)) that a device of rules ``kind`` does not have, or "". Such a
    sample is set aside on that device: its failure is the device's known lack (the env and
    ops suites say so), not a difference in the numbers."""
    lacks = devices.LACKS.get(kind)
    if not lacks:
        return ""
    import torch
    from torch.utils import _pytree
    for leaf in _pytree.tree_leaves((sample.input, sample.args, sample.kwargs)):
        dtype = leaf.dtype if isinstance(leaf, torch.Tensor) else leaf if isinstance(leaf, torch.dtype) else None
        name = str(dtype).removeprefix("torch.") if dtype is not None else ""
        if name in lacks:
            return name
    return ""


def followed(op_key: str, declared: tuple[str, str] | None) -> tuple[tuple[str, str] | None, str | None]:
    """PyTorch's test_compare_cpu declaration for this op as this suite follows it, and the
    skip it does not follow (a line for the record), if any. A skip this suite follows keeps
    PyTorch's reason, with what it is for where PyTorch says only "Skipped!"."""
    known = PYTORCH_SKIPS.get(op_key)
    if not declared or declared[0] != declarations.SKIP or known is None or declared[1] != known.says:
        return declared, None
    if known.compared:
        return None, f"PyTorch's test_compare_cpu skips this op ({known.says!r}): {known.why}"
    return (declarations.SKIP, known.why if known.says == "Skipped!" else f"{known.says} ({known.why})"), None


# --------------------------------------------------------------------------- the cases

@dataclasses.dataclass(frozen=True)
class ParityCase:
    """An op x dtype x pass, with the targets whose parity it checks."""
    name: str
    variant_name: str
    dtype: str
    pass_: str
    targets: tuple[str, ...]

    op_key = opsweep.OpCase.op_key
    subject = opsweep.OpCase.subject
    variant = opsweep.OpCase.variant
    id = opsweep.OpCase.id

    @property
    def known(self) -> Known | None:
        """What is known of this check before it runs: a known limit, or nothing."""
        return KNOWN_LIMITS.get((self.op_key, self.dtype, self.pass_))


def cases(targets=("cpu", "cuda", "mps")) -> list[ParityCase]:
    """The ops suite's cases that have something to compare on each target.

    Floating and complex dtypes everywhere (on the CPU against float64); integer and bool
    dtypes on accelerators only, where the CPU's result is the exact reference. A
    registered stand-in (harness.env.devices.StandIn) is an accelerator with the CPU's dtypes;
    an emulating one (the emulated Mac) has its device's, as the ops sweep gives them.
    """
    out = []
    plain = tuple(name for name in devices.STAND_INS if not devices.is_emulated(name))
    for c in opsweep.emulated(opsweep.cases(targets)):
        stand_ins = plain if "cpu" in c.targets else ()
        if c.dtype in FLOAT_DTYPES:
            ts = c.targets + stand_ins
        elif c.dtype in EXACT_DTYPES and c.pass_ == "forward":
            ts = tuple(t for t in c.targets if t != "cpu") + stand_ins
        else:
            ts = ()
        if ts:
            out.append(ParityCase(c.name, c.variant_name, c.dtype, c.pass_, ts))
    return out


# --------------------------------------------------------------------------- running

@dataclasses.dataclass
class OpParityRun:
    """What comparing one op x dtype x pass on a target gave (``run_case``), for ``judge``.

    ``worst``, ``target_ref``, ``cpu_ref`` and ``vs_cpu`` are comparisons
    (harness.parity.numerics.accuracy: ok, margin, max_abs_err, reason, rule ...): the sample
    that decides (the first that misses, else the one with the largest margin), both sides
    against float64, and the target against the CPU (recorded, not judged)."""
    kind: str                      # the target's rules (devices.rules_of): cpu, cuda, mps or stand-in
    reference: str | None          # what the result was compared with: float64, complex128, cpu
    tolerance: Tolerance
    declared: tuple[str, str] | None = None   # PyTorch's test_compare_cpu declaration, as followed (``followed``)
    not_followed: str | None = None            # a test_compare_cpu skip of PyTorch's this suite compares anyway
    samples: int = 0
    compared: int = 0
    random: int = 0                # set aside: the output is drawn from the RNG
    no_grad: int = 0               # set aside: nothing differentiable
    no_reference: int = 0          # set aside: no float64 kernel
    undefined: int = 0             # set aside: a result C++ leaves undefined (in_range: a conversion out of
    #                                range, a shift by the width or more)
    lacking: str = ""              # set aside (``lacking_dtype``): samples that ask for a dtype the device
    lacked: int = 0                #   lacks (float64 on MPS), the dtype and how many
    inputs: list = dataclasses.field(default_factory=list)   # a digest per sample (samples.fingerprint)
    worst: dict | None = None
    target_ref: dict | None = None
    cpu_ref: dict | None = None
    vs_cpu: dict | None = None
    ties: int = 0                  # index outputs settled among ties
    cpu_off: dict | None = None    # where the CPU, not the target, misses float64
    error: str | None = None       # the op itself failed on the CPU or the target
    cpu_failed: bool = False       # ... on the CPU, where the target is a device: no yardstick
    beyond: int = 0                # set aside: an emulated device's error it doubts itself (``doubt``)
    doubt: str = ""                # why it doubts it (devices.doubt_of), where PyTorch's MPS test expects
    #                                the op to run: only the device can tell
    seconds: float = 0.0


def worse(a: dict | None, b: dict) -> dict:
    """The worse of two comparisons (a miss before a pass, then the larger margin): the one a
    check keeps across its samples."""
    if a is None:
        return b
    if a["ok"] != b["ok"]:
        return a if not a["ok"] else b
    return a if a["margin"] >= b["margin"] else b


def _tolerance(op, key: str, kind: str, dt, dtype: str, pass_: str) -> Tolerance:
    """PyTorch's own per-op tolerance for an accelerator where it declares one, else the table's."""
    override = declarations.tolerance_override(op, kind, dt, pass_) if kind != "cpu" else None
    return Tolerance(*override) if override else tolerances.tolerance(key, dtype)


def run_case(op_key: str, device: str, dtype: str, pass_: str) -> OpParityRun:
    """Compare one op x dtype x pass on ``device`` (a target name: cpu, cuda, mps, or a
    registered stand-in): the worst sample, or the first sample that misses (the samples
    after it are not run).
    """
    import torch
    op = declarations.op_table()[op_key]
    dt = getattr(torch, dtype)
    wide = getattr(torch, WIDE[dtype]) if dtype in WIDE else None
    kind = devices.rules_of(device.split(":")[0])   # the emulated Mac: MPS's declarations and causes
    declared, not_followed = followed(op_key, declarations.compare_cpu(op, kind, dt))
    if kind == "cpu" and declared and declared[0] == declarations.XFAIL:  # a device-vs-CPU expectation
        declared = None
    run = OpParityRun(kind, WIDE.get(dtype, "cpu") if kind != "cpu" else WIDE.get(dtype),
                      _tolerance(op, op_key, kind, dt, dtype, pass_), declared, not_followed)
    if declared and declared[0] == declarations.SKIP:
        return run
    started = time.perf_counter()
    torch.manual_seed(0)
    try:
        for i, sample in enumerate(op.sample_inputs("cpu", dt, requires_grad=pass_ == "backward")):
            run.samples += 1
            run.inputs.append(fingerprint(sample))
            if not in_range(op_key, sample):
                run.undefined += 1
                continue
            asked = lacking_dtype(kind, sample)
            if asked:
                run.lacking, run.lacked = asked, run.lacked + 1
                continue
            try:
                _compare_sample(op, sample, i, device, dt, wide, pass_, run)
            except Exception as exc:
                doubt = _doubt(exc, device, op_key, dtype, pass_)
                if not doubt:
                    raise
                run.beyond, run.doubt = run.beyond + 1, doubt   # only the device can tell: set aside
                continue
            if run.worst is not None and not run.worst["ok"]:
                break  # the first miss decides; the rest would only cost time (sensitivity reruns)
    except _OnTheCPU as exc:  # the yardstick has no result: nothing to hold the device against
        run.error, run.cpu_failed = error_line(exc.__cause__), True
    except Exception as exc:  # the op itself failed on the CPU or the target: no numbers
        run.error = error_line(exc)
    run.seconds = round(time.perf_counter() - started, 4)
    return run


def _doubt(exc: BaseException, device: str, op_key: str, dtype: str, pass_: str) -> str:
    """An emulated Mac's doubt about its own error on a sample (a float64 tensor that torch's
    code made on the CPU's path, which MPS's may not make), kept only where PyTorch's own MPS
    test expects the op to run in this dtype (and its forward, for a backward check): where
    PyTorch expects it to fail, the doubt changes nothing (as in the ops suite:
    harness.ops.opsweep.judge). A sample with a kept doubt is set aside, not judged."""
    doubt = devices.doubt_of(exc)
    if not doubt or not devices.is_emulated(device) or devices.rules_of(device) != "mps":
        return ""
    expects = opsweep.pytorch_expectations(device)
    passes = {"forward", pass_}
    return doubt if all(expects.get(op_key, dtype, p) is None for p in passes) else ""


class _OnTheCPU(Exception):
    """The op failed on the CPU, the yardstick of a device's comparison (its cause chained)."""


def _compare_sample(op, sample, index, device, dt, wide, pass_, run: OpParityRun) -> None:
    try:
        cpu = evaluate(op, sample, pass_, 0, None)
    except Exception as exc:
        if run.kind == "cpu":
            raise
        raise _OnTheCPU() from exc
    if cpu is None:
        run.no_grad += 1
        return
    ref = None
    if wide is not None:
        try:
            ref = wide_reference(op, sample, dt, wide, pass_, like=cpu)
        except Exception:  # the op has no float64 kernel: no reference for this sample
            run.no_reference += 1
    if run.kind != "cpu":
        found = _on_target(op, sample, device, dt, wide, pass_, cpu, ref, run)
        if found is None:
            return
    elif ref is not None:
        found = against_reference(op, sample, cpu, ref, dt, wide, pass_, run.tolerance)
        if not found["ok"] and random_output(op, sample, pass_, cpu):
            run.random += 1
            return
    else:
        return
    found["sample"] = index
    run.compared += 1
    run.worst = worse(run.worst, found)


# --------------------------------------------------------------------------- on an accelerator

def _target_run(op, sample, device: str, dt, pass_: str, cpu, ref) -> tuple[object, list[str]]:
    """The sample on the target, and the ops the MPS fallback named during it. A stand-in
    computes on the CPU inside its context and may replace the result (devices.StandIn):
    the sample is moved to the device inside it, so an emulated device's rules hold from
    the copy on."""
    stand_in = devices.stand_in(device)
    where = devices.place(device)

    def compute():
        out = evaluate(op, convert(sample, dt, dt, where), pass_, 0, None)
        # An output copied to the CPU with non_blocking=True (OpInfo's ``to`` samples) is
        # not there until the device has finished: read after, as a correct program does.
        devices.synchronizer(device)()
        return out
    with fallback.capture() as cap:
        out = stand_in.run(compute, cpu, ref) if stand_in else compute()
    return out, list(getattr(cap, "ops", []) or [])


def _settled(op, sample, pass_: str, result):
    """A gradient among ties in its canonical order (harness.parity.numerics.outputs)."""
    from harness.parity.numerics import outputs
    return outputs.canonical_grad(op.name, sample, result) if pass_ == "backward" else result


def _prepared(op, sample, pass_: str, result, cpu) -> tuple[object, int]:
    """One side's result ready to judge: index outputs that only break ties another way
    than the CPU's settled to the CPU's, gradients among ties in canonical order; and how
    many elements were ties."""
    from harness.parity.numerics import outputs
    if pass_ == "forward":
        return outputs.settle_ties(op.name, sample, result, cpu)
    return _settled(op, sample, pass_, result), 0


def _on_target(op, sample, device: str, dt, wide, pass_: str, cpu, ref, run: OpParityRun) -> dict | None:
    """The target's comparison on one sample: by its accuracy against float64, with the CPU
    as the yardstick (accuracy.compare_accuracy), or, with no float64 reference (integer
    inputs, no float64 kernel), against the CPU at each output dtype's tolerance. None when
    the sample is set aside (its output is drawn from the RNG)."""
    import torch

    from harness.parity.numerics import accuracy
    tol = run.tolerance
    tgt, fell_back = _target_run(op, sample, device, dt, pass_, cpu, ref)
    tgt_s, ties = _prepared(op, sample, pass_, tgt, cpu)
    run.ties += ties
    cpu_s = _settled(op, sample, pass_, cpu)
    ref_s = _prepared(op, sample, pass_, ref, cpu)[0] if ref is not None else None  # float64 breaks ties too

    summing = []   # does the computation sum anything (``accumulates``), asked once where it matters

    def sums() -> bool:
        if not summing:
            summing.append(accumulates(op, sample, pass_))
        return summing[0]

    def compare(target, slack=None) -> dict:
        if ref_s is None:
            return accuracy.compare(target, cpu_s, _by_output_dtype(op, tol), check_dtype=True)
        found = accuracy.compare_accuracy(target, cpu_s, ref_s, tol, dt, tolerances.ACCURACY_FACTOR,
                                          tolerances.ACCURACY_ULPS, slack=slack)
        if withheld(found, sums):
            found = elementwise(accuracy.compare_accuracy(target, cpu_s, ref_s, tol, dt, tolerances.ACCURACY_FACTOR,
                                                          tolerances.ACCURACY_ULPS, slack=slack, normwise=False))
        return found

    sensitivity = []   # the reference's own sensitivity (accuracy.slack_of), made once where asked for

    def slack_of() -> object:
        if not sensitivity:
            sensitivity.append(_settled(op, sample, pass_, accuracy.slack_of(
                ref, [wide_reference(op, sample, dt, wide, pass_, trial, like=cpu) for trial in range(len(TRIALS))])))
        return sensitivity[0]

    found, slack = compare(tgt_s), None
    if not found["ok"] and ref_s is not None:  # a rounding-sized move of the inputs may explain it
        slack = slack_of()
        found = compare(tgt_s, slack)
    if not found["ok"] and random_output(op, sample, pass_, cpu):
        run.random += 1
        return None
    if not found["ok"] and devices.is_emulated(device):
        _machinery_check(op, sample, device, dt, pass_, cpu, lambda result: compare(result, slack)["ok"])
    run.vs_cpu = worse(run.vs_cpu, accuracy.compare(tgt_s, cpu_s, _by_output_dtype(op, tol)))
    if ref_s is not None:
        run.target_ref = worse(run.target_ref, accuracy.compare(tgt_s, ref_s, tol))
        cpu_vs_ref = accuracy.compare(cpu_s, ref_s, tol)
        run.cpu_ref = worse(run.cpu_ref, cpu_vs_ref)
        off = None
        if found["ok"]:   # the CPU judged as the cpu column judges it: its rules and its tolerance
            cpu_tol = tolerances.tolerance(declarations.op_key(op), str(dt).removeprefix("torch."))
            cpu_judged, cpu_slack = cpu_rules(cpu_s, ref_s, cpu_tol, slack_of, sums)
            off = cpu_off(cpu_s, tgt_s, ref_s, tol, cpu_judged, run.samples - 1, cpu_slack, sums)
        if off and (run.cpu_off is None or off["cpu_margin"] > run.cpu_off["cpu_margin"]):
            run.cpu_off = off
    if not found["ok"]:
        dtype = str(dt).removeprefix("torch.")

        def rerun(trial: str) -> bool:
            if trial == "cpu-fallback":
                return bool(fell_back)
            if trial == "nondeterministic":   # other bits that pass: the first order was unlucky
                again, _ = _target_run(op, sample, device, dt, pass_, cpu, ref)
                again_s = _prepared(op, sample, pass_, again, cpu)[0]
                return not accuracy.compare(again_s, tgt_s, tolerances.EXACT)["ok"] and compare(again_s, slack)["ok"]
            if trial == "tf32":
                with devices.tf32(False):
                    again, _ = _target_run(op, sample, device, dt, pass_, cpu, ref)
            else:  # reduced-precision: the target on float32 inputs, rounded back
                wider = torch.complex64 if dt.is_complex else torch.float32
                stand_in = devices.stand_in(device)

                def widened():
                    return narrowed(evaluate(op, convert(sample, dt, wider, devices.place(device)), pass_,
                                             0, dt), wider, dt)
                again = stand_in.run(widened, cpu, ref) if stand_in else widened()
            if not compare(_prepared(op, sample, pass_, again, cpu)[0])["ok"]:
                return False
            if trial == "reduced-precision" and dtype in causes.UNIT_ROUNDOFF and ref_s is not None:
                # float32 is right: is the miss one half precision reaches, or the half kernel's own?
                return causes.half_precision_explains(dtype, causes.tensor_misses(output_triples(tgt_s, cpu_s, ref_s)),
                                                      causes.OP_HALF_PRECISION_REACH)
            return True
        found.update(causes.describe(causes.diagnose(run.kind, dtype, rerun, found), run.kind, dtype),
                     fallback_ops=fell_back)
    return found


def output_triples(target, cpu, reference) -> list[tuple]:
    """(target, cpu, float64) for each floating-point tensor the three results hold in the same
    place (an op's outputs, a backward pass's gradients), for causes.tensor_misses."""
    import torch
    from torch.utils import _pytree
    leaves = [_pytree.tree_leaves(x) for x in (target, cpu, reference)]
    if len({len(x) for x in leaves}) != 1:
        return []
    return [(t, c, r) for t, c, r in zip(*leaves)
            if all(isinstance(x, torch.Tensor) and x.is_floating_point() for x in (t, c, r))]


def cpu_off(cpu, target, ref, tol: Tolerance, cpu_judged: dict, sample: int, slack=None,
            sums=lambda: True) -> dict | None:
    """Where the target passed a sample: the CPU's miss of float64 there, as a finding about
    the CPU (the report lists it apart), or None where the CPU meets float64's rules too.
    ``cpu_judged``: the CPU's result against float64 as the cpu column judges it
    (``cpu_rules``: elementwise, normwise, then with the reference's sensitivity ``slack``), so
    that the page never calls the CPU the inaccurate side of a sample its own column passes
    (linalg.eigh's and cov's float32 gradients, special.i0e's float16 one were, before: they
    pass the cpu column by the sensitivity rule). Its margin counts the elements both give as
    numbers only; where the CPU gives NaN or inf and float64, rounded to the dtype, a number
    (accuracy.non_finite, outside the elements ``slack`` leaves free), the margin is infinite,
    as a NaN is no distance. A mismatch of NaN positions alone where float64 is not finite
    either (fmod and remainder in bfloat16 on the H100: the CPU gave a number where float64
    gives NaN) leaves a margin of 0: the CPU met the rules, and the record said "the CPU is the
    inaccurate side: ... off float64 by 0 (margin 0)"; it is no finding
    (causes.cpu_misses_float64). ``sums``: does the computation sum anything (``accumulates``);
    where it does not, the target is judged element by element here too."""
    from harness.parity.numerics import accuracy
    if cpu_judged["ok"]:
        return None
    target_vs_ref = accuracy.compare(target, ref, tol, normwise=True)
    if not target_vs_ref["ok"] or (not accuracy.compare(target, ref, tol)["ok"] and not sums()):
        return None   # the target missed too: by the whole-output rule, or element by element where nothing sums
    nan = accuracy.non_finite(cpu, ref, slack)
    off = {"cpu_margin": math.inf if nan else cpu_judged["margin"], "cpu_err": cpu_judged["max_abs_err"],
           "target_err": target_vs_ref["max_abs_err"], "sample": sample, **({"cpu_non_finite": nan} if nan else {})}
    return off if causes.cpu_misses_float64(off) else None


def _machinery_check(op, sample, device: str, dt, pass_: str, cpu, passes) -> None:
    """An emulated device's miss that the CPU gives too when its ops go through the
    emulation's machinery without the device's rules (``StandIn.bare``), and not without it,
    is the machinery's: raise BeyondEmulation (the check is skipped: only the device can
    answer it). A miss the CPU's own result has as well (a NaN of its float16 kernel) is the
    CPU's, and is judged as on the cpu column. ``passes`` judges a prepared result as the
    target's was judged."""
    from harness.parity.numerics import accuracy
    with devices.stand_in(device).bare():
        bare = evaluate(op, convert(sample, dt, dt, devices.place(device)), pass_, 0, None)
    bare_s = _prepared(op, sample, pass_, bare, cpu)[0]
    moved = not accuracy.compare(bare_s, _settled(op, sample, pass_, cpu), tolerances.EXACT)["ok"]
    if moved and not passes(bare_s):
        dtype = str(dt).removeprefix("torch.")
        raise devices.BeyondEmulation(
            f"the emulated device cannot tell: the CPU it runs on misses float64 here too ({op.name}, {dtype}, "
            f"{pass_}) when its ops go through the emulation's dispatch machinery without the device's rules, "
            "and not without it (pytorch/pytorch#198118 for complex linalg); only the device itself answers "
            "this check")


def _by_output_dtype(op, tol):
    """``tol`` for floating outputs of floating inputs; for an integer case, each floating
    output is judged at its own dtype's tolerance (atan2 of int32 is a float32), integer
    and bool outputs exactly."""
    if tol.rtol or tol.atol:
        return tol
    return lambda dtype: tolerances.tolerance(op.name, dtype)


def random_output(op, sample, pass_: str, first) -> bool:
    """Is the output drawn from an RNG? Asked only of a mismatch (a random op whose values
    agree anyway, such as dropout with p=0, is compared as it is).

    Yes if the run dispatches an aten op tagged ``nondeterministic_seeded`` that draws from
    the default generator (OpInfo wraps some factories, randn among them, in a fixed seed, so
    the output does not change with the caller's seed, yet float32 and float64 draw
    different streams), or if the output changes with the seed. The tag alone says only that
    an op may draw: attention with ``dropout_p=0`` carries it and draws nothing, and taking
    the tag for a draw excused every mismatch of the CPU's flash attention as random. An op
    drew if the generator's state moved while it ran.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from harness.parity.numerics import accuracy
    seeded = getattr(torch.Tag, "nondeterministic_seeded", None)

    class Seeded(TorchDispatchMode):
        drew = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # a private generator passed explicitly (our fixed grad_outputs) is not the op's randomness
            if seeded is None or seeded not in getattr(func, "tags", ()) or (kwargs or {}).get("generator") is not None:
                return func(*args, **(kwargs or {}))
            before = torch.random.get_rng_state()
            out = func(*args, **(kwargs or {}))
            if not torch.equal(before, torch.random.get_rng_state()):
                Seeded.drew = True
            return out
    with Seeded():
        evaluate(op, sample, pass_, 1, None)
    if Seeded.drew:
        return True
    # Run again outside any dispatch mode: a mode alone can change a kernel's result (torch
    # 2.15's linalg.polar complex64), which would pass a wrong result off as a random one.
    again = evaluate(op, sample, pass_, 1, None)
    return not accuracy.compare(again, first, tolerances.EXACT)["ok"]


# aten ops that compute nothing: they build, view, copy, convert or place values (an
# op with no tensor argument, a factory, and an op returning a view of its input are
# told apart by their schema, ``_moves_only``). Anything not named here and not tagged
# ``pointwise`` counts as summing, so an op this list misses keeps the whole-output rule.
MOVES_ONLY = frozenset({
    "detach", "alias", "lift_fresh", "lift_fresh_copy", "_to_copy", "copy_", "clone", "contiguous",
    "empty_like", "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full", "new_empty",
    "new_empty_strided", "fill_", "zero_", "_local_scalar_dense", "_unsafe_view", "reshape", "cat", "stack",
    "flip", "roll", "constant_pad_nd", "slice_backward", "select_backward", "expand_copy", "view_copy",
    "masked_fill_", "masked_fill", "resolve_conj", "resolve_neg", "_conj", "_neg_view",
})


def _moves_only(func) -> bool:
    """Does the aten op ``func`` compute nothing (MOVES_ONLY, a factory with no tensor
    argument, or a view: a return aliasing an input without writing it)?"""
    import torch
    schema = func._schema
    if func.overloadpacket.__name__ in MOVES_ONLY:
        return True
    if not any(isinstance(a.type, torch.TensorType) or "Tensor" in str(a.type) for a in schema.arguments):
        return True
    return any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)


def accumulates(op, sample, pass_: str) -> bool:
    """Does the op's computation on this sample sum anything, so that an element's error may
    come from the cancellation of large terms and be judged against the output's largest
    value (the whole-output, "normwise" rule)?

    No where every aten op it dispatches on the CPU (the backward's included) is tagged
    ``pointwise`` in PyTorch's native_functions.yaml or computes nothing (``_moves_only``):
    each output element is then a function of the input elements at its own place, and its
    error is judged against its own value, element by element. The whole-output rule would
    let such a kernel be wrong on every small element, e.g. ``log1p`` as ``log(1 + x)``,
    which gives 0 for |x| below float32's epsilon (MPS's before torch 2.8: pytorch/pytorch
    PR 154936 made it a Metal kernel "to improve accuracy for small inputs"), beside one
    large element. A broadcast's backward sums over the broadcast dimensions and keeps the
    rule. Asked only where a result passes by the whole-output rule alone; a run the dispatch
    mode cannot watch (it raises under it) counts as summing."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    pointwise = torch.Tag.pointwise

    class Summing(TorchDispatchMode):
        found: list = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if pointwise not in func.tags and not _moves_only(func):
                Summing.found.append(func)
            return func(*args, **(kwargs or {}))
    Summing.found = []
    try:
        with Summing():
            evaluate(op, sample, pass_, 0, None)
    except Exception:   # a run the probe cannot watch keeps the rule it had
        return True
    return bool(Summing.found)


def withheld(found: dict, sums) -> bool:
    """Should ``found``, a pass by the whole-output rule alone (rule "normwise"), be judged
    element by element instead, since the computation sums nothing (``sums()`` is False)?"""
    return bool(found["ok"]) and found.get("rule") == "normwise" and not sums()


POINTWISE = ("judged element by element: every op it ran is pointwise, so no sum's cancellation excuses an "
             "error against the output's largest value")


def elementwise(found: dict) -> dict:
    """``found``, judged element by element where the whole-output rule was withheld
    (``withheld``), saying so first in its reason (a failure's reason is cut at its end) and
    in ``pointwise``."""
    return {**found, "pointwise": POINTWISE,
            "reason": "; ".join(filter(None, (POINTWISE if not found["ok"] else "", found["reason"])))}


def cpu_rules(result, ref, tol, slack_of, sums) -> tuple[dict, object]:
    """``result`` against float64 by the cpu target's rules, the first that passes:
    elementwise, normwise (cancellation; only where ``sums()``, the computation summing
    anything: ``accumulates``), then elementwise with ``slack_of()`` (the reference's own
    sensitivity to rounding-sized input changes, asked for only here). The comparison (the
    last one where none passes; ``pointwise`` set where the whole-output rule was withheld)
    and the slack it used (None where the first two decided). ``against_reference`` judges
    the cpu column by it, ``cpu_off`` the CPU beside a device."""
    from harness.parity.numerics import accuracy
    found = accuracy.compare(result, ref, tol)
    if found["ok"]:
        return found, None
    normwise = accuracy.compare(result, ref, tol, normwise=True)
    if normwise["ok"] and sums():
        return normwise, None
    slack = slack_of()
    found = accuracy.compare(result, ref, tol, slack=slack)
    return (elementwise(found) if normwise["ok"] and not found["ok"] else found), slack


def against_reference(op, sample, result, ref, dt, wide, pass_, tol) -> dict:
    """``result`` (in ``dt``) against the float64 reference: the first rule that passes.

    elementwise, then normwise (a sum's cancellation: ``accumulates``), then elementwise with the reference's own
    sensitivity to rounding-sized input changes as slack (ill-conditioned inputs, values
    at a bin edge or a rounding boundary). A float16 / bfloat16 result that fails all
    three is a precision limit, told apart by the same computation in float32 (rounded to
    ``dt``): if that meets the reference, ``dt`` is too narrow for this input
    ("narrow-dtype"); if it misses too, the op is ill-conditioned or discontinuous here
    ("ill-conditioned"). A float32 or complex64 result has no such excuse, and neither has
    NaN or inf where float64, rounded to the dtype, is a number (``accuracy.non_finite``):
    that fails with the cause "non-finite", whatever float32 gives.
    """
    import torch

    from harness.parity.numerics import accuracy
    sensitive, slack = cpu_rules(result, ref, tol, lambda: accuracy.slack_of(
        ref, [wide_reference(op, sample, dt, wide, pass_, trial, like=result) for trial in range(len(TRIALS))]),
        lambda: accumulates(op, sample, pass_))
    if sensitive["ok"]:
        return sensitive
    non_finite = accuracy.non_finite(result, ref, slack)
    if non_finite:  # never a precision limit, whatever float32 does
        dtype = str(dt).removeprefix("torch.")
        return {**sensitive, "non_finite": non_finite, "margin": math.inf, **causes.describe("non-finite", "cpu", dtype)}
    if dt not in (torch.float16, torch.bfloat16):
        return sensitive
    try:
        f32 = narrowed(evaluate(op, convert(sample, dt, torch.float32, "cpu"), pass_, 0, dt), torch.float32, dt)
        via32 = accuracy.compare(f32, ref, tol, slack=slack)
    except Exception as exc:  # no float32 kernel to tell the two apart
        via32 = {"ok": False, "margin": None, "reason": error_line(exc)}
    sensitive["precision_limit"] = "narrow-dtype" if via32["ok"] else "ill-conditioned"
    sensitive["float32_margin"] = via32["margin"]
    return sensitive


# --------------------------------------------------------------------------- judging

def more_accurate(first: tuple[str, dict | None], second: tuple[str, dict | None]) -> dict:
    """Two sides' errors against float64 as record metrics (``<side>_ref_err``, from each
    side's worst comparison, where it has one) and which side is nearer float64
    (``more_accurate``: a side's name, or "same")."""
    out = {f"{name}_ref_err": found["max_abs_err"] for name, found in (first, second) if found}
    if len(out) == 2:
        (a, a_err), (b, b_err) = ((name, out[f"{name}_ref_err"]) for name, _ in (first, second))
        out["more_accurate"] = "same" if a_err == b_err else (a if a_err < b_err else b)
    return out


def judge(run: OpParityRun, known: Known | None = None) -> Verdict:
    """The check's verdict and metrics from ``run_case``'s OpParityRun; ``known`` is the
    case's known limit (``ParityCase.known``), if any."""
    tol = run.tolerance
    metrics = {"reference": run.reference, "samples": run.samples, "compared": run.compared, "rtol": tol.rtol,
               "atol": tol.atol, "tolerance_source": tol.source}
    if run.inputs:  # one digest per sample, in order (see fingerprint)
        metrics["inputs"] = " ".join(run.inputs)
    for key in ("random", "no_grad", "no_reference", "undefined", "beyond"):
        if getattr(run, key):
            metrics[f"samples_{key}"] = getattr(run, key)
    if run.lacked:
        metrics.update(samples_lacking_dtype=run.lacked, lacking_dtype=run.lacking)
    if run.not_followed:
        metrics["pytorch_skip_not_followed"] = run.not_followed
    if run.declared and run.declared[0] == declarations.SKIP:
        why = run.declared[1]
        if why == "Skipped!":   # an op this suite has not yet looked into (PYTORCH_SKIPS)
            why = "its declaration gives no reason ('Skipped!')"
        return Verdict(Status.SKIP, Category.PARITY, f"PyTorch does not compare this op with the CPU: {why}", metrics)
    if devices.beyond_emulation(run.error):   # only the device itself can answer
        return devices.cannot_tell(run.error, metrics)
    if run.error and run.cpu_failed:
        return Verdict(Status.SKIP, Category.PARITY, "no CPU result to compare with: the op fails on the CPU here, "
                       f"whatever the device does (the ops suite says whether it runs there): {run.error}", metrics)
    if run.error:
        return Verdict(Status.SKIP, Category.PARITY, f"no result to compare (see the ops suite): {run.error}", metrics)
    worst = run.worst
    beyond = (f"the emulated Mac cannot tell: {run.doubt}; PyTorch's own MPS test expects this op to run here; only "
              f"a Mac answers") if run.beyond else ""
    if worst is None and run.beyond:
        return devices.cannot_tell(f"{beyond} this check", metrics)
    if worst is None:
        why = ("its output is drawn from the RNG" if run.random
               else "no sample has a differentiable output" if run.no_grad
               else "the op has no float64 kernel for a reference" if run.no_reference
               else "every sample's result is undefined in C++ (a conversion of a value its output dtype cannot "
                    "hold, a shift by the width or more)" if run.undefined
               else f"every sample asks for {run.lacking}, which {run.kind.upper()} does not have (see the env "
                    "and ops suites)" if run.lacked
               else "the op has no samples")
        return Verdict(Status.SKIP, Category.PARITY, f"nothing comparable: {why}", metrics)
    on_target = run.kind != "cpu"
    metrics.update({k: worst[k] for k in ("max_abs_err", "max_rel_err", "margin") if k in worst})
    if isinstance(worst.get("sample"), int):
        metrics["worst_sample"] = worst["sample"]
    for key in ("elementwise_margin", "rule", "cause", "cause_what", "switch", "fallback_ops", "pointwise"):
        if worst.get(key) not in (None, [], ""):
            metrics[key] = worst[key]
    if on_target:
        metrics["accuracy_source"] = tolerances.ACCURACY_SOURCE
        if run.ties:
            metrics["ties_settled"] = run.ties
        if run.vs_cpu:  # same-dtype agreement with the CPU: recorded, not judged
            metrics["vs_cpu_max_abs_err"] = run.vs_cpu["max_abs_err"]
            metrics["vs_cpu_margin"] = run.vs_cpu["margin"]
    metrics.update(more_accurate(("target", run.target_ref), ("cpu", run.cpu_ref)))
    expected_to_differ = bool(run.declared and run.declared[0] == declarations.XFAIL)
    if worst["ok"]:
        note = ""
        if run.cpu_off:
            off = run.cpu_off
            metrics["cpu_finding"] = off
            note = (f"the CPU is the inaccurate side: sample {off['sample']} gives {off['cpu_non_finite']} element(s) "
                    f"NaN or inf on the CPU where float64 has a number, and none on the target" if off.get(
                        "cpu_non_finite") else
                    f"the CPU is the inaccurate side: sample {off['sample']} is off float64 by {off['cpu_err']:.3g} "
                    f"on the CPU (margin {off['cpu_margin']:.3g}) and by {off['target_err']:.3g} on the target")
        if run.beyond:
            note = "; ".join(filter(None, (note, f"{run.beyond} sample(s) set aside: {beyond} them")))
        if expected_to_differ:
            return Verdict(Status.XPASS, Category.PARITY, "PyTorch's test_compare_cpu expects this op to differ from "
                           "the CPU here (it asks same-dtype agreement); judged by its accuracy against float64, it "
                           "passes" + (f"; {note}" if note else ""), metrics)
        return Verdict(Status.PASS, Category.PARITY, note, metrics)
    against = "float64" if run.reference in ("float64", "complex128") else run.reference
    if worst.get("non_finite"):
        metrics["non_finite"] = worst["non_finite"]
        if on_target and "non_finite_on_cpu" in worst:   # of them, NaN or inf on the CPU too
            metrics["non_finite_on_cpu"] = worst["non_finite_on_cpu"]
        message = with_cause(f"sample {worst.get('sample')}: {worst['non_finite']} element(s) NaN or inf"
                             + (f"; {worst['reason']}" if worst.get("reason") else ""), worst)
    elif worst.get("cause"):
        cpu_err = worst.get("cpu_max_abs_err")
        message = with_cause(f"sample {worst.get('sample')}: off {against} by {worst['max_abs_err']:.3g}"
                             + (f" ({cpu_err:.3g} on the CPU)" if cpu_err is not None else "")
                             + f", margin {worst['margin']:.3g}"
                             + (f"; {worst['reason']}" if worst.get("reason") else ""), worst)
    else:
        message = (f"sample {worst.get('sample')}: max_abs_err {worst['max_abs_err']:.3g}, margin "
                   f"{worst['margin']:.3g} at rtol={tol.rtol} atol={tol.atol} against {against}: {worst['reason']}")
    if expected_to_differ:
        return Verdict(Status.XFAIL, Category.PARITY, f"PyTorch's test_compare_cpu expects a mismatch here; {message}",
                       metrics)
    if known is not None and known.outcome == "limit":
        return Verdict(Status.XFAIL, Category.PARITY, f"known float32 limit against float64 ({known.reason}); "
                       f"{message}", metrics)
    limit = worst.get("precision_limit")
    if limit:
        metrics.update(precision_limit=limit, float32_margin=worst.get("float32_margin"))
        why = ("float32 on the same inputs meets the reference: the dtype is too narrow here"
               if limit == "narrow-dtype" else
               "float32 on the same inputs misses it too: the op is ill-conditioned or discontinuous here")
        return Verdict(Status.XFAIL, Category.PARITY, f"precision limit ({why}); {message}", metrics)
    return Verdict(Status.FAIL, Category.PARITY, message, metrics)
