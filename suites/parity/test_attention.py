"""Attention parity: ``scaled_dot_product_attention`` as models use it, on each kernel.

"Does attention give the right numbers on my device, with my model's heads, masks and
lengths, whichever kernel torch picks?" Each test is one member of the family
(harness.parity.properties.attention), drawn by hypothesis and judged per example against
attention written out by hand (matmul, softmax, matmul in float64 on contiguous copies of
the inputs: ``attention.reference_attention``), never against scaled_dot_product_attention
itself, so a bug that does not depend on the dtype cannot cancel out on the cpu target. On
an accelerator the CPU in the same dtype is the yardstick, as in the other property checks
(harness.parity.properties.tally). An output is judged normwise, as the matmul-like ops
are: it is a sum over the keys of weights x values, whose error against float64 follows
the output's magnitude, not each element's (attention.KernelTally). NaN or inf where the
reference has a number fails with the cause "non-finite", never as a precision limit.

The members, what each catches, and where it comes from:

  attention.gqa        grouped-query heads (enable_gqa=True, H_kv of 1, 2 or 3 shared by 2-4
                       query heads each), as Llama-family models use it: a head mapping
                       that tiles instead of groups, a kernel that ignores enable_gqa
  attention.value-dim  a value head dim other than the query's (smaller and larger): the
                       output's shape and values (pytorch#176767, a wrong output shape)
  attention.causal     is_causal with query length != key length: torch's mask is
                       top-left aligned (query i sees keys 0..i), both L < S and L > S;
                       in one example in four past a 64-row query block (65 to 257 rows:
                       MPS's half-precision prefill kernel, pytorch#195910's causal leak)
  attention.masks      boolean and additive masks (-inf, -1e4, float32's and float16's
                       lowest; with a finite bias) in every broadcast form and layout, at
                       least 2 keys, with fully masked rows: 0 there, and NaN is a failure
                       (transformers#40858, NaN with a 4-D mask); a row wholly at float16's
                       lowest must be a number; query blocks past 64 rows as in causal
  attention.long-kv    one query against 1024 to 4096 keys, a decoding step, in half the
                       examples with grouped-query heads: results wrong past some length, a
                       block of keys read out of bounds or dropped (pytorch#174861, an
                       out-of-bounds access in SDPA's two-pass kernel, grouped heads, half
                       precision)

Besides the drawn examples every profile runs the ones written out in
harness.parity.properties.attention.EXAMPLES (hypothesis's @example): pytorch#195910's and
pytorch#174861's own shapes, prefills past 64 rows, and a fully masked row of each mask kind
and fill that may hide one.

On MPS every member runs torch's own MPS attention kernel, where releases have regressed
(pytorch#163597, SDPA on MPS in torch 2.8): a compare against a baseline run shows which
member and dtype moved.

Every member also draws an explicit scale (half or twice torch's 1/sqrt(E), or muP's 1/E)
or none, non-contiguous views of q, k, v and of the masks (every layout of
harness.parity.properties.examples.LAYOUTS: transposed, permuted, strided, expanded,
channels_last); gqa and value-dim draw no mask, is_causal or a padding mask, long-kv no
mask or a padding mask (torch refuses a mask together with is_causal).

Check ids: ``parity/attention.<member>/<dtype>/<kernel>``, e.g.
``parity/attention.gqa/float16/flash``: the dtype is float32, float16 or bfloat16; the
kernel is the one ``torch.nn.attention.sdpa_kernel`` selects alone: ``math``, ``flash``,
``efficient`` or ``cudnn`` (attention.KERNELS). A target has the checks of the kernels
its kind can select: the CPU (and the stand-ins) math and flash, CUDA all four, MPS math,
flash and efficient. On MPS ``math`` is torch's MPS attention kernel wherever torch routes
its math branch there (inputs without grad and dropout; contiguous ones, and any on
macOS 15 in newer torch), and flash and efficient skip, saying so, where torch offers MPS no
choice of kernel (torch 2.15 among them: attention.unselectable). An example a kernel
cannot run (flash with a value dim of its own, say) is refused by torch's own choice
(``torch._fused_sdp_choice``) and counted, not judged; a check whose kernel ran none of
its examples is a skip with torch's reasons, never a pass. The record's ``examples`` and
``refused`` say how many ran and why the others did not.
"""
import functools

import pytest
from hypothesis import example, given

from harness.core.records import Status, Verdict
from harness.env import devices
from harness.parity.properties import attention as A
from harness.parity.properties.cases import PROPERTY_SETTINGS
from harness.parity.properties.tally import Tally


@pytest.fixture
def attention(case, target, backend, record):
    """The check's runner across hypothesis examples (the same object for each example);
    a skip, with the reason, where the target cannot select the kernel or lacks the dtype."""
    import torch
    if getattr(torch, case.dtype) not in backend.dtypes():
        record.conclude(Verdict(Status.SKIP, message=f"{target} offers no {case.dtype} on this machine (on MPS "
                                                     "bfloat16 needs macOS 14)"))
    kind, kernel = devices.rules_of(target), A.KERNELS[case.kernel]   # the emulated Mac selects as MPS does
    why = A.unselectable(kernel, kind) or (A.gqa_missing() if case.member == "gqa" else None)
    if why:
        record.conclude(Verdict(Status.SKIP, message=why))
    return A.KernelTally(Tally(record, case.dtype, target, devices.place(target)), kernel, kind, record)


def with_examples(member: str):
    """Every example of ``A.EXAMPLES[member]`` (the reports' shapes, and what a derandomized
    ci run of 20 draws may not reach) runs in every profile, before the drawn ones."""
    def add(test):
        for ex in reversed(A.EXAMPLES.get(member, ())):
            test = example(ex=ex)(test)
        return test
    return add


def each_example_then_finish(test):
    """Run the hypothesis test (every example), then let the check conclude: a kernel that
    ran none of them is a skip, not a pass (KernelTally.finish). hypothesis calls the body
    once per example; only here is the last one known to be over."""
    @functools.wraps(test)
    def run(*args, **kwargs):
        test(*args, **kwargs)
        kwargs["attention"].finish()
    return run


@pytest.mark.cases(A.attention_cases("gqa"))
@each_example_then_finish
@PROPERTY_SETTINGS
@given(ex=A.gqa())
def test_grouped_query_heads_read_their_own_key_value_head(case, target, attention, ex):
    attention.check(ex)


@pytest.mark.cases(A.attention_cases("value-dim"))
@each_example_then_finish
@PROPERTY_SETTINGS
@given(ex=A.value_dim())
def test_a_value_dim_of_its_own_gives_that_dim_out(case, target, attention, ex):
    attention.check(ex)


@pytest.mark.cases(A.attention_cases("causal"))
@each_example_then_finish
@PROPERTY_SETTINGS
@given(ex=A.causal())
@with_examples("causal")
def test_causal_attention_between_lengths_that_differ_is_top_left_aligned(case, target, attention, ex):
    attention.check(ex)


@pytest.mark.cases(A.attention_cases("masks"))
@each_example_then_finish
@PROPERTY_SETTINGS
@given(ex=A.masks())
@with_examples("masks")
def test_masks_hide_their_keys_and_a_fully_masked_row_is_zero(case, target, attention, ex):
    attention.check(ex)


@pytest.mark.cases(A.attention_cases("long-kv"))
@each_example_then_finish
@PROPERTY_SETTINGS
@given(ex=A.long_kv())
@with_examples("long-kv")
def test_one_query_against_a_long_key_value_cache(case, target, attention, ex):
    attention.check(ex)
