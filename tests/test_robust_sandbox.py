"""The sandbox's time limit and the CLIs' edges (issue 26, "nothing lost, nothing faked").

A check's limit (``--check-timeout``) is the check's: the sandbox child's start-up (torch,
OpInfo's op_db: tens of seconds on a loaded machine) is paid under a start-up limit of its
own, and a child started again after a crash or a hang replays the warm-up before the next
call's clock starts. A child that cannot start is said as such, never as a check that hung.
A limit too large for the platform's wait is refused at the option, and clamped in the
sandbox, so no OverflowError escapes. And three command-line edges: an unknown ./compat
subcommand, a uv.lock that is not UTF-8, an absurd ``--memory-gib``: one line each, exit 2.

The slow starts are real: a module the child preloads sleeps (harness.core.isolate.PRELOAD_VAR).
"""
import os
import shutil
import socket
import subprocess
import sys
import tomllib
from multiprocessing.connection import Connection

import pytest

from harness.core import isolate
from harness.core.isolate import Sandbox
from harness.plugin import options
from tests.conftest import ROOT
from tests.test_plugin import _env, run_pytest
from tools import workload

SLOW_START = 2.5   # seconds a preloaded module makes the child's start take: its sleep alone is over LIMIT
LIMIT = 2.0        # a check limit shorter than that start


def _modules(tmp_path, monkeypatch, **sources):
    """Write each ``name=source`` as a module the sandbox children can import (PYTHONPATH)."""
    for name, source in sources.items():
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))


@pytest.fixture
def slow_box(tmp_path, monkeypatch):
    """A sandbox whose child takes SLOW_START seconds to start, with a check limit of LIMIT."""
    _modules(tmp_path, monkeypatch, slow_start=f"import time\ntime.sleep({SLOW_START})\n")
    box = Sandbox(timeout=LIMIT, preload=("slow_start",))
    yield box
    box.close()


# --------------------------------------------------------------------------- the start is not the check's

def test_a_slow_start_is_not_counted_against_the_first_call(slow_box):
    out = slow_box.call("tests.sandbox_targets:double", 21)
    assert (out.kind, out.value) == ("ok", 42), out
    # "ok" within a limit shorter than the start's sleep: the start was not the call's. The start is
    # booked to the start (a lower bound, which a loaded machine can only raise).
    assert slow_box.last_start_s >= SLOW_START, slow_box.last_start_s
    assert slow_box.starts == 1


def test_after_a_hang_the_restart_is_not_charged_to_the_next_call(slow_box):
    hung = slow_box.call("tests.sandbox_targets:hangs", timeout=1.0)
    assert hung.kind == "timeout" and hung.seconds >= 1.0, hung   # a real hang is still cut at its limit
    again = slow_box.call("tests.sandbox_targets:double", 2)
    assert (again.kind, again.value) == ("ok", 4), again           # the fresh child's start was not its
    assert slow_box.last_start_s >= SLOW_START, slow_box.last_start_s
    assert slow_box.starts == 2, slow_box.starts


def test_after_a_crash_the_restart_is_not_charged_to_the_next_call(slow_box):
    crashed = slow_box.call("tests.sandbox_targets:aborts")
    assert crashed.kind == "crash" and "SIGABRT" in crashed.detail, crashed
    again = slow_box.call("tests.sandbox_targets:double", 5)
    assert (again.kind, again.value) == ("ok", 10) and slow_box.starts == 2, (again, slow_box.starts)


WARM_STEP = '''
import os, time

def pay():
    with open(os.environ["WARM_MARKS"], "a") as f:
        f.write(f"{os.getpid()}\\n")
    time.sleep(float(os.environ["WARM_SLEEP"]))
'''


def test_warm_up_steps_are_replayed_in_a_fresh_child_before_the_clock_starts(tmp_path, monkeypatch):
    """The plugin's warm-up (harness/plugin/hooks.py) asks the sandbox to pay a start-up cost;
    a child started again (after a hang, or restart() for a fresh measurement) pays it again
    before the next call, not inside it."""
    marks = tmp_path / "marks"
    _modules(tmp_path, monkeypatch, warm_step=WARM_STEP)
    monkeypatch.setenv("WARM_MARKS", str(marks))
    monkeypatch.setenv("WARM_SLEEP", str(SLOW_START))
    box = Sandbox(timeout=LIMIT)
    try:
        assert box.call("harness.core.isolate:warm", "warm_step:pay", timeout=60).kind == "ok"
        assert box.call("tests.sandbox_targets:hangs", timeout=1.0).kind == "timeout"
        after_hang = box.call("tests.sandbox_targets:double", 3)
        assert (after_hang.kind, after_hang.value) == ("ok", 6), after_hang
        box.restart()
        after_restart = box.call("tests.sandbox_targets:double", 4)
        assert (after_restart.kind, after_restart.value) == ("ok", 8), after_restart
    finally:
        box.close()
    pids = marks.read_text().split()
    assert len(pids) == 3 and len(set(pids)) == 3, pids   # once in each of the three children


@pytest.mark.parametrize("source,says", [
    ("raise RuntimeError('broken on purpose')\n",
     "the sandbox child failed while starting: RuntimeError: broken on purpose"),
    ("raise SystemExit(3)\n", "the child process exited with status 3 while starting"),
    ("import time\ntime.sleep(600)\n", "the sandbox child did not start within 1.5 s"),
], ids=["raises", "exits", "hangs"])
def test_a_child_that_cannot_start_is_said_as_such_not_as_a_hung_check(tmp_path, monkeypatch, source, says):
    _modules(tmp_path, monkeypatch, cannot_start=source)
    box = Sandbox(timeout=1.0, preload=("cannot_start",), startup_timeout=1.5)
    try:
        out = box.call("tests.sandbox_targets:double", 1)
        assert out.kind == "crash" and says in out.detail and "\n" not in out.detail, out
        assert box._proc is None   # nothing left running
    finally:
        box.close()


def test_a_child_takes_what_it_holds_for_good_out_of_the_collectors_sweeps():
    """isolate.settle: a ready child has frozen its imports (gc.freeze), and so has it what a
    warm-up step loaded, before the step's answer; what a call creates stays swept."""
    box = Sandbox()
    try:
        ready = box.call("gc:get_freeze_count")
        assert ready.kind == "ok" and ready.value > 1000, ready
        assert box.call(isolate.WARM, "xml.dom.minidom").kind == "ok"   # a module the child had not imported
        warmed = box.call("gc:get_freeze_count").value
        assert warmed > ready.value, (ready.value, warmed)
        assert box.call("tests.sandbox_targets:double", 7).value == 14
        assert box.call("gc:get_freeze_count").value == warmed   # a call's objects: not frozen
    finally:
        box.close()


# --------------------------------------------------------------------------- limits the platform cannot wait

@pytest.mark.parametrize("limit", [3e6, 1e12, float("inf")])
def test_a_huge_limit_is_clamped_not_an_overflow(limit):
    box = Sandbox()
    try:
        out = box.call("tests.sandbox_targets:double", 7, timeout=limit)
        assert (out.kind, out.value) == ("ok", 14), out
    finally:
        box.close()


def test_the_largest_limit_is_one_the_platform_can_wait():
    """Connection.poll waits with poll(2), whose limit is milliseconds in a C int."""
    assert isolate.MAX_TIMEOUT * 1000 <= 2 ** 31 - 1
    here, there = socket.socketpair()
    conn = Connection(here.detach())
    try:
        there.send(b"x")
        assert conn.poll(isolate.MAX_TIMEOUT)   # data waiting: it returns at once, and does not overflow
    finally:
        conn.close()
        there.close()


@pytest.mark.parametrize("value", ["3000000", "1e12", "inf", "86401"])   # the last: a day and a second
def test_check_timeout_beyond_the_largest_is_refused(value):
    with pytest.raises(ValueError) as info:
        options.parse_check_timeout(value)
    said = str(info.value)
    assert said.startswith("--check-timeout must be a number of seconds above 0 and at most ") and \
        f"not {value!r}" in said and "\n" not in said, said
    assert isolate.MAX_TIMEOUT == 86400 and options.parse_check_timeout("86400") == 86400


def test_check_timeout_too_large_is_a_usage_error_before_anything_runs(tmp_path):
    (tmp_path / "suites" / "env").mkdir(parents=True)
    (tmp_path / "suites" / "env" / "test_one.py").write_text("def test_one(target):\n    pass\n")
    run_file = tmp_path / "run.jsonl"
    res = run_pytest(tmp_path, "--device", "cpu", "--check-timeout", "3000000", "--run-file", str(run_file),
                     env=_env())
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 4 and len(lines) == 1 and "not '3000000'" in lines[0], res.stdout + res.stderr
    assert "Traceback" not in res.stdout + res.stderr and not run_file.exists()


# --------------------------------------------------------------------------- ./compat

def test_an_unknown_compat_subcommand_is_named_in_one_line():
    res = subprocess.run(["bash", str(ROOT / "compat"), "frobnicate"], capture_output=True, text=True, timeout=60)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "'frobnicate'" in lines[0] and all(cmd in lines[0] for cmd in ("suites", "test", "report", "setup")), lines


STUB_UV = "#!/bin/sh\n[ \"$1\" = --version ] && echo \"uv {pin}\" && exit 0\necho \"$*\" >> \"{log}\"\n"


def test_a_uv_lock_that_is_not_utf8_is_said_in_one_line(tmp_path):
    """The set-up reads the uv version uv.lock pins: a byte that is not UTF-8 there is a lock to
    regenerate, said so, not a Python traceback. Nothing is installed: the venv is a stand-in
    whose python is this interpreter and whose uv only logs."""
    project, venv, log = tmp_path / "project", tmp_path / "venv", tmp_path / "uv.log"
    project.mkdir()
    for name in ("compat", "pyproject.toml"):
        shutil.copy2(ROOT / name, project / name)
    lock = (ROOT / "uv.lock").read_bytes()
    (project / "uv.lock").write_bytes(lock + b"# \xff not UTF-8\n")
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    pin = next(p["version"] for p in tomllib.loads(lock.decode())["package"] if p["name"] == "uv")
    (venv / "bin" / "uv").write_text(STUB_UV.format(pin=pin, log=log))
    (venv / "bin" / "uv").chmod(0o755)
    env = {**os.environ, "MPS_COMPAT_VENV": str(venv), "PYTHON": sys.executable}
    res = subprocess.run(["bash", str(project / "compat"), "setup"], capture_output=True, text=True, timeout=60,
                         env=env)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert "uv.lock" in lines[0] and "uv lock" in lines[0] and "Traceback" not in res.stderr, lines
    assert not log.exists(), log.read_text()   # uv was never run


# --------------------------------------------------------------------------- python -m tools.workload

@pytest.mark.parametrize("args,option", [
    (["--memory-gib", "1e308", "--tflops", "50"], "--memory-gib"),
    (["--memory-gib", "80", "--tflops", "1e308"], "--tflops"),
    (["--memory-gib", "inf", "--tflops", "50"], "--memory-gib"),
])
def test_an_absurd_device_figure_is_refused_at_parse_time(capsys, args, option):
    with pytest.raises(SystemExit) as info:
        workload.main(args)
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert info.value.code == 2 and len(err) == 1, err
    assert option in err[0] and "internal error" not in err[0] and repr(args[args.index(option) + 1]) in err[0], err


@pytest.mark.parametrize("value", [",", ", ,"])
def test_a_device_list_naming_no_target_is_refused_by_every_tool(capsys, value):
    """``--device ,`` selected nothing: pytest ran no check and said nothing, and tools.workload
    sized for no target. The parser refuses it for both (harness.env.devices.parse_device_option)."""
    from harness.env import devices
    with pytest.raises(ValueError, match="names no target"):
        devices.parse_device_option(value)
    code = workload.main(["--device", value])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2 and len(err) == 1 and "names no target" in err[0], (code, err)


@pytest.mark.parametrize("measured, signal_seen", [(False, 9), (True, 15)])
def test_a_child_is_killed_at_once_unless_coverage_measures_it(monkeypatch, measured, signal_seen):
    """Ending a child with torch loaded cleanly takes seconds, so it is killed (SIGKILL); where
    coverage.py measures the subprocesses (COVERAGE_PROCESS_START), SIGKILL would lose the
    child's data, so it gets SIGTERM, which coverage catches to write it."""
    if measured:
        monkeypatch.setenv(isolate.COVERAGE_VAR, os.devnull)
    else:
        monkeypatch.delenv(isolate.COVERAGE_VAR, raising=False)
    box = Sandbox(timeout=30)
    try:
        assert box.call("os:getpid").kind == "ok"
        proc = box._proc
    finally:
        box.close()
    assert proc.returncode == -signal_seen
