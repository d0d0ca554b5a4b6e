"""The attention property family (harness.parity.properties.attention,
suites/parity/test_attention.py): its strategies draw what they claim, its written-out
reference agrees with torch's math kernel in float64 and is computed without it, a kernel
torch refuses is counted and never judged, and, run end to end in child pytest processes,
the suite fails exactly the checks an injected fault breaks (tests/attention_faults.py)
and passes on the stand-in accelerators as the other property checks do."""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, find, settings, strategies as st
from torch.nn.attention import SDPBackend, sdpa_kernel

from harness.core import records
from harness.parity.properties import attention as A, examples as E, strategies as S
from harness.parity.properties.tally import Tally
from harness.plugin.record import Recorder
from tests import attention_faults
from tests.conftest import run_suite

FIND = settings(max_examples=2000, derandomize=True, database=None)
MANY = settings(max_examples=60, derandomize=True, database=None, deadline=None)
FAMILY = st.one_of(*(strategy() for strategy, _ in A.MEMBERS.values()))
SHORT = st.one_of(A.gqa(), A.value_dim(), A.causal(), A.masks())


def realized(ex: E.Example, dtype=torch.float32) -> dict:
    """The example's arguments as the op sees them on the CPU in ``dtype``."""
    return ex.arguments(ex.make(), dtype, "cpu")


def heads_lengths(ex: E.Example) -> dict:
    spec = dict(ex.inputs)
    (_, hq, q_len, e), (_, hkv, k_len, _), ev = spec["query"].shape, spec["key"].shape, spec["value"].shape[-1]
    return {"hq": hq, "hkv": hkv, "L": q_len, "S": k_len, "E": e, "Ev": ev}


def hidden(mask: torch.Tensor) -> torch.Tensor:
    """Where a mask hides a key: False in a boolean mask, -inf in an additive one."""
    return ~mask if mask.dtype == torch.bool else torch.isneginf(mask)


def fully_masked_rows(ex: E.Example) -> bool:
    mask = realized(ex).get("attn_mask")
    return mask is not None and mask.numel() > 0 and bool(hidden(mask).all(-1).any())


# --------------------------------------------------------------------------- what the strategies draw

@MANY
@given(ex=A.gqa())
def test_grouped_query_examples_share_each_key_value_head_among_a_group(ex):
    n = heads_lengths(ex)
    assert dict(ex.options)["enable_gqa"] is True
    assert n["hq"] > n["hkv"] and n["hq"] % n["hkv"] == 0 and n["hkv"] in (1, 2, 3)


def test_some_grouped_query_example_has_several_key_value_heads_and_a_batch():
    """With one key/value head, tiling and grouping are the same mapping: a wrong one shows
    only from two heads on."""
    ex = find(A.gqa(), lambda e: heads_lengths(e)["hkv"] >= 2 and dict(e.inputs)["query"].shape[0] > 0, settings=FIND)
    assert heads_lengths(ex)["hkv"] >= 2


@MANY
@given(ex=A.value_dim())
def test_value_dim_examples_have_a_value_dim_of_their_own(ex):
    n = heads_lengths(ex)
    assert n["Ev"] != n["E"]


@pytest.mark.parametrize("wanted", [pytest.param(lambda n: n["Ev"] < n["E"], id="smaller"),
                                    pytest.param(lambda n: n["Ev"] > n["E"], id="larger")])
def test_value_dims_are_drawn_smaller_and_larger(wanted):
    assert wanted(heads_lengths(find(A.value_dim(), lambda e: wanted(heads_lengths(e)), settings=FIND)))


@MANY
@given(ex=A.causal())
def test_causal_examples_are_causal_with_lengths_that_differ(ex):
    n = heads_lengths(ex)
    assert dict(ex.options)["is_causal"] is True and n["L"] != n["S"] and "attn_mask" not in dict(ex.inputs)


@pytest.mark.parametrize("wanted", [pytest.param(lambda n: n["L"] < n["S"], id="fewer-queries"),
                                    pytest.param(lambda n: n["L"] > n["S"], id="more-queries")])
def test_causal_lengths_are_drawn_both_ways(wanted):
    assert wanted(heads_lengths(find(A.causal(), lambda e: wanted(heads_lengths(e)), settings=FIND)))


@pytest.mark.parametrize("kind, fill", [("bool", None)] + [("additive", fill) for fill in A.FILLS])
def test_every_mask_kind_and_fill_is_drawn(kind, fill):
    def fits(e):
        mask = dict(e.inputs)["attn_mask"]
        return isinstance(mask, A.BoolMask) if kind == "bool" else (
            isinstance(mask, A.AdditiveMask) and mask.fill == fill)
    ex = find(A.masks(), fits, settings=FIND)
    mask = realized(ex, torch.float16)["attn_mask"]
    assert mask.dtype == (torch.bool if kind == "bool" else torch.float16)


@pytest.mark.parametrize("kind", [A.BoolMask, A.AdditiveMask])
def test_masks_include_fully_masked_rows(kind):
    ex = find(A.masks(), lambda e: isinstance(dict(e.inputs)["attn_mask"], kind) and fully_masked_rows(e),
              settings=FIND)
    assert fully_masked_rows(ex)


@pytest.mark.parametrize("form", A.MASK_FORMS)
def test_every_mask_form_is_drawn_and_broadcasts_to_the_scores(form):
    def shaped(e):
        n, mask = heads_lengths(e), dict(e.inputs)["attn_mask"]
        b = dict(e.inputs)["query"].shape[0]
        return mask.shape == A.mask_shape(form, b, n["hq"], n["L"], n["S"]) and b > 1 and n["hq"] > 1
    ex = find(A.masks(), shaped, settings=FIND)
    args, n = realized(ex), heads_lengths(ex)
    scores = (args["query"].shape[0], n["hq"], n["L"], n["S"])
    assert torch.broadcast_shapes(args["attn_mask"].shape, scores) == scores


@MANY
@given(ex=A.masks())
def test_a_row_is_fully_masked_only_where_the_mask_says_so(ex):
    """Without ``empty_rows`` every query row keeps a key; with it, some row keeps none."""
    spec, mask = dict(ex.inputs)["attn_mask"], realized(ex)["attn_mask"]
    if isinstance(spec, A.AdditiveMask):   # hidden by its fill, finite or not
        gone = mask == torch.tensor(A.FILLS[spec.fill], dtype=torch.float64).to(mask.dtype)
    else:
        gone = ~mask
    if mask.numel():
        assert bool(gone.all(-1).any()) == spec.empty_rows


@MANY
@given(ex=A.masks())
def test_a_finite_fill_never_hides_a_whole_row(ex):
    """draw_mask: a row all at -1e4 is a softmax whose scores float32 keeps to 2^-10 only."""
    spec = dict(ex.inputs)["attn_mask"]
    if isinstance(spec, A.AdditiveMask) and spec.fill not in A.EMPTY_ROW_FILLS:
        assert not spec.empty_rows


@MANY
@given(ex=A.long_kv())
def test_long_kv_is_one_query_against_a_long_cache_within_its_memory(ex):
    n = heads_lengths(ex)
    assert n["L"] == 1 and A.LONG_KEYS[0] <= n["S"] <= A.LONG_KEYS[-1]
    for name, spec in ex.inputs:
        storage = math.prod(E.LAYOUTS[spec.layout].storage(spec.shape))
        assert storage * A.FLOAT64_BYTES <= A.LONG_KV_BYTES, (name, spec)


@MANY
@given(ex=SHORT)
def test_the_other_members_stay_short_and_small(ex):
    """At most SHORT_KEYS keys (a fault past a key length shows in long-kv alone) and each
    tensor within the property suites' element budget."""
    n = heads_lengths(ex)
    assert n["S"] <= A.SHORT_KEYS
    for name, t in realized(ex).items():
        if isinstance(t, torch.Tensor):
            assert t.numel() <= S.MAX_ELEMENTS, name


@pytest.mark.parametrize("layout", [name for name in E.LAYOUTS if name != "contiguous"])
@pytest.mark.parametrize("which", ["qkv", "attn_mask"])
def test_every_layout_reaches_the_op_as_a_non_contiguous_view(layout, which):
    names = ("query", "key", "value") if which == "qkv" else ("attn_mask",)

    def viewed(e):
        args = realized(e)
        return any(getattr(dict(e.inputs).get(n), "layout", None) == layout and not args[n].is_contiguous()
                   for n in names if n in args)
    assert viewed(find(FAMILY if which == "qkv" else A.masks(), viewed, settings=FIND))


@pytest.mark.parametrize("layout", list(E.LAYOUTS))
@pytest.mark.parametrize("spec", [A.BoolMask, A.AdditiveMask])
def test_a_mask_view_shows_what_was_drawn_in_every_layout(spec, layout):
    """Rows are rows of the view (the op's), whatever the storage: each keeps a key unless
    the row is drawn empty; an additive mask's hidden keys hold its fill."""
    shape = (2, 3, 5, 7)
    kwargs = {"fill": "-1e4"} if spec is A.AdditiveMask else {}
    mask = spec(shape, layout, **kwargs)
    view = mask.view(mask.make(torch.Generator().manual_seed(0), 1.0))
    assert tuple(view.shape) == shape
    gone = ~view if view.dtype == torch.bool else view == -1e4
    assert not bool(gone.all(-1).any()) and bool(gone.any())
    empty = spec(shape, layout, empty_rows=True, **kwargs)
    view = empty.view(empty.make(torch.Generator().manual_seed(0), 1.0))
    gone = ~view if view.dtype == torch.bool else view == -1e4
    assert bool(gone.all(-1).any())


# --------------------------------------------------------------------------- the reference

def _float64(ex: E.Example) -> dict:
    return ex.arguments(ex.make(), torch.float64, "cpu")


@settings(MANY, max_examples=100)
@given(ex=FAMILY)
def test_the_reference_agrees_with_torchs_math_kernel_in_float64(ex):
    args = _float64(ex)
    with sdpa_kernel([SDPBackend.MATH]):
        torch_math = F.scaled_dot_product_attention(**args)
    ours = A.reference_attention(**args)
    assert ours.shape == torch_math.shape
    torch.testing.assert_close(ours, torch_math, rtol=1e-10, atol=1e-12)


def test_the_reference_never_calls_scaled_dot_product_attention(monkeypatch):
    ex = find(A.gqa(), lambda e: heads_lengths(e)["hkv"] >= 2 and "attn_mask" in dict(e.inputs), settings=FIND)
    args = _float64(ex)
    expected = A.reference_attention(**args)

    def refuse(*a, **kw):
        raise AssertionError("the reference called scaled_dot_product_attention")
    monkeypatch.setattr(F, "scaled_dot_product_attention", refuse)
    monkeypatch.setattr(torch._C._nn, "scaled_dot_product_attention", refuse)
    assert torch.equal(A.reference_attention(**args), expected)


def test_a_fully_masked_row_is_zero_in_the_reference_as_in_torchs_math_kernel():
    """torch >= 2.5 (``_safe_softmax``); the reference says so by definition."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, 4, generator=gen, dtype=torch.float64) for n in (3, 5, 5))
    keep = torch.ones(3, 5, dtype=torch.bool)
    keep[1] = False
    for mask in (keep, torch.zeros(3, 5, dtype=torch.float64).masked_fill(~keep, -math.inf)):
        ours = A.reference_attention(q, k, v, attn_mask=mask)
        with sdpa_kernel([SDPBackend.MATH]):
            theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert torch.equal(ours[..., 1, :], torch.zeros(1, 2, 4)) and not bool(ours.isnan().any())
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_causal_attention_is_top_left_aligned():
    """With fewer queries than keys, query 0 sees key 0 alone (not the last key, as a
    bottom-right mask would let it)."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 1, n, 3, generator=gen, dtype=torch.float64) for n in (2, 4, 4))
    out = A.reference_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out[0, 0, 0], v[0, 0, 0])
    weights = torch.softmax(q[0, 0, 1] @ k[0, 0, :2].T / math.sqrt(3), -1)
    torch.testing.assert_close(out[0, 0, 1], weights @ v[0, 0, :2])


def test_a_query_head_reads_the_key_value_head_of_its_group():
    """H_q = 6, H_kv = 2: query heads 0-2 read head 0, 3-5 head 1 (each value head a constant)."""
    q, k = torch.randn(1, 6, 3, 4, dtype=torch.float64), torch.randn(1, 2, 5, 4, dtype=torch.float64)
    v = torch.arange(2, dtype=torch.float64).view(1, 2, 1, 1).expand(1, 2, 5, 4)
    out = A.reference_attention(q, k, v, enable_gqa=True)
    groups = torch.tensor([0.0, 0, 0, 1, 1, 1], dtype=torch.float64)
    torch.testing.assert_close(out[0, :, :, 0], groups[:, None].expand(6, 3))


def test_a_fault_that_does_not_depend_on_the_dtype_cancels_against_itself_but_not_against_the_reference():
    """Why the reference is written out: the tiled-heads fault in float64 agrees with the same
    fault in float32 (a float64 run of the op would pass it), not with the reference."""
    ex = find(A.gqa(), lambda e: heads_lengths(e)["hkv"] >= 2 and dict(e.inputs)["query"].shape[0] > 0,
              settings=FIND)
    made = ex.make()
    wrong = attention_faults.wrong("gqa")
    wide = wrong(**ex.arguments(made, torch.float32, "cpu", wide=True), dropout_p=0.0)
    narrow = wrong(**ex.arguments(made, torch.float32, "cpu"), dropout_p=0.0)
    torch.testing.assert_close(narrow.double(), wide, rtol=1e-4, atol=1e-4)
    reference = A.reference_attention(**ex.arguments(made, torch.float32, "cpu", wide=True))
    assert not torch.allclose(wide, reference, rtol=1e-2, atol=1e-2)


# --------------------------------------------------------------------------- kernels

def _value_dim_example() -> E.Example:
    return E.Example(seed=0, scale=1.0, inputs=(("query", E.Floats((1, 2, 3, 8))), ("key", E.Floats((1, 2, 5, 8))),
                                                ("value", E.Floats((1, 2, 5, 6)))), options=(("is_causal", False),))


def test_math_runs_everything_and_flash_is_refused_in_torchs_words_where_it_cannot_run():
    args = realized(_value_dim_example())
    assert A.refusal(A.KERNELS["math"], "cpu", **args) is None
    why = A.refusal(A.KERNELS["flash"], "cpu", **args)
    assert why == "Flash attention requires q,k,v to have the same last dimension"
    same = dict(args, value=args["key"])
    assert A.refusal(A.KERNELS["flash"], "cpu", **same) is None


def test_without_torchs_private_kernel_choice_a_refusal_is_read_from_running_the_example(monkeypatch):
    """torch._fused_sdp_choice is private and may go: then the example runs and torch's own
    refusal (a RuntimeError) is what is counted, with the same words."""
    monkeypatch.delattr(torch, "_fused_sdp_choice")
    args = realized(_value_dim_example())
    assert A.refusal(A.KERNELS["flash"], "cpu", **args) is None
    with pytest.raises(A.Refused, match="same last dimension"):
        A.attend(A.KERNELS["flash"], "cpu", "cpu")(**args)
    assert A.attend(A.KERNELS["math"], "cpu", "cpu")(**args).shape[-1] == args["value"].shape[-1]


def test_a_refusal_names_the_selected_kernels_own_constraint_among_cudas_warnings():
    """CUDA's dispatcher explains every fused kernel it rejected, in turn (sdp_utils.cpp);
    the reason kept is the one under the selected kernel's heading."""
    said = ["Memory efficient kernel not used because: (Triggered internally at sdp_utils.cpp:1)",
            "Mem efficient attention requires last dimension of inputs to be divisible by 8. Got 6 instead.",
            "Flash attention kernel not used because:",
            "Flash attention requires q,k,v to have the same last dimension. Got Query.size(-1): 8 instead.",
            "CuDNN attention kernel not used because:",
            "cuDNN attention requires q,k,v to have the same head dim"]
    flash = A.rejection_reasons(A.KERNELS["flash"], said)
    assert flash == ["Flash attention requires q,k,v to have the same last dimension"]
    assert A.rejection_reasons(A.KERNELS["efficient"], said) == [
        "Mem efficient attention requires last dimension of inputs to be divisible by 8"]
    assert A.rejection_reasons(A.KERNELS["cudnn"], said) == ["cuDNN attention requires q,k,v to have the same head dim"]


def test_each_kernel_is_checked_on_the_targets_that_can_select_it():
    by_kernel = {case.kernel: set(case.targets) for case in A.attention_cases("masks") if case.dtype == "float32"}
    assert {"cpu", "cuda", "mps"} <= by_kernel["math"] and {"cpu", "cuda", "mps"} <= by_kernel["flash"]
    assert "cpu" not in by_kernel["efficient"] and by_kernel["cudnn"] & {"cpu", "mps"} == set()
    assert "cuda" in by_kernel["cudnn"]
    assert A.unselectable(A.KERNELS["efficient"], "cpu") is not None


def test_on_mps_a_kernel_is_selectable_only_where_torch_offers_mps_a_choice():
    why = A.unselectable(A.KERNELS["flash"], "mps")
    if A.mps_choice():
        assert why is None
    else:
        assert "no choice of attention kernel on MPS" in why and "_fused_sdp_choice" in why
    assert A.unselectable(A.KERNELS["math"], "mps") is None


def test_the_check_ids_are_member_dtype_and_kernel():
    case = next(c for c in A.attention_cases("gqa") if c.dtype == "float16" and c.kernel == "flash")
    ident = records.identity_for(("suites", "parity", "test_attention.py"), "test_x", {"case": case, "target": "cpu"})
    assert ident.check == "parity/attention.gqa/float16/flash"
    ids = [(c.subject, c.variant) for m in A.MEMBERS for c in A.attention_cases(m)]
    assert len(ids) == len(set(ids)) == len(A.MEMBERS) * len(A.ATTENTION_DTYPES) * len(A.KERNELS)


def _kernel_tally(kernel: str, examples: list[E.Example]) -> tuple[A.KernelTally, Recorder]:
    """A CPU float32 check of ``kernel`` over ``examples``, run inside hypothesis as the suite does."""
    record = Recorder()
    checks = A.KernelTally(Tally(record, "float32", "cpu", torch.device("cpu")), A.KERNELS[kernel], "cpu", record)

    @settings(max_examples=1, database=None)
    @given(st.just(examples))
    def every(examples):
        for example in examples:
            checks.check(example)

    every()
    return checks, record


def test_a_kernel_that_ran_no_example_is_a_skip_with_torchs_reason():
    checks, record = _kernel_tally("flash", [_value_dim_example()])
    with pytest.raises(pytest.skip.Exception, match="refused all 1 drawn examples on flash.*same last dimension"):
        checks.finish()
    assert record.metrics["examples"] == 0 and sum(record.metrics["refused"].values()) == 1


def test_a_kernel_that_ran_some_examples_passes_and_says_how_many():
    runnable = E.Example(seed=1, scale=1.0, inputs=(("query", E.Floats((1, 2, 3, 8))), ("key", E.Floats((1, 2, 5, 8))),
                                                    ("value", E.Floats((1, 2, 5, 8)))), options=(("is_causal", True),))
    checks, record = _kernel_tally("flash", [runnable, _value_dim_example()])
    checks.finish()
    assert record.metrics["examples"] == 1 and record.metrics["kernel"] == "flash"
    assert record.note.startswith("flash ran 1 of 2 drawn examples")


# --------------------------------------------------------------------------- the suite, run in a child pytest

def run(tmp_path, *args, fault: str = ""):
    if fault:
        args = ("-p", "tests.attention_faults", *args)
    return run_suite(tmp_path, "suites/parity/test_attention.py", None, "-n", "0", *args,
                     env={attention_faults.VAR: fault}, timeout=900)


HALF = ("float16", "bfloat16")


@pytest.mark.slow
@pytest.mark.parametrize("fault, must, may", [
    # long-kv draws grouped heads too (pytorch#174861's long grouped decode): it may meet the fault
    pytest.param("gqa", {"attention.gqa": None}, {"attention.long-kv": None}, id="tiled-heads"),
    pytest.param("long", {"attention.long-kv": None}, {}, id="keys-past-512-dropped"),
    # masks always hide keys; gqa, value-dim and long-kv draw a padding mask in some examples
    pytest.param("nan-half", {"attention.masks": HALF},
                 {"attention.gqa": HALF, "attention.value-dim": HALF, "attention.long-kv": HALF}, id="nan-half"),
])
def test_an_injected_fault_fails_exactly_the_checks_it_breaks(tmp_path, fault, must, may):
    """A check of a subject in ``must`` (in the dtypes given; None: every dtype) fails
    unless its kernel ran no example (a skip); one in ``may`` fails or passes (its examples
    may or may not meet the fault); every other check passes, or skips where torch refused
    every example on flash (a value dim of its own). Between them the three runs pass every
    check some run leaves alone: no clean run is needed besides."""
    res, found = run(tmp_path, "-m", "parity and cpu", fault=fault)
    assert res.returncode == 1, res.stdout[-3000:]
    assert len(found) == len(A.MEMBERS) * len(A.ATTENTION_DTYPES) * 2

    def named(table, r):
        dtypes = table.get(r["subject"], ())
        return r["subject"] in table and (dtypes is None or r["variant"].split("/")[0] in dtypes)
    for r in found:
        where = (r["check"], r["status"], r["reason"][:200])
        if r["status"] == "skip":
            assert r["variant"].endswith("/flash") and "refused all" in r["reason"], where
        elif named(must, r):
            assert r["status"] == "fail", where
        elif named(may, r):
            assert r["status"] in ("pass", "fail"), where
        else:
            assert r["status"] == "pass" and r["metrics"]["examples"] > 0, where
        if r["status"] == "fail" and fault == "nan-half":
            assert "NaN or inf" in r["reason"], where
    assert any(r["status"] == "fail" for r in found)


@pytest.mark.slow   # a child run with a fault injected
def test_a_nan_the_cpu_gives_too_is_counted_as_shared_on_a_device(tmp_path):
    """NaN on masked rows in half precision is the kernel's, so under the fault the CPU's result
    has it too: a stand-in's failing property check records how many of its NaN the CPU shares
    (all of them), for the first screen's "on the CPU too" (harness.report.verdict)."""
    res, found = run(tmp_path, "-m", "parity", "-p", "tests.standins", "--device", "standin-noisy", "-k", "masks",
                     fault="nan-half")
    assert res.returncode == 1, res.stdout[-3000:]
    failed = [r for r in found if r["status"] == "fail"]
    assert {r["variant"].split("/")[0] for r in failed} == set(HALF), [(r["check"], r["status"]) for r in found]
    for r in failed:
        met = r["metrics"]
        assert met["cause"] == "non-finite" and met["non_finite"] > 0, (r["check"], met)
        assert met["non_finite_on_cpu"] == met["non_finite"], (r["check"], met)


def _flash_refuses_grouped_heads() -> bool:
    """Whether this torch's CPU flash kernel refuses grouped-query heads (asked of torch
    directly, not through the suite): 4 query heads over 2 key/value heads."""
    q, kv = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8)
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION), warnings.catch_warnings():
            warnings.simplefilter("ignore")   # torch says why in warnings; the error is the answer
            F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    except RuntimeError:   # "No available kernel"
        return True
    return False


@pytest.mark.slow
def test_stand_in_accelerators_pass_or_fail_as_the_other_property_checks_do(tmp_path):
    """standin-oracle and standin-noisy pass every check that runs; standin-tf32 fails the
    float32 math kernel (its matmuls) with TF32 as the cause, and passes flash, whose CPU
    kernel does not go through aten's matmuls. Where this torch's flash kernel cannot take
    grouped heads at all (torch 2.6: "require query, key and value to have the same num_heads"),
    the grouped-query flash check is a skip in torch's words on every stand-in."""
    res, found = run(tmp_path, "-m", "parity", "-p", "tests.standins", "--device",
                     "standin-oracle,standin-noisy,standin-tf32", "-k", "float32 and (grouped or masks)")
    assert len(found) == 3 * 2 * 2, res.stdout[-3000:]
    flash_refuses_gqa = _flash_refuses_grouped_heads()
    for r in found:
        where = (r["target"], r["check"], r["status"], r["reason"][:200])
        if r["target"] == "standin-tf32" and r["variant"].endswith("/math"):
            assert r["status"] == "fail" and r["metrics"].get("cause") == "tf32", where
        elif flash_refuses_gqa and r["check"] == "parity/attention.gqa/float32/flash":
            assert r["status"] == "skip" and "same num_heads" in r["reason"], where
        else:
            assert r["status"] == "pass" and r["metrics"]["yardstick"] == "cpu", where
