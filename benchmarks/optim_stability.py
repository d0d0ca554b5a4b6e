"""Benchmark: the optimization suite rerun N times; do its verdicts hold still?

    python benchmarks/optim_stability.py [--runs 5] [--workload auto] [--keep DIR]

Runs `pytest suites/optim -m "optim and cpu"` N times, each in a fresh process with its
own run file, and prints per claim the verdict and ratio of every run, the number of
flips between "holds" and "does not hold" (inconclusive is not a flip: it is the answer
for a noisy machine), and each run's wall time. Targets on 2 cores: zero flips, and the
suite (auto workload) under 8 minutes. The figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.core import runfiles  # noqa: E402

FIRM = ("holds", "does-not-hold")


def one_run(run_file: Path, workload: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "suites/optim", "-m", "optim and cpu", "-q", "-p",
                    "no:cacheprovider", "--workload", workload, "--run-file", str(run_file)],
                   cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workload", default="auto", choices=("auto", "small", "medium", "large"))
    parser.add_argument("--keep", default=None, help="directory to keep the run files in")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="optim-stability-"))
    folder.mkdir(parents=True, exist_ok=True)
    walls, seen = [], defaultdict(list)
    for i in range(args.runs):
        run_file = folder / f"run{i}.jsonl"
        walls.append(one_run(run_file, args.workload))
        for rec in (r for run in runfiles.read_file(run_file).runs for r in run.records):
            ratio = (rec["metrics"] or {}).get("mem_ratio", (rec["metrics"] or {}).get("time_ratio"))
            if rec["status"] != "skip" and ratio is not None and rec["subject"] != "seed_003_path_never_raises_peak_memory":
                seen[rec["check"]].append((rec.get("category") or rec["status"], ratio))
        print(f"run {i + 1}/{args.runs}: {walls[-1]:.1f} s", flush=True)
    rows, flips = [], 0
    for check, results in sorted(seen.items()):
        firm = [v for v, _ in results if v in FIRM]
        flipped = len(set(firm)) > 1
        flips += flipped
        ratios = [r for _, r in results]
        rows.append([check, " ".join(v for v, _ in results), f"{min(ratios):.3f}-{max(ratios):.3f}",
                     "FLIP" if flipped else ""])
    print(tabulate(rows, headers=("check", "verdicts", "ratio range", "flip"), tablefmt="simple"))
    print(f"flips (holds <-> does not hold): {flips} of {len(rows)} checks (target 0)")
    print("wall time per run: " + ", ".join(f"{w:.0f} s" for w in walls) + f" (target under 480 s); "
          f"run files in {folder}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
