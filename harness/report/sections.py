"""The report's sections from a Matrix: what to act on first, the environments, each
suite's matrix, the models, what changed across torch versions, the kernel tables."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.core import records, runfiles
from harness.report.matrix import KEY_ORDER, LEGEND, SYMBOL, WORKS, History, Matrix, cell_key, version_history
from harness.report.model import Bar, Cell, LIST_AT_MOST, PROBLEMS, SUMMARIZE_OVER, Section, cell_of, more
from harness.report.optim import optim_sections
from harness.report.parity import cause_sections, known_bug_sections, parity_sections


def env_rows(m: Matrix) -> list[dict]:
    rows = []
    for col in m.columns:
        f, h = col.facts, col.header
        pk = f.get("packages") or {}
        mac = f.get("mac") or {}
        py = f.get("python") or {}
        rows.append({
            "column": col.label, "host": f.get("host"), "os": (f.get("os") or {}).get("platform"),
            "python": f"{py.get('version')} ({py.get('arch')})", "torch": pk.get("torch"),
            "transformers": pk.get("transformers"), "datasets": pk.get("datasets"), "accelerate": pk.get("accelerate"),
            "macOS": mac.get("version") or "-", "chip / CPU": mac.get("chip") or (f.get("cpu") or {}).get("model"),
            "target available": (h.get("targets") or {}).get(col.target, {}).get("available"),
            "MPS fallback": (h.get("mps_fallback") or {}).get("setting"), "suite rev": f.get("suite_revision"),
            "runs": len(col.runs), "complete": "yes" if col.complete else "no (cut off)",
        })
    return rows


def suite_sections(m: Matrix) -> list[Section]:
    bars = _suite_bars(m)
    out = []
    for suite, checks in m.suites.items():
        heads = ["check"] + [c.label for c in m.columns]
        matrix = {"columns": m.columns, "suite": suite, "bars": [Bar(bars[(suite, c.id)]) for c in m.columns]}
        if len(checks) <= SUMMARIZE_OVER:
            out.append(Section(suite, heads, _check_rows(m, checks), **matrix))
            continue
        counts = {c.id: Counter(_count_key(r) for (ch, col), r in m.cells.items()
                                if col == c.id and r["suite"] == suite)
                  for c in m.columns}
        out.append(Section(f"{suite}: {len(checks)} checks, by category", ["category"] + heads[1:],
                           [[cat] + [str(counts[c.id].get(cat, 0)) for c in m.columns] for cat in
                            (*records.OP_CATEGORIES, *KEY_ORDER, "skipped") if any(counts[c.id].get(cat) for c in m.columns)],
                           intro="native: ran, no fallback; cpu-fallback: ran with ops on the CPU; unsupported: "
                                 "NotImplementedError; n/a: errors, crashes and timeouts (see below); other "
                                 "suites are counted by result (pass, fail, xfail ...); skipped: target absent "
                                 "or nothing to compare (see the skip reasons below).", **matrix))
        odd = [check for check in checks
               if any((r := m.cells.get((check, c.id))) and cell_key(r) != "pass" and r["status"] != "skip"
                      for c in m.columns)]
        more = f" The first {LIST_AT_MOST} of {len(odd)} are listed; matrix.json has all." if len(odd) > LIST_AT_MOST else ""
        out.append(Section(f"{suite}: checks that did not simply pass somewhere", heads,
                           _check_rows(m, odd[:LIST_AT_MOST]), level=3,
                           intro="Skips (target absent) are left out." + more,
                           empty="Every check passed where it ran.", **matrix))
    return out


def _check_rows(m: Matrix, checks: list[str]) -> list[list]:
    return [[check] + [cell_of(m.cells.get((check, c.id)), c.label) for c in m.columns] for check in checks]


def _suite_bars(m: Matrix) -> dict[tuple[str, str], Counter]:
    """(suite, column id) -> counts per legend key, for the bars under a matrix's header."""
    counts: dict[tuple[str, str], Counter] = {(s, c.id): Counter() for s in m.suites for c in m.columns}
    for (_, col_id), rec in m.cells.items():
        counts[(rec["suite"], col_id)][cell_key(rec)] += 1
    return counts


def _count_key(rec: dict) -> str:
    """What a large suite's summary counts a record as: its op category, else its result."""
    if rec["status"] == "skip":
        return "skipped"
    return rec["category"] if rec.get("category") in records.OP_CATEGORIES else cell_key(rec)


def outcome_sections(m: Matrix) -> list[Section]:
    problems, limits, skips, disagreements = [], [], {}, []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            if rec is None:
                continue
            key, reason = cell_key(rec), rec.get("reason", "")
            result = Cell(f"{SYMBOL[key]} {key}", key, record=rec, where=col.label)
            row = [check, col.label, result, reason]
            if (rec.get("metrics") or {}).get("disagreement"):
                disagreements.append([check, col.label, rec["metrics"]["disagreement"],
                                      rec["metrics"].get("pytorch_expects", ""), result])
            if key in PROBLEMS:
                problems.append(row)
            elif key == "xfail":
                limits.append(row)
            elif key == "skip":
                group = skips.setdefault((col.target, reason), [0, set()])
                group[0] += 1
                group[1].add(col.label)
    skipped = [[t, str(n), str(len(cols)), r] for (t, r), (n, cols) in sorted(skips.items())]
    return [
        Section("Failures, errors, crashes", ["check", "column", "result", "reason"], problems[:LIST_AT_MOST],
                empty="No failures.", intro=more(problems)),
        Section("Disagreements with PyTorch's own MPS expectations", ["check", "column", "disagreement",
                                                                    "PyTorch expects", "result"],
                disagreements[:LIST_AT_MOST], empty="None (or no MPS column).",
                intro="From torch.testing._internal.common_mps of each column's torch: what an upgrade reviewer "
                      "reads first." + more(disagreements)),
        Section("Known limitations (xfail), with what would lift them", ["check", "column", "result", "reason"],
                limits[:LIST_AT_MOST], empty="None.", intro=more(limits)),
        Section("Skipped, grouped by reason", ["target", "checks", "columns", "reason"], skipped,
                empty="Nothing skipped."),
    ]


def model_sections(m: Matrix) -> list[Section]:
    """Does this model run natively: measured fallbacks and, from the kernel table, the
    ops that would lack an MPS kernel."""
    rows = []
    for check in m.rows:
        for col in m.columns:
            rec = m.cells.get((check, col.id))
            met = (rec or {}).get("metrics") or {}
            if not rec or rec.get("suite") != "ops" or "model" not in met or rec["status"] == "skip":
                continue
            ops = met.get("ops") or {}
            rows.append([met["model"], col.label, cell_of(rec, col.label), " / ".join(str(ops.get(p, "")) for p in
                                                                          ("forward", "backward", "optimizer")),
                         ", ".join(met.get("fallback_ops") or []) or "none",
                         ", ".join(met.get("predicted_without_mps_kernel") or []) or "none"])
    return [Section("Does this model run natively", ["model", "column", "result", "ops fwd / bwd / optim",
                                                     "fell back to the CPU (measured)",
                                                     "no MPS kernel (predicted from the kernel table)"], rows,
                    empty="No model checks ran.",
                    intro="One training step (forward, backward, AdamW) per model. The prediction is static: "
                          "composites and device-generic ops are not counted against a model.")]


def load_kernel_tables(directory: Path) -> tuple[list[dict], list[str]]:
    """Saved kernel tables (tools.kernels --save), oldest torch first; problems as lines."""
    tables, errors = [], []
    if not directory.is_dir():
        return tables, errors
    for path in sorted(directory.glob("*.json")):
        try:
            doc = runfiles.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            errors.append(f"{path}: not a readable kernel table ({type(exc).__name__})")
            continue
        if not isinstance(doc, dict) or "mps_ops" not in doc:
            continue  # a saved diff, not a table
        if doc.get("schema") != 1 or not isinstance(doc["mps_ops"], list):
            errors.append(f"{path}: kernel table schema {doc.get('schema')!r}, this reader understands 1")
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


# What a user must act on, by kind, in the order the findings section lists them.
ACT_ON = (
    ("fails", "checks that fail: the machine or the setup is wrong; each reason names the cause and the switch"),
    ("crash / timeout", "checks that crashed or hung: a kernel bug to report with the record"),
    ("known bugs present", "reported accelerator bugs this machine has (the known-bugs section)"),
    ("unsupported ops", "ops with no kernel and no fallback on this target"),
    ("unexpected passes", "checks that pass against an expectation of failure: an expectation to update"),
    ("claims that do not hold", "documented optimizations that did not do what the document says here"),
)


def _act_on(rec: dict) -> str | None:
    key = cell_key(rec)
    if records.kind_of(rec) in ("known-bug", "repeatable") and key in PROBLEMS:
        return "known bugs present"
    if key in ("crash", "timeout"):
        return "crash / timeout"
    if key in ("fail", "error"):
        return "fails"
    return {"unsupported": "unsupported ops", "xpass": "unexpected passes",
            "does-not-hold": "claims that do not hold"}.get(key)


def findings_section(m: Matrix) -> Section:
    """The page's first section: per column, what needs acting on, counted by kind, with
    the first few checks of each (their reasons are in the sections below)."""
    rows = []
    for col in m.columns:
        found: dict[str, list[str]] = {}
        for check in m.rows:
            rec = m.cells.get((check, col.id))
            kind = _act_on(rec) if rec else None
            if kind:
                found.setdefault(kind, []).append(check)
        for kind, what in ACT_ON:
            checks = found.get(kind)
            if checks:
                rows.append([col.label, Cell(kind, "fail" if kind != "unexpected passes" else "xpass"),
                             str(len(checks)), ", ".join(checks[:3]) + (f" and {len(checks) - 3} more"
                                                                      if len(checks) > 3 else ""), what])
    return Section("What to act on", ["column", "finding", "checks", "for example", "what it means"], rows,
                   empty="Nothing: every check passed, or was skipped or a known limitation, with its reason below.",
                   intro="First what needs a decision, per column; then the matrix. Failures are grouped by cause "
                         "below, and every reason names the switch that changes it.")


def sections(m: Matrix, kernel_tables: list[dict], errors: list[str]) -> list[Section]:
    """The page: what to act on first (findings, failures by cause, the failures), then the
    environments and the matrix, suite by suite, then the rest of the outcomes."""
    envs = env_rows(m)
    failures, *rest_of_outcomes = outcome_sections(m)
    by_cause, *cpu_side = cause_sections(m)
    out = [findings_section(m), by_cause, failures]
    out.append(Section("Environments", list(envs[0]) if envs else [], [list(r.values()) for r in envs]))
    out.append(Section("Summary per column", ["column", "all suites"] + [f"{SYMBOL[k]} {k}" for k in KEY_ORDER],
                       [[c.label, Bar(m.summary(c))] + [str(m.summary(c).get(k, 0)) for k in KEY_ORDER]
                        for c in m.columns]))
    out.append(history_section(m))
    out += suite_sections(m)
    out += model_sections(m)
    out += parity_sections(m)
    out += cpu_side
    out += known_bug_sections(m)
    out += optim_sections(m)
    out += rest_of_outcomes
    out += predicted_sections(kernel_tables)
    out.append(Section("Legend", ["symbol", "result", "meaning"], [[s, k, t] for k, s, t in LEGEND]))
    if errors:
        out.append(Section("Problems reading the input", ["problem"], [[e] for e in errors]))
    return out


def history_section(m: Matrix) -> Section:
    """Where a result changed across torch versions: what breaks first, then what got fixed."""
    hist = version_history(m)
    row_of = {check: i for i, check in enumerate(m.rows)}
    hist.sort(key=lambda h: (0 if h.last_worked else 1 if h.first_works else 2, row_of[h.check], h.host, h.target))
    works = " ".join(SYMBOL[k] for k in WORKS)
    rows = [[h.check, f"{h.host} {h.target} py{h.python}",
             " → ".join(f"{v} {SYMBOL[k]}" for v, k in h.steps),
             Cell(h.first_works, "pass") if h.first_works else "-",
             Cell(h.last_worked, "fail") if h.last_worked else "-", history_note(h)] for h in hist]
    return Section("Across torch versions: where a result changed",
                   ["check", "host / target", "versions tried (oldest first)", "first works", "last worked", "note"],
                   rows[:LIST_AT_MOST], empty="No result changed between the torch versions of any host, target and "
                                              "Python (or only one version was run).",
                   intro=f"Per host, target and Python, the torch versions in numeric order; works = {works}. "
                         "first works: the first version of the final unbroken run of working versions. last "
                         "worked: when the newest version does not work, the newest that did. Skips are left out; "
                         "a check whose result is the same everywhere is not listed." + more(rows, " "))


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
