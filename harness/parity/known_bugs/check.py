"""The two checks of a known-bug case, run and judged.

  parity/<case>/<dtype>/known-bug    ``run_case``: the case's samples on the target, first,
                                     after a dirty cache and, for a case reported wrong in
                                     rapid succession, back to back, each judged against the
                                     float64 reference by the parity rules; ``judge`` makes
                                     the worst a Verdict
  parity/<case>/<dtype>/repeatable   ``run_repeatability``: the same op on the same inputs,
                                     run back to back and after each allocator state, must
                                     give the first run's bits; ``judge_repeatability``

Each run function (in the sandbox child) returns a dataclass, ``BugRun`` or ``RepeatRun``,
that its judge (in the pytest process) reads.
"""
from __future__ import annotations

import dataclasses
import math

from harness.core.records import Category, RecordKind, Status, Verdict, error_line, with_cause
from harness.env import devices
from harness.parity.known_bugs.cases import BugCase, by_name, source_metrics
from harness.parity.known_bugs.target import CHURNS, Target, cast_sample, choose_size, on_target, tensors_of, to_cpu
from harness.parity.numerics import accuracy, causes, tolerances

RAPID_RUNS = {"cpu": 8, "stand-in": 8, "cuda": 500, "mps": 500}   # runs a ``rapid`` case's known-bug check judges
QUICK_REPEATS = 8           # back-to-back reruns in a repeatability check


# --------------------------------------------------------------------------- the known-bug check

@dataclasses.dataclass
class BugRun:
    """What running a case's known-bug check on a target gave (``run_case``), for ``judge``."""
    case: str
    size: str                      # the size's name (edge, reported ...)
    shape: str                     # in words
    size_reason: str               # why this size (harness.parity.known_bugs.target.choose_size)
    samples: int = 0
    runs: int = 0                  # runs judged, over every sample
    margins: list = dataclasses.field(default_factory=list)    # the worst run's margin, per sample
    worst: dict | None = None      # the worst run of the worst sample: an accuracy comparison, with
    #                                sample, run, where the error sits and the cause where one was found
    raised: str | None = None      # the target raised where the CPU computes: the error's line
    cpu_raised: str | None = None  # the CPU cannot compute the case either: nothing to judge
    tolerance: str | None = None   # the tolerance's source


def _reference(case: BugCase, sample: dict, dtype) -> object:
    """The float64 reference on the sample's values rounded to ``dtype`` (what the target sees)."""
    import torch
    rounded = cast_sample(cast_sample(sample, dtype, "cpu"), torch.float64, "cpu")
    return case.fn(**rounded)


def _runs(case: BugCase, kind: str) -> list[str]:
    """The runs a known-bug check judges on a target: the first; one after a dirty cache
    (the allocator's free blocks hold NaN); and for a case reported wrong in rapid
    succession, RAPID_RUNS launched back to back on inputs copied once (Target.run
    with ``times``)."""
    runs = ["first run", f"after {CHURNS[0]}"]
    if case.rapid:
        runs += [f"rapid run {i + 1}" for i in range(RAPID_RUNS.get(kind, RAPID_RUNS["cpu"]))]
    return runs


def run_case(name: str, target: str, dtype: str) -> BugRun:
    """A case's samples on ``target``, judged: the worst run of the worst sample, with the
    size and why, each sample's margin, and where the worst error sits."""
    return on_target(_run_case, name, target, dtype)


def _run_case(case: BugCase, tgt: Target, dtype: str) -> BugRun:
    import torch
    from torch.utils import _pytree
    dt = getattr(torch, dtype)
    target = tgt.name
    size, why = choose_size(case, target, dtype)
    tol = tolerances.tolerance(case.op, dtype)
    out = BugRun(case.name, size.name, size.shape, why)
    for index, sample in enumerate(case.make(size.dims)):
        ref = _reference(case, sample, dt)
        try:
            cpu = case.fn(**cast_sample(sample, dt, "cpu"))
        except Exception as exc:  # the CPU cannot compute it either: nothing to hold the target to
            out.cpu_raised = error_line(exc, 300)
            return out
        out.samples += 1
        if target == "cpu":
            judged = [("first run", accuracy.compare(cpu, ref, tol, normwise=case.normwise))]
        else:
            rounded = _pytree.tree_map(
                lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x, ref)
            judged = []
            try:
                runs = _runs(case, tgt.kind)
                rapid = [r for r in runs if r.startswith("rapid run")]
                results = {}
                for run in runs:
                    if run == f"after {CHURNS[0]}":
                        tgt.churn(tensors_of(sample) + tensors_of(cpu), empty=False)
                    if rapid and run == rapid[0]:  # every rapid run launched back to back, then judged
                        results = dict(zip(rapid, tgt.run(case, sample, dt, cpu, rounded, times=len(rapid))))
                    result = results.pop(run, None)
                    if result is None:
                        result = to_cpu(tgt.run(case, sample, dt, cpu, rounded))
                    found = accuracy.compare_accuracy(result, cpu, ref, tol, dt, tolerances.ACCURACY_FACTOR,
                                                      tolerances.ACCURACY_ULPS, normwise=case.normwise)
                    if not found["ok"]:
                        found.update(where_worst(result, ref))
                        found.update(_diagnose(case, sample, dt, tgt, cpu, ref, rounded, tol, found, result))
                    judged.append((run, found))
                    if not found["ok"]:
                        break
            except Exception as exc:
                out.raised = error_line(exc, 300)
                out.worst = {"ok": False, "sample": index, "margin": math.inf, "max_abs_err": math.inf,
                             "run": run, "reason": f"raised on the target where the CPU computes: {out.raised}"}
                return out
        out.runs += len(judged)
        run, found = max(judged, key=lambda rv: (not rv[1]["ok"], rv[1]["margin"]))
        found.update(sample=index, run=run)
        out.margins.append(found["margin"])
        best = out.worst
        if best is None or (not found["ok"], found["margin"]) > (not best["ok"], best["margin"]):
            out.worst = found
    out.tolerance = tol.source
    return out


def where_worst(result, ref) -> dict:
    """The index of the element farthest from the reference (first output), and how many
    elements are off by more than a tenth of that: a bug at an edge shows as a wrong block
    starting at the edge ("wrong past column 1024")."""
    import torch
    r, e = tensors_of(result), tensors_of(ref)
    if not r or not e or r[0].shape != e[0].shape or r[0].numel() == 0 or not r[0].is_floating_point():
        return {}
    err = (r[0].to(torch.float64) - e[0].to(torch.float64)).abs().nan_to_num(nan=math.inf)
    flat = int(err.argmax())
    worst = float(err.flatten()[flat])
    if worst == 0:
        return {}
    index = list(map(int, torch.unravel_index(torch.tensor(flat), err.shape))) if err.dim() else []
    off = err > worst / 10 if math.isfinite(worst) else torch.isinf(err)   # NaN or inf: those elements
    first = int(off.flatten().nonzero()[0]) if bool(off.any()) else flat
    return {"worst_index": index, "off_elements": int(off.sum()),
            "first_off_index": list(map(int, torch.unravel_index(torch.tensor(first), err.shape))) if err.dim()
            else []}


def _diagnose(case: BugCase, sample: dict, dt, tgt: Target, cpu, ref, rounded, tol, found: dict,
              result=None) -> dict:
    """Why a sample failed, by differential reruns (harness.parity.numerics.causes): in float32
    for a half-precision case. A cause counts only where a plain rerun fails again: a switch
    cannot explain a failure that comes and goes (``intermittent``). A cause found means the
    difference is that switch, not the reported bug; where float32 is right but the miss is
    beyond half precision (``result``'s error against float64 past causes.HALF_PRECISION_REACH
    x the CPU's), it is the half-precision kernel's own: no cause excuses it (the attention
    reports are bugs of half-precision kernels alone)."""
    import torch
    from torch.utils import _pytree

    def passes(result) -> bool:
        return accuracy.compare_accuracy(to_cpu(result), cpu, ref, tol, dt, tolerances.ACCURACY_FACTOR,
                                         tolerances.ACCURACY_ULPS, normwise=case.normwise)["ok"]

    if passes(tgt.run(case, sample, dt, cpu, rounded)):
        return {"intermittent": True}
    kind = devices.rules_of(tgt.name)   # the emulated Mac's causes are MPS's
    dtype = str(dt).removeprefix("torch.")
    if found.get("non_finite"):
        # NaN or inf where float64 has a number. All of them the CPU's too: the computation's in
        # this precision, not the reported bug. Some the device's own: the bug, as a kernel that
        # reads past its operands shows it here (Target.churn leaves NaN in the freed memory);
        # no rerun in another precision may excuse a NaN (harness.parity.numerics.causes)
        return causes.describe("non-finite", kind, dtype) if causes.non_finite_shared_with_cpu(found) else {}

    def rerun(trial: str):
        # "nondeterministic" is not asked: a result that changes between runs is this
        # suite's repeatability finding, not an excuse for a wrong one; "tf32" neither:
        # every run is in full float32 already (Target.run)
        if trial == "reduced-precision":
            wide = tgt.run(case, sample, torch.float32, cpu, rounded)
            if not passes(_pytree.tree_map(
                    lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, wide)):
                return False
            if result is None:
                return True
            return causes.half_precision_explains(dtype, causes.tensor_misses(
                zip(tensors_of(result), tensors_of(cpu), tensors_of(ref))))
        return None
    found_cause = causes.diagnose(kind, dtype, rerun, found)
    if found_cause == causes.HALF_KERNEL:   # the reported bug may be this very kernel's: no excuse
        return {}
    return causes.describe(found_cause, kind, dtype)


def judge(run: BugRun) -> Verdict:
    """A known-bug check's verdict from ``run_case``'s BugRun."""
    case = by_name(run.case)
    metrics = {**source_metrics(case), "size": run.size, "shape": run.shape, "size_reason": run.size_reason,
               "samples": run.samples, "runs": run.runs}
    if run.cpu_raised:
        return Verdict(Status.SKIP, Category.NA, f"the CPU cannot compute this case here either ({run.cpu_raised})",
                       metrics)
    worst = run.worst
    for key in ("max_abs_err", "max_rel_err", "margin", "cpu_max_abs_err", "rule", "worst_index",
                "first_off_index", "off_elements", "cause", "cause_what", "switch", "run", "intermittent",
                "non_finite", "non_finite_on_cpu"):
        if worst.get(key) not in (None, ""):
            metrics[key] = worst[key]
    metrics.update(worst_sample=worst.get("sample"), tolerance_source=run.tolerance)
    where = f"{case.source.label} ({case.source.title})"
    if run.raised:
        return Verdict(Status.FAIL, Category.RAISES, f"raises where the CPU computes: {run.raised}; the bug of "
                       f"{where} ({case.what}) at {run.shape}; report it to PyTorch with this shape", metrics)
    if worst["ok"]:
        return Verdict(Status.PASS, Category.PARITY, f"not affected by {where} at {run.shape}", metrics)
    block = (f"; first element off at {worst['first_off_index']}, {worst['off_elements']} element(s) off"
             if worst.get("first_off_index") else "")
    if worst.get("non_finite"):   # no distance to state: the reason counts them, and the CPU's share
        seen = f"sample {worst.get('sample')}, {worst.get('run')}, at {run.shape}: {worst['reason']}{block}"
    else:
        seen = (f"sample {worst.get('sample')}, {worst.get('run')}, at {run.shape}: off float64 by "
                f"{worst['max_abs_err']:.3g}, margin {worst['margin']:.3g}{block}"
                + (f"; {worst['reason']}" if worst.get("reason") else ""))
    if worst.get("cause") not in (None, "unexplained"):
        return Verdict(Status.FAIL, Category.PARITY, with_cause(f"{seen}; not the reported bug", worst), metrics)
    return Verdict(Status.FAIL, Category.PARITY,
                   f"{seen}; {'wrong in this run and right when rerun; ' if worst.get('intermittent') else ''}this "
                   f"machine shows the bug of {where}: {case.what}; avoid the shape or report it to PyTorch with this "
                   "record", metrics)


# --------------------------------------------------------------------------- the repeatability check

@dataclasses.dataclass
class RepeatRun:
    """What rerunning a case for the same bits gave (``run_repeatability``), for ``judge_repeatability``."""
    case: str
    size: str
    shape: str
    size_reason: str
    runs: int = 0                  # reruns made
    differing: list = dataclasses.field(default_factory=list)   # the reruns that gave other bits
    max_abs_diff: float = 0.0
    raised: str | None = None      # no result to repeat: the error's line
    # of the differing reruns, those not as accurate against float64 as the parity rules ask
    # (the known-bug check's judge); None where they could not be judged (the CPU cannot compute it)
    inaccurate: list | None = dataclasses.field(default_factory=list)
    worst_margin: float | None = None   # the largest margin of a differing rerun against float64


def _same(a, b) -> bool:
    """The same bits, NaN for NaN."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    return torch.equal(a, b)


def run_repeatability(name: str, target: str, dtype: str) -> RepeatRun:
    """The case's last sample (random values) on ``target``: once, then QUICK_REPEATS
    times back to back, then after each allocator state of CHURNS; every result must have
    the first's bits. Returns the runs that differed, and by how much."""
    return on_target(_run_repeatability, name, target, dtype)


def _run_repeatability(case: BugCase, tgt: Target, dtype: str) -> RepeatRun:
    import torch
    dt = getattr(torch, dtype)
    size, why = choose_size(case, tgt.name, dtype)
    sample = case.make(size.dims)[-1]
    out = RepeatRun(case.name, size.name, size.shape, why)
    judged = None   # (the CPU's result, float64's, the tolerance): what a differing rerun is held to

    def accurate(result) -> bool | None:
        nonlocal judged
        if judged is None:
            try:
                judged = (case.fn(**cast_sample(sample, dt, "cpu")), _reference(case, sample, dt),
                          tolerances.tolerance(case.op, dtype))
            except Exception:   # the CPU cannot compute it: other bits cannot be told from wrong ones
                judged = ()
        if not judged:
            return None
        found = accuracy.compare_accuracy(result, *judged[:2], judged[2], dt, tolerances.ACCURACY_FACTOR,
                                          tolerances.ACCURACY_ULPS, normwise=case.normwise)
        out.worst_margin = max(out.worst_margin or 0.0, found["margin"])
        return found["ok"]
    try:
        # on the host, as every rerun is: torch.equal across devices raises on CUDA and MPS
        first = tensors_of(to_cpu(tgt.run(case, sample, dt)))
        runs = [(f"back-to-back run {i + 1}", None) for i in range(QUICK_REPEATS)] + [
            (f"run after {how}", how) for how in CHURNS]
        for label, how in runs:
            if how is not None:
                tgt.churn(tensors_of(sample) + first, empty=how == CHURNS[1])
            result = to_cpu(tgt.run(case, sample, dt))
            again = tensors_of(result)
            out.runs += 1
            if len(again) != len(first) or not all(_same(a, b) for a, b in zip(again, first)):
                diff = max((float((a.double() - b.double()).abs().nan_to_num(nan=math.inf).max())
                            for a, b in zip(again, first) if a.shape == b.shape and a.numel()), default=math.inf)
                out.differing.append(label)
                out.max_abs_diff = max(out.max_abs_diff, diff)
                ok = accurate(result)
                if ok is None:
                    out.inaccurate = None
                elif not ok and out.inaccurate is not None:
                    out.inaccurate.append(label)
    except Exception as exc:
        out.raised = error_line(exc, 300)
    return out


def judge_repeatability(run: RepeatRun) -> Verdict:
    """A repeatability check's verdict from ``run_repeatability``'s RepeatRun."""
    case = by_name(run.case)
    metrics = {**source_metrics(case, RecordKind.REPEATABLE), "size": run.size, "shape": run.shape,
               "size_reason": run.size_reason, "runs": run.runs, "quick_repeats": QUICK_REPEATS,
               "churns": list(CHURNS)}
    if run.raised:
        return Verdict(Status.SKIP, Category.NA, f"no result to repeat: {run.raised} (see this case's known-bug check)",
                       metrics)
    if not run.differing:
        return Verdict(Status.PASS, Category.REPEATABLE, f"{run.runs} reruns ({QUICK_REPEATS} back to back, then "
                       f"after {' and after '.join(CHURNS)}) gave the first run's bits", metrics)
    metrics.update(differing=run.differing, max_abs_diff=run.max_abs_diff)
    if run.inaccurate == [] and run.worst_margin is not None:
        # other bits, each as right as the parity rules ask: an order of sums that changes
        # between runs (atomic adds), not the reported wrong results, which the known-bug
        # check judges run by run against float64
        metrics.update(nondeterministic=True, worst_margin=run.worst_margin)
        return Verdict(Status.PASS, Category.REPEATABLE,
                       f"other bits in {len(run.differing)} of {run.runs} reruns (largest difference "
                       f"{run.max_abs_diff:.3g}) at {run.shape}, each as accurate against float64 as the parity "
                       f"rules ask (worst margin {run.worst_margin:.2g}): the op adds up in an order that changes "
                       f"between runs, as atomic adds do, not the wrong results of {case.source.label}; "
                       f"{causes.CAUSES['nondeterministic'].switch['*']} asks for a fixed order", metrics)
    if run.inaccurate:
        metrics["inaccurate"] = run.inaccurate
    return Verdict(Status.FAIL, Category.UNREPEATABLE,
                   f"the same op on the same inputs gave other bits in {len(run.differing)} of "
                   f"{run.runs} reruns ({', '.join(run.differing[:4])}; largest difference "
                   f"{run.max_abs_diff:.3g}) at {run.shape}: results depend on what ran or was "
                   f"allocated before, as in {case.source.label} ({case.source.title}); synchronize and empty "
                   f"the cache (torch.mps.synchronize(); torch.mps.empty_cache()) around the op as a stopgap, "
                   f"and report it to PyTorch with this record", metrics)
