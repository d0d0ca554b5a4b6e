"""Benchmark: does buying only the rounds a time budget pays for change verdicts, and what does it save?

    python benchmarks/optim_budget_stop.py [--seeds 20] [--noise 0.02 0.05 0.10] [--side-s 3.3]
                                           [--budget-s 120] [--rounds 6] [--warmup 2]

An undecided time claim buys rounds by doubling them (harness.optim.ratios.compare_time,
compare_family). It used to double until its budget was spent, so the last doubling could
overspend it by almost as much again: seed 003's shorter-max-length pair on an H100 at the
large workload (two sides of about 3.3 s, a 120 s budget) went from 12 rounds (91 s) to 24
(169 s). Now a doubling buys no more rounds than what is left of the budget pays for at the
rounds' mean cost (``ratios.rounds_to_buy``).

This simulates such a claim (a "lower" claim with bound 1.0 and the 5% zone, the H100 pair's
sides, warm-up and first rounds by default) whose true ratio runs across the zone, with the
paired, heavy-tailed round-to-round noise of benchmarks/optim_zone_stop.py, and judges each one
twice on the same durations on a fake clock: with the budget rule, and with the doubling that
ignored it. It prints, per noise level and true ratio, how often the verdicts differ and the
seconds each rule spent, then the totals. Figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from optim_zone_stop import above, durations, on_fake_clock  # noqa: E402

from harness.optim import ratios  # noqa: E402
from harness.optim.ratios import Bound  # noqa: E402


def doubling(done: int, spent: float, budget_s: float, round_s: float, max_rounds: int) -> int:
    """The rule before: as many again as run, up to max_rounds, whatever the budget has left."""
    return min(done, max_rounds - done)


def judged(a, b, bound, args, budget_rule: bool) -> dict:
    found, spent = on_fake_clock(a, b, bound, scale=args.side_s,
                                 replaced=None if budget_rule else {"rounds_to_buy": doubling},
                                 warmup=args.warmup, rounds=args.rounds, budget_s=args.budget_s)
    return {**found, "spent": spent}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=above(1, int, inclusive=True), default=20)
    ap.add_argument("--noise", type=above(0), nargs="+", default=[0.02, 0.05, 0.10])
    ap.add_argument("--side-s", type=above(0), default=3.3, help="a side's mean step, seconds (the H100 pair's)")
    ap.add_argument("--budget-s", type=above(0, inclusive=True), default=120.0,
                    help="a claim's budget (the large workload's)")
    ap.add_argument("--rounds", type=above(2, int, inclusive=True), default=6,
                    help="first rounds (ratios.LONG_ROUNDS for a long round)")
    ap.add_argument("--warmup", type=above(0, int, inclusive=True), default=2)
    args = ap.parse_args(argv)
    bound = Bound("lower", 1.0)
    grid = [round(0.88 + 0.01 * i, 2) for i in range(25)]   # 0.88 .. 1.12
    rows, totals = [], defaultdict(float)
    for noise in args.noise:
        for r in grid:
            differ, spent_old, spent_new, over, firm, opposite = 0, 0.0, 0.0, 0, 0, 0
            for seed in range(args.seeds):
                # the simulated durations come from one stream per claim: both rules read the same
                a, b = durations(r, noise, seed, count=400 + args.warmup)   # max_rounds and the warm-up
                old = judged(a, b, bound, args, budget_rule=False)
                new = judged(a, b, bound, args, budget_rule=True)
                differ += old["category"] != new["category"]
                firm += old["category"] == "inconclusive" != new["category"]   # decided only by the rule
                opposite += {old["category"], new["category"]} == {"holds", "does-not-hold"}
                over += old["spent"] > args.budget_s
                spent_old += old["spent"]
                spent_new += new["spent"]
            rows.append([noise, r, differ, firm, over, spent_old / args.seeds, spent_new / args.seeds])
            totals["claims"] += args.seeds
            totals["verdicts differ"] += differ
            totals["  of which decided with the rule, inconclusive without"] += firm
            totals["  of which holds against does-not-hold"] += opposite
            totals["budget overspent, doubling"] += over
            totals["seconds, doubling"] += spent_old
            totals["seconds, budget rule"] += spent_new
    print(f"a side {args.side_s:g} s, budget {args.budget_s:g} s, {args.warmup} warm-up calls a side, "
          f"{args.rounds} first rounds, bound lower 1.0, zone {ratios.TIME_ZONE:.0%}")
    print(tabulate(rows, headers=("noise (log sd)", "true ratio", "verdicts differ", "decided by the rule alone",
                                  "overspent (doubling)",
                                  "mean s, doubling", "mean s, budget rule"), floatfmt=".2f"))
    print()
    print(tabulate([(k, round(v, 1)) for k, v in totals.items()], headers=("total", "")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
