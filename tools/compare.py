"""Pre-upgrade regression check: what changed from a baseline run to a candidate run.

    python -m tools.compare BASELINE CANDIDATE [--format table|json|md] [--out FILE]
                            [--factor 2] [--floor 0.01] [--all] [--latest] [--partial]

BASELINE and CANDIDATE are run files (``reports/runs/*.jsonl``, or a file kept with
``pytest --save-baseline``) or directories holding one environment's run files. Lists
regressions, warnings, improvements, and checks that appeared or disappeared (the rules are
in harness/report/compare.py). Exit status: 0 no regressions, 1 regressions, 2 anything else:
bad input (missing, empty, malformed or truncated file, a side cut off before its end
unless --partial, another schema version, several environments or Hugging Face stacks on one side, a --factor or --floor that is no finite figure), two sides with
too little in common to compare (under half of either side's checks in the other, or none:
``--partial`` accepts a partial overlap), an --out that cannot be written, or an internal
error, each with a one-line message (tools/cli.py).
"""
from __future__ import annotations

import argparse
import math
import sys

from harness.core import runfiles
from harness.report import compare
from tools import cli


def _figure(least: float, inclusive: bool):
    """An argparse type: a finite number above ``least`` (or at least it, ``inclusive``).
    float() takes "nan" and "inf", and a NaN compares false with everything: a rule with a
    NaN figure would be silently off."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < least or (value == least and not inclusive):
            raise argparse.ArgumentTypeError(f"must be a finite number {'of at least' if inclusive else 'above'} "
                                             f"{least:g}, not {text!r}")
        return value
    return parse


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.compare", description=cli.summary(__doc__))
    parser.add_argument("baseline", help="run file or directory of the reference environment")
    parser.add_argument("candidate", help="run file or directory of the environment to check")
    parser.add_argument("--format", choices=("table", "json", "md"), default="table")
    parser.add_argument("--out", default=None, help="also write the output to this file")
    parser.add_argument("--factor", type=_figure(1, False), default=compare.DEFAULT_FACTOR,
                        help="a parity error growing by more than this is a warning (default 2)")
    parser.add_argument("--floor", type=_figure(0, True), default=compare.DEFAULT_FLOOR,
                        help="parity errors below this fraction of their tolerance are not compared (default 0.01)")
    parser.add_argument("--all", action="store_true", help="list every appeared / disappeared check")
    parser.add_argument("--latest", action="store_true",
                        help="each side is its newest run only (default: the newest record of each check over "
                             "all runs of the environment, so partial runs add up)")
    parser.add_argument("--partial", action="store_true",
                        help="compare the checks both sides hold even when that is under half of either side's, "
                             "or a side was cut off before its end (default: an error; two runs of one selection "
                             "share nearly all their checks)")
    args = parser.parse_args(argv)
    if args.out:   # before the work: a mistyped --out must not cost a file
        why = compare.output_problem(args.out)
        if why:
            return cli.error(f"--out {args.out}: {why}")
    try:
        base = compare.load_side([args.baseline], "baseline " + args.baseline, args.latest)
        cand = compare.load_side([args.candidate], "candidate " + args.candidate, args.latest)
        result = compare.compare(base, cand, args.factor, args.floor,
                                 judged_from=compare.PARTIAL if args.partial else compare.BOTH)
    except compare.CompareError as exc:
        return cli.error(str(exc))
    text = compare.render(result, args.format, args.all)
    cli.say(text)
    if args.out:
        try:
            runfiles.write_atomic(args.out, text)
        except OSError as exc:
            return cli.error(f"cannot write {args.out}: {exc.strerror or exc}")
    return 1 if result.regressions else 0


if __name__ == "__main__":
    sys.exit(main())
