"""The perf suite's judges on runs too small to judge, and the varying-length check's lengths
in a process shared by every architecture: a memory trend of a few readings is no verdict,
a time of one sample is no narrow figure, and no architecture meets a length another one
already stepped at in the same process. No wall-clock figure is asserted."""
import json

import pytest

from harness.core import records
from harness.core.records import Category, Status
from harness.env import timing
from harness.perf import against, memory, models, ops
from tests.test_perf_suite import _SteadyClock

MIB = 2 ** 20


# --------------------------------------------------------------------------- memory: too few readings

def _long_run(after_warmup: list[int], warmup: int = 10) -> dict:
    series = [900 * MIB] * warmup + after_warmup
    return {"series": {"rss": series, "allocated": list(series)}, "warmup": warmup, "given_back": {"rss": 0},
            "entry": "loop", "model": "m", "steps": len(series), "batch": 4, "lengths": "16..64"}


@pytest.mark.parametrize("count", [0, 1, 2, 3])
def test_a_memory_trend_of_too_few_readings_is_no_verdict_and_says_to_run_more_steps(count):
    flat = [900 * MIB] * count
    trend = memory.growth([900 * MIB] * 10 + flat, 10)
    assert trend["verdict"] == Category.INCONCLUSIVE and trend["steps"] == count
    assert f"only {count} reading" in trend["reason"] and "run more steps" in trend["reason"]
    v = memory.judge(_long_run(flat))
    assert v.status == Status.PASS and v.category == Category.INCONCLUSIVE, v.message
    assert v.message.startswith("no verdict: ") and "too few to show a trend" in v.message
    assert "run more steps" in v.message and "steady" not in v.message
    assert all(t["verdict"] == Category.INCONCLUSIVE for t in v.metrics["trends"].values())


def test_a_short_run_that_climbs_is_not_called_growing_either_and_enough_readings_are_judged():
    climbing = memory.judge(_long_run([900 * MIB + i * 64 * MIB for i in range(3)]))
    assert climbing.status == Status.PASS and climbing.category == Category.INCONCLUSIVE
    assert memory.judge(_long_run([900 * MIB] * memory.MIN_TREND)).category == Category.STEADY
    assert memory.judge(_long_run([900 * MIB + i * 64 * MIB for i in range(12)])).category == Category.GROWS


def test_a_too_short_run_is_recorded_and_compared_as_no_verdict():
    """Its trends keep their fields (the bounds infinite, as the run file spells them), and the
    comparison with a baseline that grew calls it neither steady nor an improvement."""
    v = memory.judge(_long_run([900 * MIB] * 2))
    written = json.loads(json.dumps(records.json_safe(v.metrics)))
    assert written["trends"]["rss"]["ci_low"] == "-inf" and written["trends"]["rss"]["ci_high"] == "inf"
    record = {"check": "perf/memory-bert/loop", "suite": "perf", "subject": "memory-bert", "variant": "loop",
              "target": "cpu", "status": v.status, "category": v.category, "metrics": written,
              "reason": records.first_line(v.message), "duration_s": 1.0}
    assert records.validate(record) is None and "too few to show a trend" in record["reason"]
    grew = {"check": "perf/memory-bert/loop", "category": Category.GROWS, "metrics": {}}
    now = {"check": "perf/memory-bert/loop", "category": v.category, "metrics": written}
    assert against.changes(grew, now, "h", "h") == []


# --------------------------------------------------------------------------- timing: one sample

def test_one_sample_has_no_interval_and_is_noisy_never_narrow():
    one = timing.summary([0.25])
    assert one["noisy"] and one["rounds"] == 1 and one["median_s"] == 0.25
    assert one["ci_low"] == float("-inf") and one["ci_high"] == float("inf") and one["width"] == float("inf")
    assert "one sample" in one["no_interval"]
    two = timing.summary([0.25, 0.26])   # two samples do have an interval
    assert "no_interval" not in two and two["ci_low"] <= two["median_s"] <= two["ci_high"]


def _cold(durations: list[float]) -> dict:
    return {**timing.summary(durations), "what": "cold-start", "model": "BertForSequenceClassification",
            "runs": [{}] * len(durations), "durations": durations, "import_s": 2.0, "build_s": 0.1, "warm_s": 0.05,
            "threads": 1, "clock": "wall clock", "control_s": 0.001, "shape": "batch 4, length 64",
            "processes": "zygote"}


def test_a_cold_start_of_one_process_is_noisy_with_its_reason_and_never_compared():
    v = models.judge(_cold([0.8]))
    assert v.status == Status.PASS and v.category == Category.NOISY, v.message
    assert "one sample, so no interval" in v.message and "processes=" in v.message
    assert "inf" not in v.message and v.metrics["no_interval"] == timing.ONE_SAMPLE
    three = models.judge(_cold([0.8, 0.81, 0.8]))
    assert "no_interval" not in three.metrics
    # what the page's cold-start row reads ("import 2 s, warm step 50 ms"): the record keeps it
    assert v.metrics["import_s"] == three.metrics["import_s"] == 2.0 and three.metrics["warm_s"] == 0.05
    # against a baseline's figure, one sample neither regresses nor improves: it has no interval
    base = {"check": "perf/model-bert/cold-start", "category": Category.TIMED, "metrics": three.metrics}
    for median in (0.1, 8.0):
        alone = models.judge(_cold([median]))
        now = {"check": "perf/model-bert/cold-start", "category": alone.category,
               "metrics": json.loads(json.dumps(records.json_safe(alone.metrics)))}
        assert [c for c in against.changes(base, now, "h", "h") if c[1] == "perf-time"] == []


def test_a_timed_figure_of_one_round_is_noisy():
    clock = _SteadyClock()
    run = timing.time_rounds(lambda: None, clock, warmup=0, rounds=1, max_rounds=1, budget_s=0.0)
    assert run["rounds"] == 1 and run["noisy"]
    v = ops.judge({**run, "op": "mul", "dtype": "float32", "pass": "forward", "shape": "s", "workload": "small"})
    assert v.category == Category.NOISY and "one sample, so no interval" in v.message and "inf" not in v.message


# --------------------------------------------------------------------------- new lengths, process-wide

def test_every_architecture_meets_lengths_of_its_own_within_the_positions():
    seq = 64
    dealt = {arch: models.lengths_for(seq, models.SHAPE_STEPS, arch=arch) for arch in models.ARCHS}
    met = {arch: set().union(*(models.met_at(arch, n) for n in lengths)) for arch, lengths in dealt.items()}
    for i, a in enumerate(models.ARCHS):
        assert len(set(dealt[a])) == models.SHAPE_STEPS and dealt[a] == models.lengths_for(seq, models.SHAPE_STEPS,
                                                                                            arch=a)
        assert all(2 <= n <= models.MAX_POSITIONS for n in dealt[a])
        for b in models.ARCHS[i + 1:]:
            assert not met[a] & met[b], (a, b)
    assert dealt["bert"] == models.lengths_for(seq, models.SHAPE_STEPS)   # the default: the first architecture's
    # a workload too short for 5 x 6 new lengths below it reaches past it, never past the positions
    short = [n for a in models.ARCHS for n in models.lengths_for(8, models.SHAPE_STEPS, arch=a, most=64)]
    assert len(set(short)) == len(short) and max(short) <= 64
    with pytest.raises(ValueError, match="new lengths"):
        models.lengths_for(8, models.SHAPE_STEPS, arch="minilm", most=20)


class _ShapeCache:
    """A process's shape cache: which lengths a step met before (any model's)."""

    def __init__(self):
        self.seen: set[int] = set()
        self.steps: list[tuple[str, int, set[int]]] = []   # (arch, length, lengths already in the cache)


def test_in_one_process_no_architecture_meets_a_length_another_one_warmed(monkeypatch):
    """varying_length for every architecture in turn, in one process whose shape cache is
    shared (as MPS's graph cache is): each pair's first sight is a length no model met before,
    where before the fix the second architecture met the first one's lengths again."""
    cache = _ShapeCache()

    class FakeTrainer:
        def __init__(self, arch, workload, device):
            self.arch, self.about = arch, arch
            self.dims = ops.Dims(4, 64, 16, 2, 32, 50)
            self.model = type("M", (), {"config": type("C", (), {"max_position_embeddings": 512})()})()

        def batch(self, seq=None, batch=None, seed=0):
            return {"length": seq or self.dims.seq}

        def step(self, batch):
            n = batch["length"]
            meets = {n, max(1, n // 2)} if self.arch == "t5" else {n}
            cache.steps.append((self.arch, n, meets & cache.seen))
            cache.seen |= meets

    monkeypatch.setattr(models, "Trainer", FakeTrainer)
    for arch in models.ARCHS:   # what train-step and inference met before, at the workload's length
        FakeTrainer(arch, "small", "cpu").step({"length": 64})
    runs = {arch: models.varying_length(arch, "cpu", "small") for arch in models.ARCHS}
    for arch, run in runs.items():
        firsts = [(n, before) for a, n, before in cache.steps if a == arch and n in run["lengths"]][::2]
        assert [n for n, _ in firsts] == run["lengths"]
        assert all(not before for _, before in firsts), (arch, firsts)


def test_the_page_shows_a_too_short_run_and_a_one_sample_time_without_an_interval():
    from harness.report.matrix import build
    from harness.report.speed import perf_sections
    from tests.test_perf_suite import _page_run, _rec
    short = memory.judge(_long_run([900 * MIB] * 2))
    cold = models.judge(_cold([0.8]))
    written = [_rec("perf/memory-bert/loop", short.category, json.loads(json.dumps(records.json_safe(short.metrics))),
                    reason=short.message),
               _rec("perf/model-bert/cold-start", cold.category, json.loads(json.dumps(records.json_safe(cold.metrics))),
                    reason=cold.message)]
    _, models_, _, memory_ = perf_sections(build([_page_run("cand", written)]))
    assert {r[4].text for r in memory_.rows} == {Category.INCONCLUSIVE}
    assert all("inf" in r[7] for r in memory_.rows)   # no interval, not a zero-width one
    assert models_.rows[0][4] == "800 ms" and models_.rows[0][5] == "" and models_.rows[0][8] == Category.NOISY
