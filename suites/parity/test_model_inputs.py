"""Whole-model parity where users get burned: half precision, padding and attention masks, a
long KV cache, and references that cannot share a bug with the model they check.

test_model_parity.py holds the float32 checks on the dataset's rows; this file asks what
users report breaking (NaNs in half precision once a mask hides something, pytorch#182726,
transformers#40858; grouped-query attention mapped wrongly; decoding gone wrong past a
cache length). The inputs (harness/parity/models/inputs.py): a batch of four sentences
padded to the longest, on the right for the encoders and T5, on the LEFT for GPT-2 and
Llama, its last row 4 real tokens of 16; batched greedy generation from prompts of 9, 6, 4
and 2 tokens, left-padded; one prompt of 1,024 tokens on the CPU (longer on an accelerator
with the memory: ``inputs.long_tokens``) for decoding against a long KV cache. Only the
positions that mean something are compared; the loss and the gradients, which a NaN at a
padded position would reach, are compared in full.

Check ids (``parity/<subject>/<variant>``; the variant is the model, then the dtype):

  parity/model_autocast_forward_backward/<model>/<dtype>   output, loss and every gradient
      under torch.autocast in float16 or bfloat16, padded batch, against float64
  parity/model_autocast_training_steps/<model>/<dtype>     3 AdamW steps under autocast
      (GradScaler in float16), the loss curve against float64's
  parity/model_autocast_greedy_generation/<decoder>/<dtype>  greedy generation under
      autocast from the left-padded prompts, tokens and scores against float64's
  parity/model_padded_forward_backward/<model>             float32 on the padded batch
  parity/model_padded_greedy_generation/<decoder>          float32, left-padded prompts
  parity/model_long_greedy_generation/<decoder>            float32, decoding against the long cache
  parity/model_sdpa_vs_eager/<model>                       sdpa against eager attention, padded batch
  parity/model_sdpa_vs_eager_long/<decoder>                sdpa against eager, long cache
  parity/model_kv_cache_vs_recompute/<decoder>             the KV cache against recomputing
      the sequence each step, left-padded prompts
  parity/model_kv_cache_vs_recompute_long/<decoder>        the same against the long cache

How each is judged. The half-precision and float32 checks take float64 on the CPU as the
reference: on the CPU target by the tolerance table (("model", dtype), ("model-grad",
dtype): harness/parity/numerics/tolerances.py, half precision measured); on an accelerator
by accuracy, the CPU's own run in the same precision as the yardstick, and a CPU that
misses float64 where the target does not is recorded as a finding about the CPU
(``cpu_finding``). NaN or inf where float64 has a number fails with the cause
``non-finite`` on every target, never as a precision limit. On the CPU target float64 runs
the same kernels as float32, so a bug that does not depend on the dtype cancels: the
``sdpa_vs_eager`` and ``kv_cache_vs_recompute`` checks compare two computations on the
target that share weights and inputs and differ only where such bugs live, in float32
(harness/parity/models/references.py). The models: all five for the forward checks
(MiniLM, the pretrained one, only where its cost fits: see MINILM_CHECKS), the decoders
(GPT-2, T5, Llama) for generation, GPT-2 and Llama for the long cache (and, in
test_model_long_prompt.py, for a long padded prompt under autocast). The checks whose point is the attention path (sdpa against eager, the cache against
recomputation, generation under autocast) build the models with a head dim of 64, which
MPS's own attention kernels take (harness/parity/models/inputs.py, kernel_model); the
registry's head dims (16, Llama's 8) only ever reach MPSGraph's general path on a Mac. A target that does
not offer autocast in a dtype is skipped with the reason (the CPU's float16 from torch 2.5,
MPS's bfloat16 on macOS 14: harness/parity/models/precision.py).
"""
import pytest

from harness.core import models
from harness.parity.models import inputs, judge, precision, runs
from harness.parity.numerics.tolerances import TABLE

MODEL_NAMES = list(models.MODELS)
# MiniLM (22.7M parameters, float64 reference) costs seconds per check on a 2-core CPU: it
# runs where its real weights say something the tiny BERT cannot (half precision's forward
# and backward, float32 on the padded batch); its attention is the tiny BERT's code.
MINILM_CHECKS = ("autocast_forward_backward", "padded_forward_backward")
OUTPUTS = TABLE[("model", "float32")]
GRADIENTS = TABLE[("model-grad", "float32")]


def _models(check: str) -> list[str]:
    return [name for name in MODEL_NAMES if not models.MODELS[name].pretrained or check in MINILM_CHECKS]


def _pair(tol) -> tuple[float, float]:
    return tol.rtol, tol.atol


def _run(sandbox, record, function: str, *args):
    """The child's result of ``module:function`` under harness.parity.models (judge.run_in_child:
    a crash or a hang ends the check, recorded as such; a string is a skip with that reason)."""
    return judge.run_in_child(sandbox, record, f"harness.parity.models.{function}", *args)


# --------------------------------------------------------------------------- half precision

@pytest.mark.parametrize("precision", precision.HALF)
@pytest.mark.parametrize("model", _models("autocast_forward_backward"))
def test_model_autocast_forward_backward(model, precision, target, backend, sandbox, record):
    """Under autocast on the padded batch: output, loss and every gradient within the
    half-precision tolerance of float64 (no less accurate than the CPU's autocast on an
    accelerator); NaN or inf where float64 has numbers fails as non-finite."""
    out, grad = TABLE[("model", precision)], TABLE[("model-grad", precision)]
    r = _run(sandbox, record, "precision:forward_backward", model, target, precision, _pair(out), _pair(grad))
    record.conclude(judge.judge_forward_backward(r, out, grad))


@pytest.mark.parametrize("precision", precision.HALF)
@pytest.mark.parametrize("model", _models("autocast_training_steps"))
def test_model_autocast_training_steps(model, precision, target, backend, sandbox, record):
    """3 AdamW steps under autocast (GradScaler in float16) on the padded batch: the loss
    curve within (step + 1) x the half-precision rtol of float64's, which skips the steps
    the scaler skipped; a scaler that skips every step fails as non-finite."""
    out = TABLE[("model", precision)]
    r = _run(sandbox, record, "precision:train", model, target, precision, _pair(out))
    record.conclude(judge.judge_training_run(r, out))


@pytest.mark.parametrize("precision", precision.HALF)
@pytest.mark.parametrize("model", [name for name in MODEL_NAMES if name in runs.DECODERS])
def test_model_autocast_greedy_generation(model, precision, target, backend, sandbox, record):
    """Greedy generation under autocast from left-padded prompts of different lengths:
    float64's tokens, parting only where float64's top two were tied within the
    half-precision tolerance; the scores before they part within it."""
    out = TABLE[("model", precision)]
    r = _run(sandbox, record, "precision:generate", model, target, precision, _pair(out))
    record.conclude(judge.judge_generation_run(r, out))


# --------------------------------------------------------------------------- padded and long inputs, float32

@pytest.mark.parametrize("model", _models("padded_forward_backward"))
def test_model_padded_forward_backward(model, target, backend, sandbox, record):
    """Float32 on the padded batch (left-padded for the decoders, a row mostly padding):
    output at the real positions, loss and every gradient against float64."""
    r = _run(sandbox, record, "inputs:forward_backward", model, target, _pair(OUTPUTS), _pair(GRADIENTS))
    record.conclude(judge.judge_forward_backward(r, OUTPUTS, GRADIENTS))


@pytest.mark.parametrize("model", [name for name in MODEL_NAMES if name in runs.DECODERS])
def test_model_padded_greedy_generation(model, target, backend, sandbox, record):
    """Batched greedy generation in float32 from left-padded prompts of 9, 6, 4 and 2 tokens:
    the reference's tokens, parting only at ties."""
    r = _run(sandbox, record, "inputs:generate", model, target, _pair(OUTPUTS), runs.NEW_TOKENS)
    record.conclude(judge.judge_generation_run(r, OUTPUTS))


@pytest.mark.parametrize("model", list(inputs.LONG_DECODERS))
def test_model_long_greedy_generation(model, target, backend, sandbox, record):
    """Greedy decoding in float32 against a KV cache of at least 1,024 tokens: the
    reference's tokens and scores (on the CPU float64, which shares a dtype-independent
    bug: the two checks below do not)."""
    r = _run(sandbox, record, "inputs:generate", model, target, _pair(OUTPUTS), inputs.LONG_NEW_TOKENS, True)
    record.conclude(judge.judge_generation_run(r, OUTPUTS))


# --------------------------------------------------------------------------- references that cannot share the bug

@pytest.mark.parametrize("model", _models("sdpa_vs_eager"))
def test_model_sdpa_vs_eager(model, target, backend, sandbox, record):
    """sdpa attention against eager attention, same weights and padded batch on the target,
    float32: output at the real positions, loss and every gradient."""
    r = _run(sandbox, record, "references:sdpa_vs_eager", model, target, _pair(OUTPUTS), _pair(GRADIENTS))
    record.conclude(judge.judge_forward_backward(r, OUTPUTS, GRADIENTS))


@pytest.mark.parametrize("model", list(inputs.LONG_DECODERS))
def test_model_sdpa_vs_eager_long(model, target, backend, sandbox, record):
    """sdpa against eager attention decoding against the long KV cache: the prefill's and
    every decode step's scores, and the tokens."""
    r = _run(sandbox, record, "references:sdpa_vs_eager_long", model, target, _pair(OUTPUTS))
    record.conclude(judge.judge_generation_run(r, OUTPUTS))


@pytest.mark.parametrize("model", [name for name in MODEL_NAMES if name in runs.DECODERS])
def test_model_kv_cache_vs_recompute(model, target, backend, sandbox, record):
    """Greedy generation reading the KV cache against recomputing the whole sequence at
    every step (use_cache=False), from the left-padded prompts."""
    r = _run(sandbox, record, "references:cache_vs_recompute", model, target, _pair(OUTPUTS))
    record.conclude(judge.judge_generation_run(r, OUTPUTS))


@pytest.mark.parametrize("model", list(inputs.LONG_DECODERS))
def test_model_kv_cache_vs_recompute_long(model, target, backend, sandbox, record):
    """The KV cache against recomputation, decoding against the long cache."""
    r = _run(sandbox, record, "references:cache_vs_recompute", model, target, _pair(OUTPUTS), True)
    record.conclude(judge.judge_generation_run(r, OUTPUTS))
