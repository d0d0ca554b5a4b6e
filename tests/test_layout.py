"""The layout's rules, checked: harness/ is packages on floors, and a lower floor never imports
a higher one (at any level of a function, sandbox targets included); no import cycle between
modules or between packages; no folder so flat that its modules are told apart by name
prefixes alone; no private name used across modules; and a suite's verdicts reach pytest in
one place (record.conclude), never through an assert or a pytest.skip / fail / xfail of its
own. Each rule is a function of a tree, and each is shown to fail on a planted violation.

The floors (docs/layout.md), lowest first: core < env < ops < parity < optim < perf < report <
plugin; tools/, suites/ and tests/ stand above them all and nothing in harness/ imports them.
"""
import ast
import re
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT

FLOORS = ("core", "env", "ops", "parity", "optim", "perf", "report", "plugin")
ABOVE = ("tools", "suites", "tests")       # never imported from harness/
MAX_MODULES = 12                           # modules in one folder: more, and it wants subpackages
SANDBOX_TARGET = re.compile(r"^(harness(?:\.\w+)+):\w+$")   # "harness.parity.ops.check:run_case"
OUTCOME_CALLS = ("skip", "fail", "xfail", "exit")           # pytest.<these>() in a suite bypasses the verdict


# --------------------------------------------------------------------------- the import graph

def modules(root: Path) -> dict[str, Path]:
    """Every module of harness/ under ``root`` by dotted name (a package by its own name)."""
    out = {}
    for path in sorted((root / "harness").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The module a dotted name lands in: itself, or the nearest enclosing known module."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports(root: Path) -> dict[str, set[str]]:
    """module -> what it imports: harness modules (by every import statement, at any level,
    relative ones resolved; sandbox targets and import_module strings "harness.x:y" too), and
    the top-level names of tools / suites / tests where it reaches for them."""
    known = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] or [base]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                match = SANDBOX_TARGET.match(node.value) or re.fullmatch(r"(harness(?:\.\w+)+)", node.value)
                if match and _resolve(match.group(1), known) == match.group(1):
                    targets = [match.group(1)]
            for target in targets:
                top = target.split(".")[0]
                if top in ABOVE:
                    found.add(top)
                elif top == "harness" and (hit := _resolve(target, known)) and hit != name:
                    found.add(hit)
        graph[name] = found
    return graph


def floor_of(module: str) -> int | None:
    parts = module.split(".")
    return FLOORS.index(parts[1]) if len(parts) > 1 and parts[1] in FLOORS else None


def misplaced(root: Path) -> list[str]:
    """Anything in harness/ outside its packages, and packages that are not floors."""
    harness = root / "harness"
    loose = [p.name for p in harness.glob("*.py") if p.name != "__init__.py"]
    strange = [p.name for p in harness.iterdir() if p.is_dir() and p.name != "__pycache__" and p.name not in FLOORS]
    return [f"module outside a package: {n}" for n in loose] + [f"package on no floor: {n}" for n in strange]


def floor_violations(root: Path) -> list[str]:
    """Each import that reaches up: to a higher floor, or out of harness/ to tools / suites / tests."""
    out = []
    for source, targets in imports(root).items():
        here = floor_of(source)
        for target in sorted(targets):
            if target in ABOVE:
                out.append(f"{source} imports {target} (above every floor)")
            elif here is not None and (there := floor_of(target)) is not None and there > here:
                out.append(f"{source} ({FLOORS[here]}) imports {target} ({FLOORS[there]}), a higher floor")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def module_cycles(root: Path) -> list[list[str]]:
    graph = {m: {t for t in ts if t not in ABOVE} for m, ts in imports(root).items()}
    return cycles(graph)


def package_cycles(root: Path) -> list[list[str]]:
    """Cycles between packages (a folder and its own modules: harness.parity.ops, harness.env)."""
    known = modules(root)

    def package(m: str) -> str:
        return m if known[m].name == "__init__.py" else m.rpartition(".")[0]
    graph: dict[str, set[str]] = {}
    for source, targets in imports(root).items():
        for target in targets:
            if target not in ABOVE and package(target) != package(source):
                graph.setdefault(package(source), set()).add(package(target))
    return cycles(graph)


def crowded_folders(root: Path) -> list[str]:
    out = []
    for folder in sorted({p.parent for p in (root / "harness").rglob("*.py") if "__pycache__" not in p.parts}):
        count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
        if count > MAX_MODULES:
            out.append(f"{folder.relative_to(root)}: {count} modules (at most {MAX_MODULES}: group them in subpackages)")
    return out


# --------------------------------------------------------------------------- names and outcomes

def private_crossings(path: Path, known: set[str]) -> list[str]:
    """Private names of harness modules that ``path`` uses: imported by name, or read off a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
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
    return bad


def outcomes_by_hand(path: Path) -> list[str]:
    """Where a suite decides a test's outcome itself: an assert, or pytest.skip / fail / xfail / exit."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assert):
            out.append(f"line {node.lineno}: assert")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in OUTCOME_CALLS
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "pytest"):
            out.append(f"line {node.lineno}: pytest.{node.func.attr}")
    return out


# --------------------------------------------------------------------------- the rules on this tree

def test_harness_is_packages_on_floors():
    assert not misplaced(ROOT)
    assert {p.name for p in (ROOT / "harness").iterdir() if p.is_dir() and p.name != "__pycache__"} == set(FLOORS)


def test_no_import_reaches_a_higher_floor():
    assert not floor_violations(ROOT)


def test_no_import_cycle_between_modules_or_packages():
    assert not module_cycles(ROOT)
    assert not package_cycles(ROOT)


def test_no_folder_is_a_flat_list_of_prefixed_modules():
    assert not crowded_folders(ROOT)


def test_the_graph_sees_function_level_imports_and_sandbox_targets():
    """The rules read every import: the plugin reaches the workload sizing through a sandbox
    target string and the report reaches the claims table from inside functions."""
    graph = imports(ROOT)
    assert "harness.optim.workloads" in graph["harness.plugin.options"]
    assert "harness.optim.claims" in graph["harness.report.compare"]


@pytest.mark.parametrize("path", [*modules(ROOT).values(), *sorted((ROOT / "suites").rglob("*.py")),
                                  *sorted((ROOT / "tools").glob("*.py"))], ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_crosses_a_module(path):
    assert not private_crossings(path, set(modules(ROOT))), path


@pytest.mark.parametrize("path", sorted((ROOT / "suites").rglob("test_*.py")), ids=lambda p: p.name)
def test_a_suite_concludes_through_its_judges_only(path):
    """A suite's test body hands its judge's Verdict to record.conclude: an assert or a
    pytest.skip of its own would be a second, hand-made mapping from a result to pytest's
    outcome."""
    assert not outcomes_by_hand(path)


# --------------------------------------------------------------------------- each rule fails on a planted violation

def _plant(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    for floor in FLOORS:
        (root / "harness" / floor).mkdir(parents=True, exist_ok=True)
        (root / "harness" / floor / "__init__.py").touch()
    (root / "harness" / "__init__.py").touch()
    return root


def test_an_import_of_a_higher_floor_inside_a_function_is_caught(tmp_path):
    root = _plant(tmp_path, {
        "harness/core/low.py": """
            def later():
                from harness.report import page  # the report, from the ground floor
                return page
            """,
        "harness/report/page.py": "from harness.core import low\n",
        "harness/ops/runs.py": "TARGET = 'harness.plugin.hooks:run'\n",
        "harness/plugin/hooks.py": "def run(): pass\n",
        "harness/env/up.py": "import tests.conftest\n"})
    found = floor_violations(root)
    assert "harness.core.low (core) imports harness.report.page (report), a higher floor" in found
    assert "harness.ops.runs (ops) imports harness.plugin.hooks (plugin), a higher floor" in found
    assert "harness.env.up imports tests (above every floor)" in found
    assert not [f for f in found if f.startswith("harness.report.page")]   # down is fine


def test_a_cycle_between_modules_and_between_packages_is_caught(tmp_path):
    root = _plant(tmp_path, {
        "harness/parity/a/__init__.py": "", "harness/parity/b/__init__.py": "",
        "harness/parity/a/one.py": "from harness.parity.b import two\n",
        "harness/parity/b/two.py": "def f():\n    from harness.parity.a import three\n",
        "harness/parity/a/three.py": "",
        "harness/optim/x.py": "from . import y\n",
        "harness/optim/y.py": "def f():\n    from harness.optim import x\n"})
    assert module_cycles(root) == [["harness.optim.x", "harness.optim.y"]]
    assert package_cycles(root) == [["harness.parity.a", "harness.parity.b"]]


def test_a_crowded_folder_and_a_stray_module_are_caught(tmp_path):
    root = _plant(tmp_path, {**{f"harness/parity/m{i}.py": "" for i in range(MAX_MODULES + 1)},
                             "harness/loose.py": "", "harness/misc/x.py": ""})
    assert crowded_folders(root) == [f"harness/parity: {MAX_MODULES + 1} modules (at most {MAX_MODULES}: group "
                                     "them in subpackages)"]
    assert misplaced(root) == ["module outside a package: loose.py", "package on no floor: misc"]


def test_a_private_name_across_modules_and_a_hand_made_outcome_are_caught(tmp_path):
    suite = tmp_path / "test_s.py"
    suite.write_text("import pytest\nfrom harness.parity.ops import check\nfrom harness.core.records import _x\n\n"
                     "def test_x(record):\n    check._worse(None, {})\n    assert record\n"
                     "    pytest.skip('mine')\n    record.conclude(check.judge(None))\n")
    assert private_crossings(suite, set(modules(ROOT))) == ["line 3: from harness.core.records import _x",
                                                            "line 6: check._worse"]
    assert outcomes_by_hand(suite) == ["line 7: assert", "line 8: pytest.skip"]
