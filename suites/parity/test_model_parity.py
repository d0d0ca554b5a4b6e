"""Whole-model parity: moving training from the CPU to the target gives the same numbers.

For each built-in model (harness.core.models.MODELS): the outputs, loss and every parameter's
gradient of one step; the loss curve of 10 AdamW steps; greedy generation for the
decoders. The target runs float32 and is judged against the same model in float64 on the
CPU; on an accelerator, the CPU's float32 run is the yardstick (no less accurate than the
CPU also passes) and a failure names its cause (harness/parity/models/runs.py says why).
Greedy tokens are compared with the CPU's. Each run happens in the sandbox child
(harness.parity.models.runs), so a crash or a hang on the device costs that check only;
the verdict is taken here, from the tolerance table, by harness.parity.models.judge.
Half precision, padded and long inputs, and references that cannot share a bug with the
model (sdpa against eager attention, the KV cache against recomputation) are
test_model_inputs.py's.
"""
import pytest

from harness.core import models
from harness.core.records import Category
from harness.parity.models import judge, runs
from harness.parity.numerics.tolerances import TABLE

MODEL_NAMES = list(models.MODELS)
OUTPUTS = TABLE[("model", "float32")]
GRADIENTS = TABLE[("model-grad", "float32")]


def _pair(tol) -> tuple[float, float]:
    return tol.rtol, tol.atol


def _run(sandbox, record, function: str, *args):
    """The child's result; a crash or a hang ends the check here, recorded as such (under parity)."""
    record.category = Category.PARITY
    outcome = sandbox.call(f"harness.parity.models.runs:{function}", *args)
    return record.value_of(outcome, "the run itself")


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_forward_backward(model, target, backend, sandbox, record):
    """Output, loss and every parameter's gradient on the target match the reference's."""
    r = _run(sandbox, record, "forward_backward", model, target, _pair(OUTPUTS), _pair(GRADIENTS))
    record.conclude(judge.judge_forward_backward(r, OUTPUTS, GRADIENTS))


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_training_10_steps(model, target, backend, sandbox, record):
    """10 AdamW steps from the same weights over the same batches: the loss curve stays
    within a bound of float64's that grows by the model tolerance per step
    (judge.curve_bound), or, on an accelerator, no further from it than the CPU's."""
    r = _run(sandbox, record, "train", model, target, runs.STEPS, _pair(OUTPUTS))
    record.conclude(judge.judge_training_run(r, OUTPUTS))


@pytest.mark.parametrize("model", [name for name in MODEL_NAMES if name in runs.DECODERS])
def test_model_greedy_generation(model, target, backend, sandbox, record):
    """Greedy generation gives the reference's tokens; where they part, the reference's
    top two candidates were tied within the tolerance."""
    r = _run(sandbox, record, "generate", model, target, _pair(OUTPUTS), runs.NEW_TOKENS)
    record.conclude(judge.judge_generation_run(r, OUTPUTS))
