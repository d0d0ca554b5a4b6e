"""Benchmark: how long the project's own self-tests take, as a developer and as CI run them.

    python benchmarks/selftest_time.py [--runs 1] [--only quick|all] [--slowest 15] [-- PYTEST-ARGS]

Runs `./compat test` (the quick loop: the self-tests marked slow are left out) and
`./compat test --slow` (everything, as .ci/run does), each in a fresh process, and prints
per run the wall time, pytest's counts and exit status, and the slowest tests of the last
run. The venv must exist (`./compat setup`): set-up is not part of the figure.

Target on a 2-core machine: the quick loop under 360 s. The figures are printed, never
asserted: a timed unit test would fail on a busy machine for no fault of the code.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"quick": [], "all": ["--slow"]}
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|deselected|xfailed|xpassed|errors?)\b")
DURATION = re.compile(r"^(\d+\.\d+)s (call|setup|teardown)\s+(\S+)")


def run_once(extra: list[str], slowest: int) -> dict:
    cmd = [str(ROOT / "compat"), "test", *extra, "-q", "-p", "no:cacheprovider", f"--durations={slowest}"]
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    lines = res.stdout.strip().splitlines()
    summary = lines[-1] if lines else res.stderr.strip()[-300:]
    counts = {kind: int(n) for n, kind in COUNTS.findall(summary)}
    durations = [m.groups() for ln in lines if (m := DURATION.match(ln))]
    failed = [ln for ln in lines if ln.startswith(("FAILED ", "ERROR "))]
    return {"seconds": seconds, "exit": res.returncode, "counts": counts, "durations": durations, "failed": failed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each variant (default 1)")
    parser.add_argument("--only", choices=tuple(VARIANTS), help="one variant only")
    parser.add_argument("--slowest", type=int, default=15, help="how many of the slowest tests to list")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args(argv)
    if not (ROOT / ".venv" / "bin" / "python").exists():
        print("error: no .venv: run ./compat setup first (set-up is not part of the figure)", file=sys.stderr)
        return 2
    for name, extra in VARIANTS.items():
        if args.only and name != args.only:
            continue
        runs = [run_once(extra + args.pytest_args, args.slowest) for _ in range(args.runs)]
        times = [r["seconds"] for r in runs]
        print(f"./compat test {' '.join(extra + args.pytest_args)}".rstrip())
        for i, r in enumerate(runs, 1):
            counts = ", ".join(f"{n} {k}" for k, n in r["counts"].items())
            print(f"  run {i}: {r['seconds']:7.1f} s  exit {r['exit']}  {counts}")
            for line in r["failed"]:      # a figure from a failing run is not the suite's cost: say which
                print(f"    {line}")
        if len(times) > 1:
            print(f"  median {statistics.median(times):.1f} s, min {min(times):.1f} s, max {max(times):.1f} s")
        print("  slowest of the last run:")
        for seconds, when, test in runs[-1]["durations"]:
            print(f"    {float(seconds):7.1f} s  {when:8s} {test}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
