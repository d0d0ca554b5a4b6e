"""pytest wiring: the hooks and fixtures, the session's state, the run file, the summary.

Loaded by the root ``conftest.py`` (or ``-p harness.plugin.hooks``). Nothing is measured
or judged here: the checks call ``harness``; this module routes their outcomes into the
run file (harness.core.runfiles). Beside it: what a run selects (options, targets, the
workload) in harness/plugin/options.py, and the record a test writes into, the one mapping
from a Verdict to pytest's outcome and the record built from pytest's phases in
harness/plugin/record.py. torch is not imported at module level:
``PYTORCH_ENABLE_MPS_FALLBACK`` must be decided first (``pytest_configure``).
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from harness.env import facts

facts.force_offline()  # before anything can import huggingface_hub

import pytest  # noqa: E402

from harness.core import cases, records, runfiles  # noqa: E402
from harness.env import devices  # noqa: E402
from harness.parity.properties import profiles  # noqa: E402  (registers the hypothesis profiles)
from harness.plugin import options  # noqa: E402
from harness.plugin.record import Recorder, build_record, clean_xfail, message_of  # noqa: E402

STATE = pytest.StashKey["SessionState"]()
# The plugin's vocabulary, registered wherever it is loaded (pyproject.toml lists them too).
MARKERS = (
    "cpu: check runs against the cpu target", "cuda: check runs against the cuda target",
    "mps: check runs against the mps (Apple Metal) target",
    "env: environment suite", "ops: op coverage suite", "parity: numerical parity suite",
    "optim: optimization claims suite", "perf: speed and memory suite", "slow: takes more than a few seconds per check",
    "compile: torch.compile against eager (parity); seconds per check, so a -m selection runs it only when it names compile",
    "cases(table): run once per case of the table and per target the case names (case.targets)",
)
# Markers of checks that cost far more than their suite's others (the compile family: seconds
# per check). A run narrowed with -m includes them only when the expression names the marker, so
# `-m "parity and cpu"` keeps its budget; `-m compile`, `-m "compile and mps"` and a run without
# -m (pytest suites/, ./compat suites) include them.
OPT_IN = ("compile",)
IDENTITY = pytest.StashKey[dict]()
RECORDER = pytest.StashKey["Recorder"]()


class SessionState:
    def __init__(self, config, targets: list[str], fallback: dict):
        self.config = config
        self.targets = targets
        self.fallback = fallback
        self.controller = not hasattr(config, "workerinput")
        self.writer: runfiles.Writer | None = None
        self.run_id = runfiles.new_run_id()
        self.pending: dict[str, dict] = {}   # nodeid -> {"ident", "phases", "extra"}
        self.records: list[dict] = []
        self.header: dict | None = None
        self.baseline = None       # harness.report.compare.Side, read at configure time (--baseline)
        self.comparison = None     # harness.report.compare.Comparison, made at session end
        self.saved: str | None = None
        self.write_errors: list[str] = []   # --save-baseline / --compare-out that could not be written
        self.check_timeout = options.DEFAULT_CHECK_TIMEOUT

    # -- the run file, opened at the first record so a run with no checks leaves none
    def _writer(self) -> runfiles.Writer:
        if self.writer is None:
            f = facts.current()
            path = self.config.getoption("--run-file") or Path(self.config.rootpath, "reports", "runs",
                                                                 facts.env_id(f) + ".jsonl")
            self.writer = runfiles.Writer(path)
            self.header = runfiles.header(
                self.run_id, facts.env_id(f), f,
                targets=options.target_table(self.targets, f), mps_fallback=self.fallback,
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
            phase = {"when": "???", "outcome": "failed", "message": message_of(report.longrepr),
                     "duration": 0.0}
        else:
            return
        entry["phases"].append(phase)
        if report.when in ("teardown", "???"):
            del self.pending[report.nodeid]
            self.write(build_record(self.run_id, entry["ident"], entry["phases"], entry["extra"],
                                            report.nodeid))

    def pytest_sessionfinish(self, session, exitstatus):
        if not self.controller or self.writer is None:
            return
        # A check still pending was interrupted (Ctrl-C): it measured nothing and is not
        # recorded; the end line's exit status says the run was interrupted.
        counts: dict[str, int] = {}
        for rec in self.records:
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
        end = {"kind": "end", "run": self.run_id, "finished": runfiles.now_iso(), "exitstatus": int(exitstatus),
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
                        runfiles.write_atomic(path, compare.render(self.comparison, fmt))
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
    runfiles.write_atomic(path, "".join(runfiles.encode_line(obj) for obj in (header, *records, end)))
    return str(path)


# --------------------------------------------------------------------------- options

def pytest_addoption(parser):
    options.add_options(parser)


def pytest_configure(config):
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    try:
        fallback = facts.decide_mps_fallback(config.getoption("--mps-fallback"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        targets = options.select_targets(config.getoption("--device"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    try:
        check_timeout = options.parse_check_timeout(config.getoption("--check-timeout"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    state = SessionState(config, targets, fallback)
    state.check_timeout = check_timeout
    if state.controller:  # an unwritable place is said now, before a long run, not after it
        for problem in options.output_problems(config):
            raise pytest.UsageError(problem)
    baseline = config.getoption("--baseline")
    if baseline:  # read before anything runs: a bad baseline costs no run (workers read it for the perf checks)
        from harness.report import compare
        try:
            state.baseline = compare.load_side([baseline], f"--baseline {baseline}")
        except compare.CompareError as exc:
            if state.controller:
                raise pytest.UsageError(f"--baseline: {exc}") from None
    config.stash[STATE] = state
    config.pluginmanager.register(state, "mps-compat-journal")


# --------------------------------------------------------------------------- targets

def pytest_generate_tests(metafunc):
    if "target" not in metafunc.fixturenames:
        return
    targets = [t for t in metafunc.config.stash[STATE].targets if options.serves(t, metafunc.definition.path)]
    cases_mark = metafunc.definition.get_closest_marker("cases")
    if cases_mark is not None:
        table = cases.check_table(cases_mark.args[0], metafunc.definition.nodeid)
        params = [options.target_param(t, case, t, case_id=case.id)
                  for case in table for t in targets if t in case.targets]
        metafunc.parametrize(("case", "target"), params)
    else:
        metafunc.parametrize("target", [options.target_param(t, t) for t in targets])


def pytest_collection_modifyitems(config, items):
    for item in items:
        params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
        ident = records.identity_for(tuple(Path(str(item.path)).parts), item.originalname, params)
        if ident is None:
            continue
        item.stash[IDENTITY] = {"suite": ident.suite, "subject": ident.subject,
                                "variant": ident.variant, "target": ident.target}
        if ident.suite in records.CATEGORIES:   # the suites: env, ops, parity, optim, perf
            item.add_marker(ident.suite)
    held = opted_out(config.getoption("markexpr"), items)
    if held:
        config.hook.pytest_deselected(items=held)
        left = {id(item) for item in held}
        items[:] = [item for item in items if id(item) not in left]


def opted_out(markexpr: str | None, items: list) -> list:
    """The items a -m expression leaves out because they carry an OPT_IN marker it does not
    name (a word of the expression: "compile", "not compile"); none without -m."""
    if not markexpr:
        return []
    unnamed = [m for m in OPT_IN if not re.search(rf"\b{m}\b", markexpr)]
    return [item for item in items if any(item.get_closest_marker(m) for m in unnamed)]


# --------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def env_facts() -> dict:
    """This machine's facts (gathered once per process)."""
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
    once per run and target (harness.optim.workloads, in the sandbox, where the device is) and
    shared by the xdist workers through a locked file, so every check of a run measures the
    same shape."""
    return options.workload_for(request, target, sandbox, tmp_path_factory)


@pytest.fixture
def baseline_of(request):
    """``lookup(check, target_key)`` -> (the --baseline's record of that check or None, the
    baseline's machine, this machine): a perf check confirms a figure that looks like a
    regression before it is recorded (suites/perf)."""
    from harness.perf import against
    side = request.config.stash[STATE].baseline
    here = against.machine_of(facts.current())

    def lookup(check: str, target_key: str):
        if side is None:
            return None, None, here
        return side.records.get((check, target_key)), side.machine, here
    return lookup


@pytest.fixture
def record(request) -> Recorder:
    """Where a check puts its category and metrics for the run file."""
    rec = request.node.stash.setdefault(RECORDER, Recorder())
    return rec


# --------------------------------------------------------------------------- journal

def pytest_sessionstart(session):
    profiles.remember_session_profile()   # hypothesis's plugin has loaded --hypothesis-profile


def pytest_collection_finish(session):
    profiles.restore_session_profile()    # collecting may have imported common_utils


def pytest_runtest_setup(item):
    profiles.restore_session_profile()    # so may an earlier test


def _beside_measurements(item):
    """A check that is not a perf measurement runs under the timing lock's shared side
    (harness.env.timing.beside): never while a perf check measures, which holds it alone."""
    from harness.env import timing
    ident = item.stash.get(IDENTITY, None)
    if ident is None or ident["suite"] == "perf":
        import contextlib
        return contextlib.nullcontext()
    return timing.beside()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    with _beside_measurements(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    ident = item.stash.get(IDENTITY, None)
    if ident is not None:
        rec = item.stash.get(RECORDER, None)
        note = rec.note if rec is not None and report.when == "call" and report.passed else ""
        report.mps_compat = {
            "ident": ident,
            "message": message_of(report.longrepr, call.excinfo if report.failed else None) or note,
            "wasxfail": clean_xfail(getattr(report, "wasxfail", None)),
            "category": rec.category if rec else None,
            "status": rec.status if rec else None,
            "metrics": records.json_safe(rec.metrics) if rec else {},
        }
    return report


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    state = config.stash.get(STATE, None)
    if state is None or not state.controller or not state.records:
        return
    write_summary(terminalreporter, state)


# --------------------------------------------------------------------------- the summary


def write_summary(terminalreporter, state) -> None:
    """The mps-compat sections at the end of pytest's output, for the controller's
    ``SessionState`` of a run that recorded checks: this run's results per suite and
    target, where they were written, and the comparison with the baseline (``--baseline``)."""
    from tabulate import tabulate

    from harness.report import matrix
    tr = terminalreporter
    tr.section("mps-compat: this run")
    rows = [(suite, target, matrix.format_counts(c)) for suite, target, c in matrix.suite_counts(state.records)]
    tr.write_line(tabulate(rows, headers=("suite", "target", "results"), tablefmt="simple"))
    tr.write_line("legend: " + "  ".join(f"{sym} {key}" for key, sym, _ in matrix.LEGEND))
    for name, info in options.target_table(state.targets, facts.current()).items():
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
