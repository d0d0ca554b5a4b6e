"""Build the compatibility matrix from run files.

    python -m tools.report [RUN_FILE_OR_DIR ...] [--out DIR] [--kernels DIR_OR_FILE] [--baseline FILE]

Default input: every ``reports/runs/*.jsonl``. Writes ``matrix.md``, ``matrix.html``,
``matrix.json`` and the charts' PNGs into ``--out`` (default ``reports/``), all or none:
everything is rendered and written beside the old files before any of them is replaced.
A malformed or truncated run file gives one line on stderr naming the file and line, and
exit status 2; the readable records, of that file and the others, are still reported. A
field of another type than the record contract says (harness/core/records.py) is such a
problem too: a header's fact of another type is left out, a record's metric that the
report reads (an object, a list, a number) skips that record, each said in one line.
With nothing readable at all, no matrix is overwritten. An ``--out`` that cannot be
written, or an internal error, is one line and exit 2 too, and the old files stay whole
(tools/cli.py).

The page opens on one verdict per machine x torch x target (harness/report/verdict.py),
which tools.report also prints. The HTML is one self-contained page (a Jinja2 template,
harness/report/page.py; inline CSS and JS, charts as embedded PNG, no external URL): a
table of contents, folded long lists, a search box and filters over every table, a
details panel per cell. Every string from a run file is escaped (its control characters
spelt ``\\xNN``, a reason cut at a few hundred characters where the tables show it; matrix.json
keeps every text whole), and the data the script reads is JSON in a script element that never
runs. ``python -m tools.render_check`` checks the page in headless Chromium. matrix.json's
layout is harness/report/matrix.schema.json; it is strict JSON (a NaN or an infinity of a
run file is written as the text "nan", "inf").

With a baseline (``--baseline``, by default ``reports/baseline.jsonl`` where it exists) the
perf section says what got slower, faster or started to grow against it, on the same machine
(harness/report/speed.py).

Kernel tables saved by ``python -m tools.kernels --save`` (``reports/kernels/*.json``, or
one table's file given to ``--kernels``) add a *predicted* section: the static MPS kernel
list of each torch version and what changes between versions. A table that cannot be read
is one line naming the file (and the field), and exit status 2; the others are still used.
An empty ``--out``, ``--kernels`` or ``--baseline`` ("") is one line and exit 2, before
anything is read: as a directory it would be the current one. So is a ``--kernels`` that is
not there (a typo would leave the predicted section out, unsaid; an empty directory is
none). So is a ``--baseline`` named that cannot be read (the matrix already written stays as
it was); the default baseline, unreadable, is one line and exit 2 after the matrix is
written without it.
"""
from __future__ import annotations

import sys
from pathlib import Path

from harness.core import runfiles
from harness.report import compare
from harness.report.matrix import build, visible
from harness.report import verdict
from harness.report.render import json_doc, json_text, render_html, render_md
from harness.report.sections import load_kernel_tables, sections
from harness.report.speed import against_baseline, perf_sections
from tools import cli

ROOT = Path(__file__).resolve().parent.parent


def load(paths: list[str]) -> tuple[list[runfiles.Run], list[str], list[str]]:
    files, errors = runfiles.find_run_files(paths)
    runs = []
    for f in files:
        rf = runfiles.read_file(f)
        runs.extend(rf.runs)
        if rf.errors:
            more = f" (and {len(rf.errors) - 1} more problem line(s))" if len(rf.errors) > 1 else ""
            errors.append(rf.errors[0] + more)
    return runs, files, errors


def _cause(exc: OSError, out: Path) -> str:
    where = f"{exc.filename}: " if exc.filename and str(exc.filename) != str(out) else ""
    return where + (exc.strerror or str(exc)).lower()


def _unique_images(secs) -> None:
    """Each chart its own file beside matrix.md: a name two sections share (the charts are a dict
    of name -> PNG) would keep one chart and show it under both sections, so a later one gets
    the name with -2, -3 ... (harness.report.sections.image_name makes names unique already)."""
    seen: set[str] = set()
    for s in secs:
        if not s.image:
            continue
        name, n = s.image_name, 1
        while s.image_name in seen:
            n += 1
            s.image_name = name.removesuffix(".png") + f"-{n}.png"
        seen.add(s.image_name)


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.report", description=cli.summary(__doc__))
    parser.add_argument("inputs", nargs="*", help="run files or directories (default: reports/runs)")
    parser.add_argument("--out", default=str(ROOT / "reports"), help="output directory (default: reports/)")
    parser.add_argument("--kernels", default=None,
                        help="saved kernel tables for the predicted section: their directory, or one table's file "
                             "(default: reports/kernels)")
    parser.add_argument("--baseline", default=None,
                        help="a kept baseline to compare the perf figures with (default: reports/baseline.jsonl "
                             "where it exists)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="compare with no baseline, even where reports/baseline.jsonl exists")
    args = parser.parse_args(argv)
    for option in ("out", "kernels", "baseline"):   # "" is no path: as a directory it would be the current one
        if getattr(args, option) == "":
            return cli.error(f"--{option} is empty: give a path, or leave the option out for its default")
        setattr(args, option, cli.from_caller(getattr(args, option)))   # relative: to where ./compat was run
    args.inputs = [cli.from_caller(p) for p in args.inputs]
    if args.kernels is not None and not Path(args.kernels).exists():   # a typo would drop the section unsaid
        return cli.error(f"--kernels {args.kernels}: no such file or directory (give the directory of "
                         "python -m tools.kernels --save's tables, an empty one for none, or leave the option out)")
    inputs = args.inputs or [str(ROOT / "reports" / "runs")]
    runs, files, errors = load(inputs)
    baseline = None
    kept = args.baseline or (str(ROOT / "reports" / "baseline.jsonl")
                             if (ROOT / "reports" / "baseline.jsonl").is_file() else None)
    if kept and not args.no_baseline:
        try:
            baseline = compare.load_side([kept], f"baseline {kept}")
        except compare.CompareError as exc:
            if args.baseline:   # asked for by name: a matrix without it is not what was asked
                return cli.error(f"--baseline: {exc}; no matrix written (the one in {args.out} is as it was)")
            errors.append(f"--baseline: {exc}")
    tables, kernel_errors = load_kernel_tables(Path(args.kernels or ROOT / "reports" / "kernels"))
    errors += kernel_errors
    for e in errors:
        cli.error(visible(e))
    if not any(r.records for r in runs):
        if not errors:  # otherwise the problem is already said, in one line per input
            cli.error("no check records in " + ", ".join(inputs) + "; no matrix written")
        return 2
    m = build(runs)
    for note in m.notes:
        cli.note(visible(note))
    regressions = against_baseline(m, baseline) if baseline is not None else None
    found = verdict.verdicts(m, regressions)
    secs = sections(m, tables, errors, perf_sections(m, baseline), regressions, found, baseline)
    _unique_images(secs)
    doc = json_doc(m, files, errors, tables, found)   # harness/report/matrix.schema.json (tests/test_report_truth.py)
    rendered = {s.image_name: s.image for s in secs if s.image} | {
        "matrix.md": render_md(secs, files).encode("utf-8"),
        "matrix.html": render_html(secs, files).encode("utf-8"),
        "matrix.json": json_text(doc).encode("utf-8")}
    out = Path(args.out)
    try:
        runfiles.write_files(out, rendered)
    except OSError as exc:
        return cli.error(f"cannot write the matrix to {out}: {_cause(exc, out)}; no file there was changed")
    cli.say("\n".join(verdict.terminal_lines(found)) + "\n")
    cli.say(f"wrote {(out / 'matrix.html').resolve()} (the page; open it in a browser), matrix.md, matrix.json: "
            f"{len(m.rows):,} checks x {len(m.columns)} columns from {len(runs)} run(s) in {len(files)} file(s)\n")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
