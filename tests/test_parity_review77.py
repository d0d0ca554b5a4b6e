"""The parity review's six findings, each held by a test that failed before its fix:

  4  a bug of a float16 / bfloat16 kernel alone (float32 right) was named "reduced precision"
     with the switch "compute it in float32" (harness.parity.numerics.causes: half-kernel)
  1  attention in half precision with more than 64 query rows was never checked (the
     attention family's causal and masks members, the autocast long padded prompt)
  5  the ci run of attention.masks hardly masked (one key, one fully masked row)
  3  pytorch#174861's shape (grouped-query heads, a long cache, half precision) was never
     drawn, and no known-bug case replayed the attention reports
  2  the model checks of the attention path never reached MPS's own kernels (head dims 16
     and 8; they take 64, 96, 128, 256)
  6  float16's lowest mask value (-65504) never reached the device

The faults are tests/half_attention_faults.py's stand-ins: the CPU with
scaled_dot_product_attention wrong, on the target side only, the way each report says.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, find, given, settings, strategies as st

from harness.core import models as registry
from harness.core.records import Status
from harness.parity.known_bugs import cases as bug_cases, check as bug_check
from harness.parity.models import inputs, judge, precision, references
from harness.parity.numerics import causes
from harness.parity.numerics.tolerances import TABLE
from harness.parity.properties import attention as A, examples as E
from harness.parity.properties.tally import Tally
from harness.plugin.record import Recorder
from tests import half_attention_faults  # noqa: F401  registers the stand-ins
from tests.conftest import run_suite

FIND = settings(max_examples=3000, derandomize=True, database=None, deadline=None,
                suppress_health_check=list(HealthCheck))
CI = settings(max_examples=20, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))   # the ci profile's draws (profiles.py)
O32 = TABLE[("model", "float32")]


def _pair(tol):
    return tol.rtol, tol.atol


def _qkv(q: tuple, k: tuple, layout: str = "contiguous") -> tuple:
    return (("query", E.Floats(q, layout)), ("key", E.Floats(k, layout)), ("value", E.Floats(k, layout)))


def _judged(target: str, dtype: str, examples, kernel: str = "math") -> Recorder:
    """``examples`` through one attention check on ``target`` in ``dtype``, as the suite runs
    them (inside hypothesis); the record, whether the check failed or not."""
    record = Recorder()
    kind = "cpu" if target == "cpu" else "stand-in"
    checks = A.KernelTally(Tally(record, dtype, target, torch.device("cpu")), A.KERNELS[kernel], kind, record)

    @settings(max_examples=1, database=None, deadline=None)
    @given(st.just(0))
    def every(_):
        for example in examples:
            checks.check(example)
    try:
        every()
        record.status = record.status or "pass"
    except pytest.fail.Exception as failed:
        record.status, record.reason = "fail", str(failed)
    return record


def heads_lengths(ex: E.Example) -> dict:
    spec = dict(ex.inputs)
    (_, hq, q_len, e), (_, hkv, k_len, _) = spec["query"].shape, spec["key"].shape
    return {"hq": hq, "hkv": hkv, "L": q_len, "S": k_len, "E": e}


def fully_hidden(ex: E.Example, dtype=torch.float32) -> bool:
    mask = ex.arguments(ex.make(), dtype, "cpu").get("attn_mask")
    if mask is None or mask.numel() == 0:
        return False
    gone = ~mask if mask.dtype == torch.bool else mask <= torch.finfo(torch.float16).min
    return bool(gone.all(-1).any())


# #195910's own shape, written out here so that the test stands without the new examples
LEAK_EXAMPLE = E.Example(0, 1.0, _qkv((1, 4, 64, 64), (1, 4, 64, 64)), (("is_causal", True),))


# --------------------------------------------------------------------------- 4: the cause

def test_review77_a_causal_leak_in_half_precision_is_the_half_kernel_not_reduced_precision():
    """pytorch#195910 (a causal mask applied per group of 4 query rows, float16 / bfloat16
    only): the float32 rerun is right, and the check said "accumulates or keeps
    intermediates in float16 ... compute it in float32". It is the half kernel itself."""
    record = _judged("standin-causal-leak", "float16", [LEAK_EXAMPLE])
    assert record.status == "fail", record.reason
    assert record.metrics["cause"] == "half-kernel", record.metrics.get("cause")
    assert "report it to PyTorch" in record.metrics["switch"] and "float32 is right" in record.metrics["switch"]
    assert _judged("cpu", "float16", [LEAK_EXAMPLE]).status == "pass"


def test_review77_a_decoding_step_that_ignores_the_mask_under_autocast_is_the_half_kernel():
    """A half-precision decoding kernel that attends to left padding (float32 right): the
    autocast greedy generation check named it reduced precision, with the switch to keep the
    layer out of autocast as if precision were the trade-off."""
    tol = TABLE[("model", "float16")]
    run = precision.generate("gpt2", "standin-decode-nomask-half", "float16", _pair(tol), 2)
    verdict = judge.judge_generation_run(run, tol)
    assert verdict.status == Status.FAIL and verdict.cause == "half-kernel", verdict.message
    assert "report it to PyTorch" in verdict.message and "enabled=False" in verdict.message


def test_review77_half_precision_reach_sits_between_a_half_accumulator_and_a_wrong_kernel():
    """The bound (causes.HALF_PRECISION_REACH x the CPU's own error, floored at half a unit
    in the last place of the output's magnitude): standin-half-sums' 5.5x is precision, the
    55x of a decoding step that ignores its mask in bfloat16 is not; a CPU that is exact
    leaves the floor as the yardstick."""
    assert causes.half_precision_explains("float16", [(5.5e-3, 1e-3, 1.0)]) is True
    # GPT-2's bfloat16 greedy scores (largest 0.2): the mask ignored, 0.099 off; the CPU 1.8e-3
    assert causes.half_precision_explains("bfloat16", [(0.099, 1.8e-3, 0.2)]) == causes.HALF_KERNEL
    assert causes.half_precision_explains("float16", [(4e-3, 0.0, 1.0)]) is True       # 16 x 2^-11 x 1
    assert causes.half_precision_explains("float16", [(1e-1, 0.0, 1.0)]) == causes.HALF_KERNEL
    assert causes.half_precision_explains("float16", [(math.nan, 1e-3, 1.0)]) == causes.HALF_KERNEL
    # the reduced-precision rerun may name the half kernel instead of itself
    assert causes.diagnose("mps", "float16", lambda t: causes.HALF_KERNEL if t == "reduced-precision" else False) \
        == causes.HALF_KERNEL
    half = causes.describe(causes.HALF_KERNEL, "mps", "bfloat16", autocast=True)
    assert "bfloat16 kernel itself" in half["cause_what"] and "enabled=False" in half["switch"]


# --------------------------------------------------------------------------- 1: more than 64 query rows

@pytest.mark.parametrize("member", ["causal", "masks"])
def test_review77_causal_and_masks_draw_query_rows_past_a_64_row_block(member):
    ex = find(A.MEMBERS[member][0](), lambda e: heads_lengths(e)["L"] > 64 and heads_lengths(e)["S"] >= 64,
              settings=FIND)
    assert heads_lengths(ex)["L"] in A.LONG_QUERIES


def test_review77_rows_past_64_wrong_in_half_precision_fail_causal_and_masks_and_not_float32():
    """standin-long-q: with more than 64 query rows, the rows past 64 see the first 64 keys,
    in half precision only (MPS's half-precision prefill kernel tiles queries by 64). Every
    attention check passed it; now causal and masks fail in float16 and pass in float32."""
    long_rows = [ex for m in ("causal", "masks") for ex in A.EXAMPLES[m]
                 if heads_lengths(ex)["L"] > 64 and heads_lengths(ex)["S"] > 64]
    assert long_rows
    failed = _judged("standin-long-q", "float16", long_rows)
    assert failed.status == "fail" and failed.metrics["cause"] == causes.HALF_KERNEL, failed.reason
    assert _judged("standin-long-q", "float32", long_rows).status == "pass"


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_review77_the_autocast_long_prompt_fails_where_rows_past_64_are_wrong(dtype):
    tol = TABLE[("model", dtype)]
    wrong = judge.judge_generation_run(precision.generate_long("llama", "standin-long-q", dtype, _pair(tol)), tol)
    assert wrong.status == Status.FAIL and wrong.cause == causes.HALF_KERNEL, wrong.message
    right = precision.generate_long("llama", "cpu", dtype, _pair(tol))
    assert judge.judge_generation_run(right, tol).status == Status.PASS
    assert right.setting["head_dim"] == 64 and max(inputs.LONG_PADDED_LENGTHS) > 2 * A.BLOCK_EDGE


# --------------------------------------------------------------------------- 5: masks under the ci profile

@CI
@given(ex=A.masks())
def test_review77_a_mask_always_has_two_keys_to_choose_from(ex):
    assert heads_lengths(ex)["S"] >= 2


def test_review77_the_ci_run_of_masks_meets_fully_masked_rows_of_every_kind_and_fill():
    """What the suite's masks check runs under the default ci profile: its 20 derandomized
    draws and the examples every profile runs. Before, 15 of the 20 had one key and one
    example a fully masked row (boolean); no additive one."""
    drawn = []

    @CI
    @given(ex=A.masks())
    def collect(ex):
        drawn.append(ex)
    collect()
    runs = drawn + list(getattr(A, "EXAMPLES", {}).get("masks", ()))
    met = {("bool" if isinstance(dict(e.inputs)["attn_mask"], A.BoolMask) else dict(e.inputs)["attn_mask"].fill)
           for e in runs if fully_hidden(e)}
    assert {"bool", *A.EMPTY_ROW_FILLS} <= met, met
    assert sum(heads_lengths(e)["S"] == 1 for e in drawn) == 0


def test_review77_nan_on_rows_an_additive_mask_hides_wholly_fails_the_ci_run():
    """standin-nan-empty-additive passed the ci masks check in every dtype."""
    record = _judged("standin-nan-empty-additive", "float16", A.EXAMPLES["masks"])
    assert record.status == "fail" and record.metrics["cause"] == "non-finite", record.reason


# --------------------------------------------------------------------------- 3: grouped heads, long caches, reports

def test_review77_long_kv_draws_grouped_query_heads_and_runs_174861s_shape():
    ex = find(A.long_kv(), lambda e: dict(e.options).get("enable_gqa") and heads_lengths(e)["hq"] >= 16,
              settings=FIND)
    assert heads_lengths(ex)["hkv"] in (1, 2) and heads_lengths(ex)["S"] >= 1024
    shapes = [(heads_lengths(e), dict(e.options).get("enable_gqa")) for e in A.EXAMPLES["long-kv"]]
    assert ({"hq": 32, "hkv": 2, "L": 1, "S": 1024, "E": 128}, True) in shapes


def test_review77_174861_fails_long_kv_in_float16():
    record = _judged("standin-gqa-long-half", "float16", A.EXAMPLES["long-kv"])
    assert record.status == "fail", record.reason
    assert _judged("cpu", "float16", A.EXAMPLES["long-kv"]).status == "pass"


@pytest.mark.parametrize("name, issue, stand_in", [("sdpa-gqa-decode-1024-keys", 174861, "standin-gqa-long-half"),
                                                    ("sdpa-decode-keys-not-multiple-of-32", 169222,
                                                     "standin-decode-tail")])
def test_review77_the_attention_reports_are_known_bug_cases_that_fail_where_reproduced(name, issue, stand_in):
    case = bug_cases.by_name(name)
    assert case in bug_cases.ATTENTION_CASES and case.source.issue == issue and case.source.confirmed
    dtype = case.dtypes[0]
    verdict = bug_check.judge(bug_check.run_case(name, stand_in, dtype))
    assert verdict.status == Status.FAIL and f"shows the bug of pytorch#{issue}" in verdict.message, verdict.message
    assert bug_check.judge(bug_check.run_case(name, "cpu", dtype)).status == Status.PASS
    assert bug_check.judge_repeatability(bug_check.run_repeatability(name, "cpu", dtype)).status == Status.PASS


# --------------------------------------------------------------------------- 2: head dims MPS's kernels take

def _head_dims_seen(monkeypatch, run) -> set[tuple[int, int]]:
    """(query rows <= 8, head dim) of every scaled_dot_product_attention call ``run`` makes."""
    seen, real = set(), F.scaled_dot_product_attention

    def watched(query, key, value, *args, **kwargs):
        seen.add((query.size(-2) <= 8, query.size(-1)))
        return real(query, key, value, *args, **kwargs)
    monkeypatch.setattr(F, "scaled_dot_product_attention", watched)
    run()
    return seen


@pytest.mark.parametrize("check", ["sdpa_vs_eager", "sdpa_vs_eager_long", "cache_vs_recompute",
                                   "cache_vs_recompute_long", "autocast_greedy_generation"])
def test_review77_the_attention_path_checks_reach_head_dims_mps_kernels_take(monkeypatch, check):
    """Every scaled_dot_product_attention call these checks make has a head dim MPS's own
    kernels take (64): decoding steps (8 query rows or fewer) and prefills alike. Before, 16
    (BERT, GPT-2, T5) and 8 (Llama): MPSGraph's general path only."""
    runs = {
        "sdpa_vs_eager": lambda m: references.sdpa_vs_eager(m, "cpu", _pair(O32), _pair(TABLE[("model-grad",
                                                                                                 "float32")])),
        "sdpa_vs_eager_long": lambda m: references.sdpa_vs_eager_long(m, "cpu", _pair(O32), 2),
        "cache_vs_recompute": lambda m: references.cache_vs_recompute(m, "cpu", _pair(O32), new_tokens=2),
        "cache_vs_recompute_long": lambda m: references.cache_vs_recompute(m, "cpu", _pair(O32), True, 2),
        "autocast_greedy_generation": lambda m: precision.generate(m, "cpu", "bfloat16",
                                                                   _pair(TABLE[("model", "bfloat16")]), 2),
    }
    names = {"sdpa_vs_eager": ("bert", "gpt2", "t5", "llama"), "autocast_greedy_generation": ("gpt2", "t5", "llama"),
             "cache_vs_recompute": ("gpt2", "t5", "llama")}.get(check, inputs.LONG_DECODERS)
    # a model this transformers builds without sdpa (T5 in 4.x: models.sdpa_missing) calls no sdpa
    for name in [n for n in names if not registry.sdpa_missing(n)]:
        seen = _head_dims_seen(monkeypatch, lambda: runs[check](name))
        assert seen and {dim for _, dim in seen} <= {64, 96, 128, 256}, (name, seen)
        if check != "sdpa_vs_eager":
            assert (True, 64) in seen, (name, seen)   # a decoding step


def test_review77_the_registry_keeps_its_models_for_the_perf_and_optim_suites():
    """The head-dim-64 models are the parity attention checks' own: the registry's shapes,
    which the optim and perf suites time and compare by shape, stay as they were."""
    dims = {name: inputs.head_dim(registry.MODELS[name].make()) for name in ("bert", "gpt2", "t5", "llama")}
    assert dims == {"bert": 16, "gpt2": 16, "t5": 16, "llama": 8}
    assert inputs.head_dim(inputs.kernel_model("llama")) == inputs.KERNEL_HEAD_DIM
    assert all(d in inputs.MPS_PREFILL_HEAD_DIMS for d in inputs.MPS_DECODE_HEAD_DIMS if d != 256) and \
        inputs.KERNEL_HEAD_DIM in inputs.MPS_DECODE_HEAD_DIMS


@pytest.mark.parametrize("reference, name", [("cache_vs_recompute", "gpt2"), ("sdpa_vs_eager_long", "llama")])
def test_review77_a_decoding_kernel_wrong_only_at_mps_head_dims_fails_the_long_references(reference, name):
    """standin-decode-headdim: a decoding step past 512 keys drops the rest, at head dims 64,
    96, 128, 256 only (as only those reach MPS's decoding kernels). The long references
    passed it at head dims 16 and 8."""
    if reference == "cache_vs_recompute":
        run = references.cache_vs_recompute(name, "standin-decode-headdim", _pair(O32), True, 2)
    else:
        run = references.sdpa_vs_eager_long(name, "standin-decode-headdim", _pair(O32), 2)
    assert judge.judge_generation_run(run, O32).status == Status.FAIL
    assert judge.judge_generation_run(getattr(references, reference)(name, "cpu", _pair(O32), *(
        (True, 2) if reference == "cache_vs_recompute" else (2,))), O32).status == Status.PASS


# --------------------------------------------------------------------------- 6: float16's lowest mask value

def test_review77_masks_draw_float16_min_hiding_whole_rows():
    ex = find(A.masks(), lambda e: getattr(dict(e.inputs)["attn_mask"], "fill", None) == "float16-min"
              and fully_hidden(e, torch.float16), settings=FIND)
    assert dict(ex.inputs)["attn_mask"].empty_rows


def test_review77_a_row_wholly_at_float16_min_must_be_a_number_and_any_number_passes():
    """standin-fp16-min takes -65504 as -inf with no safe softmax: NaN on a row the mask
    hides wholly, a float16 model's padding row. Such a row is judged for a number only (its
    float64 answer is the encoding's rounding), so the CPU passes it in every dtype."""
    rows = [ex for ex in A.EXAMPLES["masks"] if A.hides_rows_finitely(ex)]
    assert rows
    failed = _judged("standin-fp16-min", "float16", rows)
    assert failed.status == "fail" and failed.metrics["cause"] == "non-finite", failed.reason
    for dtype in ("float32", "float16", "bfloat16"):
        assert _judged("cpu", dtype, rows).status == "pass", dtype


# --------------------------------------------------------------------------- end to end

@pytest.mark.slow(seconds=40)
def test_review77_the_reviewers_faults_fail_the_attention_family_through_the_suite(tmp_path):
    """Through pytest and the default ci profile, the stand-ins the review used: rows past 64
    wrong in half precision, pytorch#195910 at L == S, NaN on rows an additive mask hides
    wholly, float16's lowest value taken as -inf, pytorch#174861. Before, each passed every
    attention check (causal, masks, long-kv) in the ci run; now each fails its member in
    float16 (math kernel), none in float32, and the causal leak's cause is the half kernel."""
    faults = {"standin-long-q": {"attention.causal", "attention.masks"},
              "standin-causal-leak-square": {"attention.causal"},
              "standin-nan-empty-additive": {"attention.masks"},
              "standin-fp16-min": {"attention.masks"},
              "standin-gqa-long-half": {"attention.long-kv"}}
    res, records = run_suite(tmp_path, "suites/parity/test_attention.py", None, "-n", "0", "-p",
                             "tests.half_attention_faults", "--device", ",".join(faults), "-k",
                             "(causal or masks or long) and math and not bfloat16", timeout=900)
    assert records, res.stdout[-3000:]
    failed = {(r["target"], r["subject"]) for r in records if r["status"] == "fail"}
    for target, subjects in faults.items():
        for subject in subjects:
            assert (target, subject) in failed, (target, subject, sorted(failed))
    assert all(r["variant"].startswith("float16") for r in records if r["status"] == "fail")
    leak = next(r for r in records if r["target"] == "standin-causal-leak-square" and r["status"] == "fail")
    assert leak["metrics"]["cause"] == causes.HALF_KERNEL, leak["reason"]
