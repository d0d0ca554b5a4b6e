"""The long memory runs (harness/perf/memory.py) tell a new input shape's one-off cost from a leak.

On MPS every new input shape adds compiled graphs to MPSGraph's cache, which
``torch.mps.driver_allocated_memory`` counts (pytorch#181485: 13.7 GB of driver memory fell to
52 MB once the graph cache was cleared): a run that keeps meeting new lengths grows until it has
met them all. That is a cost per distinct length, cached, not a leak per step, and a healthy Mac
must not read "grows" for it. Here the real runs (the loop, the Trainer, inference) drive a tiny
model on a stand-in MPS backend whose driver memory is such a cache: the trend must stay steady,
the cost of a new length must be reported beside it, and memory that grows at every step at
lengths already met must still fail, with the advice chosen by what empty_cache gave back.
"""
import pytest
import torch

from harness.core.records import Category, Status
from harness.env import devices
from harness.perf import memory, models
from harness.perf.ops import Dims

MIB = 2 ** 20
PER_SHAPE = 8 * MIB      # a graph cache's cost per new input shape: lengths drawn anew at every step put several
                         # new ones between the trend's thirds, beyond its 16 MiB tolerance
PER_STEP = 2 * MIB       # perf_faults' leak: beyond the tolerance over the trend's 27 steps between its thirds' centres
VOCAB = 50


class GraphCache:
    """A stand-in MPS backend: flat tensors; driver memory that grows by ``per_shape`` for each
    input shape the model meets the first time (MPSGraph's cache, emptied by empty_cache) and by
    ``per_step`` at every forward, shape seen or not (held for good when ``kept``, else a pool
    that empty_cache frees)."""

    def __init__(self, per_shape: int = 0, per_step: int = 0, kept: bool = True):
        self.per_shape, self.per_step, self.kept = per_shape, per_step, kept
        self.shapes: set = set()
        self.steps = self.freed = 0

    def met(self, shape) -> None:
        self.shapes.add(shape)
        self.steps += 1

    def synchronize(self):
        pass

    def memory_current(self):
        return 100 * MIB

    def memory_driver(self):
        return 500 * MIB + self.per_shape * len(self.shapes) + self.per_step * (self.steps - self.freed)

    def empty_cache(self):
        self.shapes.clear()
        if not self.kept:
            self.freed = self.steps


class Tiny(torch.nn.Module):
    """A sequence classifier small enough for fifty steps in a test, telling the cache each input shape."""

    def __init__(self, cache: GraphCache):
        super().__init__()
        self.cache = cache
        self.emb, self.head = torch.nn.Embedding(VOCAB, 4), torch.nn.Linear(4, 2)

    def forward(self, input_ids, attention_mask=None, labels=None):
        self.cache.met(tuple(input_ids.shape))
        logits = self.head(self.emb(input_ids).mean(1))
        return (logits,) if labels is None else (torch.nn.functional.cross_entropy(logits, labels), logits)


class TinyTrainer:
    """harness.perf.models.Trainer's shape, around Tiny."""

    def __init__(self, cache: GraphCache, arch: str, workload: str, device: str):
        self.arch, self.device = arch, device
        self.model, self.vocab, self.about = Tiny(cache), VOCAB, "a tiny stand-in"
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
        self.dims = Dims.of_workload(workload)

    def batch(self, seq=None, batch=None, seed=models.SEED):
        return models.make_batch(self.arch, self.vocab, batch or self.dims.batch, seq or self.dims.seq, self.device,
                                 seed)

    def step(self, batch):
        self.model(**batch)[0].backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def long_run(monkeypatch, entry: str, cache: GraphCache):
    """The check's own run (memory.RUNS[entry], bert, the small workload) on the stand-in, judged;
    the process's RSS set flat, as on a Mac whose graph cache is in the Metal heap (this test's
    own process is no Mac's)."""
    monkeypatch.setattr(memory, "Trainer", lambda arch, workload, device: TinyTrainer(cache, arch, workload, device))
    monkeypatch.setattr(devices, "backend", lambda kind, facts=None: cache)
    monkeypatch.setattr(devices, "rules_of", lambda target: "mps")
    run = memory.RUNS[entry]("bert", "cpu", "small")
    for series in (run["series"], *([run["new_lengths"]["series"]] if "new_lengths" in run else [])):
        series["rss"] = [900 * MIB] * len(series["rss"])
    run["given_back"]["rss"] = 0
    assert set(run["series"]) == {"rss", "allocated", "driver"}
    return run, memory.judge(run)


ENTRIES = ("loop", "trainer", "inference")


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_graph_cache_that_grows_per_new_shape_only_is_steady_and_its_cost_is_reported_apart(monkeypatch, entry):
    """The defect: lengths drawn anew at every step left 6-7 of the last third's 13 steps at
    lengths never met, so a cache that grows per new shape read as memory growing per step."""
    cache = GraphCache(per_shape=PER_SHAPE)
    run, v = long_run(monkeypatch, entry, cache)
    assert v.status == Status.PASS and v.category == Category.STEADY, v.message
    assert v.metrics["trends"]["driver"]["verdict"] == Category.STEADY
    # the cost of a new length is measured, per length, and said for what it is
    seen = v.metrics["first_sight"]
    assert len(seen["lengths"]) == memory.NEW_LENGTHS
    assert seen["per_length_bytes"]["driver"] == pytest.approx(PER_SHAPE, abs=0.05 * MIB)
    assert seen["per_length_bytes"]["allocated"] == pytest.approx(0)
    assert "cost driver 8 MiB each (given back by empty_cache: cached)" in v.message, v.message
    assert "paid once per distinct length, not per step" in v.message
    # every step the trend reads reuses a length the warm-up met; the new ones come after it
    assert set(run["buckets"]) == set(memory.step_lengths(64, run["steps"], run["warmup"])[:run["warmup"]])
    assert not set(seen["lengths"]) & set(run["buckets"])
    assert len(cache.shapes) == 0   # empty_cache emptied it: every length's graphs given back
    assert run["given_back"]["driver"] == PER_SHAPE * (len(run["buckets"]) + memory.NEW_LENGTHS)


@pytest.mark.parametrize("entry", ENTRIES)
def test_memory_that_grows_at_every_step_at_lengths_already_met_still_fails_as_a_leak(monkeypatch, entry):
    _, v = long_run(monkeypatch, entry, GraphCache(per_shape=PER_SHAPE, per_step=PER_STEP, kept=True))
    assert v.status == Status.FAIL and v.category == Category.GROWS
    assert "driver kept growing" in v.message and "at lengths already met" in v.message
    assert v.metrics["trends"]["driver"]["per_step_bytes"] == pytest.approx(PER_STEP)
    assert v.metrics["trends"]["allocated"]["verdict"] == Category.STEADY
    # the new lengths' own cost, less the per-step growth over those steps
    assert v.metrics["first_sight"]["per_length_bytes"]["driver"] == pytest.approx(PER_SHAPE, abs=0.05 * MIB)
    if entry == "inference":
        assert "restart the serving process" in v.message and "pad requests to a few fixed lengths" in v.message
    else:
        assert "train in shorter runs or restart between epochs" in v.message
    assert "a cache that fills" not in v.message


@pytest.mark.parametrize("entry", ENTRIES)
def test_memory_that_grows_at_every_step_and_that_empty_cache_gives_back_is_called_a_cache(monkeypatch, entry):
    _, v = long_run(monkeypatch, entry, GraphCache(per_shape=PER_SHAPE, per_step=PER_STEP, kept=False))
    assert v.status == Status.FAIL and v.category == Category.GROWS
    assert "empty_cache gave back what driver grew: a cache that fills step after step, not a leak" in v.message
    assert "train in shorter runs" not in v.message and "restart" not in v.message
    switch = {"loop": "torch.mps.empty_cache()", "trainer": "torch_empty_cache_steps",
              "inference": "pad requests to a few fixed lengths"}[entry]
    assert switch in v.message and "bucket" in v.message, v.message


def test_a_reading_given_back_and_one_held_each_get_their_advice():
    series = [int(900 * MIB + PER_STEP * i) for i in range(50)]
    run = {"series": {"driver": series, "rss": list(series)}, "warmup": 10, "entry": "loop", "model": "m",
           "steps": 50, "batch": 4, "lengths": "16..64", "given_back": {"driver": 100 * MIB, "rss": 0}}
    v = memory.judge(run)
    assert v.category == Category.GROWS
    assert "gave back what driver grew (a cache: bucket the lengths" in v.message, v.message
    assert "not what rss grew (held: " in v.message and "train in shorter runs" in v.message
    assert "first_sight" not in v.metrics   # a run without steps at new lengths: nothing said of them


@pytest.mark.parametrize("workload", ["small", "medium", "large"])
@pytest.mark.parametrize("warmup", [memory.WARMUP, 3, 1])
def test_the_warm_up_meets_every_length_the_trend_steps_at_the_longest_first(workload, warmup):
    seq = Dims.of_workload(workload).seq
    total = memory.STEPS + warmup
    lengths = memory.step_lengths(seq, total, warmup)
    assert len(lengths) == total and lengths[0] == seq == max(lengths)
    assert set(lengths[warmup:]) <= set(lengths[:warmup])
    assert len(set(lengths)) == min(memory.BUCKETS, warmup) and min(lengths) >= seq // 4
    if warmup >= memory.BUCKETS:
        assert all(n % memory.PAD_TO == 0 for n in lengths)   # padded to a multiple, as a pipeline pads
        assert len(set(lengths[warmup:])) > 1                 # still lengths that vary from batch to batch
    new = memory.new_lengths(seq, lengths, salt="bert/loop")
    assert len(new) == memory.NEW_LENGTHS == len(set(new)) and not set(new) & (set(lengths) | {seq // 2})
    assert all(seq // 4 <= n <= seq for n in new)
    assert new != memory.new_lengths(seq, lengths, salt="gpt2/loop")   # checks in one process meet their own


def _creep_run(series):
    return {"series": {"rss": series}, "warmup": 10, "entry": "loop", "model": "m", "steps": len(series),
            "batch": 4, "lengths": "16..64", "given_back": {"rss": 0}}


def test_a_leak_under_the_tolerance_that_grows_every_step_through_the_run_grows():
    """0.45 MiB a step (4.4 GiB in 10,000 steps) grew 12 MiB over the 40 steps the trend reads,
    under the 16 MiB tolerance, and read "steady" with its interval [10, 14.6] MiB: a leak the
    upgrade check compared as unchanged. A reading that grows at least CREEP_BYTES a step through
    the whole run grows now; an allocator's one-time jump of as much, and a flat run, do not."""
    rng = torch.Generator().manual_seed(0)
    jitter = [int(x) for x in (torch.rand(50, generator=rng) * 0.05 * MIB)]
    leak = [int(891 * MIB + 0.45 * MIB * i) + j for i, j in enumerate(jitter)]
    v = memory.judge(_creep_run(leak))
    trend = v.metrics["trends"]["rss"]
    assert v.category == Category.GROWS and v.status == Status.FAIL, v.message
    assert trend["ci_low"] < trend["tolerance_bytes"] and trend["creeps"] is True
    assert "under the tolerance, but at least 0.25 MiB a step through the whole run" in v.message
    assert "4.38 GiB in 10,000 steps" in v.message, v.message
    # the same growth in one jump (a new heap, once): steady, as is a flat run with its jitter
    jump = [891 * MIB + j + (12 * MIB if i >= 30 else 0) for i, j in enumerate(jitter)]
    assert memory.judge(_creep_run(jump)).category == Category.STEADY
    for at in (14, 25, 33, 41):   # a jump anywhere: at most two quarters' rises
        jump = [891 * MIB + j + (12 * MIB if i >= at else 0) for i, j in enumerate(jitter)]
        assert memory.judge(_creep_run(jump)).category == Category.STEADY, at
    assert memory.judge(_creep_run([891 * MIB + j for j in jitter])).category == Category.STEADY
    # at a 3.7 GiB level (1% of it: a 37 MiB tolerance) 1 MiB a step grows too
    big = [int(3700 * MIB + MIB * i) + j for i, j in enumerate(jitter)]
    assert memory.judge(_creep_run(big)).category == Category.GROWS
    # slower than the floor: steady, as before
    slow = [int(891 * MIB + 0.1 * MIB * i) + j for i, j in enumerate(jitter)]
    assert memory.judge(_creep_run(slow)).category == Category.STEADY
