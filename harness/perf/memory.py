"""Memory over a long run: does a training or inference run's memory keep growing, step after step?

A leak does not show in one step's peak (the optimization suite's measure): it shows as a
trend. PyTorch's tracker has MPS runs whose memory grows every step (the graph cache, driver
memory outside torch's tensor counters), Trainer runs with varying lengths that grow until
the machine swaps, and inference with varying lengths whose process and driver memory grow
without bound while the tensors stay flat (pytorch#181213, torch 2.7.1 on macOS 26: driver
allocation rebuilt toward 13-14 GiB against 0.24 GiB of tensors). So a check here trains for
``STEPS`` steps the way users do (lengths that vary from batch to batch among a few, an LR
scheduler, AdamW), through a plain loop (``perf/memory-<arch>/loop``) or through transformers' Trainer
(``perf/memory-<arch>/trainer``), or serves as many forwards of varying length under
``torch.inference_mode()``, each output moved to the CPU (``perf/memory-<arch>/inference``),
and reads after every step what the device offers:

  rss        the process's resident memory (psutil), on every device; on glibc (Linux) after
             ``malloc_trim(0)``, so memory the process freed is given back before it is read and a
             leak cannot hide in the free lists that earlier steps (or checks) left resident
  allocated  the device's tensor bytes: ``torch.cuda.memory_allocated``,
             ``torch.mps.current_allocated_memory``
  reserved   CUDA's caching allocator's reserved bytes (``torch.cuda.memory_reserved``)
  driver     MPS's driver allocation, the whole Metal heap (``torch.mps.driver_allocated_memory``)

Two costs grow memory in such a run, and they are told apart. A **new input shape** costs once:
MPS builds and caches graphs for every shape it meets (driver memory, which its
``empty_cache`` gives back: pytorch#181485, 13.7 GB of driver memory down to 52 MB once the
graph cache was cleared), so a run that keeps meeting new lengths grows until it has met them
all, a cost per distinct length, not per step. A **leak** grows at every step, at shapes seen
before. So the lengths come from ``BUCKETS`` fixed lengths (``buckets``: as a pipeline that
pads each batch to one of a few lengths), the warm-up steps through every one of them, the
longest first (``step_lengths``), and every step the trend reads reuses a shape already seen:
the trend is growth per step, a leak's. After the trend, ``NEW_LENGTHS`` steps at lengths the
run never used (``new_lengths``) measure what a new shape costs, reported beside the trend
(``first_sight``: per reading, per new length, beyond the trend) and never judged as growth.

Each reading is judged on its own (``growth``): after ``WARMUP`` steps (the allocator's cache
and the optimizer's state settle, every bucket's shapes are met; the warm-up's first step is at
the longest length, so the largest blocks exist before the trend is read), the median of the last third of the steps
against the median of the first third, with a bootstrap interval. It **grows** when the whole
interval is above the tolerance (``TOLERANCE_BYTES``, or ``TOLERANCE_SHARE`` of the level
where that is more), or, below it, grows ``CREEP_BYTES`` a step or more through the whole run
(``_creeps``: a slow leak, not an allocator's one-time jump), is **steady** when the whole
interval is below the tolerance, and **inconclusive** otherwise. Fewer than ``MIN_TREND`` readings after the warm-up show no trend at all (two thirds
of one or two readings overlap or have no spread to take an interval of): such a reading is
**inconclusive**, saying how many it had and that more steps (the run's ``steps``) change it,
never steady. What ``empty_cache`` (and a garbage collection) gives back at the end is recorded,
and chooses the advice of a reading that grows (``given_back_covers``): given back, beyond what
the lengths met account for (``first_sight``'s cost per length times the lengths met), at least
half of what it grew, it is a cache that fills step after step (bucket the lengths, empty the
cache every so many steps); kept, a leak (shorter runs, a restart, a report to PyTorch).
"""
from __future__ import annotations

import gc
import statistics
import tempfile

from harness.core.records import Category, Status, Verdict
from harness.env import devices, timing
from harness.perf.models import ARCHS, Trainer
from harness.perf.ops import on_target, targets

STEPS = 40                 # measured steps after the warm-up
WARMUP = 10
BATCH = 4                  # a trend needs steps, not a big batch
TOLERANCE_BYTES = 16 * 2 ** 20
TOLERANCE_SHARE = 0.01     # of the reading's level at the start of the trend
MIN_TREND = 4              # readings after the warm-up a trend needs: two in the first third, two in
                           # the last, apart (three readings' thirds would share the middle one)
MIB = 2 ** 20
# A reading that grows this much per step or more (its interval's low end) and through the whole
# run (each quarter's median above the one before by CREEP_SHARE of their average rise at least)
# grows, below the tolerance as it may be: 0.45 MiB a step (4.4 GiB in 10,000 steps) grew 12 MiB
# in 40 steps, under 16 MiB, and read steady. The floor is 2.4 GiB in 10,000 steps; a one-time
# jump (an allocator's new heap) raises at most two of the three quarter-to-quarter steps, and a
# steady run here moves 0.06 MiB a step at most (the cpu target's long runs).
CREEP_BYTES = 0.25 * MIB
CREEP_SHARE = 0.25
CREEP_PARTS = 4
BUCKETS = 6                # the fixed lengths a run draws from (at most the warm-up's steps: it meets them all)
PAD_TO = 8                 # each bucket a multiple of it, where the workload's lengths leave room (pad_to_multiple_of)
NEW_LENGTHS = 3            # steps after the trend at lengths the run never used: what a new shape costs
SHAPE_NOTE_BYTES = 2 ** 20   # a new length's cost the verdict names (below it: nothing to name)
TRAINER_ARCHS = ("bert", "gpt2")   # a classifier and a causal LM through the Trainer
SEED = 0


# --------------------------------------------------------------------------- readings

def _trimmer():
    """glibc's ``malloc_trim`` (free heap pages back to the system), or a no-op elsewhere."""
    import ctypes
    import ctypes.util
    import sys
    if not sys.platform.startswith("linux"):
        return lambda: None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):   # musl and others have none
        return lambda: None
    return lambda: trim(0)


def reader(device: str):
    """A function giving this step's readings, name -> bytes (see the module's table), on
    ``device`` (a target): an emulated Mac's through its emulated torch.mps
    (devices.backend), as MPS's."""
    import psutil
    import torch
    process = psutil.Process()
    kind = device.split(":")[0]
    backend = devices.backend(kind)
    rules = devices.rules_of(kind)
    trim = _trimmer()

    def read() -> dict[str, int]:
        backend.synchronize()
        trim()
        out = {"rss": int(process.memory_info().rss)}
        if kind == "cuda":
            out.update(allocated=int(torch.cuda.memory_allocated()), reserved=int(torch.cuda.memory_reserved()))
        elif rules == "mps":
            allocated, driver = backend.memory_current(), backend.memory_driver()
            if allocated is not None:
                out["allocated"] = allocated
            if driver is not None:
                out["driver"] = driver
        return out
    return read


def buckets(seq: int, count: int = BUCKETS) -> list[int]:
    """The run's fixed lengths, shortest first: up to ``count`` of them evenly from a quarter of
    ``seq`` to ``seq`` (the longest), each rounded to a multiple of ``PAD_TO`` where the span
    leaves room, as a pipeline that pads each batch to one of a few lengths has them."""
    low = max(2, seq // 4)
    if count <= 1 or low >= seq:
        return [seq]
    pad = PAD_TO if seq - low >= PAD_TO * (count - 1) else 1
    return sorted({min(seq, max(low, pad * round((low + (seq - low) * k / (count - 1)) / pad)))
                   for k in range(count)} | {seq})


def step_lengths(seq: int, total: int, warmup: int = WARMUP) -> list[int]:
    """The run's lengths, one per step, from ``buckets`` (as many as the warm-up has steps, at
    most ``BUCKETS``): the longest first, then every other bucket once in a seeded order, all
    within the warm-up, then a seeded draw per step (repeats: a dataset's lengths recur). Every
    step after the warm-up reuses a length the warm-up met, so the trend reads growth per step at
    shapes already seen, never a new shape's one-off cost (``new_lengths`` measures that)."""
    import torch
    gen = torch.Generator().manual_seed(SEED + 11)
    sizes = buckets(seq, max(1, min(BUCKETS, warmup, total)))   # sizes[-1] is seq
    lengths = [seq] + [sizes[i] for i in torch.randperm(len(sizes) - 1, generator=gen).tolist()]
    lengths += [sizes[i] for i in torch.randint(0, len(sizes), (max(0, total - len(lengths)),), generator=gen).tolist()]
    return lengths[:total]


def new_lengths(seq: int, used, count: int = NEW_LENGTHS, salt: str = "") -> list[int]:
    """``count`` lengths between a quarter of ``seq`` and ``seq`` that ``used`` (the run's) never
    has, nor ``seq // 2`` (the model checks' fixed length), in an order seeded by ``salt`` (the
    check's arch and entry: checks that share a process meet lengths of their own): each step
    at one is the run's first sight of that input shape."""
    import zlib

    import torch
    seen = set(used) | {seq // 2}
    pool = [n for n in range(max(2, seq // 4), seq + 1) if n not in seen]
    gen = torch.Generator().manual_seed(SEED + 13 + zlib.crc32(salt.encode()))
    return [pool[i] for i in torch.randperm(len(pool), generator=gen)[:count].tolist()]


def said_lengths(lengths: list[int]) -> str:
    """The run's lengths as its verdict says them: the span and how many buckets (the buckets
    themselves are in the metrics: a reason is cut at REASON_MAX characters)."""
    sizes = sorted(set(lengths))
    return f"{sizes[0]}..{sizes[-1]} in {len(sizes)} bucket{'s' if len(sizes) != 1 else ''}"


def _read_into(series: dict[str, list[int]], read) -> None:
    for name, value in read().items():
        series.setdefault(name, []).append(value)


def _shaped(lengths: list[int], probe: list[int], later: dict[str, list[int]]) -> dict:
    """The run's fields about its lengths: the buckets said, and the steps at new lengths."""
    return {"lengths": said_lengths(lengths), "buckets": sorted(set(lengths)),
            "new_lengths": {"lengths": probe, "series": later}}


def _finish(series: dict[str, list[int]], read, device: str) -> dict:
    before = read()
    gc.collect()
    devices.backend(device.split(":")[0]).empty_cache()
    after = read()
    return {"series": series, "given_back": {k: before[k] - after[k] for k in before if k in after},
            "after_empty_cache": after}


# --------------------------------------------------------------------------- the runs (sandbox child)

def loop_run(arch: str, device: str, workload: str, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """A plain training loop with a linear warm-up / decay schedule and varying lengths (the
    buckets'), then ``NEW_LENGTHS`` steps at new lengths, read apart."""
    from transformers import get_linear_schedule_with_warmup
    t = Trainer(arch, workload, device)
    total = steps + warmup
    lengths = step_lengths(t.dims.seq, total, warmup)
    probe = new_lengths(t.dims.seq, lengths, salt=f"{arch}/loop")
    scheduler = get_linear_schedule_with_warmup(t.optimizer, num_warmup_steps=warmup,
                                                num_training_steps=total + len(probe))
    read = reader(device)
    series: dict[str, list[int]] = {}
    later: dict[str, list[int]] = {}
    for i, n in enumerate(lengths + probe):
        t.step(t.batch(seq=n, batch=BATCH, seed=SEED + i))
        scheduler.step()
        _read_into(series if i < total else later, read)
    return {"entry": "loop", "model": t.about, "steps": total, "warmup": warmup, "batch": BATCH,
            **_shaped(lengths, probe, later), **_finish(series, read, device)}


def trainer_run(arch: str, device: str, workload: str, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """The same through ``transformers.Trainer``: a dataset of rows of varying length padded
    per batch, the Trainer's linear schedule, readings from a callback after every step."""
    import torch
    from transformers import PrinterCallback, TrainerCallback, TrainingArguments
    from transformers import Trainer as HFTrainer
    t = Trainer(arch, workload, device)
    total = steps + warmup
    lengths = step_lengths(t.dims.seq, total, warmup)
    probe = new_lengths(t.dims.seq, lengths, salt=f"{arch}/trainer")
    gen = torch.Generator().manual_seed(SEED + 12)
    rows = []
    for n in lengths + probe:   # one batch per length: BATCH rows of the same length, in order
        for _ in range(BATCH):
            rows.append({"input_ids": torch.randint(3, t.vocab, (n,), generator=gen).tolist(),
                         "label": int(torch.randint(0, 2, (1,), generator=gen))})

    def collate(batch):
        width = max(len(r["input_ids"]) for r in batch)
        ids = torch.zeros((len(batch), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(batch):
            ids[i, :len(r["input_ids"])] = torch.tensor(r["input_ids"])
            mask[i, :len(r["input_ids"])] = 1
        labels = torch.tensor([r["label"] for r in batch]) if arch == "bert" else ids.masked_fill(mask == 0, -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}

    read = reader(device)
    series: dict[str, list[int]] = {}

    class Readings(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            _read_into(series, read)

    with tempfile.TemporaryDirectory(prefix="mps-compat-perf-") as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=BATCH, max_steps=total + len(probe),
                                 learning_rate=1e-4, lr_scheduler_type="linear", warmup_steps=warmup, seed=SEED,
                                 report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
                                 use_cpu=devices.place(device) == "cpu", dataloader_num_workers=0)
        trainer = HFTrainer(model=t.model, args=args, train_dataset=rows, data_collator=collate)
        trainer.remove_callback(PrinterCallback)
        trainer.add_callback(Readings())
        # in order, so each batch is one length as drawn (the Trainer shuffles by default)
        trainer._get_train_sampler = lambda *a, **k: torch.utils.data.SequentialSampler(rows)
        with on_target(device):   # the Trainer's device work: a stand-in's in its context
            trainer.train()
    later = {name: values[total:] for name, values in series.items()}
    series = {name: values[:total] for name, values in series.items()}
    return {"entry": "trainer", "model": t.about, "steps": total, "warmup": warmup, "batch": BATCH,
            **_shaped(lengths, probe, later), **_finish(series, read, device)}


def inference_run(arch: str, device: str, workload: str, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """Inference as a service runs it: the model in eval mode, each call a batch of another
    length (the buckets') under ``torch.inference_mode()``, its output moved to the CPU and
    dropped; then ``NEW_LENGTHS`` calls at new lengths, read apart."""
    import torch
    t = Trainer(arch, workload, device)
    t.model.eval()
    total = steps + warmup
    read = reader(device)
    series: dict[str, list[int]] = {}
    later: dict[str, list[int]] = {}
    lengths = step_lengths(t.dims.seq, total, warmup)
    probe = new_lengths(t.dims.seq, lengths, salt=f"{arch}/inference")
    for i, n in enumerate(lengths + probe):
        batch = {k: v for k, v in t.batch(seq=n, batch=BATCH, seed=SEED + i).items()
                 if k != "labels" or arch == "t5"}   # T5's decoder starts from its labels
        with on_target(device), torch.inference_mode():
            out = t.model(**batch)[0].to("cpu")
        del out, batch
        _read_into(series if i < total else later, read)
    return {"entry": "inference", "model": t.about, "steps": total, "warmup": warmup, "batch": BATCH,
            **_shaped(lengths, probe, later), **_finish(series, read, device)}


RUNS = {"loop": loop_run, "trainer": trainer_run, "inference": inference_run}


def measure(arch: str, entry: str, device: str, workload: str) -> dict:
    """The sandbox's entry: one memory check, alone on the machine (its steps would slow
    another check's timing; harness.env.timing.alone)."""
    from harness.perf.models import import_models
    import_models()   # paid once per child, outside the lock
    with timing.alone():
        return RUNS[entry](arch, device, workload)


# --------------------------------------------------------------------------- the judgement

def too_few(steps: int, warmup: int) -> str:
    """Why ``steps`` readings after ``warmup`` warm-up steps show no trend, and what changes it."""
    return (f"only {steps} reading{'s' if steps != 1 else ''} after the {warmup} warm-up steps, too few to show a "
            f"trend (it takes {MIN_TREND} or more: the first third's readings against the last third's); run more "
            f"steps (the long run's steps=, {STEPS} in the suite)")


def growth(values: list[int], warmup: int) -> dict:
    """The trend of one reading after ``warmup`` steps: the last third's median minus the
    first third's, its bootstrap interval, the tolerance, and the verdict (Category).

    Fewer than ``MIN_TREND`` readings after the warm-up: inconclusive, with ``too_few``'s reason
    and no interval (its bounds infinite), the change from the first reading to the last beside it."""
    import torch
    trend = values[warmup:]
    if len(trend) < MIN_TREND:
        level = statistics.median(trend) if trend else (values[-1] if values else 0)
        grown = float(trend[-1] - trend[0]) if trend else 0.0
        return {"growth_bytes": grown, "ci_low": float("-inf"), "ci_high": float("inf"),
                "tolerance_bytes": max(TOLERANCE_BYTES, TOLERANCE_SHARE * level), "level_bytes": level,
                "per_step_bytes": grown / (len(trend) - 1) if len(trend) > 1 else 0.0,
                "verdict": Category.INCONCLUSIVE, "steps": len(trend), "reason": too_few(len(trend), warmup)}
    third = max(2, len(trend) // 3)
    head, tail = trend[:third], trend[-third:]
    grown = statistics.median(tail) - statistics.median(head)
    gen = torch.Generator().manual_seed(SEED)
    h, t = torch.tensor(head, dtype=torch.float64), torch.tensor(tail, dtype=torch.float64)
    resamples = timing.RESAMPLES
    bh = h[torch.randint(0, len(head), (resamples, len(head)), generator=gen)].quantile(0.5, dim=1)
    bt = t[torch.randint(0, len(tail), (resamples, len(tail)), generator=gen)].quantile(0.5, dim=1)
    diffs = bt - bh
    tail_p = (1 - timing.CONFIDENCE) / 2
    low, high = float(diffs.quantile(tail_p)), float(diffs.quantile(1 - tail_p))
    level = statistics.median(head)
    tolerance = max(TOLERANCE_BYTES, TOLERANCE_SHARE * level)
    span = len(trend) - third   # steps between the two thirds' centres
    creeps = _creeps(trend, third, grown, low, span)
    verdict = (Category.GROWS if low > tolerance or creeps else Category.STEADY if high < tolerance
               else Category.INCONCLUSIVE)
    out = {"growth_bytes": grown, "ci_low": low, "ci_high": high, "tolerance_bytes": tolerance,
           "level_bytes": level, "per_step_bytes": grown / span if span else 0.0, "verdict": verdict,
           "steps": len(trend)}
    if creeps and low <= tolerance:
        out["creeps"] = True   # grows by the per-step rule alone (CREEP_BYTES), under the tolerance
    return out


def _creeps(trend: list[int], third: int, grown: float, low: float, span: int) -> bool:
    """Does a reading grow at least CREEP_BYTES a step (its interval's low end, over the steps
    between the thirds' centres) through the whole run: the median of each of CREEP_PARTS
    quarters above the one before by at least CREEP_SHARE of their average rise? A leak rises
    alike from quarter to quarter; an allocator that took one more heap once rises in at most two
    of the three (the jump's quarter and the next), and stays flat in the other."""
    size = len(trend) // CREEP_PARTS
    if size < 2 or span <= 0 or low / span < CREEP_BYTES:
        return False
    medians = [statistics.median(trend[k * size:(k + 1) * size]) for k in range(CREEP_PARTS - 1)]
    medians.append(statistics.median(trend[(CREEP_PARTS - 1) * size:]))
    rises = [b - a for a, b in zip(medians, medians[1:])]
    return min(rises) >= CREEP_SHARE * max(grown, 0.0) / len(rises) > 0


def first_sight(run: dict, trends: dict) -> dict:
    """What a length the run never used cost each reading: over the ``NEW_LENGTHS`` steps after
    the trend (``new_lengths``), from the trend's last reading to their last, per new length,
    less what the trend grows per step over as many steps (a leak's share). A per-shape cost
    (MPS's graph cache): paid once per distinct length, so never judged as growth. {} for a run
    without such steps."""
    new = run.get("new_lengths") or {}
    probe, later = list(new.get("lengths") or []), new.get("series") or {}
    if not probe:
        return {}
    per = {}
    for name, values in later.items():
        before = run["series"].get(name)
        if not values or not before:
            continue
        trend = trends.get(name) or {}
        step = 0.0 if "reason" in trend else float(trend.get("per_step_bytes", 0.0))
        per[name] = (values[-1] - before[-1] - step * len(values)) / len(probe)
    return {"lengths": probe, "per_length_bytes": per,
            "series_mib": {n: [round(v / MIB, 2) for v in values] for n, values in later.items()}}


def given_back_covers(name: str, trend: dict, run: dict, seen: dict) -> bool:
    """A reading that grew, and that empty_cache (and a garbage collection) gave back at least half
    of what it grew between the thirds, beyond what the lengths the run met cost (``first_sight``'s
    cost per new length times the lengths met: graphs cached for each, given back with the rest):
    a cache that fills step after step, not memory held for good. A leak beside a graph cache is
    still held: empty_cache gives back the graphs, not the leak."""
    back = run["given_back"].get(name)
    if back is None or trend["growth_bytes"] <= 0:
        return False
    per_length = max(0.0, (seen.get("per_length_bytes") or {}).get(name, 0.0)) if seen else 0.0
    met = len(set(run.get("buckets") or [])) + len((seen or {}).get("lengths") or [])
    return back - per_length * met >= trend["growth_bytes"] / 2


def _mib(n: float) -> str:
    return f"{n / MIB:.3g} MiB"


def _said_first_sight(seen: dict, given_back: dict) -> str:
    """What a new length cost, in words: the readings it cost ``SHAPE_NOTE_BYTES`` or more, each
    said given back by empty_cache (cached) or not."""
    if not seen:
        return ""
    count = len(seen["lengths"])
    head = f"a new length ({count} tried after the trend: {', '.join(map(str, seen['lengths']))}) cost"
    costly = {n: b for n, b in seen["per_length_bytes"].items() if b >= SHAPE_NOTE_BYTES}
    if not costly:
        return f"{head} under {_mib(SHAPE_NOTE_BYTES)} on every reading"
    each = ", ".join(f"{n} {_mib(b)} each ("
                     + ("given back by empty_cache: cached" if given_back.get(n, 0) >= b * count / 2
                        else "not given back by empty_cache") + ")" for n, b in costly.items())
    return (f"{head} {each}: a per-shape cost, paid once per distinct length, not per step (MPS caches graphs per "
            "input shape), so not counted as growth; pad to a few fixed lengths to bound it")


FIX = ("if it grows on every run, train in shorter runs or restart between epochs, compare with the torch "
       "release before (./compat candidate), and report it to PyTorch with this run file")
FIX_INFERENCE = ("restart the serving process every so many requests (pytorch#181213's workaround; to pad requests "
                 "to a few fixed lengths bounds only what new shapes cost), compare with the torch release before "
                 "(./compat candidate), and report it to PyTorch with this run file")
# a reading that grew and that empty_cache gave back: a cache that fills step after step
FIX_CACHE = {
    "loop": "bucket the lengths (pad each batch to one of a few fixed lengths), so fewer shapes reach the device, or "
            "empty the cache every so many steps (torch.mps.empty_cache(); torch.cuda.empty_cache() on CUDA)",
    "trainer": "bucket the lengths (pad each batch to one of a few fixed lengths), so fewer shapes reach the device, "
               "or have the Trainer empty the cache every so many steps (TrainingArguments(torch_empty_cache_steps=N))",
    "inference": "pad requests to a few fixed lengths (buckets), so fewer shapes reach the device, or empty the cache "
                 "every so many requests (torch.mps.empty_cache(); torch.cuda.empty_cache() on CUDA)",
}
FIX_CACHE_TAIL = "; if it grows on every run, compare with the torch release before (./compat candidate)"


def advice(run: dict, grows: list[str], trends: dict, seen: dict) -> str:
    """What to do about readings that grow: given back by empty_cache (``given_back_covers``),
    a cache's switches; kept, a leak's (FIX, FIX_INFERENCE); both, each named."""
    cached = [n for n in grows if given_back_covers(n, trends[n], run, seen)]
    kept = [n for n in grows if n not in cached]
    leak = FIX_INFERENCE if run["entry"] == "inference" else FIX
    cache = FIX_CACHE.get(run["entry"], FIX_CACHE["loop"])
    if not cached:
        return leak
    if not kept:
        return (f"empty_cache gave back what {', '.join(cached)} grew: a cache that fills step after step, not a leak: "
                f"{cache}{FIX_CACHE_TAIL}")
    return (f"empty_cache gave back what {', '.join(cached)} grew (a cache: {cache}), not what {', '.join(kept)} grew "
            f"(held: {leak})")


def judge(run: dict) -> Verdict:
    """Grows on any reading: a fail naming the reading, with advice by what empty_cache gave back
    (``advice``); steady on every one: a pass; else a pass without a verdict (inconclusive): a
    reading too close to the tolerance to call, or too few readings after the warm-up to show a
    trend (``too_few``: the reason, and more steps). What a new length cost (``first_sight``) is
    said beside it, never judged: the trend's steps all reuse lengths the warm-up met."""
    trends = {name: growth(values, run["warmup"]) for name, values in run["series"].items()}
    seen = first_sight(run, trends)
    grows = [n for n, g in trends.items() if g["verdict"] == Category.GROWS]
    few = [n for n, g in trends.items() if "reason" in g]   # too few readings: no trend to judge
    unsure = [n for n, g in trends.items() if g["verdict"] == Category.INCONCLUSIVE and n not in few]

    def said(names):
        return "; ".join(f"{n} {_mib(trends[n]['growth_bytes'])} from the first reading to the last, no interval"
                         if n in few else
                         f"{n} {_mib(trends[n]['growth_bytes'])} ({_mib(trends[n]['per_step_bytes'])}/step, interval "
                         f"[{_mib(trends[n]['ci_low'])}, {_mib(trends[n]['ci_high'])}], tolerance "
                         f"{_mib(trends[n]['tolerance_bytes'])}"
                         + (f"; under the tolerance, but at least {_mib(CREEP_BYTES)} a step through the whole run: "
                            f"{trends[n]['per_step_bytes'] * 10_000 / 2 ** 30:.3g} GiB in 10,000 steps"
                            if trends[n].get("creeps") else "") + ")" for n in names)

    def back(names):
        return ", ".join(f"{n} {_mib(run['given_back'][n])}" for n in names if n in run["given_back"])
    where = (f"{run['model']} through the {run['entry']}, {run['steps']} steps of batch {run['batch']}, "
             if run["entry"] != "inference" else
             f"{run['model']} in inference, {run['steps']} forwards of batch {run['batch']} under inference_mode, ") \
        + f"lengths {run['lengths']}"
    metrics = {"trends": trends, "given_back": run["given_back"], "entry": run["entry"], "model": run["model"],
               "steps": run["steps"], "warmup": run["warmup"], "batch": run["batch"],
               "series_mib": {n: [round(v / MIB, 2) for v in values] for n, values in run["series"].items()}}
    if run.get("buckets"):
        metrics["buckets"] = list(run["buckets"])
    if seen:
        metrics["first_sight"] = seen
    shapes = _said_first_sight(seen, run["given_back"])
    # a reason is cut at REASON_MAX characters: what grows and the advice first, the rest after
    if grows:
        others = [n for n in trends if n not in grows]
        tail = "".join(f"; {part}" for part in (shapes, said(others)) if part)
        return Verdict(Status.FAIL, Category.GROWS,
                       f"memory grows over a long run: {', '.join(grows)} kept growing after {run['warmup']} warm-up "
                       f"steps{', at lengths already met' if run.get('buckets') else ''} ({where}): {said(grows)}; "
                       f"empty_cache gave back {back(grows) or 'nothing recorded'}; {advice(run, grows, trends, seen)}"
                       f"{tail}", metrics)
    why = ([trends[few[0]]["reason"]] if few else [too_few(0, run["warmup"])] if not trends else []) \
        + ([", ".join(unsure) + " moved within the interval's reach of the tolerance"] if unsure else [])
    category = Category.INCONCLUSIVE if why else Category.STEADY
    lead = "no verdict: " + "; ".join(why) if why else "steady"
    given = f"empty_cache gave back {back(trends) or 'nothing recorded'}"
    body = "; ".join(part for part in (shapes, said(trends), given) if part)
    return Verdict(Status.PASS, category, f"{lead} ({where}): {body}", metrics)


class MemoryCase:
    """One architecture x entry, of the shape harness.core.cases.Case: ``perf/memory-<arch>/<entry>``."""

    def __init__(self, arch: str, entry: str):
        self.arch, self.entry = arch, entry
        self.subject, self.variant, self.id = f"memory-{arch}", entry, f"memory-{arch}-{entry}"

    @property
    def targets(self) -> tuple[str, ...]:
        return targets()


CASES = (tuple(MemoryCase(arch, "loop") for arch in ARCHS) + tuple(MemoryCase(a, "trainer") for a in TRAINER_ARCHS)
         + tuple(MemoryCase(arch, "inference") for arch in ARCHS))
