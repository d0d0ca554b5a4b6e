"""The two sides of the upgrade check, each run as ``./compat suites`` runs the suites.

    python -m tools.upgrade baseline [--baseline-file PATH] [-- PYTEST_ARGS ...]
    python -m tools.upgrade candidate [SPEC ...] [--baseline-file PATH] [--report PATH.md] [-- PYTEST_ARGS ...]
    python -m tools.upgrade check [the candidate's arguments]   # what would stop it, before tox builds it
    python -m tools.upgrade tox [TOX ARGS]                       # ./compat tox: tox, its torch environments checked

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
build that environment under (UV_CONSTRAINT); ``installed`` then checks what it got, and names
every other package the baseline recorded that moved. Its runs are an environment of their own
(``-candidate`` in their environment id: harness.env.facts.ROLE_VAR) with a run file of their own,
``reports/runs/candidate.jsonl``, which holds one candidate at a time (an earlier one's runs move
to its archive): the matrix shows it beside your environment, whose run file it never touches.

``tox`` (``./compat tox``): tox itself, once the torch environments it would build are known
to have a torch wheel for this Python and macOS (harness.env.fitness.TORCH_WHEELS): one named
that has none is refused in one line (exit 2) before tox builds anything, and left out of the
default list with a note. A relative path in any of these arguments means the directory
./compat was run from (tools.cli.from_caller).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.core import records, runfiles
from harness.env import fitness
from harness.env.facts import PACKAGES, ROLE_VAR, distributions, package_versions
from harness.report import compare
from harness.report.selection import readable
from tools import cli, suiteplan

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BASELINE = ROOT / "reports" / "baseline.jsonl"
REPORT = ROOT / "reports" / "upgrade-check.md"
SHOWN = ("torch", "transformers", "datasets", "accelerate", "tokenizers", "peft")
# set by this command on every run: the user's own would fight them
OURS = ("--save-baseline", "--baseline", "--compare-out", "--part-of-plan")
# pytest's options that name a file: relative, they mean the directory ./compat was run from (tools.cli)
PYTEST_PATHS = ("--run-file", "--junitxml", "--junit-xml", "--basetemp")
# The candidate's own run file, in runs/ beside its comparison (reports/runs/candidate.jsonl): its
# runs are an environment of their own (facts.ROLE_VAR), never appended to your environment's
# file, whose earlier runs they retired while the matrix showed the candidate as your column.
CANDIDATE_RUNS = "candidate.jsonl"


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


def installed(specs: list[str], packages: dict, recorded: dict | None = None) -> tuple[str | None, list[str]]:
    """After the install: (the first SPEC whose package is not at a version it asked for, in
    one line, or None; notes: the named packages still at the baseline's version, the others
    the install moved away from the baseline's (``packages``: its header's, pinned), every other
    distribution the baseline recorded (``recorded``: its header's ``distributions``) that moved,
    and the packages recorded today that the baseline's header lacks, which were not pinned)."""
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
    if recorded:   # every other distribution the baseline recorded: not pinned, so said when it moved
        now_all = distributions()
        moved = [f"{name} {was} -> {now_all[name]}" for name, was in sorted(recorded.items())
                 if name not in asked and name not in base and name in now_all
                 and _public(now_all[name]) != _public(str(was))]
        if moved:
            notes.append(f"also moved, though no SPEC named them and the candidate keeps the baseline's versions of "
                         f"{', '.join(PACKAGES)} only (the versions named needed them, or they are a dependency's): "
                         f"{', '.join(moved)}")
    lacking = [name for name in PACKAGES if canonicalize_name(name) not in base]
    if lacking:
        notes.append(f"the baseline records no version of {', '.join(lacking)} (it was kept by an older version of "
                     "this project), so the candidate has the newest of them, not the baseline's: keep the baseline "
                     "again (./compat baseline) to try the SPECs alone")
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
    problem, notes = installed(args.specs, baseline.packages, (baseline.header.get("facts") or {}).get("distributions"))
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    print(f"candidate: {versions(args.specs)}", flush=True)
    for note in notes:
        print(f"note: {note}", flush=True)
    extra = ["--baseline", args.baseline_file]
    own = candidate_run_file(args, pytest_args)
    if own is not None:
        say_earlier(own)
        extra += ["--run-file", str(own)]
    before = os.environ.get(ROLE_VAR)
    os.environ[ROLE_VAR] = "candidate"   # its runs' environment id: <yours>-candidate (harness.env.facts.env_id)
    try:
        with tempfile.TemporaryDirectory(prefix=".candidate-parts-") as tmp:
            outcome, parts, short = run_parts(pytest_args, Path(tmp), extra, planned=planned, **run)
            if short:
                print(f"no comparison: the run {short}; {os.path.relpath(args.report)} was not written",
                      file=sys.stderr)
                return failed(outcome)
            candidate = compare.load_side([str(p) for p in parts], "candidate")
    finally:   # the role is the candidate's runs', not this process's (a caller in-process goes on as itself)
        if before is None:
            os.environ.pop(ROLE_VAR, None)
        else:
            os.environ[ROLE_VAR] = before
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
    cmp.notes.extend(notes)   # what else the candidate's install moved: in the report, not only on the terminal
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


def candidate_run_file(args, pytest_args: list[str]) -> Path | None:
    """Where the candidate's runs go: ``runs/candidate.jsonl`` beside its comparison, or None
    where the pytest arguments name a ``--run-file`` of their own (theirs is kept as given)."""
    if any(arg == "--run-file" or arg.startswith("--run-file=") for arg in pytest_args):
        return None
    return Path(args.report).parent / "runs" / CANDIDATE_RUNS


def say_earlier(path: Path) -> None:
    """Move an earlier candidate's runs out of its run file into the archive beside it
    (runfiles.retire), and say so: the matrix shows this candidate alone, not its records over
    another candidate's (a peft SPEC's runs, and before them a tokenizers SPEC's)."""
    try:
        moved = runfiles.retire(path, lambda runs: {run.run_id for run in runs})
    except OSError as exc:
        print(f"note: the earlier candidate's runs stay in {os.path.relpath(path)} ({runfiles.os_error_words(exc)}): "
              "the matrix may show its records beside this candidate's", flush=True)
        return
    if moved is not None:
        print(f"note: the earlier candidate's {moved.runs} run(s) moved to {os.path.relpath(moved.archive)}: the "
              "matrix shows this candidate alone", flush=True)


def local_spec(spec: str) -> bool:
    """Whether a SPEC is a local wheel, archive or folder (a path), not a requirement or a URL."""
    if "://" in spec or spec.startswith("git+"):
        return False
    return os.sep in spec or spec.startswith(".") or spec.endswith((".whl", ".tar.gz", ".zip"))


# --------------------------------------------------------------------------- ./compat tox

TOX_BUILDS = ("run", "r", "run-parallel", "p", "exec", "e", "devenv", "d", "legacy", "le")
TORCH_ENV = r"torch(\d)(\d+)"


def tox_envs(argv: list[str], default: list[str], environ=os.environ) -> tuple[list[str], bool]:
    """(the environments a tox command line runs, whether it names them): its -e / --env
    (comma lists, every time given), else TOXENV, else tox.ini's env_list (``default``). Its
    arguments after ``--`` are pytest's, not tox's."""
    argv = argv[:argv.index("--")] if "--" in argv else argv
    named: list[str] = []
    for i, arg in enumerate(argv):
        value = None
        if arg in ("-e", "--env") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--env="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-e") and len(arg) > 2 and not arg.startswith("--"):
            value = arg[2:].lstrip("=")
        if value:
            named += [e.strip() for e in value.split(",") if e.strip()]
    if named:
        return named, True
    if environ.get("TOXENV"):
        return [e.strip() for e in environ["TOXENV"].split(",") if e.strip()], True
    return list(default), False


def tox_default(ini: Path) -> list[str]:
    """tox.ini's ``env_list`` (``[tox]``)."""
    import configparser
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ini, encoding="utf-8")
    raw = cfg.get("tox", "env_list", fallback="") or cfg.get("tox", "envlist", fallback="")
    return [e.strip() for e in raw.replace("\n", ",").split(",") if e.strip()]


def this_machine() -> tuple[str, str, str, str | None]:
    """(Python version, system, machine, macOS version or None): what a tox environment's torch
    wheel must fit. The macOS is ``sw_vers``' where Python's may be a stand-in (facts)."""
    import platform
    from harness.env import facts
    mac = None
    if platform.system() == "Darwin":
        mac = platform.mac_ver()[0] or None
        if facts.compatibility_version(mac):
            mac = facts.run_command(["sw_vers", "-productVersion"], {"SYSTEM_VERSION_COMPAT": "0"}) or mac
    return platform.python_version(), platform.system(), platform.machine(), mac


def tox_problem(argv: list[str], default: list[str], machine: tuple,
                environ=os.environ) -> tuple[list[str], str | None, str | None]:
    """What ``./compat tox ARGV`` should run: (the tox arguments, a note to print, or the one-line
    refusal). A torch environment whose torch has no PyPI wheel for this Python or macOS
    (harness.env.fitness.torch_wheel_gap: torch 2.15 on Python 3.10 or macOS 13) failed in tox
    with uv's words after the others had run; named (-e, TOXENV), it is refused before anything
    runs; from the default list, it is left out and said."""
    if argv and not argv[0].startswith("-") and argv[0] not in TOX_BUILDS:
        return argv, None, None   # tox list, tox config ...: builds nothing
    envs, named = tox_envs(argv, default, environ)

    def gap_of(env: str) -> str | None:
        m = re.fullmatch(TORCH_ENV, env)
        return fitness.torch_wheel_gap(f"{m.group(1)}.{m.group(2)}", *machine) if m else None
    gaps = {env: gap for env in envs if (gap := gap_of(env))}
    if not gaps:
        return argv, None, None
    said = "; ".join(f"{env}: {gap}" for env, gap in gaps.items())
    fixes = []
    for gap in gaps.values():
        if "Intel Macs" in gap:
            fix = "run it on an Apple-silicon Mac (an Intel Mac's last torch is set up by hand: docs/lock-and-tox.md)"
        elif "no wheel for Python" in gap:
            ranges = [fitness.TORCH_WHEELS[f"{m.group(1)}.{m.group(2)}"].python for env in default
                      if (m := re.fullmatch(TORCH_ENV, env)) and f"{m.group(1)}.{m.group(2)}" in fitness.TORCH_WHEELS]
            from packaging.version import Version
            low, high = max((r[0] for r in ranges), key=Version), min((r[1] for r in ranges), key=Version)
            fix = (f"make .venv from a Python {low} to {high}, which every torch environment has a wheel for "
                   f"(PYTHON=python{high} ./compat setup makes it anew)")
        else:
            fix = "update macOS (System Settings > General > Software Update)"
        if fix not in fixes:
            fixes.append(fix)
    others = [env for env in default if not gap_of(env)]
    runs_torch = any(re.fullmatch(TORCH_ENV, env) for env in others)
    if named or not any(re.fullmatch(TORCH_ENV, env) for env in envs if env not in gaps):
        rest = f", or run the others: ./compat tox -e {','.join(others)}" if runs_torch else ""
        return argv, None, f"tox cannot build {said}: {'; '.join(fixes)}{rest}"
    fits = [env for env in envs if env not in gaps]
    them = "it" if len(gaps) == 1 else "them"
    return (["-e", ",".join(fits), *argv],
            f"leaving out {said}; the others run (./compat tox -e {','.join(fits)}); to include {them}: "
            f"{'; '.join(fixes)}", None)


def run_tox(argv: list[str], machine=None, execv=os.execv, environ=os.environ, tox: str | None = None) -> int:
    """``./compat tox ARGS``: tox with ARGS, once the torch environments it would run are known
    to have a torch wheel for this Python and macOS (``tox_problem``); exec'd, so its status is
    tox's."""
    if "--" in argv:   # pytest's, in the torch environments: its file options mean the caller's directory
        i = argv.index("--")
        argv = [*argv[:i + 1], *cli.caller_args(argv[i + 1:], (*PYTEST_PATHS, *OURS[:3]))]
    args, note, problem = tox_problem(argv, tox_default(ROOT / "tox.ini"), machine or this_machine(), environ)
    if problem:
        print(f"compat: {problem}", file=sys.stderr)
        return 2
    if note:
        print(f"compat: {note}", file=sys.stderr, flush=True)
    tox = tox or str(Path(sys.executable).parent / "tox")
    execv(tox, [tox, *args])
    return 0


def main(argv: list[str] | None = None, **run) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["tox"]:   # ./compat tox: [--tox PATH] -- tox's own arguments, not this command's
        rest, tox = argv[1:], None
        if rest[:1] == ["--tox"] and len(rest) > 1:
            tox, rest = rest[1], rest[2:]
        return run_tox(rest[1:] if rest[:1] == ["--"] else rest, tox=tox)
    parser = argparse.ArgumentParser(prog="python -m tools.upgrade", description=cli.summary(__doc__))
    sub = parser.add_subparsers(dest="side", required=True)
    base = sub.add_parser("baseline", help="the suites in this environment, kept as the baseline")
    cand = sub.add_parser("candidate", help="the suites with candidate versions, compared with the baseline")
    check = sub.add_parser("check", help="what would stop a candidate, said before its environment is built")
    sub.add_parser("tox", help="./compat tox: tox, once the torch environments it builds have a wheel here "
                               "(its arguments are tox's: read before this parser)")
    for p in (cand, check):
        p.add_argument("specs", nargs="*", help="requirement specs to install, e.g. torch==2.15.*")
        p.add_argument("--report", default=str(REPORT), help="where the comparison goes (.md; .json beside it)")
    check.add_argument("--constraints", help="write there the versions the candidate's environment is built with "
                                             "(./compat sets UV_CONSTRAINT to it)")
    for p in (base, cand, check):
        p.add_argument("--baseline-file", default=os.environ.get("MPS_COMPAT_BASELINE", str(DEFAULT_BASELINE)))
    ours, pytest_args = split_args(argv)
    args = parser.parse_args(ours)
    # a relative path means the directory ./compat was run from (MPS_COMPAT_CWD: tools.cli), not the project's
    args.baseline_file = cli.from_caller(args.baseline_file)
    if args.side != "baseline":
        args.report = cli.from_caller(args.report)
        args.specs = [cli.from_caller(spec) if local_spec(spec) else spec for spec in args.specs]
    pytest_args = cli.caller_args(pytest_args, PYTEST_PATHS)
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
