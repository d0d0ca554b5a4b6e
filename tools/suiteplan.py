"""How ``./compat suites`` runs the suites: in which pytest runs, on how many pytest-xdist
workers, and about how long that takes.

    python -m tools.suiteplan [pytest args]     # the plan, one line each
    python -m tools.suiteplan run [--python PY] [-- pytest args]   # run it (./compat suites)
    python -m tools.suiteplan figures [--write] RUNFILE...        # the first-run figures, measured

and, loaded with ``-p tools.suiteplan``, the pytest plugin that narrows one of those runs
to its suites (``--only-suites env,ops,parity``).

Why more than one run. Under xdist, checks run side by side, and two suites measure time:

* perf: each measurement holds the machine-wide timing lock exclusively
  (harness.env.timing.alone), and the plugin runs every other check's call under the lock's
  shared side (harness.plugin.hooks, timing.beside), so no check computes while perf times.
  What the lock does not cover is a check's set-up: the sandbox child starting, the
  ``--workload auto`` probe timing a matmul. So perf runs by itself, not beside thousands
  of op checks, and serially: on workers, one worker's set-up computes while another
  times, each sandbox child gets a share of the cores (``isolate.threads_per_worker``) where
  a user's training gets them all, and the queue for the lock leaves little to gain. Measured
  on the 2-core VM (2026-11-27, three runs of each, interleaved): ``-n 2`` took 159-164 s and
  serially 111-115 s, with wider intervals on workers (median relative width 0.034-0.053
  against 0.026-0.033) and each measurement at 1 thread instead of 2, so a ``./compat
  suites`` run's times could not be compared with a baseline's (harness.perf.against).
* optim: its time claims are timed in interleaved rounds (harness.optim.ratios.compare_time)
  under the lock's shared side only, like any check that measures nothing: on workers,
  another check would compute during the rounds and widen or bias the ratio. So the optim
  suite runs serially, alone.
* env, ops and parity time nothing: one run, on workers.

Each run appends its own run to the environment's run file, and the report merges the
runs of one environment (the newest record of each check wins), so three runs make one
matrix column. Arguments that only make sense for one run (``--baseline``,
``--save-baseline``, ``--compare-out``, ``--lf`` ...) and a run whose parallelism the user
chose (``-n``, ``--numprocesses``, ``-p no:xdist``) are left as one pytest run, as given. A
``-m`` expression that cannot select a run's suites skips that run (``-m env``: one run,
of suites/env only), and a run whose checks add up to less than ``XDIST_MIN_S`` runs
serially: starting workers (each imports torch and collects) would cost more than it saves.

The estimate: each selected check's duration in this environment's earlier runs (the run
files under reports/runs whose header names this host, Python and torch; the newest record
of each check; less the time it waited for the timing lock, ``waited_s``; an earlier run
that saw part of a file, narrowed by -k, scaled up to the file's checks); where this
environment never ran a test file on a target, the figures of ``FIGURES`` (measured on the
developers' 2-core Linux VM). A run takes its start-up plus those seconds, divided by
N x EFFICIENCY on N workers; the report after the runs adds AFTER_S. It is printed as an
estimate, with where it came from.

Running them (``execute``, ``python -m tools.suiteplan run``, which ./compat suites calls; the
two sides of the upgrade check, tools/upgrade.py, call it with options of their own per run):
one ``python -m pytest suites/`` per run (the files, folders or node ids you named instead of
``suites/``, and only the runs whose suites they hold), with ``-p tools.suiteplan --only-suites SUITES`` and
``-n WORKERS`` where it has workers, then the user's arguments. Their status together is one
pytest run's: 1 when any run had failed checks (the next runs still run, unless ``-x`` or
``--maxfail`` asked to stop); an interrupted run (2), an internal (3) or a usage error (4) ends
the plan there; 5 only when no run selected anything. Ctrl-C reaches the pytest run itself,
which ends its session; no further run is started.

The plan's lines (``python -m tools.suiteplan [pytest args]``, for a look without running):
``stop-on-failure`` first where ``-x`` or ``--maxfail`` was given, ``say TEXT`` (what is
printed first), ``phase NAME WORKERS SUITES`` (``phase all 0 -`` is the user's arguments alone).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from harness.core import records
from harness.report.selection import keyword_selects, marker_selects, names_in, readable

try:
    import tomllib
except ImportError:                 # Python 3.10: pytest's own dependency reads TOML there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
SUITES_DIR = "suites"
TARGETS = ("cpu", "cuda", "mps")
TIMED = ("optim", "perf")   # a timed suite: a run of its own, serial
UNTIMED = "untimed"
MAX_WORKERS = 4      # each worker holds torch and a sandbox child (the self-tests cap theirs alike)
XDIST_MIN_S = 60.0   # a run estimated shorter than this runs serially
EFFICIENCY = 0.8     # N workers finish N * EFFICIENCY times sooner (env, ops, parity -n 2 on 2 cores:
                     # 630-690 s of checks in about 7 min, start-up included: 1.5x)
STARTUP_S = 10.0     # one pytest run's imports, collection and the sandbox's torch (the warm-up)
OP_TABLE_S = 20.0    # a run with op checks (ops, parity) also imports OpInfo's op_db, twice
OP_SUITES = ("ops", "parity")
WORKER_START_S = 10.0  # the workers' own imports and collection, in parallel
AFTER_S = 10.0       # tools.kernels --save and tools.report after the runs
SKIP_S = 0.0015      # a check skipped because its target is absent: skipped before its set-up
                     # (harness.plugin.hooks.AbsentTargets), `pytest suites/ -m mps` on the VM
                     # skips 11,441 in 21 s, 6.6 s of it collection: 1.3 ms each

# Seconds each test file's checks take on the cpu target, run serially, and how many checks
# it has per target: tools/suite_figures.json, written by ``python -m tools.suiteplan figures
# --write RUNFILE...`` from whole ``./compat suites`` runs on the developers' 2-core Linux VM
# (each file's recorded durations added up less their wait for the timing lock, the larger
# over the runs given; the counts from the newest run's records, skips included). The file
# says when, where and from which runs. Under -n 2 those sums are what the estimate divides
# by 2 x EFFICIENCY, as it does with a user's own runs. The estimate uses them only where this
# environment has no run of its own, and assumes an available GPU target takes what the cpu
# takes: rough, and said to be.
FIGURES_FILE = Path(__file__).with_name("suite_figures.json")


def load_figures(path: Path = FIGURES_FILE) -> dict[str, dict]:
    """The figures per test file; none (the estimate then says it has nothing to go on) when
    the file is missing or unreadable."""
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return files if isinstance(files, dict) else {}


FIGURES: dict[str, dict] = load_figures()
FIGURES_WHERE = "figures measured on a 2-core Linux VM (tools/suite_figures.json)"
EARLIER = "this environment's earlier runs"
# The files whose checks carry the `compile` marker (their pytestmark), which a -m
# expression includes only when it names `compile` (harness.core.records.OPT_IN).
COMPILE_FILES = ("suites/parity/test_compiled.py",)
OPT_IN = tuple(records.OPT_IN)

# Markers pytest and the plugins the suites run with register themselves; with the markers of
# pyproject.toml and the suites' own names, every name a -m expression of a run can use
# (`--strict-markers`). A -m that names another is a usage error the first run will say: the
# plan then prints no estimate before it. A plugin of the user's own that registers a marker
# costs that marker's runs the estimate line, nothing else.
PLUGIN_MARKERS = frozenset({"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings",
                            "tryfirst", "trylast", "timeout", "xdist_group", "anyio", "hypothesis", "cases"})


def unregistered_markers(markexpr: str | None, root: Path = ROOT) -> set[str]:
    """The names in ``-m markexpr`` that no marker list here registers (empty when it cannot
    tell: no pyproject.toml to read)."""
    if not markexpr:
        return set()
    try:
        with open(root / "pyproject.toml", "rb") as fh:
            lines = tomllib.load(fh)["tool"]["pytest"]["ini_options"]["markers"]
    except (OSError, KeyError, ValueError):
        return set()
    known = {line.split(":", 1)[0].split("(", 1)[0].strip() for line in lines}
    known |= {*TARGETS, *records.CATEGORIES, *OPT_IN, "slow", *PLUGIN_MARKERS}
    return names_in(markexpr) - known


# Arguments that describe one pytest run, or print instead of running: passed on as given.
ONE_RUN = ("--baseline", "--save-baseline", "--compare-out", "--lf", "--last-failed", "--ff", "--failed-first",
           "--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--pdb", "--trace")
NO_RUN = ("-h", "--help", "--version", "-V", "--co", "--collect-only", "--fixtures", "--fixtures-per-test",
          "--markers", "--setup-plan", "--setup-only", "--cache-show")
VALUED = {"-m", "-k", "-p", "-n", "--numprocesses", "--device", "--maxfail", "--run-file", "--baseline",
          "--save-baseline", "--compare-out", "-c", "-o", "-r", "-W", "--rootdir", "--basetemp", "--tb",
          "--durations", "--deselect", "--ignore", "--ignore-glob", "--confcutdir", "--workload",
          "--mps-fallback", "--check-timeout", "--dist", "--maxprocesses", "--tx", "--log-level",
          "--hypothesis-profile", "--hypothesis-seed", "--timeout", "--import-mode", "--capture",
          "--color", "--junitxml", "--junit-xml", "--override-ini", "--config-file", "--log-file",
          "--log-file-level", "--log-cli-level", "--log-format", "--log-date-format", "--durations-min",
          "--junit-prefix", "--report-log", "--pythonwarnings"}
FLAGS_WITHOUT_VALUE = set("xqvsl")


# --------------------------------------------------------------------------- the arguments

@dataclasses.dataclass
class Args:
    markexpr: str | None = None
    keyword: str | None = None
    devices: tuple[str, ...] | None = None
    workers: str | None = None        # the user's -n value ("auto", "4"), or "0" for -p no:xdist
    one_run: str | None = None        # the argument that asks for one run
    no_run: bool = False              # --help, --collect-only ...: pytest prints, nothing is timed
    exitfirst: bool = False
    paths: tuple[str, ...] = ()       # the files, folders and node ids named (relative to the root)


def _option_value(args: list[str], i: int, short: str | None, long: str | None) -> tuple[str | None, int]:
    """The value of the option at ``args[i]`` if it is ``short`` / ``long`` (``-m X``, ``-mX``,
    ``--long X``, ``--long=X``) and how many arguments it took; (None, 0) otherwise."""
    a = args[i]
    for name in (short, long):
        if not name:
            continue
        if a == name:
            return (args[i + 1], 2) if i + 1 < len(args) else (None, 1)
        if name.startswith("--") and a.startswith(name + "="):
            return a[len(name) + 1:], 1
        if not name.startswith("--") and a.startswith(name) and len(a) > len(name) and not a.startswith("--"):
            return a[len(name):], 1
    return None, 0


def named_path(arg: str, root: Path = ROOT) -> str | None:
    """``arg`` as a path pytest collects (a file, a folder, a node id ``file::test[...]``) relative
    to ``root``, posix; None for anything that is not one on disk: a value of an option this
    module does not know (``--durations-min 1.0``) or a mistyped path, which pytest reads and
    answers itself."""
    if not arg or arg.startswith("-"):
        return None
    file, sep, rest = arg.partition("::")
    path = Path(file) if Path(file).is_absolute() else root / file
    if not path.exists():
        return None
    try:
        rel = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return arg                    # outside the root: named, and nothing of suites/
    return rel + sep + rest


def scan(args: list[str], root: Path = ROOT) -> Args:
    """What in pytest's arguments decides the plan (the rest goes to pytest untouched)."""
    out = Args()
    paths: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        for short, long, field in (("-m", None, "markexpr"), ("-k", None, "keyword"),
                                   ("-n", "--numprocesses", "workers"), (None, "--device", "devices"),
                                   ("-p", None, "plugin")):
            value, took = _option_value(args, i, short, long)
            if took:
                if field == "devices" and value is not None:
                    wanted = [d.strip() for d in value.split(",") if d.strip()]
                    out.devices = None if wanted in ([], ["all"]) else tuple(wanted)
                elif field == "plugin":
                    if value and value.replace(" ", "") == "no:xdist":
                        out.workers = "0"
                elif value is not None:
                    setattr(out, field, value)
                i += took
                break
        else:
            name = a.split("=", 1)[0]
            if name in NO_RUN:
                out.no_run = True
            elif name in ONE_RUN and out.one_run is None:
                out.one_run = name
            if name in ("-x", "--exitfirst") or name.startswith("--maxfail") or (
                    re.fullmatch(r"-[a-z]+", a) and "x" in a and set(a[1:]) <= FLAGS_WITHOUT_VALUE):
                out.exitfirst = True
            named = named_path(a, root)
            if named is not None:
                paths.append(named)
            i += 2 if a in VALUED and i + 1 < len(args) else 1   # "--tb short": skip the value too
    out.paths = tuple(paths)
    return out


def _covers(named: str, file: str) -> bool:
    """Whether the path ``named`` (a file, a folder or a node id) names checks of ``file``."""
    path = named.split("::", 1)[0].rstrip("/")
    return path in ("", ".") or file == path or file.startswith(path + "/")


def _named_ids(named: tuple[str, ...], file: str) -> list[str] | None:
    """The node ids in ``named`` that narrow ``file``; None when ``file`` is named whole (or
    nothing is named: every file is)."""
    ids = []
    for n in named:
        if _covers(n, file):
            if "::" not in n:
                return None
            ids.append(file + "::" + n.split("::", 1)[1])
    return ids or None


def _under(nodeid: str, ids: list[str]) -> bool:
    return any(nodeid == i or nodeid.startswith(i + "[") or nodeid.startswith(i + "::") for i in ids)


# --------------------------------------------------------------------------- this environment's earlier runs

def this_environment() -> dict:
    """What a run header's facts say of this environment, read without importing torch."""
    from harness.env import facts
    return {"host": socket.gethostname(), "python": platform.python_version(),
            "torch": facts.package_versions(("torch",))["torch"]}


def _same_environment(header: dict, env: dict) -> bool:
    f = header.get("facts") or {}
    return (f.get("host") == env["host"] and (f.get("python") or {}).get("version") == env["python"]
            and (f.get("packages") or {}).get("torch") == env["torch"])


def earlier_records(runs_dir: Path, env: dict) -> tuple[dict[str, dict], int]:
    """The newest record of each check (by node id) in the run files of this environment,
    and how many runs they came from. Unreadable lines and files are passed over."""
    newest: dict[str, dict] = {}
    runs = 0
    for path in sorted(runs_dir.glob("*.jsonl")):
        try:
            with open(path, encoding="utf-8") as fh:
                first = fh.readline()
                if not first.strip() or not _same_environment(json.loads(first), env):
                    continue
                fh.seek(0)
                for line in fh:
                    try:
                        obj = json.loads(line)
                    except ValueError:
                        continue
                    if obj.get("kind") == "header":
                        runs += 1
                    elif (obj.get("kind") == "check" and obj.get("nodeid")
                          and isinstance(obj.get("duration_s"), (int, float))):
                        newest[obj["nodeid"]] = obj
        except (OSError, ValueError):
            continue
    return newest, runs


# --------------------------------------------------------------------------- the plan

@dataclasses.dataclass
class Phase:
    name: str                 # "untimed", "optim", "perf" or "all" (the user's arguments as given)
    suites: list[str]
    workers: int              # 0: serial
    seconds: float = 0.0      # the checks' durations added up, serially
    wall: float = 0.0         # the estimate for this run


@dataclasses.dataclass
class Plan:
    phases: list[Phase]
    estimate_s: float | None
    sources: set[str]
    note: str = ""
    exitfirst: bool = False
    keyword_uncounted: bool = False

    def lines(self) -> list[str]:
        out = ["stop-on-failure"] if self.exitfirst else []
        if self.estimate_s is not None:
            out.append("say " + self.describe())
        if self.note:
            out.append("say " + self.note)
        return out + [f"phase {p.name} {p.workers} {','.join(p.suites) or '-'}" for p in self.phases]

    def describe(self) -> str:
        runs = []
        for p in self.phases:
            what = "the suites as asked" if p.name == "all" else ", ".join(p.suites)
            how = f"on {p.workers} workers" if p.workers else "serially"
            if p.name == "optim":
                how += " (its time claims run alone)"
            runs.append(f"{what} {how}")
        if EARLIER in self.sources and FIGURES_WHERE in self.sources:
            where = f"from {EARLIER} and, where they lack a file, {FIGURES_WHERE}"
        elif self.sources:
            where = "from " + next(iter(self.sources))
        else:
            where = "nothing to go on: no earlier run, no figures for these files"
        if self.keyword_uncounted:
            where += "; -k not counted in the figures"
        return f"compat: estimate: about {duration(self.estimate_s)} ({where}): " + "; then ".join(runs)


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{max(5, round(seconds / 5) * 5):.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def suites_here(root: Path = ROOT) -> dict[str, list[str]]:
    """suite -> its test files (paths relative to ``root``), from suites/; files directly in
    suites/ are the suite ``misc`` (harness.core.records.identity_for)."""
    base = root / SUITES_DIR
    out: dict[str, list[str]] = {}
    for path in sorted(base.rglob("test_*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(root).as_posix()
        parts = path.relative_to(base).parts
        out.setdefault(parts[0] if len(parts) > 1 else "misc", []).append(rel)
    return out


def phase_of(suite: str) -> str:
    return suite if suite in TIMED else UNTIMED


def available_targets(system: str = sys.platform) -> set[str]:
    """The targets that likely run here, for the figures only (a recorded run knows better)."""
    have = {"cpu"}
    if system == "darwin":
        have.add("mps")
    if system.startswith("linux") and Path("/proc/driver/nvidia/version").exists():
        have.add("cuda")
    return have


def worker_count(cpus: int) -> int:
    return min(max(cpus, 1), MAX_WORKERS)


def _user_workers(value: str | None, cpus: int) -> int:
    if value is None:
        return 0
    if value in ("auto", "logical"):
        return cpus
    return int(value) if value.isdigit() else 0


def plan(argv: list[str], *, records: dict[str, dict], suites: dict[str, list[str]], cpus: int,
         targets_here: set[str], figures: dict[str, dict] = FIGURES) -> Plan:
    """The runs for ``./compat suites ARGV`` and their estimate."""
    args = scan(argv)
    if args.no_run:
        return Plan([Phase("all", [], 0)], None, set())
    if not (readable(args.markexpr) and readable(args.keyword)):   # pytest says what is wrong, at once
        return Plan([Phase("all", [], 0)], None, set(), exitfirst=args.exitfirst)
    the_plan = _plan(args, records, suites, cpus, targets_here, figures)
    if unregistered_markers(args.markexpr):      # no estimate before pytest's "Unknown marker(s)"
        the_plan.estimate_s = None
    return the_plan


def _plan(args: Args, records: dict[str, dict], suites: dict[str, list[str]], cpus: int,
          targets_here: set[str], figures: dict[str, dict]) -> Plan:
    names = sorted(suites)     # every suite's marker is known to -m, named on the command line or not
    if args.paths:             # the files the named paths hold: pytest collects those alone
        suites = {s: [f for f in files if any(_covers(n, f) for n in args.paths)] for s, files in suites.items()}
        if not any(suites.values()):   # nothing of suites/ named: pytest runs what was named, as given
            return Plan([Phase("all", [], 0)], None, set(), exitfirst=args.exitfirst)
    targets = [t for t in TARGETS if args.devices is None or t in args.devices]
    sources: set[str] = set()

    def file_seconds(path: str, suite: str, target: str) -> float | None:
        """Seconds of one file's selected checks on one target; None: -m selects none."""
        opt_in = OPT_IN if path in COMPILE_FILES else ()
        if not marker_selects(args.markexpr, suite, target, opt_in, names):
            return None
        ids = _named_ids(args.paths, path)   # None: the whole file
        mine = [r for nodeid, r in records.items() if nodeid.split("::")[0] == path and r.get("target") == target]
        if mine:
            sources.add(EARLIER)
            picked = [r for r in mine if keyword_selects(args.keyword, r["nodeid"], (suite, target, *opt_in))
                      and (ids is None or _under(r["nodeid"], ids))]
            # less the wait for the timing lock: another run's measurements, not this check's time
            total = sum(r["duration_s"] - ((r.get("metrics") or {}).get("waited_s") or 0) for r in picked)
            expected = (figures.get(path) or {}).get("checks", {}).get(target)
            if not args.keyword and ids is None and expected and 0 < len(picked) < expected:
                total *= expected / len(picked)   # an earlier run narrowed by -k saw some of the file
            return max(total, 0.0)
        figure = figures.get(path)
        if figure is None:
            return 0.0
        sources.add(FIGURES_WHERE)
        checks = figure["checks"].get(target, 0)
        share = 1.0
        if ids is not None and all("[" in i for i in ids):   # single checks: their share of the file
            share = min(1.0, len(ids) / checks) if checks else 0.0
        if target in targets_here:
            return float(figure["cpu_s"]) * share
        return SKIP_S * checks * share

    def estimate(phase: Phase) -> None:
        total = 0.0
        for suite in phase.suites:
            for path in suites[suite]:
                for target in targets:
                    seconds = file_seconds(path, suite, target)
                    total += seconds or 0.0
        phase.seconds = total

    def selected(members: list[str]) -> list[str]:
        """The suites of ``members`` that -m may select a check of, on some target."""
        out = []
        for s in members:
            compiled = any(p in COMPILE_FILES for p in suites[s])
            if any(marker_selects(args.markexpr, s, t, (), names)
                   or (compiled and marker_selects(args.markexpr, s, t, OPT_IN, names)) for t in targets):
                out.append(s)
        return out

    if args.workers is not None or args.one_run:
        phase = Phase("all", selected([s for s in names if suites.get(s)]), _user_workers(args.workers, cpus))
        estimate(phase)
        phase.wall = _wall(phase.seconds, phase.workers, phase.suites)
        phase.suites = []    # the user's arguments alone decide what this run collects
        note = ""
        if args.one_run and args.workers is None:
            note = (f"compat: one pytest run, serially, as {args.one_run} needs "
                    "(no workers: optim's time claims stay alone)")
        elif phase.workers:
            note = ("compat: one pytest run on the workers you asked for: the optim suite's time claims then "
                    "share the machine with other checks (without -n, ./compat runs optim alone)")
        return Plan([phase], phase.wall + AFTER_S, sources, note, args.exitfirst,
                    bool(args.keyword) and FIGURES_WHERE in sources)

    phases = []
    for name in (UNTIMED, *TIMED):
        chosen = selected([s for s in names if phase_of(s) == name and suites.get(s)])
        if not chosen:
            continue
        phase = Phase(name, chosen, 0)
        estimate(phase)
        workers = 0 if name in TIMED else worker_count(cpus)
        if workers > 1 and phase.seconds >= XDIST_MIN_S:
            phase.workers = workers
        phase.wall = _wall(phase.seconds, phase.workers, phase.suites)
        phases.append(phase)
    if not phases:   # -m selects nothing we know of: let pytest say so, as it would
        phases = [Phase("all", [], 0)]
    total = sum(p.wall for p in phases) + AFTER_S
    return Plan(phases, total, sources, "", args.exitfirst, bool(args.keyword) and FIGURES_WHERE in sources)


def _wall(seconds: float, workers: int, suites: list[str]) -> float:
    """One run's estimated wall time: its start-up, then its checks on ``workers``."""
    start = STARTUP_S + (OP_TABLE_S if set(suites) & set(OP_SUITES) else 0.0)
    if workers > 1:
        return start + WORKER_START_S + seconds / (workers * EFFICIENCY)
    return start + seconds


def plan_here(argv: list[str]) -> Plan:
    """The plan for ``argv`` on this machine, from this environment's earlier runs."""
    from harness.env import facts
    records, _ = earlier_records(ROOT / "reports" / "runs", this_environment())
    return plan(argv, records=records, suites=suites_here(), cpus=facts.usable_cpus(),
                targets_here=available_targets())


# --------------------------------------------------------------------------- the figures, measured

def _whole_run(header: dict) -> bool:
    """A run ./compat suites planned over all of suites/: no -m, -k, file or node id narrowed it."""
    args = [str(a) for a in header.get("pytest_args") or []]
    if "--only-suites" not in args:
        return False
    rest = [a for i, a in enumerate(args) if not (i and args[i - 1] in ("-p", "--only-suites", "-n", "--run-file"))]
    return bool(rest) and set(rest) <= {"suites/", "suites", "-p", "--only-suites", "-n", "--run-file"}


def measure_figures(paths: list[Path]) -> tuple[dict[str, dict], list[dict]]:
    """Per test file of suites/, the figures the estimate falls back on, from the whole runs in
    ``paths``: the cpu target's durations added up less their wait for the timing lock (the
    newest record of each check in a file; the larger over the files), and the checks per
    target of the newest file. Also what each file contributed, for the figures' own record."""
    from harness.core import runfiles
    seconds: dict[str, float] = {}
    newest: tuple[str, dict[str, dict]] = ("", {})
    sources = []
    for path in paths:
        run_file = runfiles.read_file(path)
        whole = [run for run in run_file.runs if _whole_run(run.header)]
        if not whole:
            continue
        checks: dict[str, dict] = {}
        for run in whole:
            for r in run.records:
                if r.get("nodeid") and isinstance(r.get("duration_s"), (int, float)):
                    checks[r["nodeid"]] = r
        sums: dict[str, float] = {}
        counts: dict[str, dict[str, int]] = {}
        for nodeid, r in checks.items():
            file = nodeid.split("::")[0]
            target = r.get("target")
            per = counts.setdefault(file, {t: 0 for t in TARGETS})
            if target in per:
                per[target] += 1
            if target == "cpu":
                waited = (r.get("metrics") or {}).get("waited_s") or 0
                sums[file] = sums.get(file, 0.0) + r["duration_s"] - waited
        for file, total in sums.items():
            seconds[file] = max(seconds.get(file, 0.0), total)
        started = max(str(run.header.get("started") or "") for run in whole)
        if started >= newest[0]:
            newest = (started, counts)
        header = whole[0].header
        facts = header.get("facts") or {}
        sources.append({"file": Path(path).name, "started": started,
                        "cpu": (facts.get("cpu") or {}).get("model"), "cores": (facts.get("cpu") or {}).get("usable"),
                        "torch": (facts.get("packages") or {}).get("torch"),
                        "cpu_s": round(sum(sums.values()))})
    files = {file: {"cpu_s": round(seconds.get(file, 0.0)), "checks": per}
             for file, per in sorted(newest[1].items())}
    return files, sources


def figures_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.suiteplan figures",
        description="the first-run estimate's figures (tools/suite_figures.json), measured from whole "
                    "./compat suites runs: their run files, as reports/runs/ keeps them")
    parser.add_argument("run_files", nargs="+", type=Path, metavar="RUNFILE")
    parser.add_argument("--write", action="store_true", help=f"write them to {FIGURES_FILE.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.run_files if not p.is_file()]
    if missing:
        print(f"suiteplan figures: not a file: {', '.join(missing)}", file=sys.stderr)
        return 2
    files, sources = measure_figures(args.run_files)
    if not files:
        print("suiteplan figures: none of these files holds a whole ./compat suites run "
              "(one with no -m, -k or path narrowing it)", file=sys.stderr)
        return 2
    doc = {"how": "python -m tools.suiteplan figures --write RUNFILE...: each file's cpu-target durations "
                  "added up less their wait for the timing lock, the larger over the runs; the checks per "
                  "target from the newest run", "runs": sources, "files": files}
    for file, fig in files.items():
        old = FIGURES.get(file, {}).get("cpu_s")
        print(f"{file:45s} {fig['cpu_s']:6d} s (was {old if old is not None else '-'})  checks {fig['checks']}")
    if args.write:
        FIGURES_FILE.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {FIGURES_FILE.relative_to(ROOT)}")
    return 0


# --------------------------------------------------------------------------- running the plan

def phase_args(phase: Phase) -> list[str]:
    """What narrows a pytest run to its phase (nothing for ``all``: the user's arguments alone)."""
    if phase.name == "all":
        return []
    return ["-p", "tools.suiteplan", "--only-suites", ",".join(phase.suites)] + (
        ["-n", str(phase.workers)] if phase.workers else [])


@dataclasses.dataclass
class Outcome:
    status: int                               # the runs' status together, as pytest's
    ran: list[tuple[Phase, int]]              # each run started, with its exit status

    def stopped(self) -> tuple[Phase, int] | None:
        """The run that ended the plan early (interrupted, a usage or internal error), if any."""
        last = self.ran[-1] if self.ran else None
        return last if last is not None and last[1] not in (0, 1, 5) else None


def call_pytest(cmd: list[str], cwd: Path) -> int:
    """One pytest run's exit status. Ctrl-C in the terminal reaches the run itself (one process
    group), which ends its session, its run file's end line included, and exits 2; this process
    waits for that meanwhile instead of killing it, as ``subprocess.call`` would. An interrupt
    sent to this process alone lets the run end, and is then its status (2)."""
    interrupted = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: interrupted.append(signum))   # reset in the child
    try:
        rc = subprocess.Popen(cmd, cwd=cwd).wait()
    finally:
        signal.signal(signal.SIGINT, old)
    if rc < 0:                      # ended by a signal: a shell's status for it
        rc = 128 - rc
    return 2 if interrupted and rc in (0, 1, 5) else rc


def execute(the_plan: Plan, argv: list[str], *, python: str = sys.executable, extra=None,
            call=call_pytest, say=print) -> Outcome:
    """Run the plan's pytest runs in turn: ``python -m pytest suites/`` (or the paths ``argv``
    names, which it then holds), the phase's narrowing,
    ``extra(phase)`` (the upgrade check's options), then the user's ``argv``.

    Their status together, as one pytest run's: 1 when any run had failed checks (the next
    runs still run, unless -x / --maxfail asked to stop); an interrupted run (2), a usage (4)
    or internal (3) error ends the plan with its status; 5 only when no run selected anything."""
    for line in the_plan.lines():
        if line.startswith("say "):
            say(line[4:])
    status, ran_checks, ran = 0, False, []
    where = [] if scan(argv).paths else ["suites/"]   # the paths named, else every suite
    for phase in the_plan.phases:
        cmd = [python, "-m", "pytest", *where, *phase_args(phase), *(extra(phase) if extra else []), *argv]
        sys.stdout.flush()
        rc = call(cmd, cwd=ROOT)
        ran.append((phase, rc))
        if rc == 5:                 # this run selected nothing; another may have
            continue
        if rc not in (0, 1):        # interrupted, internal error, usage error: no further run
            status = rc
            break
        ran_checks = True
        if rc == 1:                 # checks failed: the next runs still run, unless -x
            status = 1
            if the_plan.exitfirst:
                break
    if status == 0 and not ran_checks:
        status = 5
    return Outcome(status, ran)


def planned(argv: list[str], say=print) -> Plan:
    """``plan_here``, or one pytest run as given when planning fails (said in one line)."""
    try:
        return plan_here(argv)
    except Exception as exc:   # a planner bug must not cost the user the run
        say(f"compat: could not plan the runs ({type(exc).__name__}: {records.first_line(str(exc))}); "
            "one pytest run, as given")
        return Plan([Phase("all", [], 0)], None, set(), exitfirst=scan(argv).exitfirst)


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.suiteplan [PYTEST ARGS]`` prints the plan's lines;
    ``python -m tools.suiteplan run [--python PY] [-- PYTEST ARGS]`` runs it (./compat suites)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["figures"]:
        return figures_main(argv[1:])
    if argv[:1] == ["run"]:
        parser = argparse.ArgumentParser(prog="python -m tools.suiteplan run",
                                         description="run the suites as ./compat suites does")
        parser.add_argument("--python", default=sys.executable, help="the interpreter that runs pytest")
        ours, pytest_args = (argv[1:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv[1:], [])
        args = parser.parse_args(ours)
        return execute(planned(pytest_args), pytest_args, python=args.python).status
    if argv[:1] == ["--"]:
        argv = argv[1:]
    print("\n".join(plan_here(argv).lines()))
    return 0


# --------------------------------------------------------------------------- the plugin: one run's suites

def pytest_addoption(parser):
    parser.addoption("--only-suites", default=None, metavar="SUITES",
                     help="(./compat suites) collect only these suites of suites/, comma-separated: "
                          "one of the runs ./compat suites makes (tools/suiteplan.py)")


def _only(config) -> set[str] | None:
    value = config.getoption("--only-suites", None)
    return {s.strip() for s in value.split(",") if s.strip()} if value else None


def suite_of(path: Path, root: Path) -> str | None:
    """The suite a path under suites/ belongs to (None outside suites/ or for suites/ itself)."""
    try:
        rel = Path(path).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return None
    parts = rel.parts
    if len(parts) < 2 or parts[0] != SUITES_DIR:
        return None
    if len(parts) == 2 and not Path(path).is_dir():
        return "misc"
    return parts[1]


def pytest_ignore_collect(collection_path, config):
    only = _only(config)
    if only is None:
        return None
    suite = suite_of(collection_path, config.rootpath)
    return True if suite is not None and suite not in only else None


def pytest_collection_modifyitems(config, items):
    only = _only(config)
    if only is None:
        return
    out = [item for item in items if (suite_of(item.path, config.rootpath) or "") not in only
           and suite_of(item.path, config.rootpath) is not None]
    if out:
        gone = {id(item) for item in out}
        config.hook.pytest_deselected(items=out)
        items[:] = [item for item in items if id(item) not in gone]


if __name__ == "__main__":
    sys.exit(main())
