"""The report's page as a reader meets it, in headless Chromium (Playwright driving the system's
browser): the verdict cards on the first screen at desktop and phone width, the table of
contents, folded long lists, the search box, the filters on every table, no sideways overflow,
no glyph without a font; the render check passing on a small report and on the recorded H100
runs, and failing, with the right line, on a page broken in each of the ways it looks for."""
import json
import re
import shutil
import subprocess

import pytest

from harness.report import charts, page as report_page
from harness.report.matrix import LEGEND
from harness.report.render import render_html
from harness.report.sections import Cell, Section
from harness.report.verdict import Aspect, Verdict
from tests.conftest import recorded_h100, CHROMIUM, needs_chromium, load_facts, no_kernels
from tests.test_report import rec, write_run
from tools import render_check, report

H100 = recorded_h100()   # real hardware, kept in tests/fixtures/recorded
pytestmark = pytest.mark.usefixtures("one_browser")   # one Chromium for the module (tests/conftest.py)


# ------------------------------------------------------------------ a page of known sections

def _record(check: str, status: str = "fail", target: str = "cpu", reason: str = "", **metrics) -> dict:
    return {"check": check, "suite": check.split("/")[0], "target": target, "status": status, "category": "n/a",
            "reason": reason, "metrics": metrics, "duration_s": 0.1}


def _result(record: dict, where: str) -> Cell:
    symbol = {"fail": "✗", "pass": "✓"}[record["status"]]
    return Cell(f"{symbol} {record['status']}", record["status"], record["reason"], record, where)


FAILURES = 60            # rows of the long list: more than page.FOLD_ROWS, so it starts folded
NEEDLE = "env/needle-check"


def known_sections() -> list[Section]:
    """Sections made here, not by sections.py: every kind and field the page draws."""
    failures = []
    for i in range(FAILURES):
        suite, target = ("parity" if i < FAILURES // 2 else "ops"), ("cpu" if i % 2 == 0 else "mps")
        r = _record(f"{suite}/op{i:02d}/float32", target=target, reason=f"off by {i} ulp", margin=1.5 + i)
        failures.append([r["check"], f"h1 {target}", _result(r, f"h1 {target}"), r["reason"]])
    failures.append(["a row with no record", "", "", "nothing behind it"])
    needle = _record(NEEDLE, status="pass", reason="unique-reason-xyz", threads=2)
    cards = [
        Verdict("h1/cpu", "host one · torch 2.8.0 · cpu", "host one: AMD EPYC, Linux x86_64", "bad", "not fit: 60 fail",
                [Aspect("environment", "good", "fit for cpu"),
                 Aspect("numerics", "bad", "60 checks fail", [f"op{i:02d}: off" for i in range(30)], "failures"),
                 Aspect("ops", "warn", "2 ops fall back to the CPU", ["aten::x", "aten::y"], "no-such-section"),
                 Aspect("known bugs", "none", "not run here")],
                partial="partial: ran -m env only", older_judge="3 records by an older judge, judged again"),
        Verdict("h1/mps", "host one · torch 2.8.0 · mps", "host one: Apple M3 Pro", "good", "fit",
                [Aspect("environment", "good", "fit for mps", anchor="search")]),
    ]
    return [
        Section("Verdict per machine", [], [], kind="verdicts", verdicts=cards, anchor="verdicts",
                intro="One card per column."),
        Section("Legend", ["symbol", "result", "meaning"], [[s, k, t] for k, s, t in LEGEND], kind="legend", level=3),
        Section("Every failure", ["check", "column", "result", "reason"], failures, anchor="failures"),
        Section("Short list", ["check", "column", "result", "reason"],
                [[NEEDLE, "h1 cpu", _result(needle, "h1 cpu"), needle["reason"]]], level=3),
        Section("Notes", ["note"], [["first notes"]]),
        Section("Notes", ["note"], [["second notes, same title"]], fold=True, level=3),
        Section("Asks for a reserved id", ["x"], [["y"]], anchor="search", level=3),
        Section("A chart", ["a"], [["b"]], image=charts.margin_chart([("a check", 2.0, "fail")], title="Two words"),
                image_name="c.png", caption="Two words"),
        Section("Nothing here", [], [], empty="Run `python -m tools.kernels --save` to add them."),
    ]


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    path = tmp_path_factory.mktemp("known") / "page.html"
    path.write_text(render_html(known_sections(), ["runs/a.jsonl", "runs/b <b>.jsonl"]), encoding="utf-8")
    return path


def _open(path, width: int = 1400) -> render_check.Opened:
    return render_check.open_page(CHROMIUM, path, width, 900)


DOM = """() => {
  const all = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const text = el => el ? el.textContent.replace(/\\s+/g, ' ').trim() : null;
  return {
    ids: all('main section[id]').map(s => s.id),
    open: Object.fromEntries(all('main section[id]').map(s => [s.id, s.querySelector(':scope > details').open])),
    toc: all('#toc > ul > li').map(li => [li.querySelector(':scope > a').getAttribute('href'),
                                          all(':scope > ul > li > a', li).map(a => a.getAttribute('href'))]),
    cards: all('#verdicts article.card').map(c => ({
      cls: c.className, title: text(c.querySelector('.card-title')), headline: text(c.querySelector('.headline')),
      notes: all('.note', c).map(text),
      idle: c.querySelector('.idle summary') && text(c.querySelector('.idle summary')),
      idleLines: all('.idle li', c).map(text),
      aspects: all('li.aspect', c).map(a => ({cls: a.className, state: text(a.querySelector('.state')),
        links: all(':scope > a', a).map(x => x.getAttribute('href')),
        detail: a.querySelector('details') ? [a.querySelector('details').open, all('details li', a).length] : null}))})),
    legend: all('ul.legend li').map(li => [li.className, text(li.querySelector('b')), li.title]),
    figure: [text(document.querySelector('figcaption')), document.querySelector('figure img').alt],
    code: document.querySelector('#nothing-here code') && text(document.querySelector('#nothing-here code')),
    firstScreen: document.getElementById('verdicts').getBoundingClientRect().top,
  };
}"""


@needs_chromium
def test_the_sections_as_the_page_draws_them(known):
    with _open(known) as o:
        dom = o.page.evaluate(DOM)
        assert not o.all_errors()
    # ids: the anchor asked for, else the title's slug; a taken or reserved one gets a suffix
    assert dom["ids"] == ["verdicts", "legend", "failures", "short-list", "notes", "notes-2", "search-2", "a-chart",
                          "nothing-here"]
    # the contents nest by level: the level-3 sections under the level-2 one before them
    assert dom["toc"] == [["#verdicts", ["#legend"]], ["#failures", ["#short-list"]],
                          ["#notes", ["#notes-2", "#search-2"]], ["#a-chart", []], ["#nothing-here", []]]
    # folded: the section that asks, and the list longer than FOLD_ROWS; not the short ones
    assert {k for k, v in dom["open"].items() if not v} == {"failures", "notes-2"}
    assert dom["firstScreen"] < 900


@needs_chromium
def test_a_verdict_card_per_column_with_its_aspects_notes_and_links(known):
    with _open(known) as o:
        cards = o.page.evaluate(DOM)["cards"]
    bad, good = cards
    assert bad["cls"] == "card bad" and good["cls"] == "card good"
    assert bad["title"] == "bad host one · torch 2.8.0 · cpu" and bad["headline"] == "not fit: 60 fail"
    assert bad["notes"] == ["partial: ran -m env only", "3 records by an older judge, judged again"]
    assert good["notes"] == []  # no note where there is nothing to say
    env, numerics, ops = bad["aspects"]   # what did not run is one line, not an aspect each
    assert [a["cls"] for a in bad["aspects"]] == ["aspect good", "aspect bad", "aspect warn"]
    assert bad["idle"] == "Not run here: known bugs" and good["idle"] is None
    # and how to run it, on a tap too (a title shows only under a mouse): the line the Markdown gives
    assert len(bad["idleLines"]) == 1 and bad["idleLines"][0].startswith("known bugs: ")
    assert bad["idleLines"][0] != "known bugs: " and good["idleLines"] == []
    assert numerics["links"] == ["#failures"] and numerics["detail"] == [False, 30]  # all 30, folded
    assert ops["links"] == [] and ops["detail"] == [False, 2]  # its anchor names no section: no dead link
    assert env["detail"] is None
    assert good["aspects"][0]["links"] == ["#search-2"]  # to the section that asked for "search"


def fleet_sections(machines: int = 8) -> list[Section]:
    """A verdicts section of many machines, each card as tall as a real one (a long headline, six
    aspects): more than fit on the first screen as cards."""
    cards = [Verdict(f"h{i}/cuda", f"host {i} · torch 2.{i}.0 · cuda", f"host {i}: GPU {i}, Linux x86_64",
                     "bad" if i % 3 == 0 else "good",
                     f"fit; ops {5000 + i} native; {i} numerically wrong; {i} of 18 optimizations help",
                     [Aspect(name, "good", f"{name} of host {i}: a line long enough to wrap once or twice in a card "
                             "of the width the grid gives it, as the real ones do") for name in
                      ("instruments", "environment", "ops", "numerics", "optimizations", "known bugs")])
             for i in range(machines)]
    return [Section("Verdict per machine", [], [], kind="verdicts", verdicts=cards, anchor="verdicts"),
            Section("Notes", ["note"], [["a note"]])]


@needs_chromium
def test_every_machine_is_named_on_the_first_screen_however_many_there_are(tmp_path, capsys):
    """Seven recorded machines made seven cards, and the first screen showed three: a user with a
    fleet could not see, without scrolling, which machine was bad. Each machine has a line at a
    glance above the cards, its state, its name linking to its card, and its headline; the render
    check fails a page where a machine is named on no line of the first screen."""
    path = tmp_path / "fleet.html"
    path.write_text(render_html(fleet_sections(), ["runs/a.jsonl"]), encoding="utf-8")
    with _open(path) as o:
        lines = o.page.evaluate("""() => Array.from(document.querySelectorAll('#verdicts .glance li')).map(li => ({
          cls: li.className, text: li.textContent.replace(/\\s+/g, ' ').trim(),
          href: li.querySelector('a').getAttribute('href'), bottom: li.getBoundingClientRect().bottom,
          card: document.querySelector(li.querySelector('a').getAttribute('href')).getBoundingClientRect().top}))""")
    assert len(lines) == 8
    assert lines[0]["cls"] == "bad" and lines[1]["cls"] == "good"
    assert lines[3]["text"] == "bad host 3 · torch 2.3.0 · cuda: fit; ops 5003 native; 3 numerically wrong; 3 of 18 " \
                               "optimizations help"
    assert all(x["bottom"] <= 900 for x in lines)            # all eight on the first screen
    assert sum(x["card"] < 900 for x in lines) < 8           # where the cards alone are not
    assert render_check.main([str(path), "--timeout", "15"]) == 0
    capsys.readouterr()
    hidden = tmp_path / "hidden.html"
    hidden.write_text(path.read_text(encoding="utf-8").replace("</head>", "<style>.glance{display:none}</style></head>"),
                      encoding="utf-8")
    assert render_check.main([str(hidden), "--timeout", "15"]) == 1
    err = capsys.readouterr().err
    assert "of 8 machines are not named on the first screen at 1400x900: host " in err, err


@needs_chromium
def test_the_legend_chart_caption_and_code_in_the_report_s_own_text(known):
    with _open(known) as o:
        dom = o.page.evaluate(DOM)
    assert [b for _, b, _ in dom["legend"]] == [s for _, s, _ in LEGEND]
    assert dom["legend"][0] == ["pass", "✓", "passed (ran natively)"]  # coloured as its result, meaning on hover
    assert dom["figure"] == ["Two words", "Two words"]
    assert dom["code"] == "python -m tools.kernels --save"


SEARCH = """async (query) => {
  const search = document.getElementById('search'), count = document.getElementById('search-count');
  const shown = () => Array.from(document.querySelectorAll('main tbody tr')).filter(tr => tr.getClientRects().length);
  const state = () => ({rows: shown().length, counted: count.getAttribute('data-count'), said: count.textContent,
    hidden: Array.from(document.querySelectorAll('main section.sec')).filter(s => s.hidden).map(s => s.id),
    open: Array.from(document.querySelectorAll('main section.sec > details')).map(d => d.open),
    texts: shown().map(tr => tr.cells[0].textContent)});
  const type = async text => {
    search.value = text;
    search.dispatchEvent(new Event('input'));
    while (count.getAttribute('data-query') !== text) { await new Promise(r => setTimeout(r, 20)); }
    return state();
  };
  const before = state();
  return {before: before, found: await type(query), cleared: await type('')};
}"""


@needs_chromium
@pytest.mark.parametrize("query,rows", [("parity/op07", ["parity/op07/float32"]),
                                        ("OFF BY 59 ulp", ["ops/op59/float32"]),   # the reason, any case
                                        ("unique-reason-xyz", [NEEDLE]),            # the hover text
                                        ("h1 mps op3", [f"ops/op{i}/float32" for i in range(31, 40, 2)])])
def test_the_search_finds_rows_in_every_table_opens_their_fold_and_clearing_restores(known, query, rows):
    with _open(known) as o:
        r = o.page.evaluate(SEARCH, query)
        assert not o.all_errors()
    found = r["found"]
    assert found["texts"] == rows and found["counted"] == str(len(rows))
    assert found["said"].startswith(f"{len(rows)} row")
    # the sections without a match step aside; a folded one with matches opens
    assert set(found["hidden"]) >= {"verdicts", "legend", "notes", "notes-2", "search-2", "a-chart", "nothing-here"}
    assert r["before"]["open"][2] is False and (found["open"][2] is True) == (NEEDLE not in rows)
    assert r["cleared"] == r["before"] and r["cleared"]["hidden"] == []


@needs_chromium
def test_a_search_with_no_match_says_so(known):
    with _open(known) as o:
        r = o.page.evaluate(SEARCH, "no such thing anywhere")
    assert r["found"]["rows"] == 0 and r["found"]["counted"] == "0" and r["found"]["said"] == "no row matches"
    assert r["cleared"] == r["before"]


FILTER = """(clicks) => {
  for (const [name, value] of clicks) { document.querySelector(`#filters input[name=${name}][value='${value}']`).click(); }
  const rows = Array.from(document.querySelectorAll('#failures tbody tr'));
  return {shown: rows.filter(tr => !tr.hidden).map(tr => tr.cells[0].textContent),
          said: document.getElementById('shown').textContent};
}"""

PARITY = [f"parity/op{i:02d}/float32" for i in range(FAILURES // 2)]
OPS = [f"ops/op{i:02d}/float32" for i in range(FAILURES // 2, FAILURES)]


@needs_chromium
@pytest.mark.parametrize("clicks,shown,left", [
    ([], PARITY + OPS + ["a row with no record"], 66),
    ([("suite", "parity")], OPS + ["a row with no record"], 36),                 # a row with no record stays
    ([("target", "mps")], [c for c in PARITY + OPS if int(c[-10:-8]) % 2 == 0] + ["a row with no record"], 36),
    ([("key", "fail")], ["a row with no record"], 6),
    ([("suite", "parity"), ("target", "cpu")], [c for c in OPS if int(c[-10:-8]) % 2] + ["a row with no record"],
     20),  # and the needle's row, on the cpu
], ids=["all", "no-parity", "no-mps", "no-fail", "no-parity-no-cpu"])
def test_the_filters_act_on_every_table_not_only_the_matrix(known, clicks, shown, left):
    with _open(known) as o:
        r = o.page.evaluate(FILTER, clicks)
    assert r["shown"] == shown
    assert r["said"] == f"{left} of 66 table rows shown"


@needs_chromium
def test_a_link_to_a_folded_section_opens_it_and_scrolls_there(known):
    with _open(known) as o:
        assert not o.page.evaluate("() => document.querySelector('#failures > details').open")
        o.page.click("#toc a[href='#failures']")
        top = o.page.evaluate("() => document.getElementById('failures').getBoundingClientRect().top")
        assert o.page.evaluate("() => document.querySelector('#failures > details').open") and 0 <= top < 100
        o.page.evaluate("() => window.scrollTo(0, 0)")
        o.page.click("#verdicts a[href='#failures']")  # the card's link: the same
        assert 0 <= o.page.evaluate("() => document.getElementById('failures').getBoundingClientRect().top") < 100


@needs_chromium
def test_at_phone_width_the_contents_are_a_drawer_and_a_link_closes_it(known):
    with _open(known, 420) as o:
        assert not o.page.is_visible("#toc")
        o.page.click("#toc-toggle")
        assert o.page.is_visible("#toc")
        o.page.click("#toc a[href='#notes-2']")
        assert not o.page.is_visible("#toc")
        assert o.page.evaluate("() => document.querySelector('#notes-2 > details').open")
        assert o.page.evaluate("() => document.documentElement.scrollWidth") <= 420


# ------------------------------------------------------------------ the render check, passing

def _size(png) -> tuple[int, int]:
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


@needs_chromium
def test_the_render_check_passes_a_page_of_known_sections_and_takes_the_first_screens(known, tmp_path, capsys):
    assert render_check.main([str(known), "--screenshots", str(tmp_path / "shots")]) == 0
    line = capsys.readouterr().out
    assert line.count("\n") == 1 and "works in headless Chromium at 1400x900 and 420x900" in line
    assert "9 sections, 6 tables, 66 rows" in line and "the search found 'parity/op00/float32'" in line
    assert _size(tmp_path / "shots" / "desktop.png") == (1400, 900)
    assert _size(tmp_path / "shots" / "phone.png") == (420, 900)


def cpu_run(path):
    """A small CPU run of today: env, ops and parity checks, a failure and a skip among them."""
    return write_run(path, {**load_facts("linux_x86_64"), "host": "ci-box"}, [
        rec("threads", "pass", metrics={"threads": 2}),
        rec("device-available", "skip", target="mps", reason="not a Mac"),
        rec("softmax", "pass", suite="ops", category="native", variant="float32/forward"),
        rec("matmul", "fail", suite="parity", variant="float16/forward", reason="margin 3.5 > 1",
            metrics={"margin": 3.5, "max_abs_err": 1e-2}),
        rec("matmul", "pass", suite="parity", variant="float32/forward", metrics={"margin": 0.2})],
        run="R-cpu", torch_v="2.11.0")


@pytest.fixture(scope="module")
def small_report(tmp_path_factory):
    runs = tmp_path_factory.mktemp("small-runs")
    cpu_run(runs / "cpu.jsonl")
    out = tmp_path_factory.mktemp("small-out")
    assert report.main([str(runs), "--out", str(out), "--kernels", no_kernels(out)]) == 0
    return out / "matrix.html"


@needs_chromium
def test_the_render_check_passes_a_small_report(small_report, capsys):
    assert render_check.main([str(small_report)]) == 0
    assert "no JavaScript errors" in capsys.readouterr().out


@pytest.mark.parametrize("args,says", [
    (["--screenshots", "{file}"], "--screenshots {file}: {file} is a file, not a directory"),
    (["--screenshots", "{file}/shots"], "--screenshots {file}/shots: {file} is a file, not a directory"),
    (["--timeout", "0"], "argument --timeout: must be a number of seconds above 0 and at most 3600, not '0'"),
    (["--timeout", "soon"], "argument --timeout: must be a number of seconds above 0 and at most 3600, not 'soon'"),
], ids=["shots-a-file", "shots-under-a-file", "timeout-0", "timeout-words"])
def test_a_wrong_option_of_the_render_check_is_one_line_and_exit_2(small_report, tmp_path, capsys, args, says):
    """`--screenshots FILE` was reported as the page failing at desktop width (exit 1, "[Errno
    17] File exists"); `--timeout 0` ran with no limit at all (Playwright's 0), and a
    `--timeout` in words printed argparse's whole usage. Each is one line, exit 2, before any
    browser starts."""
    taken = tmp_path / "taken.txt"
    taken.write_text("mine")
    args = [a.format(file=taken) for a in args]
    try:
        status = render_check.main([str(small_report), *args])
    except SystemExit as ended:
        status = ended.code
    assert status == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {says.format(file=taken)}" + (
        " (give a directory for desktop.png and phone.png)" if "screenshots" in says else " (see --help)")]
    assert taken.read_text() == "mine"


H100_TALL = {1400: 25_000, 420: 40_000}   # px; the page before issue 25: 51,259 and 99,629


@needs_chromium
def test_the_recorded_h100_runs_render_as_a_page_that_works(tmp_path, capsys):
    runs = tmp_path / "cpu.jsonl"
    cpu_run(runs)
    assert report.main([str(H100), str(runs), "--out", str(tmp_path / "out"), "--kernels", no_kernels(tmp_path)]) == 0
    capsys.readouterr()
    assert render_check.main([str(tmp_path / "out" / "matrix.html"), "--screenshots", str(tmp_path / "shots")]) == 0
    line = capsys.readouterr().out
    tall = {int(w): int(px.replace(",", "")) for px, w in re.findall(r"([\d,]+) px tall at (\d+)", line)}
    assert tall.keys() == H100_TALL.keys() and all(tall[w] < H100_TALL[w] for w in tall), line
    assert _size(tmp_path / "shots" / "phone.png") == (420, 900)


# ------------------------------------------------------------------ the render check, failing

def _inject(where: str, what: str):
    def breakage(page: str) -> str:
        assert page.count(where) == 1
        return page.replace(where, where + what if not where.startswith("</") else what + where)
    return breakage


def _replace(old: str, new: str):
    def breakage(page: str) -> str:
        assert page.count(old) == 1
        return page.replace(old, new)
    return breakage


BROKEN = [
    pytest.param(_inject("</body>", "<script>window.noSuchFunction();</script>"),
                 "at 1400x900 (desktop): JavaScript error: TypeError: window.noSuchFunction is not a function",
                 id="js-error"),
    pytest.param(_inject("<main id='main'>", "<div style='width:700px;height:2px'></div>"),
                 "at 420x900 (phone): the page is 7", id="overflow-at-phone-width"),
    pytest.param(_inject("<header id='top'>", "<a href='#nowhere'>a dead link</a>"),
                 "at 1400x900 (desktop): a link to #nowhere points at no element", id="broken-anchor"),
    pytest.param(_replace("return textOf(row).indexOf(w) >= 0;", "return false;"),
                 "a search for 'parity/op00/float32' shows no row with it", id="search-finds-nothing"),
    pytest.param(_replace('String(matched) : ""', 'String(matched + 1) : ""'),
                 "shows 1 row(s) but the match count says '2'", id="search-miscounts"),
    pytest.param(_replace('search.addEventListener("input"', 'search.addEventListener("no-input"'),
                 "the search box did not answer a search for 'parity/op00/float32'", id="search-deaf"),
    pytest.param(_replace("openedBySearch.forEach(function (fold) { fold.open = false; });", ""),
                 "clearing the search did not restore the view", id="search-leaves-folds-open"),
    pytest.param(_inject("</header>", "<div style='height:1000px'>a tall banner</div>"),
                 "at 1400x900 (desktop): the verdict cards start 1", id="verdicts-below-the-first-screen"),
    pytest.param(_replace("id='verdicts'", "id='cards'"), "no verdict cards (#verdicts) on the page",
                 id="no-verdicts"),
    pytest.param(_replace("<li><a href='#notes-2'>", "<li><a href='#notes'>"),
                 "section #notes-2 is not in the table of contents", id="section-not-in-contents"),
    pytest.param(_replace("function reveal(id) {", "function reveal(id) { return;"),
                 "the contents' link to the folded section #failures did not open it", id="folded-link-stays-shut"),
    pytest.param(_inject("</head>", "<style>#details{width:600px!important;left:auto!important}</style>"),
                 "at 420x900 (phone): the details panel", id="panel-wider-than-a-phone"),
    pytest.param(_replace('root.setAttribute("data-rendered", "yes");', ""), "no data-rendered marker",
                 id="unfinished"),
    pytest.param(_inject("</head>", "<style>#failures table{min-width:1500px}</style>"),
                 "at 1400x900 (desktop): the table of #failures is ", id="failure-table-wider-than-its-box"),
]


@needs_chromium
@pytest.mark.parametrize("breakage,says", BROKEN)
def test_the_render_check_names_what_is_broken(known, tmp_path, capsys, breakage, says):
    broken = tmp_path / "broken.html"
    broken.write_text(breakage(known.read_text(encoding="utf-8")), encoding="utf-8")
    assert render_check.main([str(broken), "--timeout", "15"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err


# ------------------------------------------------------------------ glyphs

def covered(char: str) -> bool:
    """Whether an installed font (fontconfig, which Chromium asks) has a glyph for ``char``."""
    out = subprocess.run(["fc-list", f":charset={ord(char):x}", "family"], capture_output=True, text=True, check=True)
    return bool(out.stdout.strip())


needs_fc_list = pytest.mark.skipif(shutil.which("fc-list") is None, reason="fc-list (fontconfig) not installed; "
                                   "Chromium brings it: apt-get install chromium fonts-noto-cjk, as .ci/run does")


@needs_fc_list
def test_the_font_check_can_tell_a_missing_glyph():
    assert covered("A") and not covered("\u0378")  # U+0378: no character, no font has it


@needs_fc_list
def test_every_legend_symbol_has_an_installed_font():
    missing = [f"{sym} (U+{ord(c):04X}, {key})" for key, sym, _ in LEGEND for c in sym if not covered(c)]
    assert not missing, f"no installed font draws these legend symbols (they show as boxes): {missing}"


@needs_fc_list
def test_every_character_of_the_page_s_own_text_has_an_installed_font(small_report):
    """The template, the static files, page.py's words, and a page rendered from ASCII run files:
    all the non-ASCII characters there are the report's own (sections, verdicts, legend)."""
    own = "".join(p.read_text(encoding="utf-8") for p in (
        *(report_page.TEMPLATES.glob("*.html")), *(report_page.STATIC.glob("*")), report_page.HERE / "page.py"))
    chars = {c for c in own + small_report.read_text(encoding="utf-8") if ord(c) > 127}
    missing = sorted(f"{c} (U+{ord(c):04X})" for c in chars if not covered(c))
    assert not missing, f"no installed font draws: {missing}"


# ------------------------------------------------------------------ charts

def test_the_seed_003_path_chart_draws_memory_and_time_on_log_axes_under_its_caption():
    rows = [{"row": "baseline", "peak_bytes": 10 * 2**30, "step_s": 0.2},
            {"row": "+adafactor", "peak_bytes": 2**30, "step_s": 4.0, "time_ratio": 20.0}]
    fig = charts.path_figure("h1 cuda", rows, title="Peak memory and step time, on h1 cuda")
    assert [ax.get_yscale() for ax in fig.axes] == ["log", "log"]
    low, high = fig.axes[0].get_ylim()
    assert low < 0.1 < 1 < high  # memory: 0.1 x the baseline, drawn below 1
    low, high = fig.axes[1].get_ylim()
    assert low < 1 < 20 < high
    assert fig.get_suptitle() == "Peak memory and step time, on h1 cuda"
    assert charts.path_figure("h1 cuda", rows).get_suptitle().replace("\n", " ") == charts.path_title("h1 cuda")


@pytest.mark.parametrize("make,data", [(charts.margin_figure, [("a", 2.0, "fail"), ("b", 0.5, "pass")]),
                                       (charts.ratio_figure, [("a", 0.5, 0.4, 0.6, 0.9, "pass")])])
def test_the_dot_charts_take_their_title_from_the_caption(make, data):
    caption = "The 2 largest finite margins over every column and dtype (log scale)"
    assert make(data, title=caption).get_suptitle().replace("\n", " ") == caption
    assert make(data).get_suptitle()  # a default title when none is given
    assert make(data).axes[0].get_xscale() == "log"


def test_the_charts_keep_their_old_calls():
    png = b"\x89PNG\r\n\x1a\n"
    assert charts.path_chart("h", [{"row": "a", "peak_bytes": 2, "step_s": 1.0}]).startswith(png)
    assert charts.margin_chart([("a", 2.0, "fail")]).startswith(png)
    assert charts.ratio_chart([("a", 0.5, 0.4, 0.6, 0.9, "pass")]).startswith(png)


# ------------------------------------------------------------------ the page's source

def test_a_long_word_in_a_cell_may_wrap_at_its_separators_and_nowhere_else():
    """A check id or a call in a reason is one word to the browser, and a table is never narrower
    than its longest word: ``breakable`` gives a word of 20 or more characters places to wrap,
    after / . _ , = : and before a parenthesis. Short words, numbers and the escaping stay."""
    from markupsafe import Markup
    breakable = report_page.breakable
    assert breakable("parity/special.polygamma_n_0/float16/backward") == Markup(
        "parity/<wbr>special.<wbr>polygamma_<wbr>n_<wbr>0/<wbr>float16/<wbr>backward")
    assert breakable("0.02264 ms [0.0222, 0.0228] a/b") == Markup("0.02264 ms [0.0222, 0.0228] a/b")
    assert breakable("x=0.0004883408546447754,1,234,567") == Markup("x=<wbr>0.0004883408546447754,1,234,567")
    assert breakable("<b>x</b>/torch.nn.attention.sdpa_kernel(SDPBackend.MATH)") == Markup(
        "&lt;b&gt;x&lt;/<wbr>b&gt;/<wbr>torch.<wbr>nn.<wbr>attention.<wbr>sdpa_<wbr>kernel<wbr>(SDPBackend.<wbr>MATH)")
    assert breakable(Markup("<a href='x/y/z/w/v/u/t/s/r/q'>")) == Markup("<a href='x/y/z/w/v/u/t/s/r/q'>")
    assert breakable(None) == Markup("")


def test_ids_are_unique_and_every_run_file_string_is_escaped():
    secs = known_sections()
    secs[2].rows[0][0] = "<b id='x'>bold</b>"
    page = render_html(secs, ["<script>alert(1)</script>.jsonl"])
    ids = re.findall(r" id='([^']*)'", page)
    assert len(ids) == len(set(ids))
    assert "<b id=" not in page
    text = page.replace("&#39;", "&#x27;").replace("<wbr>", "")   # a long word's places to wrap are no text
    assert "&lt;b id=&#x27;x&#x27;&gt;bold&lt;/b&gt;" in text
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;.jsonl" in page
    assert page.count("<script") == 3 and not re.search(r"<script[^>]* src=|<link ", page)
    assert not re.search(r"(?:src|href)='(?!#|data:image/png;base64,)", page)  # nothing from elsewhere
    data = page.split("<script type='application/json' id='records'>")[1].split("</script>")[0]
    assert json.loads(data)[0]["check"] == "parity/op00/float32"
