"""The repeatability check (parity/<case>/<dtype>/repeatable): the same op on the same inputs,
run back to back and after each allocator state, must give the first run's bits
(run_repeatability), judged as a Verdict (judge_repeatability).
"""
from __future__ import annotations

import math

from harness.core import outcomes
from harness.core.verdict import Verdict
from harness.parity.bug_sizes import choose_size
from harness.parity.bug_target import CHURNS, Target, on_target, tensors_of
from harness.parity.known_bugs import BugCase, by_name, source_metrics

QUICK_REPEATS = 8           # back-to-back reruns in a repeatability check


def _same(a, b) -> bool:
    """The same bits, NaN for NaN."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    return torch.equal(a, b)


def run_repeatability(name: str, target: str, dtype: str) -> dict:
    """The case's last sample (random values) on ``target``: once, then QUICK_REPEATS
    times back to back, then after each allocator state of CHURNS; every result must have
    the first's bits. Returns the runs that differed, and by how much."""
    return on_target(_run_repeatability, name, target, dtype)


def _run_repeatability(case: BugCase, tgt: Target, dtype: str) -> dict:
    import torch
    dt = getattr(torch, dtype)
    target, name = tgt.name, case.name
    size, why = choose_size(case, target, dtype)
    sample = case.make(size.dims)[-1]
    out = {"case": name, "size": size.name, "shape": size.shape, "size_reason": why, "runs": 0, "differing": [],
           "max_abs_diff": 0.0, "raised": None}
    try:
        first = tensors_of(tgt.run(case, sample, dt))
        runs = [(f"back-to-back run {i + 1}", None) for i in range(QUICK_REPEATS)] + [
            (f"run after {how}", how) for how in CHURNS]
        for label, how in runs:
            if how is not None:
                tgt.churn(tensors_of(sample) + first, empty=how == CHURNS[1])
            again = tensors_of(tgt.run(case, sample, dt))
            out["runs"] += 1
            if len(again) != len(first) or not all(_same(a, b) for a, b in zip(again, first)):
                diff = max((float((a.double() - b.double()).abs().nan_to_num(nan=math.inf).max())
                            for a, b in zip(again, first) if a.shape == b.shape and a.numel()), default=math.inf)
                out["differing"].append(label)
                out["max_abs_diff"] = max(out["max_abs_diff"], diff)
    except Exception as exc:
        out["raised"] = outcomes.error_line(exc, 300)
    return out


def judge_repeatability(result: dict) -> Verdict:
    case = by_name(result["case"])
    metrics = {**source_metrics(case, "repeatable"), "size": result["size"], "shape": result["shape"],
               "size_reason": result["size_reason"], "runs": result["runs"], "quick_repeats": QUICK_REPEATS,
               "churns": list(CHURNS)}
    if result.get("raised"):
        return Verdict("skip", "n/a", f"no result to repeat: {result['raised']} (see this case's known-bug check)",
                         metrics)
    if not result["differing"]:
        return Verdict("pass", "repeatable", f"{result['runs']} reruns ({QUICK_REPEATS} back to back, then after "
                         f"{' and after '.join(CHURNS)}) gave the first run's bits", metrics)
    metrics.update(differing=result["differing"], max_abs_diff=result["max_abs_diff"])
    return Verdict("fail", "unrepeatable",
                     f"the same op on the same inputs gave other bits in {len(result['differing'])} of "
                     f"{result['runs']} reruns ({', '.join(result['differing'][:4])}; largest difference "
                     f"{result['max_abs_diff']:.3g}) at {result['shape']}: results depend on what ran or was "
                     f"allocated before, as in {case.source.label} ({case.source.title}); synchronize and empty "
                     f"the cache (torch.mps.synchronize(); torch.mps.empty_cache()) around the op as a stopgap, "
                     f"and report it to PyTorch with this record", metrics)
