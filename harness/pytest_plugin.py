"""pytest wiring: options, targets, fixtures, and the run journal.

Loaded by the root ``conftest.py`` (or ``-p harness.pytest_plugin``). Nothing is measured
or judged here: the checks call ``harness``; this module routes their outcomes into the
journal. torch is not imported at module level: ``PYTORCH_ENABLE_MPS_FALLBACK`` must be
decided first (``pytest_configure``).
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from harness.core import process_env

process_env.force_offline()  # before anything can import huggingface_hub

import pytest  # noqa: E402
from harness.parity import hypothesis_profiles  # noqa: F401,E402

from harness.core import cases, devices, identity, journal, outcomes, runfiles  # noqa: E402
from harness.report import matrix  # noqa: E402
from harness.core.verdict import Verdict, conclude  # noqa: E402

STATE = pytest.StashKey["SessionState"]()
# The plugin's vocabulary, registered wherever it is loaded (pyproject.toml lists them too).
MARKERS = (
    "cpu: check runs against the cpu target", "cuda: check runs against the cuda target",
    "mps: check runs against the mps (Apple Metal) target",
    "env: environment suite", "ops: op coverage suite", "parity: numerical parity suite",
    "optim: optimization claims suite", "slow: takes more than a few seconds per check",
    "cases(table): run once per case of the table and per target the case names (case.targets)",
)
IDENTITY = pytest.StashKey[dict]()
RECORDER = pytest.StashKey["Recorder"]()


class Recorder:
    """What a check reports beyond pass/fail: its category and metrics."""

    def __init__(self):
        self.category: str | None = None
        self.metrics: dict = {}
        # A check that learns its fate out of process (a sandbox child crashed or timed
        # out, or ran although expected to fail) says so here: crash / timeout / xpass.
        self.status: str | None = None
        # What a check that passed (or passed against an expectation) has to say: the
        # record's reason, as a failure's message is (an xpass's expectation, a finding).
        self.note: str = ""

    def metric(self, **values) -> None:
        self.metrics.update(values)

    def value_of(self, outcome, what: str = "the check itself"):
        """A sandbox outcome's value; a crash or a hang is recorded as such and fails the check."""
        if outcome.kind in ("crash", "timeout"):
            self.conclude(Verdict(outcome.kind, message=outcome.detail))
        if outcome.kind != "ok":
            self.conclude(Verdict("fail", message=f"{what} failed: {outcome.detail}"))
        return outcome.value

    def conclude(self, verdict: Verdict) -> None:
        """Keep ``verdict`` on this record and end the test as its status says (harness.core.verdict)."""
        conclude(self, verdict)


class SessionState:
    def __init__(self, config, targets: list[str], fallback: dict):
        self.config = config
        self.targets = targets
        self.fallback = fallback
        self.controller = not hasattr(config, "workerinput")
        self.writer: journal.Writer | None = None
        self.run_id = journal.new_run_id()
        self.pending: dict[str, dict] = {}   # nodeid -> {"ident", "phases", "extra"}
        self.records: list[dict] = []
        self.header: dict | None = None
        self.baseline = None       # harness.report.compare.Side, read at configure time (--baseline)
        self.comparison = None     # harness.report.compare.Comparison, made at session end
        self.saved: str | None = None
        self.write_errors: list[str] = []   # --save-baseline / --compare-out that could not be written
        self.check_timeout = DEFAULT_CHECK_TIMEOUT

    # -- the run file, opened at the first record so a run with no checks leaves none
    def _writer(self) -> journal.Writer:
        if self.writer is None:
            from harness.env import facts
            f = facts.current()
            path = self.config.getoption("--run-file") or Path(self.config.rootpath, "reports", "runs",
                                                                 facts.env_id(f) + ".jsonl")
            self.writer = journal.Writer(path)
            self.header = journal.header(
                self.run_id, facts.env_id(f), f,
                targets=target_table(self.targets, f), mps_fallback=self.fallback,
                pytest_args=list(self.config.invocation_params.args),
                workload_option=self.config.getoption("--workload"),
                workers=int(getattr(self.config.option, "numprocesses", 0) or 0))
            self.writer.write(self.header)
        return self.writer

    def write(self, record: dict) -> None:
        self._writer().write(record)
        self.records.append(record)

    # -- hooks (this object is registered as a plugin; only the controller writes)
    def pytest_runtest_logreport(self, report):
        if not self.controller:
            return
        data = getattr(report, "mps_compat", None)
        entry = self.pending.get(report.nodeid)
        if data is not None:
            entry = self.pending.setdefault(report.nodeid, {"ident": data["ident"], "phases": [], "extra": {}})
            if data["category"] or data["metrics"] or data.get("status"):
                entry["extra"] = {"category": data["category"], "metrics": data["metrics"],
                                  "status": data.get("status")}
            phase = {"when": report.when, "outcome": report.outcome, "message": data["message"],
                     "wasxfail": data["wasxfail"], "duration": report.duration}
        elif report.when == "???" and entry is not None:  # pytest-xdist: the worker died in this check
            phase = {"when": "???", "outcome": "failed", "message": outcomes.message_of(report.longrepr),
                     "duration": 0.0}
        else:
            return
        entry["phases"].append(phase)
        if report.when in ("teardown", "???"):
            del self.pending[report.nodeid]
            self.write(outcomes.build_record(self.run_id, entry["ident"], entry["phases"], entry["extra"],
                                            report.nodeid))

    def pytest_sessionfinish(self, session, exitstatus):
        if not self.controller or self.writer is None:
            return
        # A check still pending was interrupted (Ctrl-C): it measured nothing and is not
        # recorded; the end line's exit status says the run was interrupted.
        counts: dict[str, int] = {}
        for rec in self.records:
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
        end = {"kind": "end", "run": self.run_id, "finished": journal.now_iso(), "exitstatus": int(exitstatus),
               "counts": counts, "workloads": workloads_measured(self.records)}
        self.writer.write(end)
        self.writer.close()
        keep = self.config.getoption("--save-baseline")
        if keep:
            try:
                self.saved = save_baseline(keep, self.header, self.records, end)
            except OSError as exc:  # the run file is written already; only the copy failed
                self.write_errors.append(f"--save-baseline {keep}: cannot write: {exc.strerror or exc}")
        if self.baseline is not None:
            from harness.report import compare
            this_run = runfiles.Run(self.run_id, self.header, "this run", list(self.records), end)
            self.comparison = compare.compare(self.baseline, compare.side_from_runs("this run", [this_run], []))
            out = self.config.getoption("--compare-out")
            if out:
                try:
                    for path, fmt in ((Path(out), "md"), (Path(out).with_suffix(".json"), "json")):
                        journal.write_atomic(path, compare.render(self.comparison, fmt))
                except OSError as exc:
                    self.write_errors.append(f"--compare-out {out}: cannot write: {exc.strerror or exc}")
        failed = self.write_errors or (self.comparison is not None and self.comparison.regressions)
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def workloads_measured(records: list[dict]) -> dict:
    """target -> the workload its optimization checks ran at (name, shape, why), from the
    records: the shape is chosen on the device during the run (--workload auto), after the
    header was written, so the end line says it for the whole run."""
    out = {}
    for rec in records:
        m = rec.get("metrics") or {}
        if m.get("workload_reason") and rec.get("target"):
            out.setdefault(rec["target"], {"name": m.get("workload"), "setup": m.get("shape"),
                                           "reason": m["workload_reason"]})
    return out


def save_baseline(path: str, header: dict, records: list[dict], end: dict) -> str:
    """This run as a baseline file (a run file of its own), replaced atomically: an
    interrupted save leaves the previous baseline whole."""
    journal.write_atomic(path, "".join(journal.encode_line(obj) for obj in (header, *records, end)))
    return str(path)


def target_table(selected: list[str], facts: dict) -> dict:
    table = {}
    for name in dict.fromkeys([*devices.TARGETS, *selected]):
        avail = devices.backend(name, facts).availability()
        table[name] = {"selected": name in selected, "available": avail.available, "reason": avail.reason}
    return table


# --------------------------------------------------------------------------- options

def pytest_addoption(parser):
    group = parser.getgroup("mps-compat")
    group.addoption("--device", default=None, metavar="TARGETS",
                    help="targets to run: cpu, cuda, mps, comma-separated, or all (default). "
                         "Naming an absent device is an error.")
    group.addoption("--mps-fallback", default=None, metavar="on|off",
                    help="PYTORCH_ENABLE_MPS_FALLBACK for the run: on (default; missing MPS kernels run on "
                         "the CPU and are reported) or off (strict: they raise)")
    group.addoption("--check-timeout", default=str(DEFAULT_CHECK_TIMEOUT), metavar="SECONDS",
                    help="time limit of one sandboxed check (ops, parity, optim); past it the check is a timeout "
                         f"(default {DEFAULT_CHECK_TIMEOUT:g})")
    group.addoption("--workload", default="auto", choices=WORKLOADS,
                    help="the optimization suite's training shape: auto (default: per target, the smallest "
                         "shape whose step is long enough to measure the technique rather than launch overhead, "
                         "within the device's memory; harness/core/sizing.py), small (a BERT small enough for a "
                         "2-core CPU), medium (BERT-base, batch 32, length 128) or large (seed 003's "
                         "macbert-large shape, batch 32, length 128)")
    group.addoption("--run-file", default=None, metavar="PATH",
                    help="where to append this run's records (default reports/runs/<env-id>.jsonl)")
    group.addoption("--save-baseline", default=None, metavar="PATH",
                    help="keep this run as the reference for later --baseline runs (a run file, replaced)")
    group.addoption("--baseline", default=None, metavar="PATH",
                    help="compare this run with a kept baseline (run file or directory); the session fails "
                         "when a check regressed (python -m tools.compare has the rules)")
    group.addoption("--compare-out", default=None, metavar="PATH.md",
                    help="with --baseline: also write the comparison as Markdown to PATH and JSON beside it")


DEFAULT_CHECK_TIMEOUT = 120.0
WORKLOADS = ("auto", "small", "medium", "large")


def parse_check_timeout(value) -> float:
    """``--check-timeout``: a finite number of seconds above zero; ValueError (one line) otherwise."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"--check-timeout must be a number of seconds above 0 (default {DEFAULT_CHECK_TIMEOUT:g}), "
                         f"not {value!r}")
    return seconds


def output_problems(config) -> list[str]:
    """One line for each place this run will write that cannot be written (see journal.probe_writable)."""
    places = []
    run_file = config.getoption("--run-file")
    places.append(("--run-file", run_file, False) if run_file else
                  ("the run file's directory", Path(config.rootpath, "reports", "runs"), True))
    for option in ("--save-baseline", "--compare-out"):
        path = config.getoption(option)
        if path:
            places.append((option, path, False))
            if option == "--compare-out":
                places.append((option + " (its .json)", Path(path).with_suffix(".json"), False))
    problems = []
    for what, path, is_dir in places:
        why = journal.probe_writable(path, directory=is_dir)
        if why:
            fix = "choose another place" + ("" if what.startswith("--") else " with --run-file PATH")
            problems.append(f"{what} {path}: cannot write there: {why}; {fix}")
    return problems


def pytest_configure(config):
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    try:
        fallback = process_env.decide_mps_fallback(config.getoption("--mps-fallback"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    device_opt = config.getoption("--device")
    try:
        targets = devices.parse_device_option(device_opt)
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    if device_opt not in (None, "", "all"):
        for name in targets:  # asked for by name: it must be here
            avail = devices.backend(name).availability()
            if not avail.available:
                raise pytest.UsageError(f"--device {name}: {avail.reason}")
    try:
        check_timeout = parse_check_timeout(config.getoption("--check-timeout"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    state = SessionState(config, targets, fallback)
    state.check_timeout = check_timeout
    if state.controller:  # an unwritable place is said now, before a long run, not after it
        for problem in output_problems(config):
            raise pytest.UsageError(problem)
    baseline = config.getoption("--baseline")
    if baseline and state.controller:  # read before anything runs: a bad baseline costs no run
        from harness.report import compare
        try:
            state.baseline = compare.load_side([baseline], f"--baseline {baseline}")
        except compare.CompareError as exc:
            raise pytest.UsageError(f"--baseline: {exc}") from None
    config.stash[STATE] = state
    config.pluginmanager.register(state, "mps-compat-journal")


# --------------------------------------------------------------------------- targets

def _target_param(target, *values, case_id=None):
    ident = f"{target}-{case_id}" if case_id else target
    marks = getattr(pytest.mark, target) if target in devices.TARGETS else ()  # a stand-in has no marker
    return pytest.param(*values, marks=marks, id=ident)


def _serves(target: str, path) -> bool:
    """A stand-in target serves only its suites (devices.StandIn.suites)."""
    stand_in = devices.stand_in(target)
    if stand_in is None:
        return True
    ident = identity.identity_for(tuple(Path(str(path)).parts), "", {})
    return ident is not None and ident.suite in stand_in.suites


def pytest_generate_tests(metafunc):
    if "target" not in metafunc.fixturenames:
        return
    targets = [t for t in metafunc.config.stash[STATE].targets if _serves(t, metafunc.definition.path)]
    cases_mark = metafunc.definition.get_closest_marker("cases")
    if cases_mark is not None:
        table = cases.check_table(cases_mark.args[0], metafunc.definition.nodeid)
        params = [_target_param(t, case, t, case_id=case.id)
                  for case in table for t in targets if t in case.targets]
        metafunc.parametrize(("case", "target"), params)
    else:
        metafunc.parametrize("target", [_target_param(t, t) for t in targets])


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
        ident = identity.identity_for(tuple(Path(str(item.path)).parts), item.originalname, params)
        if ident is None:
            continue
        item.stash[IDENTITY] = {"suite": ident.suite, "subject": ident.subject,
                                "variant": ident.variant, "target": ident.target}
        if ident.suite in ("env", "ops", "parity", "optim"):
            item.add_marker(ident.suite)


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def env_facts() -> dict:
    """This machine's facts (gathered once per process)."""
    from harness.env import facts
    return facts.current()


@pytest.fixture
def backend(target):
    """The target's Backend; the check is skipped, with the reason, when it is absent."""
    b = devices.backend(target)
    avail = b.availability()
    if not avail.available:
        pytest.skip(avail.reason)
    return b


@pytest.fixture(scope="session")
def sandbox(request):
    """A child process for checks that may crash or hang (see harness.core.isolate)."""
    from harness.core.isolate import Sandbox, threads_per_worker
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    box = Sandbox(timeout=request.config.stash[STATE].check_timeout, threads=threads_per_worker(workers))
    yield box
    box.close()


@pytest.fixture
def workload(request, target, backend, sandbox, tmp_path_factory) -> dict:
    """What ``--workload`` means on this target: ``{"name", "setup", "reason"}``, decided
    once per run and target (harness.core.sizing, in the sandbox, where the device is) and
    shared by the xdist workers through a locked file, so every check of a run measures the
    same shape."""
    import json

    from filelock import FileLock
    option = request.config.getoption("--workload")
    cache = request.config.stash.setdefault(WORKLOAD_CHOICES, {})
    if target in cache:
        return cache[target]

    def choose() -> dict:
        outcome = sandbox.call("harness.core.sizing:resolve", option, target)
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


WORKLOAD_CHOICES = pytest.StashKey[dict]()


@pytest.fixture
def record(request) -> Recorder:
    """Where a check puts its category and metrics for the journal."""
    rec = request.node.stash.setdefault(RECORDER, Recorder())
    return rec


# --------------------------------------------------------------------------- journal

def pytest_sessionstart(session):
    hypothesis_profiles.remember_session_profile()   # hypothesis's plugin has loaded --hypothesis-profile


def pytest_collection_finish(session):
    hypothesis_profiles.restore_session_profile()    # collecting may have imported common_utils


def pytest_runtest_setup(item):
    hypothesis_profiles.restore_session_profile()    # so may an earlier test


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    ident = item.stash.get(IDENTITY, None)
    if ident is not None:
        rec = item.stash.get(RECORDER, None)
        note = rec.note if rec is not None and report.when == "call" and report.passed else ""
        report.mps_compat = {
            "ident": ident,
            "message": outcomes.message_of(report.longrepr, call.excinfo if report.failed else None) or note,
            "wasxfail": outcomes.clean_xfail(getattr(report, "wasxfail", None)),
            "category": rec.category if rec else None,
            "status": rec.status if rec else None,
            "metrics": outcomes.json_safe(rec.metrics) if rec else {},
        }
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(STATE, None)
    if state is None or not state.controller or not state.records:
        return
    from tabulate import tabulate
    tr = terminalreporter
    tr.section("mps-compat: this run")
    rows = [(suite, target, matrix.format_counts(c)) for suite, target, c in matrix.suite_counts(state.records)]
    tr.write_line(tabulate(rows, headers=("suite", "target", "results"), tablefmt="simple"))
    tr.write_line("legend: " + "  ".join(f"{sym} {key}" for key, sym, _ in matrix.LEGEND))
    from harness.env import facts
    for name, info in target_table(state.targets, facts.current()).items():
        if info["selected"] and not info["available"]:
            tr.write_line(f"{name}: skipped: {info['reason']}")
    rel = os.path.relpath(state.writer.path) if state.writer else "?"
    tr.write_line(f"run file: {rel}   full matrix: python -m tools.report")
    if state.saved:
        tr.write_line(f"baseline kept: {os.path.relpath(state.saved)} (compare later runs with --baseline)")
    for problem in state.write_errors:
        tr.write_line(f"ERROR: {problem}", red=True)
    if state.comparison is not None:
        from harness.report import compare
        cmp = state.comparison
        tr.section("mps-compat: against the baseline", red=bool(cmp.regressions), green=not cmp.regressions)
        tr.write_line(compare.render(cmp, "table").rstrip())
        if cmp.regressions:
            tr.write_line(f"FAILED: {len(cmp.regressions)} regression(s) against {cmp.baseline.label}", red=True)

