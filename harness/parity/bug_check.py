"""The known-bug check (parity/<case>/<dtype>/known-bug): a case's samples run on the target,
first, after a dirty cache and, for a case reported wrong in rapid succession, back to
back (run_case), each judged against the float64 reference by the parity rules, and the
worst as a Verdict (judge).
"""
from __future__ import annotations

import math

from harness.core import devices, outcomes
from harness.core.verdict import Verdict
from harness.parity import tolerances
from harness.parity.bug_sizes import choose_size
from harness.parity.bug_target import CHURNS, Target, cast_sample, on_target, tensors_of, to_cpu
from harness.parity.known_bugs import BugCase, by_name, source_metrics

RAPID_RUNS = {"cpu": 8, "stand-in": 8, "cuda": 500, "mps": 500}   # runs a ``rapid`` case's known-bug check judges


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


def run_case(name: str, target: str, dtype: str) -> dict:
    """A case's samples on ``target``, judged: the verdict of the worst run of the worst
    sample, with the size and why, each sample's margin, and where the worst error sits."""
    return on_target(_run_case, name, target, dtype)


def _run_case(case: BugCase, tgt: Target, dtype: str) -> dict:
    import torch
    from torch.utils import _pytree
    from harness.parity import accuracy
    dt = getattr(torch, dtype)
    target = tgt.name
    size, why = choose_size(case, target, dtype)
    tol = tolerances.tolerance(case.op, dtype)
    out = {"case": case.name, "size": size.name, "shape": size.shape, "size_reason": why, "samples": 0, "runs": 0,
           "margins": [], "verdict": None, "raised": None, "cpu_raised": None}
    for index, sample in enumerate(case.make(size.dims)):
        ref = _reference(case, sample, dt)
        try:
            cpu = case.fn(**cast_sample(sample, dt, "cpu"))
        except Exception as exc:  # the CPU cannot compute it either: nothing to hold the target to
            out["cpu_raised"] = outcomes.error_line(exc, 300)
            return out
        out["samples"] += 1
        if target == "cpu":
            verdicts = [("first run", accuracy.compare(cpu, ref, tol, normwise=case.normwise))]
        else:
            rounded = _pytree.tree_map(
                lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else x, ref)
            verdicts = []
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
                    verdict = accuracy.compare_accuracy(result, cpu, ref, tol, dt, tolerances.ACCURACY_FACTOR,
                                                      tolerances.ACCURACY_ULPS, normwise=case.normwise)
                    if not verdict["ok"]:
                        verdict.update(where_worst(result, ref))
                        verdict.update(_diagnose(case, sample, dt, tgt, cpu, ref, rounded, result, tol))
                    verdicts.append((run, verdict))
                    if not verdict["ok"]:
                        break
            except Exception as exc:
                out["raised"] = outcomes.error_line(exc, 300)
                out["verdict"] = {"ok": False, "sample": index, "margin": math.inf, "max_abs_err": math.inf,
                                  "run": run, "reason": f"raised on the target where the CPU computes: "
                                                        f"{out['raised']}"}
                return out
        out["runs"] += len(verdicts)
        run, verdict = max(verdicts, key=lambda rv: (not rv[1]["ok"], rv[1]["margin"]))
        verdict.update(sample=index, run=run)
        out["margins"].append(verdict["margin"])
        best = out["verdict"]
        if best is None or (not verdict["ok"], verdict["margin"]) > (not best["ok"], best["margin"]):
            out["verdict"] = verdict
    out["tolerance"] = tol.source
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
    off = err > worst / 10
    first = int(off.flatten().nonzero()[0]) if bool(off.any()) else flat
    return {"worst_index": index, "off_elements": int(off.sum()),
            "first_off_index": list(map(int, torch.unravel_index(torch.tensor(first), err.shape))) if err.dim()
            else []}


def _diagnose(case: BugCase, sample: dict, dt, tgt: Target, cpu, ref, rounded, first, tol) -> dict:
    """Why a sample failed, by differential reruns (harness.parity.causes): in float32 for a
    half-precision case. A cause counts only where a plain rerun fails
    again: a switch cannot explain a failure that comes and goes (``intermittent``). A
    cause found means the difference is that switch, not the reported bug."""
    import torch
    from torch.utils import _pytree
    from harness.parity import accuracy, causes

    def passes(result) -> bool:
        return accuracy.compare_accuracy(to_cpu(result), cpu, ref, tol, dt, tolerances.ACCURACY_FACTOR,
                                       tolerances.ACCURACY_ULPS, normwise=case.normwise)["ok"]

    if passes(tgt.run(case, sample, dt, cpu, rounded)):
        return {"intermittent": True}

    def rerun(trial: str):
        # "nondeterministic" is not asked: a result that changes between runs is this
        # suite's repeatability finding, not an excuse for a wrong one; "tf32" neither:
        # every run is in full float32 already (Target.run)
        if trial == "reduced-precision":
            wide = tgt.run(case, sample, torch.float32, cpu, rounded)
            return passes(_pytree.tree_map(
                lambda x: x.to(dt) if isinstance(x, torch.Tensor) and x.is_floating_point() else x, wide))
        return None
    kind = devices.kind_of(tgt.name)
    dtype = str(dt).removeprefix("torch.")
    return causes.describe(causes.diagnose(kind, dtype, rerun), kind, dtype)


def judge(result: dict) -> Verdict:
    """A known-bug check's status from run_case's result."""
    case = by_name(result["case"])
    metrics = {**source_metrics(case), "size": result["size"], "shape": result["shape"],
               "size_reason": result["size_reason"], "samples": result["samples"], "runs": result.get("runs", 0)}
    if result.get("cpu_raised"):
        return Verdict("skip", "n/a", f"the CPU cannot compute this case here either ({result['cpu_raised']})",
                         metrics)
    verdict = result["verdict"]
    for key in ("max_abs_err", "max_rel_err", "margin", "cpu_max_abs_err", "rule", "worst_index",
                "first_off_index", "off_elements", "cause", "cause_what", "switch", "run", "intermittent"):
        if verdict.get(key) not in (None, ""):
            metrics[key] = verdict[key]
    metrics.update(worst_sample=verdict.get("sample"), tolerance_source=result.get("tolerance"))
    where = f"{case.source.label} ({case.source.title})"
    if result.get("raised"):
        return Verdict("fail", "raises", f"raises where the CPU computes: {result['raised']}; the bug of {where} "
                         f"({case.what}) at {result['shape']}; report it to PyTorch with this shape", metrics)
    if verdict["ok"]:
        return Verdict("pass", "parity", f"not affected by {where} at {result['shape']}", metrics)
    block = (f"; first element off at {verdict['first_off_index']}, {verdict['off_elements']} element(s) off"
             if verdict.get("first_off_index") else "")
    if verdict.get("cause") not in (None, "unexplained"):
        cause = f"; not the reported bug: {verdict['cause_what']}; {verdict['switch']}"
    else:
        cause = (f"; {'wrong in this run and right when rerun; ' if verdict.get('intermittent') else ''}this machine "
                 f"shows the bug of {where}: {case.what}; avoid the shape or report it to PyTorch with this record")
    return Verdict("fail", "parity", f"sample {verdict.get('sample')}, {verdict.get('run')}, at {result['shape']}: off float64 by "
                     f"{verdict['max_abs_err']:.3g}, margin {verdict['margin']:.3g}{block}{cause}. {verdict['reason']}",
                     metrics)
