import json
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

FACTS_DIR = Path(__file__).parent / "fixtures" / "facts"
ROOT = Path(__file__).resolve().parent.parent


def load_facts(name: str) -> dict:
    return json.loads((FACTS_DIR / f"{name}.json").read_text())


@pytest.fixture
def recorded():
    """Load a recorded fact set by name (tests/fixtures/facts/NAME.json)."""
    return load_facts


def run_suite(tmp_path, suite_file: str, marker: str, *args, env=None, timeout=1200):
    """Run one suite file in a child pytest with its own run file; (result, check records)."""
    import os
    import subprocess
    import sys

    from harness import journal
    run_file = tmp_path / f"run{len(list(tmp_path.iterdir()))}.jsonl"
    res = subprocess.run([sys.executable, "-m", "pytest", suite_file, "-m", marker, "-q", "-p", "no:cacheprovider",
                          "--run-file", str(run_file), *args],
                         cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=timeout)
    records = [r for run_ in journal.read_file(run_file).runs for r in run_.records] if run_file.exists() else []
    return res, records
