"""pytest wiring: the hooks and fixtures, the session's state, the run file, the summary.

Loaded by the root ``conftest.py`` (or ``-p harness.plugin.hooks``). Nothing is measured
or judged here: the checks call ``harness``; this module routes their outcomes into the
run file (harness.core.runfiles). Beside it: what a run selects (options, targets, the
workload) in harness/plugin/options.py, and the record a test writes into, the one mapping
from a Verdict to pytest's outcome and the record built from pytest's phases in
harness/plugin/record.py. torch is not imported at module level:
``PYTORCH_ENABLE_MPS_FALLBACK`` must be decided first (``pytest_configure``).

On the terminal, a run of checks says as it goes: first the targets that run and those that
do not with why, and the run file (``announce``); the collection and its seconds; the
warm-up (``warm_up``: the sandbox child's start, torch, OpInfo's op_db, a device's context,
paid before the first check so that no check's duration holds it; under xdist each worker
warms up before its first check and the controller says so when that check reports); at the
end (``write_summary``) the results per suite and target, the verdict of each column of this
run and its failures grouped by cause (harness.report.verdict), and the command that renders
this run.

Nothing already written is lost: a run file that cannot be written (a full disk) stops the
run with one line, keeping every record before it; ``--save-baseline`` replaces a baseline
only with a run that ran every selected check, and says in one line when it did not; a file
the run would replace that is its own run file is refused before anything runs.
"""
from __future__ import annotations

import errno
import os
import time
from collections import Counter
from pathlib import Path

from harness.env import facts

facts.force_offline()  # before anything can import huggingface_hub

import pytest  # noqa: E402

from harness.core import cases, records, runfiles  # noqa: E402
from harness.env import devices, instruments  # noqa: E402
from harness.parity.properties import profiles  # noqa: E402  (registers the hypothesis profiles)
from harness.plugin import options  # noqa: E402
from harness.report import selection  # noqa: E402
from harness.report.matrix import listed  # noqa: E402
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
OPT_IN = tuple(records.OPT_IN)   # markers a -m expression must name to select (records.OPT_IN)
IDENTITY = pytest.StashKey[dict]()
ADDED_CONTROLS = pytest.StashKey[list]()   # the controls modules collected beside the named paths
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
        self.end: dict | None = None        # the end line, once the run has ended (the summary's verdict reads it)
        self.not_saved: str | None = None   # why --save-baseline left the file as it was (an incomplete run)
        self.write_errors: list[str] = []   # --save-baseline / --compare-out that could not be written
        self.run_file_error: str | None = None   # the run file could not be written: the run stopped there
        self.stopped_by_run_file = False   # ... and pytest stopped the session with that line as its reason
        self.retired: runfiles.Retired | None = None   # the superseded runs moved out of the run file at the end
        self.retire_error: str | None = None            # ... or why they could not be
        self.written = 0           # check records the run file holds
        self.ended: set[str] = set()   # the tests that ended (their teardown, or their worker's death)
        self.session = None
        self.check_timeout = options.DEFAULT_CHECK_TIMEOUT
        self.started = time.monotonic()
        # What this process collected: None where it collected nothing (an xdist controller,
        # until a worker's first report says it: ``heard_from``).
        self.collection: dict = {"collected": None, "selected": None, "deselected": None}
        self.caseless: list[str] = []   # the test functions with no case on the targets selected (_no_target)
        self.per_target: Counter = Counter()   # the selected checks per target (the collection line)
        self.box = None            # the sandbox child (harness.core.isolate.Sandbox): the warm-up starts it
        self.warmed = False        # this process has warmed up (before its first check)
        self.warm_up: dict | None = None     # {"steps": [{"step", "seconds", "problem"}], "seconds"}
        self.told = False          # this process's first report carried its collection and warm-up
        self.said_collected = False

    # -- the run file, opened at the first record so a run with no checks leaves none
    def run_file(self) -> Path:
        return Path(self.config.getoption("--run-file") or
                    options.default_run_file(self.config.rootpath, facts.env_id(facts.current())))

    def selection(self) -> dict:
        """What this run selected (the header's ``selection``): -m, -k, the paths, and the
        counts (None where they are not known)."""
        opt = self.config.getoption
        return {"markexpr": opt("markexpr") or "", "keyword": opt("keyword") or "",
                "args": user_args(self.config), **self.collection}

    def _writer(self) -> runfiles.Writer:
        if self.writer is None:
            f = facts.current()
            self.writer = runfiles.Writer(self.run_file())
            self.header = runfiles.header(
                self.run_id, facts.env_id(f), f,
                targets=options.target_table(self.targets, f), mps_fallback=self.fallback,
                pytest_args=list(self.config.invocation_params.args),
                workload_option=self.config.getoption("--workload"),
                workers=int(getattr(self.config.option, "numprocesses", 0) or 0),
                selection=self.selection())
            self.writer.write(self.header)
        return self.writer

    def sandbox(self):
        """This process's sandbox child (the ``sandbox`` fixture's, made here so that the
        warm-up can start it before the first check)."""
        if self.box is None:
            from harness.core.isolate import Sandbox, threads_per_worker
            workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
            self.box = Sandbox(timeout=self.check_timeout, threads=threads_per_worker(workers))
        return self.box

    def write(self, record: dict) -> None:
        """One check's record into the run file. A write that fails (a full disk) stops the
        run: the checks after it would measure for nothing, and the file keeps every line
        before it (the Writer undoes a line written in part)."""
        self.records.append(record)
        if self.run_file_error is not None:
            return
        try:
            self._writer().write(record)
        except OSError as exc:
            self.run_file_failed(exc)
            return
        self.written += 1

    def run_file_failed(self, exc: OSError, at_end: bool = False) -> None:
        """Say once, in one line, that the run file cannot be written, and stop the session
        (pytest's own loop, or xdist's, which keeps its own flag) after the check that ended."""
        where = options.shown_path(self.run_file())
        kept = (f"the {plural(self.written, 'record')} before it are kept" if self.written
                else "no record was written")
        fix = ("free some space or choose another place with --run-file PATH" if exc.errno == errno.ENOSPC
               else "choose another place with --run-file PATH")
        what = "its end line is missing" if at_end else f"the run stopped after {plural(len(self.records), 'check')}"
        self.run_file_error = (f"cannot write the run file {where}: {runfiles.os_error_words(exc)}; "
                               f"{what}; {kept}; {fix}")
        if at_end:   # the run is over: the summary says it (write_problems)
            return
        # pytest ends the session on this flag and prints its text as the run's last line,
        # which is then the one line that says it (write_problems does not repeat it)
        self.stopped_by_run_file = True
        if self.session is not None:
            self.session.shouldstop = self.run_file_error
        dsession = self.config.pluginmanager.get_plugin("dsession")
        if dsession is not None:
            dsession.shouldstop = self.run_file_error

    def retire_superseded(self) -> None:
        """Move the runs of the run file that the report no longer shows anything of into the
        archive beside it (harness.core.runfiles.retire, harness.report.matrix.superseded), so
        that a file appended to before every upgrade for years stays about one run of each
        suite long. Not moving them is never a failure of the run: the file keeps them, the
        summary says why in a line, and the next run tries again."""
        from harness.report import matrix
        try:
            self.retired = runfiles.retire(self.writer.path, matrix.superseded)
        except OSError as exc:
            self.retire_error = (f"earlier runs not moved to {options.shown_path(runfiles.archive_of(self.writer.path))}: "
                                 f"{runfiles.os_error_words(exc)}; the run file keeps them, and the next run tries again")

    def incomplete(self, exitstatus) -> str | None:
        """How this run fell short of its selection, in words ("was interrupted after 20 of
        138 checks"), or None when every selected check ended: a run that stopped early must
        not replace a baseline that holds a whole one."""
        selected = self.collection["selected"]
        short = selected is not None and len(self.ended) < selected
        if not (short or self.pending or exitstatus == pytest.ExitCode.INTERRUPTED or self.run_file_error):
            return None
        how = ("stopped (its run file could not be written)" if self.run_file_error else
               "was interrupted" if self.pending or exitstatus == pytest.ExitCode.INTERRUPTED else "stopped")
        return f"{how} after {len(self.ended):,}" + (f" of {selected:,}" if selected is not None else "") + " checks"

    # -- hooks (this object is registered as a plugin; only the controller writes)
    def pytest_itemcollected(self, item):
        if self.collection["collected"] is not None:
            self.collection["collected"] += 1

    def pytest_deselected(self, items):
        if self.collection["deselected"] is not None:
            self.collection["deselected"] += len(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids):
        """The controller under xdist: a worker has collected (the controller collects nothing)."""
        if self.collection["selected"] is None:
            self.collection["selected"] = len(ids)
        tr = terminal(self.config)
        if self.said_collected or tr is None or not runs_checks(self.config):
            return
        self.said_collected = True
        tr.write_line(f"mps-compat: {node.gateway.id} collected {len(ids):,} checks to run, "
                      f"{time.monotonic() - self.started:.1f} s after the start; each worker warms up its "
                      f"sandbox (torch, and OpInfo where its checks need it) before its first check and says "
                      f"so when that check reports")

    def heard_from(self, info: dict) -> None:
        """A process's first report says what it collected and how its warm-up went: under
        xdist its counts fill the header's selection (the controller collects nothing), and a
        worker's warm-up, which it cannot write to the terminal itself, is said here."""
        for key, value in (info.get("collection") or {}).items():
            if self.collection.get(key) is None:
                self.collection[key] = value
        tr = terminal(self.config)
        if info.get("worker") and info.get("warm_up") and tr is not None:
            if getattr(tr, "_width_of_current_line", 0):   # xdist's progress dots leave the line open
                tr.write("\n")
            tr.write_line(f"mps-compat: [{info['worker']}] warm-up before its first check: "
                          f"{warm_up_words(info['warm_up'])}")

    def pytest_sessionstart(self, session):
        self.session = session

    def pytest_runtest_logreport(self, report):
        if not self.controller:
            return
        if report.when in ("teardown", "???"):   # "???": pytest-xdist, the worker died in this test
            self.ended.add(report.nodeid)
        told = getattr(report, "mps_compat_process", None)
        if told is not None:
            self.heard_from(told)
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
        if self.box is not None:   # a warm-up started it and no check asked for it
            self.box.close()
        if not self.controller:
            return
        keep = self.config.getoption("--save-baseline")
        part = self.config.getoption("--part-of-plan")
        if self.writer is None:   # no check ended: nothing to keep, and an old baseline stays
            if keep and not part:   # a part that kept nothing: ./compat tells from its exit status
                self.not_saved = baseline_not_replaced(keep, self.incomplete(exitstatus) or "recorded no check")
                if session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        # A check still pending was interrupted (Ctrl-C): it measured nothing and is not
        # recorded; the end line's exit status says the run was interrupted.
        counts: dict[str, int] = {}
        for rec in self.records:
            counts[rec["status"]] = counts.get(rec["status"], 0) + 1
        # reached / selected: the tests that ended of those selected; fewer after -x or --maxfail,
        # where the exit status (1) does not say the run stopped early (runfiles.Run.complete)
        end = {"kind": "end", "run": self.run_id, "finished": runfiles.now_iso(), "exitstatus": int(exitstatus),
               "counts": counts, "workloads": workloads_measured(self.records), "reached": len(self.ended),
               "selected": self.collection["selected"]}
        self.end = end
        if self.run_file_error is None:
            try:
                self.writer.write(end)
            except OSError as exc:
                self.run_file_failed(exc, at_end=True)
        try:
            self.writer.close()
        except OSError:   # closing adds nothing to the file: every line was written or said
            pass
        if self.run_file_error is None:
            self.retire_superseded()
        short = self.incomplete(exitstatus) if keep else None
        if short:
            self.not_saved = (f"this run's part NOT kept: the run {short}" if part
                              else baseline_not_replaced(keep, short))
        elif keep:
            try:
                self.saved = save_baseline(keep, self.header, self.records, end)
            except OSError as exc:  # the run file is written already; only the copy failed
                self.write_errors.append(f"--save-baseline {keep}: cannot write: {exc.strerror or exc}")
        if self.baseline is not None and not part:   # a part: ./compat compares all the runs at once
            from harness.report import compare
            this_run = runfiles.Run(self.run_id, self.header, "this run", list(self.records), end)
            this_side = compare.side_from_runs("this run", [this_run], [])
            # A baseline that holds few of this run's checks compared nothing worth a pass: said, and failed.
            problem = compare.overlap_problem(self.baseline, this_side, compare.FROM_CANDIDATE)
            if problem:
                self.write_errors.append(f"{self.baseline.label}: {problem}")
            else:   # the baseline's checks this run did not set out to run are no news
                asked, outside = compare.within_selection(self.baseline, this_side)
                self.comparison = compare.compare(asked, this_side)
                if outside:
                    self.comparison.notes.append(
                        f"{outside:,} check(s) of the baseline are outside this run's selection (its paths, -m and "
                        "-k do not take them): not compared, and not counted as disappeared")
            out = self.config.getoption("--compare-out")
            if out and self.comparison is not None:
                try:
                    for path, fmt in ((Path(out), "md"), (Path(out).with_suffix(".json"), "json")):
                        runfiles.write_atomic(path, compare.render(self.comparison, fmt))
                except OSError as exc:
                    self.write_errors.append(f"--compare-out {out}: cannot write: {exc.strerror or exc}")
        failed = (self.write_errors or self.not_saved or self.run_file_error
                  or (self.comparison is not None and self.comparison.regressions))
        if failed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


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
    interrupted save leaves the previous baseline whole. Called only for a run that ran
    every selected check (``SessionState.incomplete``)."""
    runfiles.write_atomic(path, "".join(runfiles.encode_line(obj) for obj in (header, *records, end)))
    return str(path)


def baseline_not_replaced(path: str, short: str) -> str:
    """The line that says a --save-baseline was not written, and what ``path`` holds still
    (``short``: how the run fell short, ``SessionState.incomplete``)."""
    shown = options.shown_path(path)
    if not os.path.lexists(path):
        return (f"baseline NOT written: the run {short}; no baseline was written to {shown}; "
                "let a run end to keep one")
    rf = runfiles.read_file(path)
    checks = sum(len(run.records) for run in rf.runs)
    held = (f"its earlier run ({checks:,} checks)" if len(rf.runs) == 1 else
            f"its earlier runs ({checks:,} check records)" if rf.runs else "what it held before")
    return f"baseline NOT replaced: the run {short}; {shown} still holds {held}; let a run end to replace it"


# --------------------------------------------------------------------------- options

def pytest_addoption(parser):
    options.add_options(parser)


def pytest_configure(config):
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    added = unnamed_controls(config.args, config.invocation_params.dir)
    config.args.extend(added)   # Session.perform_collect collects config.args
    config.stash[ADDED_CONTROLS] = added
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
        if config.getoption("--save-baseline") or config.getoption("--compare-out"):
            for problem in options.same_file_problems(config, state.run_file()):
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
    config.pluginmanager.register(AbsentTargets(config), "mps-compat-absent-targets")


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


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(config, items):
    """Each check's id and its suite's marker, before anyone selects (so ``-m ops`` finds
    them); the OPT_IN checks a -m expression does not name, left out. Then, around every
    other plugin's selection (pytest's -k, -m and --deselect run inside this wrapper), the
    controls (harness.env.instruments): a suite's controls for a target are kept whenever
    any other check of that suite on that target is selected, even where -k or -m left them
    out (a verdict is worth what its instruments are), and every control runs first. A check
    with no case on the selected targets (``_no_target``) is taken out, and not counted as a check."""
    for item in items:
        params = dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
        ident = records.identity_for(tuple(Path(str(item.path)).parts), item.originalname, params)
        if ident is None:
            continue
        item.stash[IDENTITY] = {"suite": ident.suite, "subject": ident.subject,
                                "variant": ident.variant, "target": ident.target}
        if ident.suite in records.CATEGORIES:   # the suites: env, ops, parity, optim, perf
            item.add_marker(ident.suite)
    caseless = [item for item in items if _no_target(item)]
    if caseless:   # not checks: deselected for pytest's counts, but neither collected nor deselected in the
        gone = {id(item) for item in caseless}   # run's header (a deselection there would call the run partial)
        items[:] = [item for item in items if id(item) not in gone]
        config.hook.pytest_deselected(items=caseless)
        state = config.stash.get(STATE, None)
        if state is not None:
            state.caseless = sorted({item.originalname for item in caseless})
            for key in ("collected", "deselected"):
                if state.collection[key] is not None:
                    state.collection[key] -= len(caseless)
    held = opted_out(config.getoption("markexpr"), items)
    if held:
        config.hook.pytest_deselected(items=held)
        left = {id(item) for item in held}
        items[:] = [item for item in items if id(item) not in left]
    collected = list(items)
    result = yield
    kept = kept_controls(config, collected, items)
    if kept:
        items.extend(kept)
        _undeselected(config, kept)
    unasked = unasked_controls(config, items)
    if unasked:
        left = {id(item) for item in unasked}
        items[:] = [item for item in items if id(item) not in left]
        config.hook.pytest_deselected(items=unasked)
    order = {id(item): i for i, item in enumerate(collected)}
    first = sorted((item for item in items if _is_control(item)), key=lambda item: order.get(id(item), 0))
    items[:] = first + [item for item in items if not _is_control(item)]
    return result


def _no_target(item) -> bool:
    """A check none of whose cases runs on the selected targets (the compiled family on a
    stand-in that does not serve it): pytest makes one item of the empty parametrization, with
    no target, to say "got empty parameter set". It is no check here: deselected for pytest's
    own counts, but neither collected nor deselected in the run's header (its selection stays
    whole), named in the collection line, and not warmed up for."""
    params = getattr(getattr(item, "callspec", None), "params", None) or {}
    return "target" in params and not isinstance(params["target"], str)


def _is_control(item) -> bool:
    ident = item.stash.get(IDENTITY, None)
    return ident is not None and ident["subject"] == instruments.SUBJECT and ident["suite"] in records.CATEGORIES


def _measured(selected: list) -> set[tuple[str, str]]:
    """The (suite, target) pairs that a selected check other than a control runs on."""
    return {(item.stash[IDENTITY]["suite"], item.stash[IDENTITY]["target"]) for item in selected
            if IDENTITY in item.stash and not _is_control(item)}


def kept_controls(config, collected: list, selected: list) -> list:
    """The controls that a selection left out (-k, -m) though it selected another check of
    their suite on their target; a control the user named in --deselect stays out."""
    chosen = {id(item) for item in selected}
    wanted = _measured(selected)
    named = tuple(config.getoption("deselect", None) or ())
    return [item for item in collected if id(item) not in chosen and _is_control(item)
            and (item.stash[IDENTITY]["suite"], item.stash[IDENTITY]["target"]) in wanted
            and not item.nodeid.startswith(named)]


def unnamed_controls(args, where) -> list[str]:
    """The controls modules (``test_*controls.py``) of each suite that the paths name only in
    part (a file or a check of ``suites/parity``, not the folder): collected too, so that a run
    of one file of a suite, or of one check, opens with that suite's controls as a run of the
    whole suite does. None where a path names a controls module or a folder that holds it."""
    named = [Path(where, str(arg).split("::")[0]).resolve() for arg in args]
    added: list[Path] = []
    for path in named:
        parts = path.parts
        if "suites" not in parts:
            continue
        top = len(parts) - 1 - parts[::-1].index("suites")
        if len(parts) < top + 3:   # suites/ or suites/<suite>: its controls are in it
            continue
        for module in sorted(Path(*parts[:top + 2]).glob("test_*controls.py")):
            if module not in added and not any(p == module or p in module.parents for p in named):
                added.append(module)
    return [str(module) for module in added]


def user_args(config) -> list[str]:
    """The paths the user named (the header's ``selection.args``), without the controls
    modules collected beside them (``unnamed_controls``)."""
    added = set(config.stash.get(ADDED_CONTROLS, []))
    return [str(a) for a in config.args if str(a) not in added]


def unasked_controls(config, selected: list) -> list:
    """The controls of the modules collected beside the named paths whose suite and target
    no other selected check runs on (a run of one cpu check does not measure the mps
    column's instruments)."""
    added = {Path(p) for p in config.stash.get(ADDED_CONTROLS, [])}
    if not added:
        return []
    wanted = _measured(selected)
    return [item for item in selected if _is_control(item) and Path(str(item.path)).resolve() in added
            and (item.stash[IDENTITY]["suite"], item.stash[IDENTITY]["target"]) not in wanted]


def _undeselected(config, kept: list) -> None:
    """The kept controls taken back out of the deselected counts (this run's header, pytest's
    own summary line), and said on the terminal."""
    state = config.stash.get(STATE, None)
    if state is not None and state.collection["deselected"] is not None:
        state.collection["deselected"] -= len(kept)
    tr = terminal(config)
    if tr is None:
        return
    back = {id(item) for item in kept}
    if isinstance(tr.stats.get("deselected"), list):
        tr.stats["deselected"] = [item for item in tr.stats["deselected"] if id(item) not in back]
        if not tr.stats["deselected"]:
            del tr.stats["deselected"]
    if state is not None and state.controller and runs_checks(config):
        tr.write_line(f"mps-compat: {plural(len(kept), 'control')} kept beside the -k / -m selection: a suite's "
                      "controls run first on every target where any of its checks runs")


def selection_problem(config) -> str | None:
    """What pytest would say of this run's -k and -m (a syntax error, a marker that
    --strict-markers does not know), said once, before anything is collected: pytest says it
    only after collecting every suite file, and under xdist each worker meets it and the
    controller ends in an INTERNALERROR (a lost worker's crash) instead of the one line. It is
    pytest's own reading (its -k and -m deselection, on no items); None where this pytest has
    no such functions (pytest then says it itself)."""
    try:
        from _pytest.mark import deselect_by_keyword, deselect_by_mark
    except ImportError:
        return None
    try:
        deselect_by_keyword([], config)
        deselect_by_mark([], config)
    except pytest.UsageError as exc:
        return str(exc)
    return None


def opted_out(markexpr: str | None, items: list) -> list:
    """The items a -m expression leaves out because they carry an OPT_IN marker it does not
    name (a word of the expression: "compile", "not compile"); none without -m."""
    if not markexpr:
        return []
    unnamed = [m for m in OPT_IN if not selection.names(markexpr, m)]
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


ABSENT = pytest.StashKey[dict]()   # target -> why it is not here ("" where it is), decided once per process


def absent_reason(item) -> str:
    """Why the target of a check that asks for its ``backend`` is not on this machine (the
    reason the ``backend`` fixture would skip it with); "" where it is, or where the check
    takes no target."""
    if "backend" not in getattr(item, "fixturenames", ()):
        return ""
    target = (getattr(getattr(item, "callspec", None), "params", None) or {}).get("target")
    if not isinstance(target, str):
        return ""
    known = item.config.stash.setdefault(ABSENT, {})
    if target not in known:
        avail = devices.backend(target).availability()
        known[target] = "" if avail.available else avail.reason
    return known[target]


class AbsentTargets:
    """A check on a target this machine does not have is skipped, with the reason, before its
    setup, as the ``backend`` fixture would skip it: the same record, and pytest's report of a
    setup that skipped at the check's own line, then its teardown, made through pytest's own
    hooks (makereport, logreport) without setting up a fixture or capturing logs for a setup
    that cannot run. pytest's logging plugin attaches its handlers to every non-propagating
    logger (torch has 46) in each phase: the 11,441 mps checks of ``pytest suites/ -m mps`` on
    a machine without MPS took 31 s that way. The teardown is pytest's runner's own (it tears
    down what the next check does not share; the other plugins' teardown expects their
    setup, which did not run). Every other check, and every check where this pytest has no
    such runner, runs pytest's own protocol. Registered as a plugin (``pytest_configure``)."""

    def __init__(self, config):
        runner = config.pluginmanager.get_plugin("runner")
        self.teardown = getattr(runner, "pytest_runtest_teardown", None)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        reason = absent_reason(item) if self.teardown is not None else ""
        if not reason:
            return None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)

        def skip():
            pytest.skip(reason)
        if item.session.shouldfail or item.session.shouldstop:
            nextitem = None
        phases = (("setup", skip), ("teardown", lambda: self.teardown(item, nextitem)))
        reraise = (pytest.exit.Exception,) + (() if item.config.getoption("usepdb", False) else (KeyboardInterrupt,))
        for when, run in phases:   # the skip is said at the check's line (at_the_checks_line)
            report = ihook.pytest_runtest_makereport(item=item, call=pytest.CallInfo.from_call(run, when, reraise))
            ihook.pytest_runtest_logreport(report=report)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True


@pytest.fixture(scope="session")
def sandbox(request):
    """A child process for checks that may crash or hang (see harness.core.isolate), the
    one the warm-up started where it ran (``warm_up``)."""
    box = request.config.stash[STATE].sandbox()
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
def keeping_baseline(request) -> bool:
    """Whether this run keeps a baseline (``--save-baseline`` without ``--baseline``, as
    ``./compat baseline`` runs it): a perf check then measures each time in fresh processes
    and keeps the fastest (suites/perf, harness.perf.against.confirmed), since no later run
    can measure this version's figure again. A candidate (``./compat candidate`` keeps its
    parts with ``--save-baseline`` too, and compares with ``--baseline``) measures again only
    what looks slower."""
    config = request.config
    return config.getoption("--save-baseline") is not None and config.getoption("--baseline") is None


@pytest.fixture
def record(request) -> Recorder:
    """Where a check puts its category and metrics for the run file."""
    rec = request.node.stash.setdefault(RECORDER, Recorder())
    return rec


# --------------------------------------------------------------------------- journal

@pytest.hookimpl(wrapper=True)
def pytest_sessionstart(session):
    problem = selection_problem(session.config)
    if problem:   # before xdist starts its workers (its sessionstart is trylast) and before any collection
        raise pytest.UsageError(problem)
    yield   # after pytest's own header (the terminal reporter's sessionstart is trylast)
    profiles.remember_session_profile()   # hypothesis's plugin has loaded --hypothesis-profile
    announce(session.config)
    from harness.core.isolate import settle
    settle()   # torch, imported for the facts, and the plugins: held for the session


@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    """Collection as progress: said when it starts and how long it took (every suite file
    is imported, whatever -m and -k select afterwards). An xdist controller collects
    nothing: its workers do, and it says so when the first of them is done."""
    state = session.config.stash.get(STATE, None)
    if state is None or session.config.pluginmanager.has_plugin("dsession"):
        return (yield)
    state.collection.update(collected=0, deselected=0)
    tr = terminal(session.config) if state.controller and runs_checks(session.config) else None
    if tr is not None:
        tr.write_line("mps-compat: collecting the checks (each suite file it reads is imported; -m and -k select after)")
    started = time.monotonic()
    try:
        return (yield)
    finally:
        if tr is not None:
            per = ", ".join(f"{t} {n:,}" for t, n in state.per_target.items())
            tr.write_line(f"mps-compat: collection took {time.monotonic() - started:.1f} s: "
                          f"{state.collection['selected'] or 0:,} checks to run" + (f" ({per})" if per else "")
                          + (f", {state.collection['deselected']:,} deselected" if state.collection["deselected"]
                             else "")
                          + (f"; left out, no case on the targets selected: {listed(state.caseless, 4)}"
                             if state.caseless else ""))


def pytest_collection_finish(session):
    profiles.restore_session_profile()    # collecting may have imported common_utils
    from harness.core.isolate import settle
    settle()   # the imports and the collected checks live as long as the session
    state = session.config.stash.get(STATE, None)
    if state is not None and state.collection["collected"] is not None:
        state.collection["selected"] = len(session.items)
        state.per_target = Counter(item.stash[IDENTITY]["target"] or "any" for item in session.items
                                   if IDENTITY in item.stash)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Before this process's first check: the warm-up (outside the check's phases, and
    outside pytest-timeout's limit, whose wrapper is inside this one)."""
    state = item.config.stash.get(STATE, None)
    if state is not None and not state.warmed:
        state.warmed = True
        share_the_cores(state)
        warm_up(state, item.session)
    return (yield)


def share_the_cores(state) -> None:
    """On one of several xdist workers, the checks this process computes itself (the property
    and attention checks) take the worker's share of the cores, as its sandbox child does
    (``isolate.threads_per_worker``): with torch's default every worker starts a thread per
    core, and on 2 cores the property and attention checks (-n 2) took 45.6 s and 23.6 s so,
    19.0 s and 9.6 s with a thread each. The machine's facts are read first, so the env suite
    judges the thread count the user set, not this share."""
    if state.controller:
        return
    from harness.core.isolate import threads_per_worker
    threads = threads_per_worker(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    if threads is None:
        return
    facts.current()
    import torch
    if torch.get_num_threads() > threads:
        torch.set_num_threads(threads)


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


HARNESS = Path(__file__).resolve().parents[1]


def at_the_checks_line(item, report) -> None:
    """A skip raised by the harness (a verdict's ``conclude``, an absent target) is reported
    at the check's own line, as a skip mark's or a fixture's is: pytest's skip summary (``-rs``)
    and a JUnit file would otherwise point every such check at harness/plugin/."""
    if not (report.skipped and isinstance(report.longrepr, tuple) and len(report.longrepr) == 3):
        return
    if HARNESS not in Path(report.longrepr[0]).resolve().parents:
        return
    path, line = item.reportinfo()[:2]
    if line is not None:
        report.longrepr = (os.fspath(path), line + 1, report.longrepr[2])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    at_the_checks_line(item, report)
    state = item.config.stash.get(STATE, None)
    if state is not None and not state.told:   # this process's first report: what it collected, its warm-up
        state.told = True
        report.mps_compat_process = {"worker": getattr(item.config, "workerinput", {}).get("workerid"),
                                     "collection": dict(state.collection), "warm_up": state.warm_up}
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
    if state is None or not state.controller:
        return
    if not state.records:   # no table to show; what was not written is still said
        write_problems(terminalreporter, state)
        return
    write_summary(terminalreporter, state)


# --------------------------------------------------------------------------- the start and the warm-up

# The warm-up's limit per step: importing OpInfo's op_db on a loaded 2-core machine takes
# far longer than a check may (--check-timeout).
WARM_UP_TIMEOUT = 600.0


def terminal(config):
    """pytest's terminal reporter, None without one (-p no:terminal)."""
    return config.pluginmanager.get_plugin("terminalreporter")


def runs_checks(config) -> bool:
    """Whether this session's paths hold checks (they are, or hold, a suites/ directory): a
    run of the self-tests (tests/) has no targets to announce."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, str(arg).split("::")[0])
        if "suites" in path.resolve().parts or (path / "suites").is_dir():
            return True
    return False


def announce(config) -> None:
    """The run's first lines (the controller's): the machine (chip or GPUs, CPU, OS), the
    targets that will run and those that will not with why, and the run file the records
    are appended to."""
    state = config.stash.get(STATE, None)
    tr = terminal(config)
    if state is None or not state.controller or tr is None or not runs_checks(config):
        return
    from harness.report.matrix import machine_name
    f = facts.current()
    tr.write_line(f"mps-compat: this machine: {f.get('host', '?')}: {machine_name(f)}; torch "
                  f"{(f.get('torch') or {}).get('version') or 'not importable'}, Python "
                  f"{(f.get('python') or {}).get('version')} ({(f.get('python') or {}).get('arch')})")
    tr.write_line(options.targets_line(options.target_table(state.targets, f), config.getoption("--device")))
    tr.write_line(f"mps-compat: records are appended to {options.shown_path(state.run_file())}")
    added = config.stash.get(ADDED_CONTROLS, [])
    if added:
        tr.write_line(f"mps-compat: collected beside the named paths, so that the run opens with their suites' "
                      f"controls: {', '.join(options.shown_path(Path(p)) for p in added)}")


def warm_up_plan(items) -> list[tuple[str, str]]:
    """(what the terminal calls it, what harness.core.isolate.warm pays) for each start-up cost
    the sandbox child would otherwise book to the first check that uses it: torch for any check
    with the sandbox, OpInfo's op_db for an op check (a case with an ``op_key``: ops, op parity,
    compiled ops), and each accelerator's context for the checks on it. A check on a target
    that is not here is skipped before it reaches the sandbox: it asks for nothing."""
    here: dict[str, bool] = {}

    def runs_here(target) -> bool:
        if target is not None and target not in here:
            here[target] = devices.backend(target).availability().available
        return target is None or here[target]
    params = [p for p in (dict(getattr(getattr(item, "callspec", None), "params", {}) or {})
                          for item in items if "sandbox" in getattr(item, "fixturenames", ()))
              if runs_here(p.get("target"))]
    if not params:
        return []
    plan = [("torch", "torch")]
    if any(hasattr(p.get("case"), "op_key") for p in params):
        plan.append(("OpInfo op_db", "harness.ops.declarations:op_table"))
    plan += [(f"{t} context", f"device:{t}") for t in devices.TARGETS
             if t != "cpu" and any(p.get("target") == t for p in params)]
    return plan


def warm_up(state, session) -> None:
    """Pay the sandbox child's start-up (``warm_up_plan``) before this process's first check,
    so that no check's duration holds it: said on the terminal step by step in a run without
    xdist; a worker keeps it for its first report (``heard_from`` says it on the controller).
    A step that fails is said and left to the checks, which meet the failure themselves."""
    from harness.env import timing
    plan = warm_up_plan(session.items)
    if not plan or session.config.getoption("setupplan", False):
        return
    box = state.sandbox()
    capman = session.config.pluginmanager.get_plugin("capturemanager")
    tr = terminal(state.config) if state.controller else None
    if tr is not None:
        tr.ensure_newline()
        tr.write("mps-compat: warm-up, once before the first check and booked to none:", flush=True)
    steps, started = [], time.monotonic()
    for i, (label, what) in enumerate(plan):
        if tr is not None:
            tr.write(("," if i else "") + f" {label}", flush=True)
        begun = time.monotonic()
        with timing.beside():   # never while another worker's perf check measures (as a check's call)
            outcome, err = _captured(capman, lambda: box.call("harness.core.isolate:warm", what,
                                                              timeout=max(state.check_timeout, WARM_UP_TIMEOUT)))
        problem = ""
        if outcome.kind != "ok":
            said = [ln for ln in err.splitlines() if ln.strip()]
            problem = f"{outcome.kind}: {outcome.detail}" + (f" (stderr: {said[-1].strip()})" if said else "")
        steps.append({"step": label, "seconds": round(time.monotonic() - begun, 2), "problem": problem})
        if tr is not None:
            tr.write(" " + _step_words(steps[-1]), flush=True, red=bool(problem))
    state.warm_up = {"steps": steps, "seconds": round(time.monotonic() - started, 2)}
    if tr is not None:
        tr.write_line(f"; {state.warm_up['seconds']:.1f} s in all")


def _captured(capman, call):
    """``call()`` under pytest's capture, as a check's phase runs: a sandbox child started here
    inherits the captured stderr, as it did when the first check started it, and what it
    prints at start (torch's warnings) stays out of the terminal's lines. (result, its stderr)."""
    if capman is None:
        return call(), ""
    capman.resume_global_capture()
    try:
        result = call()
    finally:
        capman.suspend_global_capture(in_=False)
        _, err = capman.read_global_capture()
    return result, err


def _step_words(step: dict) -> str:
    return f"{step['seconds']:.1f} s" + (f" (failed: {step['problem']})" if step["problem"] else "")


def warm_up_words(warm: dict) -> str:
    """A process's warm-up in one line: each step with its seconds, and the whole."""
    return ", ".join(f"{s['step']} {_step_words(s)}" for s in warm["steps"]) + f"; {warm['seconds']:.1f} s in all"


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
    # Line by line: pytest's writer escapes a whole text (its newlines too) when one character
    # does not fit the terminal's encoding (LANG=C), and the table's symbols may not.
    for line in tabulate(rows, headers=("suite", "target", "results"), tablefmt="simple").splitlines():
        tr.write_line(line)
    tr.write_line("legend: " + "  ".join(f"{sym} {key}" for key, sym, _ in matrix.LEGEND))
    for name, info in options.target_table(state.targets, facts.current()).items():
        if info["selected"] and not info["available"]:
            tr.write_line(f"{name}: skipped: {info['reason']}")
    write_verdicts(tr, state)
    write_failures(tr, state.records)
    path = state.writer.path if state.writer else state.run_file()
    command = options.report_command(path)
    tr.write_line(f"run file: {options.shown_path(path)}")
    if state.retired is not None:
        tr.write_line("run file: " + retired_words(state.retired))
    elif state.retire_error:
        tr.write_line("run file: " + state.retire_error)
    if state.written or state.run_file_error is None:   # a run file that took no record has nothing to render
        tr.write_line(f"report: {command}" + (
            "   (every run in reports/runs/, this one included; ./compat suites runs it after the suites)"
            if command == "python -m tools.report" else
            "   (this run file alone: tools.report without a path reads reports/runs/, which does not hold it)"))
    if state.saved and state.config.getoption("--part-of-plan"):
        tr.write_line(f"this run's part kept ({plural(len(state.records), 'check')}): ./compat puts the runs' "
                      "parts together (the baseline, or the candidate it compares) once every run has ended")
    elif state.saved:
        tr.write_line(f"baseline kept: {os.path.relpath(state.saved)} (compare later runs with --baseline)")
    write_problems(tr, state)
    if state.comparison is not None:
        from harness.report import compare
        cmp = state.comparison
        tr.section("mps-compat: against the baseline", red=bool(cmp.regressions), green=not cmp.regressions)
        for line in compare.render(cmp, "table").rstrip().splitlines():
            tr.write_line(line)
        if cmp.regressions:
            tr.write_line(f"FAILED: {len(cmp.regressions)} regression(s) against {cmp.baseline.label}", red=True)


def retired_words(moved: runfiles.Retired) -> str:
    """What ``retire`` did, in a line: how much it moved, where to, and how to see it."""
    mib = (moved.size_before - moved.size_after) / 2 ** 20
    archive = options.shown_path(moved.archive)
    return (f"{plural(moved.runs, 'earlier run')} that the report no longer shows anything of (newer runs "
            f"stand for every check {'it' if moved.runs == 1 else 'they'} recorded; {moved.records:,} records, "
            f"{mib:,.1f} MiB) moved to {archive}; `python -m tools.report {archive} --out DIR` shows "
            f"{'it' if moved.runs == 1 else 'them'}")


def write_problems(tr, state) -> None:
    """What this run could not write, one red line each: the run file (the run stopped
    there), a baseline left as it was (the run was incomplete), a --save-baseline or
    --compare-out that failed."""
    if state.run_file_error and not state.stopped_by_run_file:
        tr.write_line(f"ERROR: {state.run_file_error}", red=True)
    if state.not_saved:
        tr.write_line(state.not_saved, red=True)
    for problem in state.write_errors:
        tr.write_line(f"ERROR: {problem}", red=True)


VERDICT_COLOURS = {"XX": {"red": True}, "!!": {"yellow": True}, "OK": {"green": True}}


def write_verdicts(tr, state) -> None:
    """The verdict of each column of this run, one line each and its aspects that are not
    good (harness.report.verdict, as the report says it). A verdict that cannot be made is
    one red line: the run's records are written already."""
    try:
        from harness.report import verdict
        lines = verdict.terminal_lines(verdict.for_records(state.header, state.records, state.end))
    except Exception as exc:  # the summary of a finished run must not end in a traceback
        tr.write_line(f"verdict: not made: {type(exc).__name__}: {records.first_line(str(exc))}", red=True)
        return
    if lines:
        tr.write_sep("-", "verdict of this run")
    for line in lines:
        tr.write_line(line, **VERDICT_COLOURS.get(line[:2], {}))


FAILURE_EXAMPLES = 3


def failure_groups(recs: list[dict]) -> list:
    """This run's broken checks (fail, error, crash, timeout: the table's) grouped by cause
    (``harness.report.verdict.failure_groups``, whose groups carry each check's target as its
    column); a broken check that no group holds is added to the "cause not determined" group,
    so that the groups' counts always add up to the table's."""
    from harness.report import matrix, verdict
    groups = list(verdict.failure_groups([(r.get("target") or "", r) for r in recs]))
    held = Counter(check for g in groups for check in g.checks)
    left = []
    for rec in recs:
        if matrix.cell_key(rec) in records.Status.BAD:
            check = rec.get("check", "?")
            if held[check]:
                held[check] -= 1
            else:
                left.append(rec)
    if left:
        undetermined = next((g for g in groups if g.cause == verdict.UNDETERMINED), None)
        if undetermined is None:
            undetermined = verdict.FailureGroup(
                verdict.UNDETERMINED, "no cause was found for these", "read each check's reason", [], [])
            groups.append(undetermined)
        for rec in left:
            undetermined.checks.append(rec.get("check", "?"))
            if len(undetermined.columns) == len(undetermined.checks) - 1:
                undetermined.columns.append(rec.get("target") or "")
    return groups


def failure_line(group) -> str:
    """One group: how many, the cause, what it is, the switch, and the first few checks."""
    columns = list(group.columns) + [""] * (len(group.checks) - len(group.columns))
    shown = [f"{c} [{t}]" if t else c for c, t in zip(group.checks, columns)][:FAILURE_EXAMPLES]
    more = len(group.checks) - len(shown)
    return (f"{len(group.checks):,} x {group.cause}" + (f": {group.what}" if group.what else "")
            + (f"; switch: {group.switch}" if group.switch else "")
            + f"; {', '.join(shown)}" + (f" and {more:,} more" if more else ""))


def write_failures(tr, recs: list[dict]) -> None:
    try:
        groups = failure_groups(recs)
    except Exception as exc:  # as write_verdicts: one line, never a traceback at the end of a run
        tr.write_line(f"failures by cause: not grouped: {type(exc).__name__}: {records.first_line(str(exc))}",
                      red=True)
        return
    if groups:
        tr.write_sep("-", f"failures by cause ({sum(len(g.checks) for g in groups):,})")
    for group in groups:
        tr.write_line(failure_line(group), red=True)
