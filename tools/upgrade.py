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
regression, or a machine with one standing failure could never pass; 2 when the comparison
cannot be made (too little in common). Either: 1 when the runs
did not make a whole one, or pytest's status where a run was interrupted (2) or met a usage
(4) or internal (3) error; 2 before anything runs when there is no usable baseline, the
install failed or did not give a version a SPEC asked for, the selection takes a suite the
baseline holds no check of, or PYTEST_ARGS hold an option the command sets itself. ``check``
(what ./compat candidate runs before tox builds the candidate's environment): 2 when the
candidate would stop at once (a SPEC uv cannot read or whose package cannot be told, no
baseline, a report that cannot be written or holds something else, a -m or -k pytest would
refuse, a suite the baseline never ran), 0 otherwise.

The candidate is the baseline with the SPECs: in its tox environment (``IN_CANDIDATE_ENV``)
the SPECs are installed with the baseline's versions of every package its header records
that no SPEC names (``pins``), and ``check --constraints`` writes the same for ./compat to
build that environment under (UV_CONSTRAINT); ``installed`` then checks what it got.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.core import records, runfiles
from harness.env.facts import package_versions
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


def install(specs: list[str], pins: list[str] = ()) -> str | None:
    """Install ``specs`` into this environment, with ``pins`` (the baseline's versions of the
    packages the SPECs do not name) in the same resolution; an error line, or None."""
    uv = uv_command()
    if uv is None:
        return "no uv found to install the candidate versions (pip install uv, or set MPS_COMPAT_UV)"
    res = subprocess.run([*uv, "pip", "install", "--python", sys.executable, *specs, *pins])
    if res.returncode == 0:
        return None
    return (f"installing {' '.join(specs) or 'the baseline versions'} failed (uv exit {res.returncode}; above)"
            + (f"; the baseline's other versions were kept ({', '.join(pins)}): where uv says a package "
               "named here needs another version of one of them, name that one too "
               "(./compat candidate SPEC OTHER==VERSION)" if pins else ""))


def named(spec: str) -> str | None:
    """The package a SPEC installs (its canonical name), or None where that cannot be told: a
    bare URL or a folder (``NAME @ URL`` names it)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import (InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename,
                                 parse_wheel_filename)
    try:
        return canonicalize_name(Requirement(spec).name)
    except InvalidRequirement:
        pass
    base = spec.rstrip("/").rsplit("/", 1)[-1].split("#", 1)[0]
    try:
        if base.endswith(".whl"):
            return canonicalize_name(parse_wheel_filename(base)[0])
        if base.endswith((".tar.gz", ".zip")):
            return canonicalize_name(parse_sdist_filename(base)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        pass
    return None


def pins(packages: dict, specs: list[str]) -> list[str]:
    """The baseline's versions (``packages``: its header's, name -> version) of every package
    the SPECs do not name, as requirements: the candidate is the baseline with the SPECs, not
    whatever is newest of the rest (its environment is built from the project's open
    requirements, which installed the newest torch beside a SPEC that named transformers alone)."""
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version
    asked = {named(spec) for spec in specs}
    out = []
    for name, version in sorted(packages.items()):
        try:
            Version(str(version))
        except InvalidVersion:
            continue
        if canonicalize_name(name) not in asked:
            out.append(f"{name}=={version}")
    return out


def constraints(packages: dict, specs: list[str]) -> str:
    """What the candidate's environment is built under (``UV_CONSTRAINT``, set by ./compat for
    tox): the baseline's pins and the SPECs that are plain requirements, a line each, so its
    first install already holds the versions ``install`` then asks for."""
    from packaging.requirements import InvalidRequirement, Requirement
    plain = []
    for spec in specs:
        try:
            if not Requirement(spec).url:
                plain.append(spec)
        except InvalidRequirement:
            pass
    return "".join(f"{line}\n" for line in (*pins(packages, specs), *plain))


def installed(specs: list[str], packages: dict) -> tuple[str | None, list[str]]:
    """After the install: (the first SPEC whose package is not at a version it asked for, in
    one line, or None; notes: the named packages still at the baseline's version, and the
    others the install moved away from the baseline's)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name
    base = {canonicalize_name(k): str(v) for k, v in packages.items()}
    asked = {named(spec) for spec in specs}
    here = package_versions([n for n in {*asked, *base} if n])
    notes = []
    for spec in specs:
        name = named(spec)
        got = here.get(name) if name else None
        if name and got is None:
            return f"{spec}: uv reported success, but no {name} is installed", notes
        try:
            req = Requirement(spec)
        except InvalidRequirement:
            req = None
        if got and req and not req.url and not req.specifier.contains(got, prereleases=True):
            return (f"{spec}: {name} {got} is installed, which that does not allow (uv kept a version that "
                    "satisfied the other requirements); say the version exactly (NAME==VERSION)"), notes
        if got and base.get(name) is not None and _public(base[name]) == _public(got):
            notes.append(f"{name} {got} is the baseline's version already: the candidate tries nothing new for it")
    for name, was in sorted(base.items()):
        now = here.get(name)
        if now is not None and name not in asked and _public(now) != _public(was):
            notes.append(f"{name} {was} -> {now}, though no SPEC named it (the versions named needed it, or the "
                         "environment was built without the baseline's pins): a change here may be its doing")
    return None, notes


def versions(specs: list[str] = ()) -> str:
    """The shown packages' versions here, and those of the packages the SPECs name."""
    names = list(dict.fromkeys((*SHOWN, *(n for n in map(named, specs) if n))))
    return ", ".join(f"{name} {v}" for name, v in package_versions(names).items() if v is not None)


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
            pass
        elif os.sep in spec or spec.startswith(".") or spec.endswith((".whl", ".tar.gz", ".zip")):
            if not os.path.exists(spec):
                return f"{spec}: no such file or folder (a local wheel or project to install as the candidate)"
        else:
            try:
                Requirement(spec)
            except InvalidRequirement as exc:
                return (f"{spec!r}: not a requirement uv can read ({str(exc).splitlines()[0]}); write one as "
                        "torch==2.15.* or 'transformers>=5.24,<6'")
        if named(spec) is None:
            return (f"{spec}: cannot tell which package this installs, so the baseline's version of it would be "
                    "kept beside it; name it: 'NAME @ URL' (transformers @ git+https://github.com/huggingface/"
                    "transformers, torch @ file:///abs/path/to/project)")
    return None


def keep_baseline(args, pytest_args: list[str], **run) -> int:
    """``./compat baseline``: the planned runs, joined into the baseline file when all ended."""
    run.pop("install", None)   # nothing is installed for the baseline: it is this environment
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


def suites_problem(baseline: compare.Side, pytest_args: list[str], planned=suiteplan.planned) -> str | None:
    """The suites the candidate's runs would take that the baseline holds no check of (a
    baseline kept with -m env, a candidate of everything): said before the install, where it
    was found only after every run ("no comparison")."""
    phases = planned(pytest_args, say=lambda line: None).phases
    if not phases or any(not phase.suites for phase in phases):
        return None   # one run as given: which suites it takes is pytest's to say
    held = {rec.get("suite") for rec in baseline.records.values()}
    missing = sorted({suite for phase in phases for suite in phase.suites} - held)
    if not missing:
        return None
    return (f"the baseline holds no {', '.join(missing)} check, which these pytest arguments select "
            f"({' '.join(pytest_args) or 'all suites'}): keep a baseline of the same selection first "
            f"(./compat baseline {' '.join(pytest_args)}".rstrip() + "), or narrow the candidate's to the baseline's")


def check_candidate(args, pytest_args: list[str], planned=suiteplan.planned, **run) -> int:
    """``python -m tools.upgrade check``, which ./compat candidate runs before tox builds the
    candidate's environment (the first time, an install of torch: minutes): 2 and the one line
    ``candidate`` would say after that install, or 0. With ``--constraints PATH`` it writes
    there what that environment is built under (``constraints``: ./compat hands it to uv as
    UV_CONSTRAINT)."""
    problem = spec_problem(args.specs)
    baseline, why = candidate_problem(args) if not problem else (None, None)
    problem = problem or why or selection_problem(pytest_args) or suites_problem(baseline, pytest_args, planned)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.constraints:
        try:
            runfiles.write_atomic(Path(args.constraints), constraints(baseline.packages, args.specs))
        except OSError as exc:
            print(f"error: cannot write {args.constraints}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    return 0


# Set in the candidate's tox environment (tox.ini): only there does the candidate install the
# baseline's versions of what no SPEC names; run elsewhere, it leaves your environment's alone.
IN_CANDIDATE_ENV = "MPS_COMPAT_CANDIDATE_ENV"


def _public(version: str) -> str:
    from packaging.version import InvalidVersion, Version
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def try_candidate(args, pytest_args: list[str], install=install, planned=suiteplan.planned, **run) -> int:
    """``./compat candidate``: install the SPECs beside the baseline's other versions, check
    that the versions asked for are the ones installed, the planned runs, one comparison over
    all of them."""
    baseline, problem = candidate_problem(args)
    problem = problem or spec_problem(args.specs) or suites_problem(baseline, pytest_args, planned)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    pinned = pins(baseline.packages, args.specs) if os.environ.get(IN_CANDIDATE_ENV) == "1" else []
    here = package_versions([pin.split("==")[0] for pin in pinned])
    moved = [pin for pin in pinned if _public(here[pin.split("==")[0]] or "") != _public(pin.split("==")[1])]
    if args.specs or moved:
        problem = install(args.specs, pinned)
        if problem:
            print(f"error: {problem}", file=sys.stderr)
            return 2
    problem, notes = installed(args.specs, baseline.packages)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    print(f"candidate: {versions(args.specs)}", flush=True)
    for note in notes:
        print(f"note: {note}", flush=True)
    with tempfile.TemporaryDirectory(prefix=".candidate-parts-") as tmp:
        outcome, parts, short = run_parts(pytest_args, Path(tmp), ["--baseline", args.baseline_file],
                                          planned=planned, **run)
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
        return 2
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
    check.add_argument("--constraints", help="write there the versions the candidate's environment is built with "
                                             "(./compat sets UV_CONSTRAINT to it)")
    for p in (base, cand, check):
        p.add_argument("--baseline-file", default=os.environ.get("MPS_COMPAT_BASELINE", str(DEFAULT_BASELINE)))
    ours, pytest_args = split_args(argv)
    args = parser.parse_args(ours)
    mine = clashing(pytest_args)
    if mine:
        print(f"error: {mine} is set by ./compat {'candidate' if args.side == 'check' else args.side} itself (the baseline file: --baseline-file before "
              "the --); leave it out of the pytest arguments", file=sys.stderr)
        return 2
    started = os.environ.get("MPS_COMPAT_CANDIDATE_STARTED")
    if args.side == "candidate" and started:   # ./compat: tox built the environment (its failure exits 1 too)
        Path(started).touch()
    try:
        side = {"baseline": keep_baseline, "candidate": try_candidate, "check": check_candidate}[args.side]
        return side(args, pytest_args, **run)
    except KeyboardInterrupt:   # between two runs (during one, the run itself ends: suiteplan.call_pytest)
        print(f"interrupted: no further run; {os.path.relpath(args.baseline_file)} is as it was unless "
              "'baseline kept' was said above", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
