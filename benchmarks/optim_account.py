"""Benchmark: where an optimization-suite run's seconds went, against a budget.

    python benchmarks/optim_account.py RUN_FILE[.gz] [--run ID] [--target cuda] [--budget 600] [--top 12]

The optimization suite's budget on an H100 is 10 minutes, and a lent machine is there for 30
minutes, a command for at most 10: what to change next must be read off one run. This
reads a run file the suites wrote (gzipped or not; the newest run in it unless ``--run``)
and prints, for the optim checks of one target:

* the run: its wall time (header to end line), whether it ended or was cut off, and the
  checks it recorded against the budget;
* the seconds by kind of check: controls, memory claims, time claims, the timing family of
  the tutorial's memory-saving path (its first member's duration carries the whole family),
  the Trainer's claims, the "keeps the result" checks, the path's memory check; skips apart;
* the longest checks, each with its rounds, its workload and the first warm-up call of its
  variant where that was far longer than a steady step (torch.compile's compile);
* the family's account (``metrics.family``): its seconds split into timing (rounds and
  warm-ups), building the rows and the rest; rounds and seconds per pair, how each stopped.

Figures are printed, never asserted.
"""
from __future__ import annotations

import gzip
import sys
import tempfile
from collections import defaultdict
from datetime import datetime
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.core import runfiles  # noqa: E402
from harness.report.matrix import is_control  # noqa: E402
from harness.report.verdict import cold_start_s  # noqa: E402
from tools import cli  # noqa: E402


def read(path: Path) -> runfiles.RunFile:
    """The run file through the suites' own reader (migrations, bad lines reported); a gzipped
    one, as tests/fixtures/recorded keeps them, unpacked to a temporary file first."""
    if path.suffix != ".gz":
        return runfiles.read_file(path)
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / path.stem
        try:
            plain.write_bytes(gzip.decompress(path.read_bytes()))
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            return runfiles.RunFile(str(path), [], [f"{path}: cannot unpack: {exc}"])
        found = runfiles.read_file(plain)
        return runfiles.RunFile(str(path), found.runs, [e.replace(str(plain), str(path)) for e in found.errors])


def kind_of(rec: dict) -> str:
    """The kind of optim check, for the account."""
    check, status = rec["check"], rec["status"]
    if status == "skip":
        return "skipped"
    if is_control(rec):
        return "controls"
    if rec.get("metrics", {}).get("family") and rec.get("variant") == "time":
        return "time: the path's family"
    if check.endswith("/trainer"):
        return "Trainer claims"
    if "optimization_keeps_the_result" in check:
        return "keeps the result"
    if "seed_003_path" in check:
        return "the path's memory"
    if check.endswith("/time"):
        return "time claims"
    if check.endswith("/memory"):
        return "memory claims"
    return "other"


def when(stamp: str | None) -> datetime | None:
    return datetime.fromisoformat(stamp) if stamp else None


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    ap = cli.Parser(description=__doc__.split("\n")[0])
    ap.add_argument("run_file", type=Path)
    ap.add_argument("--run", help="the run's id (default: the newest run in the file)")
    ap.add_argument("--target", default=None, help="the target (default: the one with most optim checks)")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds the suite should fit in (default 600)")
    ap.add_argument("--top", type=int, default=12, help="how many of the longest checks to list")
    args = ap.parse_args(argv)
    found = read(args.run_file)
    runs = [run for run in found.runs if any(r.get("suite") == "optim" for r in run.records)]
    if args.run:
        runs = [run for run in runs if run.run_id == args.run]
    if not runs:
        why = "; ".join(found.errors[:2]) or (f"{args.run_file} has no optim checks"
                                               + (f" in run {args.run}" if args.run else ""))
        return cli.error(why)
    run = runs[-1]
    checks = [r for r in run.records if r.get("suite") == "optim"]
    targets = defaultdict(int)
    for r in checks:
        targets[r["target"]] += r["status"] != "skip"
    target = args.target or max(targets, key=targets.get)
    checks = [r for r in checks if r["target"] == target]
    if not checks:
        return cli.error(f"run {run.run_id} has no optim checks on {target} (it has: {', '.join(sorted(targets))})")
    out: list[str] = []
    print = out.append   # noqa: A001 - every line below goes to one say() at the end
    header, end = run.header, run.end

    total = sum(r.get("duration_s") or 0 for r in checks)
    start, finish = when(header.get("started")), when((end or {}).get("finished"))
    wall = (finish - start).total_seconds() if start and finish else None
    cut = not run.complete   # no end line (killed), or pytest interrupted (a time limit's SIGINT)
    how = ("no end line: killed" if end is None else f"cut off (pytest exit {end.get('exitstatus')})" if cut
           else f"ended (pytest exit {end.get('exitstatus')})")
    workload = next((r["metrics"]["workload"] for r in checks if (r.get("metrics") or {}).get("workload")), "-")
    selected = (header.get("selection") or {}).get("selected")
    of = f" of {selected} selected" if isinstance(selected, int) else ""
    print(f"run {run.run_id} on {target}, workload {workload}: {len(checks)}{of} optim checks recorded, {how}")
    spent = wall or total
    fits = (f"over by {spent - args.budget:.0f} s" if spent > args.budget
            else "not shown to fit: it was cut off before its end" if cut
            else f"within, {args.budget - spent:.0f} s to spare")
    print(f"  checks' seconds {total:.0f}" + (f", wall {wall:.0f} s (header to end line)" if wall else "")
          + f"; budget {args.budget:.0f} s: {fits}")
    if wall and wall > total:
        print(f"  outside the recorded checks: {wall - total:.0f} s (collection, start-up"
              + (", and the check running when the run was cut off, which has no record)" if cut else ")"))
    if cut:
        print("  a run cut off is a lower bound: the checks after it are not in the file"
              + (f" ({selected - len(checks)} of them)" if isinstance(selected, int) and selected > len(checks) else ""))

    by_kind: dict[str, list[dict]] = defaultdict(list)
    for r in checks:
        by_kind[kind_of(r)].append(r)
    rows = sorted(([k, len(v), round(sum(r.get("duration_s") or 0 for r in v), 1)] for k, v in by_kind.items()),
                  key=lambda row: -row[2])
    print("")
    print(tabulate(rows, headers=["kind", "checks", "seconds"]))

    print("")
    longest = sorted(checks, key=lambda r: -(r.get("duration_s") or 0))[:args.top]
    rows = []
    for r in longest:
        met = r.get("metrics") or {}
        first = cold_start_s(met)
        rows.append([r["check"], r["status"], round(r.get("duration_s") or 0, 1), met.get("rounds", ""),
                     f"{first:.1f}" if first is not None else "", met.get("median_a_s", ""),
                     met.get("median_b_s", "")])
    print(tabulate(rows, headers=["longest checks", "status", "seconds", "rounds", "variant's first call s",
                                  "median a s", "median b s"], floatfmt=".3g"))

    family = next(((r, r["metrics"]["family"]) for r in checks if (r.get("metrics") or {}).get("family")), None)
    if family:
        rec, fam = family
        spent = rec.get("duration_s") or 0
        build = fam.get("build_s") or 0
        print("")
        print(f"the memory-saving path's timing family, carried by {rec['check']}: {spent:.0f} s = {fam['seconds']:.0f} s timing "
              f"({fam['rounds']} rounds of every row, their warm-ups included) + {build:.0f} s building the rows + "
              f"{max(0.0, spent - fam['seconds'] - build):.0f} s else (judging, recording)")
        warm = {side: sum(s) for side, s in (fam.get("warmup_s") or {}).items()}
        if warm:
            print(f"  warm-up calls: {sum(warm.values()):.0f} s in all; the longest: "
                  + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(warm.items(), key=lambda kv: -kv[1])[:3]))
        rows = [[name, p["rounds"], p["seconds"], p["category"], p.get("stopped") or ""]
                for name, p in fam["pairs"].items()]
        print(tabulate(rows, headers=["pair (its two rows' seconds; rows shared)", "rounds", "seconds", "verdict",
                                      "stopped"]))
    cli.say("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
