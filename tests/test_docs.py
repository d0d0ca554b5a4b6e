"""README.md and docs/, checked against the project they describe.

README is the user's path (short: what it does, the Mac quick start, the upgrade check, tox,
the pytest way, where to go next); docs/ holds the reference. What the code defines is read
from the code, and every name a user can type must be documented where this test says:
pytest's markers and the plugin's options (docs/suites.md), every MPS_COMPAT_* variable the
project reads (docs/), every ./compat command (docs/lock-and-tox.md), the matrix's symbols
(docs/report.md, from harness.report.matrix.LEGEND), every harness module on its floor and
every test-only plugin (docs/layout.md, docs/ci-and-self-tests.md). Links between the pages
resolve, to the file and to the heading. User-facing text points nowhere outside the project
and says what a source document is instead of naming it by number.

Each rule is a function of texts that returns what is wrong, and each is shown failing on a
planted fault, so a rule that could never fail does not pass for a check.
"""
from __future__ import annotations

import re
import tomllib
from pathlib import Path


from tests.conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 150
# What the lead generates and commits beside these pages (not written by hand).
GENERATED = ("docs/report-desktop.png",)


def pages(root: Path = ROOT) -> dict[str, str]:
    """README.md and every docs/*.md, by path relative to ``root``."""
    out = {"README.md": (root / "README.md").read_text(encoding="utf-8")}
    for path in sorted((root / "docs").glob("*.md")):
        out[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
    return out


def docs_text(root: Path = ROOT) -> str:
    return "\n".join(text for name, text in pages(root).items() if name.startswith("docs/"))


def prose(text: str) -> str:
    """``text`` without indented code blocks and inline code: what a reader reads as words."""
    kept = [line for line in text.splitlines() if not line.startswith("    ")]
    return re.sub(r"`[^`\n]*`", "", "\n".join(kept))


def code_spans(text: str) -> set[str]:
    """Every inline code span's content, and every word of the indented code blocks."""
    spans = set(re.findall(r"`([^`\n]+)`", text))
    for line in text.splitlines():
        if line.startswith("    "):
            spans.update(line.split())
    return spans


# --------------------------------------------------------------------------- links

def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def links(text: str) -> list[str]:
    """The targets of Markdown links and images, outside code."""
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", prose(text))


def broken_links(texts: dict[str, str], root: Path = ROOT) -> list[str]:
    """Relative links whose file is missing or whose #anchor is no heading of the target."""
    problems = []
    for name, text in texts.items():
        for target in links(text):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            resolved = (root / name).parent / path if path else root / name
            rel = Path(resolved.resolve().relative_to(root.resolve())).as_posix() if path else name
            if path and not resolved.exists():
                if rel not in GENERATED:
                    problems.append(f"{name}: link to {target}: no such file")
                continue
            if anchor:
                text_of = texts.get(rel) if rel in texts else resolved.read_text(encoding="utf-8")
                if anchor not in anchors(text_of):
                    problems.append(f"{name}: link to {target}: no heading #{anchor} in {rel}")
    return problems


def test_every_link_between_the_pages_resolves():
    assert broken_links(pages()) == []


def test_the_generated_picture_is_there():
    """The report's picture, which README shows, is committed beside it."""
    missing = [name for name in GENERATED if not (ROOT / name).is_file()]
    assert missing == [], f"linked from README/docs but not in the tree: {missing}"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Its part: one\n", encoding="utf-8")
    good = {"README.md": "[a](docs/a.md) [part](docs/a.md#its-part-one) `[not](a link)`\n",
            "docs/a.md": "# A page\n\n## Its part: one\n"}
    assert broken_links(good, tmp_path) == []
    bad = {"README.md": "[a](docs/b.md) [part](docs/a.md#its-part)\n", "docs/a.md": good["docs/a.md"]}
    assert broken_links(bad, tmp_path) == ["README.md: link to docs/b.md: no such file",
                                           "README.md: link to docs/a.md#its-part: no heading #its-part in docs/a.md"]


# --------------------------------------------------------------------------- README: the user's path

QUICK_START = (                        # in this order: what a Mac user does first
    'python3 -c "import platform; print(platform.machine())"',
    "./compat suites -m env",
    "./compat suites\n",
    "reports/matrix.html",
    "./compat env",
)
USER_COMMANDS = ("./compat baseline", "./compat candidate 'torch==", "reports/upgrade-check.md", "./compat tox",
                 "pytest suites/ -m mps")


def readme_problems(text: str) -> list[str]:
    problems = []
    lines = text.count("\n")
    if lines > README_MAX_LINES:
        problems.append(f"README is {lines} lines; the reference belongs in docs/ (at most {README_MAX_LINES})")
    at = -1
    for step in QUICK_START:
        found = text.find(step, at + 1)
        if found < 0:
            problems.append(f"quick start: {step.strip()!r} missing, or out of order")
        else:
            at = found
    if "arm64" not in text:
        problems.append("quick start: never says the Python must print arm64")
    problems += [f"README does not show {cmd!r}" for cmd in USER_COMMANDS if cmd not in text]
    if not re.search(r"!\[[^\]]+\]\(docs/report-desktop\.png\)", text):
        problems.append("README has no picture of the report (docs/report-desktop.png)")
    for page in sorted(p.name for p in DOCS.glob("*.md")):
        if f"(docs/{page})" not in text:
            problems.append(f"README's 'where to go next' does not link docs/{page}")
    return problems


def test_readme_is_the_users_path():
    assert readme_problems(README.read_text(encoding="utf-8")) == []


def test_a_readme_that_buries_the_user_is_found():
    text = README.read_text(encoding="utf-8")
    assert any("lines" in p for p in readme_problems(text + "filler\n" * README_MAX_LINES))
    swapped = text.replace("./compat suites -m env", "./compat suites -m XX", 1).replace("./compat env", "./compat XX")
    assert any("./compat suites -m env" in p for p in readme_problems(swapped))
    assert any("picture" in p for p in readme_problems(text.replace("docs/report-desktop.png", "x.png")))


# --------------------------------------------------------------------------- words a user should not need

UPWARD = re.compile(r"(?<![\w./])((?:\.\./)+)([\w.-]*)")   # ../x, ../../x: a path that climbs
NUMBERED_SOURCE = re.compile(r"\bseeds?\s*(?:#\s*)?0\d\d\b|\bthe seeds\b", re.I)   # "seed 003", "the seeds"


def inside(root: Path, path: Path) -> bool:
    """``path`` (relative steps resolved) is in the project, and there."""
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return path.exists()


def wording_problems(texts: dict[str, str], root: Path = ROOT) -> list[str]:
    problems = []
    for name, text in texts.items():
        for lineno, line in enumerate(text.splitlines(), 1):
            for match in UPWARD.finditer(line):
                if not inside(root, (root / name).parent / match.group(1) / match.group(2)):
                    problems.append(f"{name}:{lineno}: a path outside the project: {line.strip()}")
        for match in NUMBERED_SOURCE.finditer(prose(text)):
            problems.append(f"{name}: {match.group(0)!r}: say what the document is (ids in `code` may keep it)")
    return problems


def test_user_facing_text_stays_in_the_project_and_names_no_document_by_number():
    assert wording_problems(pages()) == []


def test_jargon_and_outside_paths_are_found():
    assert wording_problems({"README.md": "measured by seed 003 (`optim/seed_003_path`)\n"
                                         "    python -m tools.rejudge ../elsewhere/recorded/x\n"}) == [
        "README.md:2: a path outside the project: python -m tools.rejudge ../elsewhere/recorded/x",
        "README.md: 'seed 003': say what the document is (ids in `code` may keep it)"]
    assert wording_problems({"docs/x.md": "check `optim/seed_003_path_never_raises_peak_memory`, "
                                          "[schema](../harness/report/schema.py), `.../known-bug`\n"}) == []
    assert wording_problems({"docs/x.md": "see ../elsewhere/seeds\n"}) == [
        "docs/x.md:1: a path outside the project: see ../elsewhere/seeds"]


# --------------------------------------------------------------------------- every name a user can type

def markers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return [m.split(":")[0].strip() for m in config["tool"]["pytest"]["ini_options"]["markers"]]


def plugin_options() -> list[str]:
    source = (ROOT / "harness" / "plugin" / "options.py").read_text(encoding="utf-8")
    return re.findall(r"addoption\(\s*\"(--[\w-]+)\"", source)


def compat_commands() -> list[str]:
    source = (ROOT / "compat").read_text(encoding="utf-8")
    return [c for c in re.findall(r"^  ([a-z]+)\)", source, re.M)]


def env_variables() -> list[str]:
    """Every MPS_COMPAT_* name in the project's code, configuration and scripts."""
    files = [ROOT / "compat", ROOT / "tox.ini", ROOT / ".ci" / "run", ROOT / "conftest.py"]
    for folder in ("harness", "tools", "tests", "suites", "benchmarks", "scripts", ".github"):
        files += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in (".py", ".sh", ".yml", "")
                  and "__pycache__" not in p.parts and "fixtures" not in p.parts]
    names = set()
    for path in files:
        if path.is_file() and path != Path(__file__).resolve():
            names.update(re.findall(r"\bMPS_COMPAT_[A-Z_]*[A-Z]\b", path.read_text(encoding="utf-8", errors="replace")))
    return sorted(names)


def undocumented(names, text: str) -> list[str]:
    """The names that no code span of ``text`` mentions (a span may hold more: `MPS_COMPAT_X=a|b`)."""
    spans = code_spans(text)
    return [n for n in names if not any(re.match(rf"{re.escape(n)}(?![\w-])", s) for s in spans)]


def test_every_marker_and_plugin_option_is_in_the_suites_page():
    text = (DOCS / "suites.md").read_text(encoding="utf-8")
    assert markers() and plugin_options()
    assert undocumented(markers(), text) == []
    assert undocumented(plugin_options(), text) == []


def test_every_marker_is_named_in_the_readme():
    assert undocumented(markers(), README.read_text(encoding="utf-8")) == []


def test_every_compat_command_is_documented():
    text = (DOCS / "lock-and-tox.md").read_text(encoding="utf-8")
    assert set(compat_commands()) >= {"setup", "suites", "test", "tox", "baseline", "candidate", "report"}
    assert undocumented([f"./compat {c}" for c in compat_commands()], text) == []


def test_every_environment_variable_the_project_reads_is_documented():
    names = env_variables()
    assert "MPS_COMPAT_SANDBOX_PRELOAD" in names and "MPS_COMPAT_PERF_FAULTS" in names
    assert undocumented(names, docs_text()) == []


def test_every_fault_switch_is_in_the_faults_table():
    text = (DOCS / "ci-and-self-tests.md").read_text(encoding="utf-8")
    table = text[text.index("## Faults injected on purpose"):]
    switches = [n for n in env_variables() if re.search(r"FAULT|SABOTAGE|PERTURB|REPRODUCE|PRELOAD", n)]
    assert len(switches) >= 9, switches
    assert undocumented(switches, table) == []


def test_every_test_only_plugin_is_documented():
    helpers = sorted(p.stem for p in (ROOT / "tests").glob("*.py")
                     if not p.name.startswith("test_") and p.name not in ("conftest.py", "__init__.py"))
    text = docs_text()
    assert "standins" in helpers
    assert [h for h in helpers if f"{h}.py" not in text and f"tests.{h}" not in text] == []


def test_an_undocumented_name_is_found():
    text = "Markers: `cpu`, `mps`.\n\n    pytest suites/ --device cpu\n\n`MPS_COMPAT_MODEL_FAULT=nan-half|gqa`\n"
    assert undocumented(["cpu", "mps", "--device", "MPS_COMPAT_MODEL_FAULT"], text) == []
    assert undocumented(["cuda", "--workload", "MPS_COMPAT_MODEL"], text) == ["cuda", "--workload", "MPS_COMPAT_MODEL"]
    assert undocumented(["compile"], "the `torch.compile` family") == ["compile"]


# --------------------------------------------------------------------------- the report's symbols

def legend_rows(text: str) -> dict[str, str]:
    """symbol -> meaning, from the page's symbols table."""
    part = text[text.index("## Cells: symbols"):]
    part = part[:part.index("\n## ", 1)] if "\n## " in part[1:] else part
    return {m.group(1).strip(): m.group(2).strip() for m in re.finditer(r"^\| (\S+) \| (.+?) \|$", part, re.M)
            if m.group(1) not in ("symbol", "---")}


def legend_problems(rows: dict[str, str], legend) -> list[str]:
    problems = [f"symbol {sym} ({meaning}) is not in docs/report.md" for _, sym, meaning in legend if sym not in rows]
    problems += [f"docs/report.md: {sym} is no symbol of the matrix" for sym in rows
                 if sym not in {s for _, s, _ in legend}]
    for _, sym, meaning in legend:
        if sym in rows and not rows[sym].startswith(meaning.split(",")[0].split(":")[0].split(" (")[0]):
            problems.append(f"docs/report.md: {sym} says {rows[sym]!r}, the matrix says {meaning!r}")
    return problems


def test_the_symbols_table_is_the_matrix_legend():
    from harness.report.matrix import LEGEND
    assert legend_problems(legend_rows((DOCS / "report.md").read_text(encoding="utf-8")), LEGEND) == []


def test_a_wrong_symbols_table_is_found():
    legend = (("pass", "✓", "passed (ran natively)"), ("fail", "✗", "failed"))
    assert legend_problems({"✓": "passed (ran natively)", "✗": "failed"}, legend) == []
    assert legend_problems({"✓": "passed (ran natively)", "E": "errored"}, legend) == [
        "symbol ✗ (failed) is not in docs/report.md", "docs/report.md: E is no symbol of the matrix"]
    assert legend_problems({"✓": "skipped", "✗": "failed"}, legend) == [
        "docs/report.md: ✓ says 'skipped', the matrix says 'passed (ran natively)'"]


# --------------------------------------------------------------------------- the layout page

def layout_problems(text: str, root: Path = ROOT) -> list[str]:
    """Every floor in order, and every module and subpackage of harness/ named on the layout page."""
    from tests.test_layout import FLOORS
    problems = []
    listed = re.findall(r"^    floor (\d)  harness/(\w+)/", text, re.M)
    if [name for _, name in listed] != list(FLOORS) or [int(n) for n, _ in listed] != list(range(len(FLOORS))):
        problems.append(f"docs/layout.md's floors {listed} are not {list(FLOORS)}, lowest first")
    for path in sorted((root / "harness").rglob("*.py")):
        if "__pycache__" in path.parts or path.name == "__init__.py":
            continue
        if path.name not in text:
            problems.append(f"docs/layout.md does not name {path.relative_to(root).as_posix()}")
    for package in sorted(p for p in (root / "harness").glob("*/*") if (p / "__init__.py").is_file()):
        if f"{package.name}/" not in text:
            problems.append(f"docs/layout.md does not name the subpackage {package.relative_to(root).as_posix()}/")
    return problems


def test_the_layout_page_names_every_floor_and_module():
    assert layout_problems((DOCS / "layout.md").read_text(encoding="utf-8")) == []


def test_a_stale_layout_page_is_found():
    text = (DOCS / "layout.md").read_text(encoding="utf-8")
    assert any("records.py" in p for p in layout_problems(text.replace("records.py", "record_file.py")))
    swapped = text.replace("floor 1  harness/env/", "floor 1  harness/ops/").replace("floor 2  harness/ops/",
                                                                                       "floor 2  harness/env/")
    assert any("floors" in p for p in layout_problems(swapped))


# --------------------------------------------------------------------------- each suite has its section

def test_every_suite_has_its_section():
    text = (DOCS / "suites.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\w+):", text, re.M)
    suites = sorted(p.name for p in (ROOT / "suites").iterdir() if p.is_dir() and not p.name.startswith("__"))
    assert suites and [s for s in suites if s not in headings] == []


# --------------------------------------------------------------------------- matrix.json

def schema_fields_undescribed(text: str, schema: dict) -> list[str]:
    """The top-level fields of matrix.json's schema that the matrix.json section does not describe."""
    part = text[text.index("## matrix.json"):]
    part = part[:part.index("\n## ", 1)]
    described = set(re.findall(r"^\| `(\w+)` \|", part, re.M))
    return [f for f in schema["properties"] if f not in described]


def test_every_field_of_matrix_json_is_described():
    import json
    schema = json.loads((ROOT / "harness" / "report" / "matrix.schema.json").read_text(encoding="utf-8"))
    text = (DOCS / "report.md").read_text(encoding="utf-8")
    assert "(../harness/report/matrix.schema.json)" in text
    assert schema_fields_undescribed(text, schema) == []


def test_an_undescribed_field_is_found():
    text = "## matrix.json\n\n| field | what |\n|---|---|\n| `cells` | records |\n\n## Next\n"
    assert schema_fields_undescribed(text, {"properties": {"cells": {}, "verdicts": {}}}) == ["verdicts"]
