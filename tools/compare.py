"""Pre-upgrade regression check: what changed from a baseline run to a candidate run.

    python -m tools.compare BASELINE CANDIDATE [--format table|json|md] [--out FILE]
                            [--factor 2] [--floor 0.01] [--all] [--latest]

BASELINE and CANDIDATE are run files (``reports/runs/*.jsonl``, or a file kept with
``pytest --save-baseline``) or directories holding one environment's run files. Lists
regressions, warnings, improvements, and checks that appeared or disappeared (the rules are
in harness/report/compare.py). Exit status: 0 no regressions, 1 regressions, 2 anything else:
bad input (missing, empty, malformed or truncated file, another schema version, several
environments on one side), an --out that cannot be written, or an internal error, each
with a one-line message (tools/cli.py).
"""
from __future__ import annotations

import sys

from harness.core import runfiles
from harness.report import compare
from tools import cli


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.compare", description=__doc__.splitlines()[0])
    parser.add_argument("baseline", help="run file or directory of the reference environment")
    parser.add_argument("candidate", help="run file or directory of the environment to check")
    parser.add_argument("--format", choices=("table", "json", "md"), default="table")
    parser.add_argument("--out", default=None, help="also write the output to this file")
    parser.add_argument("--factor", type=float, default=compare.DEFAULT_FACTOR,
                        help="a parity error growing by more than this is a warning (default 2)")
    parser.add_argument("--floor", type=float, default=compare.DEFAULT_FLOOR,
                        help="parity errors below this fraction of their tolerance are not compared (default 0.01)")
    parser.add_argument("--all", action="store_true", help="list every appeared / disappeared check")
    parser.add_argument("--latest", action="store_true",
                        help="each side is its newest run only (default: the newest record of each check over "
                             "all runs of the environment, so partial runs add up)")
    args = parser.parse_args(argv)
    try:
        base = compare.load_side([args.baseline], "baseline " + args.baseline, args.latest)
        cand = compare.load_side([args.candidate], "candidate " + args.candidate, args.latest)
        result = compare.compare(base, cand, args.factor, args.floor)
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
