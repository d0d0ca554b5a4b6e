"""Whole-model parity under autocast on a long padded prompt: a half-precision prefill past
MPS's 64-row query blocks.

test_model_inputs.py's autocast checks read prompts of at most 16 tokens (and 8 new ones), so
in float16 and bfloat16 no model check had more than 64 query rows, one block of MPS's
half-precision prefill kernel (Metal's performance primitives, 64 rows a block, float16 and
bfloat16 only: aten/src/ATen/native/mps/operations/Attention.mm). This check generates
greedily from two prompts of 193 and 130 tokens, left-padded to the longer
(harness/parity/models/inputs.py, long_padded_prompts): the prefill crosses three 64-row
blocks, its 63 padding rows are fully masked, and the decoding steps read a cache of about
200 keys. The models have a head dim of 64, which MPS's own kernels take (inputs.kernel_model).

Check id (``parity/<subject>/<variant>``; the variant is the model, then the dtype):

  parity/model_autocast_long_prompt/<decoder>/<dtype>   greedy generation under autocast from
      the long padded prompts, tokens and scores against float64's (GPT-2 and Llama)

Judged as test_model_inputs.py's autocast generation (harness/parity/models/judge.py): on the
CPU target by the half-precision tolerances against float64, on an accelerator by accuracy
with the CPU's own autocast run as the yardstick; NaN or inf where float64 has a number fails
as non-finite, and a miss that float32 mends but half precision cannot explain is the half
kernel's own (harness/parity/numerics/causes.py, half-kernel). A target that does not offer
autocast in a dtype is skipped with the reason.
"""
import pytest

from harness.parity.models import inputs, judge, precision
from harness.parity.numerics.tolerances import TABLE


@pytest.mark.parametrize("precision_", precision.HALF)
@pytest.mark.parametrize("model", list(inputs.LONG_DECODERS))
def test_model_autocast_long_prompt(model, precision_, target, backend, sandbox, record):
    """Greedy generation under autocast from two prompts of 193 and 130 tokens, left-padded:
    the prefill has more query rows than one of MPS's 64-row query blocks in half precision,
    and the padding rows are fully masked; float64's tokens and scores."""
    out = TABLE[("model", precision_)]
    run = judge.run_in_child(sandbox, record, "harness.parity.models.precision:generate_long", model, target,
                             precision_, (out.rtol, out.atol))
    record.conclude(judge.judge_generation_run(run, out))
