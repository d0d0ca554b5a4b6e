"""Whole-model parity with the model's weights in half precision: ``model.half()`` or
``from_pretrained(..., torch_dtype=torch.float16)``, how users run inference on a Mac in half
the memory.

test_model_inputs.py's half-precision checks run under torch.autocast, which keeps the
norms, the softmax and the reductions in float32 and the attention mask float32's. With the
weights in the half dtype nothing is kept: the residual sums, the norms and the softmax
compute in float16 or bfloat16, and transformers fills a float16 model's attention mask
with float16's lowest value (-65504), where a kernel that adds the mask in float16
overflows. That is where users report NaNs once a batch is padded (pytorch#182726,
transformers#40858). These checks run inference (no gradients) on the padded batch and the
left-padded prompts of harness/parity/models/inputs.py, by the models with a head dim of 64,
which MPS's own attention kernels take (inputs.kernel_model).

Check ids (``parity/<subject>/<variant>``; the variant is the model, then the dtype):

  parity/model_half_weights_forward/<model>/<dtype>            inference on the padded batch:
      the output at the real positions and the loss against float64
  parity/model_half_weights_greedy_generation/<decoder>/<dtype>  greedy generation from the
      left-padded prompts of 9, 6, 4 and 2 tokens (T5: its padded encoder input)
  parity/model_half_weights_long_prompt/<decoder>/<dtype>      greedy generation from two
      prompts of 193 and 130 tokens, left-padded: a prefill past MPS's 64-row query blocks

How each is judged (harness/parity/models/judge.py): on the CPU target by the half weights'
tolerances against float64 (("model-weights", dtype): harness/parity/numerics/tolerances.py,
measured); on an accelerator by accuracy, the CPU's own run with its weights in the same
dtype as the yardstick. NaN or inf where float64 has a number fails as non-finite on every
target; a miss that float32 weights mend is reduced precision or, past 16x the CPU's own
error in the dtype, the half kernel's own (harness/parity/numerics/causes.py), each with the
switch for a model in half weights. A target that does not run the dtype is skipped with
the reason (MPS's bfloat16 needs macOS 14: harness/parity/models/precision.py,
weights_unsupported).
"""
import pytest

from harness.core import models
from harness.parity.models import inputs, judge, precision, runs
from harness.parity.numerics.tolerances import TABLE


def _run(sandbox, record, function: str, *args):
    """The child's result of ``precision.<function>`` (judge.run_in_child: a string is a skip)."""
    return judge.run_in_child(sandbox, record, f"harness.parity.models.precision:{function}", *args)


def _pair(tol) -> tuple[float, float]:
    return tol.rtol, tol.atol


@pytest.mark.parametrize("precision_", precision.HALF)
@pytest.mark.parametrize("model", list(models.MODELS))
def test_model_half_weights_forward(model, precision_, target, backend, sandbox, record):
    """Inference with the weights in float16 or bfloat16 on the padded batch: the output at
    the real positions and the loss within the half weights' tolerance of float64 (no less
    accurate than the CPU's own run in the dtype on an accelerator); NaN or inf fails."""
    out = TABLE[("model-weights", precision_)]
    r = _run(sandbox, record, "half_weights_forward", model, target, precision_, _pair(out))
    record.conclude(judge.judge_forward_backward(r, out, out))


@pytest.mark.parametrize("precision_", precision.HALF)
@pytest.mark.parametrize("model", list(runs.DECODERS))
def test_model_half_weights_greedy_generation(model, precision_, target, backend, sandbox, record):
    """Greedy generation with the weights in the dtype from left-padded prompts of different
    lengths: float64's tokens, parting only where float64's top two were tied within the
    tolerance; the scores before they part within it."""
    out = TABLE[("model-weights", precision_)]
    r = _run(sandbox, record, "half_weights_generate", model, target, precision_, _pair(out))
    record.conclude(judge.judge_generation_run(r, out))


@pytest.mark.parametrize("precision_", precision.HALF)
@pytest.mark.parametrize("model", list(inputs.LONG_DECODERS))
def test_model_half_weights_long_prompt(model, precision_, target, backend, sandbox, record):
    """Greedy generation with the weights in the dtype from prompts of 193 and 130 tokens,
    left-padded: a prefill of more query rows than MPS's 64-row blocks, its padding rows
    fully masked (with float16's -65504 in a float16 model), then decoding against it."""
    out = TABLE[("model-weights", precision_)]
    r = _run(sandbox, record, "half_weights_generate", model, target, precision_, _pair(out),
             precision.LONG_NEW_TOKENS, True)
    record.conclude(judge.judge_generation_run(r, out))
