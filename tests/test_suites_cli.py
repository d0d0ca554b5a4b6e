"""The real suites, as a user runs them on this machine (Linux, no GPU, no Mac); and
./compat suites: the pytest runs it makes (tools/suiteplan.py), their arguments and their
exit status, and its estimate of how long they take."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.core import runfiles
from harness.core.records import SCHEMA as RECORD_SCHEMA
from harness.report import selection
from tests.conftest import ROOT
from tools import suiteplan


def pytest_suites(tmp_path, *args):
    run_file = tmp_path / "run.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/", "-p", "no:cacheprovider",
                          "--run-file", str(run_file), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    return res, run_file


@pytest.mark.slow
def test_mps_selection_is_all_skipped_with_a_reason_each(tmp_path):
    """Every mps check is skipped with the reason MPS is not here, in the run file, in pytest's
    skip summary (at the check's own line, not the plugin's: the env suite's own "not
    applicable" too) and in a JUnit file, without a fixture set up for it
    (harness.plugin.hooks.AbsentTargets); the env suite's cpu checks between them are set up
    and torn down as in any run."""
    import xml.etree.ElementTree as ET

    from harness.env import devices
    why = devices.backend("mps").availability().reason
    junit = tmp_path / "junit.xml"
    res, run_file = pytest_suites(tmp_path, "-m", "mps or (env and cpu)", "-rs", "--junitxml", str(junit))
    assert res.returncode == 0, res.stdout[-3000:]
    rf = runfiles.read_file(run_file)
    records = [r for run in rf.runs for r in run.records]
    assert records and rf.errors == []
    mps = [r for r in records if r["target"] == "mps"]
    assert {r["target"] for r in records} == {"mps", "cpu"} and len(mps) > 10_000
    assert all(r["status"] == "skip" and r["reason"] for r in mps)
    assert {r["reason"] for r in mps if r["suite"] != "env"} == {why}   # the env suite judges the facts: "not applicable"
    cpu = {r["subject"]: r["status"] for r in records if r["target"] == "cpu"}
    assert cpu["threads"] == "pass" and cpu["tokenizers-native"] == "pass", cpu
    said = [ln for ln in res.stdout.splitlines() if ln.startswith("SKIPPED [")]
    assert said and all(ln.split("] ", 1)[1].startswith("suites/") for ln in said), said   # never harness/plugin/
    absent = [ln for ln in said if ln.endswith(f": {why}")]
    assert sum(int(ln[9:].split("]")[0]) for ln in absent) == sum(r["reason"] == why for r in mps)
    cases = ET.parse(junit).getroot().iter("testcase")
    skipped = [c.find("skipped") for c in cases if "[mps" in c.get("name")]
    assert len(skipped) == len(mps) and all(s is not None and s.get("message") for s in skipped)
    assert sum(s.get("message") == why for s in skipped) == sum(r["reason"] == why for r in mps)


def test_env_suite_runs_for_real_on_cpu(tmp_path):
    res, run_file = pytest_suites(tmp_path, "-m", "env and cpu")
    assert res.returncode == 0, res.stdout[-3000:]
    records = [r for run in runfiles.read_file(run_file).runs for r in run.records]
    statuses = {r["subject"]: r["status"] for r in records}
    assert statuses["threads"] == "pass" and statuses["tokenizers-native"] == "pass"
    assert "mps-compat: this run" in res.stdout


def test_naming_the_absent_mps_device_is_a_usage_error(tmp_path):
    res, run_file = pytest_suites(tmp_path, "--device", "mps")
    assert res.returncode == 4 and not run_file.exists()
    assert [ln for ln in res.stderr.splitlines() if ln.strip()] == [
        next(ln for ln in res.stderr.splitlines() if ln.startswith("ERROR: --device mps: MPS unavailable"))]


@pytest.mark.slow
def test_a_kept_baseline_passes_an_unchanged_rerun(tmp_path):
    kept = tmp_path / "baseline.jsonl"
    res, _ = pytest_suites(tmp_path, "-m", "env and cpu", "--save-baseline", str(kept))
    assert res.returncode == 0 and kept.exists(), res.stdout[-3000:]
    again, _ = pytest_suites(tmp_path, "-m", "env and cpu", "--baseline", str(kept))
    assert again.returncode == 0, again.stdout[-3000:]
    assert "mps-compat: against the baseline" in again.stdout and "0 regression(s)" in again.stdout


def test_a_bad_baseline_is_a_usage_error_before_anything_runs(tmp_path):
    truncated = tmp_path / "cut.jsonl"
    truncated.write_text('{"kind": "header", "schema": 1, "run": "r", "env_id": "e", "fac')
    for path, says in ((tmp_path / "missing.jsonl", "no such file"), (truncated, "truncated last line")):
        res, run_file = pytest_suites(tmp_path, "-m", "env and cpu", "--baseline", str(path))
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert res.returncode == 4 and not run_file.exists(), res.stderr
        assert len(lines) == 1 and lines[0].startswith("ERROR: --baseline: ") and says in lines[0]


def test_an_unwritable_baseline_is_a_usage_error_before_anything_runs(tmp_path):
    """Said at the start: the run's results would have nowhere to go. (A place that breaks
    during the run: tests/test_plugin.py.)"""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    res, run_file = pytest_suites(tmp_path, "-m", "env and cpu", "--save-baseline", str(blocker / "baseline.jsonl"))
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and not run_file.exists() and "Traceback" not in res.stdout + res.stderr
    assert len(lines) == 1 and lines[0].startswith("ERROR: --save-baseline ") and "is not a directory" in lines[0]


# --------------------------------------------------------------------------- ./compat suites: the runs it makes
#
# The script is run for real, with a stand-in venv (MPS_COMPAT_VENV) whose python records
# each pytest call's arguments and answers the exit status a test scripted, and hands
# everything else (set-up's hash, the planner, tools.envinfo) to this interpreter. No
# suite runs.

FAKE_PYTHON = """#!/usr/bin/env bash
case "$1 $2" in
  "-m pytest"|"-m tools.kernels"|"-m tools.report")
    exec "$REAL_PYTHON" -c '
import json, os, sys
log = os.environ["FAKE_LOG"]
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[1:]) + "\\n")
status = 0
if sys.argv[1] == "pytest":
    queue = os.environ.get("FAKE_STATUSES", "").split()
    calls = sum(1 for line in open(log) if json.loads(line)[0] == "pytest")
    status = int(queue[calls - 1]) if calls <= len(queue) else 0
sys.exit(status)' "${2}" "${@:3}" ;;
esac
exec "$REAL_PYTHON" "$@"
"""


@pytest.fixture
def fake_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    h = hashlib.sha256()
    for name in ("pyproject.toml", "uv.lock"):
        h.update((ROOT / name).read_bytes())
    (venv / ".mps-compat-installed").write_text(h.hexdigest() + "\n")   # set-up finds it synced
    return venv


def compat(venv, tmp_path, *args, statuses=(), env=None):
    env = {**os.environ, "MPS_COMPAT_VENV": str(venv), "REAL_PYTHON": sys.executable,
           "FAKE_LOG": str(tmp_path / "calls.jsonl"), "FAKE_STATUSES": " ".join(map(str, statuses)), **(env or {})}
    res = subprocess.run([str(ROOT / "compat"), *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    log = tmp_path / "calls.jsonl"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return res, calls


ESTIMATE = "compat: estimate: about 32 min (from somewhere): env, ops, parity on 2 workers; then optim serially"
THREE_RUNS = suiteplan.Plan([suiteplan.Phase("untimed", ["env", "ops", "parity"], 2),
                             suiteplan.Phase("optim", ["optim"], 0), suiteplan.Phase("perf", ["perf"], 2)],
                            None, set(), note=ESTIMATE)


def execute(plan, argv=(), statuses=(), **kw):
    """tools.suiteplan.execute with a stand-in for pytest that answers ``statuses`` in turn."""
    calls, said = [], []

    def call(cmd, cwd):
        calls.append(cmd)
        return statuses[len(calls) - 1] if len(calls) <= len(statuses) else 0
    outcome = suiteplan.execute(plan, list(argv), python="PY", call=call, say=said.append, **kw)
    return outcome, calls, said


def test_three_runs_with_the_users_arguments():
    user = ["-m", "not mps", "--workload", "small"]
    outcome, calls, said = execute(THREE_RUNS, user)
    assert outcome.status == 0 and said == [ESTIMATE]
    assert calls == [
        ["PY", "-m", "pytest", "suites/", "-p", "tools.suiteplan", "--only-suites", "env,ops,parity", "-n", "2", *user],
        ["PY", "-m", "pytest", "suites/", "-p", "tools.suiteplan", "--only-suites", "optim", *user],
        ["PY", "-m", "pytest", "suites/", "-p", "tools.suiteplan", "--only-suites", "perf", "-n", "2", *user]]


def test_each_run_gets_its_own_options_before_the_users():
    _, calls, _ = execute(THREE_RUNS, ["-m", "cpu"], extra=lambda phase: ["--save-baseline", f"{phase.name}.jsonl"])
    assert [c[-4:] for c in calls] == [["--save-baseline", f"{n}.jsonl", "-m", "cpu"] for n in ("untimed", "optim", "perf")]


@pytest.mark.parametrize("statuses,exit_status,runs", [
    ((1, 0, 0), 1, 3),     # failed checks: the other runs still run, the status says it
    ((0, 1, 0), 1, 3),
    ((5, 0, 5), 0, 3),     # a run that selected nothing is no failure when another ran checks
    ((5, 5, 5), 5, 3),     # none selected anything: pytest's own status
    ((2, 0, 0), 2, 1),     # interrupted: no further run
    ((4, 0, 0), 4, 1),     # a usage error is said once
    ((0, 3, 0), 3, 2),     # an internal error
])
def test_the_exit_status_of_the_runs_together(statuses, exit_status, runs):
    outcome, calls, _ = execute(THREE_RUNS, statuses=statuses)
    assert outcome.status == exit_status and len(calls) == runs
    assert [rc for _, rc in outcome.ran] == list(statuses[:runs])
    assert (outcome.stopped() is not None) == (statuses[runs - 1] not in (0, 1, 5))


def test_exitfirst_stops_after_the_first_run_with_failures():
    plan = suiteplan.Plan(THREE_RUNS.phases, None, set(), exitfirst=True)
    outcome, calls, _ = execute(plan, ["-x"], statuses=(0, 1, 0))
    assert outcome.status == 1 and len(calls) == 2


def test_a_planner_that_fails_leaves_one_run_as_given(monkeypatch):
    def broken(argv):
        raise KeyError("surprise")
    monkeypatch.setattr(suiteplan, "plan_here", broken)
    said = []
    plan = suiteplan.planned(["-m", "env and cpu", "-x"], say=said.append)
    assert [(p.name, suiteplan.phase_args(p)) for p in plan.phases] == [("all", [])] and plan.exitfirst
    assert said == ["compat: could not plan the runs (KeyError: 'surprise'); one pytest run, as given"]


SLOW_PYTEST = """#!/usr/bin/env python3
import json, os, signal, sys, time
if sys.argv[1:3] != ["-m", "pytest"]:
    os.execv(os.environ["REAL_PYTHON"], [os.environ["REAL_PYTHON"], *sys.argv[1:]])
log = os.environ["FAKE_LOG"]
def stop(signum, frame):
    time.sleep(1)                  # a session ending takes a while: its run file's end line
    with open(log, "a") as fh:
        fh.write(json.dumps(["ended"]) + "\\n")
    sys.exit(2)
signal.signal(signal.SIGINT, stop)
with open(log, "a") as fh:
    fh.write(json.dumps(sys.argv[2:]) + "\\n")
time.sleep(60)
"""


def test_ctrl_c_lets_the_run_end_its_session_and_starts_no_further_run(tmp_path):
    fake = tmp_path / "python"
    fake.write_text(SLOW_PYTEST)
    fake.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "REAL_PYTHON": sys.executable, "FAKE_LOG": str(log)}
    proc = subprocess.Popen([sys.executable, "-m", "tools.suiteplan", "run", "--python", str(fake), "--",
                             "-m", "env or optim"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(600):           # the first run has started
        if log.exists() and log.read_text():
            break
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)    # as the terminal sends it: to the whole foreground group
    out, err = proc.communicate(timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert proc.returncode == 2, err
    assert [c[0] for c in calls] == ["pytest", "ended"]    # waited for the run's end, and ran no other
    assert "Traceback" not in err


def test_compat_suites_runs_the_plan_then_the_matrix_and_says_its_status(fake_venv, tmp_path):
    res, calls = compat(fake_venv, tmp_path, "suites", "-m", "env", statuses=(1,))
    assert res.returncode == 1, res.stderr
    assert res.stdout.startswith("compat: estimate: about ") and "estimate" in res.stdout.splitlines()[0]
    assert calls[0] == ["pytest", "suites/", "-p", "tools.suiteplan", "--only-suites", "env", "-m", "env"]
    assert [c[0] for c in calls] == ["pytest", "tools.kernels", "tools.report"]   # the matrix after failures too


@pytest.mark.parametrize("status,says", [(4, "nothing ran (the error above)"), (5, "nothing ran (no check selected)")])
def test_compat_suites_leaves_the_matrix_alone_when_nothing_ran(fake_venv, tmp_path, status, says):
    """After a usage error the earlier runs' verdicts printed below it would read as this run's."""
    res, calls = compat(fake_venv, tmp_path, "suites", "-m", "env", statuses=(status,))
    assert res.returncode == status, res.stderr
    assert [c[0] for c in calls] == ["pytest"]
    assert res.stderr.strip().splitlines()[-1] == f"compat: {says}; reports/matrix.* left as they were"


def test_compat_candidate_without_a_baseline_says_so_before_tox_builds_anything(fake_venv, tmp_path):
    res, calls = compat(fake_venv, tmp_path, "candidate", "torch==2.15.*",
                        env={"MPS_COMPAT_BASELINE": str(tmp_path / "none.jsonl")})
    assert res.returncode == 2 and calls == []
    assert res.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'none.jsonl'}: no such file or directory; keep one first with ./compat baseline"]


@pytest.mark.parametrize("args", [["-n", "3"], ["-p", "no:xdist", "-m", "env"], ["--numprocesses=auto"],
                                  ["--baseline", "reports/baseline.jsonl"], ["--collect-only", "-q"]])
def test_the_users_own_parallelism_or_a_one_run_option_is_one_run_as_written(fake_venv, tmp_path, args):
    res, calls = compat(fake_venv, tmp_path, "suites", *args)
    assert res.returncode == 0, res.stderr
    # a file option's relative path means the directory ./compat was run from (here tmp_path)
    given = [str(tmp_path / a) if prev == "--baseline" else a for prev, a in zip(["", *args], args)]
    assert calls[0] == ["pytest", "suites/", *given]
    assert [c[0] for c in calls].count("pytest") == 1


def test_compat_env_prints_the_block(fake_venv, tmp_path):
    res, _ = compat(fake_venv, tmp_path, "env", "--short")
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("```text\n") and "\nVersions:\n" in res.stdout and res.stdout.endswith("```\n")


# --------------------------------------------------------------------------- the plan (tools/suiteplan.py)

SUITES = {"env": ["suites/env/test_env.py"], "ops": ["suites/ops/test_ops.py"],
          "parity": ["suites/parity/test_op_parity.py", "suites/parity/test_compiled.py"],
          "optim": ["suites/optim/test_claims.py"], "perf": ["suites/perf/test_perf.py"]}


def rec(nodeid, target, seconds, suite=None, waited=None):
    return {"nodeid": nodeid, "target": target, "duration_s": seconds, "suite": suite or nodeid.split("/")[1],
            "metrics": {"waited_s": waited} if waited is not None else {}}


def records_of(*recs):
    return {r["nodeid"]: r for r in recs}


def plan_of(*argv, records=None, cpus=2, here=("cpu",), figures=None):
    return suiteplan.plan(list(argv), records=records or {}, suites=SUITES, cpus=cpus, targets_here=set(here),
                          figures=suiteplan.FIGURES if figures is None else figures)


@pytest.mark.parametrize("argv", [("-m", "mps and"), ("-k", "softmax and ("), ("-m", "env", "-k", "or")])
def test_an_expression_pytest_cannot_read_is_one_run_as_given_without_an_estimate(argv):
    """pytest says what is wrong at once (the plugin reads -m and -k before collecting); an
    estimate of the runs before that error would be a line about a run that never starts."""
    plan = plan_of(*argv)
    assert [(p.name, p.workers) for p in plan.phases] == [("all", 0)]
    assert plan.estimate_s is None and plan.lines() == ["phase all 0 -"]
    assert [p.name for p in plan_of("-m", "env and cpu").phases] == ["untimed"]


def test_a_marker_no_one_registers_gets_no_estimate_before_pytests_error():
    """`./compat suites -m mpss` printed "estimate: about 9 min" and then pytest's "Unknown
    marker(s)": a line about runs that never start."""
    plan = plan_of("-m", "mpss or env")
    assert plan.estimate_s is None and not any(line.startswith("say") for line in plan.lines())
    assert suiteplan.unregistered_markers("(mpss or env) and not cpux") == {"mpss", "cpux"}
    for expr in ("env and cpu", "compile and not slow", "mps and xfail", "timeout or cases"):
        assert plan_of("-m", expr).estimate_s is not None, expr


def test_the_planner_knows_every_marker_pytest_registers_here():
    """Against pytest's own list in this environment (its plugins included): a marker the lock
    brings in later must not lose its runs the estimate."""
    res = subprocess.run([sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    names = {line.split(":", 1)[0].removeprefix("@pytest.mark.").split("(", 1)[0]
             for line in res.stdout.splitlines() if line.startswith("@pytest.mark.")}
    assert res.returncode == 0 and {"cpu", "slow", "xfail", "timeout"} <= names, res.stdout[-2000:]
    assert suiteplan.unregistered_markers(" or ".join(sorted(names))) == set()


@pytest.mark.parametrize("arg,named", [
    ("suites/parity/test_op_parity.py", "suites/parity/test_op_parity.py"),
    ("suites/parity/", "suites/parity"), ("./suites/env", "suites/env"), ("suites", "suites"),
    ("suites/parity/test_op_parity.py::test_op_parity[cpu-abs-float32-forward]",
     "suites/parity/test_op_parity.py::test_op_parity[cpu-abs-float32-forward]"),
    (str(ROOT / "suites/optim"), "suites/optim"),
    ("suites/parity/test_opparity.py", None),     # a mistyped path: pytest says so
    ("1.0", None), ("-x", None), ("", None),
])
def test_a_path_named_is_read_relative_to_the_root(arg, named):
    assert suiteplan.named_path(arg) == named


def test_the_paths_named_replace_suites_and_narrow_the_runs_and_the_estimate():
    """`./compat suites suites/parity/test_op_parity.py -k softmax` ran `pytest suites/
    suites/parity/test_op_parity.py -k softmax`: every suite's softmax checks, estimated as such."""
    assert suiteplan.scan(["--tb", "short", "suites/optim", "-m", "cpu"]).paths == ("suites/optim",)
    # an option's value that names a file is not a path to collect
    assert suiteplan.scan(["--log-file", "pyproject.toml", "-c", "pyproject.toml", "suites/env"]).paths == (
        "suites/env",)
    assert [(p.name, p.suites) for p in plan_of("suites/optim").phases] == [("optim", ["optim"])]
    assert [(p.name, p.suites) for p in plan_of("suites/env", "suites/perf/test_perf.py").phases] == [
        ("untimed", ["env"]), ("perf", ["perf"])]
    assert [(p.name, p.suites) for p in plan_of("suites/parity/test_op_parity.py").phases] == [("untimed", ["parity"])]
    # the compiled family is not opted in when its file is not named
    assert [(p.name, p.suites) for p in plan_of("suites/parity/test_op_parity.py", "-m", "compile").phases] == [
        ("all", [])]
    recs = records_of(rec("suites/parity/test_op_parity.py::test_op_parity[cpu-a]", "cpu", 30.0),
                      rec("suites/parity/test_op_parity.py::test_op_parity[cpu-b]", "cpu", 50.0),
                      rec("suites/parity/test_compiled.py::test_c[cpu-a]", "cpu", 400.0),
                      rec("suites/env/test_env.py::test_e[cpu-a]", "cpu", 70.0))
    whole = plan_of("suites/parity/test_op_parity.py", "-m", "cpu", records=recs, figures={})
    assert whole.phases[0].seconds == pytest.approx(80.0)
    one = plan_of("suites/parity/test_op_parity.py::test_op_parity[cpu-b]", "-m", "cpu", records=recs, figures={})
    assert one.phases[0].seconds == pytest.approx(50.0)
    # without records, one check named is its share of the file's figure
    figures = {"suites/env/test_env.py": {"cpu_s": 100, "checks": {"cpu": 4, "cuda": 0, "mps": 0}}}
    assert plan_of("suites/env/test_env.py::test_e[cpu-a]", "-m", "cpu", figures=figures).phases[0].seconds == 25.0
    # a path outside suites/: pytest runs what was named, as given
    outside = plan_of("tests/test_docs.py")
    assert [(p.name, p.suites) for p in outside.phases] == [("all", [])] and outside.estimate_s is None


def test_the_runs_collect_the_paths_named_instead_of_suites():
    _, calls, _ = execute(THREE_RUNS, ["suites/env", "-m", "cpu"])
    assert calls[0] == ["PY", "-m", "pytest", "-p", "tools.suiteplan", "--only-suites", "env,ops,parity", "-n", "2",
                        "suites/env", "-m", "cpu"]
    _, calls, _ = execute(THREE_RUNS, ["suites/nowhere.py"])     # pytest says it is not there
    assert calls[0][:4] == ["PY", "-m", "pytest", "suites/"]


@pytest.mark.parametrize("cpus", [2, 16])
def test_the_timed_suites_run_serially_whatever_their_estimate(cpus):
    """perf and optim time at torch's threads on every core, one run each, whatever the
    cores: on workers each sandbox child gets a share of them, and a ./compat suites run's
    times would not compare with a baseline's. The untimed run keeps its workers."""
    slow = {"suites/perf/test_perf.py": {"cpu_s": 3600, "checks": {"cpu": 125}}}
    workers = {ph.name: ph.workers for ph in plan_of("-m", "perf or env or ops", cpus=cpus,
                                                     figures={**suiteplan.FIGURES, **slow}).phases}
    assert workers == {"untimed": min(cpus, suiteplan.MAX_WORKERS), "perf": 0}
    assert [ph.workers for ph in plan_of(cpus=cpus).phases if ph.name == "optim"] == [0]


@pytest.mark.parametrize("argv,field,value", [
    (["-m", "env"], "markexpr", "env"), (["-menv and cpu"], "markexpr", "env and cpu"),
    (["-k", "softmax"], "keyword", "softmax"), (["-n", "4"], "workers", "4"), (["-n4"], "workers", "4"),
    (["--numprocesses=auto"], "workers", "auto"), (["--numprocesses", "2"], "workers", "2"),
    (["-p", "no:xdist"], "workers", "0"), (["-pno:xdist"], "workers", "0"), (["-p", "tests.standins"], "workers", None),
    (["--device", "cpu"], "devices", ("cpu",)), (["--device=cpu,cuda"], "devices", ("cpu", "cuda")),
    (["--device", "all"], "devices", None),
    (["-x"], "exitfirst", True), (["-xq"], "exitfirst", True), (["-vx"], "exitfirst", True),
    (["--maxfail=2"], "exitfirst", True), (["--maxfail", "2"], "exitfirst", True), (["-rx"], "exitfirst", False),
    (["--baseline", "b.jsonl"], "one_run", "--baseline"), (["--save-baseline=b.jsonl"], "one_run", "--save-baseline"),
    (["--lf"], "one_run", "--lf"), (["--help"], "no_run", True), (["--co"], "no_run", True),
    # an option's value is not read as an option
    (["--tb", "short", "-m", "perf"], "markexpr", "perf"), (["-k", "-n"], "workers", None),
    (["--deselect", "-x"], "exitfirst", False),
])
def test_the_arguments_that_decide_the_plan(argv, field, value):
    assert getattr(suiteplan.scan(argv), field) == value


@pytest.mark.parametrize("expr,markers,expect", [
    ("env", {"env"}, True), ("env", {"ops"}, False), ("not env", {"ops"}, True),
    ("env and cpu", {"env", "cpu"}, True), ("env and cpu", {"env", "mps"}, False),
    ("(parity or ops) and not mps", {"ops", "cpu"}, True), ("(parity or ops) and not mps", {"ops", "mps"}, False),
    ("not (optim or perf)", {"perf"}, False), ("not not env", {"env"}, True),
])
def test_marker_expressions_are_read_as_pytest_reads_them(expr, markers, expect):
    fn = selection.compile_expression(expr)
    assert fn(lambda name: name in markers) is expect


@pytest.mark.parametrize("expr", ["env and", "(env", "env)", "and", "mark(arg=1)", "env & cpu"])
def test_an_expression_it_cannot_read_may_select_anything(expr):
    assert selection.compile_expression(expr) is None
    assert selection.satisfiable(expr, {"env": False})


def test_names_it_does_not_know_are_free():
    known = {"env": True, "cpu": True}
    assert selection.satisfiable("env and slow", known) and selection.satisfiable("env and not slow", known)
    assert not selection.satisfiable("env and slow and not slow", known)


def test_compile_checks_need_a_marker_expression_that_names_compile():
    names = list(SUITES)
    assert selection.marker_selects(None, "parity", "cpu", ("compile",), names)
    assert not selection.marker_selects("parity and cpu", "parity", "cpu", ("compile",), names)
    assert selection.marker_selects("compile and cpu", "parity", "cpu", ("compile",), names)
    assert not selection.marker_selects("compile and cpu", "parity", "cpu", (), names)


def test_keyword_expressions_match_parts_of_the_node_id():
    nodeid = "suites/ops/test_ops.py::test_op[cpu-softmax-float16-forward]"
    assert selection.keyword_selects("softmax and float16", nodeid, ("ops", "cpu"))
    assert selection.keyword_selects("SOFTMAX", nodeid, ())
    assert not selection.keyword_selects("softmax and not float16", nodeid, ())
    assert selection.keyword_selects("ops and not perf", nodeid, ())


def test_everything_is_three_runs_and_the_timed_suites_run_alone():
    p = plan_of()
    assert [(ph.name, ph.suites, ph.workers) for ph in p.phases] == [
        ("untimed", ["env", "ops", "parity"], 2), ("optim", ["optim"], 0), ("perf", ["perf"], 0)]
    assert p.lines()[1:] == ["phase untimed 2 env,ops,parity", "phase optim 0 optim", "phase perf 0 perf"]
    assert p.lines()[0].startswith("say compat: estimate: about ") and "figures measured on a 2-core" in p.lines()[0]


def test_a_marker_expression_leaves_out_the_runs_it_cannot_select():
    assert [(ph.name, ph.suites) for ph in plan_of("-m", "env").phases] == [("untimed", ["env"])]
    assert [(ph.name, ph.suites) for ph in plan_of("-m", "perf or optim").phases] == [("optim", ["optim"]),
                                                                                     ("perf", ["perf"])]
    assert [(ph.name, ph.suites) for ph in plan_of("-m", "compile and cpu").phases] == [("untimed", ["parity"])]
    assert [ph.name for ph in plan_of("-m", "not (optim or perf)").phases] == ["untimed"]


def test_a_short_run_starts_no_workers_and_one_core_never_does():
    assert plan_of("-m", "env").phases[0].workers == 0         # 4 s of checks: workers would cost more
    assert [ph.workers for ph in plan_of(cpus=1).phases] == [0, 0, 0]
    assert [ph.workers for ph in plan_of(cpus=64).phases] == [suiteplan.MAX_WORKERS, 0, 0]


def test_the_estimate_comes_from_this_environments_records_where_it_has_them():
    recs = records_of(rec("suites/env/test_env.py::test_a[cpu-x]", "cpu", 30.0),
                      rec("suites/env/test_env.py::test_a[cuda-x]", "cuda", 0.01),
                      rec("suites/env/test_env.py::test_a[mps-x]", "mps", 0.01))
    p = plan_of("-m", "env", records=recs, figures={})
    assert p.sources == {suiteplan.EARLIER}
    assert p.phases[0].seconds == pytest.approx(30.02)
    assert p.estimate_s == pytest.approx(suiteplan.STARTUP_S + 30.02 + suiteplan.AFTER_S)
    assert "from this environment's earlier runs" in p.describe() and "about 50 s" in p.describe()
    assert plan_of("-m", "env and cpu", records=recs).sources == {suiteplan.EARLIER}   # the figures were not needed


def test_without_records_the_figures_count_an_absent_target_as_skips():
    figures = {"suites/env/test_env.py": {"cpu_s": 100, "checks": {"cpu": 5, "cuda": 1000, "mps": 2000}}}
    p = plan_of("-m", "env", figures=figures)
    assert p.phases[0].seconds == pytest.approx(100 + 3000 * suiteplan.SKIP_S)
    assert p.phases[0].workers == 2
    mac = plan_of("-m", "env", figures=figures, here=("cpu", "mps"))
    assert mac.phases[0].seconds == pytest.approx(200 + 1000 * suiteplan.SKIP_S)   # the GPU taken as the cpu
    assert plan_of("-m", "env and cpu", figures=figures).phases[0].seconds == pytest.approx(100)
    assert plan_of("-m", "env", "--device", "cpu", figures=figures).phases[0].seconds == pytest.approx(100)


def test_an_earlier_run_narrowed_by_k_is_scaled_to_the_whole_file():
    figures = {"suites/env/test_env.py": {"cpu_s": 999, "checks": {"cpu": 10, "cuda": 0, "mps": 0}}}
    recs = records_of(rec("suites/env/test_env.py::test_a[cpu-x]", "cpu", 2.0),
                      rec("suites/env/test_env.py::test_a[cpu-y]", "cpu", 4.0))
    assert plan_of("-m", "env and cpu", records=recs, figures=figures).phases[0].seconds == pytest.approx(30.0)
    narrowed = plan_of("-m", "env and cpu", "-k", "cpu-y", records=recs, figures=figures)
    assert narrowed.phases[0].seconds == pytest.approx(4.0)


def test_the_perf_estimate_leaves_out_the_wait_for_the_lock():
    recs = records_of(*[rec(f"suites/perf/test_perf.py::t[cpu-{i}]", "cpu", 10.0, waited=4.0) for i in range(20)])
    p = plan_of("-m", "perf and cpu", records=recs, figures={})
    assert p.phases[0].seconds == pytest.approx(120.0) and p.phases[0].workers == 0


def test_the_users_workers_or_a_one_run_option_give_one_run_with_a_note():
    p = plan_of("-n", "4")
    assert [(ph.name, ph.workers) for ph in p.phases] == [("all", 4)]
    assert "optim suite's time claims then share the machine" in p.note
    assert p.lines()[-1] == "phase all 4 -"
    p = plan_of("--save-baseline", "b.jsonl")
    assert [(ph.name, ph.workers) for ph in p.phases] == [("all", 0)] and "--save-baseline" in p.note
    assert plan_of("--help").lines() == ["phase all 0 -"]
    assert plan_of("-m", "perf", "-x").lines()[0] == "stop-on-failure"   # read before any run


@pytest.mark.parametrize("seconds,says", [(3, "5 s"), (22, "20 s"), (61, "1 min"), (1900, "32 min"),
                                          (5400, "1 h 30 min"), (7300, "2 h 02 min")])
def test_durations_in_words(seconds, says):
    assert suiteplan.duration(seconds) == says


def test_earlier_records_are_this_environments_newest_per_check(tmp_path):
    env = {"host": "mac", "python": "3.11.7", "torch": "2.15.0"}

    def header(host="mac", torch="2.15.0"):
        return json.dumps({"kind": "header", "facts": {"host": host, "python": {"version": "3.11.7"},
                                                        "packages": {"torch": torch}}})
    def check(nodeid, s):
        return json.dumps({"kind": "check", "nodeid": nodeid, "duration_s": s, "target": "cpu"})
    (tmp_path / "mine.jsonl").write_text("\n".join([header(), check("a", 1.0), check("b", 2.0), "{truncated",
                                                    header(), check("a", 3.0), '{"kind": "end"}']) + "\n")
    (tmp_path / "other-torch.jsonl").write_text("\n".join([header(torch="2.8.0"), check("c", 9.0)]) + "\n")
    (tmp_path / "other-host.jsonl").write_text("\n".join([header(host="vm"), check("d", 9.0)]) + "\n")
    (tmp_path / "garbage.jsonl").write_text("not json\n")
    (tmp_path / "empty.jsonl").write_text("")
    newest, runs = suiteplan.earlier_records(tmp_path, env)
    assert {k: v["duration_s"] for k, v in newest.items()} == {"a": 3.0, "b": 2.0} and runs == 2


def _figures_run(path, runs):
    """A run file of whole ./compat suites runs: (started, pytest args, [(nodeid, target, seconds, waited)])."""
    lines = []
    for i, (started, args, checks) in enumerate(runs):
        run = f"r{i}"
        lines.append(json.dumps({"kind": "header", "schema": RECORD_SCHEMA, "run": run, "env_id": "vm",
                                 "started": started, "pytest_args": args,
                                 "facts": {"host": "vm", "cpu": {"model": "Xeon", "usable": 2},
                                           "packages": {"torch": "2.15.0"}}}))
        for nodeid, target, seconds, waited in checks:
            lines.append(json.dumps({"kind": "check", "run": run, "check": nodeid, "suite": "x", "subject": "x",
                                     "variant": "", "target": target, "status": "pass", "category": "pass",
                                     "metrics": {"waited_s": waited} if waited else {}, "reason": "",
                                     "duration_s": seconds, "nodeid": nodeid}))
        lines.append(json.dumps({"kind": "end", "run": run, "finished": started, "exitstatus": 0, "counts": {}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_figures_are_measured_from_whole_runs_the_larger_over_the_files(tmp_path):
    """The first-run estimate's figures come from run files, not from numbers typed in: each
    file's cpu durations less their wait for the timing lock (the newest record of a check in
    a file), the larger over the files, the checks per target of the newest file; a run
    narrowed by -m is no whole run and is left out."""
    untimed = ["suites/", "-p", "tools.suiteplan", "--only-suites", "env,ops,parity", "-n", "2"]
    perf = ["suites/", "-p", "tools.suiteplan", "--only-suites", "perf"]
    a, b = "suites/ops/test_ops.py::test_op[cpu-{}]", "suites/perf/test_perf.py::test_p[{}-x]"
    older = _figures_run(tmp_path / "older.jsonl", [
        ("2026-12-01T10:00:00", untimed, [(a.format(1), "cpu", 4.0, 0), (a.format(1), "cpu", 6.0, 0),   # rerun: the newest
                                          (a.format(2), "cpu", 3.0, 0), (a.format(3), "mps", 0.0, 0)]),
        ("2026-12-01T10:10:00", perf, [(b.format("cpu"), "cpu", 50.0, 20.0)]),
        ("2026-12-01T10:20:00", ["suites/", "-p", "tools.suiteplan", "--only-suites", "perf", "-m", "perf and cpu"],
         [(b.format("cpu"), "cpu", 900.0, 0)])])
    newer = _figures_run(tmp_path / "newer.jsonl", [
        ("2026-12-02T10:00:00", untimed, [(a.format(1), "cpu", 5.0, 0), (a.format(3), "cuda", 0.0, 0)]),
        ("2026-12-02T10:10:00", perf, [(b.format("cpu"), "cpu", 40.0, 0), (b.format("mps"), "mps", 0.0, 0)])])
    files, sources = suiteplan.measure_figures([older, newer])
    assert files == {"suites/ops/test_ops.py": {"cpu_s": 9, "checks": {"cpu": 1, "cuda": 1, "mps": 0}},
                     "suites/perf/test_perf.py": {"cpu_s": 40, "checks": {"cpu": 1, "cuda": 0, "mps": 1}}}
    assert [(s["file"], s["cpu_s"], s["cpu"]) for s in sources] == [("older.jsonl", 39, "Xeon"), ("newer.jsonl", 45, "Xeon")]
    assert suiteplan.main(["figures", str(tmp_path / "missing.jsonl")]) == 2
    narrowed = _figures_run(tmp_path / "narrowed.jsonl", [("2026-12-02", ["suites/", "-k", "softmax"], [(a.format(1), "cpu", 1.0, 0)])])
    assert suiteplan.main(["figures", str(narrowed)]) == 2


def test_the_shipped_figures_cover_every_suite_file_with_its_checks():
    """A suite file without a figure would be estimated at nothing on a first run; the counts
    are what the estimate scales a narrowed earlier run by, so they are this tree's own."""
    import collections
    assert set(suiteplan.FIGURES) == {f for files in suiteplan.suites_here().values() for f in files}
    assert suiteplan.FIGURES == suiteplan.load_figures()
    doc = json.loads(suiteplan.FIGURES_FILE.read_text())
    assert doc["runs"] and all(r["cores"] == 2 and r["cpu_s"] > 0 for r in doc["runs"])
    res = subprocess.run([sys.executable, "-m", "pytest", "suites/", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-m", "compile or not compile"],   # every check: the compile family is in only when named
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    counted = collections.Counter()
    for line in res.stdout.splitlines():
        if "::" in line and "[" in line:
            file, rest = line.split("::", 1)
            counted[(file, rest.split("[", 1)[1].split("-", 1)[0].rstrip("]"))] += 1
    for file, fig in suiteplan.FIGURES.items():
        for target, n in fig["checks"].items():
            assert counted[(file, target)] == n, (file, target, counted[(file, target)], n)
    assert suiteplan.load_figures(suiteplan.ROOT / "no-such.json") == {}


# --------------------------------------------------------------------------- the plugin: one run's suites

SUITE_TREE = {
    "suites/env/test_e.py": "def test_e(): pass\n",
    "suites/ops/test_o.py": "def test_o(): pass\n",
    "suites/optim/test_c.py": "def test_c(): pass\n",
    "suites/perf/test_p.py": "import nothing_here_imports  # never imported when perf is not this run's\n"
                             "def test_p(): pass\n",
}


@pytest.fixture
def suite_tree(pytester):
    for rel, text in SUITE_TREE.items():
        path = pytester.path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return pytester


def test_only_the_runs_suites_are_collected(suite_tree):
    res = suite_tree.runpytest("suites", "-p", "tools.suiteplan", "--only-suites", "env,ops", "-v")
    res.assert_outcomes(passed=2)
    assert "test_e PASSED" in res.stdout.str() and "test_o PASSED" in res.stdout.str()


def test_a_path_named_outside_the_runs_suites_is_deselected(suite_tree):
    res = suite_tree.runpytest("suites/optim/test_c.py", "suites/env", "-p", "tools.suiteplan", "--only-suites", "env")
    res.assert_outcomes(passed=1, deselected=1)


def test_without_the_option_the_plugin_changes_nothing(suite_tree):
    res = suite_tree.runpytest("suites/env", "suites/ops", "suites/optim", "-p", "tools.suiteplan")
    res.assert_outcomes(passed=3)
