"""Seed 003's cumulative path, reproduced: its rows, their measurement, table and verdict.

Seed 003 (harness/optim/claims.py ``SEED_003_PATH``) adds one technique per row to the row
before it: baseline, + gradient accumulation, + checkpointing, + Adafactor, + freezing,
+ a halved max length. ``seed_003_path`` (run in the sandbox child) measures each row's
peak memory and step time, ``path_table`` shows them beside the seed's, and
``path_verdict`` judges that peak memory never rises row by row.
"""
from __future__ import annotations

from harness.core.records import Category, ClaimKind, RecordKind, Status, Verdict
from harness.env import devices
from harness.optim import ratios
from harness.optim.ratios import Bound
from harness.optim.workloads import SCALES, TIME_BUDGET_S, TIME_ROUNDS, Setup


def seed_003_rows(base: Setup) -> list[tuple[str, Setup]]:
    """Seed 003's path from ``base``: (row name, setup), each row adds one technique to the row before it."""
    ga = base.but(grad_accum=base.batch)
    ck = ga.but(checkpointing=True)
    ada = ck.but(optimizer="adafactor")
    frozen = ada.but(freeze_backbone=True)
    return [("baseline", base), ("gradient-accumulation", ga), ("gradient-checkpointing", ck),
            ("adafactor", ada), ("freeze-backbone", frozen), ("shorter-max-length", frozen.but(seq=base.seq // 2))]


def seed_003_path(device: str, scale: str = "small") -> list[dict]:
    """Seed 003's cumulative path on ``device``: each row's peak memory (tracked storage
    bytes, steady state, with its phase) and its step time against the baseline's, timed as
    the claims are: interleaved rounds (harness.optim.ratios.compare_time) of the row and the
    baseline, the ratio of medians with its bootstrap interval. Only the baseline and one
    row are built at a time. The seed's own ratio for the row is the expectation that
    decides whether more rounds are spent; ``vs_seed`` is that verdict."""
    from harness.optim import claims, measure
    from harness.optim.workloads import Workload
    steps = claims.SEED_003_PATH.steps
    seed = {s.claim: s.time_s / steps[0].time_s for s in steps[1:]}  # the seed's row over its baseline
    sync = devices.synchronizer(device)
    rows, base_durations = [], []
    setups = seed_003_rows(SCALES[scale])
    base = Workload(setups[0][1], device)
    base.step()
    for name, setup in setups:
        w = base if name == "baseline" else Workload(setup, device)
        if w is not base:
            w.step()
        mem = measure.measure_memory(w.step, resident=w.resident(), labelled=True)
        row = {"row": name, "setup": repr(setup), "peak_bytes": mem["peak_bytes"], "peak_phase": mem["peak_phase"],
               "batch": setup.batch, "grad_accum": setup.grad_accum, "seq": setup.seq}
        if w is not base:
            t = ratios.compare_time(base.step, w.step, Bound(ClaimKind.NOT_HIGHER, seed[name]), sync=sync,
                                    warmup=1, rounds=TIME_ROUNDS[scale], budget_s=TIME_BUDGET_S[scale] / 2)
            base_durations += t["durations_a"]
            row.update(step_s=t["median_b_s"], time_ratio=t["time_ratio"], ci_low=t["ci_low"], ci_high=t["ci_high"],
                       rounds=t["rounds"], vs_seed=t["category"])
            del w
        rows.append(row)
    import statistics
    rows[0].update(step_s=statistics.median(base_durations), time_ratio=1.0, ci_low=1.0, ci_high=1.0,
                   rounds=len(base_durations), vs_seed="")
    return rows


def path_table(rows: list[dict], seed_path) -> str:
    """Measured rows beside the seed's, in the seed's form: memory and time, and each row's
    ratio to the baseline with its interval (the seed's GB and seconds are another model on
    another device; the ratios are what compare)."""
    from tabulate import tabulate
    seed_rows = seed_path.steps
    base, seed_base = rows[0], seed_rows[0]
    body = []
    for mine, theirs in zip(rows, seed_rows):
        body.append([theirs.row, f"{mine['peak_bytes'] / 2**20:.1f}", f"{mine['peak_bytes'] / base['peak_bytes']:.2f}",
                     f"{theirs.memory_gb / seed_base.memory_gb:.2f}", f"{mine['step_s']:.3f}", time_cell(mine, base),
                     f"{theirs.time_s / seed_base.time_s:.2f}"])
    return tabulate(body, headers=("row (the tutorial's)", "peak MiB", "x baseline", "seed x baseline", "step s",
                                   "x baseline [95%]", "seed x baseline"), tablefmt="simple")


def time_cell(row: dict, base: dict) -> str:
    """A path row's time ratio to the baseline, with its interval where it was timed in
    interleaved rounds (rows recorded before that carry medians only: their plain ratio)."""
    ratio = row.get("time_ratio", row["step_s"] / base["step_s"])
    if row.get("ci_low") is None or row is base:
        return f"{ratio:.2f}"
    return f"{ratio:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def path_verdict(rows: list[dict], metrics: dict | None = None) -> Verdict:
    """Seed 003's measured path (``seed_003_path``) as a verdict: fail when a row's peak
    memory is above the row before it (which rows, in the message), pass otherwise;
    category n/a. The metrics: the rows, ``metrics`` (the workload's), and the last row's
    memory and time ratios to the baseline."""
    kept = {"record_kind": RecordKind.SEED_003_PATH, "rows": rows, **(metrics or {}),
            "mem_ratio": rows[-1]["peak_bytes"] / rows[0]["peak_bytes"],
            "time_ratio": rows[-1]["step_s"] / rows[0]["step_s"]}
    rises = [f"{b['row']} {b['peak_bytes']} B > {a['row']} {a['peak_bytes']} B"
             for a, b in zip(rows, rows[1:]) if b["peak_bytes"] > a["peak_bytes"]]
    if rises:
        return Verdict(Status.FAIL, Category.NA, "peak memory rose along the path: " + "; ".join(rises), kept)
    return Verdict(Status.PASS, Category.NA, "", kept)
