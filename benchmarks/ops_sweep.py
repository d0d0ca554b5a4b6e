"""Benchmark: the full cpu-target op sweep under pytest, against a bare loop, serial and -n 2.

    python benchmarks/ops_sweep.py [--skip-xdist] [--keep DIR]

Prints three wall times and their ratios, each measured in a fresh process so every figure
pays the same imports (torch, OpInfo's op_db):

  bare loop   harness.ops.opsweep.run_case over every cpu case, in one process, no pytest,
              no sandbox: the floor for the same samples and classification
  pytest -n 0 `pytest suites/ops/test_ops.py -m "ops and cpu"` (the op sweep; the model
              checks are not part of the bare loop): collection, the sandbox child, the journal
  pytest -n 2 the same on two pytest-xdist workers

Targets on a 2-core machine: the serial sweep under 300 s, pytest -n 0 at most 1.5x the bare
loop, -n 2 at least 1.6x faster than -n 0. The figures are printed, never asserted.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

BARE = f"""
import collections, json, sys, time
sys.path.insert(0, {str(ROOT)!r})
t0 = time.perf_counter()
from harness.ops import opsweep
cases = [c for c in opsweep.cases() if "cpu" in c.targets]
t1 = time.perf_counter()
cats = collections.Counter(opsweep.run_case(c.op_key, "cpu", c.dtype, c.pass_).category for c in cases)
print(json.dumps({{"cases": len(cases), "categories": cats, "setup_s": t1 - t0, "run_s": time.perf_counter() - t1}}))
"""


def timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return time.perf_counter() - start, res


def pytest_sweep(workers: int, run_file: Path) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "pytest", "suites/ops/test_ops.py", "-m", "ops and cpu", "-q", "-p", "no:cacheprovider",
           "--run-file", str(run_file)] + (["-n", str(workers)] if workers else [])
    seconds, res = timed(cmd)
    last = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else res.stderr.strip()[-300:]
    statuses: dict[str, int] = {}
    if run_file.exists():
        for line in run_file.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("kind") == "check":
                statuses[rec["status"]] = statuses.get(rec["status"], 0) + 1
    return seconds, {"exit": res.returncode, "summary": last, "records": statuses}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-xdist", action="store_true", help="skip the -n 2 run")
    ap.add_argument("--keep", help="keep the run files in this directory")
    args = ap.parse_args()
    out = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ops-bench-"))
    out.mkdir(parents=True, exist_ok=True)

    # Run from a file, like the sandbox child: with `python -c` every OpInfo sample iterator's
    # inspect.stack() would scan sys.modules for the "<string>" frame, slowing the floor.
    script = out / "bare_loop.py"
    script.write_text(BARE)
    bare_s, res = timed([sys.executable, str(script)])
    if res.returncode != 0:
        print(f"bare loop failed: {res.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return 2
    bare = json.loads(res.stdout.strip().splitlines()[-1])
    print(f"bare loop    {bare_s:7.1f} s  ({bare['cases']} cases, setup {bare['setup_s']:.1f} s, "
          f"categories {dict(bare['categories'])})", flush=True)
    serial_s, serial = pytest_sweep(0, out / "serial.jsonl")
    print(f"pytest -n 0  {serial_s:7.1f} s  (exit {serial['exit']}, {serial['summary']}, records {serial['records']})",
          flush=True)
    rows = [("serial sweep under 300 s", f"{serial_s:.1f} s", serial_s < 300),
            ("pytest -n 0 / bare loop <= 1.5", f"{serial_s / bare_s:.2f}", serial_s / bare_s <= 1.5)]
    if not args.skip_xdist:
        par_s, par = pytest_sweep(2, out / "xdist.jsonl")
        print(f"pytest -n 2  {par_s:7.1f} s  (exit {par['exit']}, {par['summary']}, records {par['records']})",
              flush=True)
        rows.append(("speed-up -n 0 / -n 2 >= 1.6", f"{serial_s / par_s:.2f}", serial_s / par_s >= 1.6))
    print()
    for what, value, met in rows:
        print(f"{what:34s} {value:>10s}   {'met' if met else 'NOT met'}")
    print(f"run files: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
