"""Judging a measured ratio against a claim, and timing two runs against each other.

A claim about variant / baseline is a (comparison, bound) (``claim_bound``); ``judge``
says whether an interval holds it, does not, or cannot tell. ``compare_memory`` judges two
byte counts (deterministic: the interval is the point); ``compare_time`` interleaves the
baseline and the variant (A B B A ...), keeps per-round durations and judges the median
ratio by a seeded bootstrap interval (``bootstrap_ratio_ci``), buying more rounds until
its budget is spent. Plain data in and out, so a result travels out of a sandbox child.
"""
from __future__ import annotations

import operator
import statistics
import time
from typing import Any, Callable

VERDICTS = ("holds", "does not hold", "inconclusive")  # what judge() can say


_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def claim_bound(expect) -> tuple[str, float]:
    """A claim about ratio = variant / baseline as (comparison, bound).

    ("lower", f): the variant is lower by at least f x           -> ratio < 1/f
    ("higher", f): the variant is higher by at least f x         -> ratio > f
    ("not higher", t): the variant is at most t x the baseline   -> ratio <= t
    ("not lower", t): the variant is at least 1/t x the baseline -> ratio >= 1/t
    "lower" and "higher" are strict, so ("lower", 1.0) on equal bytes does not hold. A bound
    from harness.optim.claims (``holds_bound``: measured ratio <= bound) is ("not higher", bound).
    """
    kind, factor = expect
    factor = float(factor)
    if factor <= 0:
        raise ValueError(f"claim factor must be positive, got {factor}")
    bounds = {"lower": ("<", 1 / factor), "higher": (">", factor),
              "not higher": ("<=", factor), "not lower": (">=", 1 / factor)}
    if kind not in bounds:
        raise ValueError(f"unknown claim {kind!r}; known: {', '.join(bounds)}")
    return bounds[kind]


# How far a time ratio's median moves between whole reruns of the suite on one machine, beyond
# what one run's bootstrap interval shows (the interval sees the spread of rounds within a run,
# not the drift between runs: clocks, other tenants, which core a thread lands on). Measured by
# benchmarks/optim_stability.py on the 2-core VM: torch.compile's CPU time ratio gave 0.96, 0.99
# and 1.05 in three runs, each interval narrow enough to exclude 1.0 on its own side. A time
# verdict therefore needs its interval to clear the bound by this much, on either side.
TIME_ZONE = 0.05


def judge(ci_low: float, ci_high: float, expect, zone: float = 0.0) -> str:
    """``holds`` when the whole interval satisfies the claim, ``does not hold`` when the whole
    interval violates it, else ``inconclusive``.

    ``zone`` (relative, >= 0) is an indifference zone around the bound: ``holds`` needs the
    interval to satisfy the bound tightened by (1 + zone), ``does not hold`` needs it to violate
    the bound loosened by (1 + zone). A ratio whose true value sits within the zone gets no
    verdict, so run-to-run drift smaller than the zone cannot turn holds into does not hold.
    Memory bytes are exact (zone 0); time ratios use TIME_ZONE.
    """
    if zone < 0:
        raise ValueError(f"zone must be >= 0, got {zone}")
    op, bound = claim_bound(expect)
    tighter, looser = (bound / (1 + zone), bound * (1 + zone)) if op in ("<", "<=") else \
        (bound * (1 + zone), bound / (1 + zone))
    if all(_COMPARE[op](end, tighter) for end in (ci_low, ci_high)):
        return "holds"
    if not any(_COMPARE[op](end, looser) for end in (ci_low, ci_high)):
        return "does not hold"
    return "inconclusive"


def compare_memory(bytes_a: int, bytes_b: int, expect) -> dict:
    """Verdict on a memory claim: storage bytes are deterministic, so one reading each is exact."""
    ratio = bytes_b / bytes_a
    return {"mem_ratio": ratio, "ci_low": ratio, "ci_high": ratio, "rounds": 1, "verdict": judge(ratio, ratio, expect),
            "bytes_a": int(bytes_a), "bytes_b": int(bytes_b), "claim": list(expect)}


# --------------------------------------------------------------------------- time

def bootstrap_ratio_ci(a: list[float], b: list[float], resamples: int = 2000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a), resampling whole rounds.

    Rounds are resampled as pairs (a_i, b_i): an interleaved round shares the machine's
    state of the moment, so keeping pairs keeps drift out of the ratio's spread. Seeded:
    the same durations give the same interval.
    """
    import torch
    if len(a) != len(b) or not a:
        raise ValueError("need the same, non-zero number of rounds for a and b")
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(a), (resamples, len(a)), generator=gen)
    ta = torch.tensor(a, dtype=torch.float64)[idx].quantile(0.5, dim=1)
    tb = torch.tensor(b, dtype=torch.float64)[idx].quantile(0.5, dim=1)
    ratios = tb / ta
    tail = (1 - confidence) / 2
    return float(ratios.quantile(tail)), float(ratios.quantile(1 - tail))


def _timed(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Seconds of one call, the device drained before and after so queued work is inside."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], Any], *, sync: Callable[[], None] | None = None, warmup: int = 1,
                repeats: int = 3) -> float:
    """Median seconds of ``repeats`` calls after ``warmup`` discarded ones (a table's figure,
    not a claim's verdict: verdicts come from compare_time's interleaved rounds)."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    return statistics.median(_timed(fn, sync) for _ in range(repeats))


def compare_time(run_a: Callable[[], Any], run_b: Callable[[], Any], expect=("lower", 1.3), *,
                 sync: Callable[[], None] | None = None, warmup: int = 2, rounds: int = 10, budget_s: float = 30.0,
                 max_rounds: int = 400, resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                 zone: float = TIME_ZONE) -> dict:
    """Judge a time claim about ``run_b`` (the variant) against ``run_a`` (the baseline).

    ``warmup`` calls of each are run and discarded (first-call compilation, allocator
    growth, caches). Then rounds alternate A B, B A, ... (ABBA), so slow drift and
    thermal throttling hit both sides alike. ``sync`` (a Backend's ``synchronize``) is called
    around each timed call; without it only host time is seen on an asynchronous device.

    After ``rounds`` rounds the ratio median(b) / median(a) and its bootstrap interval are
    judged (``judge``, with the indifference ``zone``, default TIME_ZONE); while
    ``inconclusive``, the number of rounds doubles until
    ``budget_s`` seconds (warm-up included) or ``max_rounds`` are spent. Checking as rounds
    accumulate makes the interval's coverage somewhat optimistic; the budget bounds it.

    Returns ``time_ratio``, ``ci_low``, ``ci_high``, ``rounds``, ``verdict``, ``reason``,
    ``median_a_s``, ``median_b_s``, ``durations_a`` / ``durations_b`` (seconds per round),
    ``claim``, ``seconds`` (wall time spent).
    """
    sync = sync or (lambda: None)
    start = time.perf_counter()
    for _ in range(warmup):
        run_a()
        run_b()
    da: list[float] = []
    db: list[float] = []
    target = rounds
    while True:
        while len(da) < target:
            first, second = (run_a, run_b) if len(da) % 2 == 0 else (run_b, run_a)
            t_first, t_second = _timed(first, sync), _timed(second, sync)
            da.append(t_first if first is run_a else t_second)
            db.append(t_second if first is run_a else t_first)
        low, high = bootstrap_ratio_ci(da, db, resamples, confidence, seed)
        verdict = judge(low, high, expect, zone)
        spent = time.perf_counter() - start
        if verdict != "inconclusive" or spent >= budget_s or target >= max_rounds:
            break
        target = min(2 * target, max_rounds)
    op, bound = claim_bound(expect)
    median_a, median_b = statistics.median(da), statistics.median(db)
    ratio = median_b / median_a
    reason = (f"ratio {ratio:.3f}, {confidence:.0%} interval [{low:.3f}, {high:.3f}] against ratio {op} {bound:.3f}"
              f"{f' (zone {zone:.0%})' if zone else ''} after {len(da)} rounds")
    if verdict == "inconclusive":
        reason += (f"; budget of {budget_s:g} s spent" if spent >= budget_s else f"; {max_rounds} rounds reached")
    return {"time_ratio": ratio, "ci_low": low, "ci_high": high, "rounds": len(da), "verdict": verdict,
            "reason": reason, "median_a_s": median_a, "median_b_s": median_b, "durations_a": da, "durations_b": db,
            "claim": list(expect), "zone": zone, "seconds": round(spent, 3)}
