"""The two sides of the upgrade check, each run as ``./compat suites`` runs the suites.

    python -m tools.upgrade baseline [--baseline-file PATH] [-- PYTEST_ARGS ...]
    python -m tools.upgrade candidate [SPEC ...] [--baseline-file PATH] [--report PATH.md] [-- PYTEST_ARGS ...]
    python -m tools.upgrade check [the candidate's arguments]   # what would stop it, before tox builds it

``baseline`` (``./compat baseline``) runs the suites in this environment and keeps them as
``reports/baseline.jsonl``. ``candidate`` (``./compat candidate``, inside ``tox -e candidate``,
so the environment you work in stays as it is) installs the requirement SPECs
(``torch==2.15.*``, ``transformers==5.24.0`` ...) with uv, says which versions it got, runs the
same suites and compares them with the baseline: ``reports/upgrade-check.md`` (and ``.json``).

Both run the suites in the pytest runs ``tools.suiteplan`` plans (env, ops and parity on
workers, then optim and perf each alone and serially), not in one serial run: the upgrade check
is the command users run before every upgrade, and on a 2-core machine one serial run of
everything took 15 min 23 s where the plan took 11 min 25 s. Each run keeps its part
(``--save-baseline PART --part-of-plan``: the plugin writes a part only for a run that ran
every check it selected); the parts are joined once every run has ended, so an interrupted
run leaves the old baseline whole, and the candidate is compared once, over all its runs.
Its perf run, serial as in ``./compat suites``, times at torch's threads on every core, as
every baseline kept before (serially, in one run) did, so those still compare.

Exit status. ``baseline``: pytest's (1 when a check failed; the baseline is kept all the
same). ``candidate``: 1 when a check regressed against the baseline, 0 when none did, as
``tools.compare``: a check that failed in the baseline and fails still is reported, not a
regression, or a machine with one standing failure could never pass. Either: 1 when the runs
did not make a whole one, or pytest's status where a run was interrupted (2) or met a usage
(4) or internal (3) error; 2 before anything runs when there is no usable baseline, the
install failed, or PYTEST_ARGS hold an option the command sets itself. ``check`` (what
./compat candidate runs before tox builds the candidate's environment): 2 when the candidate
would stop at once (a SPEC uv cannot read, no baseline, a report that cannot be
written or holds something else, a -m or -k pytest would refuse), 0 otherwise.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from harness.core import records, runfiles
from harness.report import compare
from harness.report.selection import readable
from tools import cli, suiteplan

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = ROOT / "reports" / "baseline.jsonl"
REPORT = ROOT / "reports" / "upgrade-check.md"
SHOWN = ("torch", "transformers", "datasets", "accelerate", "tokenizers", "peft")
# set by this command on every run: the user's own would fight them
OURS = ("--save-baseline", "--baseline", "--compare-out", "--part-of-plan")


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(this command's arguments, pytest's): pytest's come after a ``--``."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def clashing(pytest_args: list[str]) -> str | None:
    """The first of pytest's arguments that this command sets itself, or None."""
    for arg in pytest_args:
        if arg.split("=", 1)[0] in OURS:
            return arg.split("=", 1)[0]
    return None


def uv_command() -> list[str] | None:
    """uv to install with: ``MPS_COMPAT_UV`` (set by ./compat), on PATH, or beside this Python."""
    for candidate in (os.environ.get("MPS_COMPAT_UV"), shutil.which("uv"), str(Path(sys.executable).parent / "uv")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return [candidate]
    return None


def install(specs: list[str]) -> str | None:
    """Install ``specs`` into this environment; an error line, or None."""
    uv = uv_command()
    if uv is None:
        return "no uv found to install the candidate versions (pip install uv, or set MPS_COMPAT_UV)"
    res = subprocess.run([*uv, "pip", "install", "--python", sys.executable, *specs])
    return None if res.returncode == 0 else f"installing {' '.join(specs)} failed (uv exit {res.returncode}; above)"


def versions() -> str:
    got = []
    for name in SHOWN:
        try:
            got.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(got)


def run_parts(pytest_args: list[str], parts: Path, extra: list[str], execute=suiteplan.execute,
              planned=suiteplan.planned) -> tuple[suiteplan.Outcome, list[Path], str | None]:
    """Run the planned pytest runs, each keeping its part of the run in ``parts``: (the outcome,
    the parts kept, or how the runs fell short of a whole one, worded to follow "the run")."""
    paths: list[Path] = []

    def options(phase: suiteplan.Phase) -> list[str]:
        paths.append(parts / f"{len(paths)}-{phase.name}.jsonl")
        return ["--save-baseline", str(paths[-1]), "--part-of-plan", *extra]

    outcome = execute(planned(pytest_args), pytest_args, extra=options)
    found = [p for p in paths if p.is_file()]
    stopped = outcome.stopped()
    if stopped is not None:
        return outcome, found, f"of {what(stopped[0])} ended early (pytest exit {stopped[1]})"
    for (phase, rc), path in zip(outcome.ran, paths):
        if rc in (0, 1) and not path.is_file():
            return outcome, found, f"of {what(phase)} did not run every check it selected (said above)"
    if not found:
        return outcome, found, "recorded no check"
    return outcome, found, None


def what(phase: suiteplan.Phase) -> str:
    return ", ".join(phase.suites) if phase.suites else "the suites"


def failed(outcome: suiteplan.Outcome) -> int:
    """The status of runs that did not make a whole one: theirs, and never 0."""
    return outcome.status or 1


def unwritable(places: list[tuple[str, Path]], held=None) -> str | None:
    """The first of the places this command will write at the end that cannot be written, or
    (``held``: path -> the problem or None) that holds something replacing it would lose, in
    one line: said before the runs, not after them."""
    for what_, path in places:
        why = runfiles.probe_writable(path, replace=True)
        if why:
            return f"{what_} {path}: cannot write there: {why}; choose another place"
        why = held(path) if held else None
        if why:
            return f"{what_} {path}: {why}"
    return None


def spec_problem(specs: list[str]) -> str | None:
    """What uv would refuse in the candidate's SPECs, said before tox builds its environment
    (the first time, an install of torch: minutes): a requirement that cannot be read
    (``torch=2.15``), a local wheel or folder that is not there. None at all is fine: the
    candidate is then this environment's versions again (``./compat candidate -- -m perf``,
    docs/upgrade-check.md: a fault injected, or a noise check). A URL, and a name that is not on the index, are left to uv."""
    from packaging.requirements import InvalidRequirement, Requirement
    for spec in specs:
        if "://" in spec or spec.startswith("git+"):
            continue
        if os.sep in spec or spec.startswith(".") or spec.endswith((".whl", ".tar.gz", ".zip")):
            if not os.path.exists(spec):
                return f"{spec}: no such file or folder (a local wheel or project to install as the candidate)"
            continue
        try:
            Requirement(spec)
        except InvalidRequirement as exc:
            return (f"{spec!r}: not a requirement uv can read ({str(exc).splitlines()[0]}); write one as "
                    "torch==2.15.* or 'transformers>=5.24,<6'")
    return None


def keep_baseline(args, pytest_args: list[str], **run) -> int:
    """``./compat baseline``: the planned runs, joined into the baseline file when all ended."""
    target = Path(args.baseline_file)
    problem = unwritable([("--baseline-file", target)], lambda path: runfiles.run_file_problem(path, replace=True))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".baseline-parts-", dir=target.parent) as tmp:
        outcome, parts, short = run_parts(pytest_args, Path(tmp), [], **run)
        if short:
            from harness.plugin.hooks import baseline_not_replaced
            print(baseline_not_replaced(str(target), short), file=sys.stderr)
            return failed(outcome)
        text = "".join(p.read_text(encoding="utf-8") for p in parts)
        try:
            runfiles.write_atomic(target, text)
        except OSError as exc:
            print(f"error: cannot write the baseline {target}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    side = compare.load_side([str(target)], "baseline")
    print(f"baseline kept: {os.path.relpath(target)} ({len(side.records):,} checks from "
          f"{len(parts)} pytest run{'s' if len(parts) != 1 else ''}; compare an upgrade with ./compat candidate)")
    return outcome.status


def candidate_problem(args) -> tuple[compare.Side | None, str | None]:
    """What stops a candidate before anything is installed: no usable baseline, a report that
    cannot be written or holds something other than a comparison. (the baseline, None), or
    (None or the baseline, the problem)."""
    try:
        baseline = compare.load_side([args.baseline_file], "baseline")
    except compare.CompareError as exc:
        return None, f"{exc}; keep one first with ./compat baseline"
    report = Path(args.report)
    return baseline, unwritable([("--report", report), ("--report (its .json)", report.with_suffix(".json"))],
                                compare.output_problem)


def selection_problem(pytest_args: list[str]) -> str | None:
    """A -m or -k that pytest will refuse (an expression it cannot read, a marker nobody
    registers under --strict-markers): said before the candidate's install, not after it."""
    scanned = suiteplan.scan(pytest_args)
    for flag, text in (("-m", scanned.markexpr), ("-k", scanned.keyword)):
        if not readable(text):
            return f"{flag} {text!r}: pytest cannot read this expression (and, or, not, parentheses and names)"
    unknown = suiteplan.unregistered_markers(scanned.markexpr)
    if unknown:
        return (f"-m {scanned.markexpr!r}: no such marker: {', '.join(sorted(unknown))} (the suites' markers: "
                f"{', '.join((*suiteplan.TARGETS, *records.CATEGORIES, 'slow', 'compile'))})")
    return None


def check_candidate(args, pytest_args: list[str], **run) -> int:
    """``python -m tools.upgrade check``, which ./compat candidate runs before tox builds the
    candidate's environment (the first time, an install of torch: minutes): 2 and the one line
    ``candidate`` would say after that install, or 0."""
    problem = spec_problem(args.specs)
    problem = problem or candidate_problem(args)[1] or selection_problem(pytest_args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return 0


def try_candidate(args, pytest_args: list[str], **run) -> int:
    """``./compat candidate``: install, the planned runs, one comparison over all of them."""
    baseline, problem = candidate_problem(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.specs:
        problem = install(args.specs)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    print(f"candidate: {versions()}", flush=True)
    with tempfile.TemporaryDirectory(prefix=".candidate-parts-") as tmp:
        outcome, parts, short = run_parts(pytest_args, Path(tmp), ["--baseline", args.baseline_file], **run)
        if short:
            print(f"no comparison: the run {short}; {os.path.relpath(args.report)} was not written",
                  file=sys.stderr)
            return failed(outcome)
        candidate = compare.load_side([str(p) for p in parts], "candidate")
    try:
        problem = compare.overlap_problem(baseline, candidate, compare.FROM_CANDIDATE)
        if problem:
            raise compare.CompareError(problem)
        asked, outside = compare.within_selection(baseline, candidate)   # the rest is no news
        cmp = compare.compare(asked, candidate)
    except compare.CompareError as exc:
        print(f"no comparison: {exc}", file=sys.stderr)
        return 1
    if outside:
        cmp.notes.append(f"{outside:,} check(s) of the baseline are outside the candidate's selection (its paths, "
                         "-m and -k do not take them): not compared, and not counted as disappeared")
    print("\n" + compare.render(cmp, "table").rstrip())
    try:
        for path, fmt in ((Path(args.report), "md"), (Path(args.report).with_suffix(".json"), "json")):
            runfiles.write_atomic(path, compare.render(cmp, fmt))
    except OSError as exc:
        print(f"error: cannot write the comparison {args.report}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"comparison written to {os.path.relpath(args.report)} (and .json)")
    if cmp.regressions:
        print(f"FAILED: {len(cmp.regressions)} regression(s) against {os.path.relpath(args.baseline_file)}")
        return 1
    # A check that failed in the baseline and fails still is no regression: were it the exit
    # status, a machine with one standing failure could never pass the check.
    return 0


def main(argv: list[str] | None = None, **run) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m tools.upgrade", description=cli.summary(__doc__))
    sub = parser.add_subparsers(dest="side", required=True)
    base = sub.add_parser("baseline", help="the suites in this environment, kept as the baseline")
    cand = sub.add_parser("candidate", help="the suites with candidate versions, compared with the baseline")
    check = sub.add_parser("check", help="what would stop a candidate, said before its environment is built")
    for p in (cand, check):
        p.add_argument("specs", nargs="*", help="requirement specs to install, e.g. torch==2.15.*")
        p.add_argument("--report", default=str(REPORT), help="where the comparison goes (.md; .json beside it)")
    for p in (base, cand, check):
        p.add_argument("--baseline-file", default=os.environ.get("MPS_COMPAT_BASELINE", str(DEFAULT_BASELINE)))
    ours, pytest_args = split_args(argv)
    args = parser.parse_args(ours)
    mine = clashing(pytest_args)
    if mine:
        print(f"error: {mine} is set by ./compat {'candidate' if args.side == 'check' else args.side} itself (the baseline file: --baseline-file before "
              "the --); leave it out of the pytest arguments", file=sys.stderr)
        return 2
    try:
        side = {"baseline": keep_baseline, "candidate": try_candidate, "check": check_candidate}[args.side]
        return side(args, pytest_args, **run)
    except KeyboardInterrupt:   # between two runs (during one, the run itself ends: suiteplan.call_pytest)
        print(f"interrupted: no further run; {os.path.relpath(args.baseline_file)} is as it was unless "
              "'baseline kept' was said above", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
