"""Benchmark: the optimization suite rerun N times; do its verdicts hold still?

    python benchmarks/optim_stability.py [--runs 5] [--workload auto] [--keep DIR]

Runs `pytest suites/optim -m "optim and cpu"` N times, each in a fresh process with its
own run file, and prints per claim the verdict and ratio of every run, the number of
flips between "holds" and "does not hold" (inconclusive is not a flip: it is the answer
for a noisy machine), and each run's wall time. Targets on 2 cores: zero flips, and the
suite (auto workload) under 8 minutes. The figures are printed, never asserted.

    python benchmarks/optim_stability.py --against REV [--runs 3]

Before and after a change to the suite: REV (a commit, checked out into a temporary git
worktree) and this tree run in turn, the order swapped every run (REV first, then this
tree first, ...), so a machine that slows down over the benchmark slows both alike. It
prints per claim both trees' verdicts and ratio ranges, marks a claim whose firm verdicts
differ between the trees (CHANGED) or that this tree left inconclusive where REV never did
(WIDER; the other way round is shown too), and
each tree's wall times. Target: nothing CHANGED or WIDER on a quiet machine.
"""
from __future__ import annotations

import argparse
import os
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


def one_run(run_file: Path, workload: str, tree: Path = ROOT) -> float:
    """One `optim and cpu` run of ``tree``'s suite (its harness first on the path), in seconds."""
    start = time.perf_counter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(tree), os.environ.get("PYTHONPATH"))))}
    subprocess.run([sys.executable, "-m", "pytest", "suites/optim", "-m", "optim and cpu", "-q", "-p",
                    "no:cacheprovider", "--workload", workload, "--run-file", str(run_file)],
                   cwd=tree, capture_output=True, text=True, env=env)
    return time.perf_counter() - start


def verdicts_of(run_file: Path) -> dict[str, tuple[str, float]]:
    """check -> (category, ratio) of the measured claims in a run file."""
    out = {}
    for rec in (r for run in runfiles.read_file(run_file).runs for r in run.records):
        ratio = (rec["metrics"] or {}).get("mem_ratio", (rec["metrics"] or {}).get("time_ratio"))
        if (rec["status"] != "skip" and ratio is not None and rec.get("category") != "control"
                and rec["subject"] != "seed_003_path_never_raises_peak_memory"):   # claims only
            out[rec["check"]] = (rec.get("category") or rec["status"], ratio)
    return out


def against(rev: str, runs: int, workload: str, folder: Path) -> int:
    """REV's suite and this tree's, run in turn (the order swapped every run), compared."""
    other = Path(tempfile.mkdtemp(prefix="optim-against-")) / "tree"
    made = subprocess.run(["git", "worktree", "add", "--detach", str(other), rev], cwd=ROOT,
                          capture_output=True, text=True)
    if made.returncode != 0:
        last = (made.stderr.strip().splitlines() or ["git worktree add failed"])[-1]
        print(f"error: --against {rev}: cannot check it out ({last})", file=sys.stderr)
        return 2
    trees = {rev: other, "this tree": ROOT}
    walls, seen = defaultdict(list), {name: defaultdict(list) for name in trees}
    try:
        for i in range(runs):
            order = list(trees) if i % 2 == 0 else list(trees)[::-1]
            for name in order:
                run_file = folder / f"{'before' if name == rev else 'after'}{i}.jsonl"
                walls[name].append(one_run(run_file, workload, trees[name]))
                for check, result in verdicts_of(run_file).items():
                    seen[name][check].append(result)
                print(f"run {i + 1}/{runs}, {name}: {walls[name][-1]:.1f} s", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, capture_output=True)
    rows, changed, wider = [], 0, 0
    for check in sorted(set(seen[rev]) | set(seen["this tree"])):
        a, b = seen[rev].get(check, []), seen["this tree"].get(check, [])
        firm_a, firm_b = {v for v, _ in a if v in FIRM}, {v for v, _ in b if v in FIRM}
        loose_a, loose_b = (any(v not in FIRM for v, _ in side) for side in (a, b))
        mark = ""
        if firm_a and firm_b and firm_a != firm_b:
            mark, changed = "CHANGED", changed + 1
        elif loose_b and not loose_a:     # inconclusive in this tree only
            mark, wider = "WIDER", wider + 1
        elif loose_a and not loose_b:
            mark = f"wider at {rev}"
        rows.append([check, " ".join(v for v, _ in a), _span(a), " ".join(v for v, _ in b), _span(b), mark])
    print(tabulate(rows, headers=("check", rev, "ratios", "this tree", "ratios", ""), tablefmt="simple"))
    print(f"verdicts: {changed} CHANGED, {wider} WIDER of {len(rows)} checks (target 0 and 0 on a quiet machine)")
    for name in trees:
        print(f"{name}: wall time per run " + ", ".join(f"{w:.0f} s" for w in walls[name]))
    print(f"run files in {folder}")
    return 0


def _span(results: list[tuple[str, float]]) -> str:
    ratios = [r for _, r in results]
    return f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workload", default="auto", choices=("auto", "small", "medium", "large"))
    parser.add_argument("--keep", default=None, help="directory to keep the run files in")
    parser.add_argument("--against", default=None, metavar="REV",
                        help="compare with the suite at this git revision, run in turn with this tree")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="optim-stability-"))
    folder.mkdir(parents=True, exist_ok=True)
    if args.against:
        return against(args.against, args.runs, args.workload, folder)
    walls, seen = [], defaultdict(list)
    for i in range(args.runs):
        run_file = folder / f"run{i}.jsonl"
        walls.append(one_run(run_file, args.workload))
        for check, result in verdicts_of(run_file).items():
            seen[check].append(result)
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
