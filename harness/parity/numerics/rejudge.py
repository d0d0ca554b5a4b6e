"""The accuracy rules applied again to parity records written by an older judge.

The first run on a real accelerator (tests/fixtures/recorded/h100-torch2.11, written when an
accelerator was judged by same-dtype agreement with the CPU) holds, per check, the
target's and the CPU's largest error against float64 (``target_ref_err``,
``cpu_ref_err``) and the agreement it was judged by. Where those numbers suffice, this
says what the accuracy judge (harness.parity.numerics.accuracy.compare_accuracy) makes of each failure;
where they do not (index outputs, decompositions), it says what the new judge does
instead and that only a rerun can tell. Largest errors stand in for the elementwise rule,
so a verdict here is an estimate; the classes are what a reader needs:

  passes: integer inputs, floating output  exactness belonged to integer outputs only
  passes: no less accurate than the CPU    target's error within ACCURACY_FACTOR x the CPU's
  passes: both exact against float64       the two sides differ from each other only
  rerun: a tie in an index output          judged by the values the indices select now
  rerun: defined up to a choice            an LU compared as P @ L @ U now, unique in order
  remains: ... less accurate than the CPU  with the suspected cause where the op says it
  not a parity result                      the run itself failed (no weights, an error)
"""
from __future__ import annotations

import dataclasses

from harness.core.records import Status, recorded_number
from harness.parity.numerics import tolerances

EXACT_INPUTS = ("int64", "int32", "uint8", "bool", "int16", "int8")
# The ops whose comparison today's judge settles another way (harness.parity.numerics.outputs:
# TIES, DEFINED), by name: a report re-judges old records without importing torch.
# tests/test_rejudge.py holds these equal to outputs' tables.
TIE_OPS = frozenset({"argsort", "cummax", "cummin", "kthvalue", "median", "mode", "msort", "nanmedian", "sort",
                     "topk"})
_LU = "defined up to a choice of pivots: compared now as P @ L @ U"
DEFINED_OPS = {"linalg.lu": _LU, "linalg.lu_factor": _LU, "linalg.lu_factor_ex": _LU, "lu": _LU,
               "unique": "its order is undefined with sorted=False: compared now in ascending order, its inverse "
                         "indices and counts following"}


NOT_A_RESULT = "not a parity result"   # the outcome of a record that holds no judged number (not ``has_result``)


@dataclasses.dataclass(frozen=True)
class Rejudged:
    check: str
    target: str
    outcome: str     # "passes" | "rerun" | "remains" | NOT_A_RESULT
    why: str
    cause: str | None = None   # for "remains": the suspected cause (harness.parity.numerics.causes), if any


def has_result(rec: dict) -> bool:
    """Whether a parity record holds a compared result (a margin, or the float64 errors): a
    failure without one is the run's own (no weights, an error before anything was compared),
    which no judge said and none can say again. The report counts such a check apart from the
    numbers found wrong (harness.report.verdict.judged_wrong), as ``classify`` does."""
    met = rec.get("metrics") or {}
    return "margin" in met or "target_ref_err" in met


def classify(rec: dict) -> Rejudged:
    """What the accuracy judge makes of one failed parity record (see the module docstring)."""
    met = rec.get("metrics") or {}
    parts = (rec.get("variant") or "").split("/")
    dtype = parts[0] if parts else ""
    op = rec.get("subject", "")
    out = lambda outcome, why, cause=None: Rejudged(rec["check"], rec.get("target") or "", outcome, why,  # noqa: E731
                                                    cause)
    if not has_result(rec):
        return out(NOT_A_RESULT, f"the run itself failed: {(rec.get('reason') or '')[:120]}")
    if op in TIE_OPS:
        return out("rerun", "a tie in an index output: judged now by the values the indices select (and a "
                            "gradient within each group of equal values)")
    if op in DEFINED_OPS:
        return out("rerun", DEFINED_OPS[op])
    t, c = recorded_number(met.get("target_ref_err")), recorded_number(met.get("cpu_ref_err"))
    if dtype in EXACT_INPUTS and op == "to":
        return out("rerun", "a copy to the CPU with non_blocking=True, compared before it completed (the same "
                            "samples in floating dtypes equal float64 exactly); the judge now synchronizes the "
                            "device before reading")
    if dtype in EXACT_INPUTS:
        err, rel = recorded_number(met.get("max_abs_err")), recorded_number(met.get("max_rel_err"))
        tol = tolerances.TABLE[("default", "float32")]
        if err is not None and (err <= tol.atol or (rel is not None and rel <= tol.rtol)):
            return out("passes", f"integer inputs, floating output: off the CPU by {err:.3g}, within float32's "
                                 f"tolerance (exactness belongs to integer outputs)")
        return out("remains", f"integer inputs: off the CPU by {err} beyond float32's tolerance")
    if t is None or c is None:
        return out("rerun", "no float64 errors on record: only a rerun can judge it by accuracy")
    if t == 0 and c == 0 and op == "to":
        return out("rerun", "the target's result changed between two reads (equal to float64, unequal to the "
                            "CPU): a copy to the CPU with non_blocking=True read before it completed; the judge "
                            "now synchronizes the device before reading")
    if t == 0 and c == 0:
        return out("passes", "both sides equal the float64 result rounded to the dtype; they differ from each "
                             "other only where float64 is not finite either (NaN or inf positions)")
    if t <= tolerances.ACCURACY_FACTOR * c:
        better = "more accurate than" if t < c else "as accurate as"
        return out("passes", f"the target is {better} the CPU: {t:.3g} against {c:.3g} off float64 (within "
                             f"{tolerances.ACCURACY_FACTOR:g}x)")
    times = f"{t / c:.3g} times" if c else "infinitely"
    suspect, cause = "", None
    if dtype in ("float32", "complex64") and tolerances.op_class(op) == "matmul":
        suspect, cause = "; suspected cause: TF32 (a float32 matmul or convolution on a CUDA GPU)", "tf32"
    elif dtype in ("float16", "bfloat16"):
        suspect = f"; suspected cause: {dtype} accumulation (the rerun on float32 inputs tells)"
        cause = "reduced-precision"
    return out("remains", f"the target is {times} less accurate than the CPU: {t:.3g} against {c:.3g} off "
                          f"float64{suspect}", cause)


def rejudge(records: list[dict]) -> list[Rejudged]:
    """Every failed parity record, classified."""
    return [classify(r) for r in records if r.get("suite") == "parity" and r.get("status") == Status.FAIL]
