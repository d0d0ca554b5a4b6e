"""The parity sections: margins per column and dtype, the worst checks, failures by
cause with the switch, where the CPU was the inaccurate side, and the known bugs."""
from __future__ import annotations

from collections import Counter

from harness.core import records
from harness.report.matrix import Matrix, cell_key
from harness.report.charts import WORST_CHARTED, margin_chart
from harness.report.model import Cell, DTYPES, LIST_AT_MOST, PROBLEMS, Section, cell_of, dtype_of, more, num


WORST_PER_DTYPE = 10


def parity_sections(m: Matrix) -> list[Section]:
    """Errors and margins of the parity suite: a summary per column and dtype, then the
    checks that came closest to (or went past) their tolerance."""
    measured = {}
    for (check, col_id), rec in m.cells.items():
        if rec.get("suite") == "parity" and isinstance((rec.get("metrics") or {}).get("margin"), (int, float)):
            measured.setdefault((col_id, dtype_of(rec)), []).append((check, rec))
    labels = {c.id: c.label for c in m.columns}
    order = {c.id: i for i, c in enumerate(m.columns)}
    keys = sorted(measured, key=lambda k: (order.get(k[0], 0), DTYPES.index(k[1]) if k[1] in DTYPES else 99))
    summary, worst, charted = [], [], []
    for key in keys:
        recs = measured[key]
        margins = sorted(r["metrics"]["margin"] for _, r in recs)
        statuses = Counter(cell_key(r) for _, r in recs)
        summary.append([labels.get(key[0], key[0]), key[1], str(len(recs)), str(statuses.get("pass", 0)),
                        str(statuses.get("fail", 0)), str(statuses.get("xfail", 0)),
                        num(margins[len(margins) // 2]), num(margins[-1])])
        for check, rec in sorted(recs, key=lambda cr: -cr[1]["metrics"]["margin"])[:WORST_PER_DTYPE]:
            met = rec["metrics"]
            worst.append([check, labels.get(key[0], key[0]), key[1], cell_of(rec, labels.get(key[0], "")),
                          num(met["margin"]),
                          num(met.get("max_abs_err")), num(met.get("max_rel_err")),
                          f"rtol {num(met.get('rtol'))}, atol {num(met.get('atol'))}", met.get("reference") or ""])
        charted += [(f"{check} · {labels.get(key[0], key[0])}", r["metrics"]["margin"], cell_key(r))
                    for check, r in recs if r["metrics"]["margin"] > 0]
    charted = sorted(charted, key=lambda p: -p[1])[:WORST_CHARTED]
    return [
        Section("Numerical parity: margins per column and dtype",
                ["column", "dtype", "compared", "pass", "fail", "xfail", "median margin", "worst margin"], summary,
                empty="No parity checks measured anything.",
                intro="margin = largest error / allowed error: <= 1 passes. The reference is float64 on the same "
                      "inputs; on an accelerator the allowed error is also the CPU's own error in the same dtype "
                      "(x 2, + 2 units in the last place), so an accelerator no less accurate than the CPU passes. "
                      "xfail: a float16/bfloat16 precision limit or a known float32 limit (the reason says which)."),
        Section(f"Numerical parity: the {WORST_PER_DTYPE} worst checks per column and dtype",
                ["check", "column", "dtype", "result", "margin", "max abs err", "max rel err", "tolerance",
                 "against"], worst, level=3, empty="No parity checks measured anything.",
                image=margin_chart(charted) if charted else None, image_name="parity_worst_margins.png"),
    ]


CAUSE_EXAMPLES = 4


def cause_sections(m: Matrix) -> list[Section]:
    """Parity on accelerators: the failures grouped by the cause their reruns found
    (harness.parity.causes), with the switch that changes each; then the checks where the CPU,
    not the target, was the inaccurate side."""
    from harness.parity import causes
    labels = {c.id: c.label for c in m.columns}
    groups: dict[tuple[str, str], list[str]] = {}
    found, cpu_off = {}, []
    for (check, col_id), rec in sorted(m.cells.items()):
        met = rec.get("metrics") or {}
        if rec.get("suite") != "parity":
            continue
        if met.get("cause") and cell_key(rec) in PROBLEMS:
            groups.setdefault((met["cause"], col_id), []).append(check)
            found[(met["cause"], col_id)] = met
        finding = met.get("cpu_finding")
        if isinstance(finding, dict):
            cpu_off.append([check, labels.get(col_id, col_id), num(finding.get("cpu_err")),
                            num(finding.get("target_err")), num(finding.get("cpu_margin"))])
    order = {name: i for i, name in enumerate((*causes.ORDER, "unexplained"))}
    rows = [[Cell(cause, "fail"), labels.get(col_id, col_id), str(len(checks)),
             ", ".join(checks[:CAUSE_EXAMPLES]) + (f" and {len(checks) - CAUSE_EXAMPLES} more"
                                                   if len(checks) > CAUSE_EXAMPLES else ""),
             found[(cause, col_id)].get("cause_what", ""), found[(cause, col_id)].get("switch", "")]
            for (cause, col_id), checks in sorted(groups.items(), key=lambda kv: (order.get(kv[0][0], 99), kv[0][1]))]
    return [
        Section("Numerical parity on accelerators: failures by cause",
                ["cause", "column", "checks", "for example", "what happened", "the switch"], rows,
                empty="No parity failure on an accelerator.",
                intro="An accelerator is judged by its accuracy against float64, the CPU's own error as the "
                      "yardstick. A failing sample is run again there with TF32 off, on float32 inputs, and a "
                      "second time; the first rerun that changes the verdict names the cause."),
        Section("Numerical parity: where the CPU is the inaccurate side", ["check", "column", "CPU's error",
                                                                          "target's error", "CPU's margin"],
                cpu_off[:LIST_AT_MOST], level=3, empty="None: wherever the target passed, the CPU met float64 too.",
                intro="The target passed; the CPU in the same dtype misses float64's rules. A finding about the "
                      "CPU, not a failure of the target." + more(cpu_off)),
    ]


def _has_bug(rec: dict) -> str:
    """Whether the column shows the reported bug, in words."""
    status, category = rec.get("status"), rec.get("category")
    if status == "pass":
        return "no"
    if status == "skip":
        return "not run"
    if status in ("crash", "timeout"):
        return f"{status} (a crash or hang in the op: report it with this shape)"
    if category == "raises":
        return "yes: raises"
    if category == "unrepeatable":
        return "yes: other bits on a rerun"
    met = rec.get("metrics") or {}
    if met.get("cause") not in (None, "unexplained"):
        return f"no, but differs: {met['cause']}"
    return "yes: wrong result" + (" (intermittent)" if met.get("intermittent") else "")


def known_bug_sections(m: Matrix) -> list[Section]:
    """The known-bug cases (harness/parity/known_bug_cases.py): the issue each comes from, and
    per column whether this machine has the bug, with its result on a rerun."""
    labels = {c.id: c.label for c in m.columns}
    cases: dict[str, dict] = {}
    for (check, col_id), rec in sorted(m.cells.items()):
        met = rec.get("metrics") or {}
        kind = records.kind_of(rec)
        if kind not in ("known-bug", "repeatable") or not met.get("known_bug"):
            continue
        case = cases.setdefault(met["known_bug"], {"met": met, "columns": {}})
        if kind == "known-bug":
            case["met"] = met
        case["columns"].setdefault(col_id, {})[kind] = rec
    rows, sources = [], []
    for name, case in cases.items():
        met = case["met"]
        sources.append([name, f"pytorch#{met.get('issue')}", met.get("issue_title") or "", met.get("reported") or "",
                        met.get("affected") or "", met.get("fixed") or "", met.get("issue_url") or ""])
        for col_id, recs in case["columns"].items():
            label = labels.get(col_id, col_id)
            bug, again = recs.get("known-bug"), recs.get("repeatable")
            shape = ((bug or again or {}).get("metrics") or {}).get("shape") or ""
            said = [_has_bug(r) for r in (bug, again) if r]
            found = [w for w in said if w not in ("no", "not run")]
            rows.append([name, f"pytorch#{met.get('issue')}", label, cell_of(bug, label), cell_of(again, label),
                         found[0] if found else "no" if "no" in said else "not run", shape])
    return [
        Section("Known accelerator bugs: does this machine have them",
                ["case", "source", "column", "known-bug check", "repeatable", "has the bug", "shape run"], rows,
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
