"""Memory over a long run: does a training or inference run's memory keep growing, step after step?

A leak does not show in one step's peak (the optimization suite's measure): it shows as a
trend. PyTorch's tracker has MPS runs whose memory grows every step (the graph cache, driver
memory outside torch's tensor counters), Trainer runs with varying lengths that grow until
the machine swaps, and inference with varying lengths whose process and driver memory grow
without bound while the tensors stay flat (pytorch#181213, torch 2.7.1 on macOS 26: driver
allocation rebuilt toward 13-14 GiB against 0.24 GiB of tensors). So a check here trains for
``STEPS`` steps the way users do (lengths that vary from batch to batch, an LR scheduler,
AdamW), through a plain loop (``perf/memory-<arch>/loop``) or through transformers' Trainer
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

Each reading is judged on its own (``growth``): after ``WARMUP`` steps (the allocator's cache
and the optimizer's state settle; the warm-up's first step is at the longest length, so the
largest blocks exist before the trend is read), the median of the last third of the steps
against the median of the first third, with a bootstrap interval. It **grows** when the whole
interval is above the tolerance (``TOLERANCE_BYTES``, or ``TOLERANCE_SHARE`` of the level
where that is more), is **steady** when the whole interval is below it, and **inconclusive**
otherwise. Fewer than ``MIN_TREND`` readings after the warm-up show no trend at all (two thirds
of one or two readings overlap or have no spread to take an interval of): such a reading is
**inconclusive**, saying how many it had and that more steps (the run's ``steps``) change it,
never steady. What ``empty_cache`` (and a garbage collection) gives back at the end is recorded.
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


def step_lengths(seq: int, total: int) -> list[int]:
    """The run's lengths: the longest first, then a seeded draw per step (repeats allowed: a
    dataset's lengths recur)."""
    import torch
    gen = torch.Generator().manual_seed(SEED + 11)
    low = max(2, seq // 4)
    return [seq] + torch.randint(low, seq + 1, (total - 1,), generator=gen).tolist()


def _finish(series: dict[str, list[int]], read, device: str) -> dict:
    before = read()
    gc.collect()
    devices.backend(device.split(":")[0]).empty_cache()
    after = read()
    return {"series": series, "given_back": {k: before[k] - after[k] for k in before if k in after},
            "after_empty_cache": after}


# --------------------------------------------------------------------------- the runs (sandbox child)

def loop_run(arch: str, device: str, workload: str, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """A plain training loop with a linear warm-up / decay schedule and varying lengths."""
    from transformers import get_linear_schedule_with_warmup
    t = Trainer(arch, workload, device)
    total = steps + warmup
    scheduler = get_linear_schedule_with_warmup(t.optimizer, num_warmup_steps=warmup, num_training_steps=total)
    read = reader(device)
    series: dict[str, list[int]] = {}
    lengths = step_lengths(t.dims.seq, total)
    for i, n in enumerate(lengths):
        t.step(t.batch(seq=n, batch=BATCH, seed=SEED + i))
        scheduler.step()
        for name, value in read().items():
            series.setdefault(name, []).append(value)
    return {"entry": "loop", "model": t.about, "steps": total, "warmup": warmup, "batch": BATCH,
            "lengths": f"{min(lengths)}..{max(lengths)}", **_finish(series, read, device)}


def trainer_run(arch: str, device: str, workload: str, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """The same through ``transformers.Trainer``: a dataset of rows of varying length padded
    per batch, the Trainer's linear schedule, readings from a callback after every step."""
    import torch
    from transformers import PrinterCallback, TrainerCallback, TrainingArguments
    from transformers import Trainer as HFTrainer
    t = Trainer(arch, workload, device)
    total = steps + warmup
    lengths = step_lengths(t.dims.seq, total)
    gen = torch.Generator().manual_seed(SEED + 12)
    rows = []
    for n in lengths:   # one batch per length: BATCH rows of the same length, in order
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
            for name, value in read().items():
                series.setdefault(name, []).append(value)

    with tempfile.TemporaryDirectory(prefix="mps-compat-perf-") as out:
        args = TrainingArguments(output_dir=out, per_device_train_batch_size=BATCH, max_steps=total,
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
    return {"entry": "trainer", "model": t.about, "steps": total, "warmup": warmup, "batch": BATCH,
            "lengths": f"{min(lengths)}..{max(lengths)}", **_finish(series, read, device)}


def inference_run(arch: str, device: str, workload: str, steps: int = STEPS, warmup: int = WARMUP) -> dict:
    """Inference as a service runs it: the model in eval mode, each call a batch of another
    length under ``torch.inference_mode()``, its output moved to the CPU and dropped."""
    import torch
    t = Trainer(arch, workload, device)
    t.model.eval()
    total = steps + warmup
    read = reader(device)
    series: dict[str, list[int]] = {}
    lengths = step_lengths(t.dims.seq, total)
    for i, n in enumerate(lengths):
        batch = {k: v for k, v in t.batch(seq=n, batch=BATCH, seed=SEED + i).items()
                 if k != "labels" or arch == "t5"}   # T5's decoder starts from its labels
        with on_target(device), torch.inference_mode():
            out = t.model(**batch)[0].to("cpu")
        del out, batch
        for name, value in read().items():
            series.setdefault(name, []).append(value)
    return {"entry": "inference", "model": t.about, "steps": total, "warmup": warmup, "batch": BATCH,
            "lengths": f"{min(lengths)}..{max(lengths)}", **_finish(series, read, device)}


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
    verdict = (Category.GROWS if low > tolerance else Category.STEADY if high < tolerance else Category.INCONCLUSIVE)
    span = len(trend) - third   # steps between the two thirds' centres
    return {"growth_bytes": grown, "ci_low": low, "ci_high": high, "tolerance_bytes": tolerance,
            "level_bytes": level, "per_step_bytes": grown / span if span else 0.0, "verdict": verdict,
            "steps": len(trend)}


def _mib(n: float) -> str:
    return f"{n / MIB:.3g} MiB"


FIX = ("if it grows on every run, train in shorter runs or restart between epochs, compare with the torch "
       "release before (./compat candidate), and report it to PyTorch with this run file")
FIX_INFERENCE = ("pad requests to a few fixed lengths (buckets), so fewer input shapes reach the device, or restart "
                 "the serving process every so many requests (pytorch#181213's workaround); compare with the torch "
                 "release before (./compat candidate), and report it to PyTorch with this run file")


def judge(run: dict) -> Verdict:
    """Grows on any reading: a fail naming the reading; steady on every one: a pass; else a
    pass without a verdict (inconclusive): a reading too close to the tolerance to call, or too
    few readings after the warm-up to show a trend (``too_few``: the reason, and more steps)."""
    trends = {name: growth(values, run["warmup"]) for name, values in run["series"].items()}
    grows = [n for n, g in trends.items() if g["verdict"] == Category.GROWS]
    few = [n for n, g in trends.items() if "reason" in g]   # too few readings: no trend to judge
    unsure = [n for n, g in trends.items() if g["verdict"] == Category.INCONCLUSIVE and n not in few]
    said = "; ".join(f"{n} {_mib(g['growth_bytes'])} from the first reading to the last, no interval"
                     if n in few else
                     f"{n} {_mib(g['growth_bytes'])} ({_mib(g['per_step_bytes'])}/step, interval "
                     f"[{_mib(g['ci_low'])}, {_mib(g['ci_high'])}], tolerance {_mib(g['tolerance_bytes'])})"
                     for n, g in trends.items())
    back = ", ".join(f"{n} {_mib(v)}" for n, v in run["given_back"].items())
    where = (f"{run['model']} through the {run['entry']}, {run['steps']} steps of batch {run['batch']}, "
             if run["entry"] != "inference" else
             f"{run['model']} in inference, {run['steps']} forwards of batch {run['batch']} under inference_mode, ") \
        + f"lengths {run['lengths']}"
    metrics = {"trends": trends, "given_back": run["given_back"], "entry": run["entry"], "model": run["model"],
               "steps": run["steps"], "warmup": run["warmup"], "batch": run["batch"],
               "series_mib": {n: [round(v / MIB, 2) for v in values] for n, values in run["series"].items()}}
    if grows:
        return Verdict(Status.FAIL, Category.GROWS,
                       f"memory grows over a long run: {', '.join(grows)} kept growing after {run['warmup']} warm-up "
                       f"steps ({where}): {said}; empty_cache gave back {back}; "
                       f"{FIX_INFERENCE if run['entry'] == 'inference' else FIX}", metrics)
    why = ([trends[few[0]]["reason"]] if few else [too_few(0, run["warmup"])] if not trends else []) \
        + ([", ".join(unsure) + " moved within the interval's reach of the tolerance"] if unsure else [])
    category = Category.INCONCLUSIVE if why else Category.STEADY
    lead = "no verdict: " + "; ".join(why) if why else "steady"
    return Verdict(Status.PASS, category, f"{lead} ({where}): {said}; empty_cache gave back {back}", metrics)


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
