"""The perf suite's judges on runs too small to judge: a memory trend of a few readings is no
verdict, a time of one sample is no narrow figure. No wall-clock figure is asserted."""
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
