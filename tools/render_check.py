"""Does the HTML matrix work: open it in headless Chromium, as a reader would, at desktop and phone width.

    python -m tools.render_check reports/matrix.html [--screenshots DIR] [--timeout 60] [--chromium PATH]

Escaping is checked on the page's source; whether the page works is only known once a
browser has run it. Playwright drives the system's Chromium (no browser is downloaded) at
1400x900 and at 420x900, and at each width the page must:

- run without a JavaScript error: an uncaught exception (Playwright's pageerror), an error
  on the console, or one the page's first script wrote onto ``<html data-js-errors>``;
- finish: its last script sets ``<html data-rendered="yes">``;
- show the verdict cards on the first screen: ``#verdicts`` starts above the fold, and (desktop)
  every machine is named there: its line at a glance (``.glance``), or its card's title;
- not overflow sideways: the document is no wider than the window (wide tables scroll in
  their own box); at desktop width the failure tables (``FITTED``: what failed, why, and the
  switch that changes it) fit their box, so that their last columns are read without scrolling;
- have every in-page link (``a[href^="#"]``) point at an element's id, and a table of
  contents (``nav#toc``) linking every section;
- show a clicked result's details panel inside the window;
- find a check by its id: typed into ``#search`` (an id taken from the page, from a folded
  section when there is one), the row with it is shown and ``#search-count`` counts exactly
  the rows shown; clearing the box gives back the rows and folds there were before;
- (desktop) open a folded section when its entry in the contents is clicked, and scroll there.

``--screenshots DIR`` writes desktop.png and phone.png there: the first screen at each
width, as the page opened. Exit 0 with one line when all of it holds; 1 with one line
naming the first problem; 2 when the page, Chromium or Playwright is missing, or an option
is wrong (a ``--screenshots`` that is a file, a ``--timeout`` that is not above 0 seconds).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import shutil
import sys
from pathlib import Path

from tools import cli

# The tables that must fit their box at desktop width: their last column is the switch (or the
# reason) a user came for, and a long check id once pushed it past the window's edge.
FITTED = ("failures-by-cause", "failures")
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
VIEWPORTS = (("desktop", 1400, 900), ("phone", 420, 900))


class Missing(Exception):
    """Chromium or Playwright is not there (exit status 2)."""


def find_chromium(explicit: str | None = None) -> str | None:
    """The browser to use: --chromium, else $CHROMIUM, else the usual names on PATH."""
    names = [explicit] if explicit else [os.environ.get("CHROMIUM"), *BROWSERS]
    return next((path for name in names if name and (path := shutil.which(name))), None)


# --------------------------------------------------------------------------- the browser

class _Session:
    """Playwright and the browsers it started, while a ``session`` is open."""
    depth = 0
    playwright = None
    browsers: dict = {}


@contextlib.contextmanager
def session():
    """Playwright, started by the outermost ``with session()`` and stopped when that one ends;
    inner ones (a test's, then the check's own) share it. Nothing of it is left running in
    between: its event loop, alive, would stop ``asyncio.run`` anywhere else in the process."""
    if _Session.depth == 0:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as exc:
            raise Missing(f"Playwright is not installed ({exc}); it is in the dev dependencies") from None
        _Session.playwright, _Session.browsers = sync_playwright().start(), {}
    _Session.depth += 1
    try:
        yield _Session
    finally:
        _Session.depth -= 1
        if _Session.depth == 0:
            for b in _Session.browsers.values():
                try:
                    b.close()
                except Exception:  # already gone with its process
                    pass
            _Session.playwright.stop()
            _Session.playwright, _Session.browsers = None, {}


def browser(chromium: str):
    """A headless Chromium (the system's, ``chromium``) in the open session, started on first use."""
    from playwright.sync_api import Error
    assert _Session.depth, "browser() is for inside `with session():`"
    found = _Session.browsers.get(chromium)
    if found is None or not found.is_connected():
        try:
            found = _Session.browsers[chromium] = _Session.playwright.chromium.launch(
                executable_path=chromium, args=["--no-sandbox"])
        except Error as exc:
            raise Missing(f"Chromium ({chromium}) did not start: {str(exc).splitlines()[0]}") from None
    return found


class Opened:
    """One page open at one size; ``errors`` collects every JavaScript error while it is open.
    It holds a session (``session``) until it is closed."""

    def __init__(self, chromium: str, path: Path, width: int, height: int, timeout: float):
        self._session = session()
        self._session.__enter__()
        try:
            self.context = browser(chromium).new_context(viewport={"width": width, "height": height},
                                                         device_scale_factor=1)
        except BaseException:
            self._session.__exit__(None, None, None)
            raise
        self.context.set_default_timeout(timeout * 1000)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"{exc.name}: {exc.message}".strip(": ")))
        self.page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error" else None)
        self.width, self.height, self.timeout = width, height, timeout
        try:  # the page's scripts are inline and synchronous: by the load event the last one has
            # marked the page done (data-rendered), or never will
            self.page.goto(path.resolve().as_uri(), wait_until="load")
        except BaseException:
            self.close()
            raise

    def all_errors(self) -> list[str]:
        written = self.page.evaluate("() => document.documentElement.getAttribute('data-js-errors') || ''")
        return self.errors + [e for e in written.splitlines() if e and e not in self.errors]

    def close(self) -> None:
        try:
            self.context.close()
        finally:
            self._session.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_page(chromium: str, path: Path, width: int = 1400, height: int = 900, timeout: float = 60.0) -> Opened:
    """The page, open and rendered, for a test to look into (``.page`` is Playwright's)."""
    return Opened(chromium, path, width, height, timeout)


# --------------------------------------------------------------------------- what is looked at

FACTS = """(fitted) => {
  const root = document.documentElement, doc = root, w = window.innerWidth;
  const verdicts = document.getElementById('verdicts');
  const top = verdicts && verdicts.getClientRects().length ? verdicts.getBoundingClientRect().top + scrollY : null;
  let widest = '';
  if (doc.scrollWidth > w) {
    for (const el of document.body.querySelectorAll('*')) {
      const r = el.getBoundingClientRect();
      if (r.right > w + 1 && !el.closest('.scroll') && el.getClientRects().length) {
        widest = el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
          (el.classList.length ? '.' + Array.from(el.classList).join('.') : '') + ' (' + Math.round(r.right) + ' px)';
        break;
      }
    }
  }
  const broken = Array.from(document.querySelectorAll('a[href^="#"]')).map(a => a.getAttribute('href'))
    .filter(h => { try { return !document.getElementById(decodeURIComponent(h.slice(1))); } catch (e) { return true; } });
  const toc = document.getElementById('toc');
  const linked = new Set(toc ? Array.from(toc.querySelectorAll('a[href^="#"]')).map(a => a.getAttribute('href').slice(1)) : []);
  const sections = Array.from(document.querySelectorAll('main section[id]'));
  const overflowing = fitted.map(id => document.querySelector('#' + id + ' .scroll'))
    .filter(box => box && box.getClientRects().length && box.scrollWidth > box.clientWidth + 1)
    .map(box => [box.closest('section').id, box.scrollWidth, box.clientWidth]);
  // each machine named on the first screen: its line at a glance, or its card's title
  const glance = new Map(Array.from(document.querySelectorAll('.glance a')).map(a => [a.getAttribute('href').slice(1), a]));
  const onScreen = el => !!el && el.getClientRects().length > 0 && el.getBoundingClientRect().bottom <= innerHeight;
  const unnamed = Array.from(document.querySelectorAll('article.card'))
    .filter(card => !onScreen(glance.get(card.id)) && !onScreen(card.querySelector('.card-title')))
    .map(card => { const t = card.querySelector('.card-title'), st = t.querySelector('.state');
                   return t.textContent.slice(st ? st.textContent.length : 0).trim(); });
  return {unnamed: unnamed, cards: document.querySelectorAll('article.card').length, overflowing: overflowing, rendered: root.getAttribute('data-rendered') === 'yes', verdicts: !!verdicts, verdictsTop: top,
          scrollWidth: Math.max(doc.scrollWidth, document.body.scrollWidth), scrollHeight: doc.scrollHeight,
          widest: widest, broken: broken, toc: !!toc, unlisted: sections.map(s => s.id).filter(id => !linked.has(id)),
          sections: sections.length, tables: document.querySelectorAll('main table').length,
          matrices: document.querySelectorAll('main table.matrix').length,
          emptyMatrices: Array.from(document.querySelectorAll('main table.matrix'))
            .filter(t => !t.tBodies.length || !t.tBodies[0].rows.length).length,
          rows: document.querySelectorAll('main tbody tr').length};
}"""

PANEL = """() => {
  const td = Array.from(document.querySelectorAll('main td[data-i]')).find(td => td.getClientRects().length);
  if (!td) { return null; }
  td.click();
  const panel = document.getElementById('details');
  const r = panel.getBoundingClientRect();
  const out = {shown: !panel.hidden && panel.getClientRects().length > 0, left: r.left, right: r.right,
               top: r.top, bottom: r.bottom, rows: panel.querySelectorAll('tr').length};
  document.getElementById('details-close').click();
  return out;
}"""

# A check id from the page: the record behind a result in a folded section when there is
# one (the search must open it), else any; else the first cell of a table.
PICK = """() => {
  const records = JSON.parse(document.getElementById('records').textContent);
  const cells = Array.from(document.querySelectorAll('main td[data-i]'));
  const td = cells.find(td => { const d = td.closest('details'); return d && !d.open; }) || cells[0];
  if (td) { return records[Number(td.getAttribute('data-i'))].check; }
  const first = document.querySelector('main tbody td');
  return first ? first.textContent.trim() : null;
}"""

VIEW = """() => {
  const shown = Array.from(document.querySelectorAll('main tbody tr')).filter(tr => tr.getClientRects().length);
  const c = document.getElementById('search-count');
  return {shown: shown.length, texts: shown.map(tr => tr.textContent.toLowerCase()),
          open: Array.from(document.querySelectorAll('main details')).map(d => d.open),
          count: c ? c.getAttribute('data-count') : null, said: c ? c.textContent : null};
}"""

ANSWERED = "(q) => { const c = document.getElementById('search-count'); return !!c && c.getAttribute('data-query') === q; }"

# The first entry of the contents whose section is folded, and where its section is.
FOLDED = """() => {
  for (const a of document.querySelectorAll('#toc a[href^="#"]')) {
    const s = document.getElementById(decodeURIComponent(a.getAttribute('href').slice(1)));
    const d = s && s.querySelector(':scope > details');
    if (d && !d.open) { return a.getAttribute('href'); }
  }
  return null;
}"""

LANDED = """(href) => {
  const s = document.getElementById(decodeURIComponent(href.slice(1)));
  const r = s.getBoundingClientRect();
  return {open: s.querySelector(':scope > details').open, top: r.top, height: window.innerHeight};
}"""


@dataclasses.dataclass
class Seen:
    """What one width showed: ``problem`` is the first thing wrong, in a few words, or None."""
    name: str
    width: int
    height: int
    problem: str | None = None
    facts: dict = dataclasses.field(default_factory=dict)
    searched: str = ""


SEARCH_WAIT = 5.0   # seconds the page has to answer a search (it waits 0.12 s for the typing to stop)


def _search(page, query: str, timeout: float) -> None:
    page.fill("#search", query)
    page.wait_for_function(ANSWERED, arg=query, timeout=min(timeout, SEARCH_WAIT) * 1000)


def _look(opened: Opened, name: str, screenshots: Path | None) -> Seen:
    seen = Seen(name, opened.width, opened.height)
    page = opened.page
    if screenshots is not None:
        screenshots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(screenshots / f"{name}.png"), full_page=False)
    f = seen.facts = page.evaluate(FACTS, list(FITTED))
    seen.problem = _first_problem(opened, f) or _interact(opened, seen)
    if seen.problem is None and (errors := opened.all_errors()):  # an error while it was used
        seen.problem = _errors(errors)
    return seen


def _errors(errors: list[str]) -> str:
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"JavaScript error: {errors[0]}{more}"


def _first_problem(opened: Opened, f: dict) -> str | None:
    if errors := opened.all_errors():
        return _errors(errors)
    if not f["rendered"]:
        return "the page's script did not finish: no data-rendered marker on <html>"
    if not f["verdicts"]:
        return "no verdict cards (#verdicts) on the page"
    if f["verdictsTop"] is None:
        return "the verdict cards (#verdicts) are not shown"
    if f["verdictsTop"] >= opened.height:
        return (f"the verdict cards start {f['verdictsTop']:.0f} px down, below the first screen "
                f"({opened.height} px)")
    if f["unnamed"] and opened.width >= VIEWPORTS[0][1]:
        more = f" (and {len(f['unnamed']) - 1} more)" if len(f["unnamed"]) > 1 else ""
        return (f"{len(f['unnamed'])} of {f['cards']} machines are not named on the first screen at "
                f"{opened.width}x{opened.height}: {f['unnamed'][0]}{more}")
    if f["scrollWidth"] > opened.width:
        return (f"the page is {f['scrollWidth']} px wide in a {opened.width} px window (horizontal overflow"
                + (f"; first past the edge: {f['widest']})" if f["widest"] else ")"))
    if f["overflowing"] and opened.width >= VIEWPORTS[0][1]:
        section, wide, box = f["overflowing"][0]
        return (f"the table of #{section} is {wide} px wide in its {box} px box at {opened.width} px: its last "
                "columns (the reason, the switch) are past the edge until scrolled sideways")
    if f["broken"]:
        more = f" (and {len(f['broken']) - 1} more)" if len(f["broken"]) > 1 else ""
        return f"a link to {f['broken'][0]} points at no element{more}"
    if not f["toc"]:
        return "no table of contents (nav#toc)"
    if f["unlisted"]:
        return f"section #{f['unlisted'][0]} is not in the table of contents"
    if not f["tables"] or not f["rows"]:
        return "no table rows on the page"
    if f["emptyMatrices"]:
        return f"{f['emptyMatrices']} of {f['matrices']} matrix table(s) have no data rows"
    return None


def _interact(opened: Opened, seen: Seen) -> str | None:
    page = opened.page
    panel = page.evaluate(PANEL)
    if panel is not None:
        if not panel["shown"] or not panel["rows"]:
            return "clicking a result did not open the details panel"
        if panel["left"] < 0 or panel["right"] > opened.width or panel["top"] < 0 or panel["bottom"] > opened.height:
            return (f"the details panel ({panel['left']:.0f}..{panel['right']:.0f} x {panel['top']:.0f}.."
                    f"{panel['bottom']:.0f} px) does not fit the {opened.width}x{opened.height} window")
    query = page.evaluate(PICK)
    if not query:
        return "no check id on the page to search for"
    seen.searched = query
    before = page.evaluate(VIEW)
    try:
        _search(page, query, opened.timeout)
    except Exception as exc:  # Playwright's TimeoutError, or no #search to type into
        return f"the search box did not answer a search for {query!r} ({type(exc).__name__})"
    found = page.evaluate(VIEW)
    if not any(query.lower() in text for text in found["texts"]):
        return f"a search for {query!r} shows no row with it"
    if found["count"] != str(found["shown"]):
        return (f"a search for {query!r} shows {found['shown']} row(s) but the match count says "
                f"{found['count']!r} ({found['said']!r})")
    if f"{found['shown']:,}" not in (found["said"] or ""):
        return f"the match count for {query!r} does not say how many rows match: {found['said']!r}"
    try:
        _search(page, "", opened.timeout)
    except Exception as exc:
        return f"the search box did not answer when cleared ({type(exc).__name__})"
    after = page.evaluate(VIEW)
    if (after["shown"], after["open"]) != (before["shown"], before["open"]):
        return (f"clearing the search did not restore the view ({before['shown']} rows shown before, "
                f"{after['shown']} after; folds {'the same' if after['open'] == before['open'] else 'changed'})")
    if seen.name == "desktop" and (href := page.evaluate(FOLDED)):
        page.click(f"#toc a[href='{href}']")
        landed = page.evaluate(LANDED, href)
        if not landed["open"]:
            return f"the contents' link to the folded section {href} did not open it"
        if not 0 <= landed["top"] < landed["height"]:
            return f"the contents' link to {href} did not scroll there (its top is at {landed['top']:.0f} px)"
    return None


@dataclasses.dataclass
class Result:
    page: Path
    seen: list[Seen]

    @property
    def problem(self) -> str | None:
        bad = next((s for s in self.seen if s.problem), None)
        return f"at {bad.width}x{bad.height} ({bad.name}): {bad.problem}" if bad else None

    def line(self) -> str:
        if self.problem:
            return f"{self.page}: {self.problem}"
        d = self.seen[0]
        tall = ", ".join(f"{s.facts['scrollHeight']:,} px tall at {s.width}" for s in self.seen)
        return (f"{self.page}: works in headless Chromium at " + " and ".join(f"{s.width}x{s.height}" for s in self.seen)
                + f", no JavaScript errors: {d.facts['sections']} sections, {d.facts['tables']} tables, "
                f"{d.facts['rows']:,} rows; {tall}; the search found {d.searched!r}")


def inspect(page: Path, chromium: str, timeout: float = 60.0, screenshots: Path | None = None,
            viewports=VIEWPORTS) -> Result:
    """Open the page at each size and look (Missing when Chromium or Playwright is not there)."""
    seen = []
    with session():
        for name, width, height in viewports:
            seen.append(_at(page, chromium, timeout, screenshots, name, width, height))
            if seen[-1].problem:
                break
    return Result(page, seen)


def _at(page: Path, chromium: str, timeout: float, screenshots: Path | None, name: str, width: int,
        height: int) -> Seen:
    """The page at one size."""
    try:
        with Opened(chromium, page, width, height, timeout) as opened:
            return _look(opened, name, screenshots)
    except Missing:
        raise
    except Exception as exc:  # Playwright's TimeoutError above all
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "Timeout" in type(exc).__name__ or "Timeout" in text:
            text = f"Chromium did not finish within {timeout:g} s"
        return Seen(name, width, height, text)


def check(page: Path, chromium: str, timeout: float = 60.0, screenshots: Path | None = None) -> tuple[int, str]:
    """(exit status, one line)."""
    result = inspect(page, chromium, timeout, screenshots)
    return (1 if result.problem else 0), result.line()


def _seconds(text: str) -> float:
    """--timeout's value: seconds above 0 (Playwright reads 0 as no limit at all)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be a number of seconds above 0 and at most 3600, not {text!r}")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.render_check", description=cli.summary(__doc__))
    parser.add_argument("page", help="the HTML file, e.g. reports/matrix.html")
    parser.add_argument("--screenshots", metavar="DIR", help="write desktop.png and phone.png (the first screen) here")
    parser.add_argument("--timeout", type=_seconds, default=60.0, help="seconds each step may take (default 60)")
    parser.add_argument("--chromium", help="the browser binary (default: $CHROMIUM, else chromium on PATH)")
    args = parser.parse_args(argv)
    page = Path(args.page)
    if not page.is_file():
        print(f"error: {page}: no such file", file=sys.stderr)
        return 2
    shots = Path(args.screenshots) if args.screenshots else None
    # a file where the folder goes was said as the page's fault, at desktop width, exit 1
    blocking = next((p for p in ([shots, *shots.parents] if shots else []) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        print(f"error: --screenshots {shots}: {blocking} is a file, not a directory (give a directory for "
              "desktop.png and phone.png)", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("error: Chromium not found (tried " + ", ".join([args.chromium] if args.chromium else BROWSERS)
              + "); install it or pass --chromium PATH", file=sys.stderr)
        return 2
    try:
        status, line = check(page, chromium, args.timeout, shots)
    except Missing as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(line if status == 0 else f"error: {line}", file=sys.stdout if status == 0 else sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
