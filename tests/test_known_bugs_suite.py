"""The known-bugs suite: every case is sourced and sized as it says, fails on a stand-in
that reproduces its report, passes on the CPU and on devices that merely round
differently, and its sizes follow the device's memory."""
import pytest
import torch

from harness.env import devices
from harness.parity.known_bugs import cases as known_bugs, target as bug_target
from harness.parity.known_bugs import check as bug_check
from harness.parity.known_bugs.cases import CASES
from harness.parity.numerics import tolerances
from tests import reported_bugs, standins
from tests.conftest import run_suite

NAMES = [c.name for c in CASES]
# The reports whose wrong result shows as other bits on a rerun: the allocator-state
# matmul (#193487) and the reductions wrong in rapid succession (#178497).
UNREPEATABLE = {"gram-matmul-k50000"} | {c.name for c in CASES if c.rapid}


@pytest.fixture
def reproduce(monkeypatch):
    """Reproduce only the named reports on standin-known-bugs, from a fresh state."""
    def select(names: str):
        monkeypatch.setenv(reported_bugs.VAR, names)
        stand_in = devices.stand_in("standin-known-bugs")
        monkeypatch.setattr(stand_in, "dirty", False)
        monkeypatch.setattr(stand_in, "calls", {})
    return select


# --------------------------------------------------------------------------- the table

@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_each_case_names_its_source_and_its_edge(case):
    s = case.source
    assert s.issue > 0 and s.url == f"https://github.com/pytorch/pytorch/issues/{s.issue}"
    assert s.title and s.affected and s.confirmed and case.what
    assert case.sizes[0].name in ("edge", "small", "reported")
    assert case.name in reported_bugs.REPRODUCTIONS, "every case needs a stand-in that reproduces its report"
    sizes = [sum(case.footprint(s.dims)) for s in case.sizes]
    assert sizes == sorted(sizes), "sizes go from the cheapest to the reported shape"


@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_the_footprint_counts_the_real_inputs_and_output_at_the_first_size(case):
    """The largest sample's elements: samples run one after the other."""
    counts = []
    for sample in case.make(case.sizes[0].dims):
        inputs = sum(t.numel() for t in sample.values() if isinstance(t, torch.Tensor))
        out = case.fn(**{k: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
                         for k, v in sample.items()})
        counts.append((inputs, out.numel()))
    assert case.footprint(case.sizes[0].dims) == max(counts)


def test_the_edges_are_the_reported_ones():
    """The edge sizes cross the reported edge itself, not a side far past it."""
    dims = {c.name: c.sizes[0].dims for c in CASES}
    assert dims["batched-matmul-n32769"]["n"] == 2**15 + 1
    assert dims["linear-out-features-32769"]["out"] == 2**15 + 1
    assert dims["bmm-k32767"]["k"] == 2**15 - 1
    assert dims["gram-matmul-k50000"]["k"] == 2**15 + 1
    assert dims["linear-batch-65537"]["batch"] == 2**16 + 1
    assert dims["conv1d-65537-channels"]["channels"] == 2**16 + 1


def test_check_ids_are_stable():
    ids = {f"parity/{c.subject}/{c.variant}" for c in known_bugs.checks("known-bug") + known_bugs.checks("repeatable")}
    assert "parity/batched-matmul-n32769/float32/known-bug" in ids
    assert "parity/sum-rapid/float32/repeatable" in ids
    assert len(ids) == 2 * len(CASES)


# --------------------------------------------------------------------------- sizes by memory

def _reading(device_gib: float, host_gib: float):
    return lambda where: (int((host_gib if where == "host" else device_gib) * 2**30), f"{where} reading")


def test_the_cpu_and_stand_ins_run_the_first_size_whatever_the_memory():
    case = known_bugs.by_name("batched-matmul-n32769")
    for target in ("cpu", "standin-oracle"):
        size, why = bug_target.choose_size(case, target, "float32", _reading(1000, 1000))
        assert size.name == "edge" and "edge" in why


@pytest.mark.parametrize("device_gib, host_gib, expected", [
    (80, 128, "large"),     # an H100: the reported (911, 9, 1) @ (1, 32769) has too many outputs to judge
    (10.7, 16, "large"),    # a 16 GB Mac: 113 batches fit a quarter of both readings
    (0.05, 16, "edge"),     # almost no device memory
    (80, 0.5, "edge"),      # almost no host memory for the CPU side and the float64 reference
])
def test_an_accelerator_runs_the_largest_size_its_memory_allows(device_gib, host_gib, expected):
    case = known_bugs.by_name("batched-matmul-n32769")
    size, why = bug_target.choose_size(case, "cuda", "float32", _reading(device_gib, host_gib))
    assert size.name == expected, why
    assert case.footprint(size.dims)[1] <= bug_target.JUDGED_MAX


def test_the_reported_size_runs_where_its_output_is_small_enough_to_judge():
    case = known_bugs.by_name("gram-matmul-k50000")
    size, why = bug_target.choose_size(case, "mps", "float32", _reading(10.7, 16))
    assert size.name == "reported" and "device" in why and "host" in why


# --------------------------------------------------------------------------- judged on stand-ins

@pytest.mark.parametrize("name", NAMES)
def test_each_case_fails_on_a_stand_in_that_reproduces_its_report(name, reproduce):
    reproduce(name)
    verdict = bug_check.judge(bug_check.run_case(name, "standin-known-bugs", "float32"))
    assert verdict.status == "fail", verdict.message
    assert verdict.metrics["issue"] == known_bugs.by_name(name).source.issue
    if verdict.category == "raises":
        assert "raises where the CPU computes" in verdict.message
    else:
        assert verdict.category == "parity" and "shows the bug of pytorch#" in verdict.message
    again = bug_check.judge_repeatability(bug_check.run_repeatability(name, "standin-known-bugs", "float32"))
    if name in UNREPEATABLE:
        assert (again.status, again.category) == ("fail", "unrepeatable"), again.message
        assert again.metrics["differing"] and again.metrics["inaccurate"]   # other bits, and wrong ones


@pytest.mark.parametrize("name", NAMES)
def test_each_case_passes_on_the_stand_in_with_nothing_reproduced(name, reproduce):
    """The stand-in's own path (a dispatch mode, re-uploads, churn, rapid runs) is clean:
    the failures above are the reproductions'."""
    reproduce("none")
    verdict = bug_check.judge(bug_check.run_case(name, "standin-known-bugs", "float32"))
    assert verdict.status == "pass", verdict.message
    again = bug_check.judge_repeatability(bug_check.run_repeatability(name, "standin-known-bugs", "float32"))
    assert again.status == "pass", again.message


def test_the_allocator_case_is_wrong_after_a_dirty_cache_and_right_after_an_emptied_one(reproduce):
    """#193487 as reported: right fresh, wrong after earlier allocations, right again after
    torch.mps.empty_cache(). The known-bug check provokes it; the repeatability check names
    the run that differed."""
    reproduce("gram-matmul-k50000")
    verdict = bug_check.judge(bug_check.run_case("gram-matmul-k50000", "standin-known-bugs", "float32"))
    assert verdict.metrics["run"] == "after a dirty cache"
    # after the churn the freed blocks hold NaN, so the over-read gives NaN where the CPU has numbers:
    # the reported bug, not a precision's NaN ("not the reported bug" and attention's advice, before)
    assert verdict.metrics["non_finite"] == verdict.metrics["off_elements"] > 500, verdict.metrics
    assert verdict.metrics["non_finite_on_cpu"] == 0 and verdict.cause is None
    assert "element(s) NaN or inf where float64" in verdict.message and "(the CPU does not)" in verdict.message
    assert "shows the bug of pytorch#193487" in verdict.message and "off float64 by 0" not in verdict.message
    again = bug_check.run_repeatability("gram-matmul-k50000", "standin-known-bugs", "float32")
    assert again.differing == ["run after a dirty cache"]


def test_nan_the_cpu_gives_too_is_not_the_reported_bug_and_the_devices_own_is():
    """_diagnose on a NaN where float64 has a number: every one the CPU's too (at the same
    elements) is the precision's, named non-finite, so the check says "not the reported bug";
    one the CPU does not give is the device's, so no cause is named and the bug is."""
    import torch

    class Rerun:   # the target's rerun gives the same NaN again: not intermittent
        name = "standin-known-bugs"

        def run(self, case, sample, dt, cpu, rounded):
            return cpu.clone()
    case = known_bugs.by_name("sum-rapid")
    cpu = torch.tensor([1.0, float("nan"), 3.0])
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    tol = tolerances.tolerance(case.op, "float32")
    shared = bug_check._diagnose(case, {}, torch.float32, Rerun(), cpu, ref, ref.float(), tol,
                                 {"non_finite": 1, "non_finite_on_cpu": 1})
    assert shared["cause"] == "non-finite", shared
    own = bug_check._diagnose(case, {}, torch.float32, Rerun(), cpu, ref, ref.float(), tol,
                              {"non_finite": 2, "non_finite_on_cpu": 1})
    assert own == {}, own


def test_an_intermittent_failure_is_not_put_down_to_a_switch(reproduce):
    """A reduction wrong on one call in five passes when rerun: no cause (TF32, precision)
    may explain it away, and the message says it came and went."""
    reproduce("sum-rapid")
    verdict = bug_check.judge(bug_check.run_case("sum-rapid", "standin-known-bugs", "float32"))
    assert verdict.status == "fail" and verdict.metrics.get("intermittent") is True
    assert "cause" not in verdict.metrics and "right when rerun" in verdict.message


class _OnDevice(torch.Tensor):
    """A result still on a GPU or a Mac: torch.equal against a host tensor raises, as CUDA and
    MPS do, until ``.cpu()`` brings it over."""

    def cpu(self, *args, **kwargs):
        return self.as_subclass(torch.Tensor)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.equal and not all(isinstance(a, _OnDevice) for a in args):
            raise RuntimeError("Cannot compare two tensors on different devices. Got: cuda:0 and cpu")
        return super().__torch_function__(func, types, args, kwargs or {})


def test_the_repeatability_check_compares_results_on_the_host(monkeypatch):
    """The first run's result stayed on the device while every rerun was brought to the CPU,
    and torch.equal across devices raises on CUDA and MPS: the repeatable check was a skip,
    "no result to repeat: Cannot compare two tensors on different devices", on every GPU and
    Mac. With the target's results held on a pretend device, it now compares host tensors."""
    with pytest.raises(RuntimeError, match="different devices"):   # the pretend device refuses
        torch.equal(torch.zeros(2), torch.zeros(2).as_subclass(_OnDevice))
    plain = bug_target.Target.run

    def on_device(self, *args, **kwargs):
        return torch.utils._pytree.tree_map(
            lambda x: x.as_subclass(_OnDevice) if isinstance(x, torch.Tensor) else x, plain(self, *args, **kwargs))
    monkeypatch.setattr(bug_target.Target, "run", on_device)
    run = bug_check.run_repeatability("matmul-3x3", "cpu", "float32")
    assert run.raised is None, run.raised
    verdict = bug_check.judge_repeatability(run)
    assert verdict.status == "pass" and run.runs == bug_check.QUICK_REPEATS + len(bug_target.CHURNS), verdict.message


def test_the_reproduction_selector_refuses_an_unknown_case(monkeypatch):
    monkeypatch.setenv(reported_bugs.VAR, "no-such-case")
    with pytest.raises(KeyError, match="no-such-case"):
        reported_bugs.selected()


def test_the_stand_in_is_registered_for_the_parity_suite_only():
    stand_in = devices.stand_in("standin-known-bugs")
    assert isinstance(stand_in, standins.KnownBugs) and stand_in.suites == ("parity",)


# --------------------------------------------------------------------------- the suite, end to end

@pytest.mark.slow(seconds=45)
def test_the_suite_passes_on_the_cpu_and_a_tf32_device_and_finds_what_is_reproduced(tmp_path):
    """Through pytest, xdist and the sandbox children: the cpu target and a TF32 device
    (whose rounding the suite turns off) pass every check; with three reports reproduced
    (the selection reaches the children through the environment) exactly those cases
    fail, each for its own reason."""
    picked = ("matmul-3x3", "gram-matmul-k50000", "conv1d-65537-channels")
    res, records = run_suite(tmp_path, "suites/parity/test_known_bugs.py", "parity", "-p", "tests.standins",
                             "--device", "cpu,standin-tf32,standin-known-bugs", "-n", "2",
                             env={reported_bugs.VAR: ",".join(picked)})
    assert records, res.stdout[-2000:]
    by = {(r["check"], r["target"]): r for r in records}
    assert len(by) == 3 * 2 * len(CASES)
    for (check, target), r in by.items():
        case = check.split("/")[1]
        bad = target == "standin-known-bugs" and case in picked and (
            check.endswith("known-bug") or case in UNREPEATABLE or case == "conv1d-65537-channels")
        if not bad:
            assert r["status"] == "pass", (check, target, r["reason"])
            continue
        assert r["status"] in ("fail", "skip"), (check, target, r["reason"])
    assert by[("parity/conv1d-65537-channels/float32/known-bug", "standin-known-bugs")]["category"] == "raises"
    assert by[("parity/matmul-3x3/float32/known-bug", "standin-known-bugs")]["category"] == "parity"
    assert by[("parity/gram-matmul-k50000/float32/repeatable", "standin-known-bugs")]["category"] == "unrepeatable"
    assert by[("parity/conv1d-65537-channels/float32/repeatable", "standin-known-bugs")]["status"] == "skip"
    assert res.returncode == 1


@pytest.mark.parametrize("name", ["sum-rapid", "matmul-3x3", "gram-matmul-k50000"])
def test_other_bits_as_accurate_as_the_first_are_nondeterminism_not_the_reported_bug(name):
    """standin-atomic adds up in a new order on every call: the repeatable check failed it as
    "unrepeatable ... as in pytorch#85406" over a unit in the last place, where every run was
    as right as the CPU's. The reruns are now judged against float64 as the known-bug check
    judges runs: as accurate, they pass, said nondeterministic; the known-bug check passes."""
    from tests import standins  # noqa: F401  registers the stand-ins
    again = bug_check.judge_repeatability(bug_check.run_repeatability(name, "standin-atomic", "float32"))
    assert again.status == "pass" and again.metrics["nondeterministic"] and again.metrics["differing"], again.message
    assert "as accurate against float64" in again.message and "torch.use_deterministic_algorithms(True)" in again.message
    assert bug_check.judge(bug_check.run_case(name, "standin-atomic", "float32")).status == "pass"
    same = bug_check.judge_repeatability(bug_check.run_repeatability(name, "standin-reorder", "float32"))
    assert same.status == "pass" and "nondeterministic" not in same.metrics   # one fixed order: the same bits
