"""Seed 003's cumulative path, reproduced: its rows, their measurement, table and verdict.

Seed 003 (harness/optim/claims.py ``SEED_003_PATH``) adds one technique per row to the row
before it: baseline, + gradient accumulation, + checkpointing, + Adafactor, + freezing,
+ a halved max length. ``seed_003_path`` (run in the sandbox child) measures each row's
peak memory and step time, ``path_table`` shows them beside the seed's, and
``path_verdict`` judges that peak memory never rises row by row.

The rows are the sides of five claims too (each row over the row before it), so they are
timed once for all of them: ``path_family_time`` runs every row once per interleaved round and
reads each claim's ratio and each row's ratio to the baseline from the same rounds
(harness.optim.ratios.compare_family), kept for the run's other checks of the family.
"""
from __future__ import annotations

import math
import time

from harness.core.records import Category, ClaimKind, RecordKind, Status, Verdict, recorded_number
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


# The checks of seed 003's path that are timed as one family: each path claim's time check
# (a row over the row before it) and the path itself (PATH: each row over the baseline).
PATH = "seed-003-path"
FAMILY = ("gradient-accumulation", "gradient-checkpointing", "adafactor", "freeze-backbone", "shorter-max-length",
          PATH)
# The share of the device's memory (harness.env.devices.memory_of) the family's sides, all built
# at once, may take by estimate (harness.optim.workloads.estimate); past it each pair is timed
# on its own, two sides at a time, as a claim alone would be.
FAMILY_MEMORY_FRACTION = 0.8

_TIMED: dict[tuple, dict] = {}


def family_pairs(rows: list[tuple[str, Setup]], members: tuple[str, ...], target_class: str) -> dict:
    """The pairs the ``members`` of the family ask for: a claim's row over the row before it,
    judged by the claims table's time bound (these buy rounds while inconclusive); with PATH,
    each row over the baseline, against the seed's own ratio (shown in the path's table, never
    buying rounds: the path's verdict is its memory)."""
    from harness.optim import claims
    names = [name for name, _ in rows]
    steps = claims.SEED_003_PATH.steps
    seed = {s.claim: s.time_s / steps[0].time_s for s in steps[1:]}
    pairs = {}
    for name in members:
        if name == PATH:
            pairs.update({f"{PATH}:{row}": ratios.Pair("baseline", row, Bound(ClaimKind.NOT_HIGHER, seed[row]),
                                                       drives=False) for row in names[1:]})
        elif name in names[1:]:
            expect = claims.by_name(name).time[target_class]
            pairs[name] = ratios.Pair(names[names.index(name) - 1], name,
                                      Bound(expect.kind, claims.holds_bound(name, "time", target_class)))
    return pairs


def family_fits(setups: list[Setup], device: str) -> bool:
    """Whether every side of a family can be built at once on ``device``, by estimate (16 bytes a
    parameter for each, and the largest one's activations) against FAMILY_MEMORY_FRACTION of
    the device's memory reading."""
    from harness.optim.workloads import estimate
    est = [estimate(s) for s in setups]
    need = sum(16 * e["params"] for e in est) + max(e["memory_bytes"] - 16 * e["params"] for e in est)
    memory, _ = devices.memory_of(devices.place(device))
    return need <= FAMILY_MEMORY_FRACTION * memory


def path_family_time(device: str, scale: str = "small", members: tuple[str, ...] = FAMILY) -> dict:
    """The time checks of seed 003's path on ``device``, timed once as a family
    (harness.optim.ratios.compare_family): the rows the ``members`` need, each built once
    (harness.optim.workloads.built) and stepped once per interleaved round, and every pair of
    ``family_pairs`` read from those rounds, with its interval and verdict. Each claim keeps
    the budget it had alone (TIME_BUDGET_S) for the rounds it buys. Where the rows do not fit
    the device together (``family_fits``), each pair is timed on its own. Each pair keeps its
    two rows' last timed step's loss (``loss_a``, ``loss_b``: harness.optim.techniques
    .breaks_training reads them).

    Kept per process, keyed by the baseline's workload key (setup, target, torch settings),
    the members and the rounds and budget: each member's check reads the one measurement."""
    from harness.optim.workloads import built, key_of
    rows = seed_003_rows(SCALES[scale])
    members = tuple(m for m in FAMILY if m in members)
    key = (key_of(rows[0][1], device), members, TIME_ROUNDS[scale], TIME_BUDGET_S[scale])
    if key in _TIMED:
        return _TIMED[key]
    target_class = devices.rules_of(device.split(":")[0]).split(":")[0]   # "cuda:0" -> cuda; the emulated Mac -> mps
    pairs = family_pairs(rows, members, target_class)
    needed = [name for name, _ in rows if any(name in (p.a, p.b) for p in pairs.values())]
    setups = dict(rows)
    sync = devices.synchronizer(device)
    timing = dict(sync=sync, warmup=2, rounds=TIME_ROUNDS[scale], budget_s=TIME_BUDGET_S[scale])
    losses: dict[str, float] = {}

    def stepping(name: str, w):
        def step():
            losses[name] = w.step()
        return step
    start = time.perf_counter()
    if family_fits([setups[n] for n in needed], device):
        sides = {name: built(setups[name], device) for name in needed}   # held here: all alive at once
        build_s = time.perf_counter() - start
        found = ratios.compare_family({name: stepping(name, w) for name, w in sides.items()}, pairs, **timing)
        found["together"], found["build_s"] = True, round(build_s, 3)
    else:
        found = {"pairs": {}, "sides": needed, "rounds": 0, "seconds": 0.0, "together": False}
        for name, pair in pairs.items():
            wa, wb = built(setups[pair.a], device), built(setups[pair.b], device)
            alone = ratios.compare_family({pair.a: stepping(pair.a, wa), pair.b: stepping(pair.b, wb)}, {name: pair},
                                          **timing)
            found["pairs"][name] = alone["pairs"][name]
            found["rounds"] += alone["rounds"]
            found["seconds"] += alone["seconds"]
        found["build_s"] = round(time.perf_counter() - start - found["seconds"], 3)   # built pair by pair
    for name, pair in pairs.items():
        if name in found["pairs"]:
            found["pairs"][name].update(loss_a=losses.get(pair.a), loss_b=losses.get(pair.b))
    _TIMED[key] = found
    return found


def forget_timed() -> None:
    """Drop every kept family timing (the next ``path_family_time`` times again)."""
    _TIMED.clear()


def seed_003_path(device: str, scale: str = "small", family: tuple[str, ...] = FAMILY) -> list[dict]:
    """Seed 003's cumulative path on ``device``: each row's peak memory (tracked storage
    bytes, steady state, with its phase: harness.optim.measure.weighed, the measurement the
    path's memory claims read) and its step time against the baseline's, from the path's
    family timing (``path_family_time``: interleaved rounds, the ratio of medians with its
    bootstrap interval, read from the rounds the path's claims were timed in). ``family``:
    the family's checks this run times (the suite passes the selected ones; PATH is always
    among them here). ``vs_seed`` is the row's ratio judged against the seed's own."""
    from harness.optim import measure
    setups = seed_003_rows(SCALES[scale])
    family_time = path_family_time(device, scale, tuple(family) + (PATH,))
    timed = family_time["pairs"]
    rows, base_durations = [], []
    for name, setup in setups:
        mem = measure.weighed_setup(setup, device)
        row = {"row": name, "setup": repr(setup), "peak_bytes": mem["peak_bytes"], "peak_phase": mem["peak_phase"],
               "batch": setup.batch, "grad_accum": setup.grad_accum, "seq": setup.seq, "loss": mem.get("loss")}
        if name != "baseline":
            t = timed[f"{PATH}:{name}"]
            # timed together, every row's baseline durations are the same rounds': counted once
            base_durations = (max(base_durations, t["durations_a"], key=len) if family_time["together"]
                              else base_durations + t["durations_a"])
            row.update(step_s=t["median_b_s"], time_ratio=t["time_ratio"], ci_low=t["ci_low"], ci_high=t["ci_high"],
                       rounds=t["rounds"], vs_seed=t["category"])
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
    memory is above the row before it (which rows, in the message), or when a row's step
    loses a finite loss the baseline has (``loss``: the weighed step's; a row that saves
    memory by breaking training is no step along a path), pass otherwise; category n/a.
    The metrics: the rows, ``metrics`` (the workload's), and the last row's memory and time
    ratios to the baseline."""
    kept = {"record_kind": RecordKind.SEED_003_PATH, "rows": rows, **(metrics or {}),
            "mem_ratio": rows[-1]["peak_bytes"] / rows[0]["peak_bytes"],
            "time_ratio": rows[-1]["step_s"] / rows[0]["step_s"]}
    rises = [f"{b['row']} {b['peak_bytes']} B > {a['row']} {a['peak_bytes']} B"
             for a, b in zip(rows, rows[1:]) if b["peak_bytes"] > a["peak_bytes"]]
    base_loss = recorded_number(rows[0].get("loss"))
    broken = [f"{r['row']} ({r['loss']})" for r in rows[1:]
              if base_loss is not None and math.isfinite(base_loss)
              and (loss := recorded_number(r.get("loss"))) is not None and not math.isfinite(loss)]
    problems = ([f"peak memory rose along the path: {'; '.join(rises)}"] if rises else []) + (
        [f"the training step's loss is not finite at {', '.join(broken)}, where the baseline's is {base_loss:.4g}: "
         f"those rows save memory by breaking training"] if broken else [])
    if problems:
        return Verdict(Status.FAIL, Category.NA, "; ".join(problems), kept)
    return Verdict(Status.PASS, Category.NA, "", kept)
