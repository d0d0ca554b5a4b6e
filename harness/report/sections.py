"""The report's sections, from a Matrix: what the page is made of (``Section`` of rows, each
``Cell`` with the record behind it, ``Bar`` of counts) and every section of it: what to act
on first, the environments, each suite's matrix, the models, what changed across torch
versions, the parity margins and failures by cause, the known bugs, the optimization claims
and seed 003's path, the kernel tables (the perf suite's are harness/report/speed.py's). The writers (harness.report.render) turn the
sections into Markdown and HTML.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
from collections import Counter
from pathlib import Path
from typing import Collection

from packaging.version import InvalidVersion, Version

from harness.core import records, runfiles
from harness.core.records import Category, RecordKind, Status
from harness.optim import same_result
from harness.optim.claims import part_of
from harness.parity.numerics import causes
from harness.report.charts import CHART_ROWS, WORST_CHARTED, margin_chart, path_chart, ratio_chart
from harness.report import verdict
from harness.report.verdict import DTYPES, dtype_of, has_bug
from harness.report.matrix import (KEY_ORDER, LEGEND, MEASURING_SUITES, NOT_SHOWN, PREFERRED_METRICS, SYMBOL,
                                   UNTRUSTED_WORDS, WORKS, History, Matrix, cell_key, is_control, key_metric, short,
                                   listed, shown, version_history)

SUMMARIZE_OVER = 150      # a suite with more checks is shown as counts plus its non-passing rows


LONG = 40                 # a list longer than this starts folded on the page (every row is there)


TITLE_METRICS = 5         # scalar metrics in a cell's hover text; the click panel shows all


@dataclasses.dataclass
class Cell:
    text: str
    key: str = ""      # a legend key: colours the cell in HTML
    title: str = ""    # hover text in HTML
    record: dict | None = None   # the record behind it: the HTML details panel shows all its metrics
    where: str = ""              # the column it belongs to, for that panel
    wrap: bool = False           # HTML: its text wraps (a label), where a result is kept to one line


@dataclasses.dataclass
class Bar:
    """Counts per legend key: a stacked bar in HTML, the short count line in Markdown."""
    counts: dict


@dataclasses.dataclass
class Section:
    title: str
    headers: list[str]
    rows: list[list]   # str or Cell
    intro: str = ""
    empty: str = "Nothing to show."
    level: int = 2
    image: bytes | None = None   # a PNG: embedded in the HTML, written beside the Markdown
    image_name: str = ""
    # A matrix table: the Column behind each header after the leading ones (grouped by host
    # in HTML), the suite its rows belong to and a Bar per column (both for the HTML filters).
    columns: list = dataclasses.field(default_factory=list)
    suite: str = ""
    bars: list = dataclasses.field(default_factory=list)
    # The page: the section's id (a fragment the table of contents links to; "" = from the
    # title), whether it starts folded (a long list), and a kind the page draws in its own way
    # ("verdicts": one card per column, from ``verdicts``; "legend": the symbols).
    anchor: str = ""
    fold: bool = False
    kind: str = ""
    verdicts: list = dataclasses.field(default_factory=list)   # harness.report.verdict.Verdict
    caption: str = ""    # the chart's caption, said once (the chart's title and the page agree)


def cell_of(rec: dict | None, where: str = "", metric: bool = True) -> Cell:
    """A record's result as a cell: its symbol and key metric ("✓ mem_ratio=0.534"); without
    ``metric`` its symbol and result ("✓ pass"), for a table whose own columns give the figure."""
    if rec is None:
        return Cell("")
    key = cell_key(rec)
    metric = shown(key_metric(rec.get("metrics") or {})) if metric else key
    older = rec.get("judged_again")
    if older:   # marked where it is shown: an older judge's record, judged again here where its metrics allow
        return Cell(f"{SYMBOL[key]} {metric} (judge {older['judge']})".replace("  ", " "), key,
                    f"written by judge {older['judge']}, which said {older['was']}; {older['why']}\n"
                    + _title(key, rec), rec, where)
    return Cell(f"{SYMBOL[key]} {metric}".strip(), key, _title(key, rec), rec, where)


def _title(key: str, rec: dict) -> str:
    """Hover text: the result with its reason, then the first few scalar metrics."""
    metrics = rec.get("metrics") or {}
    names = [n for n in PREFERRED_METRICS if n in metrics] + [n for n in metrics if n not in PREFERRED_METRICS]
    figures = [f"{shown(n, 80)}={scalar(metrics[n])}" for n in names
               if n not in NOT_SHOWN and isinstance(metrics[n], (int, float, str, bool))][:TITLE_METRICS]
    return "\n".join([f"{key}: {shown(rec.get('reason'))}".strip(), *figures])


def scalar(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def num(value) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else ""


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_")[:60]


def image_name(prefix: str, label: str) -> str:
    """A chart's file name beside matrix.md for one column: its label's slug, cut, and a hash of
    the whole label. The slug alone is cut at 60 characters, and two labels that differ only
    after it (the upgrade check's baseline and candidate: one torch, another transformers,
    "... · transformers 5.24.0") were one file, one column's chart shown under both."""
    return f"{prefix}_{slug(label)}_{hashlib.sha256(label.encode('utf-8', 'replace')).hexdigest()[:10]}.png"


def finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


# --------------------------------------------------------------------------- the page


def env_rows(m: Matrix) -> list[dict]:
    """One row per environment (a machine, its Python, torch and packages: one run file, or one
    stack of it), not per column: its targets are one cell, what ran and what was absent, and
    the rest of a row is the same for every target (a row per column said it three times)."""
    envs: dict[str, list] = {}
    for col in m.columns:
        envs.setdefault(col.env_id, []).append(col)
    ran_in: dict[str, list[dict]] = {}
    for (_, cid), r in m.cells.items():
        if r["status"] != Status.SKIP:
            ran_in.setdefault(cid, []).append(r)
    rows = []
    for cols in envs.values():
        col = cols[0]
        f = col.facts
        pk, mac, py = f.get("packages") or {}, f.get("mac") or {}, f.get("python") or {}
        headers = list({id(h): h for c in cols for h in (c.headers or [c.header])}.values())
        ran = [c for c in cols if ran_in.get(c.id)]
        absent = list(dict.fromkeys(name for name, _ in verdict.absent_targets(headers)))
        targets = "; ".join(x for x in (
            "ran: " + ", ".join(dict.fromkeys(c.target_label for c in ran)) if ran else "nothing ran",
            "absent: " + ", ".join(absent) if absent else "") if x)
        partial = verdict.partial_note(headers, [r for c in ran for r in ran_in[c.id]], "",
                                       list(dict.fromkeys(r for c in cols for r in c.cut_off)))
        partial = partial.split("absent on this machine: ")[0].rstrip("; ")   # the targets cell says that
        rows.append({
            "environment": f"{short(f.get('host', '?'))} · torch {col.torch_release}{col.label_suffix}",
            "machine": col.host_label, "targets": targets,
            "os": (f.get("os") or {}).get("platform"), "python": f"{py.get('version')} ({py.get('arch')})",
            "torch": pk.get("torch"), "transformers": pk.get("transformers"), "datasets": pk.get("datasets"),
            "accelerate": pk.get("accelerate"), "macOS": mac.get("version") or "-",
            "chip / CPU": mac.get("chip") or (f.get("cpu") or {}).get("model"),
            "MPS fallback": (col.header.get("mps_fallback") or {}).get("setting"),
            "suite rev": f.get("suite_revision"), "runs": max(len(c.runs) for c in cols),
            "complete": partial or "yes",
        })
    return rows


def suite_sections(m: Matrix) -> list[Section]:
    """Each suite's matrix, over the columns that ran it (a column of the optimization suite's
    large workload is not an empty column of every other suite)."""
    bars = _suite_bars(m)
    out = []
    for suite, checks in m.suites.items():
        cols = [c for c in m.columns if any(bars[(suite, c.id)].values())]
        heads = ["check"] + [c.label for c in cols]
        matrix = {"columns": cols, "suite": suite, "bars": [Bar(bars[(suite, c.id)]) for c in cols]}
        if len(checks) <= SUMMARIZE_OVER:
            out.append(Section(suite, heads, _check_rows(m, checks, cols), anchor=suite,
                               fold=len(checks) > LONG, **matrix))
            continue
        counts = {c.id: Counter(_count_key(r) for (ch, col), r in m.cells.items()
                                if col == c.id and r["suite"] == suite)
                  for c in cols}
        out.append(Section(f"{suite}: {len(checks)} checks, by category", ["category"] + heads[1:],
                           [[cat] + [str(counts[c.id].get(cat, 0)) for c in cols] for cat in
                            (*Category.OPS, *KEY_ORDER, "skipped") if any(counts[c.id].get(cat) for c in cols)],
                           anchor=suite,
                           intro="native: ran, no fallback; cpu-fallback: ran with ops on the CPU; unsupported: "
                                 "NotImplementedError; n/a: errors, crashes and timeouts (see below); other "
                                 "suites are counted by result (pass, fail, xfail ...); skipped: target absent "
                                 "or nothing to compare (see the skip reasons below).", **matrix))
        odd = [check for check in checks
               if any((r := m.cells.get((check, c.id))) and cell_key(r) != Status.PASS and r["status"] != Status.SKIP
                      for c in cols)]
        out.append(Section(f"{suite}: checks that did not simply pass somewhere", heads,
                           _check_rows(m, odd, cols), level=3, fold=len(odd) > LONG,
                           intro=f"All {len(odd):,} of them; skips (target absent) are left out.",
                           empty="Every check passed where it ran.", **matrix))
    return out


def _check_rows(m: Matrix, checks: list[str], cols: list | None = None) -> list[list]:
    cols = m.columns if cols is None else cols
    return [[check] + [cell_of(m.cells.get((check, c.id)), c.label) for c in cols] for check in checks]


def _suite_bars(m: Matrix) -> dict[tuple[str, str], Counter]:
    """(suite, column id) -> counts per legend key, for the bars under a matrix's header."""
    counts: dict[tuple[str, str], Counter] = {(s, c.id): Counter() for s in m.suites for c in m.columns}
    for (_, col_id), rec in m.cells.items():
        counts[(rec["suite"], col_id)][cell_key(rec)] += 1
    return counts


def _count_key(rec: dict) -> str:
    """What a large suite's summary counts a record as: its op category, else its result."""
    if rec["status"] == Status.SKIP:
        return "skipped"
    return rec["category"] if rec.get("category") in Category.OPS else cell_key(rec)


# Where the findings that are not broken checks (no cause, no switch in the failures by cause)
# are explained: the "Every failure" section's introduction says so, kind by kind (verdict.FINDINGS).
EXPLAINED_ELSEWHERE = {
    "unsupported ops": "in each row's reason (what the op raised) and in the ops section's list of the checks "
                       "that did not simply pass",
    "unexpected passes": "in each row's reason, which names the expectation the check passed against (the "
                         "expectation to update)",
    "claims that do not hold": "in the optimizations section, each claim with what the document claimed beside "
                               "what was measured",
}


def outcome_sections(m: Matrix) -> list[Section]:
    """Every failure, grouped by cause and then by family (the page's second stop after the
    verdicts); then PyTorch's own MPS expectations, the known limitations and the skips.
    A known limitation that several columns share, word for word, is one row naming them."""
    broken, limits, skips, disagreements = [], {}, {}, []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            if rec is None:
                continue
            key, reason = cell_key(rec), shown(rec.get("reason"))
            result = Cell(f"{SYMBOL[key]} {key}", key, record=rec, where=col.label)
            if (rec.get("metrics") or {}).get("disagreement"):
                disagreements.append([check, col.label, shown(rec["metrics"]["disagreement"]),
                                      shown(rec["metrics"].get("pytorch_expects", "")), result])
            if key in verdict.PROBLEMS:
                broken.append((col, rec, result))
            elif key == Status.XFAIL:
                limits.setdefault((check, reason), [[], result])[0].append(col.label)
            elif key == Status.SKIP:
                group = skips.setdefault((col.target, reason), [0, set(), {}])
                group[0] += 1
                group[1].add(col.label)
                group[2].setdefault(rec.get("subject") or check, None)
    order = {g.cause: i for i, g in enumerate(verdict.failure_groups([rec for _, rec, _ in broken]))}
    kinds = [kind for kind, _ in verdict.FINDINGS]   # after the failures, the other findings in the page's order
    rows = sorted(([shown(verdict.cause_of(rec) if cell_key(rec) in verdict.BROKEN else verdict.finding_of(rec) or ""),
                    verdict.family_of(rec), rec["check"], col.label, result,
                    shown(records.without_cause(rec.get("reason") or "", rec.get("metrics") or {}))]
                   for col, rec, result in broken),
                  key=lambda r: (r[0] not in order, order.get(r[0], 0),
                                 kinds.index(r[0]) if r[0] in kinds else len(kinds), r[0], r[1], r[2]))
    skipped = [[t, str(n), str(len(cols)), _skipped_what(list(subjects)), r]
               for (t, r), (n, cols, subjects) in sorted(skips.items(), key=lambda item: item[0])]
    limited = [[check, ", ".join(cols), result, reason] for (check, reason), (cols, result) in limits.items()]
    return [
        Section(f"Every failure, by cause and family ({_tally([rec for _, rec, _ in broken])})",
                ["cause", "family", "check", "column", "result", "reason"], rows, anchor="failures",
                fold=len(rows) > LONG, empty="No failures.",
                intro="Fails, errors, crashes and timeouts grouped by the cause their judge or reruns found ("
                      f"'{verdict.UNDETERMINED}' where none was), then by family; then unsupported ops, unexpected "
                      "passes and claims that do not hold. Every one is listed, with what it saw. Of the fails, "
                      "errors, crashes and timeouts, what the cause is and the switch that changes it are said "
                      "once, in the table above (and in full in each result's record: click it). The table above "
                      "has nothing of the others: " + "; ".join(
                          f"{kind} ({what}) are explained {EXPLAINED_ELSEWHERE[kind]}"
                          for kind, what in verdict.FINDINGS if kind in EXPLAINED_ELSEWHERE) + "."),
        Section("Disagreements with PyTorch's own MPS expectations", ["check", "column", "disagreement",
                                                                    "PyTorch expects", "result"],
                disagreements, empty="None (or no MPS column).", fold=len(disagreements) > LONG,
                intro="From torch.testing._internal.common_mps of each column's torch: what an upgrade reviewer "
                      "reads first."),
        Section("Known limitations (xfail), with what would lift them", ["check", "columns", "result", "reason"],
                limited, empty="None.", fold=len(limited) > LONG, anchor="limitations",
                intro="A limitation that several columns share word for word is one row naming them; its result "
                      "opens the first column's record."),
        Section("Skipped, grouped by reason", ["target", "checks", "columns", "what", "reason"], skipped,
                empty="Nothing skipped.", fold=len(skipped) > LONG, anchor="skipped"),
    ]


TALLY_WORDS = {"failure": ("failure", "failures"), Status.XPASS: ("unexpected pass", "unexpected passes"),
               Category.UNSUPPORTED: ("unsupported op", "unsupported ops"),
               Category.DOES_NOT_HOLD: ("claim that does not hold", "claims that do not hold")}


def _tally(recs: list[dict]) -> str:
    """What the failures table holds, each kind counted apart ("53 failures, 97 unexpected
    passes, 21 claims that do not hold"): the fleet's title said "(150)" of 53 failures and 97
    unexpected passes, as if all were failures."""
    keys = Counter("failure" if cell_key(r) in verdict.BROKEN else cell_key(r) for r in recs)
    return ", ".join(f"{keys[k]:,} {words[keys[k] != 1]}" for k, words in TALLY_WORDS.items()
                     if keys[k] or k == "failure")


SKIPPED_NAMED = 40   # a reason that skips more subjects than this (a whole absent target) counts them


def _skipped_what(subjects: list[str]) -> str:
    """The subjects (ops, models, techniques) a skip reason covers, as the table names them."""
    if len(subjects) > SKIPPED_NAMED:
        return f"{len(subjects):,} subjects"
    return shown(listed(subjects, 6))


def model_sections(m: Matrix) -> list[Section]:
    """Does this model run natively: measured fallbacks and, from the kernel table, the
    ops that would lack an MPS kernel."""
    rows = []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            met = (rec or {}).get("metrics") or {}
            if not rec or rec.get("suite") != "ops" or "model" not in met or rec["status"] == Status.SKIP:
                continue
            ops = met.get("ops") or {}
            rows.append([shown(met["model"]), col.label, cell_of(rec, col.label),
                         " / ".join(shown(ops.get(p, ""), 40) for p in ("forward", "backward", "optimizer")),
                         ", ".join(met.get("fallback_ops") or []) or "none",
                         ", ".join(met.get("predicted_without_mps_kernel") or []) or "none"])
    return [Section("Does this model run natively", ["model", "column", "result", "ops fwd / bwd / optim",
                                                     "fell back to the CPU (measured)",
                                                     "no MPS kernel (predicted from the kernel table)"], rows,
                    empty="No model checks ran.",
                    intro="One training step (forward, backward, AdamW) per model. The prediction is static: "
                          "composites and device-generic ops are not counted against a model.")]


def load_kernel_tables(path: Path) -> tuple[list[dict], list[str]]:
    """Saved kernel tables (tools.kernels --save), oldest torch first; problems as lines.
    ``path``: a directory of them (where none is, there are none), or one table's file. A
    table that cannot be read, or whose fields are of another type than its readers take
    (harness.ops.kernels.table_problem), is one line naming the file and the field; the
    others are still used. A saved diff in the directory is passed over."""
    from harness.ops import kernels
    tables, errors = [], []
    if path.is_dir():
        files, given = sorted(path.glob("*.json")), False
    elif path.exists():
        files, given = [path], True
    else:
        return tables, errors
    for file in files:
        try:
            doc = runfiles.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            errors.append(f"{file}: not a readable kernel table ({type(exc).__name__})")
            continue
        if not kernels.is_table(doc):
            if given:
                errors.append(f"{file}: not a kernel table (no mps_ops: a saved diff?); give a table of "
                              "python -m tools.kernels --save, or the directory of them")
            continue  # a saved diff, not a table
        problem = kernels.table_problem(doc)
        if problem:
            errors.append(f"{file}: {problem}; the table is left out")
            continue
        tables.append(doc)

    def order(doc):
        try:
            return (0, Version(str(doc.get("torch_version")).split("+")[0]))
        except InvalidVersion:
            return (1, str(doc.get("torch_version")))
    return sorted(tables, key=order), errors


def predicted_sections(tables: list[dict]) -> list[Section]:
    if not tables:
        return [Section("Predicted for MPS: static kernel tables", [], [], empty=(
            "No kernel tables saved. `python -m tools.kernels --save` (installed torch) or "
            "`python -m tools.kernels --torch-version X --save` (any release, downloaded) adds them."))]
    caveat = tables[-1].get("caveat", "")
    rows = [[str(t.get("torch_version")), str(len(t["mps_ops"])), str((t.get("counts") or {}).get("entries", "")),
             str(t.get("source", ""))] for t in tables]
    out = [Section("Predicted for MPS: static kernel tables", ["torch", "ops with an MPS kernel", "yaml entries",
                                                               "source"], rows,
                   intro="Read from native_functions.yaml, no Mac needed. " + caveat)]
    for old, new in zip(tables, tables[1:]):
        a, b = set(old["mps_ops"]), set(new["mps_ops"])
        gained, lost = sorted(b - a), sorted(a - b)
        out.append(Section(f"torch {old.get('torch_version')} -> {new.get('torch_version')}: "
                           f"{len(gained)} ops gain an MPS kernel, {len(lost)} lose one",
                           ["change", "ops"], [["gained", ", ".join(gained) or "-"], ["lost", ", ".join(lost) or "-"]],
                           level=3))
    return out


def verdict_section(m: Matrix, found: list) -> Section:
    """The page's first section: one verdict per machine x torch x target (harness.report.verdict);
    as a table in Markdown and JSON, as cards on the page."""
    names = ("instruments", "environment", "ops", "numerics", "optimizations", "known bugs", "speed and memory")

    def aspect(v, name: str):   # by name: a column without controls has no instruments aspect
        a = next((a for a in v.aspects if a.name == name), None)
        return Cell(a.line, _STATE_KEYS[a.state]) if a else v.instruments_note if name == "instruments" else ""
    rows = [[Cell(v.title, _STATE_KEYS[v.state]), v.machine, v.headline, *[aspect(v, n) for n in names],
             v.partial or "complete"] for v in found]
    notes = " ".join(m.notes)
    return Section("Verdict per machine", ["target", "machine", "verdict", *names, "run"], rows,
                   anchor="verdicts", kind="verdicts", verdicts=found, empty="No check ran.",
                   intro="One verdict per machine, torch version and target: is the environment fit, which ops run "
                         "natively or fall back to the CPU, whether the numbers are as right as the CPU's, which "
                         "documented optimizations help here, which reported bugs are present. The sections below "
                         "hold every record behind each line." + (" " + notes if notes else ""))


_STATE_KEYS = {verdict.GOOD: Status.PASS, verdict.WARN: Category.CPU_FALLBACK, verdict.BAD: Status.FAIL,
               verdict.NONE: Status.SKIP}


def controls_section(m: Matrix) -> Section:
    """Every control of every column: the check with a known answer, what it expected and saw,
    and its result; a failed one is what marks its column "instrument not trustworthy here"."""
    rows = []
    earlier_said: set[int] = set()   # a failed control of an earlier run, once (a machine's columns share it)
    for col in m.columns:
        for (check, col_id), rec in sorted(m.cells.items()):
            if col_id != col.id or not is_control(rec):
                continue
            rows.append(_control_row(col, check, rec, shown(rec.get("reason") or "")))
        # a control that failed in an earlier run whose measurements still stand here: a later
        # run's pass of it (the row above) vouches for that run alone (matrix.instruments_of)
        for control in col.instruments.failed:
            if control.record is not None and id(control.record) not in earlier_said:
                earlier_said.add(id(control.record))
                rows.append(_control_row(col, control.check, control.record, shown(control.message)))
    heads = ["column", "control", "result", "expected", "seen", "reason"]
    if not any(row[-1] for row in rows):   # every control passed: no reason to give, no empty column
        heads, rows = heads[:-1], [row[:-1] for row in rows]
    # the columns whose own records some suite measured with no control of it (the per-suite state
    # matrix.json's instruments.unchecked and the cards say): a column of the environment suite
    # alone, or whose every check was skipped, measured nothing for an instrument to vouch for
    measured = _measured_suites(m)
    unchecked = [f"{c.label} ({', '.join(here)})" for c in m.columns
                 if (here := [s for s in c.instruments.unchecked_suites() if s in measured.get(c.id, ())])]
    return Section("Instruments: the controls of each column", heads, rows, anchor="controls",
                   fold=len(rows) > LONG,
                   empty="No control ran in these runs (written before mps-compat had controls, or the controls were "
                         "not selected): their instruments are unchecked.",
                   intro="Checks whose answer is known in advance, run on each device before its suite: an op with "
                         "no kernel must be seen falling back, an exact result must pass the judge and a perturbed "
                         "one fail, a known allocation must move the memory reading, known work must show in the "
                         "timing. A column with a failed control is marked 'instrument not trustworthy here' and "
                         "that suite's verdicts in it are unconfirmed. A control that failed in an earlier run whose "
                         "measurements still stand in the column is listed too, its reason naming the run: a later "
                         "run's pass of the same control vouches for that later run's records only."
                         + (f" Without controls (instruments unchecked): {', '.join(unchecked)}." if rows and unchecked
                            else ""))


def _control_row(col, check: str, rec: dict, reason: str) -> list:
    met = rec.get("metrics") or {}
    key = cell_key(rec)   # the result alone: what it saw is the next column but one
    return [col.label, check, Cell(f"{SYMBOL[key]} {key}", key, _title(key, rec), rec, col.label),
            shown(met.get("expected") or ""), shown(met.get("seen") or ""), reason]


def _measured_suites(m: Matrix) -> dict[str, set[str]]:
    """Column id -> the suites that measured there through an instrument (a check of theirs ran
    that is not a control: matrix.MEASURING_SUITES)."""
    out: dict[str, set[str]] = {}
    for (_, cid), r in m.cells.items():
        if r.get("suite") in MEASURING_SUITES and r["status"] != Status.SKIP and not is_control(r):
            out.setdefault(cid, set()).add(r["suite"])
    return out


def instruments_words(col, measured: Collection[str] | None = None) -> str:
    """A column's instruments in a few words, for the summary table: from the same per-suite
    state as its card and matrix.json (``Instruments.unchecked``). ``measured``: the suites that
    measured in this column (``_measured_suites``; None: not known, every suite of its machine
    and target counts)."""
    found = col.instruments
    here = [s for s in found.unchecked_suites() if measured is None or s in measured]
    unchecked = f"unchecked: {', '.join(here)} (records here from runs without their controls)" if here else ""
    passed = f"{len(found.passed)} control{'' if len(found.passed) == 1 else 's'} passed"
    if found.failed:
        return f"{UNTRUSTED_WORDS}: " + ", ".join(f"{c.suite} control {c.name}" for c in found.failed) + (
            f"; {unchecked}" if unchecked else "")
    if unchecked:
        return unchecked + (f"; {passed} for other records" if found.passed else "")
    if found.passed:
        return f"checked: {passed}"
    if measured is not None and not measured:
        return "nothing measured through an instrument here (no control to run)"
    return "unchecked (no control ran)"


def legend_section() -> Section:
    return Section("Legend", ["symbol", "result", "meaning"], [[s, Cell(k, k), t] for k, s, t in LEGEND],
                   anchor="legend", kind="legend", level=3)


def sections(m: Matrix, kernel_tables: list[dict], errors: list[str], speed: list[Section] = (),
             regressions: dict | None = None, found: list | None = None, baseline=None) -> list[Section]:
    """The page: the verdicts and the legend first, then the failures by cause, then the
    environments and the matrix, suite by suite, then the rest of the outcomes. ``speed``: the
    perf suite's sections (harness.report.speed), placed after the optimizations'.
    ``regressions``: column id -> that column against a baseline (speed.against_baseline);
    ``baseline``: that baseline (a harness.report.compare.Side), which names its machine where no
    column was compared with it."""
    found = verdict.verdicts(m, regressions) if found is None else found
    envs = env_rows(m)
    failures, *rest_of_outcomes = outcome_sections(m)
    by_cause, *cpu_side = cause_sections(m)
    out = [verdict_section(m, found), legend_section(), by_cause, failures, controls_section(m)]
    if regressions is not None and not regressions and baseline is not None:   # said on the first screen too
        out[0].intro += " " + not_compared(m, baseline)
    out.append(Section("Environments", list(envs[0]) if envs else [], [list(r.values()) for r in envs],
                       anchor="environments"))
    measured = _measured_suites(m)
    out.append(Section("Summary per column", ["column", "all suites"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER]
                       + ["instruments"],
                       [[c.label, Bar(m.summary(c))] + [str(m.summary(c).get(k, 0)) for k in KEY_ORDER]
                        + [instruments_words(c, measured.get(c.id, set()))]
                        for c in m.columns], anchor="summary"))
    if regressions is not None:
        out.append(regressions_section(m, regressions, baseline))
    out.append(history_section(m))
    out += suite_sections(m)
    out += model_sections(m)
    out += parity_sections(m)
    out += cpu_side
    out += known_bug_sections(m)
    out += optim_sections(m)
    out += list(speed)
    out += rest_of_outcomes
    out += predicted_sections(kernel_tables)
    problems = list(m.notes) + list(errors)
    if problems:
        out.append(Section("Problems reading the input", ["problem"], [[e] for e in problems], anchor="problems"))
    anchors = {s.anchor for s in out if s.anchor}
    for v in found:   # a verdict links only to a section this page has
        for a in v.aspects:
            if a.anchor not in anchors:
                a.anchor = ""
    return out


def not_compared(m: Matrix, baseline) -> str:
    """Why no column of ``m`` was compared with ``baseline`` (a harness.report.compare.Side: the
    rules compare a column of the baseline's machine, host and hardware, and of a target it
    ran), in a sentence that says nothing was compared; "" without a baseline."""
    if baseline is None:
        return ""
    from harness.core.records import target_of
    from harness.report.matrix import hardware_key, machine_name
    facts = baseline.header.get("facts") or {}
    machine = f"{short(facts.get('host', '?'))}: {machine_name(facts)}"
    mine = [c for c in m.columns
            if (c.facts.get("host"), hardware_key(c.facts)) == (facts.get("host"), hardware_key(facts))]
    if not mine:
        return (f"The baseline's machine ({machine}) has no column here: nothing was compared, so nothing is said "
                "of regressions (a baseline speaks for the machine it was kept on: compare with the run files of "
                "that machine, or keep a baseline here with ./compat baseline).")
    targets = ", ".join(sorted({target_of(r) for r in baseline.records.values()})) or "none"
    return (f"No column of the baseline's machine ({machine}) here is of a target and workload it ran ({targets}): "
            "nothing was compared, so nothing is said of regressions.")


def regressions_section(m: Matrix, regressions: dict, baseline=None) -> Section:
    """What the first screen's "against the baseline" counts: the regressions, then the warnings
    (a slowdown seen in one process only, or one the rules could not call). Where no column was
    compared (``regressions`` empty: none of the baseline's machine and targets), it says so and
    why (``not_compared``), never "nothing regressed"."""
    labels = {c.id: c.label for c in m.columns}
    order = {"regression": 0, "warning": 1}
    rows = [[labels.get(cid, cid), c.check, Cell(c.kind, Status.FAIL if c.kind == "regression" else "inconclusive"),
             c.rule, c.before, c.after, shown(c.detail)]
            for cid, found in regressions.items()
            for c in sorted(found.changes, key=lambda c: order.get(c.kind, 2)) if c.kind in order]
    return Section("Against the baseline: what regressed, and what could not be told",
                   ["column", "check", "change", "rule", "before", "after", "detail"],
                   rows, anchor="against-the-baseline", fold=len(rows) > LONG,
                   empty=("Nothing regressed against the baseline on the columns of its machine, and nothing was "
                          "left undecided." if any(getattr(a, "compared", 1) for a in regressions.values()) else
                          "Nothing was compared: the baseline holds none of the checks of the columns of its machine "
                          "here (keep a baseline of the same selection: ./compat baseline)." if regressions else
                          not_compared(m, baseline) or "No column here is of the baseline's machine and a target it "
                                                       "ran: nothing was compared."),
                   intro="The upgrade check's rules (python -m tools.compare) applied to each column of the "
                         "baseline's machine and target: the regressions, then the warnings ('inconclusive': a "
                         "slowdown seen in one process only, or one the host's own slowness or the noise leaves "
                         "undecided; a claim now too close to its bound to call; a check now skipped; a parity "
                         "verdict of another revision of its judge than the baseline's, not comparable).")


def history_section(m: Matrix) -> Section:
    """Where a result changed across torch versions: what breaks first, then what got fixed."""
    hist = version_history(m)
    row_of = {check: i for i, check in enumerate(m.rows)}
    hist.sort(key=lambda h: (0 if h.last_worked else 1 if h.first_works else 2, row_of[h.check], h.host, h.target))
    works = " ".join(SYMBOL[k] for k in WORKS)
    # two machines that share a host name (a cloud's VMs, all "vm") are two lineages: named in full
    machines: dict[str, set[str]] = {}
    for h in hist:
        machines.setdefault(h.host, set()).add(h.machine)
    rows = [[h.check, f"{short(h.machine if len(machines[h.host]) > 1 and h.machine else h.host)} {h.target} "
                      f"py{short(h.python)}",
             " → ".join(f"{v} {SYMBOL[k]}" for v, k in h.steps),
             Cell(h.first_works, "pass") if h.first_works else "-",
             Cell(h.last_worked, "fail") if h.last_worked else "-", history_note(h)] for h in hist]
    return Section("Across torch versions: where a result changed",
                   ["check", "host / target", "versions tried (oldest first)", "first works", "last worked", "note"],
                   rows, anchor="history", fold=len(rows) > LONG, empty="No result changed between the torch versions of any machine, target and "
                                              "Python (or only one version was run).",
                   intro=f"Per machine (host and hardware: two machines that share a host name are apart), target "
                         f"and Python, the torch versions in numeric order; works = {works}. "
                         "first works: the first version of the final unbroken run of working versions. last "
                         "worked: when the newest version does not work, the newest that did. Skips are left out; "
                         "a check whose result is the same everywhere is not listed.")


def history_note(h: History) -> str:
    if h.last_worked:
        broke = next(b for w, b in h.regressions if w == h.last_worked)
        return f"regression: worked in {h.last_worked}, broke in {broke}"
    if not h.first_works:
        return "never worked here; the way it fails changed"
    earlier = "; ".join(f"worked in {w}, broke in {b}" for w, b in h.regressions)
    if earlier:
        return f"fixed in {h.first_works}; it had regressed before ({earlier})"
    if h.first_works == h.steps[0][0]:
        return "works in every version tried; the result changed"
    return f"fixed in {h.first_works}"


# --------------------------------------------------------------------------- parity


WORST_PER_DTYPE = 10


def margin_of(rec: dict) -> float | None:
    """A parity record's margin as a number: inf where the result had NaN or inf where float64
    has a number (no allowed error covers it; the run file spells it "inf"), None if none."""
    value = (rec.get("metrics") or {}).get("margin")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return math.inf if value == "inf" else None


def margin_cell(rec: dict) -> str:
    """A parity record's margin as the page shows it. An infinite margin says what made it
    so: NaN or inf where float64 has a number, or the cause the judge named (a compiled
    gradient where eager has none is no NaN); plain "inf" where the record names neither."""
    margin = margin_of(rec)
    if margin != math.inf:
        return num((rec.get("metrics") or {}).get("margin"))
    met = rec.get("metrics") or {}
    if met.get("non_finite") or met.get("cause") == "non-finite":
        return "inf: NaN/inf"
    return f"inf: {shown(met['cause'])}" if met.get("cause") else "inf"


def parity_sections(m: Matrix) -> list[Section]:
    """Errors and margins of the parity suite: a summary per column and dtype, then the
    checks that came closest to (or went past) their tolerance."""
    measured = {}
    for (check, col_id), rec in m.cells.items():
        if rec.get("suite") == "parity" and margin_of(rec) is not None and not is_control(rec):
            # a control's margin is its known answer (perturbed-fails passes at a margin of 274): in
            # the Instruments table, never among the checks' margins
            measured.setdefault((col_id, dtype_of(rec)), []).append((check, rec))
    labels = {c.id: c.label for c in m.columns}
    order = {c.id: i for i, c in enumerate(m.columns)}
    keys = sorted(measured, key=lambda k: (order.get(k[0], 0), DTYPES.index(k[1]) if k[1] in DTYPES else 99))
    summary, worst, charted = [], [], []
    for key in keys:
        recs = measured[key]
        margins = sorted(margin_of(r) for _, r in recs)
        statuses = Counter(cell_key(r) for _, r in recs)
        ranked = sorted(recs, key=lambda cr: (-margin_of(cr[1]), cr[0]))   # ties by id: the same page whatever the order the runs came in
        infinite = Counter(margin_cell(r) for _, r in ranked if margin_of(r) == math.inf)
        summary.append([labels.get(key[0], key[0]), key[1], str(len(recs)), str(statuses.get("pass", 0)),
                        str(statuses.get("fail", 0)), str(statuses.get("xfail", 0)),
                        num(margins[len(margins) // 2]),
                        "; ".join(f"{label} ({n})" if n > 1 else label for label, n in infinite.items())
                        or num(margins[-1])])
        for check, rec in ranked[:WORST_PER_DTYPE]:
            met = rec["metrics"]
            worst.append([check, labels.get(key[0], key[0]), key[1], cell_of(rec, labels.get(key[0], "")),
                          margin_cell(rec),
                          num(met.get("max_abs_err")), num(met.get("max_rel_err")),
                          f"rtol {num(met.get('rtol'))}, atol {num(met.get('atol'))}", met.get("reference") or ""])
        charted += [(f"{check} · {labels.get(key[0], key[0])}", margin_of(r), cell_key(r))
                    for check, r in recs if 0 < margin_of(r) < math.inf]
    charted = sorted(charted, key=lambda p: (-p[1], p[0]))[:WORST_CHARTED]
    margin_caption = (f"The {len(charted)} largest finite margins over every column and dtype (log scale; past "
                      "the red line at 1: outside tolerance)")
    return [
        Section("Numerical parity: margins per column and dtype",
                ["column", "dtype", "compared", "pass", "fail", "xfail", "median margin", "worst margin"], summary,
                empty="No parity checks measured anything.", anchor="margins",
                intro="margin = largest error / allowed error: <= 1 passes. The reference is float64 on the same "
                      "inputs; on an accelerator the allowed error is also the CPU's own error in the same dtype "
                      "(x 2, + 2 units in the last place), so an accelerator no less accurate than the CPU passes. "
                      "xfail: a float16/bfloat16 precision limit or a known float32 limit (the reason says which)."),
        Section(f"Numerical parity: the {WORST_PER_DTYPE} worst checks per column and dtype",
                ["check", "column", "dtype", "result", "margin", "max abs err", "max rel err", "tolerance",
                 "against"], worst, level=3, empty="No parity checks measured anything.", fold=len(worst) > LONG,
                caption=margin_caption, image=margin_chart(charted, title=margin_caption) if charted else None,
                image_name="parity_worst_margins.png"),
    ]


CAUSE_EXAMPLES = 4


def cause_sections(m: Matrix) -> list[Section]:
    """The broken checks of each column grouped by cause (verdict.failure_groups: the cause
    their judge or reruns found, with the switch that changes it; a failure whose cause is
    unknown says so, it is never dropped); then the checks where the CPU, not the target,
    was the inaccurate side."""
    labels = {c.id: c.label for c in m.columns}
    rows, cpu_off = [], []
    # one row per cause and set of checks: the same checks failing for the same cause in several
    # columns (two transformers releases, two torch versions) are one finding, its columns listed
    found: dict[tuple, tuple] = {}
    for col in m.columns:
        recs = [rec for (check, col_id), rec in sorted(m.cells.items()) if col_id == col.id]
        for g in verdict.failure_groups(recs):
            found.setdefault((g.cause, g.what, g.switch, tuple(g.checks)), (g, []))[1].append(col.label)
    for g, cols in found.values():
        suites = Counter(check.split("/", 1)[0] for check in g.checks)
        rows.append([Cell(shown(g.cause), Status.FAIL, wrap=True), "; ".join(cols),
                     str(len(g.checks)) + (" in each" if len(cols) > 1 else ""),
                     ", ".join(f"{s} {n}" for s, n in suites.most_common()),
                     ", ".join(g.checks[:CAUSE_EXAMPLES]) + (f" and {len(g.checks) - CAUSE_EXAMPLES} more"
                                                             if len(g.checks) > CAUSE_EXAMPLES else ""),
                     shown(g.what), shown(g.switch)])
    for (check, col_id), rec in sorted(m.cells.items()):
        finding = (rec.get("metrics") or {}).get("cpu_finding")
        if rec.get("suite") == "parity" and causes.cpu_misses_float64(finding):   # the CPU met float64's rules: none
            cpu_off.append([check, labels.get(col_id, col_id), num(finding.get("cpu_err")),
                            num(finding.get("target_err")), num(records.recorded_number(finding.get("cpu_margin")))])
    return [
        Section("Failures by cause", ["cause", "column", "checks", "suites", "for example", "what happened",
                                      "the switch"], rows, anchor="failures-by-cause",
                empty="No check failed, errored, crashed or timed out.",
                intro="Every failing check of each column, grouped by what caused it (the same checks failing "
                      "for the same cause in several columns are one row): an accelerator's numbers are "
                      "judged by their accuracy against float64 with the CPU's own error as the yardstick, and a "
                      "failing sample is run again there with TF32 off, on float32 inputs and a second time; the "
                      f"first rerun that changes the verdict names the cause ('{verdict.UNDETERMINED}' where none "
                      "did). The next section lists every one."),
        Section("Numerical parity: where the CPU is the inaccurate side", ["check", "column", "CPU's error",
                                                                          "target's error", "CPU's margin"],
                cpu_off, level=3, empty="None: wherever the target passed, the CPU met float64 too.",
                fold=len(cpu_off) > LONG, anchor="cpu-findings",
                intro="The target passed; the CPU in the same dtype misses float64's rules. A finding about the "
                      "CPU, not a failure of the target."),
    ]


def known_bug_sections(m: Matrix) -> list[Section]:
    """The known-bug cases (harness/parity/known_bugs/cases.py): the issue each comes from, and
    per column whether this machine has the bug, with its result on a rerun."""
    labels = {c.id: c.label for c in m.columns}
    cases: dict[str, dict] = {}
    for (check, col_id), rec in sorted(m.cells.items()):
        met = rec.get("metrics") or {}
        kind = records.kind_of(rec)
        if kind not in RecordKind.KNOWN_BUGS or not met.get("known_bug"):
            continue
        case = cases.setdefault(met["known_bug"], {"met": met, "columns": {}})
        if kind == RecordKind.KNOWN_BUG:
            case["met"] = met
        case["columns"].setdefault(col_id, {})[kind] = rec
    rows, sources = [], []
    for name, case in cases.items():
        met = case["met"]
        sources.append([name, shown(f"pytorch#{met.get('issue')}"), *(shown(met.get(k) or "") for k in (
            "issue_title", "reported", "affected", "fixed", "issue_url"))])
        for col_id, recs in case["columns"].items():
            label = labels.get(col_id, col_id)
            bug, again = recs.get(RecordKind.KNOWN_BUG), recs.get(RecordKind.REPEATABLE)
            shape = shown(((bug or again or {}).get("metrics") or {}).get("shape") or "")
            said = [has_bug(r) for r in (bug, again) if r]
            found = [w for w in said if w not in ("no", "not run")]
            rows.append([name, shown(f"pytorch#{met.get('issue')}"), label, cell_of(bug, label), cell_of(again, label),
                         found[0] if found else "no" if "no" in said else "not run", shape])
    return [
        Section("Known accelerator bugs: does this machine have them",
                ["case", "source", "column", "known-bug check", "repeatable", "has the bug", "shape run"], rows,
                anchor="known-bugs",
                empty="No known-bug case ran (suites/parity/test_known_bugs.py).",
                intro="Wrong results users reported against an accelerator backend, confirmed in PyTorch's issue "
                      "tracker and run here at the reported edge: against float64 with the CPU as the yardstick, "
                      "after a dirty allocator cache and, where the report says so, in rapid succession (the "
                      "known-bug check); and again back to back and after the cache was churned, for the same bits "
                      "(repeatable). On the CPU column a case shows the harness works; the bugs live on "
                      "accelerators."),
        Section("Known accelerator bugs: the sources", ["case", "issue", "title", "reported", "affected", "fixed",
                                                          "link"], sources, level=3,
                empty="No known-bug case ran."),
    ]


# --------------------------------------------------------------------------- optimizations


def optim_sections(m: Matrix) -> list[Section]:
    """The optimization claims: each measured ratio against the claim's bound, and seed
    003's path with a chart of it (measured against the seed, both as x baseline)."""
    labels = {c.id: c.label for c in m.columns}
    claims_rows, paths, points, kept_rows = [], [], [], []
    for (check, col_id), rec in sorted(m.cells.items()):
        if rec.get("suite") != "optim" or rec["status"] == Status.SKIP or is_control(rec):
            continue   # a control's known answer is in the Instruments section, not a document's claim
        met = rec.get("metrics") or {}
        if rec.get("subject") == same_result.SUBJECT:
            kept_rows.append(_kept_row(rec, labels.get(col_id, col_id)))
            continue
        if records.kind_of(rec) == RecordKind.SEED_003_PATH and met.get("rows"):
            paths.append((labels.get(col_id, col_id), rec))
            continue
        ratio = met.get("mem_ratio", met.get("time_ratio"))
        if ratio is None:
            continue
        label = labels.get(col_id, col_id)
        verdict_cell = cell_of(rec, label, metric=False)   # "✓ holds", "≠ does-not-hold": the ratio has its column
        verdict_cell.text = f"{SYMBOL[verdict_cell.key]} {rec.get('category') or verdict_cell.key}"
        if met.get("ratio_category") not in (None, rec.get("category")):   # the ratio alone said otherwise
            verdict_cell.text += f": breaks training (its loss is not finite; the ratio alone: {met['ratio_category']})"
        part = part_of(met.get("basis"))   # a ratio of one part of the step says which part
        claims_rows.append([rec["subject"], f"{rec['variant']} ({part})" if part else rec["variant"], label,
                            verdict_cell, num(ratio),
                            f"[{num(met.get('ci_low'))}, {num(met.get('ci_high'))}]"
                            if met.get("ci_low") is not None and met.get("ci_high") is not None else "",
                            f"{'<' if met.get('kind') == 'lower' else '<='} {num(met.get('bound'))}"
                            if met.get("bound") is not None else "",
                            num(met.get("claimed_ratio")), shown(met.get("rounds", ""), 40),
                            shown(met.get("source") or "")])
        points.append((f"{rec['subject']} {rec['variant']} · {label}", finite(ratio), finite(met.get("ci_low")),
                       finite(met.get("ci_high")), finite(met.get("bound")), cell_key(rec)))
    points = [p for p in points if p[1] is not None and p[1] > 0]
    charted = points[:CHART_ROWS]
    ratio_caption = (f"Measured ratio (dot) with its 95% interval against the bound the claim must stay under "
                     f"(red tick), log scale: {len(charted)} of {len(points)} claims x quantities x columns")
    out = [Section("Optimizations: the documents' claims, measured",
                   ["claim", "quantity", "column", "verdict", "ratio", "95% interval", "holds if",
                    "claimed", "rounds", "source"], claims_rows, empty="No optimization claim was measured.",
                   anchor="optimizations", fold=len(claims_rows) > LONG,
                   caption=ratio_caption,
                   intro="ratio = variant / baseline (peak memory: tracked storage bytes, exact; time: median of "
                         "interleaved rounds, per sample, with a bootstrap interval). A claim holds when the whole "
                         "interval is within the bound (the claimed ratio with the claim's tolerance).",
                   image=ratio_chart(charted, title=ratio_caption) if points else None, image_name="optim_ratios.png")]
    if kept_rows:
        out.append(Section("Do the techniques keep the result", ["technique", "column", "verdict", "compared", "what was seen",
                                                                 "switch"], kept_rows, level=3,
                           anchor="optimizations-keep-the-result",
                           intro="Each technique with and without it on a tiny BERT, dropout off, on the same device: "
                                 "gradient accumulation, checkpointing and torch.compile must give the plain step's "
                                 "gradients (float32's model-gradient tolerance, per parameter); freezing and LoRA must "
                                 "train exactly the parameters they leave trainable. One that changes the result is no "
                                 "optimization, whatever it saves."))
    for label, rec in paths:
        out.append(_path_section(label, rec))
    return out


def _kept_row(rec: dict, label: str) -> list:
    """A row of the keeps-the-result table: what was compared, what was seen and the switch."""
    met = rec.get("metrics") or {}
    if "params_compared" in met:
        compared = f"gradients of {met['params_compared']} parameters, worst margin {num(met.get('margin'))}"
    elif "trainable" in met:
        compared = f"{met.get('changed')} of {met.get('params')} parameters changed, {met.get('trainable')} trainable"
    else:
        compared = ""
    return [rec.get("variant") or "", label, cell_of(rec, label, metric=False), compared,
            shown(rec.get("reason") or ""), shown(met.get("switch") or "")]


def _path_section(label: str, rec: dict) -> Section:
    from harness.optim.claims import SEED_003_PATH
    from harness.optim.seedpath import time_cell
    rows = rec["metrics"]["rows"]
    base, seed = rows[0], SEED_003_PATH.steps
    table = [[shown(r["row"]), f"{r['peak_bytes'] / 2**20:.1f}", f"{r['peak_bytes'] / base['peak_bytes']:.2f}",
              f"{s.memory_gb / seed[0].memory_gb:.2f}", shown(r.get("peak_phase", "")), f"{r['step_s']:.3f}",
              time_cell(r, base), f"{s.time_s / seed[0].time_s:.2f}"] for r, s in zip(rows, seed)]
    caption = f"Peak memory and step time of each step, x the first row (log scale), on {label}"
    return Section(f"Memory-saving steps, one after another, on {label}",
                   ["row", "peak MiB", "memory x baseline", "memory x baseline in the table", "peak phase", "step s",
                    "time x baseline [95% interval]", "time x baseline in the table"], table,
                   level=3, image=path_chart(label, rows, title=caption), image_name=image_name("seed003", label),
                   caption=caption,
                   intro=f"workload {shown(rec['metrics'].get('workload'))} "
                         f"({shown(rec['metrics'].get('shape') or 'shape not recorded')}); {cell_of(rec).text}. "
                         "Each row "
                         "adds one technique to the row before it, as the memory-optimization table for "
                         "chinese-macbert-large (batch 32, length 128) in the source documents does; 'in the table' "
                         "is that table's own figure.")
