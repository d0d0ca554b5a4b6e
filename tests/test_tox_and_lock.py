"""tox.ini as the README runs it, and uv.lock, the pinned environment of ``./compat``.

tox: the commands each environment gets for ``tox -e ... -- PYTEST-ARGS`` (pytest's
arguments reach the torch environments only), and real runs of the documented commands in
a copy of the project (so the real reports/ is not touched): ``tox -e report -- -m env``
(cheap: no torch), and, marked slow, ``tox -e torch26,report -- -m env`` (torch 2.6 into a
tox environment: ~1.5 minutes with a cold uv cache on a 2-core VM; UV_TORCH_BACKEND=cpu,
which tox-uv hands to uv, takes PyTorch's ~200 MB CPU wheel instead of PyPI's CUDA one
where download.pytorch.org is reachable). The tox runs need the tox beside this
interpreter (./compat's .venv has it) and PyPI or a warm uv cache.

uv.lock: consistent with pyproject.toml (``uv lock --check --offline``, no network), shown
to notice a pyproject.toml it was not made from, with torch wheels for every platform and
Python ./compat runs on, and the setup logic of ``./compat`` (sync with the lock's own uv,
again only when pyproject.toml or uv.lock changed) run against a stub uv.
"""
from __future__ import annotations

import configparser
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.env import fitness
from tests.conftest import tool

try:
    import tomllib
except ImportError:  # Python 3.10: pytest brings tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
TORCH_ENVS = ["torch26", "torch28", "torch210", "torch215"]
# what a project copy leaves out: outputs, caches and environments
NOT_COPIED = shutil.ignore_patterns(".git", ".venv", ".tox", "reports", ".hypothesis", ".pytest_cache",
                                    "__pycache__", "*.egg-info", "build", "dist")


TOX = tool("tox")
UV = tool("uv")
needs_tox = pytest.mark.skipif(TOX is None, reason="tox is not installed: `./compat setup` puts it in .venv")
needs_uv = pytest.mark.skipif(UV is None, reason="uv is not installed: `./compat setup` puts it in .venv")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what an outer tox or pytest run set (a nested tox
    would read TOX_* as its own configuration; pytest-xdist's variables would reach the
    suites' pytest), and without the variables the tests below set themselves."""
    drop = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "MPS_COMPAT_REPORT_ARGS", "MPS_COMPAT_VENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOX_", "PYTEST_")) and k not in drop}
    return {**env, **extra}


def copy_project(dest: Path) -> Path:
    shutil.copytree(ROOT, dest, ignore=NOT_COPIED)
    (dest / "reports" / "runs").mkdir(parents=True)
    return dest


def tox(project: Path, *args: str, timeout: int = 600, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([TOX, *args], cwd=project, capture_output=True, text=True, timeout=timeout,
                          env=clean_env(**env))


def tox_ini() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "tox.ini", encoding="utf-8")
    return cfg


def write_small_run(path: Path) -> Path:
    """A run file with an env check and an optimization claim (the report draws a chart for it)."""
    from harness.core import runfiles
    from harness.env.facts import env_id
    facts = json.loads((ROOT / "tests" / "fixtures" / "facts" / "linux_x86_64.json").read_text())
    w = runfiles.Writer(path)
    w.write(runfiles.header("R1", env_id(facts), facts, targets={"cpu": {"selected": True, "available": True}},
                           mps_fallback={"setting": "on"}))
    base = {"kind": "check", "run": "R1", "target": "cpu", "reason": "", "duration_s": 0.1, "variant": ""}
    w.write({**base, "check": "env/threads", "suite": "env", "subject": "threads", "status": "pass",
             "category": "n/a", "metrics": {}})
    w.write({**base, "check": "optim/adafactor", "suite": "optim", "subject": "adafactor", "variant": "memory",
             "status": "pass", "category": "holds",
             "metrics": {"mem_ratio": 0.53, "ci_low": 0.53, "ci_high": 0.53, "bound": 0.94, "kind": "lower"}})
    w.write({"kind": "end", "run": "R1", "exitstatus": 0})
    w.close()
    return path


def matrix_files(where: Path) -> list[str]:
    return sorted(p.name for p in where.glob("matrix.*"))


# --------------------------------------------------------------------------- tox: who gets the arguments

@needs_tox
def test_pytest_args_after_dashdash_reach_the_torch_envs_and_not_the_report():
    envs = [*TORCH_ENVS, "report", "newest", "oldest"]
    res = subprocess.run([TOX, "config", "-e", ",".join(envs), "-k", "commands", "--", "-m", "env"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env=clean_env())
    assert res.returncode == 0, res.stdout + res.stderr
    # one command is shown on the `commands =` line, several each on a line of its own below it
    commands = {m.group(1): m.group(2) for m in re.finditer(r"^\[testenv:(\w+)\]\ncommands =(.*(?:\n  .*)*)",
                                                             res.stdout, re.M)}
    assert set(commands) == set(envs), res.stdout
    for env in TORCH_ENVS:
        assert re.search(r"^\s*python -m tools.suiteplan run -- -m env$", commands[env], re.M), f"{env}:\n{commands[env]}"
    assert "-m env" not in commands["report"] and "tools.report" in commands["report"], commands["report"]
    for env in ("newest", "oldest"):
        assert re.search(r"^\s*pytest tests/ -n auto --maxprocesses 4 -m env$", commands[env], re.M), commands[env]


def test_newest_is_on_demand_only():
    cfg = tox_ini()
    default = re.split(r"[\s,]+", cfg["tox"]["env_list"].strip())
    assert "newest" not in default, "the default tox run would test the newest releases, not the suites"
    assert "newest" not in cfg["testenv:report"]["depends"]
    for name in ("newest", "oldest"):
        assert name not in default and name not in cfg["testenv:report"]["depends"]
        env = cfg[f"testenv:{name}"]
        assert env["extras"].strip() == "dev" and env["recreate"].strip() == "true"
        assert "pytest tests/" in env["commands"]
    oldest_torch = min(int(e.removeprefix("torch")[1:] or 0) for e in default if e.startswith("torch2"))
    assert cfg["testenv:oldest"]["deps"].strip() == f"torch==2.{oldest_torch}.*"   # the suites' oldest torch


def test_report_env_installs_what_tools_report_imports():
    spec = importlib.util.spec_from_file_location("_workflow_tests", ROOT / "tests" / "test_workflow.py")
    workflow_tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(workflow_tests)
    deps = {re.split(r"[<>=!~\[; ]", d.strip())[0].lower()
            for d in tox_ini()["testenv:report"]["deps"].splitlines() if d.strip()}
    missing = {workflow_tests.PIP_NAME.get(m, m) for m in workflow_tests.report_imports()} - deps
    assert not missing, f"tox -e report does not install {sorted(missing)}, which tools.report imports"


# --------------------------------------------------------------------------- tox: the documented runs, for real

@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project with one small run file in reports/runs."""
    dest = copy_project(tmp_path_factory.mktemp("tox") / "project")
    write_small_run(dest / "reports" / "runs" / "small.jsonl")
    return dest


@needs_tox
def test_tox_report_as_documented_ignores_the_pytest_args(project):
    res = tox(project, "-e", "report", "--", "-m", "env")
    assert res.returncode == 0, f"tox -e report -- -m env exited {res.returncode}:\n{res.stdout[-3000:]}{res.stderr}"
    reports = project / "reports"
    assert matrix_files(reports) == ["matrix.html", "matrix.json", "matrix.md"], sorted(os.listdir(reports))
    assert list(reports.glob("*.png")), "no chart: the report env lacks matplotlib?"
    assert "adafactor" in (reports / "matrix.md").read_text(encoding="utf-8")


@needs_tox
def test_tox_report_takes_its_own_args_from_the_environment(project, tmp_path):
    out = tmp_path / "elsewhere dir"
    res = tox(project, "-e", "report", MPS_COMPAT_REPORT_ARGS=f"--out '{out}'")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    assert matrix_files(out) == ["matrix.html", "matrix.json", "matrix.md"]


@pytest.mark.slow
@needs_tox
def test_tox_torch26_and_report_as_the_readme_runs_it(tmp_path):
    """`tox -e torch26,report -- -m env`: torch 2.6 installed into a tox env, the env suite, one matrix."""
    project = copy_project(tmp_path / "project")
    res = tox(project, "-e", "torch26,report", "--", "-m", "env", timeout=1800)
    assert res.returncode == 0, f"exit {res.returncode}:\n{res.stdout[-4000:]}{res.stderr[-2000:]}"
    runs = list((project / "reports" / "runs").glob("*-torch2.6.*.jsonl"))
    assert len(runs) == 1, sorted(os.listdir(project / "reports" / "runs"))
    matrix = json.loads((project / "reports" / "matrix.json").read_text(encoding="utf-8"))
    columns = {c["target"]: c for c in matrix["columns"]}
    assert columns["cpu"]["facts"]["torch"]["version"].startswith("2.6."), columns["cpu"]["facts"]["torch"]
    assert columns["cpu"]["complete"] and columns["cpu"]["summary"].get("pass"), columns["cpu"]["summary"]
    # only the env suite ran: -m env reached pytest
    assert set(matrix["suites"]) == {"env"}, sorted(matrix["suites"])


@pytest.mark.slow(seconds=25)
@needs_tox
def test_the_candidate_environment_is_the_baseline_with_the_specs_and_nothing_newer(tmp_path):
    """`tox -e candidate` as ./compat runs it (its variables set as ./compat sets them): the
    environment was built from the project's open requirements, so naming one package moved
    torch and the rest to their newest, and a SPEC of an earlier run stayed. Now it is built
    under the baseline's versions (UV_CONSTRAINT), the SPEC is installed and checked, and a
    SPEC that cannot sit beside the baseline's other versions fails to build, before
    tools.upgrade starts (./compat then says so in one line, not as a regression)."""
    project = copy_project(tmp_path / "project")
    kept = tmp_path / "baseline.jsonl"
    selection = ["--", "-m", "env and cpu", "-p", "no:cacheprovider", "--run-file", str(tmp_path / "runs.jsonl")]
    res = subprocess.run([sys.executable, "-m", "tools.upgrade", "baseline", "--baseline-file", str(kept), *selection],
                         cwd=ROOT, capture_output=True, text=True, timeout=600, env=clean_env())
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    base_python = subprocess.run([sys.executable, "-c", "import sys; print(sys._base_executable)"],
                                 capture_output=True, text=True).stdout.strip()

    def candidate(spec: str) -> tuple[subprocess.CompletedProcess, bool]:
        constraints, started = tmp_path / "constraints.txt", tmp_path / "started"
        started.unlink(missing_ok=True)
        check = subprocess.run([sys.executable, "-m", "tools.upgrade", "check", "--constraints", str(constraints),
                                "--baseline-file", str(kept), spec, *selection], cwd=ROOT, capture_output=True,
                               text=True, timeout=300, env=clean_env())
        assert check.returncode == 0, check.stderr
        assert "torch==" in constraints.read_text() and spec in constraints.read_text()
        run = tox(project, "-e", "candidate", "--", spec, "--baseline-file", str(kept), "--report",
                  str(tmp_path / "check.md"), *selection, timeout=1200, UV_CONSTRAINT=str(constraints),
                  MPS_COMPAT_PYTHON=base_python, MPS_COMPAT_CANDIDATE_STARTED=str(started),
                  MPS_COMPAT_UV=UV or "uv")
        return run, started.exists()

    from importlib import metadata
    run, started = candidate("pytest-xdist==3.7.0")
    assert run.returncode == 0 and started, run.stdout[-4000:] + run.stderr[-2000:]
    said = next(line for line in run.stdout.splitlines() if line.startswith("candidate: torch "))
    assert f"torch {metadata.version('torch')}," in said and "pytest-xdist 3.7.0" in said, said   # torch stayed the baseline's
    run, started = candidate("transformers==4.46.0")   # needs tokenizers < 0.21; the baseline pins its own
    assert run.returncode == 1 and not started and "tokenizers" in run.stdout, run.stdout[-3000:]


# --------------------------------------------------------------------------- uv.lock

def lock() -> dict:
    return tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))


def uv_lock_check(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run([UV, "lock", "--check", "--offline", "--project", str(project)], capture_output=True,
                          text=True, timeout=120, env=clean_env())


@needs_uv
def test_lock_matches_pyproject():
    res = uv_lock_check(ROOT)
    assert res.returncode == 0, ("uv.lock was not made from this pyproject.toml: run `uv lock` (or `uv lock "
                                 f"--upgrade`, docs/lock-and-tox.md) and commit uv.lock\n{res.stdout}{res.stderr}")


@needs_uv
def test_lock_check_notices_a_pyproject_it_was_not_made_from(tmp_path):
    for name in ("pyproject.toml", "uv.lock", "README.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    py = tmp_path / "pyproject.toml"
    text = py.read_text(encoding="utf-8")
    assert '  "pyyaml>=6",\n' in text
    py.write_text(text.replace('  "pyyaml>=6",\n', '  "pyyaml>=6",\n  "rich>=13",\n', 1), encoding="utf-8")
    assert uv_lock_check(tmp_path).returncode != 0


def marker_env(python: str, platform: str) -> dict[str, str]:
    """PEP 508 marker values of CPython `python` on: mac15 / mac14 / mac13 (arm64), linux (x86_64)."""
    env = {"python_version": python, "python_full_version": f"{python}.0", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    if platform.startswith("mac"):
        darwin = {"mac15": "24.0.0", "mac14": "23.0.0", "mac13": "22.6.0"}[platform]
        return {**env, "sys_platform": "darwin", "platform_system": "Darwin", "platform_machine": "arm64",
                "platform_release": darwin}
    return {**env, "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "platform_release": "6.8.0"}


def wheel_fits(filename: str, python: str, platform: str) -> bool:
    cp = "cp" + python.replace(".", "")
    tags = filename[:-4].split("-")[-3:]  # python tag, abi tag, platform tag
    if cp not in tags[0].split(".") or tags[1].endswith("t"):  # free-threaded builds are another Python
        return False
    plat = tags[2]
    if platform == "linux":
        return "x86_64" in plat and "linux" in plat
    m = re.fullmatch(r"macosx_(\d+)_(\d+)_(arm64|universal2)", plat)
    return bool(m) and int(m.group(1)) <= MACOS[platform]


MACOS = {"mac15": 15, "mac14": 14, "mac13": 13}


@pytest.mark.parametrize("platform", ["mac15", "mac14", "mac13", "linux"])
@pytest.mark.parametrize("python", ["3.10", "3.11", "3.12", "3.13"])
def test_lock_has_a_torch_wheel_for_every_platform_compat_runs_on(python, platform):
    """Per Python and platform the lock selects one torch, and that torch has a wheel there (torch >= 2.12
    has macOS 14 wheels only: a macOS 13 Mac gets an older one) whose MPS backend runs on that macOS
    (torch 2.15's wheel installs on macOS 14, but its MPS needs macOS 15: a macOS 14 Mac gets an older one;
    torch 2.9's installs on macOS 13, but its MPS needs macOS 14: a macOS 13 Mac gets torch 2.8). Python
    3.14 on macOS 13 is left out: no torch before 2.9 has a wheel for it (pyproject.toml's [tool.uv])."""
    data = lock()
    requires = SpecifierSet(data["requires-python"])
    assert Version(f"{python}.0") in requires
    env = marker_env(python, platform)
    project = next(p for p in data["package"] if p["name"] == "mps-compat")
    chosen = [d["version"] for d in project["dependencies"]
              if d["name"] == "torch" and Marker(d.get("marker", "python_version > '0'")).evaluate(env)]
    if not chosen:  # a single torch for everyone: no version on the dependency
        chosen = [p["version"] for p in data["package"] if p["name"] == "torch"]
    assert len(chosen) == 1, f"{python} {platform}: torch {chosen}"
    torch = next(p for p in data["package"] if p["name"] == "torch" and p["version"] == chosen[0])
    wheels = [w["url"].rsplit("/", 1)[1] for w in torch.get("wheels", [])]
    assert any(wheel_fits(w, python, platform) for w in wheels), \
        f"torch {chosen[0]} in uv.lock has no wheel for Python {python} on {platform}: {wheels}"
    if platform in MACOS:
        floor = fitness.mps_macos_floor(Version(chosen[0]))
        assert floor is None or int(floor.macos) <= MACOS[platform], \
            f"torch {chosen[0]} in uv.lock installs on {platform} but its MPS needs macOS {floor.macos}"


def test_lock_pins_uv_for_compat():
    uv = [p for p in lock()["package"] if p["name"] == "uv"]
    assert len(uv) == 1, "uv.lock must pin one uv: ./compat syncs .venv with it (pyproject's dev extra lists it)"


# --------------------------------------------------------------------------- ./compat setup, with a stub uv

STUB_UV = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "uv {version} (stub)"; exit 0; fi
echo "{who} UV_PROJECT_ENVIRONMENT=$UV_PROJECT_ENVIRONMENT $*" >> "{log}"
"""


@pytest.fixture
def stubbed(tmp_path):
    """A project with ./compat, pyproject.toml and uv.lock; a venv whose python is this interpreter and
    whose uv is a stub that logs its calls; a uv on PATH that logs too. (log, run ./compat setup, paths)"""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("compat", "pyproject.toml", "uv.lock"):
        shutil.copy2(ROOT / name, project / name)
    venv, bindir, log = tmp_path / "venv", tmp_path / "path-bin", tmp_path / "uv.log"
    (venv / "bin").mkdir(parents=True)
    bindir.mkdir()
    (venv / "bin" / "python").symlink_to(sys.executable)
    pin = next(p["version"] for p in lock()["package"] if p["name"] == "uv")

    def stub(path: Path, who: str, version: str) -> None:
        path.write_text(STUB_UV.format(version=version, who=who, log=log))
        path.chmod(0o755)

    stub(venv / "bin" / "uv", "venv-uv", pin)
    stub(bindir / "uv", "path-uv", pin)

    def setup(**extra: str) -> list[str]:
        env = clean_env(MPS_COMPAT_VENV=str(venv), PATH=f"{bindir}:{os.environ['PATH']}")
        env.pop("PYTHONDONTWRITEBYTECODE", None)      # unset unless a test sets it: it adds a uv option
        env.update(extra)
        res = subprocess.run(["bash", str(project / "compat"), "setup"], capture_output=True, text=True, timeout=60,
                             env=env)
        assert res.returncode == 0, res.stderr
        return log.read_text().splitlines() if log.exists() else []

    return setup, project, venv, stub


def test_compat_syncs_with_the_lock_once_and_again_when_it_changes(stubbed):
    setup, project, venv, _ = stubbed
    calls = setup()
    assert calls == [f"venv-uv UV_PROJECT_ENVIRONMENT={venv} sync -q --locked --extra dev --project {project}"], calls
    assert setup() == calls, "a second ./compat setup with nothing changed ran uv again"
    with (project / "uv.lock").open("a") as f:
        f.write("\n")
    assert len(setup()) == 2, "a changed uv.lock did not re-sync .venv"
    with (project / "pyproject.toml").open("a") as f:
        f.write("\n")
    assert len(setup()) == 3, "a changed pyproject.toml did not re-sync .venv"


def test_compat_has_uv_compile_the_bytecode_where_python_would_cache_none(stubbed):
    """With PYTHONDONTWRITEBYTECODE set, each process would compile torch from source again."""
    setup, project, venv, _ = stubbed
    calls = setup(PYTHONDONTWRITEBYTECODE="1")
    assert calls == [f"venv-uv UV_PROJECT_ENVIRONMENT={venv} sync -q --locked --extra dev --project {project} "
                     "--compile-bytecode"], calls


def test_compat_caches_the_bytecode_under_the_venv_where_python_would_cache_none(stubbed, tmp_path):
    """Every child pytest and sandbox child would otherwise compile harness/ and tests/ again.
    The cache goes under the venv, not beside the sources; a prefix of the user's own is kept,
    and MPS_COMPAT_PYCACHE=off writes none."""
    setup, project, venv, _ = stubbed
    setup()   # synced: the runs below go straight to their python
    log = tmp_path / "python.log"
    (venv / "bin" / "python").unlink()
    (venv / "bin" / "python").write_text(
        f'#!/bin/sh\necho "$* | ${{PYTHONDONTWRITEBYTECODE:-}} | ${{PYTHONPYCACHEPREFIX:-}}" >> {log}\n'
        f'exec {sys.executable} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)

    def seen(**extra: str) -> str:
        log.unlink(missing_ok=True)
        env = {k: v for k, v in clean_env(MPS_COMPAT_VENV=str(venv)).items()   # this run's own (compat sets them)
               if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX", "MPS_COMPAT_PYCACHE")} | extra
        subprocess.run(["bash", str(project / "compat"), "report"], capture_output=True, text=True, timeout=60, env=env)
        (line,) = [ln for ln in log.read_text().splitlines() if ln.startswith("-m tools.report")]
        return line.split(" | ", 1)[1]

    assert seen(PYTHONDONTWRITEBYTECODE="1") == f" | {venv}/.pycache"
    assert seen(PYTHONDONTWRITEBYTECODE="1", PYTHONPYCACHEPREFIX="/elsewhere") == "1 | /elsewhere"
    assert seen(PYTHONDONTWRITEBYTECODE="1", MPS_COMPAT_PYCACHE="off") == "1 | "
    assert not list(project.rglob("__pycache__"))


def test_compat_installs_the_locked_uv_first_when_the_venv_has_another(stubbed):
    setup, project, venv, stub = stubbed
    stub(venv / "bin" / "uv", "venv-uv", "0.0.1")
    pin = next(p["version"] for p in lock()["package"] if p["name"] == "uv")
    calls = setup()
    assert calls[0] == f"path-uv UV_PROJECT_ENVIRONMENT= pip install -q --python {venv}/bin/python uv=={pin}", calls
    assert calls[1].startswith("venv-uv ") and " sync -q --locked " in calls[1], calls


def test_compat_without_a_lock_says_so(stubbed, tmp_path):
    setup, project, venv, _ = stubbed
    (project / "uv.lock").unlink()
    res = subprocess.run(["bash", str(project / "compat"), "setup"], capture_output=True, text=True, timeout=60,
                         env=clean_env(MPS_COMPAT_VENV=str(venv)))
    assert res.returncode == 2 and "no uv.lock" in res.stderr, res.stderr
