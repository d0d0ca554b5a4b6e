"""What a run says on the terminal, run for real in child pytest processes on tiny suites:
the first line (the targets that run, those that do not and why, the run file), the
collection and the warm-up as progress (the warm-up booked to no check), the selection in
the run file's header, and the end: the verdict per column, the failures grouped by cause
(every failure in a group), and the command that renders this very run."""
import shlex
from pathlib import Path

import pytest

from harness.core.isolate import ROOT as PROJECT_ROOT
from harness.plugin import hooks, options
from tests.test_plugin import _env, records_of, run_pytest

QUICK = '''
import pytest

def test_passes(target, record):
    record.category = "native"

def test_also_passes(target):
    pass
'''


@pytest.fixture
def project(tmp_path):
    (tmp_path / "suites" / "env").mkdir(parents=True)
    (tmp_path / "suites" / "env" / "test_quick.py").write_text(QUICK)
    return tmp_path


def mps_compat_lines(stdout: str) -> list[str]:
    return [ln for ln in stdout.splitlines() if ln.startswith("mps-compat: ")]


# --------------------------------------------------------------------------- the first line

def check_targets_line(line: str, table: dict, device_opt: str | None) -> None:
    """``line`` names as running exactly the targets ``table`` (the run file's header) has
    selected and available, and as skipped every other one with the reason the table gives."""
    assert line.startswith("mps-compat: running "), line
    running_part, _, skipping_part = line.removeprefix("mps-compat: running ").partition("; skipping ")
    running = set(running_part.split(", "))
    assert running == {n for n, i in table.items() if i["selected"] and i["available"]}, line
    for name, info in table.items():
        if name in running:
            assert f"{name} (" not in skipping_part, line
        else:
            why = info["reason"] if info["selected"] else f"not selected: --device {device_opt}"
            assert f"{name} ({why})" in skipping_part, (name, line)


# CUDA hidden (CUDA_VISIBLE_DEVICES=""), so cuda is skipped on a machine with a GPU as well.
@pytest.mark.parametrize("device", [None, "cpu"], ids=["all", "cpu"])
def test_the_first_line_says_what_runs_and_what_is_skipped_and_why_and_where_it_goes(project, device):
    run_file = project / "run.jsonl"
    args = ["--device", device] if device else []
    res = run_pytest(project, *args, "--run-file", str(run_file), env=_env(CUDA_VISIBLE_DEVICES=""))
    assert res.returncode == 0, res.stdout + res.stderr
    lines = mps_compat_lines(res.stdout)
    rf, _ = records_of(run_file)
    table = rf.runs[0].header["targets"]
    from harness.report.matrix import machine_name
    facts = rf.runs[0].header["facts"]
    assert lines[0].startswith(f"mps-compat: this machine: {facts['host']}: {machine_name(facts)}; torch "), lines[0]
    assert facts["python"]["version"] in lines[0]
    check_targets_line(lines[1], table, device)
    assert "cuda (" in lines[1] and "mps (" in lines[1]          # neither is here: both said, with why
    assert lines[2].startswith("mps-compat: records are appended to ")
    assert Path(project, lines[2].removeprefix("mps-compat: records are appended to ")).resolve() == run_file
    out = res.stdout
    assert out.index(lines[0]) < out.index("collected ") < out.index("test_quick.py")   # before collection
    assert "cut off" not in out, out   # a run that ended is not said to be cut off in its own verdict


def test_a_session_without_checks_announces_no_targets(project):
    (project / "other").mkdir()
    (project / "other" / "test_plain.py").write_text("def test_plain():\n    pass\n")
    res = run_pytest(project, "other", "--run-file", str(project / "run.jsonl"))
    assert res.returncode == 0 and mps_compat_lines(res.stdout) == [], res.stdout


def test_collection_is_said_with_its_seconds_and_what_it_selected(project):
    res = run_pytest(project, "--device", "cpu", "-k", "also", "--run-file", str(project / "run.jsonl"))
    lines = mps_compat_lines(res.stdout)
    assert any(ln.startswith("mps-compat: collecting the checks") for ln in lines), lines
    took = [ln for ln in lines if ln.startswith("mps-compat: collection took ")]
    assert len(took) == 1 and " s: 1 checks to run (cpu 1), 1 deselected" in took[0], lines


# --------------------------------------------------------------------------- the warm-up

SLOW_START = 6.0   # seconds the sandbox child's start costs here (a preloaded module sleeps)
BOXED = '''
def test_first(target, sandbox, record):
    assert sandbox.call("harness.core.isolate:warm", "json").kind == "ok"

def test_second(target, sandbox, record):
    assert sandbox.call("harness.core.isolate:warm", "json").kind == "ok"
'''


@pytest.mark.slow   # the sandbox's real warm-up (torch, OpInfo) in a child pytest: 15-20 s each
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_warm_up_is_paid_before_the_first_check_and_booked_to_none(project, workers):
    """The child's start (here a preloaded module that sleeps SLOW_START) is the warm-up's,
    said with its seconds; no check's duration holds it, the first's included."""
    (project / "suites" / "env" / "test_quick.py").write_text(BOXED)
    (project / "slow_start.py").write_text(f"import time\ntime.sleep({SLOW_START})\n")
    run_file = project / "run.jsonl"
    env = _env(MPS_COMPAT_SANDBOX_PRELOAD="slow_start", PYTHONPATH=f"{PROJECT_ROOT}:{project}")
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file), *workers, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    _, recs = records_of(run_file)
    assert sorted(r["subject"] for r in recs) == ["first", "second"]
    said = [ln for ln in mps_compat_lines(res.stdout) if "warm-up" in ln]
    assert said, res.stdout
    warmed = []
    for line in said:   # serial: one line; xdist: one per worker that ran a check, named
        seconds = float(line.split(" torch ")[1].split(" s")[0])
        assert seconds >= SLOW_START, line
        assert ("[gw" in line) == bool(workers), line
        warmed.append(seconds)
    # No check's duration holds the start it slept through: each is shorter than the warm-up
    # that paid it (a measured figure on each side, so a loaded machine slows both alike).
    assert all(r["duration_s"] < min(warmed) for r in recs), ([(r["subject"], r["duration_s"]) for r in recs], warmed)


@pytest.mark.slow
def test_a_warm_up_that_fails_is_said_and_the_checks_meet_the_failure_themselves(project):
    (project / "suites" / "env" / "test_quick.py").write_text(BOXED)
    (project / "broken_start.py").write_text("raise SystemExit(3)\n")
    run_file = project / "run.jsonl"
    env = _env(MPS_COMPAT_SANDBOX_PRELOAD="broken_start", PYTHONPATH=f"{PROJECT_ROOT}:{project}")
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file), env=env)
    said = [ln for ln in mps_compat_lines(res.stdout) if "warm-up" in ln]
    assert len(said) == 1 and "torch" in said[0] and "(failed: crash: the child process exited with status 3" \
        in said[0], res.stdout
    _, recs = records_of(run_file)
    assert sorted((r["subject"], r["status"]) for r in recs) == [("first", "fail"), ("second", "fail")]


def test_the_warm_up_plan_follows_the_checks_that_will_use_the_sandbox():
    class Case:
        op_key = "add"

    class Item:
        def __init__(self, fixtures, **params):
            self.fixturenames = fixtures
            self.callspec = type("CallSpec", (), {"params": params})()

    assert hooks.warm_up_plan([Item(["target"], target="cpu")]) == []
    assert hooks.warm_up_plan([Item(["sandbox"], target="cpu")]) == [("torch", "torch")]
    assert hooks.warm_up_plan([Item(["sandbox"], target="cpu", case=Case())]) == [
        ("torch", "torch"), ("OpInfo op_db", "harness.ops.declarations:op_table")]
    assert hooks.warm_up_plan([Item(["sandbox"], target="mps", case=Case())]) == []   # not on Linux: skipped


# --------------------------------------------------------------------------- the header's selection

@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_the_header_says_what_the_run_selected(project, workers):
    run_file = project / "run.jsonl"
    res = run_pytest(project, "suites", "-m", "cpu", "-k", "also", "--run-file", str(run_file), *workers)
    assert res.returncode == 0, res.stdout + res.stderr
    rf, recs = records_of(run_file)
    assert len(recs) == 1
    # 2 tests x 3 targets collected; -m cpu leaves 2, -k also leaves 1
    assert rf.runs[0].header["selection"] == {"markexpr": "cpu", "keyword": "also", "args": ["suites"],
                                              "collected": 6, "selected": 1, "deselected": 5}


# --------------------------------------------------------------------------- the end

FAILING = '''
import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

def test_passes(target):
    pass

@pytest.mark.parametrize("i", range(4))
def test_fails_for_no_known_reason(target, i):
    pytest.fail(f"wrong answer {i}")

@pytest.mark.parametrize("i", range(2))
def test_fails_with_a_cause(target, record, i):
    record.metric(cause="made-up-cause")
    pytest.fail("wrong for a reason")

def test_errs_in_teardown(target, broken_teardown):
    pass
'''


def end_of(stdout: str) -> list[str]:
    return stdout[stdout.index("mps-compat: this run"):].splitlines()


def group_lines(end: list[str]) -> tuple[int, list[str]]:
    start = next(i for i, ln in enumerate(end) if "failures by cause (" in ln)
    total = int(end[start].split("failures by cause (")[1].split(")")[0])
    groups = []
    for line in end[start + 1:]:
        if line.startswith(("run file:", "report:")):
            break
        groups.append(line)
    return total, groups


@pytest.mark.parametrize("drop", [False, True], ids=["as-grouped", "groups-drop-the-undetermined"])
def test_every_failure_is_in_a_group_by_cause(project, drop):
    """Four failures without a cause, two with one and a teardown error: each group one line
    with its count and its checks, the counts adding up to every failure of the table; where
    the grouping leaves failures out (a stand-in that drops the undetermined ones), the
    summary still puts them under "cause not determined"."""
    (project / "suites" / "env" / "test_quick.py").write_text(FAILING)
    if drop:
        (project / "conftest.py").write_text(
            "from harness.report import verdict\n"
            "_real = verdict.failure_groups\n"
            "verdict.failure_groups = lambda recs: [g for g in _real(recs) if g.cause != verdict.UNDETERMINED]\n")
    run_file = project / "run.jsonl"
    res = run_pytest(project, "--device", "cpu", "--run-file", str(run_file))
    assert res.returncode == 1, res.stdout + res.stderr
    _, recs = records_of(run_file)
    broken = [r for r in recs if r["status"] in ("fail", "error")]
    assert len(broken) == 7
    total, groups = group_lines(end_of(res.stdout))
    counts = {ln.split(" x ", 1)[1].split(":")[0].split(";")[0]: int(ln.split(" x ", 1)[0]) for ln in groups}
    assert total == sum(counts.values()) == len(broken), groups
    assert counts["made-up-cause"] == 2 and counts["cause not determined"] == 4, groups
    undetermined = next(ln for ln in groups if " x cause not determined" in ln)
    assert "fails_for_no_known_reason/" in undetermined and "[cpu]" in undetermined and "and 1 more" in undetermined


def test_the_end_has_a_verdict_per_column(project):
    res = run_pytest(project, "--device", "cpu", "--run-file", str(project / "run.jsonl"))
    end = end_of(res.stdout)
    start = next(i for i, ln in enumerate(end) if "verdict of this run" in ln)
    verdicts = [ln for ln in end[start + 1:] if ln[:3] in ("OK ", "!! ", "XX ", "-- ")]
    assert len(verdicts) == 1 and verdicts[0].split(":")[0].endswith("· cpu"), end


def reported(stdout: str) -> str:
    line = next(ln for ln in stdout.splitlines() if ln.startswith("report: "))
    return line.removeprefix("report: ").split("   (")[0]


@pytest.mark.parametrize("where", ["elsewhere", "default"])
def test_the_end_names_the_command_that_renders_this_run(project, where):
    """tools.report with no path reads the project's reports/runs/ alone: a run written
    anywhere else (--run-file, or the default place of another root) must be named."""
    args = ["--run-file", str(project / "my runs" / "run.jsonl")] if where == "elsewhere" else []
    if where == "elsewhere":
        (project / "my runs").mkdir()
    res = run_pytest(project, "--device", "cpu", *args)
    assert res.returncode == 0, res.stdout + res.stderr
    command = shlex.split(reported(res.stdout))
    assert command[:3] == ["python", "-m", "tools.report"] and command[4] == "--out" and len(command) == 6, command
    written = list(project.rglob("*.jsonl"))
    assert len(written) == 1 and Path(project, command[3]).resolve() == written[0].resolve()
    assert Path(project, command[5]).resolve() == written[0].parent.resolve()   # the page beside it


def test_a_run_file_in_the_projects_reports_runs_is_rendered_by_the_bare_command(tmp_path):
    assert options.report_command(PROJECT_ROOT / "reports" / "runs" / "host-py3-torch2.jsonl") == \
        "python -m tools.report"
    assert options.report_command(tmp_path / "run.jsonl") == \
        f"python -m tools.report {tmp_path / 'run.jsonl'} --out {tmp_path}"
