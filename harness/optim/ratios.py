"""Judging a measured ratio against a claim's bound, and timing two runs against each other.

A claim about ratio = variant / baseline is a ``Bound``: the claims table's kind and the
largest ratio that still holds (harness.optim.claims.holds_bound). ``judge`` says whether an
interval of the ratio holds it, does not, or cannot tell, in the record's words
(harness.core.records.Category: holds, does-not-hold, inconclusive). ``compare_memory``
judges two byte counts (deterministic: the interval is the point); ``compare_time``
interleaves the baseline and the variant (A B B A ...), keeps per-round durations and
judges the median ratio by a seeded bootstrap interval (harness.env.timing, the one place
time is measured), buying more rounds until its budget is spent. Plain data in and out, so a result travels out of a
sandbox child.
"""
from __future__ import annotations

import operator
import statistics
import time
from typing import Any, Callable, NamedTuple

from harness.core.records import Category, ClaimKind
from harness.env.timing import bootstrap_ratio_ci, load_during, timed


class Bound(NamedTuple):
    """What a claim asks of ratio = variant / baseline: below ``limit`` (``ClaimKind.LOWER``,
    strictly: a reduction, so equal bytes do not hold it) or at most ``limit``
    (``ClaimKind.NOT_HIGHER``: a cost within it)."""
    kind: str
    limit: float

    def check(self) -> "Bound":
        if self.kind not in (ClaimKind.LOWER, ClaimKind.NOT_HIGHER):
            raise ValueError(f"unknown bound {self.kind!r}; known: {ClaimKind.LOWER}, {ClaimKind.NOT_HIGHER}")
        if not float(self.limit) > 0:
            raise ValueError(f"a bound's limit must be positive, got {self.limit}")
        return self

    def scaled(self, factor: float) -> "Bound":
        """The same bound on a ratio that is ``factor`` times smaller (a per-sample bound moved
        onto raw step durations that cover other numbers of samples)."""
        return Bound(self.kind, self.limit / factor)

    @property
    def op(self) -> str:
        return "<" if self.kind == ClaimKind.LOWER else "<="


_COMPARE = {"<": operator.lt, "<=": operator.le}


# How far a time ratio's median moves between whole reruns of the suite on one machine, beyond
# what one run's bootstrap interval shows (the interval sees the spread of rounds within a run,
# not the drift between runs: clocks, other tenants, which core a thread lands on). Measured by
# benchmarks/optim_stability.py on the 2-core VM: torch.compile's CPU time ratio gave 0.96, 0.99
# and 1.05 in three runs, each interval narrow enough to exclude 1.0 on its own side. A time
# verdict therefore needs its interval to clear the bound by this much, on either side.
TIME_ZONE = 0.05

# A round (every side's step once) at least this long starts with LONG_ROUNDS rounds instead of
# the workload's count: a step of a second or more is long against launch overhead and timer
# jitter, so its ratio settles in fewer rounds; the interval still decides, and rounds are still
# bought while it cannot (an H100 at the large workload: a checkpointed step of 3.9 s beside the
# accumulated row's 1.6 s, 10 rounds of 5.5 s each where 6 gave the same verdict's interval).
LONG_ROUND_S = 2.0
LONG_ROUNDS = 6


def judge(ci_low: float, ci_high: float, bound: Bound, zone: float = 0.0) -> str:
    """``holds`` when the whole interval satisfies the bound, ``does-not-hold`` when the
    whole interval violates it, else ``inconclusive`` (harness.core.records.Category).

    ``zone`` (relative, >= 0) is an indifference zone around the bound: ``holds`` needs the
    interval to satisfy the bound tightened by (1 + zone), ``does-not-hold`` needs it to
    violate the bound loosened by (1 + zone). A ratio whose true value sits within the zone
    gets no verdict, so run-to-run drift smaller than the zone cannot turn holds into
    does-not-hold. Memory bytes are exact (zone 0); time ratios use TIME_ZONE.
    """
    if zone < 0:
        raise ValueError(f"zone must be >= 0, got {zone}")
    compare, tighter, looser = _edges(bound, zone)
    if all(compare(end, tighter) for end in (ci_low, ci_high)):
        return Category.HOLDS
    if not any(compare(end, looser) for end in (ci_low, ci_high)):
        return Category.DOES_NOT_HOLD
    return Category.INCONCLUSIVE


def undecidable(ci_low: float, ci_high: float, bound: Bound, zone: float) -> bool:
    """Whether more rounds would not decide: the whole interval lies inside the indifference
    ``zone`` around the bound, where ``judge`` gives neither verdict. More rounds narrow the
    interval around the ratio it already brackets, so it stays inside: a time claim whose
    ratio is within the zone of its bound (a technique within 5% of what the claim asks) is
    inconclusive after the first rounds, as it would be after the whole budget. Never with
    a zone of 0 (memory: exact)."""
    if zone <= 0:
        return False
    compare, tighter, looser = _edges(bound, zone)
    return not compare(ci_low, tighter) and compare(ci_high, looser)


def _edges(bound: Bound, zone: float):
    """The bound's comparison and its zone's two edges: the limit tightened and loosened by (1 + zone)."""
    bound = Bound(*bound).check()
    return _COMPARE[bound.op], bound.limit / (1 + zone), bound.limit * (1 + zone)


# Why a time measurement stopped buying rounds (the record's ``stopped``).
DECIDED = "decided"        # the interval gave a verdict
IN_ZONE = "zone"           # undecidable: the interval lies inside the indifference zone
BUDGET = "budget"          # the time budget was spent
MAX_ROUNDS = "max-rounds"  # the most rounds were run


def _stopped(category: str, low: float, high: float, bound: Bound, zone: float, spent: float, budget_s: float,
             rounds: int, max_rounds: int) -> str | None:
    """Why rounds stop now (DECIDED, IN_ZONE, BUDGET, MAX_ROUNDS), or None to buy more."""
    if category != Category.INCONCLUSIVE:
        return DECIDED
    if undecidable(low, high, bound, zone):
        return IN_ZONE
    if spent >= budget_s:
        return BUDGET
    if rounds >= max_rounds:
        return MAX_ROUNDS
    return None


def _why_inconclusive(stopped: str | None, zone: float, budget_s: float, max_rounds: int) -> str:
    return {IN_ZONE: f"; the interval lies inside the {zone:.0%} zone around the bound: more rounds would not "
                     "decide it",
            BUDGET: f"; its time budget of {budget_s:g} s could not pay for another round",
            MAX_ROUNDS: f"; {max_rounds} rounds reached"}.get(stopped, "")


def compare_memory(bytes_a: int, bytes_b: int, bound: Bound) -> dict:
    """A memory claim judged: storage bytes are deterministic, so one reading each is exact."""
    ratio = bytes_b / bytes_a
    return {"mem_ratio": ratio, "ci_low": ratio, "ci_high": ratio, "rounds": 1,
            "category": judge(ratio, ratio, bound), "bytes_a": int(bytes_a), "bytes_b": int(bytes_b)}


# --------------------------------------------------------------------------- time

def compare_time(run_a: Callable[[], Any], run_b: Callable[[], Any], bound: Bound, *,
                 sync: Callable[[], None] | None = None, warmup: int = 2, rounds: int = 10, budget_s: float = 30.0,
                 max_rounds: int = 400, resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                 zone: float = TIME_ZONE) -> dict:
    """Judge a time claim (``bound`` on median(b) / median(a)) about ``run_b`` (the variant)
    against ``run_a`` (the baseline).

    ``warmup`` calls of each are run and discarded (first-call compilation, allocator
    growth, caches). Then rounds alternate A B, B A, ... (ABBA), so slow drift and
    thermal throttling hit both sides alike. A first round of LONG_ROUND_S or more starts
    with at most LONG_ROUNDS rounds (``initial_rounds``). ``sync`` (a Backend's ``synchronize``) is called
    around each timed call; without it only host time is seen on an asynchronous device.

    After ``rounds`` rounds the ratio median(b) / median(a) and its bootstrap interval are
    judged (``judge``, with the indifference ``zone``, default TIME_ZONE); while
    inconclusive, the number of rounds doubles (``rounds_to_buy``: no more than what is left of
    ``budget_s``, warm-up included, pays for) until the budget cannot pay for another round,
    ``max_rounds`` are run, or the interval lies inside the zone (``undecidable``: more rounds
    would not decide it). Checking as rounds
    accumulate makes the interval's coverage somewhat optimistic; the budget bounds it.

    Returns ``time_ratio``, ``ci_low``, ``ci_high``, ``rounds``, ``category`` (the verdict),
    ``reason``, ``stopped`` (why the rounds stopped: DECIDED, IN_ZONE, BUDGET, MAX_ROUNDS),
    ``median_a_s``, ``median_b_s``, ``durations_a`` / ``durations_b`` (seconds per round),
    ``warmup_a_s`` / ``warmup_b_s`` (each warm-up call's seconds: the first holds a compile or a
    cold start), ``zone``, ``seconds`` (wall time spent), ``load`` (the machine's load before and
    after the rounds, harness.env.timing.load_during: both sides share each round's moment,
    yet two techniques do not suffer a busy neighbour alike, so a ratio measured under heavy
    load is compared only with one measured under a like load).
    """
    sync = sync or (lambda: None)
    start = time.perf_counter()
    with load_during() as load:
        warm_a: list[float] = []
        warm_b: list[float] = []
        for _ in range(warmup):
            warm_a.append(timed(run_a, sync))
            warm_b.append(timed(run_b, sync))
        da: list[float] = []
        db: list[float] = []
        target = rounds
        while True:
            while len(da) < target:
                first, second = (run_a, run_b) if len(da) % 2 == 0 else (run_b, run_a)
                t_first, t_second = timed(first, sync), timed(second, sync)
                da.append(t_first if first is run_a else t_second)
                db.append(t_second if first is run_a else t_first)
                if len(da) == 1:
                    target = initial_rounds(target, da[0] + db[0])
            low, high = bootstrap_ratio_ci(da, db, resamples, confidence, seed)
            category = judge(low, high, bound, zone)
            spent = time.perf_counter() - start
            stopped = _stopped(category, low, high, bound, zone, spent, budget_s, target, max_rounds)
            more = 0 if stopped else rounds_to_buy(target, spent, budget_s, (sum(da) + sum(db)) / len(da), max_rounds)
            if not stopped and more == 0:
                stopped = BUDGET
            if stopped:
                break
            target += more
    bound = Bound(*bound)
    median_a, median_b = statistics.median(da), statistics.median(db)
    ratio = median_b / median_a
    reason = (f"ratio {ratio:.3f}, {confidence:.0%} interval [{low:.3f}, {high:.3f}] against ratio {bound.op} "
              f"{bound.limit:.3f}{f' (zone {zone:.0%})' if zone else ''} after {len(da)} rounds")
    reason += _why_inconclusive(stopped, zone, budget_s, max_rounds)
    return {"time_ratio": ratio, "ci_low": low, "ci_high": high, "rounds": len(da), "category": category,
            "reason": reason, "stopped": stopped, "median_a_s": median_a, "median_b_s": median_b,
            "durations_a": da, "durations_b": db, "warmup_a_s": warm_a, "warmup_b_s": warm_b,
            "zone": zone, "seconds": round(spent, 3), "load": load}


def rounds_to_buy(done: int, spent: float, budget_s: float, round_s: float, max_rounds: int) -> int:
    """How many rounds an undecided measurement buys next: as many again as it has run (the
    rounds double), no more than ``max_rounds`` in all, and no more than what is left of its
    budget pays for at ``round_s`` seconds a round (the mean of its rounds so far, both sides).
    0 when not even one more round fits: the budget is a limit, never overspent by a doubling
    (an H100 pair of 6.5 s rounds that had spent 91 s of its 120 s used to double from 12 to 24
    rounds and spend 169 s)."""
    more = min(done, max_rounds - done)
    if round_s > 0:
        more = min(more, int(max(0.0, budget_s - spent) // round_s))
    return max(0, more)


def initial_rounds(rounds: int, round_s: float) -> int:
    """The rounds to judge after first: ``rounds``, or at most LONG_ROUNDS when one round (every
    side once) took LONG_ROUND_S or more."""
    return min(rounds, LONG_ROUNDS) if round_s >= LONG_ROUND_S else rounds


class Pair(NamedTuple):
    """A ratio a family of sides is timed for: ``b`` (the variant) over ``a`` (the baseline),
    judged against ``bound``. A pair that ``drives`` buys more rounds while inconclusive, as
    compare_time does; one that does not is read from the rounds the others bought."""
    a: str
    b: str
    bound: Bound
    drives: bool = True


def compare_family(runs: dict[str, Callable[[], Any]], pairs: dict[str, Pair], *,
                   sync: Callable[[], None] | None = None, warmup: int = 2, rounds: int = 10, budget_s: float = 30.0,
                   max_rounds: int = 400, resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                   zone: float = TIME_ZONE) -> dict:
    """Several sides timed against each other at once: each side runs once per round, so a side
    that several claims share (a baseline, a row of seed 003's path) is timed once for all of
    them, and every pair's ratio comes from rounds that both its sides ran in.

    The same method as ``compare_time``, for more than two sides: ``warmup`` calls of each
    side first, discarded; then rounds, the sides' order reversed every other round (each side
    runs early and late alike, and every two sides swap places, as A B, B A does for two);
    ``rounds`` rounds (``initial_rounds``: fewer when a round, every side once, is long; a pair of
    short sides that these rounds leave undecided buys its own, cheap ones), then each driving
    pair's median ratio judged by its paired bootstrap interval with the indifference
    ``zone``. While a driving pair is inconclusive, rounds double for the sides of the
    undecided pairs alone, until the pair is decided, its interval lies inside the zone
    (``undecidable``), ``max_rounds`` are reached, or what is left of ``budget_s`` cannot pay
    for another round of its two sides (warm-up included: a pair's own budget, as compare_time
    gives one; rounds bought at once are the fewest any undecided pair can pay for). A decided pair's figures are those of the rounds it was decided
    on; a pair that does not drive is read from every round both its sides ran in.

    Returns ``pairs`` (name -> what compare_time returns: ``time_ratio``, ``ci_low``,
    ``ci_high``, ``rounds``, ``category``, ``reason``, ``stopped`` (a driving pair's; None for
    one that does not drive), the medians and durations, ``zone``, ``seconds`` (its two sides'
    time), ``load``), ``sides`` (the sides, in their order), ``warmup_s`` (side -> each warm-up
    call's seconds), ``rounds`` (rounds run) and ``seconds`` (wall time spent).
    """
    sync = sync or (lambda: None)
    names = list(runs)
    for name, pair in pairs.items():
        if pair.a not in runs or pair.b not in runs or pair.a == pair.b:
            raise ValueError(f"pair {name!r}: {pair.a!r} against {pair.b!r} needs two of the sides {names}")
    start = time.perf_counter()
    spent = dict.fromkeys(names, 0.0)   # each side's seconds, warm-up included
    table: list[dict[str, float]] = []  # one round each: side -> seconds
    stop: dict[str, int] = {}           # a driving pair -> the rounds it was decided on
    why: dict[str, str] = {}            # a driving pair -> why it stopped (_stopped)
    results: dict[str, tuple[float, float, str]] = {}
    warm: dict[str, list[float]] = {name: [] for name in names}

    def paired(pair: Pair, upto: int | None = None) -> tuple[list[float], list[float]]:
        rows = [r for r in table[:upto] if pair.a in r and pair.b in r]
        return [r[pair.a] for r in rows], [r[pair.b] for r in rows]

    with load_during() as load:
        for _ in range(warmup):
            for name in names:
                warm[name].append(timed(runs[name], sync))
                spent[name] += warm[name][-1]
        active = [n for n, p in pairs.items() if p.drives]
        running, target = names, rounds
        while True:
            while len(table) < target:
                order = running if len(table) % 2 == 0 else running[::-1]
                row = {name: timed(runs[name], sync) for name in order}
                for name, seconds in row.items():
                    spent[name] += seconds
                table.append(row)
                if len(table) == 1 and pairs:   # long when the round, every side once, is long: what a round costs
                    target = initial_rounds(target, sum(row.values()))
            for name in list(active):
                pair = pairs[name]
                da, db = paired(pair)
                low, high = bootstrap_ratio_ci(da, db, resamples, confidence, seed)
                category = judge(low, high, pair.bound, zone)
                results[name] = (low, high, category)
                stopped = _stopped(category, low, high, pair.bound, zone, spent[pair.a] + spent[pair.b], budget_s,
                                   len(da), max_rounds)
                if stopped:
                    active.remove(name)
                    stop[name], why[name] = len(table), stopped
            if not active or len(table) >= max_rounds:
                why.update(dict.fromkeys(active, MAX_ROUNDS))
                break
            buy = {}   # each undecided pair pays for its rounds from its own budget, at its own rounds' cost
            for name in list(active):
                pair = pairs[name]
                da, db = paired(pair)
                buy[name] = rounds_to_buy(len(table), spent[pair.a] + spent[pair.b], budget_s,
                                          (sum(da) + sum(db)) / len(da), max_rounds)
                if buy[name] == 0:
                    active.remove(name)
                    stop[name], why[name] = len(table), BUDGET
            if not active:
                break
            running = [n for n in names if any(n in (pairs[p].a, pairs[p].b) for p in active)]
            target = len(table) + min(buy[name] for name in active)   # no pair's budget overspent
    out = {}
    for name, pair in pairs.items():
        da, db = paired(pair, stop.get(name))
        if name in results and name in stop:
            low, high, category = results[name]
        else:
            low, high = bootstrap_ratio_ci(da, db, resamples, confidence, seed)
            category = judge(low, high, pair.bound, zone)
        median_a, median_b = statistics.median(da), statistics.median(db)
        ratio = median_b / median_a
        bound = Bound(*pair.bound)
        others = len(names) - 2
        reason = (f"ratio {ratio:.3f}, {confidence:.0%} interval [{low:.3f}, {high:.3f}] against ratio {bound.op} "
                  f"{bound.limit:.3f}{f' (zone {zone:.0%})' if zone else ''} after {len(da)} rounds"
                  + (f", timed in the same rounds as {others} other side(s)" if others else ""))
        reason += _why_inconclusive(why.get(name), zone, budget_s, max_rounds)
        out[name] = {"time_ratio": ratio, "ci_low": low, "ci_high": high, "rounds": len(da), "category": category,
                     "reason": reason, "stopped": why.get(name), "median_a_s": median_a, "median_b_s": median_b,
                     "durations_a": da, "durations_b": db, "zone": zone,
                     "seconds": round(spent[pair.a] + spent[pair.b], 3), "load": load}
    return {"pairs": out, "sides": names, "warmup_s": warm, "rounds": len(table),
            "seconds": round(time.perf_counter() - start, 3)}
