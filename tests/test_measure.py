"""Self-tests of harness/optim/measure.py: exact bytes for known allocations, the anatomy of a
tiny MLP + AdamW step, verdicts on synthetic timed workloads, a seeded bootstrap."""
import itertools
import json

import pytest
import torch
import torch.utils.checkpoint

from harness.core.records import Category, ClaimKind
from harness.env import timing
from harness.optim import measure, ratios
from harness.optim.ratios import Bound

LOWER, NOT_HIGHER = ClaimKind.LOWER, ClaimKind.NOT_HIGHER

MiB = 1 << 20
FLOAT = 4


# --------------------------------------------------------------------------- tracker

def test_storage_python_object_lives_as_long_as_the_storage():
    assert measure.storage_outlives_its_python_object()


def test_a_4_mib_tensor_raises_the_peak_by_exactly_4_mib_and_freeing_it_drops_it():
    tracker = measure.MemoryTracker()
    with tracker:
        x = torch.empty(MiB)  # float32: 4 MiB
        assert tracker.peak_bytes - tracker.baseline_bytes == 4 * MiB
        live = tracker.live_bytes
        del x
        assert live - tracker.live_bytes == 4 * MiB


def test_views_share_storage_and_add_nothing():
    tracker = measure.MemoryTracker()
    with tracker:
        x = torch.zeros(MiB)  # float32: 4 MiB
        live = tracker.live_bytes
        views = [x.view(-1, 4), x[1:], x.t(), x.reshape(2, -1), x.detach()]
        assert tracker.live_bytes == live
        del views, x
        assert tracker.live_bytes == live - 4 * MiB


def test_two_tensors_alive_at_once_peak_at_the_sum():
    tracker = measure.MemoryTracker()
    with tracker:
        a = torch.ones(MiB // FLOAT)
        b = torch.ones(2 * MiB // FLOAT)
        del a, b
        c = torch.ones(MiB // FLOAT)
        del c
    assert tracker.peak_bytes - tracker.baseline_bytes == 3 * MiB


def test_adopted_tensors_are_resident_from_the_start():
    params = [torch.zeros(MiB // FLOAT), torch.zeros(MiB // FLOAT)]
    tracker = measure.MemoryTracker().adopt(params, params[0][:10])  # a view of an adopted one: once
    with tracker:
        tmp = params[0] * 2
        del tmp
    assert tracker.baseline_bytes == 2 * MiB
    assert tracker.peak_bytes == 3 * MiB


def test_in_place_resize_is_counted():
    tracker = measure.MemoryTracker()
    with tracker:
        x = torch.empty(0)
        x.resize_(MiB // FLOAT)
        assert tracker.live_bytes - tracker.baseline_bytes == MiB


def test_a_paused_tracker_sees_no_op_yet_counts_frees_and_adopts_what_lives_on():
    """While paused the mode is off torch's dispatch stack: what is made is not counted (and
    costs nothing), what was counted still leaves when freed, and ``resume`` adopts what lives
    on (a gradient replaced instead of accumulated into), each storage once."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode
    tracker = measure.MemoryTracker()
    with tracker:
        counted = torch.ones(MiB // FLOAT)
        assert tracker.pause() and _get_current_dispatch_mode() is None
        unseen = torch.ones(2 * MiB // FLOAT)
        kept = torch.ones(MiB // FLOAT)
        del counted, unseen
        assert tracker.live_bytes == tracker.baseline_bytes and tracker.peak_bytes == tracker.baseline_bytes + MiB
        tracker.resume(kept, kept[:3])
        assert _get_current_dispatch_mode() is tracker and tracker.live_bytes == tracker.baseline_bytes + MiB
        again = torch.ones(MiB // FLOAT)
        assert tracker.live_bytes == tracker.baseline_bytes + 2 * MiB
        tracker.pause()   # left paused: the tracker's exit does not pop another mode
    assert _get_current_dispatch_mode() is None and not tracker.paused
    del again, kept


def test_a_tracker_under_another_mode_does_not_pause():
    """Pausing pops the innermost mode: with another mode entered after the tracker it would
    pop that one, so it keeps counting instead."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Other(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))
    tracker = measure.MemoryTracker()
    with tracker, Other():
        assert tracker.pause() is False
        x = torch.ones(MiB // FLOAT)
        assert tracker.live_bytes - tracker.baseline_bytes == MiB
        del x


def test_backward_ops_are_seen():
    w = torch.randn(256, 256, requires_grad=True)
    x = torch.randn(64, 256)
    result = measure.measure_memory(lambda: (x @ w).tanh().sum().backward(), adopt=[w, x])
    grad_bytes = 256 * 256 * FLOAT
    assert w.grad is not None
    # the gradient (an op output of backward) is live at the end, on top of w and x
    assert result["end_bytes"] - result["baseline_bytes"] >= grad_bytes
    assert result["peak_bytes"] - result["baseline_bytes"] >= grad_bytes + 64 * 256 * FLOAT


def _mlp_step(seed=0, checkpoint=False):
    """A tiny MLP + AdamW, ready for measure.memory_anatomy."""
    torch.manual_seed(seed)
    blocks = [torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
              for _ in range(3)]

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList(blocks)

        def forward(self, x):
            for block in self.blocks:
                x = (torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False) if checkpoint
                     else block(x)) + x
            return x

    model = MLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(32, 64)
    return model, batch, optimizer


def _anatomy(checkpoint=False):
    model, batch, optimizer = _mlp_step(checkpoint=checkpoint)
    return measure.memory_anatomy(model, batch, optimizer, loss_fn=lambda out, b: out.pow(2).mean())


def test_the_same_step_measured_twice_gives_identical_bytes():
    assert _anatomy() == _anatomy()


def test_anatomy_of_an_mlp_with_adamw():
    model, _, _ = _mlp_step()
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    n_params = len(list(model.parameters()))
    result = _anatomy()
    assert result["parameters"] == param_bytes
    assert result["gradients"] == param_bytes
    # exp_avg + exp_avg_sq per parameter, plus one float32 step counter each
    assert result["optimizer_state"] == 2 * param_bytes + n_params * FLOAT
    assert result["activations"] > 0
    assert result["batch"] == 32 * 64 * FLOAT
    assert sum(result["at_peak"].values()) == result["peak_bytes"]
    assert result["temporaries"] == result["at_peak"]["temporaries"]
    assert result["peak_bytes"] >= result["parameters"] + result["gradients"] + result["optimizer_state"]
    assert result["allocator_peak"] is None and "CPU" in result["allocator_reason"]
    json.dumps(result)  # plain data, ready to leave a sandbox child


def test_checkpointing_shrinks_saved_activations():
    plain, ckpt = _anatomy(), _anatomy(checkpoint=True)
    assert 0 < ckpt["activations"] < plain["activations"]
    assert ckpt["parameters"] == plain["parameters"]


def test_tiny_bert_step_is_deterministic():
    from harness.core import models
    results = []
    for _ in range(2):
        ex = models.example("bert")
        optimizer = torch.optim.AdamW(ex.model.parameters(), lr=1e-3)
        result = measure.memory_anatomy(ex.model, ex.batch, optimizer, ex.loss_fn)
        results.append({k: v for k, v in result.items() if k != "loss"})
    assert results[0] == results[1]
    assert results[0]["gradients"] == results[0]["parameters"]


# --------------------------------------------------------------------------- allocator cross-check

class _SampledBackend:
    """An MPS-like backend without a peak counter: current memory rises by 1 KiB per reading."""
    name = "mps"

    def __init__(self):
        self.readings = 0

    def synchronize(self):
        pass

    def reset_peak(self):
        return False

    def memory_current(self):
        self.readings += 1
        return self.readings * 1024

    def memory_driver(self):
        return 10 * MiB


def test_without_a_peak_counter_the_allocator_is_sampled_at_module_boundaries():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    backend = _SampledBackend()
    with measure.allocator_peak(backend, model) as cross:
        model(torch.randn(2, 4))
    # one reading before, one per module forward (Sequential + 2 children), one after
    assert "at 5 module boundaries" in cross["allocator_method"]
    assert cross["allocator_peak"] == backend.readings * 1024
    assert cross["allocator_driver_peak"] == 10 * MiB
    assert not model._forward_hooks and not model[0]._forward_hooks


# --------------------------------------------------------------------------- verdicts

@pytest.mark.parametrize("low, high, bound, verdict", [
    (0.5, 0.7, Bound(LOWER, 0.769), "holds"),
    (0.7, 0.8, Bound(LOWER, 0.769), "inconclusive"),
    (0.9, 1.1, Bound(LOWER, 0.769), "does-not-hold"),
    (1.0, 1.04, Bound(NOT_HIGHER, 1.05), "holds"),
    (1.06, 1.2, Bound(NOT_HIGHER, 1.05), "does-not-hold"),
    (1.0, 1.0, Bound(NOT_HIGHER, 1.0), "holds"),      # at most the bound: equal holds
    (1.0, 1.0, Bound(LOWER, 1.0), "does-not-hold"),   # strictly below: equal is no reduction
])
def test_judge_needs_the_whole_interval_on_one_side(low, high, bound, verdict):
    assert ratios.judge(low, high, bound) == verdict
    assert verdict in Category.CLAIM_VERDICTS


@pytest.mark.parametrize("low, high, bound, verdict", [
    (0.90, 0.94, Bound(NOT_HIGHER, 1.0), "holds"),           # clears 1/1.05 = 0.952
    (0.93, 0.97, Bound(NOT_HIGHER, 1.0), "inconclusive"),    # below the bound, not by the zone
    (1.03, 1.07, Bound(NOT_HIGHER, 1.0), "inconclusive"),    # above the bound, not by the zone
    (1.06, 1.10, Bound(NOT_HIGHER, 1.0), "does-not-hold"),   # clears 1.05
    (0.60, 0.70, Bound(LOWER, 0.8), "holds"),                # clears 0.8 / 1.05 = 0.762
    (0.77, 0.79, Bound(LOWER, 0.8), "inconclusive"),
    (0.85, 0.90, Bound(LOWER, 0.8), "does-not-hold"),        # above 0.8 * 1.05 = 0.84
])
def test_the_zone_withholds_a_verdict_near_the_bound(low, high, bound, verdict):
    assert ratios.judge(low, high, bound, zone=0.05) == verdict


def test_drift_within_the_zone_never_flips_a_verdict():
    # torch.compile on the VM: three reruns, each interval on its own side of the bound 1.0
    runs = [(0.94, 0.99), (0.97, 1.04), (1.03, 1.07)]
    without = {ratios.judge(lo, hi, Bound(NOT_HIGHER, 1.0)) for lo, hi in runs}
    assert without == {"holds", "inconclusive", "does-not-hold"}     # the flip the zone exists for
    with_zone = {ratios.judge(lo, hi, Bound(NOT_HIGHER, 1.0), zone=ratios.TIME_ZONE) for lo, hi in runs}
    assert with_zone == {"inconclusive"}
    with pytest.raises(ValueError):
        ratios.judge(1.0, 1.0, Bound(NOT_HIGHER, 1.0), zone=-0.1)
    with pytest.raises(ValueError, match="unknown bound"):
        ratios.judge(1.0, 1.0, Bound("higher", 1.0))


def test_memory_claims_are_judged_directly():
    assert ratios.compare_memory(1000, 500, Bound(LOWER, 1 / 1.5))["category"] == "holds"
    assert ratios.compare_memory(1000, 900, Bound(LOWER, 1 / 1.5))["category"] == "does-not-hold"
    assert ratios.compare_memory(1000, 1040, Bound(NOT_HIGHER, 1.05))["category"] == "holds"
    assert ratios.compare_memory(1000, 1000, Bound(NOT_HIGHER, 1.0))["category"] == "holds"
    assert ratios.compare_memory(1000, 1000, Bound(LOWER, 1.0))["category"] == "does-not-hold"  # strict


def test_the_bootstrap_is_seeded():
    a = [1.0, 1.2, 0.9, 1.1, 1.05, 0.95]
    b = [0.5, 0.7, 0.6, 0.55, 0.65, 0.52]
    first = timing.bootstrap_ratio_ci(a, b, seed=3)
    assert timing.bootstrap_ratio_ci(a, b, seed=3) == first
    assert first[0] < 0.6 < first[1]


# --------------------------------------------------------------------------- timing: the decision, on a fake clock

class FakeClock:
    """A stopwatch that moves only when a workload says it took time.

    compare_time reads each call's seconds through harness.env.timing's ``timed`` and its budget
    through ``time.perf_counter``; the ``fake_clock`` fixture points both at this clock. So the
    decision (which side is faster, how rounds are booked, when more are bought, when the budget
    is spent) is tested on durations the test chose: a busy machine cannot change a verdict, and
    a broken decision still fails."""

    def __init__(self):
        self.now = 0.0
        self.log: list[str] = []   # which workload ran, in order

    def perf_counter(self) -> float:
        return self.now

    def work(self, name: str, *seconds: float):
        """A workload whose successive calls take ``seconds[0]``, ``seconds[1]``, ... (cycling)."""
        costs = itertools.cycle(seconds)

        def run():
            self.log.append(name)
            self.now += next(costs)
        return run


@pytest.fixture
def fake_clock(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing, "time", clock)   # timed(): each call's seconds
    monkeypatch.setattr(ratios, "time", clock)   # compare_time: the budget
    return clock


FASTER = Bound(LOWER, 1 / 1.3)


def test_a_clearly_faster_variant_holds(fake_clock):
    base = fake_clock.work("a", 0.0080, 0.0082, 0.0079)
    variant = fake_clock.work("b", 0.0020, 0.0021, 0.0019)
    result = ratios.compare_time(base, variant, FASTER, rounds=10, budget_s=5)
    assert result["category"] == "holds", result["reason"]
    assert result["rounds"] == 10                         # decided on the first rounds: none bought
    assert result["time_ratio"] == pytest.approx(0.25, rel=0.05)
    assert result["ci_high"] < FASTER.limit / (1 + ratios.TIME_ZONE)
    assert result["seconds"] == round(fake_clock.now, 3)  # warm-up and rounds, as the clock saw them


def test_a_clearly_slower_variant_does_not_hold(fake_clock):
    base = fake_clock.work("a", 0.0020, 0.0021, 0.0019)
    variant = fake_clock.work("b", 0.0080, 0.0082, 0.0079)
    result = ratios.compare_time(base, variant, FASTER, rounds=10, budget_s=5)
    assert result["category"] == "does-not-hold", result["reason"]
    assert result["time_ratio"] == pytest.approx(4.0, rel=0.05)
    assert result["ci_low"] > FASTER.limit * (1 + ratios.TIME_ZONE)


def test_rounds_alternate_and_each_side_keeps_its_own_durations(fake_clock):
    """A B, B A, A B ...: each round's two durations are booked to the side that ran, whichever
    ran first (a swap would mix 3 s and 1 s on both sides and turn the verdict)."""
    base, variant = fake_clock.work("a", 3.0), fake_clock.work("b", 1.0)
    result = ratios.compare_time(base, variant, Bound(LOWER, 0.5), warmup=1, rounds=4, budget_s=0)
    assert fake_clock.log == ["a", "b"] + ["a", "b", "b", "a"] * 2
    assert result["durations_a"] == [3.0] * 4 and result["durations_b"] == [1.0] * 4
    assert (result["median_a_s"], result["median_b_s"]) == (3.0, 1.0) and result["category"] == "holds"


def test_warm_up_calls_run_first_and_stay_out_of_the_figures(fake_clock):
    compiled = fake_clock.work("a", 100.0, 100.0, *[1.0] * 50)   # two first calls that compile
    variant = fake_clock.work("b", 0.5)
    result = ratios.compare_time(compiled, variant, Bound(LOWER, 0.8), warmup=2, rounds=6, budget_s=0)
    assert result["durations_a"] == [1.0] * 6 and result["category"] == "holds", result["reason"]
    assert result["seconds"] == round(fake_clock.now, 3) and fake_clock.now == 200.0 + 1.0 + 6 * 1.5


# The same work on both sides, spread so unevenly over rounds that few rounds cannot tell them apart.
UNEVEN_A, UNEVEN_B = (1.0, 12.0, 2.0, 10.0), (12.0, 1.0, 10.0, 2.0)


def test_identical_workloads_with_a_tight_claim_and_a_tiny_budget_are_inconclusive(fake_clock):
    run_a, run_b = fake_clock.work("a", *UNEVEN_A), fake_clock.work("b", *UNEVEN_B)
    result = ratios.compare_time(run_a, run_b, Bound(NOT_HIGHER, 1.0), warmup=0, rounds=4, budget_s=0)
    assert result["category"] == "inconclusive", result["reason"]
    assert result["rounds"] == 4 and "time budget of 0 s could not pay for another round" in result["reason"]
    assert result["ci_low"] < 1.0 < result["ci_high"] and result["time_ratio"] == 1.0
    assert result["durations_a"] == list(UNEVEN_A) and result["durations_b"] == list(UNEVEN_B)


def test_inconclusive_buys_more_rounds_until_the_limit_and_stays_inconclusive(fake_clock):
    run_a, run_b = fake_clock.work("a", *UNEVEN_A), fake_clock.work("b", *UNEVEN_B)
    result = ratios.compare_time(run_a, run_b, Bound(NOT_HIGHER, 1.0), warmup=0, rounds=4, budget_s=10_000,
                                 max_rounds=16)
    assert result["rounds"] == 16
    assert result["category"] == "inconclusive" and "16 rounds reached" in result["reason"]


def test_the_budget_stops_the_buying_of_rounds(fake_clock):
    """4 rounds cost 50 s of a 100 s budget, so 4 more are bought (doubling), which spend it,
    and the verdict stays inconclusive, saying the budget ran out rather than the rounds."""
    run_a, run_b = fake_clock.work("a", *UNEVEN_A), fake_clock.work("b", *UNEVEN_B)
    result = ratios.compare_time(run_a, run_b, Bound(NOT_HIGHER, 1.0), warmup=0, rounds=4, budget_s=100)
    assert result["rounds"] == 8 and fake_clock.now == 100.0
    assert result["category"] == "inconclusive" and result["stopped"] == ratios.BUDGET
    assert "time budget of 100 s could not pay for another round" in result["reason"]


@pytest.mark.parametrize("budget, rounds, spent", [(60, 4, 50.0), (90, 7, 88.0), (62.5, 5, 63.0)])
def test_a_doubling_buys_only_the_rounds_the_budget_left_pays_for(fake_clock, budget, rounds, spent):
    """The rounds double, but never past what is left of the budget at the rounds' mean cost
    (12.5 s here, both sides): 4 rounds cost 50 s, so a 60 s budget buys none more (a doubling
    used to spend 100 s of it), a 90 s budget 3 (88 s), a 62.5 s budget the one that its mean
    pays for."""
    run_a, run_b = fake_clock.work("a", *UNEVEN_A), fake_clock.work("b", *UNEVEN_B)
    result = ratios.compare_time(run_a, run_b, Bound(NOT_HIGHER, 1.0), warmup=0, rounds=4, budget_s=budget)
    assert (result["rounds"], fake_clock.now, result["stopped"]) == (rounds, spent, ratios.BUDGET)
    assert result["category"] == "inconclusive"


@pytest.mark.parametrize("done, spent, budget, round_s, most, expected", [
    (6, 52.0, 120.0, 6.5, 400, 6),      # 68 s left pay for 10: the doubling's 6
    (12, 91.0, 120.0, 6.5, 400, 4),     # 29 s left pay for 4, not the doubling's 12
    (12, 115.0, 120.0, 6.5, 400, 0),    # not one
    (12, 130.0, 120.0, 6.5, 400, 0),    # overspent already
    (300, 0.0, 1e9, 1.0, 400, 100),     # max_rounds in all
    (4, 0.0, 0.0, 0.0, 400, 4),         # rounds that cost nothing: the budget does not limit them
])
def test_rounds_to_buy(done, spent, budget, round_s, most, expected):
    assert ratios.rounds_to_buy(done, spent, budget, round_s, most) == expected


@pytest.mark.parametrize("bound, low, high, inside", [
    (Bound(LOWER, 1.0), 0.96, 1.04, True),          # neither end can ever clear the zone: no verdict
    (Bound(LOWER, 1.0), 1 / 1.05, 1.04, True),      # holds needs an end strictly below 1 / 1.05
    (Bound(LOWER, 1.0), 0.95, 1.04, False),         # the low end is below the zone: it may yet hold
    (Bound(LOWER, 1.0), 0.96, 1.05, False),         # the high end reaches the zone's top: it may yet not hold
    (Bound(NOT_HIGHER, 2.0), 1.95, 2.05, True),
    (Bound(NOT_HIGHER, 2.0), 2.0 / 1.05, 2.05, False),   # at most: an end on the zone's floor holds
    (Bound(NOT_HIGHER, 2.0), 1.95, 2.1, True),           # ... and one on its top still does not exceed it
    (Bound(NOT_HIGHER, 2.0), 1.95, 2.11, False),
])
def test_an_interval_inside_the_zone_is_undecidable(bound, low, high, inside):
    """More rounds narrow an interval around the ratio it brackets: one wholly inside the
    indifference zone, where ``judge`` gives neither verdict, would stay inside."""
    assert ratios.undecidable(low, high, bound, ratios.TIME_ZONE) is inside
    if inside:
        assert ratios.judge(low, high, bound, ratios.TIME_ZONE) == "inconclusive"
    assert ratios.undecidable(low, high, bound, 0.0) is False   # memory: exact bytes, no zone


# Two sides 1% apart in every round, at uneven speeds: the ratio is exactly 0.99, inside the
# 5% zone around a claim of "lower" (below 1): no number of rounds can decide it.
STEADY_A = (1.0, 1.2, 0.9, 1.1)
STEADY_B = tuple(0.99 * x for x in STEADY_A)


def test_a_ratio_inside_the_zone_stops_buying_rounds_at_once(fake_clock):
    """The budget would buy rounds up to 400; the interval [0.99, 0.99] is inside the zone after
    the first 4, so those are all it runs, and the verdict says why: too close to call."""
    run_a, run_b = fake_clock.work("a", *STEADY_A), fake_clock.work("b", *STEADY_B)
    result = ratios.compare_time(run_a, run_b, Bound(LOWER, 1.0), warmup=0, rounds=4, budget_s=10_000)
    assert result["category"] == "inconclusive" and result["stopped"] == ratios.IN_ZONE
    assert result["rounds"] == 4 and len(fake_clock.log) == 8
    assert "inside the 5% zone around the bound" in result["reason"]
    assert result["ci_low"] == pytest.approx(0.99) and result["ci_high"] == pytest.approx(0.99)


def test_the_zone_rule_does_not_stop_a_ratio_just_outside_it(fake_clock):
    """Control: 6% apart is outside the 5% zone, and decided (holds) on the same first rounds;
    and the uneven pair, whose interval reaches beyond the zone, still buys rounds to its budget."""
    run_a, run_b = fake_clock.work("a", *STEADY_A), fake_clock.work("b", *(0.94 * x for x in STEADY_A))
    result = ratios.compare_time(run_a, run_b, Bound(LOWER, 1.0), warmup=0, rounds=4, budget_s=10_000)
    assert (result["category"], result["stopped"], result["rounds"]) == ("holds", ratios.DECIDED, 4)
    run_a, run_b = fake_clock.work("a", *UNEVEN_A), fake_clock.work("b", *UNEVEN_B)
    result = ratios.compare_time(run_a, run_b, Bound(NOT_HIGHER, 1.0), warmup=0, rounds=4, budget_s=100)
    assert (result["category"], result["stopped"], result["rounds"]) == ("inconclusive", ratios.BUDGET, 8)


def test_a_family_pair_inside_the_zone_stops_while_an_undecided_one_buys_rounds(fake_clock):
    """In a family, the pair 1% apart stops on the first rounds (too close to call); only the
    uneven pair's sides run the rounds bought after them."""
    runs = _family(fake_clock, base=STEADY_A, close=STEADY_B, a=UNEVEN_A, b=UNEVEN_B)
    pairs = {"close": ratios.Pair("base", "close", Bound(LOWER, 1.0)),
             "tight": ratios.Pair("a", "b", Bound(NOT_HIGHER, 1.0))}
    found = ratios.compare_family(runs, pairs, warmup=1, rounds=4, budget_s=100)
    close, tight = found["pairs"]["close"], found["pairs"]["tight"]
    assert (close["rounds"], close["category"], close["stopped"]) == (4, "inconclusive", ratios.IN_ZONE)
    assert "inside the 5% zone" in close["reason"]
    assert tight["stopped"] == ratios.BUDGET and tight["rounds"] > 4
    assert set(fake_clock.log[4 + 4 * 4:]) == {"a", "b"}   # after warm-up and the first rounds
    assert {side: [round(x, 9) for x in s] for side, s in found["warmup_s"].items()} == {
        "base": [1.0], "close": [0.99], "a": [1.0], "b": [12.0]}


@pytest.mark.parametrize("a, b, rounds", [(0.9, 1.0, 10), (1.2, 1.6, 6), (1.5, 1.5, 6)])
def test_a_long_step_starts_with_fewer_rounds(fake_clock, a, b, rounds):
    """A first round of LONG_ROUND_S (2 s) or more starts with LONG_ROUNDS rounds, not the
    workload's count; a shorter one keeps it. The verdict is the interval's, as before."""
    run_a, run_b = fake_clock.work("a", a), fake_clock.work("b", b / 2)
    result = ratios.compare_time(run_a, run_b, Bound(LOWER, 0.8), warmup=1, rounds=10, budget_s=0)
    assert result["rounds"] == rounds and result["category"] == "holds", result["reason"]


# --------------------------------------------------------------------------- timing: a family of sides

def _family(clock, **costs):
    return {name: clock.work(name, *seconds) for name, seconds in costs.items()}


def test_a_family_runs_every_side_once_a_round_reversing_the_order_and_books_each_its_own(fake_clock):
    """Three sides, each once per round, the order reversed every other round (every two sides
    swap places, as A B, B A does for two); each pair's durations are its sides' own, from the
    same rounds, so a side two claims share is timed once for both."""
    runs = _family(fake_clock, base=(4.0,), ga=(2.0,), ck=(3.0,))
    pairs = {"ga": ratios.Pair("base", "ga", Bound(LOWER, 0.8)), "ck": ratios.Pair("ga", "ck", Bound(NOT_HIGHER, 2.0))}
    found = ratios.compare_family(runs, pairs, warmup=1, rounds=4, budget_s=0)
    assert fake_clock.log == ["base", "ga", "ck"] + ["base", "ga", "ck", "ck", "ga", "base"] * 2
    ga, ck = found["pairs"]["ga"], found["pairs"]["ck"]
    assert ga["durations_a"] == [4.0] * 4 and ga["durations_b"] == ck["durations_a"] == [2.0] * 4
    assert (ga["time_ratio"], ga["category"]) == (0.5, "holds") and (ck["time_ratio"], ck["category"]) == (1.5, "holds")
    assert found["rounds"] == 4 and "the same rounds as 1 other side(s)" in ga["reason"]


def test_only_the_undecided_pairs_sides_buy_rounds_and_a_pair_that_does_not_drive_buys_none(fake_clock):
    """The clear pair is decided on the first rounds and keeps their figures; the pair that
    cannot tell buys rounds for its own two sides alone, until they have spent its budget (the
    other sides' seconds are not its own); a pair that
    does not drive (seed 003's rows against the seed) is read from every round its sides ran in."""
    runs = _family(fake_clock, base=(20.0,), fast=(5.0,), a=UNEVEN_A, b=UNEVEN_B)   # the clear pair: 100 s
    pairs = {"clear": ratios.Pair("base", "fast", Bound(LOWER, 0.8)),
             "tight": ratios.Pair("a", "b", Bound(NOT_HIGHER, 1.0)),
             "shown": ratios.Pair("base", "a", Bound(NOT_HIGHER, 1.0), drives=False)}
    found = ratios.compare_family(runs, pairs, warmup=0, rounds=4, budget_s=100)
    clear, tight, shown = (found["pairs"][n] for n in ("clear", "tight", "shown"))
    assert clear["rounds"] == 4 and clear["category"] == "holds"
    assert tight["rounds"] == 8 and tight["category"] == "inconclusive" and "budget of 100 s could not pay" in tight["reason"]
    assert fake_clock.log[4 * 4:] == ["a", "b", "b", "a"] * 2   # the bought rounds: the undecided pair's sides
    assert shown["rounds"] == 4 and "budget" not in shown["reason"]


def test_no_family_pair_overspends_its_budget_on_rounds_another_pair_buys(fake_clock):
    """Two undecided pairs, rounds of 12.5 s and 1.25 s, each with a 70 s budget: after the
    first 4 rounds the dear pair has 20 s left, one round's worth, so one round is bought for
    both (the fewest either pays for); then it stops, and the cheap pair alone buys on until
    its own 70 s are spent. Doubling to 8 rounds would have spent 100 s of the dear pair's 70."""
    cheap_a, cheap_b = (0.1 * x for x in UNEVEN_A), (0.1 * x for x in UNEVEN_B)
    runs = _family(fake_clock, a=UNEVEN_A, b=UNEVEN_B, c=tuple(cheap_a), d=tuple(cheap_b))
    pairs = {"dear": ratios.Pair("a", "b", Bound(NOT_HIGHER, 1.0)), "cheap": ratios.Pair("c", "d", Bound(NOT_HIGHER, 1.0))}
    found = ratios.compare_family(runs, pairs, warmup=0, rounds=4, budget_s=70)
    dear, cheap = found["pairs"]["dear"], found["pairs"]["cheap"]
    assert (dear["rounds"], dear["seconds"], dear["stopped"]) == (5, 63.0, ratios.BUDGET)
    assert (cheap["rounds"], cheap["stopped"]) == (55, ratios.BUDGET)   # 68.75 s; doubling: 80 rounds, 100 s
    assert "a" not in fake_clock.log[5 * 4:] and "b" not in fake_clock.log[5 * 4:]


def test_a_family_whose_round_is_long_starts_with_fewer_rounds_though_one_pair_is_short(fake_clock):
    """The rounds a family starts with follow what one round costs, every side once (seed 003's
    path on an H100: 0.19 s, 1.9 s, 4.1 s ... a round of about 15 s), not its shortest pair: a
    short pair that the first rounds leave undecided buys rounds for its own two sides alone."""
    runs = _family(fake_clock, base=(0.1,), ga=(1.5,), ck=(3.5,))   # the base-ga pair's round: 1.6 s
    pairs = {"ga": ratios.Pair("base", "ga", Bound(NOT_HIGHER, 20.0)), "ck": ratios.Pair("ga", "ck", Bound(NOT_HIGHER, 3.0))}
    found = ratios.compare_family(runs, pairs, warmup=1, rounds=10, budget_s=0)
    assert found["rounds"] == ratios.LONG_ROUNDS == 6
    assert all(p["category"] == "holds" and p["rounds"] == 6 for p in found["pairs"].values())
    short = ratios.compare_family(_family(fake_clock, base=(0.1,), ga=(1.5,)), {"ga": pairs["ga"]}, warmup=1, rounds=10,
                                  budget_s=0)
    assert short["rounds"] == 10   # the same pair alone: a round of 1.6 s keeps the workload's count


def test_a_family_pair_must_name_two_of_its_sides():
    with pytest.raises(ValueError, match="needs two of the sides"):
        ratios.compare_family({"a": lambda: None}, {"p": ratios.Pair("a", "z", Bound(LOWER, 0.5))})


# --------------------------------------------------------------------------- timing: the real clock

_M = torch.randn(256, 256)


def _matmuls(n):
    def run():
        for _ in range(n):
            _M @ _M
    return run


@pytest.mark.parametrize("faster", [True, False], ids=["faster-variant", "slower-variant"])
def test_on_the_real_clock_a_verdict_never_points_the_wrong_way(faster):
    """Real matmuls, four times the work on one side: on a busy machine the honest answer may
    be inconclusive, so that is accepted; a verdict the other way never is, and a verdict
    given must follow from the medians it was judged on. (The decision itself is tested on
    the fake clock above.)"""
    light, heavy = _matmuls(2), _matmuls(8)
    result = ratios.compare_time(heavy, light, FASTER, rounds=10, budget_s=5) if faster else \
        ratios.compare_time(light, heavy, FASTER, rounds=10, budget_s=5)
    right = "holds" if faster else "does-not-hold"
    assert result["category"] in {right, "inconclusive"}, result["reason"]
    assert len(result["durations_a"]) == len(result["durations_b"]) == result["rounds"] >= 10
    assert all(d > 0 for d in result["durations_a"] + result["durations_b"])
    if result["category"] == "holds":
        assert result["median_b_s"] < result["median_a_s"]
        assert result["ci_high"] < FASTER.limit / (1 + result["zone"])
    elif result["category"] == "does-not-hold":
        assert result["median_b_s"] > result["median_a_s"]
        assert result["ci_low"] > FASTER.limit * (1 + result["zone"])


def test_sync_is_called_around_every_timed_call():
    """Warm-up calls included: their seconds are kept (a compile's, a cold start's)."""
    calls = []
    result = ratios.compare_time(lambda: None, lambda: None, Bound(NOT_HIGHER, 2.0), sync=lambda: calls.append(1),
                                 warmup=1, rounds=4, budget_s=0)
    assert len(calls) == (1 + 4) * 2 * 2
    assert len(result["warmup_a_s"]) == len(result["warmup_b_s"]) == 1
