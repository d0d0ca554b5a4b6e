"""The matrix over many hosts: columns grouped by host and ordered by torch version, the
version history, and the HTML page itself in headless Chromium (it renders, its filters
and details panel work, hostile strings stay text), with the render check shown able to
fail."""
import json
import re
from html.parser import HTMLParser

import pytest

from tests.conftest import CHROMIUM, needs_chromium, load_facts, no_kernels
from tests.test_report import rec, write_run
from harness.report import sections as report_sections
from tools import render_check, report

pytestmark = pytest.mark.usefixtures("one_browser")   # one Chromium for the module (tests/conftest.py)


# host, recorded facts, torch versions in the order their runs were written, targets
HOSTS = (("studio", "apple_silicon_native", ("2.10.0", "2.8.0", "2.9.0"), ("cpu", "mps")),
         ("linux-ci", "linux_x86_64", ("2.10.0", "2.8.0"), ("cpu",)))
# One check per suite, with the fields of its records ...
CHECKS = {"env/threads": {"metrics": {"threads": 2}},
          "ops/softmax": {"category": "native", "variant": "float16/forward"},
          "parity/matmul": {"category": "n/a", "metrics": {"margin": 0.2, "max_abs_err": 1e-4}},
          "optim/adafactor": {"category": "holds", "variant": "memory",
                              "metrics": {"mem_ratio": 0.5, "ci_low": 0.5, "ci_high": 0.5, "bound": 0.9}}}
# ... every cell passes but these: (check, host, target, torch) -> the fields that differ.
EXCEPTIONS = {("ops/softmax", "studio", "mps", "2.8.0"): {"status": "fail", "category": "unsupported"},
              ("parity/matmul", "studio", "mps", "2.10.0"): {"status": "fail", "metrics": {"margin": 3.5}},
              ("env/threads", "linux-ci", "cpu", "2.8.0"): {"status": "fail", "reason": "oversubscribed"}}
# (host, torch, target) of each column, in the order the matrix shows them
COLUMNS = [("linux-ci", "2.8.0", "cpu"), ("linux-ci", "2.10.0", "cpu"), ("studio", "2.8.0", "cpu"),
           ("studio", "2.8.0", "mps"), ("studio", "2.9.0", "cpu"), ("studio", "2.9.0", "mps"),
           ("studio", "2.10.0", "cpu"), ("studio", "2.10.0", "mps")]


def _records(host: str, version: str, targets: tuple) -> list[dict]:
    out = []
    for check, fields in CHECKS.items():
        suite, subject = check.split("/")
        for target in targets:
            record = {**fields, **EXCEPTIONS.get((check, host, target, version), {})}
            out.append(rec(subject, record.pop("status", "pass"), target=target, suite=suite, **record))
    return out


def _report(runs, out) -> tuple[dict, str, str]:
    assert report.main([str(runs), "--out", str(out), "--kernels", no_kernels(out)]) == 0
    return (json.loads((out / "matrix.json").read_text()), (out / "matrix.html").read_text(encoding="utf-8"),
            (out / "matrix.md").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def many_hosts(tmp_path_factory):
    """Two hosts (a Mac with cpu + mps, a Linux box with cpu), two or three torch versions each."""
    runs = tmp_path_factory.mktemp("runs")
    for host, facts, versions, targets in HOSTS:
        for v in versions:
            write_run(runs / f"{host}-{v}.jsonl", {**load_facts(facts), "host": host}, _records(host, v, targets),
                      run=f"R-{host}-{v}", torch_v=v)
    return _report(runs, tmp_path_factory.mktemp("out"))


class Tables(HTMLParser):
    """Every table of a page: its attributes and its rows as (cell text, cell attributes)."""

    def __init__(self, page: str):
        super().__init__()
        self.tables: list[tuple[dict, list[list[tuple[str, dict]]]]] = []
        self._cell: list | None = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append((dict(attrs), []))
        elif tag == "tr" and self.tables:
            self.tables[-1][1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = [[], dict(attrs)]
        elif tag == "br" and self._cell:
            self._cell[0].append(" ")

    def handle_data(self, data):
        if self._cell:
            self._cell[0].append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell:
            self.tables[-1][1][-1].append(("".join(self._cell[0]), self._cell[1]))
            self._cell = None

    def matrix(self, suite: str) -> list[list[tuple[str, dict]]]:
        return next(rows for attrs, rows in self.tables if attrs.get("data-suite") == suite)


def test_columns_are_grouped_by_host_and_ordered_by_torch_version(many_hosts):
    doc, page, md = many_hosts
    cols_of = [(c["label"].split(" ")[0], c["label"].split(" torch ")[1].split(" ")[0], c["target"])
               for c in doc["columns"]]
    assert cols_of == COLUMNS  # 2.9 before 2.10: numeric, not text order
    linux, mac = doc["columns"][0]["host"], doc["columns"][2]["host"]
    assert linux.startswith("linux-ci") and "AMD EPYC" in linux and mac.startswith("studio") and "M3 Pro" in mac
    hosts, cols, bars, *_ = Tables(page).matrix("env")
    assert [(text, a.get("colspan")) for text, a in hosts] == [("", "1"), (linux, "2"), (mac, "6")]
    assert [text for text, _ in cols] == ["check"] + [f"torch {v} {t}" for _, v, t in COLUMNS]
    assert [a.get("data-target") for _, a in cols[1:]] == [t for _, _, t in COLUMNS]
    assert [text for text, _ in bars] == ["results"] + [""] * len(COLUMNS)  # a bar per column, drawn, no text
    assert re.search(r"<th data-target='cpu'><div class='bar' title='✓ pass: 1'><span class='pass'", page)
    assert (f"Columns by host: **{linux}**: torch 2.8.0 cpu, torch 2.10.0 cpu; **{mac}**: torch 2.8.0 cpu, "
            "torch 2.8.0 mps, torch 2.9.0 cpu, torch 2.9.0 mps, torch 2.10.0 cpu, torch 2.10.0 mps") in md


def test_version_history_gives_first_and_last_working_versions(many_hosts):
    doc, page, md = many_hosts
    got = {(h["check"], h["host"], h["target"]): (h["first_works"], h["last_worked"]) for h in doc["history"]}
    assert got == {("ops/softmax", "studio", "mps"): ("2.9.0", None),
                   ("parity/matmul", "studio", "mps"): (None, "2.9.0"),
                   ("env/threads", "linux-ci", "cpu"): ("2.10.0", None)}
    section = md.split("## Across torch versions: where a result changed")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "/" in line.split("|")[1]]
    assert [r.split("|")[1].strip() for r in rows] == ["parity/matmul", "env/threads", "ops/softmax"]  # breaks first
    assert "2.8.0 ✓ → 2.9.0 ✓ → 2.10.0 ✗" in rows[0] and "regression: worked in 2.9.0, broke in 2.10.0" in rows[0]
    assert "2.8.0 ⊘ → 2.9.0 ✓ → 2.10.0 ✓" in rows[2] and "fixed in 2.9.0" in rows[2]


@pytest.mark.parametrize("statuses,note", [
    ({"2.6.0": "pass", "2.8.0": "fail", "2.10.0": "pass"},
     "fixed in 2.10.0; it had regressed before (worked in 2.6.0, broke in 2.8.0)"),
    ({"2.6.0": "pass", "2.8.0": "fail", "2.10.0": "pass", "2.11.0": "error"},
     "regression: worked in 2.10.0, broke in 2.11.0"),
    ({"2.6.0": "xfail", "2.8.0": "pass"}, "fixed in 2.8.0"),
    ({"2.6.0": "pass", "2.8.0": "cpu-fallback"}, "works in every version tried; the result changed"),
    ({"2.6.0": "fail", "2.8.0": "crash"}, "never worked here; the way it fails changed"),
])
def test_the_history_note_says_what_happened(statuses, note):
    from tests.test_matrix_history import history_of
    assert report_sections.history_note(history_of(statuses)) == note


def test_charts_of_ratios_and_worst_margins_are_embedded(many_hosts):
    doc, page, md = many_hosts
    assert "](optim_ratios.png)" in md and "](parity_worst_margins.png)" in md
    images = re.findall(r"<img [^>]*>", page)
    assert len(images) == 2 and all("src='data:image/png;base64,iVBORw0KGgo" in i for i in images)


# ------------------------------------------------------------------ in headless Chromium

def opened(page: str, tmp_path, width: int = 1400, name: str = "page.html") -> render_check.Opened:
    """The page open in headless Chromium (Playwright), rendered, for a test to act on like a reader."""
    path = tmp_path / name
    path.write_text(page, encoding="utf-8")
    return render_check.open_page(CHROMIUM, path, width, 900)


@needs_chromium
def test_the_page_renders_in_headless_chromium(many_hosts, tmp_path, capsys):
    doc, page, _ = many_hosts
    (tmp_path / "matrix.html").write_text(page, encoding="utf-8")
    assert render_check.main([str(tmp_path / "matrix.html")]) == 0
    line = capsys.readouterr().out.strip()
    assert "works in headless Chromium at 1400x900 and 420x900, no JavaScript errors" in line
    rows = sum(len(t[1]) - 1 for t in Tables(page).tables if t[0].get("class") != "matrix") + sum(
        len(t[1]) - 3 for t in Tables(page).tables if t[0].get("class") == "matrix")
    assert f" {rows:,} rows;" in line and line.count("\n") == 0


FILTER_AND_CLICK = """() => {
const out = {}, all = sel => Array.from(document.querySelectorAll(sel));
document.querySelector("input[name=target][value=mps]").click();
out.mpsHidden = all("table.matrix th[data-target=mps]").every(th => th.hidden);
out.macSpan = document.querySelector("table.matrix[data-suite=env] th.host[data-group='1']").colSpan;
document.querySelector("input[name=target][value=mps]").click();
all("input[name=key]").forEach(box => { if (!/^(fail|unsupported)$/.test(box.value)) { box.click(); } });
out.matrixShown = all("table.matrix tbody tr").filter(tr => !tr.hidden).length;
out.matrixRows = all("table.matrix tbody tr").length;
document.querySelector("table.matrix td[data-k=fail]").click();
out.panelOpen = !document.getElementById("details").hidden;
out.panel = all("#details tr").map(tr => tr.textContent).join("|");
return out;
}"""


@needs_chromium
def test_filters_hide_columns_and_rows_and_a_click_shows_every_metric(many_hosts, tmp_path):
    with opened(many_hosts[1], tmp_path) as o:
        r = o.page.evaluate(FILTER_AND_CLICK)
        assert not o.all_errors()
    assert r["mpsHidden"] and r["macSpan"] == 3
    assert (r["matrixShown"], r["matrixRows"]) == (3, 4)  # optim passes everywhere
    assert r["panelOpen"]
    label = next(c["label"] for c in many_hosts[0]["columns"] if c["label"].startswith("linux-ci")
                 and " torch 2.8.0 " in c["label"])
    assert r["panel"] == (f"checkenv/threads|column{label}|result✗ fail|"
                          "categoryn/a|reasonoversubscribed|duration s0.1|metrics1 below|threads2")


PAYLOADS = ("</script><script>alert(1)</script>",
            "<img src=x onerror=\"document.documentElement.setAttribute('data-pwned','1')\">",
            "\"quotes\" 'single' `back` &amp; $x^2$",
            "中文 🚀 עברית مرحبا",
            "line\u2028separator\u2029paragraph")
HOSTILE = " ".join(PAYLOADS)
LONG_REASON = HOSTILE + " ρ" * 2500


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """Hostile host name, check ids, reasons, metric names and values, over two torch versions."""
    runs = tmp_path_factory.mktemp("hostile-runs")
    facts = {**load_facts("apple_silicon_native"), "host": "evil " + HOSTILE}
    for v, status in (("2.8.0", "pass"), ("2.9.0", "fail")):
        write_run(runs / f"{v}.jsonl", facts, [
            rec("x " + HOSTILE, status, target="mps", suite="parity", reason=LONG_REASON,
                metrics={"margin": 2.0, HOSTILE: HOSTILE}),
            rec("adafactor", "pass", suite="optim", variant=HOSTILE,
                metrics={"mem_ratio": 0.5, "ci_low": 0.4, "ci_high": 0.6, "bound": 0.9, "source": HOSTILE})],
            run=f"R{v}", torch_v=v)
    return _report(runs, tmp_path_factory.mktemp("hostile-out"))


def test_hostile_strings_are_escaped_in_the_page_source(hostile):
    doc, page, _ = hostile
    assert page.count("<script") == 3 and "<script>alert" not in page and "<img src=x" not in page
    images = re.findall(r"<img[^>]*>", page)
    assert images and all(i.startswith("<img alt='") and "src='data:image/png;base64," in i for i in images)
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page and "onerror=&quot;document" in page
    assert "\u2028" not in page and "\u2029" not in page and "&#x2028;" in page
    assert "中文 🚀 עברית مرحبا" in page
    data = page.split("<script type='application/json' id='records'>")[1].split("</script>")[0]
    assert not set("<>&\u2028\u2029") & set(data) and "\\u003c/script\\u003e" in data
    assert LONG_REASON in [r["reason"] for r in json.loads(data)]  # the 5,000-character reason, whole


HOSTILE_PROBE = """() => {
const cell = document.querySelector("table.matrix[data-suite=parity] td[data-i]");
cell.click();
const shown = document.querySelector("#details table").rows;
const records = JSON.parse(document.getElementById("records").textContent);
return {reasonIsText: shown[4].cells[1].textContent === records[Number(cell.getAttribute("data-i"))].reason,
        hostIsText: document.querySelector("th.host").textContent.indexOf("<img src=x onerror=") >= 0,
        scripts: document.scripts.length, pwned: document.documentElement.hasAttribute("data-pwned"),
        foreignImages: Array.from(document.images).filter(i => i.src.indexOf("data:image/png;base64,") !== 0).length};
}"""


@needs_chromium
def test_hostile_strings_stay_text_in_headless_chromium(hostile, tmp_path):
    with opened(hostile[1], tmp_path) as o:
        r = o.page.evaluate(HOSTILE_PROBE)
        o.page.fill("#search", "</script>")  # the search reads the same strings, as text
        o.page.wait_for_function(render_check.ANSWERED, arg="</script>")
        found = o.page.evaluate("() => document.getElementById('search-count').getAttribute('data-count')")
        assert not o.all_errors()
    assert not r["pwned"] and r["scripts"] == 3 and r["foreignImages"] == 0  # the page's three scripts
    assert r["reasonIsText"] and r["hostIsText"]
    assert int(found) >= 1


# ------------------------------------------------------------------ the render check can fail

BREAKAGES = [
    pytest.param(lambda p: p.replace("</body>", "<script>notDefinedAnywhere();</script></body>"),
                 "JavaScript error: ReferenceError: notDefinedAnywhere is not defined", id="js-error"),
    pytest.param(lambda p: p.replace("function refresh() {", "function refresh() {{", 1),
                 "JavaScript error: SyntaxError", id="syntax-error"),
    pytest.param(lambda p: p.replace('root.setAttribute("data-rendered", "yes");', "", 1),
                 "no data-rendered marker", id="no-marker"),
    pytest.param(lambda p: re.sub(r"(<table class='matrix'[^>]*>.*?<tbody>).*?(</tbody>)", r"\1\2", p, count=1,
                                  flags=re.S), "1 of 4 matrix table(s) have no data rows", id="empty-matrix"),
]


@needs_chromium
@pytest.mark.parametrize("breakage,says", BREAKAGES)
def test_the_render_check_fails_on_a_broken_page(many_hosts, tmp_path, capsys, breakage, says):
    page = many_hosts[1]
    broken = breakage(page)
    assert broken != page
    (tmp_path / "broken.html").write_text(broken, encoding="utf-8")
    assert render_check.main([str(tmp_path / "broken.html"), "--timeout", "10"]) == 1
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


@needs_chromium
def test_a_render_that_takes_too_long_is_stopped_and_fails(many_hosts, tmp_path, capsys):
    (tmp_path / "page.html").write_text(many_hosts[1], encoding="utf-8")
    assert render_check.main([str(tmp_path / "page.html"), "--timeout", "0.01"]) == 1
    assert "Chromium did not finish within 0.01 s" in capsys.readouterr().err


def test_without_chromium_the_render_check_says_so_and_exits_2(tmp_path, capsys):
    (tmp_path / "page.html").write_text("<!DOCTYPE html><html></html>")
    assert render_check.main([str(tmp_path / "page.html"), "--chromium", str(tmp_path / "no-such-browser")]) == 2
    err = capsys.readouterr().err
    assert "Chromium not found" in err and err.count("\n") == 1
    assert render_check.main([str(tmp_path / "absent.html")]) == 2
