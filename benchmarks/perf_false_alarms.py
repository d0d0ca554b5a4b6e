"""Benchmark: the perf suite's budget, and its false alarms between clean reruns.

    python benchmarks/perf_false_alarms.py [--runs 3] [--workers 0] [--keep DIR] [-k EXPR]
                                           [--faults slow:softmax,leak,per-shape]
                                           [--faults slow:bmm:2,slow:cat:3,...]  (a broad, uneven slowdown)

Runs `pytest suites/perf -m "perf and cpu" -n WORKERS` (0: serially, as ./compat runs it) RUNS
times on this machine, nothing else changed: the first is kept as the baseline, the others are candidates run against it
(`--baseline`, as `./compat candidate` runs them: a figure that looks like a regression is
measured again in fresh processes). Prints each run's wall time (the budget: within 5 minutes
on a 2-core machine) and what the upgrade check (harness.report.compare) flags in
each candidate: any regression of a clean candidate is a false alarm (the goal: none),
warnings are its "inconclusive" answers. With --faults, one more candidate with the injected
regressions (tests/perf_faults.py) shows what is flagged when something did break. The
figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.report import compare  # noqa: E402


def one_run(run_file: Path, workers: int, select: str | None, faults: str | None = None,
            baseline: Path | None = None) -> float:
    env = dict(os.environ)
    if faults:
        env.update(MPS_COMPAT_SANDBOX_PRELOAD="tests.perf_faults", MPS_COMPAT_PERF_FAULTS=faults)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "suites/perf", "-m", "perf and cpu", "-q", "-p", "no:cacheprovider",
                    "-n", str(workers), "--run-file", str(run_file), *(["-k", select] if select else []),
                    *(["--baseline", str(baseline)] if baseline else [])],
                   cwd=ROOT, capture_output=True, text=True, env=env)
    return time.perf_counter() - start


def flagged(base: Path, cand: Path) -> compare.Comparison:
    return compare.compare(compare.load_side([str(base)]), compare.load_side([str(cand)]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=0, help="pytest-xdist workers (default 0: serially)")
    parser.add_argument("--keep", default=None, help="keep the run files in this directory")
    parser.add_argument("-k", dest="select", default=None, help="pytest -k expression (default: the whole suite)")
    parser.add_argument("--faults", default=None, help="also one run with these injected faults (tests/perf_faults.py)")
    args = parser.parse_args()
    where = Path(args.keep or tempfile.mkdtemp(prefix="perf-false-alarms-"))
    where.mkdir(parents=True, exist_ok=True)
    files, walls = [], []
    for i in range(args.runs):
        path = where / f"clean-{i + 1}.jsonl"
        walls.append(one_run(path, args.workers, args.select, baseline=files[0] if files else None))
        files.append(path)
        print(f"clean run {i + 1}: {walls[-1]:.0f} s", flush=True)
    rows, alarms = [], 0
    for a, b in [(0, j) for j in range(1, len(files))]:
        cmp = flagged(files[a], files[b])
        c = cmp.counts()
        alarms += c["regression"]
        rows.append([f"{a + 1} -> {b + 1}", c["regression"], c["warning"], c["improvement"], c["unchanged"],
                     "; ".join(f"{x.check} ({x.rule})" for x in cmp.regressions)[:200]])
    print(tabulate(rows, headers=["pair", "regressions (false alarms)", "warnings", "improvements", "unchanged",
                                  "which"]))
    pairs = len(rows)
    checks = sum(r[1] + r[2] + r[3] + r[4] for r in rows)
    print(f"\nfalse alarms: {alarms} over {pairs} clean pair(s) ({checks} check comparisons)")
    print(f"wall time per run: {', '.join(f'{w:.0f} s' for w in walls)} (budget 300 s on 2 cores)")
    if args.faults:
        path = where / "faults.jsonl"
        wall = one_run(path, args.workers, args.select, args.faults, baseline=files[0])
        cmp = flagged(files[0], path)
        print(f"\nwith faults {args.faults} ({wall:.0f} s): {len(cmp.regressions)} regression(s)")
        for x in cmp.regressions:
            print(f"  {x.check} [{x.rule}]: {x.detail[:160]}")
    print(f"run files: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
