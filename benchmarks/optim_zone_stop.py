"""Benchmark: does stopping a time claim whose interval lies inside the zone change verdicts?

    python benchmarks/optim_zone_stop.py [--seeds 20] [--noise 0.02 0.05 0.10] [--budget-rounds 48]

harness.optim.ratios.compare_time stops buying rounds when the ratio's interval lies wholly
inside the indifference zone around the bound (``undecidable``), where more rounds would
narrow it without ever leaving the zone. This simulates claims whose true ratio runs across
the zone of a "lower" claim (below 1.0, zone 5%) with paired round-to-round noise of the
sizes the recorded CPU runs show (log-ratio standard deviation 0.015 to 0.16 a round, heavy
tailed), and judges each one twice on the same durations: with the zone rule, and without it
(the rounds bought until the budget, as before). Each round costs one second a side on a
fake clock, so the budget is a number of rounds (``--budget-rounds``, the CPU workload's 20 s
over its step of about 0.4 s a round is about 48).

It prints, per noise level and true ratio, how often the verdicts differ and the rounds each
rule ran, then the totals. Targets: no verdict differs where the true ratio is outside the
zone; the rounds saved are where the ratio is inside it. Figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
from collections import defaultdict
from pathlib import Path
from unittest import mock

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.env import timing  # noqa: E402
from harness.optim import ratios  # noqa: E402
from harness.optim.ratios import Bound  # noqa: E402


class Clock:
    """Time that moves only by what a simulated call says it took."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def durations(true_ratio: float, noise: float, seed: int, count: int = 400):
    """Paired step seconds: a round's common factor (the machine's moment) and each side's own
    heavy-tailed noise (Student's t with 4 degrees of freedom), so that the log of a round's
    ratio has standard deviation ``noise``."""
    rng = random.Random(seed)

    def t4() -> float:
        z = rng.gauss(0, 1)
        chi = sum(rng.gauss(0, 1) ** 2 for _ in range(4)) / 4
        return z / chi ** 0.5 / 2 ** 0.5   # t with 4 df has variance 2: scaled to 1

    a, b = [], []
    for _ in range(count):
        common = rng.gauss(0, noise)
        a.append(math.exp(common + noise / 2 ** 0.5 * t4()))
        b.append(true_ratio * math.exp(common + noise / 2 ** 0.5 * t4()))
    return a, b


def above(low: float, kind=float, inclusive: bool = False):
    """An argparse type: a ``kind`` number above ``low`` (or at least it, ``inclusive``); else
    argparse's one-line error and exit status 2."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if value < low or (value == low and not inclusive):
            raise argparse.ArgumentTypeError(f"{text} is not {'at least' if inclusive else 'above'} {low:g}")
        return value
    return parse


def on_fake_clock(a, b, bound, *, scale: float = 1.0, replaced: dict | None = None, **timing_args) -> tuple[dict, float]:
    """``ratios.compare_time`` of two simulated sides whose successive calls take ``scale`` times
    ``a``'s and ``b``'s values on a fake clock, with ``replaced`` (name -> stand-in) put in
    harness.optim.ratios for the call: what it found, and the seconds the clock ran."""
    clock = Clock()

    def side(values):
        it = iter(values)

        def run():
            clock.now += scale * next(it)
        return run

    patches = [mock.patch.object(timing, "time", clock), mock.patch.object(ratios, "time", clock)]
    patches += [mock.patch.object(ratios, name, stand_in) for name, stand_in in (replaced or {}).items()]
    for p in patches:
        p.start()
    try:
        found = ratios.compare_time(side(a), side(b), bound, max_rounds=400, resamples=1000, **timing_args)
        return found, clock.now
    finally:
        for p in patches:
            p.stop()


def judged(a, b, bound, budget_rounds: int, zone_rule: bool) -> dict:
    # each side's mean step is about 1 s: the budget in seconds is about two a round
    found, _ = on_fake_clock(a, b, bound, replaced=None if zone_rule else {"undecidable": lambda *args: False},
                             warmup=0, rounds=6, budget_s=2.0 * budget_rounds)
    return found


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=above(1, int, inclusive=True), default=20)
    ap.add_argument("--noise", type=above(0), nargs="+", default=[0.02, 0.05, 0.10])
    ap.add_argument("--budget-rounds", type=above(0, int, inclusive=True), default=48)
    args = ap.parse_args(argv)
    bound = Bound("lower", 1.0)
    zone = ratios.TIME_ZONE
    grid = [round(0.88 + 0.01 * i, 2) for i in range(25)]   # 0.88 .. 1.12
    rows, totals = [], defaultdict(int)
    for noise in args.noise:
        for r in grid:
            differ = rounds_old = rounds_new = stopped = 0
            for seed in range(args.seeds):
                a, b = durations(r, noise, seed)
                old = judged(a, b, bound, args.budget_rounds, zone_rule=False)
                new = judged(a, b, bound, args.budget_rounds, zone_rule=True)
                differ += old["category"] != new["category"]
                stopped += new["stopped"] == ratios.IN_ZONE
                rounds_old += old["rounds"]
                rounds_new += new["rounds"]
            inside = bound.limit / (1 + zone) <= r < bound.limit * (1 + zone)
            rows.append([noise, r, "inside" if inside else "", stopped, differ, rounds_old / args.seeds,
                         rounds_new / args.seeds])
            key = "inside" if inside else "outside"
            totals[f"{key} claims"] += args.seeds
            totals[f"{key} verdicts differ"] += differ
            totals[f"{key} rounds, no zone rule"] += rounds_old
            totals[f"{key} rounds, zone rule"] += rounds_new
    print(tabulate(rows, headers=("noise (log sd)", "true ratio", "zone", "stopped in zone", "verdicts differ",
                                  "mean rounds, no rule", "mean rounds, rule"), floatfmt=".2f"))
    print()
    print(tabulate(sorted(totals.items()), headers=("total", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
