"""The optimization sections: each claim measured against its bound, and seed 003's path."""
from __future__ import annotations


from harness.core import records
from harness.report.matrix import Matrix, cell_key
from harness.report.charts import CHART_ROWS, path_chart, ratio_chart
from harness.report.model import Section, cell_of, finite, num, slug


def optim_sections(m: Matrix) -> list[Section]:
    """The optimization claims: each measured ratio against the claim's bound, and seed
    003's path with a chart of it (measured against the seed, both as x baseline)."""
    labels = {c.id: c.label for c in m.columns}
    claims_rows, paths, points = [], [], []
    for (check, col_id), rec in sorted(m.cells.items()):
        if rec.get("suite") != "optim" or rec["status"] == "skip":
            continue
        met = rec.get("metrics") or {}
        if records.kind_of(rec) == "seed-003-path" and met.get("rows"):
            paths.append((labels.get(col_id, col_id), rec))
            continue
        ratio = met.get("mem_ratio", met.get("time_ratio"))
        if ratio is None:
            continue
        label = labels.get(col_id, col_id)
        claims_rows.append([rec["subject"], rec["variant"], label, cell_of(rec, label),
                            rec.get("category") or "", num(ratio),
                            f"[{num(met.get('ci_low'))}, {num(met.get('ci_high'))}]",
                            f"{'<' if met.get('kind') == 'lower' else '<='} {num(met.get('bound'))}",
                            num(met.get("claimed_ratio")), str(met.get("rounds", "")), met.get("source") or ""])
        points.append((f"{rec['subject']} {rec['variant']} · {label}", finite(ratio), finite(met.get("ci_low")),
                       finite(met.get("ci_high")), finite(met.get("bound")), cell_key(rec)))
    points = [p for p in points if p[1] is not None and p[1] > 0]
    out = [Section("Optimizations: the documents' claims, measured",
                   ["claim", "quantity", "column", "result", "verdict", "ratio", "95% interval", "holds if",
                    "claimed", "rounds", "source"], claims_rows, empty="No optimization claim was measured.",
                   intro="ratio = variant / baseline (peak memory: tracked storage bytes, exact; time: median of "
                         "interleaved rounds, per sample, with a bootstrap interval). A claim holds when the whole "
                         "interval is within the bound (the claimed ratio with the claim's tolerance)."
                         + (f" The chart shows the first {CHART_ROWS} of {len(points)}." if len(points) > CHART_ROWS
                            else ""),
                   image=ratio_chart(points[:CHART_ROWS]) if points else None, image_name="optim_ratios.png")]
    for label, rec in paths:
        out.append(_path_section(label, rec))
    return out


def _path_section(label: str, rec: dict) -> Section:
    from harness.optim.claims import SEED_003_PATH
    from harness.optim.seedpath import time_cell
    rows = rec["metrics"]["rows"]
    base, seed = rows[0], SEED_003_PATH.steps
    table = [[r["row"], f"{r['peak_bytes'] / 2**20:.1f}", f"{r['peak_bytes'] / base['peak_bytes']:.2f}",
              f"{s.memory_gb / seed[0].memory_gb:.2f}", r.get("peak_phase", ""), f"{r['step_s']:.3f}",
              time_cell(r, base), f"{s.time_s / seed[0].time_s:.2f}"] for r, s in zip(rows, seed)]
    return Section(f"Seed 003's path on {label}", ["row", "peak MiB", "x baseline", "seed: x baseline", "peak phase",
                                                   "step s", "x baseline [95% interval]", "seed: x baseline"], table,
                   level=3, image=path_chart(label, rows), image_name=f"seed003_{slug(label)}.png",
                   intro=f"workload {rec['metrics'].get('workload')} "
                         f"({rec['metrics'].get('shape') or 'shape not recorded'}); {cell_of(rec).text}. Each row "
                         "adds one technique to the row before it, as seed 003's macbert-large table does.")
