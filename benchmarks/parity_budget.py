"""Benchmark: what the parity suite costs on this machine, against an earlier revision.

    python benchmarks/parity_budget.py [--against REV] [--runs 1] [-m "parity and cpu"] [-n 2]

Runs `pytest suites/ -m "parity and cpu"` (the selection a user runs by default: the
families under markers of their own, such as `compile`, stay out unless -m names them) in
this checkout and, with --against, in a temporary git worktree of REV, alternating the two
so a machine that slows down meanwhile slows both alike. Prints each run's wall time and
counts, the seconds per test file (summed from the run file's durations), and the ratio of
the medians. The budget of issue 24: the new numerics families grow the default `parity and
cpu` run by at most 30% on a 2-core machine. Printed, never asserted: a timed unit test
would fail on a busy machine for no fault of the code.

The venv is this checkout's (`./compat setup`); the worktree is removed afterwards.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)\b")


def run_once(where: Path, marker: str, workers: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_file = Path(tmp) / "run.jsonl"
        cmd = [sys.executable, "-m", "pytest", "suites/", "-m", marker, "-q", "-p", "no:cacheprovider",
               "-n", workers, "--run-file", str(run_file)]
        start = time.perf_counter()
        res = subprocess.run(cmd, cwd=where, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        per_file: dict[str, float] = collections.Counter()
        if run_file.exists():
            for line in run_file.read_text().splitlines():
                rec = json.loads(line)
                node = rec.get("nodeid") or rec.get("check", "")
                if "duration_s" in rec:
                    per_file[node.split("::")[0] if "::" in node else rec.get("suite", "?")] += rec["duration_s"]
    tail = [ln for ln in res.stdout.strip().splitlines() if COUNTS.search(ln)]
    counts = {kind: int(n) for n, kind in COUNTS.findall(tail[-1])} if tail else {}
    return {"seconds": seconds, "exit": res.returncode, "counts": counts, "per_file": dict(per_file)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", help="a git revision to compare with (run in a temporary worktree)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("-m", dest="marker", default="parity and cpu")
    ap.add_argument("-n", dest="workers", default="2")
    args = ap.parse_args(argv)
    sides = {"this checkout": ROOT}
    worktree = None
    if args.against:
        worktree = Path(tempfile.mkdtemp(prefix="parity-budget-"))
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.against], cwd=ROOT, check=True,
                       capture_output=True)
        sides = {args.against: worktree, **sides}
    results: dict[str, list[dict]] = {name: [] for name in sides}
    try:
        for i in range(args.runs):
            for name, where in sides.items():
                r = run_once(where, args.marker, args.workers)
                results[name].append(r)
                print(f"run {i + 1} {name}: {r['seconds']:.0f} s, exit {r['exit']}, {r['counts']}", flush=True)
    finally:
        if worktree is not None:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, capture_output=True)
    medians = {name: statistics.median(r["seconds"] for r in rs) for name, rs in results.items()}
    print(f"\n`pytest suites/ -m \"{args.marker}\" -n {args.workers}`, median wall time:")
    for name, m in medians.items():
        print(f"  {name}: {m:.0f} s")
        last = results[name][-1]["per_file"]
        for file, s in sorted(last.items(), key=lambda kv: -kv[1]):
            print(f"      {s:7.1f} s in checks  {file}")
    if args.against:
        ratio = medians["this checkout"] / medians[args.against]
        print(f"  growth: x{ratio:.2f} ({(ratio - 1) * 100:+.0f}%); the budget is +30%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
