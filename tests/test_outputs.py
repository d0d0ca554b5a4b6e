"""Outputs judged by what they mean (harness.parity.numerics.outputs): ties in index outputs and their
gradients, results defined up to a choice (an LU's pivots, unique's order); and the causes of a failure (harness.parity.numerics.causes)."""
import types

import pytest
import torch

from harness.parity.numerics import causes, outputs


def sample(x, *args, **kwargs):
    return types.SimpleNamespace(input=x, args=args, kwargs=kwargs)


TIED = torch.tensor([[3.0, 1.0, 3.0, 2.0], [5.0, 5.0, 5.0, 0.0]])


def test_another_order_of_equal_values_is_settled_to_the_cpus_indices():
    s = sample(TIED, -1)
    cpu = torch.sort(TIED, dim=-1)
    other = (cpu.values, torch.tensor([[1, 3, 2, 0], [3, 2, 1, 0]]))  # equal values, other positions
    settled, ties = outputs.settle_ties("sort", s, other, tuple(cpu))
    assert torch.equal(settled[1], cpu.indices) and ties > 0


def test_indices_settled_among_ties_keep_the_targets_dtype():
    """Settling put the CPU's int64 indices in place of the target's, so int32 indices that
    broke ties another way were judged as int64 and their dtype passed unseen."""
    from harness.parity.numerics import accuracy, tolerances
    s = sample(TIED, -1)
    cpu = tuple(torch.sort(TIED, dim=-1))
    narrow = (cpu[0], torch.tensor([[1, 3, 2, 0], [3, 2, 1, 0]], dtype=torch.int32))
    settled, ties = outputs.settle_ties("sort", s, narrow, cpu)
    assert ties > 0 and settled[1].dtype == torch.int32 and torch.equal(settled[1].long(), cpu[1])
    found = accuracy.compare_accuracy(settled, cpu, (cpu[0].double(), cpu[1]), tolerances.tolerance("sort", "float32"),
                                      torch.float32, tolerances.ACCURACY_FACTOR, tolerances.ACCURACY_ULPS)
    assert not found["ok"] and found["reason"].startswith("output 1: dtype int32 where the CPU gives int64")
    modes = tuple(torch.mode(SEVERAL, -1))
    swapped = torch.where(modes[0] == 1, 4, torch.where(modes[0] == 4, 1, modes[0]))   # row 0: the other mode
    at = torch.stack([(row == v).nonzero()[0, 0] for row, v in zip(SEVERAL, swapped)]).to(torch.int32)
    settled, rows = outputs.settle_ties("mode", sample(SEVERAL, -1), (swapped, at), modes)
    assert rows == 1 and settled[1].dtype == torch.int32 and torch.equal(settled[1].long(), modes[1])


@pytest.mark.parametrize("why,indices,kwargs", [
    ("selects another value", torch.tensor([[3, 1, 0, 2], [3, 2, 1, 0]]), {}),
    ("a stable sort's order is defined", torch.tensor([[1, 3, 2, 0], [3, 2, 1, 0]]), {"stable": True}),
])
def test_indices_that_select_other_values_or_break_a_stable_sort_stay_wrong(why, indices, kwargs):
    s = sample(TIED, -1, **kwargs)
    cpu = torch.sort(TIED, dim=-1, stable=True)
    settled, ties = outputs.settle_ties("sort", s, (cpu.values, indices), tuple(cpu))
    assert torch.equal(settled[1], indices) and ties == 0, why


def test_reductions_with_an_index_and_no_kept_dim_are_settled_too():
    s = sample(TIED, 1)  # mode(x, 1): keepdim False
    cpu = torch.mode(TIED, 1)
    settled, _ = outputs.settle_ties("mode", s, (cpu.values, torch.tensor([2, 1])), tuple(cpu))
    assert torch.equal(settled[1], cpu.indices) == bool((TIED.gather(1, torch.tensor([[2], [1]])).squeeze(1)
                                                         == cpu.values).all())


SEVERAL = torch.tensor([[4, 4, 1, 1, 7], [2, 9, 9, 2, 3], [5, 5, 5, 0, 0]])   # rows 0, 1: two modes each


def test_another_of_several_modes_is_settled_to_the_cpus_but_a_value_seen_less_often_is_not():
    s = sample(SEVERAL, -1)
    cpu = tuple(torch.mode(SEVERAL, -1))
    other_vals = torch.where(cpu[0] == 1, 4, torch.where(cpu[0] == 4, 1, torch.where(cpu[0] == 2, 9,
                             torch.where(cpu[0] == 9, 2, cpu[0]))))
    other_idx = torch.stack([(row == v).nonzero()[0, 0] for row, v in zip(SEVERAL, other_vals)])
    settled, rows = outputs.settle_ties("mode", s, (other_vals, other_idx), cpu)
    assert torch.equal(settled[0], cpu[0]) and torch.equal(settled[1], cpu[1]) and rows == 2
    not_a_mode = other_vals.clone()
    not_a_mode[2] = 0                                       # 0 appears twice, 5 three times
    idx = other_idx.clone()
    idx[2] = 3
    settled, rows = outputs.settle_ties("mode", s, (not_a_mode, idx), cpu)
    assert torch.equal(settled[0], not_a_mode) and rows == 0
    wrong_index = other_idx.clone()
    wrong_index[0] = 4                                      # holds 7, not the mode it names
    settled, rows = outputs.settle_ties("mode", s, (other_vals, wrong_index), cpu)
    assert torch.equal(settled[0], other_vals) and rows == 0


def test_a_gradient_among_ties_is_compared_within_each_group_of_equal_inputs():
    s = sample(TIED, -1)
    one = [torch.tensor([[1.0, 0.5, 2.0, 0.0], [7.0, 8.0, 9.0, 1.0]])]
    swapped = [torch.tensor([[2.0, 0.5, 1.0, 0.0], [9.0, 7.0, 8.0, 1.0]])]  # the same grads, other tied positions
    assert torch.equal(outputs.canonical_grad("sort", s, one)[0], outputs.canonical_grad("sort", s, swapped)[0])
    moved = [torch.tensor([[1.0, 2.0, 0.5, 0.0], [7.0, 8.0, 9.0, 1.0]])]   # 2.0 moved to another value
    assert not torch.equal(outputs.canonical_grad("sort", s, one)[0], outputs.canonical_grad("sort", s, moved)[0])
    assert outputs.canonical_grad("add", s, one) is one


def test_an_lu_is_compared_as_the_matrix_it_factors():
    a = torch.tensor([[1.0, 2.0], [1.0, 3.0]])
    lu, piv = torch.linalg.lu_factor(a)
    assert torch.allclose(outputs.defined("linalg.lu_factor")((lu, piv), sample(a)), a)
    p, lower, upper = torch.linalg.lu(a)
    assert torch.allclose(outputs.defined("linalg.lu")((p, lower, upper), sample(a)), a)
    assert outputs.defined("add") is None


UNIQUE_IN = torch.tensor([3.0, 1.0, 3.0, 2.0, 1.0, 3.0])


def test_unique_in_another_order_is_compared_in_ascending_order_its_inverse_and_counts_following():
    s = sample(UNIQUE_IN, sorted=False, return_inverse=True, return_counts=True)
    cpu = torch.unique(UNIQUE_IN, sorted=True, return_inverse=True, return_counts=True)
    other = (torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0, 1, 0, 2, 1, 0]), torch.tensor([3, 2, 1]))
    assert torch.equal(other[0][other[1]], UNIQUE_IN)          # a valid answer: it rebuilds the input
    unique = outputs.defined("unique")
    for got, want in zip(unique(other, s), unique(cpu, s)):
        assert torch.equal(got, want)
    for want, got in zip(cpu, unique(cpu, s)):                  # a sorted result is left as it is
        assert torch.equal(got, want)
    assert torch.equal(unique(other[0], sample(UNIQUE_IN, sorted=False)), cpu[0])   # values alone


@pytest.mark.parametrize("why,wrong", [
    ("a value that does not occur", (torch.tensor([3.0, 1.0, 4.0]), torch.tensor([0, 1, 0, 2, 1, 0]),
                                     torch.tensor([3, 2, 1]))),
    ("an element sent to another value", (torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0, 1, 0, 2, 2, 0]),
                                          torch.tensor([3, 2, 1]))),
    ("a count off", (torch.tensor([3.0, 1.0, 2.0]), torch.tensor([0, 1, 0, 2, 1, 0]), torch.tensor([3, 1, 1]))),
])
def test_a_wrong_unique_stays_wrong_in_any_order(why, wrong):
    s = sample(UNIQUE_IN, sorted=False, return_inverse=True, return_counts=True)
    unique = outputs.defined("unique")
    cpu = unique(torch.unique(UNIQUE_IN, return_inverse=True, return_counts=True), s)
    assert not all(torch.equal(a, b) for a, b in zip(unique(wrong, s), cpu)), why


def test_unique_slices_along_a_dimension_are_ordered_lexicographically():
    x = torch.tensor([[1, 0, 1, 0], [2, 5, 2, 0]])             # columns: (1,2) (0,5) (1,2) (0,0)
    s = sample(x, sorted=False, return_inverse=True, return_counts=True, dim=1)
    cpu = torch.unique(x, dim=1, return_inverse=True, return_counts=True)
    other = (torch.tensor([[1, 0, 0], [2, 0, 5]]), torch.tensor([0, 2, 0, 1]), torch.tensor([2, 1, 1]))
    assert torch.equal(other[0][:, other[1]], x)
    unique = outputs.defined("unique")
    for got, want in zip(unique(other, s), cpu):
        assert torch.equal(got, want)
    empty = torch.zeros(3, 0, 2)
    assert unique(torch.unique(empty, dim=1), sample(empty, sorted=False, dim=1)).shape == (3, 0, 2)


@pytest.mark.parametrize("kind", ["cuda", "mps", "stand-in", "cpu"])
def test_a_causes_switch_is_the_same_for_float16_and_bfloat16(kind):
    """The report shows one switch per cause and column for its float16 and bfloat16 checks
    together (harness.report.verdict.failure_groups), joining the distinct ones: a switch
    that named its dtype appeared twice there, word for word but the dtype."""
    for cause in causes.CAUSES.values():
        for autocast in (False, True):
            assert causes.switch_for(cause, kind, "float16", autocast) == causes.switch_for(
                cause, kind, "bfloat16", autocast), cause.name


def test_a_model_under_autocast_is_not_told_to_use_autocast():
    """The autocast model checks were told "compute it in float32 (x.float(), or autocast, which
    keeps reductions in float32)": they run under autocast already. Their switch says what
    autocast leaves in the half dtype and how to keep a layer out of it; a plain float16 op keeps
    its own; a float32 model check has no autocast switch."""
    for name in ("reduced-precision", "nondeterministic", "non-finite"):
        under = causes.describe(name, "mps", "float16", autocast=True)["switch"]
        assert under.startswith("torch.autocast already keeps") and "enabled=False" in under, name
        assert "or autocast," not in under and under != causes.describe(name, "mps", "float16")["switch"], name
    assert "allow_fp16_reduced_precision_reduction" in causes.describe("reduced-precision", "cuda", "float16",
                                                                       autocast=True)["switch"]
    assert causes.describe("tf32", "cuda", "float32", autocast=True) == causes.describe("tf32", "cuda", "float32")


def test_causes_are_tried_in_order_and_only_where_they_can_tell():
    assert causes.trials_for("cuda", "float32") == ["nondeterministic", "tf32"]
    assert causes.trials_for("mps", "float16") == ["cpu-fallback", "nondeterministic", "reduced-precision"]
    assert causes.trials_for("mps", "float32") == ["cpu-fallback", "nondeterministic"]  # MPS has no TF32 switch
    assert "tf32" in causes.trials_for("stand-in", "int64")  # cov of integers computes a float32 matmul
    asked = []
    assert causes.diagnose("cuda", "float32", lambda t: asked.append(t) or t == "tf32") == "tf32"
    assert asked == ["nondeterministic", "tf32"]
    assert causes.diagnose("cuda", "float16", lambda t: None) == "unexplained"
    assert causes.diagnose("cuda", "float16", lambda t: 1 / 0) == "unexplained"  # a rerun that cannot run


def test_a_cause_names_the_switch_of_its_device():
    cuda = causes.describe("reduced-precision", "cuda", "bfloat16")
    assert "bfloat16" in cuda["cause_what"] and "allow_fp16_reduced_precision_reduction" in cuda["switch"]
    assert "allow_fp16" not in causes.describe("reduced-precision", "mps", "float16")["switch"]
    assert "cudnn.allow_tf32 = False" in causes.describe("tf32", "cuda", "float32")["switch"]


@pytest.mark.parametrize("kind, dtype, says, never", [
    ("mps", "float16", "compute that part in float32", "already in full precision"),
    ("cuda", "bfloat16", "torch.autocast keeps softmax", "already in full precision"),
    ("mps", "float32", "compute that op on the CPU (x.cpu())", "compute that part in float32"),
    ("stand-in", "complex64", "already in full precision", "compute that part in float32"),
    ("cpu", "float32", "compute that part in float64", "on the CPU (x.cpu())"),
    ("cpu", "float16", "compute that part in float32", "float64"),
])
def test_a_nan_s_switch_fits_its_precision_and_its_device(kind, dtype, says, never):
    """NaN where float64 has a number: in half precision the cure is float32; a float32 result
    cannot be told to compute in float32, and the CPU cannot be told to move to the CPU."""
    switch = causes.describe("non-finite", kind, dtype)["switch"]
    assert says in switch and never not in switch, switch
