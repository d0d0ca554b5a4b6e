import json
import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# The self-tests marked slow (the suites run end to end in child pytest processes, with a
# fault injected) are left out of the quick loop: `./compat test --slow`, as CI runs them.
SLOW_ENV = "MPS_COMPAT_SLOW"
# CI sets this: a self-test that skips there is a hole (a browser not installed, a tool
# missing from the environment), so a skip fails the test instead, with its reason.
FORBID_SKIPS_ENV = "MPS_COMPAT_FORBID_SKIPS"
# ./compat exports where it was run from and, for a candidate, the run's role; the self-tests
# (./compat test) must not inherit either: a relative path in a test means the project root, and
# a test's run is no candidate's. A test of them sets them itself.
for _inherited in ("MPS_COMPAT_CWD", "MPS_COMPAT_RUN_ROLE"):
    os.environ.pop(_inherited, None)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true",
                     help=f"also run the self-tests marked slow (CI does; or set {SLOW_ENV}=1)")


def pytest_configure(config):
    """On xdist workers, divide the cores among them, as the suites' plugin does for its own
    sandbox children (harness.core.isolate.threads_per_worker): most self-tests run torch in a
    child process (a suite in a child pytest, its sandbox children), and two workers' children
    each starting a thread per core oversubscribe the machine. On 2 cores, three of the
    slowest self-test files took 216 s with torch's default and 154 s with a thread each.
    The variable reaches every child the self-tests start; one the user set is kept."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or not workers.isdigit() or os.environ.get("OMP_NUM_THREADS"):
        return
    from harness.core.isolate import threads_per_worker
    threads = threads_per_worker(int(workers))
    if threads is None:
        return
    os.environ["OMP_NUM_THREADS"] = str(threads)
    import sys
    if "torch" in sys.modules:   # imported before this hook: it read the variable already
        sys.modules["torch"].set_num_threads(threads)


def cost(item) -> float:
    """About how many seconds a self-test takes on the developers' 2-core VM: a slow one's
    ``@pytest.mark.slow(seconds=N)``, 1 for the other slow ones, 0 for the rest."""
    marker = item.get_closest_marker("slow")
    return 0.0 if marker is None else float(marker.kwargs.get("seconds", 1))


def pytest_collection_modifyitems(config, items):
    if config.getoption("--slow") or os.environ.get(SLOW_ENV) == "1":
        # The slow self-tests first, the longest first (their order is otherwise the files'):
        # pytest-xdist hands items out in this order, and a 5-minute test begun last kept one
        # worker busy minutes after the other ran out of work (CI: 1,870 s of tests on 2
        # workers took 1,139 s where half is 935 s).
        items[:] = sorted(items, key=lambda item: -cost(item))
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if not item.get_closest_marker("slow")]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and os.environ.get(FORBID_SKIPS_ENV) == "1":
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped where {FORBID_SKIPS_ENV}=1 (CI) allows no skip: {reason}"
    return report

FACTS_DIR = Path(__file__).parent / "fixtures" / "facts"
ROOT = Path(__file__).resolve().parent.parent


def no_kernels(where: Path) -> str:
    """An empty directory beside ``where`` for tools.report's ``--kernels``: no kernel tables
    (this checkout's reports/kernels left out; a path that is not there is refused)."""
    empty = where.parent / f"{where.name}-no-kernels"
    empty.mkdir(parents=True, exist_ok=True)
    return str(empty)


def tool(name: str) -> str | None:
    """An executable beside this interpreter (the venv's bin/: tox, uv, actionlint), else on PATH."""
    import shutil
    import sys
    here = Path(sys.executable).parent / name
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which(name)


def load_facts(name: str) -> dict:
    return json.loads((FACTS_DIR / f"{name}.json").read_text())


@pytest.fixture
def recorded():
    """Load a recorded fact set by name (tests/fixtures/facts/NAME.json)."""
    return load_facts


def run_suite(tmp_path, suite_file: str, marker: str | None, *args, env=None, timeout=1200, controls=False):
    """Run one suite file in a child pytest with its own run file; (result, check records).

    A run of one file opens with its suite's controls (harness.plugin.hooks.unnamed_controls).
    These self-tests are about the suite's own checks, and the controls are tested on their own
    (tests/test_controls.py, tests/test_emulated_suites.py): here they are deselected, as a user
    can, unless ``controls``; they would add about 1 s (parity) to 6 s (optim) to each of some
    forty child runs. Control records a run holds (a directory run) are kept apart, on
    ``result.controls``, so that a test reads its suite's own."""
    import os
    import subprocess
    import sys

    from harness.core import runfiles
    run_file = tmp_path / f"run{len(list(tmp_path.iterdir()))}.jsonl"
    if not controls and suite_file.endswith(".py"):
        modules = sorted((ROOT / suite_file).parent.glob("test_*controls.py"))
        args = (*[a for m in modules for a in ("--deselect", str(m.relative_to(ROOT)))], *args)
    res = subprocess.run([sys.executable, "-m", "pytest", suite_file, *(("-m", marker) if marker else ()), "-q", "-p",
                          "no:cacheprovider", "--run-file", str(run_file), *args],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
    records = [r for run_ in runfiles.read_file(run_file).runs for r in run_.records] if run_file.exists() else []
    res.controls = [r for r in records if r.get("subject") == "controls"]
    return res, [r for r in records if r.get("subject") != "controls"]


# --------------------------------------------------------------------------- the report's browser tests

def _find_chromium():
    from tools import render_check
    return render_check.find_chromium()


CHROMIUM = _find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium not found (chromium, chromium-browser, "
                                    "google-chrome on PATH, or $CHROMIUM): the page cannot be rendered here; install "
                                    "it (Debian: apt-get install chromium fonts-noto-cjk; macOS: brew install --cask "
                                    "chromium), as .ci/run does")


@pytest.fixture(scope="module")
def one_browser():
    """One Playwright and one Chromium for a module's browser tests, stopped after them
    (render_check.session: every check and page inside shares it)."""
    if CHROMIUM is None:
        yield
        return
    from tools import render_check
    with render_check.session():
        yield


# --------------------------------------------------------------------------- recorded runs from real hardware

RECORDED = Path(__file__).resolve().parent / "fixtures" / "recorded"


def recorded_run_files(folder: str) -> Path:
    """The run files recorded on real hardware in tests/fixtures/recorded/FOLDER (kept gzipped
    in the repository), unpacked once per process into a temporary directory that is removed
    at exit: a directory tools.report, tools.compare, tools.rejudge and runfiles read as they are."""
    if folder not in _RECORDED:
        import atexit
        import gzip
        import shutil
        import tempfile
        packed_files = sorted((RECORDED / folder).glob("*.jsonl.gz"))
        if not packed_files:
            raise FileNotFoundError(f"no recorded run files in {RECORDED / folder}")
        out = Path(tempfile.mkdtemp(prefix="mps-compat-recorded-")) / folder
        out.mkdir()
        atexit.register(shutil.rmtree, out.parent, True)
        for packed in packed_files:
            (out / packed.name.removesuffix(".gz")).write_bytes(gzip.decompress(packed.read_bytes()))
        _RECORDED[folder] = out
    return _RECORDED[folder]


def recorded_h100() -> Path:
    """The first H100 recording (tests/fixtures/recorded/h100-torch2.11: torch 2.11, the older
    parity judge, no controls)."""
    return recorded_run_files("h100-torch2.11")


def recorded_h100_controls() -> Path:
    """The second H100 recording (tests/fixtures/recorded/h100-torch2.11-2026-11-24): every
    suite's controls on cuda, the optimization suite before and after a speed change."""
    return recorded_run_files("h100-torch2.11-2026-11-24")


def recorded_h200() -> Path:
    """The H200 recording (tests/fixtures/recorded/h200-torch2.11-2026-11-27): the whole
    optimization suite on cuda, within its budget, and the env suite."""
    return recorded_run_files("h200-torch2.11-2026-11-27")


def recorded_h100_full() -> Path:
    """The third H100 recording (tests/fixtures/recorded/h100-torch2.11-2026-11-28): the whole
    optimization suite on an H100 within its budget, ops, the compiled family, env and every
    suite's controls, all from one clean tree (e0ba736)."""
    return recorded_run_files("h100-torch2.11-2026-11-28")


_RECORDED: dict[str, Path] = {}



_DYNAMO_REFUSALS: dict[str, str | None] = {}


def dynamo_refuses(model: str = "bert") -> str | None:
    """Why dynamo cannot capture the registry's ``model`` (harness.core.models.MODELS) in this
    environment, or None where it can.

    transformers 5.24 asks ``torch.compiler.is_exporting()`` in its mask code, which torch 2.6
    lacks: eagerly its try/except answers False, under dynamo the AttributeError ends graph
    capture, so on torch 2.6 (``tox -e oldest``) every compiled BERT and Llama fails and the
    suites rightly record it. The self-tests that expect a compiled model to run ask this first.
    It does not go through the suites: the model compiled with backend='eager' (graph capture
    alone), one forward."""
    if model not in _DYNAMO_REFUSALS:
        import torch

        from harness.core import models
        ex = models.example(model)
        try:
            models.call_model(torch.compile(ex.model, backend="eager"), ex.batch)
            _DYNAMO_REFUSALS[model] = None
        except Exception as e:   # what dynamo raises is the answer
            _DYNAMO_REFUSALS[model] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        finally:
            torch._dynamo.reset()
    return _DYNAMO_REFUSALS[model]
