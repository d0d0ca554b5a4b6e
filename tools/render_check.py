"""Does the HTML matrix render: open it in headless Chromium and read back the DOM.

    python -m tools.render_check reports/matrix.html [--timeout 60] [--chromium PATH]

Escaping is checked on the page's source; whether the page works is only known once a
browser has run it. The page's first script writes every JavaScript error onto
``<html data-js-errors>`` and its last one sets ``data-rendered="yes"``; Chromium's own
console lines ("Uncaught ...") are read as well, so an error that stops the first script
is caught too. Exit 0 with one line (tables, rows, columns) when the page rendered
without an error and every matrix table has rows; 1 with one line saying what is wrong;
2 when the page or Chromium is missing.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from html.parser import HTMLParser
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--enable-logging=stderr", "--v=0", "--dump-dom")
CONSOLE = re.compile(r':CONSOLE[^\]]*\] "(?P<message>Uncaught.*?)", source: (?P<source>\S*) \((?P<line>\d+)\)')


def find_chromium(explicit: str | None = None) -> str | None:
    """The browser to use: --chromium, else $CHROMIUM, else the usual names on PATH."""
    names = [explicit] if explicit else [os.environ.get("CHROMIUM"), *BROWSERS]
    return next((path for name in names if name and (path := shutil.which(name))), None)


@dataclasses.dataclass
class Rendered:
    root: dict          # attributes of <html> after the scripts ran
    rows: list[int]     # data rows of each matrix table
    columns: set[str]   # matrix column ids seen in the headers
    console_errors: list[str]

    def problem(self) -> str | None:
        """The first thing wrong with the page, in one line; None when it rendered."""
        errors = [e for e in (self.root.get("data-js-errors") or "").splitlines() if e] + self.console_errors
        if errors:
            more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
            return f"JavaScript error: {errors[0]}{more}"
        if self.root.get("data-rendered") != "yes":
            return "the page's script did not finish: no data-rendered marker on <html>"
        if not self.rows:
            return "no matrix table on the page"
        if empty := self.rows.count(0):
            return f"{empty} of {len(self.rows)} matrix table(s) have no data rows"
        return None


class _DomReader(HTMLParser):
    """Counts, in the dumped DOM, the rows of each ``table.matrix`` body and its columns."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root: dict | None = None
        self.rows: list[int] = []
        self.columns: set[str] = set()
        self._tables: list[bool] = []   # open tables: is it a matrix
        self._in_body = False

    def handle_starttag(self, tag, attrs):
        a = {k: v or "" for k, v in attrs}
        if tag == "html" and self.root is None:
            self.root = a
        elif tag == "table":
            self._tables.append("matrix" in a.get("class", "").split())
            if self._tables[-1]:
                self.rows.append(0)
        elif tag == "tbody":
            self._in_body = True
        elif self._tables and self._tables[-1]:
            if tag == "tr" and self._in_body:
                self.rows[-1] += 1
            elif tag == "th" and "data-col" in a:
                self.columns.add(a["data-col"])

    def handle_endtag(self, tag):
        if tag == "table" and self._tables:
            self._tables.pop()
        elif tag == "tbody":
            self._in_body = False


def read_dom(dom: str, stderr: str) -> Rendered:
    reader = _DomReader()
    reader.feed(dom)
    reader.close()
    console = [f"{m['message']} (line {m['line']})" for m in CONSOLE.finditer(stderr)]
    return Rendered(reader.root or {}, reader.rows, reader.columns, console)


def run_chromium(chromium: str, page: Path, timeout: float) -> tuple[int, str, str]:
    """Dump the page's DOM after its scripts ran, with a throw-away profile. On a timeout
    Chromium and every process it started (its own session, not yet reaped, so the group
    id is still its own) are killed, then TimeoutExpired is raised."""
    with tempfile.TemporaryDirectory(prefix="render-check-", ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", page.resolve().as_uri()],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.communicate()
            raise
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def check(page: Path, chromium: str, timeout: float) -> tuple[int, str]:
    """(exit status, one line)."""
    try:
        code, dom, stderr = run_chromium(chromium, page, timeout)
    except subprocess.TimeoutExpired:
        return 1, f"{page}: Chromium did not finish within {timeout:g} s"
    if not dom.strip():
        return 1, f"{page}: Chromium dumped no DOM (exit status {code})"
    rendered = read_dom(dom, stderr)
    if problem := rendered.problem():
        return 1, f"{page}: {problem}"
    return 0, (f"{page}: rendered in headless Chromium, no JavaScript errors: {len(rendered.rows)} matrix tables, "
               f"{sum(rendered.rows)} rows, {len(rendered.columns)} columns")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.render_check", description=__doc__.splitlines()[0])
    parser.add_argument("page", help="the HTML file, e.g. reports/matrix.html")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds Chromium may take (default 60)")
    parser.add_argument("--chromium", help="the browser binary (default: $CHROMIUM, else chromium on PATH)")
    args = parser.parse_args(argv)
    page = Path(args.page)
    if not page.is_file():
        print(f"error: {page}: no such file", file=sys.stderr)
        return 2
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("error: Chromium not found (tried " + ", ".join([args.chromium] if args.chromium else BROWSERS)
              + "); install it or pass --chromium PATH", file=sys.stderr)
        return 2
    status, line = check(page, chromium, args.timeout)
    print(line if status == 0 else f"error: {line}", file=sys.stdout if status == 0 else sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
