"""Why an accelerator's result is less accurate than the CPU's, and the switch that changes it.

When a sample fails on a target, it is run again there in differential ways; the first
rerun that passes names the cause (for nondeterminism: a plain second run that gives other
bits and passes, so that the failure was the luck of one order; a second run that differs
and fails as well is no explanation, and the next trial is asked: on CUDA, float16 atomic
adds are nondeterministic and lose precision in every order). The reruns themselves are
made by the caller (harness.parity.ops.check, the property and model checks), which knows
how to run its sample; this module holds the order, the words and the switches, as a table.

  non-finite          NaN or inf where float64, rounded to the dtype, is a number: never a
                      precision limit, whatever float32 does, and named before any rerun
  cpu-fallback        MPS: the fallback warnings named ops of this run (they ran on the CPU)
  nondeterministic    a second run on the same inputs gives other bits, and they pass
  tf32                rerun with TF32 off (devices.tf32(False): cuBLAS and cuDNN in full float32)
  reduced-precision   float16 / bfloat16: the same op on the inputs in float32, rounded back,
                      meets the rules, and the miss is within what keeping sums or intermediates
                      in the narrow dtype can do (``half_precision_explains``)
  half-kernel         float16 / bfloat16: the float32 rerun meets the rules, but the miss is
                      farther than half precision reaches: the half-precision kernel itself is
                      wrong (a masking or indexing path of its own), float32 is right
  unexplained         none of the reruns changes the verdict: a difference in the kernel itself

Why reduced precision needs a bound. MPS has kernels for float16 and bfloat16 alone (the
prefill and decode attention kernels), so a bug in them passes the float32 rerun too: a
causal mask applied per group of 4 query rows in half precision (pytorch#195910) was named
"accumulates or keeps intermediates in float16" with the switch to compute in float32, and
a user read a token leak as a precision trade-off. What half precision can do is bounded by
how often a kernel rounds to the dtype: measured on the CPU's stand-in that rounds every
running sum of a float16 sum or matmul to float16 (tests/standins.py, standin-half-sums),
the autocast models miss float64 by 4.9x (Llama's outputs) and 5.5x (GPT-2's greedy scores)
the CPU's own error in the same dtype; wrong half-precision kernels by far more: the causal
leak of pytorch#195910 by 560x (bfloat16) to 4,900x (float16), a decoding step that ignores
the attention mask by 55x (bfloat16) and 470x (float16) (tests/half_attention_faults.py).
HALF_PRECISION_REACH sits between them. One op of the op sweep has its own,
OP_HALF_PRECISION_REACH (64x): where the CPU computes a gradient exactly, half a unit in the
last place is the only yardstick, and an honest half-precision accumulator passes it by 17x.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

from harness.core.records import recorded_number

# Past this many times the CPU's own error in the same half dtype, a miss is not half
# precision's (the module docstring gives the measurements it sits between).
HALF_PRECISION_REACH = 16.0
# The same for one op of the op sweep (harness.parity.ops.check), where a gradient the CPU
# computes exactly leaves only half a unit in the last place as the yardstick: standin-half-sums
# missed index_fill's float16 and bfloat16 gradients (a broadcast sum) by 16.8x and 17.1x that,
# the largest of its 12 failures that float32 mends in suites/parity/test_op_parity.py (torch
# 2.15); a float16 softmax that indexes its output one place off (tests/test_op_half_kernel.py)
# by 2,045x.
OP_HALF_PRECISION_REACH = 64.0
# Half a unit in the last place at 1: the floor of the CPU's error where it is exact.
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8}


@dataclasses.dataclass(frozen=True)
class Cause:
    name: str
    what: str                 # what happened, in a user's terms ({dtype} is filled in)
    switch: dict              # what changes it, by "kind:precision", kind ("cuda", "mps", "stand-in", "cpu"),
    #                           precision ("half": float16 / bfloat16, "full": any other dtype, "autocast": a
    #                           model run under torch.autocast) or "*" (switch_for)


# The model checks whose weights are in the half dtype (model.half(), torch_dtype=torch.float16):
# everything computes in it, the norms and softmax included
HALF_WEIGHTS = ("the whole model computes in the half dtype (its weights, and with them the norms, the softmax and "
                "the residual sums): load it in float32 (torch_dtype=torch.float32) and run it under torch.autocast, "
                "which keeps reductions, softmax and norms in float32 and still computes the matmuls in the half "
                "dtype; or keep the layers whose numbers matter in float32")

# The model checks that run under torch.autocast: what it leaves in the half dtype
AUTOCAST_FLOAT32 = ("torch.autocast already keeps reductions, softmax and norms in float32, and leaves matmuls and "
                    "convolutions in the half dtype: keep the layers whose numbers matter out of it (`with "
                    "torch.autocast(device_type, enabled=False):` around them, their inputs .float()), or train in "
                    "float32")

CAUSES = {c.name: c for c in (
    Cause("non-finite", "NaN or inf in {dtype} where float64, rounded to {dtype}, is a number: a NaN is never "
          "a rounding error, and it spreads through every later step (typical: a softmax over masked entries, "
          "an overflow inside a sum or a variance)",
          {"autocast": "torch.autocast already keeps softmax, norms and reductions in float32: a NaN under it is "
                       "mostly a fully masked attention row (check the masks, or select the math backend: "
                       "torch.nn.attention.sdpa_kernel(SDPBackend.MATH)) or, in float16, an overflow in a matmul or "
                       "an activation (bfloat16 has float32's range); else keep the layer that overflows out of "
                       "autocast (`with torch.autocast(device_type, enabled=False):` around it, its inputs .float())",
           "weights": "a model in float16 computes its softmax, norms and residual sums in float16, whose range ends "
                      "at 65504: load it in bfloat16 (float32's range) or in float32 under torch.autocast (softmax and "
                      "norms in float32); with padding, check that no query row is fully masked, or select the math "
                      "backend (torch.nn.attention.sdpa_kernel(SDPBackend.MATH)); report it to PyTorch with this record "
                      "where the CPU gives numbers in the same dtype (the reason says whether it does)",
           "half": "compute that part in float32 (torch.autocast keeps softmax, norms and reductions in float32); with "
                   "attention masks, check that no query row is fully masked or select the math backend "
                   "(torch.nn.attention.sdpa_kernel(SDPBackend.MATH)); report it to PyTorch with this sample",
           "cpu:full": "the values overflow or cancel in this dtype on the CPU: rescale them or compute that part in "
                       "float64; with attention masks, check that no query row is fully masked; report it to PyTorch "
                       "with this sample where they fit the dtype",
           "*": "already in full precision, so a wider dtype is no cure: where the CPU gives numbers there (the "
                "reason says whether it does), compute that op on the CPU (x.cpu()) or avoid the shape until the "
                "kernel is fixed, and report it to PyTorch with this sample; where the CPU gives NaN or inf too, the "
                "values overflow the dtype: rescale them; with attention masks, check that no query row is fully "
                "masked or select the math backend (torch.nn.attention.sdpa_kernel(SDPBackend.MATH))"}),
    Cause("cpu-fallback", "ran on the CPU through the MPS fallback (PYTORCH_ENABLE_MPS_FALLBACK=1): the mismatch "
          "is in the copy to or from the device, or in ops around the fallback",
          {"*": "see which ops fell back (the ops suite's record of this op) and report it to PyTorch"}),
    Cause("nondeterministic", "two runs on the same inputs give different results (atomic adds in another order), "
          "and the second is within the rules: the first run's order was an unlucky one",
          {"autocast": AUTOCAST_FLOAT32 + " (some orders of the same half-precision additions miss; "
                       "torch.use_deterministic_algorithms(True) only fixes the order)",
           "half": "compute it in float32 (x.float(), or autocast, which keeps reductions in float32): in half "
                   "precision some orders of the same additions miss, and "
                   "torch.use_deterministic_algorithms(True) only fixes the order (where the op has a deterministic kernel at all), not how much each order loses",
           "*": "torch.use_deterministic_algorithms(True) (CUDA also needs CUBLAS_WORKSPACE_CONFIG=:4096:8)"}),
    Cause("tf32", "computed in TF32 (cuDNN's default for float32 convolutions on Ampere and newer; matmuls too "
          "when torch.backends.cuda.matmul.allow_tf32 or torch.set_float32_matmul_precision('high') allows it)",
          {"*": "for full float32: torch.backends.cudnn.allow_tf32 = False and torch.backends.cuda.matmul.allow_tf32 "
                "= False (torch >= 2.9: torch.backends.fp32_precision = 'ieee'); where cuDNN's flags are frozen "
                "(after torch.testing._internal.common_utils is imported) use the context "
                "`with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=False, "
                "allow_tf32=False)`, which resets every flag it is not given"}),
    Cause("reduced-precision", "accumulates or keeps intermediates in {dtype}: the same op on float32 inputs, "
          "rounded to {dtype}, meets float64",
          {"autocast": AUTOCAST_FLOAT32, "weights": HALF_WEIGHTS,
           "cuda:autocast": AUTOCAST_FLOAT32 + "; for float16 matmuls also "
                            "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False",
           "cuda": "compute it in float32 (x.float(), or autocast, which keeps reductions in float32); for matmuls "
                   "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False (allow_bf16_... for "
                   "bfloat16)",
           "*": "compute it in float32 (x.float(), or autocast, which keeps reductions in float32)"}),
    Cause("half-kernel", "the {dtype} kernel itself gives wrong numbers: the same op on float32 inputs, rounded "
          "to {dtype}, meets float64, but the {dtype} result misses it by more than "
          f"{HALF_PRECISION_REACH:g}x (one op: {OP_HALF_PRECISION_REACH:g}x) the CPU's own {{dtype}} error, farther "
          "than keeping sums or intermediates in {dtype} reaches (a masking, indexing or blocking path of the "
          "half-precision kernel, not its rounding)",
          {"autocast": "report it to PyTorch with this record: the float16/bfloat16 kernel is wrong where float32 is "
                       "right; until it is fixed, keep that layer out of torch.autocast (`with "
                       "torch.autocast(device_type, enabled=False):` around it, its inputs .float())",
           "weights": "report it to PyTorch with this record: the float16/bfloat16 kernel is wrong where float32 is "
                      "right; until it is fixed, load the model in float32 (torch_dtype=torch.float32) and run it "
                      "without autocast, which would hand attention the same half-precision kernel",
           "*": "report it to PyTorch with this sample (the record's worst example): the float16/bfloat16 kernel is "
                "wrong where float32 is right; until it is fixed, compute that op in float32 (x.float())"}),
    Cause("unexplained", "none of the reruns (TF32 off, float32 inputs, a second run) changes it: a difference in "
          "the kernel itself", {"*": "report it to PyTorch with this sample (the record's worst_sample and inputs)"}),
)}

ORDER = ("cpu-fallback", "nondeterministic", "tf32", "reduced-precision")
HALF_KERNEL = "half-kernel"


def half_precision_explains(dtype: str, misses, reach: float = HALF_PRECISION_REACH) -> bool | str:
    """Whether a float16 / bfloat16 miss whose float32 rerun meets the rules is one half
    precision can explain: True, or HALF_KERNEL where it is not (the kernel itself).

    ``misses``: for each failing output, (the target's error against float64, the CPU's
    error against float64 in the same dtype, the output's largest magnitude in float64). A
    miss is explained where the target's error is at most ``reach`` (HALF_PRECISION_REACH;
    OP_HALF_PRECISION_REACH for one op of the op sweep) x the larger
    of the CPU's error and half a unit in the last place of the dtype at that magnitude (a
    CPU that is exact there gives no yardstick of its own). NaN or inf are named before any
    rerun (``diagnose``); an error that is not a number is not explained."""
    unit = UNIT_ROUNDOFF[dtype]
    for target_err, cpu_err, scale in misses:
        floor = max(cpu_err if math.isfinite(cpu_err) else 0.0, unit * scale)
        if not target_err <= reach * floor:
            return HALF_KERNEL
    return True


def tensor_misses(triples) -> list[tuple[float, float, float]]:
    """``half_precision_explains``' misses from (target, cpu, float64) tensors: the largest
    absolute error of each side against float64 over the elements all three give as numbers
    (NaN and inf are another cause's), and float64's largest magnitude there."""
    import torch
    out = []
    for target, cpu, reference in triples:
        t, c, r = (x.detach().to("cpu", torch.float64) for x in (target, cpu, reference))
        if t.shape != r.shape or c.shape != r.shape:
            continue
        finite = torch.isfinite(t) & torch.isfinite(c) & torch.isfinite(r)
        if not bool(finite.any()):
            continue
        t, c, r = t[finite], c[finite], r[finite]
        out.append((float((t - r).abs().max()), float((c - r).abs().max()), float(r.abs().max())))
    return out


def trials_for(kind: str, dtype: str) -> list[str]:
    """The reruns that can tell something on a target of this kind in this dtype."""
    out = ["cpu-fallback"] if kind == "mps" else []
    out.append("nondeterministic")
    if dtype not in ("float16", "bfloat16", "float64") and kind in ("cuda", "stand-in"):
        out.append("tf32")  # float32 and complex64, and integer cases whose ops compute in float32 (cov)
    if dtype in ("float16", "bfloat16"):
        out.append("reduced-precision")
    return out


def diagnose(kind: str, dtype: str, rerun: Callable[[str], bool | None], *found: dict) -> str:
    """The first cause whose rerun says yes. ``rerun(trial)`` returns True when that trial
    explains the failure (the rerun passes; for nondeterministic, a plain second run differs
    from the first and passes; for cpu-fallback, the run fell back), False when not, None when
    it cannot tell, or another cause's name where the rerun names that one (the
    reduced-precision trial names HALF_KERNEL where float32 meets the rules and the miss is
    beyond half precision: ``half_precision_explains``).

    ``found``: the failing comparisons. One that saw NaN or inf where float64 has a number
    (``non_finite``, from harness.parity.numerics.accuracy) is "non-finite" with no rerun:
    a float32 rerun that meets float64 would otherwise excuse it as reduced precision, and
    a NaN is the one result that no precision explains."""
    if any(f.get("non_finite") for f in found):
        return "non-finite"
    for trial in trials_for(kind, dtype):
        try:
            said = rerun(trial)
            if isinstance(said, str) and said in CAUSES:
                return said
            if said:
                return trial
        except Exception:  # a rerun that cannot run (no float32 kernel ...) tells nothing
            continue
    return "unexplained"


def non_finite_shared_with_cpu(metrics: dict, share: str = "non_finite_on_cpu") -> bool | None:
    """Whether a record's NaN or inf (``non_finite`` in its metrics) are all the CPU's too
    (``non_finite_on_cpu``: the same elements NaN or inf in the CPU's result of the same sample
    and precision, harness.parity.numerics.accuracy): True, the failure is the computation's in
    that precision, not the device's, and moving to the CPU mends none; False, some are the
    device's alone; None where the record cannot say (no NaN, no count: an older judge's, or
    the CPU's own record, which has no CPU beside it). ``share``: the metric that counts the
    yardstick's share, where the yardstick is another run (``non_finite_in_eager``: a compiled
    check's, eager on the same device)."""
    bad, shared = metrics.get("non_finite"), metrics.get(share)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (bad, shared)) or bad <= 0:
        return None
    return shared >= bad


def cpu_misses_float64(finding) -> bool:
    """Whether a record's finding about the CPU (``cpu_finding``: the target passed, and the
    CPU's own run in the same dtype was held to float64's rules) is one: the CPU's margin
    past 1 (infinite where it gives NaN or inf where float64 has a number), or, for greedy
    generation, its tokens parting from float64's (``cpu_verdict``). A margin of 1 or less is
    the CPU meeting the rules, whatever else the record says: the H100's fmod and remainder in
    bfloat16 (11-24) were written "the CPU is the inaccurate side: ... off float64 by 0 on
    the CPU (margin 0)", a NaN position float64 itself does not give a number at, and the
    report listed and counted them as findings about the CPU."""
    if not isinstance(finding, dict):
        return False
    margin = recorded_number(finding.get("cpu_margin"))
    return (margin is not None and margin > 1) or finding.get("cpu_verdict") == "diverged"


def switch_for(cause: Cause, kind: str, dtype: str, autocast: bool = False, weights: bool = False) -> str:
    """The switch of ``cause`` on a target of ``kind`` in ``dtype``: the most particular entry of
    its table, "kind:precision", then the kind, then the precision ("half" for float16 and
    bfloat16, "full" for the rest: "compute it in float32" is no advice where it already is),
    then "*". ``autocast``: a model run under torch.autocast in ``dtype``, where "autocast"
    (after "kind:autocast") comes first: "use autocast" is no advice there. ``weights``: a
    model whose weights are in ``dtype`` (``model.half()``, ``torch_dtype=torch.float16``),
    where "weights" (after "kind:weights") comes first: norms and softmax compute in the half
    dtype too, and the cure is the model's dtype, not one op's. A switch names no dtype: the
    report shows one per cause for the float16 and bfloat16 checks together
    (harness.report.verdict.failure_groups)."""
    precision = "half" if dtype in ("float16", "bfloat16") else "full"
    first = ()
    if precision == "half":
        first = (f"{kind}:autocast", "autocast") if autocast else (f"{kind}:weights", "weights") if weights else ()
    key = next((k for k in (*first, f"{kind}:{precision}", kind, precision) if k in cause.switch), "*")
    return cause.switch[key]


def describe(cause: str, kind: str, dtype: str, autocast: bool = False, weights: bool = False) -> dict:
    """The cause as record metrics: cause, cause_what, switch (``autocast``, ``weights``: switch_for's)."""
    c = CAUSES[cause]
    return {"cause": cause, "cause_what": c.what.format(dtype=dtype),
            "switch": switch_for(c, kind, dtype, autocast, weights)}
