"""Op parity: every OpInfo op x dtype x pass, its numbers on a target against the CPU.

For each sample input of an op (OpInfo's own samples, made on the CPU from a fixed seed):

  cpu        the op on the CPU in the case's dtype
  reference  the op on the CPU in float64 (complex128) on the same values: the sample
             upcast exactly, with its strides and storage offset kept, so views such as
             ``as_strided`` and non-contiguous inputs mean the same thing
  target     the op on the target device in the case's dtype (same layout), when the
             target is not the CPU

Backward cases compare the gradients of the inputs, with the same fixed grad_outputs.
The verdict:

  target == cpu   cpu against the float64 reference: elementwise, normwise, or with the
                  reference's own sensitivity (``against_reference``): a low-precision
                  kernel's error on a small element that cancelled is not a bug, a kernel
                  that is off by 1e-3 is.
  target != cpu   the target by its accuracy against the same reference, the CPU's own
                  error in the same dtype as the yardstick (accuracy.compare_accuracy;
                  ``_on_target``): it passes when it meets the cpu target's rules or is no
                  less accurate than the CPU. Outputs by their kind (harness.parity.outputs):
                  integer and bool outputs exactly, index outputs among ties by the values
                  they select, an LU as P @ L @ U. Agreement with the CPU is recorded, not
                  judged. A failure is rerun to name its cause (harness.parity.causes). With no
                  float64 reference (integer inputs, no float64 kernel), against the CPU at
                  each output dtype's tolerance.

Samples that cannot be compared are set aside, not judged: a sample whose output changes
with the RNG seed (random ops), and ops that PyTorch itself declares not comparable with
the CPU (``DecorateInfo(unittest.skip(...), "TestCommon", "test_compare_cpu")`` on the
OpInfo: uninitialised ``empty*``, random ops, and others), with PyTorch's reason.

This module holds the cases and runs them (run_case); the samples are moved, evaluated
and fingerprinted by harness.parity.samples, PyTorch's declarations are read by
harness.parity.op_declarations, and a result becomes a Verdict in harness.parity.op_judge.
"""
from __future__ import annotations

import dataclasses
import time

from harness.core import outcomes
from harness.ops import opsweep
from harness.parity import tolerances
from harness.parity.op_declarations import pytorch_compare_cpu, pytorch_tolerance
from harness.parity.op_judge import KNOWN_LIMITS
from harness.parity.samples import TRIALS, convert, evaluate, fingerprint, narrowed, wide_reference

FLOAT_DTYPES = ("float32", "float16", "bfloat16", "complex64")
EXACT_DTYPES = ("int64", "int32", "uint8", "bool")
WIDE = {"float32": "float64", "float16": "float64", "bfloat16": "float64", "complex64": "complex128"}
# The (rtol, atol) of a verdict are scaled by nothing: the tolerance table is the rule.


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


def cases(targets=("cpu", "cuda", "mps")) -> list[ParityCase]:
    """The ops suite's cases that have something to compare on each target.

    Floating and complex dtypes everywhere (on the CPU against float64); integer and bool
    dtypes on accelerators only, where the CPU's result is the exact reference. A
    registered stand-in (harness.core.devices.StandIn) is an accelerator with the CPU's dtypes.
    """
    from harness.core import devices
    out = []
    for c in opsweep.cases(targets):
        stand_ins = tuple(devices.STAND_INS) if "cpu" in c.targets else ()
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

def _worse(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    if a["ok"] != b["ok"]:
        return a if not a["ok"] else b
    return a if a["margin"] >= b["margin"] else b


def _known_limit(op_key: str, dtype: str, pass_: str) -> str | None:
    """The reason of the check's known limit (op_judge.KNOWN_LIMITS), or None."""
    known = KNOWN_LIMITS.get((op_key, dtype, pass_))
    return known.reason if known else None


def run_case(op_key: str, device: str, dtype: str, pass_: str) -> dict:
    """Compare one op x dtype x pass on ``device`` (a target name: cpu, cuda, mps, or a
    registered stand-in): the worst sample, or the first sample that misses (the samples
    after it are not run).
    """
    import torch
    from harness.core import devices
    from harness.parity import accuracy
    op = opsweep.op_table()[op_key]
    dt = getattr(torch, dtype)
    wide = getattr(torch, WIDE[dtype]) if dtype in WIDE else None
    kind = devices.kind_of(device.split(":")[0])
    tol = (pytorch_tolerance(op, kind, dt, pass_) if kind != "cpu" else None) or tolerances.tolerance(op_key, dtype)
    declared = pytorch_compare_cpu(op, kind, dt)
    if kind == "cpu" and declared and declared[0] == "xfail":  # a device-vs-CPU expectation
        declared = None
    started = time.perf_counter()
    res = {"samples": 0, "compared": 0, "random": 0, "no_grad": 0, "no_reference": 0, "inputs": [],
           "verdict": None, "target_ref": None, "cpu_ref": None, "error": None, "declared": declared,
           "tolerance": dataclasses.asdict(tol), "reference": WIDE.get(dtype, "cpu") if kind != "cpu" else WIDE.get(dtype),
           "kind": kind, "ties": 0, "cpu_off": None, "vs_cpu": None,
           "known_limit": _known_limit(op_key, dtype, pass_)}
    if declared and declared[0] == "skip":
        return {**res, "seconds": 0.0}
    torch.manual_seed(0)
    try:
        for i, sample in enumerate(op.sample_inputs("cpu", dt, requires_grad=pass_ == "backward")):
            res["samples"] += 1
            res["inputs"].append(fingerprint(sample))
            _compare_sample(op, sample, i, device, dt, wide, pass_, tol, res, accuracy, kind != "cpu")
            if res["verdict"] is not None and not res["verdict"]["ok"]:
                break  # the first miss decides; the rest would only cost time (sensitivity reruns)
    except Exception as exc:  # the op itself failed on the CPU or the target: no numbers
        res["error"] = outcomes.error_line(exc)
    res["seconds"] = round(time.perf_counter() - started, 4)
    return res


def _compare_sample(op, sample, index, device, dt, wide, pass_, tol, res, accuracy, on_target: bool) -> None:
    cpu = evaluate(op, sample, pass_, 0, None)
    if cpu is None:
        res["no_grad"] += 1
        return
    ref = None
    if wide is not None:
        try:
            ref = wide_reference(op, sample, dt, wide, pass_, like=cpu)
        except Exception:  # the op has no float64 kernel: no reference for this sample
            res["no_reference"] += 1
    if on_target:
        verdict = _on_target(op, sample, device, dt, wide, pass_, tol, cpu, ref, res)
        if verdict is None:
            return
    elif ref is not None:
        verdict = against_reference(op, sample, cpu, ref, dt, wide, pass_, tol)
        if not verdict["ok"] and random_output(op, sample, pass_, cpu):
            res["random"] += 1
            return
    else:
        return
    verdict["sample"] = index
    res["compared"] += 1
    res["verdict"] = _worse(res["verdict"], verdict)


# --------------------------------------------------------------------------- on an accelerator

def _target_run(op, sample, device: str, dt, pass_: str, cpu, ref) -> tuple[object, list[str]]:
    """The sample on the target, and the ops the MPS fallback named during it. A stand-in
    computes on the CPU inside its context and may replace the result (devices.StandIn)."""
    import torch
    from harness.core import devices
    from harness.ops import audit, fallback
    stand_in = devices.stand_in(device)
    where = "cpu" if stand_in else device

    def compute():
        out = evaluate(op, convert(sample, dt, dt, where), pass_, 0, None)
        # An output copied to the CPU with non_blocking=True (OpInfo's ``to`` samples) is
        # not there until the device has finished: read after, as a correct program does.
        audit.synchronize(torch.device(where))
        return out
    with fallback.capture() as cap:
        out = stand_in.run(compute, cpu, ref) if stand_in else compute()
    return out, list(getattr(cap, "ops", []) or [])


def _settled(op, sample, pass_: str, result):
    """A gradient among ties in its canonical order (harness.parity.outputs)."""
    from harness.parity import outputs
    return outputs.canonical_grad(op.name, sample, result) if pass_ == "backward" else result


def _prepared(op, sample, pass_: str, result, cpu) -> tuple[object, int]:
    """One side's result ready to judge: index outputs that only break ties another way
    than the CPU's settled to the CPU's, gradients among ties in canonical order; and how
    many elements were ties."""
    from harness.parity import outputs
    if pass_ == "forward":
        return outputs.settle_ties(op.name, sample, result, cpu)
    return _settled(op, sample, pass_, result), 0


def _on_target(op, sample, device: str, dt, wide, pass_: str, tol, cpu, ref, res: dict) -> dict | None:
    """The target's verdict on one sample: by its accuracy against float64, with the CPU as
    the yardstick (accuracy.compare_accuracy), or, with no float64 reference (integer
    inputs, no float64 kernel), against the CPU at each output dtype's tolerance. None when
    the sample is set aside (its output is drawn from the RNG)."""
    import torch
    from harness.core import devices
    from harness.parity import accuracy
    kind = devices.kind_of(device.split(":")[0])
    tgt, fell_back = _target_run(op, sample, device, dt, pass_, cpu, ref)
    tgt_s, ties = _prepared(op, sample, pass_, tgt, cpu)
    res["ties"] += ties
    cpu_s = _settled(op, sample, pass_, cpu)
    ref_s = _prepared(op, sample, pass_, ref, cpu)[0] if ref is not None else None  # float64 breaks ties too

    def judge(target, slack=None) -> dict:
        if ref_s is None:
            return accuracy.compare(target, cpu_s, _by_output_dtype(op, tol))
        return accuracy.compare_accuracy(target, cpu_s, ref_s, tol, dt, tolerances.ACCURACY_FACTOR,
                                       tolerances.ACCURACY_ULPS, slack=slack)

    verdict = judge(tgt_s)
    if not verdict["ok"] and ref_s is not None:  # a rounding-sized move of the inputs may explain it
        slack = _settled(op, sample, pass_, accuracy.slack_of(
            ref, [wide_reference(op, sample, dt, wide, pass_, trial, like=cpu) for trial in range(len(TRIALS))]))
        verdict = judge(tgt_s, slack)
    if not verdict["ok"] and random_output(op, sample, pass_, cpu):
        res["random"] += 1
        return None
    res["vs_cpu"] = _worse(res["vs_cpu"], accuracy.compare(tgt_s, cpu_s, _by_output_dtype(op, tol)))
    if ref_s is not None:
        res["target_ref"] = _worse(res["target_ref"], accuracy.compare(tgt_s, ref_s, tol))
        cpu_vs_ref = accuracy.compare(cpu_s, ref_s, tol)
        res["cpu_ref"] = _worse(res["cpu_ref"], cpu_vs_ref)
        if verdict["ok"] and not cpu_vs_ref["ok"] and not accuracy.compare(cpu_s, ref_s, tol, normwise=True)["ok"]:
            target_vs_ref = accuracy.compare(tgt_s, ref_s, tol, normwise=True)
            if target_vs_ref["ok"] and (res["cpu_off"] is None or cpu_vs_ref["margin"] > res["cpu_off"]["cpu_margin"]):
                res["cpu_off"] = {"cpu_margin": cpu_vs_ref["margin"], "cpu_err": cpu_vs_ref["max_abs_err"],
                                  "target_err": target_vs_ref["max_abs_err"], "sample": res["samples"] - 1}
    if not verdict["ok"]:
        from harness.parity import causes
        dtype = str(dt).removeprefix("torch.")

        def rerun(trial: str) -> bool:
            if trial == "cpu-fallback":
                return bool(fell_back)
            if trial == "nondeterministic":
                again, _ = _target_run(op, sample, device, dt, pass_, cpu, ref)
                return not accuracy.compare(_prepared(op, sample, pass_, again, cpu)[0], tgt_s, tolerances.EXACT)["ok"]
            if trial == "tf32":
                with devices.tf32(False):
                    again, _ = _target_run(op, sample, device, dt, pass_, cpu, ref)
            else:  # reduced-precision: the target on float32 inputs, rounded back
                wider = torch.complex64 if dt.is_complex else torch.float32
                stand_in = devices.stand_in(device)

                def widened():
                    return narrowed(evaluate(op, convert(sample, dt, wider, "cpu" if stand_in else device), pass_,
                                            0, dt), wider, dt)
                again = stand_in.run(widened, cpu, ref) if stand_in else widened()
            return judge(_prepared(op, sample, pass_, again, cpu)[0])["ok"]
        verdict.update(causes.describe(causes.diagnose(kind, dtype, rerun), kind, dtype), fallback_ops=fell_back)
    return verdict


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

    Yes if the run dispatches an aten op tagged ``nondeterministic_seeded`` (OpInfo wraps
    some factories, randn among them, in a fixed seed, so the output does not change with
    the caller's seed, yet float32 and float64 draw different streams), or if the output
    changes with the seed.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from harness.parity import accuracy
    seeded = getattr(torch.Tag, "nondeterministic_seeded", None)

    class Seeded(TorchDispatchMode):
        drew = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            # a private generator passed explicitly (our fixed grad_outputs) is not the op's randomness
            if seeded is not None and seeded in getattr(func, "tags", ()) and (kwargs or {}).get("generator") is None:
                Seeded.drew = True
            return func(*args, **(kwargs or {}))
    with Seeded():
        evaluate(op, sample, pass_, 1, None)
    if Seeded.drew:
        return True
    # Run again outside any dispatch mode: a mode alone can change a kernel's result (torch
    # 2.15's linalg.polar complex64), which would pass a wrong result off as a random one.
    again = evaluate(op, sample, pass_, 1, None)
    return not accuracy.compare(again, first, tolerances.EXACT)["ok"]


def against_reference(op, sample, result, ref, dt, wide, pass_, tol) -> dict:
    """``result`` (in ``dt``) against the float64 reference: the first rule that passes.

    elementwise, then normwise (cancellation), then elementwise with the reference's own
    sensitivity to rounding-sized input changes as slack (ill-conditioned inputs, values
    at a bin edge or a rounding boundary). A float16 / bfloat16 result that fails all
    three is a precision limit, told apart by the same computation in float32 (rounded to
    ``dt``): if that meets the reference, ``dt`` is too narrow for this input
    ("narrow-dtype"); if it misses too, the op is ill-conditioned or discontinuous here
    ("ill-conditioned"). A float32 or complex64 result has no such excuse.
    """
    import torch
    from harness.parity import accuracy
    verdict = accuracy.compare(result, ref, tol)
    if verdict["ok"]:
        return verdict
    normwise = accuracy.compare(result, ref, tol, normwise=True)
    if normwise["ok"]:
        return normwise
    slack = accuracy.slack_of(ref, [wide_reference(op, sample, dt, wide, pass_, trial, like=result)
                                  for trial in range(len(TRIALS))])
    sensitive = accuracy.compare(result, ref, tol, slack=slack)
    if sensitive["ok"] or dt not in (torch.float16, torch.bfloat16):
        return sensitive
    try:
        f32 = narrowed(evaluate(op, convert(sample, dt, torch.float32, "cpu"), pass_, 0, dt), torch.float32, dt)
        via32 = accuracy.compare(f32, ref, tol, slack=slack)
    except Exception as exc:  # no float32 kernel to tell the two apart
        via32 = {"ok": False, "margin": None, "reason": outcomes.error_line(exc)}
    sensitive["precision_limit"] = "narrow-dtype" if via32["ok"] else "ill-conditioned"
    sensitive["float32_margin"] = via32["margin"]
    return sensitive
