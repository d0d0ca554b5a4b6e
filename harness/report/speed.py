"""The perf suite on the page: per column, each model's figures, the slowest ops, memory over a
long run, and what changed against a kept baseline of the same machine.

A time on its own says how fast this machine ran, not whether an upgrade hurt it; that takes a
baseline (``./compat baseline -m perf``). So the first perf section, when a baseline is given
(``python -m tools.report --baseline``, by default ``reports/baseline.jsonl`` where it exists),
lists per column what got slower, faster, holds more memory at its peak, or started to grow, by
the upgrade check's own rules (harness.report.compare, harness.perf.against); then the figures.
"""
from __future__ import annotations

import dataclasses
import math

from harness.core import records
from harness.core.records import Category, Status
from harness.perf import against
from harness.perf.ops import ms
from harness.report import compare
from harness.report.matrix import Matrix
from harness.report.sections import Cell, Section, cell_of
from harness.report.verdict import SPEED_AGAINST

SLOWEST = 10       # ops per column and dtype in the slowest-ops table
MODEL_WHATS = ("train-step", "inference", "generate", "cold-start", "varying-length", "cold-inference",
               "cold-generate")


def _perf_cells(m: Matrix):
    labels = {c.id: c.label for c in m.columns}
    for (check, col_id), rec in sorted(m.cells.items()):
        if rec.get("suite") == "perf" and rec["status"] != Status.SKIP:
            yield check, col_id, labels.get(col_id, col_id), rec


def _real(value) -> float | None:
    """A metric as a number to compute with: None for anything else, NaN and the infinities
    included (json_safe writes them as "nan", "inf"), so a figure is never made of them."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def _mib(value, sign: str = "") -> str:
    """Bytes in MiB (with ``sign`` "+", signed); the value as written when it is no number."""
    n = _real(value)
    return f"{n / 2 ** 20:{sign}.3g}" if n is not None else str(value)


def _rate(per_second: float) -> str:
    """A rate as a reader counts it: "33,350 tokens/s", "108.1 samples/s" (not "3.335e+04")."""
    return f"{per_second:,.0f}" if abs(per_second) >= 1000 else f"{per_second:.4g}"


def _interval(met: dict) -> str:
    low, high = met.get("ci_low"), met.get("ci_high")
    return f"[{ms(low)}, {ms(high)}]" if isinstance(low, (int, float)) and isinstance(high, (int, float)) else ""


def model_section(m: Matrix) -> Section:
    rows = []
    for check, _, label, rec in _perf_cells(m):
        subject, what, met = rec["subject"], rec["variant"], rec.get("metrics") or {}
        if not subject.startswith("model-") or what not in MODEL_WHATS:
            continue
        if what == "varying-length":
            step, per_shape = _real(met.get("seen_s")), _real(met.get("per_shape_s"))
            cost = max(0.0, per_shape or 0.0)   # a negative difference is noise: no cost measured
            share = f"{cost / step:.0%} of a step" if step and per_shape is not None else ""
            figure, rate = f"new shape +{ms(cost)}", share
        else:
            figure = ms(met["median_s"]) if isinstance(met.get("median_s"), (int, float)) else ""
            rate = (f"{_rate(met['per_second'])} {met.get('unit', '')}"
                    if isinstance(met.get("per_second"), (int, float))
                    else f"import {ms(met['import_s'])}, warm {'step' if what == 'cold-start' else 'call'} "
                         f"{ms(met['warm_s'])}"
                    if isinstance(met.get("import_s"), (int, float)) and isinstance(met.get("warm_s"), (int, float))
                    else "")
        rows.append([subject.removeprefix("model-"), what, label, cell_of(rec, label, metric=False), figure,
                     _interval(met), rate, _peak(met), rec.get("category") or "",
                     str(met.get("rounds", len(met.get("lengths") or []) or ""))])
    return Section("Speed: models", ["model", "what", "column", "result", "time", "95% interval", "rate / note",
                                     "peak memory", "figure", "rounds"], rows, level=2,
                   empty="No model was timed: no perf model check was selected or reached in the runs read.",
                   intro="Each architecture at the column's training workload: a warm training step, inference, "
                         "generation (tokens/s), the first training step, inference and generation of a cold process "
                         "(cold-start, cold-inference, cold-generate), and what a new input length costs "
                         "a step (the same lengths stepped twice: first sight minus second). 'noisy' marks a figure "
                         "whose interval spans more than a quarter of it: the machine was busy. 'peak memory' is "
                         "the tensors live at the call's peak (their storages counted, the same bytes in every "
                         f"run), and the phase it was reached in; more than {against.PEAK_TOLERANCE:.0%} over the "
                         "baseline's is a regression.")


def _peak(met: dict) -> str:
    """A weighed call's peak: "136 MiB (backward)"; "" where the check was not weighed."""
    peak = _real(met.get("peak_bytes"))
    if peak is None:
        return ""
    phase = met.get("peak_phase")
    return f"{_mib(peak)} MiB" + (f" ({phase})" if phase in ("forward", "backward", "optimizer") else "")


def ops_section(m: Matrix) -> Section:
    by_column: dict[str, list] = {}
    for check, col_id, label, rec in _perf_cells(m):
        met = rec.get("metrics") or {}
        if rec["subject"].startswith(("model-", "memory-")) or not isinstance(met.get("median_s"), (int, float)):
            continue
        by_column.setdefault(label, []).append((met["median_s"], check, rec, met))
    rows = []
    for label, found in by_column.items():
        for seconds, check, rec, met in sorted(found, key=lambda f: -f[0])[:SLOWEST]:
            rows.append([label, check.removeprefix("perf/"), cell_of(rec, label, metric=False), ms(seconds),
                         _interval(met), str(met.get("rounds", "")), str(met.get("clock", "")),
                         rec.get("category") or ""])
    return Section("Speed: the slowest ops", ["column", "op / dtype / pass", "result", "time per call",
                                               "95% interval", "rounds", "clock", "figure"], rows, level=2,
                   empty="No op was timed: no perf op check was selected or reached in the runs read.",
                   intro=f"Per column the {SLOWEST} slowest op timings at the training workload's shapes (forward "
                         "with autograd recording; backward alone). Every figure is in matrix.json.")


def memory_section(m: Matrix) -> Section:
    rows = []
    for check, _, label, rec in _perf_cells(m):
        met = rec.get("metrics") or {}
        if not rec["subject"].startswith("memory-") or not isinstance(met.get("trends"), dict):
            continue
        seen = met.get("first_sight") if isinstance(met.get("first_sight"), dict) else {}
        per_length = seen.get("per_length_bytes") if isinstance(seen.get("per_length_bytes"), dict) else {}
        for reading, t in met["trends"].items():
            if not isinstance(t, dict):
                continue
            rows.append([rec["subject"].removeprefix("memory-"), rec["variant"], label, reading,
                         Cell(t.get("verdict", ""), "fail" if t.get("verdict") == Category.GROWS else "pass"),
                         _mib(t.get("growth_bytes", 0), "+"), _mib(t.get("per_step_bytes", 0), "+"),
                         f"[{_mib(t.get('ci_low', 0), '+')}, {_mib(t.get('ci_high', 0), '+')}]",
                         _mib(t.get("tolerance_bytes", 0)),
                         _mib((met.get("given_back") or {}).get(reading, 0)),
                         _mib(per_length[reading], "+") if reading in per_length else "—"])
    return Section("Memory over a long run", ["model", "through", "column", "reading", "trend", "grew MiB",
                                              "MiB / step", "95% interval MiB", "tolerance MiB",
                                              "empty_cache gave back MiB", "a new length MiB"], rows, level=2,
                   empty="No long run was measured: no perf memory check was selected or reached in the runs read.",
                   intro="A training run (or inference) over a few fixed lengths that the warm-up meets, read after "
                         "every step: the last third's median against the first third's, after the warm-up. 'grows' "
                         "fails the check. 'a new length' is what each reading moved per length the run had not met "
                         "(steps after the trend; MPS caches a graph per input shape): a per-shape cost, never judged "
                         "as growth; '—' where the run took no such steps.")


def _column_side(m: Matrix, col) -> compare.Side:
    recs = {(check, records.target_of(rec)): rec for (check, col_id), rec in m.cells.items() if col_id == col.id}
    return compare.Side(col.label, col.env_id, col.header, recs, col.complete, [], m.company,
                        dict(zip(col.runs, col.headers)), judged_again=True)


def baseline_section(m: Matrix, baseline: compare.Side | None) -> Section:
    rows, notes = [], []
    compared = False   # whether any column's perf figures were compared with the baseline's
    if baseline is not None:
        for col in m.columns:
            side = _column_side(m, col)
            if not any(r.get("suite") == "perf" for r in side.records.values()):
                continue
            if side.machine != baseline.machine:
                notes.append(f"{col.label}: another machine than the baseline's, times not compared")
                continue
            result = compare.compare(baseline, side)
            compared = True
            notes += [f"{col.label}: {note}" for note in result.notes]   # e.g. times at another thread count
            for c in result.changes:
                if c.rule.startswith("perf-"):
                    rows.append([col.label, c.check, Cell(c.kind, {"regression": "fail", "warning": "inconclusive",
                                                                   "improvement": "pass"}[c.kind]), c.rule, c.detail])
    intro = ("What the upgrade check's rules say of this page's perf figures against the baseline "
             f"{baseline.describe()}: slower or faster beyond the check's tolerance with the intervals apart, a new "
             "shape costing more, a model's step, inference or generation holding more memory at its peak, memory that "
             "now grows; 'warning' is inconclusive (too noisy to tell)."
             if baseline is not None else "")
    if notes:
        intro += " " + "; ".join(notes) + "."
    return Section("Speed and memory against the baseline", ["column", "check", "change", "rule", "detail"], rows,
                   level=2, intro=intro, anchor=SPEED_AGAINST,
                   empty=("No baseline given: keep one with ./compat baseline -m perf, then "
                          "python -m tools.report --baseline reports/baseline.jsonl." if baseline is None else
                          "Nothing changed beyond the checks' tolerances." if compared else
                          "Nothing was compared: no column here with perf figures is of the baseline's machine."))


def perf_sections(m: Matrix, baseline: compare.Side | None = None) -> list[Section]:
    """The perf suite's sections, or none when no perf check ran."""
    if not any(rec.get("suite") == "perf" for rec in m.cells.values()):
        return []
    return [baseline_section(m, baseline), model_section(m), ops_section(m), memory_section(m)]


# ----------------------------------------------------------------------------- against a baseline

@dataclasses.dataclass
class Against:
    """One column against the baseline: what the first screen names of the comparison, and how
    much of the column it spoke for (a baseline of the env suite says nothing of the ops)."""
    changes: list            # the regressions and warnings (compare.Change)
    compared: int = 0        # checks both hold: what "nothing regressed" speaks for
    held: int = 0            # the column's checks
    uncompared: list = dataclasses.field(default_factory=list)   # notes of perf times the rules did not compare
    #                          (compare.Comparison.uncompared: another machine, thread count or company)

    @property
    def uncompared_times(self) -> int:
        """How many perf times ``uncompared``'s notes count (compare.uncompared_count)."""
        return compare.uncompared_count(self.uncompared)


def against_baseline(m: Matrix, baseline) -> dict[str, Against]:
    """Column id -> what the upgrade check's rules (harness.report.compare) find in that column
    against ``baseline`` (a compare.Side) that the first screen names: the regressions, and the
    warnings: the slowdowns that would be regressions had they been measured again (a plain
    run's figures, seen in one process only: harness.perf.against.seen_once) and what the rules
    could not call (a host that ran slower, a claim now too close to its bound, a check now
    skipped, a parity verdict of another revision of its judge: compare.across_judges); with
    how many of the column's checks the baseline holds too. For the columns of the baseline's
    machine (host and hardware) whose target the baseline ran; other columns are left out."""
    from harness.report.matrix import hardware_key
    facts = baseline.header.get("facts") or {}
    out: dict[str, Against] = {}
    for col in m.columns:
        if (col.facts.get("host"), hardware_key(col.facts)) != (facts.get("host"), hardware_key(facts)):
            continue
        where = records.place(col.target, col.workload)   # a perf or optim column holds one workload's records
        theirs = {k: r for k, r in baseline.records.items() if k[1] == where}
        mine = {(check, records.target_of(rec)): rec for (check, cid), rec in m.cells.items() if cid == col.id}
        if not theirs:   # a workload the baseline did not run: its checks were not compared
            if any(r.get("target") == col.target for r in baseline.records.values()):
                out[col.id] = Against([], 0, len(mine))
            continue
        # the page's records, judged again already (matrix.build), with the headers that say which judge wrote them
        side = compare.Side(col.label, col.env_id, col.header, mine, col.complete, [], m.company,
                            dict(zip(col.runs, col.headers)), judged_again=True)
        base = compare.Side(baseline.label, baseline.env_id, baseline.header, theirs, baseline.complete,
                            baseline.sources, baseline.company)
        found = compare.compare(base, side)
        out[col.id] = Against([c for c in found.changes if c.kind in ("regression", "warning")],
                              found.shared, len(mine), found.uncompared)
    return out
