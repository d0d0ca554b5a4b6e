"""The layout's rules, checked: each suite's code in its own package, modules a reader can
hold in mind (under ~400 lines, or a table), no private name used across modules, and
verdicts reaching pytest in one place (record.conclude), never through a suite's assert."""
import ast
import re

import pytest

from tests.conftest import ROOT

HARNESS = ROOT / "harness"
PACKAGES = {"core", "env", "ops", "parity", "optim", "report"}
MAX_LINES = 420
# Modules that are a table, with the line where their table starts: above it, the code
# must still fit MAX_LINES.
TABLES = {"harness/optim/claims.py": "CLAIMS", "harness/parity/known_bug_cases.py": "CASES"}


def modules():
    return sorted(p for p in HARNESS.rglob("*.py") if "__pycache__" not in p.parts)


def test_harness_is_grouped_by_what_it_serves():
    top = {p.name for p in HARNESS.glob("*.py")} - {"__init__.py"}
    assert top == {"pytest_plugin.py"}, f"modules outside a package: {sorted(top)}"
    assert {p.name for p in HARNESS.iterdir() if p.is_dir() and p.name != "__pycache__"} == PACKAGES


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_is_short_or_a_table(path):
    rel = str(path.relative_to(ROOT))
    lines = path.read_text(encoding="utf-8").splitlines()
    if rel in TABLES:
        start = next(i for i, line in enumerate(lines) if re.match(rf"{TABLES[rel]}\b.*=", line))
        lines = lines[:start]
    assert len(lines) <= MAX_LINES, f"{rel}: {len(lines)} lines of code; split it along a seam"


def _harness_modules() -> set[str]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts) for p in modules()}


@pytest.mark.parametrize("path", [*modules(), *sorted((ROOT / "suites").rglob("*.py")),
                                  *sorted((ROOT / "tools").glob("*.py"))], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_crosses_a_module(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    known = _harness_modules()
    aliases: dict[str, str] = {}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("harness"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in known:
                    aliases[a.asname or a.name] = full
                elif a.name.startswith("_"):
                    bad.append(f"line {node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            bad.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    assert not bad, f"{path.relative_to(ROOT)} uses private names of other modules: {bad}"


@pytest.mark.parametrize("path", sorted((ROOT / "suites").rglob("test_*.py")), ids=lambda p: p.name)
def test_a_suite_concludes_through_its_judges_not_asserts(path):
    """A suite's test body hands its judge's Verdict to record.conclude: an assert would be
    a second, hand-made mapping from a result to pytest's outcome."""
    asserts = [n.lineno for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Assert)]
    assert not asserts, f"{path.name}: assert at lines {asserts}"
