"""Parity failures of a recorded run, judged again by accuracy (harness/parity/numerics/rejudge.py).

    python -m tools.rejudge RUN_FILE_OR_DIR ... [--target cuda] [--all]

Reads run files (or directories of them), takes every failed parity record and says what
the accuracy judge makes of it from the recorded metrics: passes now (and why), needs a
rerun to tell (ties, decompositions), or remains (how much less accurate than the CPU, and
the suspected cause). Prints the counts, then the checks that remain (``--all``: every
one). Exit 0 with a report; 2 with one line on bad input (a ``--target`` no record has
included: a typo would read as "nothing failed").
"""
from __future__ import annotations

import collections

from tabulate import tabulate

from harness.core import runfiles
from harness.parity.numerics import rejudge
from tools import cli

ORDER = ("passes", "rerun", "remains", rejudge.NOT_A_RESULT)


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.rejudge", description=cli.summary(__doc__))
    parser.add_argument("inputs", nargs="+", help="run files or directories")
    parser.add_argument("--target", default=None, help="only this target's records (e.g. cuda)")
    parser.add_argument("--all", action="store_true", help="list every failure, not only those that remain")
    args = parser.parse_args(argv)
    files, problems = runfiles.find_run_files(args.inputs)
    records = []
    for path in files:
        rf = runfiles.read_file(path)
        problems += rf.errors[:1]
        records += [r for run in rf.runs for r in run.records]
    for problem in problems:
        cli.error(problem)
    if not records:  # the problem is said already, one line per input; else say this
        return 2 if problems else cli.error("no check records in " + ", ".join(args.inputs))
    if args.target:
        present = sorted({str(r.get("target")) for r in records})
        records = [r for r in records if r.get("target") == args.target]
        if not records:   # a typo would read as "nothing failed"
            return cli.error(f"--target {args.target}: no record of that target in {', '.join(args.inputs)}; "
                             f"its targets: {', '.join(present)}")
    judged = rejudge.rejudge(records)
    if not judged:
        cli.say(f"No parity failure on record ({len(records):,} check records read).\n")
        return 2 if problems else 0
    counts = collections.Counter(j.outcome for j in judged)
    reasons = collections.Counter((j.outcome, j.why.split(":")[0]) for j in judged)
    lines = [f"{len(judged)} parity failure(s) on record, judged again by accuracy:", ""]
    lines.append(tabulate([[o, counts.get(o, 0)] for o in ORDER], headers=["outcome", "checks"]))
    lines += ["", tabulate(sorted(([o, w, n] for (o, w), n in reasons.items()), key=lambda r: (ORDER.index(r[0]), -r[2])),
                           headers=["outcome", "why", "checks"]), ""]
    shown = [j for j in judged if args.all or j.outcome == "remains"]
    lines.append(tabulate([[j.check, j.target, j.outcome, j.why] for j in shown],
                          headers=["check", "target", "outcome", "why"]) if shown else "Nothing remains.")
    cli.say("\n".join(lines) + "\n")
    return 2 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
