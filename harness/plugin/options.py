"""What a run selects: the plugin's command-line options, the targets, and the workload.

``add_options`` declares the options (``--device``, ``--mps-fallback``, ``--check-timeout``,
``--workload``, ``--run-file``, ``--save-baseline``, ``--baseline``, ``--compare-out``);
``parse_check_timeout``, ``select_targets``, ``output_problems`` and ``same_file_problems``
check what they were given before anything runs (``same_file_problems``: no file the run
replaces may be its own run file or its baseline). ``target_table`` is the header's table of
targets, and ``targets_line`` the run's first line from it; ``default_run_file``, ``report_command`` and
``shown_path`` say where the records go and how to render them;
``target_param`` and ``serves`` parametrize a check over the selected targets
(harness/plugin/hooks.py's pytest_generate_tests). ``workload_for`` is the ``workload``
fixture's choice: what ``--workload`` means on a target (harness.optim.workloads chooses the
shape in the sandbox, where the device is), made once per run and target, kept in the
config's stash, and shared by the xdist workers through a locked file, so every check of a
run measures the same shape.
"""
from __future__ import annotations

import json
import math
import shlex
from pathlib import Path

import pytest

from harness.core import records, runfiles
from harness.core.isolate import MAX_TIMEOUT
from harness.env import devices

DEFAULT_CHECK_TIMEOUT = 120.0
WORKLOADS = ("auto", "small", "medium", "large")


def add_options(parser) -> None:
    """The plugin's command-line options, in their own group (pytest_addoption)."""
    group = parser.getgroup("mps-compat")
    group.addoption("--device", default=None, metavar="TARGETS",
                    help="targets to run: cpu, cuda, mps, comma-separated, or all (default). "
                         "Naming an absent device is an error.")
    group.addoption("--mps-fallback", default=None, metavar="on|off",
                    help="PYTORCH_ENABLE_MPS_FALLBACK for the run: on (default; missing MPS kernels run on "
                         "the CPU and are reported) or off (strict: they raise)")
    group.addoption("--check-timeout", default=str(DEFAULT_CHECK_TIMEOUT), metavar="SECONDS",
                    help="time limit of one sandboxed check (ops, parity, optim); past it the check is a timeout "
                         f"(default {DEFAULT_CHECK_TIMEOUT:g}, at most {MAX_TIMEOUT:g}: a day). It counts the check "
                         "alone: the sandbox child's start, and its restart after a crash or a hang, have their own "
                         "limit")
    group.addoption("--workload", default="auto", choices=WORKLOADS,
                    help="the optimization suite's training shape: auto (default: per target, the smallest "
                         "shape whose step is long enough to measure the technique rather than launch overhead, "
                         "within the device's memory; harness/optim/workloads.py), small (a BERT small enough for a "
                         "2-core CPU), medium (BERT-base, batch 32, length 128) or large (the "
                         "chinese-macbert-large memory table's shape, batch 32, length 128)")
    group.addoption("--run-file", default=None, metavar="PATH",
                    help="where to append this run's records (default reports/runs/<env-id>.jsonl)")
    group.addoption("--save-baseline", default=None, metavar="PATH",
                    help="keep this run as the reference for later --baseline runs (a run file, replaced only "
                         "when the run ran every selected check: an interrupted run leaves it as it was)")
    group.addoption("--baseline", default=None, metavar="PATH",
                    help="compare this run with a kept baseline (run file or directory); the session fails "
                         "when a check regressed (python -m tools.compare has the rules)")
    group.addoption("--part-of-plan", action="store_true", default=False,
                    help="(./compat) this run is one of the pytest runs ./compat makes of one selection "
                         "(tools/suiteplan.py): --save-baseline keeps this run's part, which ./compat joins with "
                         "the other runs' parts into the baseline after the last one; --baseline is read (the perf "
                         "checks confirm against it) but compared once, by ./compat, over all the runs")
    group.addoption("--compare-out", default=None, metavar="PATH.md",
                    help="with --baseline (needs it): also write the comparison as Markdown to PATH and JSON "
                         "beside it")


def parse_check_timeout(value) -> float:
    """``--check-timeout``: seconds above zero and at most a day (the sandbox's MAX_TIMEOUT: the
    platform's wait cannot take much more, and a larger limit would fail every sandboxed check
    at its first wait); ValueError (one line) otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT):
        raise ValueError(f"--check-timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g} (a day; "
                         f"default {DEFAULT_CHECK_TIMEOUT:g}), not {value!r}")
    return seconds


def output_problems(config) -> list[str]:
    """One line for each place this run will write that cannot be written (see
    runfiles.probe_writable), or that holds something the run would lose or mix its lines into:
    a ``--run-file`` or ``--save-baseline`` that is not a run file (runfiles.run_file_problem), a
    ``--compare-out`` that is not an earlier comparison (compare.output_problem)."""
    places = []   # (what, path, a directory, replaced whole rather than appended to)
    run_file = config.getoption("--run-file")
    places.append(("--run-file", run_file, False, False) if run_file else
                  ("the run file's directory", Path(config.rootpath, "reports", "runs"), True, False))
    for option in ("--save-baseline", "--compare-out"):
        path = config.getoption(option)
        if path:
            places.append((option, path, False, True))
            if option == "--compare-out":
                places.append((option + " (its .json)", Path(path).with_suffix(".json"), False, True))
    problems = []
    for what, path, is_dir, replaced in places:
        why = runfiles.probe_writable(path, directory=is_dir, replace=replaced)
        if why:
            fix = "choose another place" + ("" if what.startswith("--") else " with --run-file PATH")
            problems.append(f"{what} {path}: cannot write there: {why}; {fix}")
        elif what.startswith("--compare-out"):
            from harness.report import compare
            why = compare.output_problem(path)
            if why:
                problems.append(f"{what} {path}: {why}")
        elif what in ("--run-file", "--save-baseline"):   # a path the user named: it may hold anything
            why = runfiles.run_file_problem(path, replace=replaced)
            if why:
                problems.append(f"{what} {path}: {why}")
    return problems


def same_file_problems(config, run_file) -> list[str]:
    """One line for each option that would lose what another place holds: a file this run
    replaces (``--save-baseline``, ``--compare-out`` and its .json) that is the run file it
    appends to (``run_file``: --run-file or the default, whose earlier runs the replacement
    would wipe), the ``--baseline`` it reads, or another file it replaces; and
    ``--compare-out`` without ``--baseline``, which would be ignored. Paths are compared
    resolved (links, ``..``), and by inode where both exist. ``--save-baseline`` naming the
    ``--baseline`` is allowed: the old one is read before the run, the new one written after."""
    opt = config.getoption
    if opt("--compare-out") and not opt("--baseline"):
        return ["--compare-out needs --baseline: there is nothing to compare this run with"]
    run_file_words = ("the run file this run appends to (--run-file)" if opt("--run-file") else
                      f"the run file this run appends to by default ({shown_path(run_file)}; "
                      "--run-file PATH chooses another)")
    kept = [("--save-baseline", opt("--save-baseline"), "its earlier runs")]
    if opt("--compare-out"):
        out = Path(opt("--compare-out"))
        kept += [("--compare-out", out, "what it holds"), ("--compare-out (its .json)", out.with_suffix(".json"),
                                                           "what it holds")]
    replaced = [(what, path, holds) for what, path, holds in kept if path]
    others = [(run_file_words, run_file, "its earlier runs")]
    if opt("--baseline") and Path(opt("--baseline")).is_file():
        others.append(("the --baseline this run is compared with", opt("--baseline"), "the baseline"))
    problems = []
    for i, (what, path, _) in enumerate(replaced):
        for other, other_path, holds in others + [(w, p, h) for w, p, h in replaced[:i]]:
            if what == "--save-baseline" and other.startswith("the --baseline"):
                continue
            if _same_file(path, other_path):
                problems.append(f"{what} {path} is also {other}: replacing it would lose {holds}; "
                                f"give {what.split()[0]} another path")
                break
    return problems


def _same_file(a, b) -> bool:
    a, b = Path(a), Path(b)
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and a.samefile(b)
    except (OSError, RuntimeError):   # a symbolic link loop: not a file either could be
        return False


def select_targets(device_opt: str | None) -> list[str]:
    """The targets ``--device`` names (all by default); ValueError (one line) for a bad value,
    a value that names none (``--device ,``: without this the run would select nothing and
    end without a word), or a target named that is not here (asked for by name, it must be
    here)."""
    targets = devices.parse_device_option(device_opt)
    if device_opt not in (None, "", "all"):
        for name in targets:
            avail = devices.backend(name).availability()
            if not avail.available:
                raise ValueError(f"--device {name}: {avail.reason}")
    return targets


def target_table(selected: list[str], facts: dict) -> dict:
    """Every target, known or selected: whether this run selected it, whether it is here, and why not."""
    table = {}
    for name in dict.fromkeys([*devices.TARGETS, *selected]):
        avail = devices.backend(name, facts).availability()
        table[name] = {"selected": name in selected, "available": avail.available, "reason": avail.reason}
    return table


def targets_line(table: dict, device_opt: str | None) -> str:
    """The run's first line: the targets that will run, and each one that will not with why
    (``table``: ``target_table``'s)."""
    running = [name for name, info in table.items() if info["selected"] and info["available"]]
    skipping = [f"{name} ({info['reason'] if info['selected'] else f'not selected: --device {device_opt}'})"
                for name, info in table.items() if not (info["selected"] and info["available"])]
    line = "mps-compat: running " + (", ".join(running) or "no target")
    return line + ("; skipping " + ", ".join(skipping) if skipping else "")


def default_run_file(rootpath, env_id: str) -> Path:
    """Where a run's records go without --run-file: the directory tools.report reads by default."""
    return Path(rootpath, "reports", "runs", env_id + ".jsonl")


def report_command(run_file) -> str:
    """The command that renders a run written to ``run_file``: tools.report with no argument
    reads every run file in this project's reports/runs/ (the default place, and what
    ``./compat suites`` renders after the run); a run file elsewhere must be named, and its
    page goes beside it."""
    from harness.core.isolate import ROOT   # the project's root, where tools.report reads by default
    path = Path(run_file).absolute()
    if path.parent.resolve() == (ROOT / "reports" / "runs").resolve():
        return "python -m tools.report"
    # the page beside the run file: reports/matrix.* (every run of reports/runs/) stays as it is
    return (f"python -m tools.report {shlex.quote(shown_path(path))} --out "
            f"{shlex.quote(shown_path(path.parent))}")


def shown_path(path) -> str:
    """A path as the user can type it from here: relative below the current directory, else absolute."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def target_param(target, *values, case_id=None):
    """A pytest.param for one target (and case): its id, and the target's marker where it has one."""
    ident = f"{target}-{case_id}" if case_id else target
    marks = getattr(pytest.mark, target) if target in devices.TARGETS else ()  # a stand-in has no marker
    return pytest.param(*values, marks=marks, id=ident)


def serves(target: str, path) -> bool:
    """A stand-in target serves only its suites (devices.StandIn.suites)."""
    stand_in = devices.stand_in(target)
    if stand_in is None:
        return True
    ident = records.identity_for(tuple(Path(str(path)).parts), "", {})
    return ident is not None and ident.suite in stand_in.suites


# --------------------------------------------------------------------------- the workload

CHOICES = pytest.StashKey[dict]()   # target -> {"name", "setup", "reason"}, per process


def workload_for(request, target: str, sandbox, tmp_path_factory) -> dict:
    """``{"name", "setup", "reason"}`` for ``target`` at this run's ``--workload``; the check
    fails (with the reason) when the shape cannot be chosen there."""
    from filelock import FileLock
    option = request.config.getoption("--workload")
    cache = request.config.stash.setdefault(CHOICES, {})
    if target in cache:
        return cache[target]

    def choose() -> dict:
        outcome = sandbox.call("harness.optim.workloads:resolve", option, target)
        if outcome.kind != "ok":
            pytest.fail(f"--workload {option}: choosing the shape on {target} failed ({outcome.kind}): "
                        f"{outcome.detail}", pytrace=False)
        return {k: outcome.value[k] for k in ("name", "setup", "reason")}
    worker = getattr(request.config, "workerinput", None)
    if worker is None:  # one process: nothing to share
        cache[target] = choose()
        return cache[target]
    # xdist: the workers of this session share one choice (the session's testrunuid in the name)
    shared = tmp_path_factory.getbasetemp().parent / f"workload-{worker['testrunuid']}-{option}-{target}.json"
    with FileLock(f"{shared}.lock"):
        if shared.is_file():
            cache[target] = json.loads(shared.read_text())
        else:
            cache[target] = choose()
            shared.write_text(json.dumps(cache[target]))
    return cache[target]
