"""Self-tests for the faults a mutation review of the suite's own judges found no test failing on
(30 mutations applied one at a time; these five survived): each test here fails on its mutant."""
import pytest
import torch

from harness.core.records import Category, Status
from harness.parity.numerics import accuracy, tolerances as T
from harness.report import compare, verdict
from tests.test_compare import rec, write_run
from tools import compare as compare_cli


@pytest.mark.parametrize("bad", sorted(Status.BAD))
def test_a_check_skipped_in_the_baseline_that_now_fails_regresses(tmp_path, bad):
    """Without the skip -> fail rule, a candidate whose newly running check crashed (an op
    MPS now claims a kernel for, and that kernel segfaults) compared "0 regressions", exit 0."""
    a = rec("ops/softmax/float16/forward", "skip", target="mps", reason="no kernel")
    b = rec("ops/softmax/float16/forward", bad, target="mps", reason="boom")
    assert compare.compare_records(a, b) == [("regression", "status", f"ran for the first time and {bad}: boom")]
    keep = rec("env/threads")
    base = write_run(tmp_path / "base.jsonl", [a, keep])
    cand = write_run(tmp_path / "cand.jsonl", [b, keep], env_id="host-a-torch2.10", torch_version="2.10.0")
    assert compare_cli.main([str(base), str(cand)]) == 1


@pytest.mark.parametrize("bad", [Status.ERROR, Status.CRASH, Status.TIMEOUT])
def test_an_environment_check_that_crashed_errs_or_hung_makes_the_machine_not_fit(bad):
    """Only a failed environment check made the machine "not fit": one whose child died read
    "fit for cuda: 7 checks pass"."""
    recs = [rec("env/device-available", bad, target="cuda", reason="the sandbox child died (signal 11)"),
            rec("env/threads", target="cuda")]
    aspect = verdict._environment(recs, "cuda")
    assert aspect.state == verdict.BAD and aspect.line.startswith("not fit for cuda: "), aspect
    assert "fit for cuda: " not in aspect.line.removeprefix("not fit for cuda: ")


def test_unsupported_ops_alone_are_a_warning_not_a_clean_ops_aspect():
    """An op MPS cannot run at all (unsupported: NotImplementedError with the fallback off) beside
    native ones left the ops aspect "good" in the mutant, while its line said "1 unsupported"."""
    recs = [rec("ops/add/float32/forward", target="mps", category=Category.NATIVE, suite="ops"),
            rec("ops/nonzero/float32/forward", "xfail", target="mps", category=Category.UNSUPPORTED)]
    for r in recs:
        r["suite"] = "ops"
    aspect = verdict._ops(recs, "mps")
    assert "1 unsupported" in aspect.line and aspect.state == verdict.WARN, aspect


def _up(x: torch.Tensor, units: int) -> torch.Tensor:
    """float16 values in [0.5, 1) moved ``units`` units in the last place (2**-11 there)."""
    return torch.tensor([float(v) + units * 2 ** -11 for v in x.tolist()], dtype=torch.float16)


def test_the_accuracy_factor_is_two_times_the_cpus_own_error_not_more():
    """Every test read T.ACCURACY_FACTOR rather than a number, so doubling it changed no test:
    a target 3x as far from float64 as the CPU (48 units against 16) would pass with a factor 4.
    The numbers here are written out: the CPU 16 units off, the target 24 passes, 48 fails."""
    assert T.ACCURACY_FACTOR == 2.0 and T.ACCURACY_ULPS == 2.0
    ref = torch.linspace(0.5, 0.9, 64, dtype=torch.float64)
    exact = ref.to(torch.float16)
    tol = T.tolerance("add", "float16")

    def judged(units):
        return accuracy.compare_accuracy(_up(exact, units), _up(exact, 16), ref, tol, torch.float16,
                                         T.ACCURACY_FACTOR, T.ACCURACY_ULPS, normwise=False)
    assert judged(24)["ok"]
    far = judged(48)
    assert not far["ok"] and "the CPU's own error" in far["reason"], far


def test_dynamic_padding_pads_each_micro_batch_to_its_longest_sentence():
    """Its claim is "not higher", so a dynamic padding that did nothing (every batch padded to
    seq) held at 1.0 as before: no measured figure could tell. What it does is asserted here."""
    from harness.optim.workloads import Setup, make_batches
    setup = Setup(model="tiny", batch=4, seq=32, dynamic_padding=True)
    batches = make_batches(setup, 8, "cpu")
    widths = [b["input_ids"].shape[1] for b in batches]
    assert widths == [int(b["attention_mask"].sum(1).max()) for b in batches]
    assert min(widths) < 32
    assert {b["input_ids"].shape[1] for b in make_batches(setup.but(dynamic_padding=False), 8, "cpu")} == {32}
