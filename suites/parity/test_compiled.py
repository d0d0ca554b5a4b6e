"""torch.compile against eager: compiling a training step must not make its numbers worse.

Check ids (stable; the target is the column):

  parity/compiled.<op>/<dtype>/<forward|backward>     e.g. parity/compiled.softmax/float16/backward
  parity/compiled.<model>/float32/forward-backward    e.g. parity/compiled.bert/float32/forward-backward

<op> is an OpInfo name of harness.parity.compiled.OPS (linear, matmul, attention, norms,
activations, the loss, embeddings, reductions, index ops), <dtype> float32, float16 or
bfloat16 where OpInfo declares it for the target; <model> a model of harness.core.models.MODELS.
Each check runs the computation eagerly on the target, through torch.compile (inductor) on
the target, and in float64 on the CPU, in the sandbox child (a crash or a hang costs one
check), and the compiled result must be as accurate as eager's: within the tolerance
table's rules of float64, or no further from it than eager plus rounding
(harness/parity/compiled.py says why, and names the cause of a miss and its switch). A
compiled function that raises where eager computes fails with category compile-failed
and its error's first line; a target that cannot compile (torch too old, no C++ compiler,
no Triton) skips with what to install.

Compiling costs seconds per graph, so these checks carry the marker ``compile`` besides
``parity``: ``-m compile`` (or ``-m "compile and cpu"``) runs them, and the README says
which selections include them.
"""
import pytest

from harness.parity import compiled
from harness.parity.numerics.tolerances import TABLE

pytestmark = pytest.mark.compile

OUTPUTS = TABLE[("model", "float32")]
GRADIENTS = TABLE[("model-grad", "float32")]


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory) -> str:
    """Inductor's cache directory for this run (and pytest worker): nothing compiled by an
    earlier run is reused (harness/parity/compiled.py)."""
    return str(tmp_path_factory.mktemp("inductor-cache"))


@pytest.mark.cases(compiled.op_cases())
def test_compiled_op(case, target, backend, sandbox, record, inductor_cache):
    outcome = sandbox.call("harness.parity.compiled:run_op", case.op_key, target, case.dtype, case.pass_,
                           inductor_cache)
    record.conclude(compiled.judge_op(record.value_of(outcome, "the check itself")))


@pytest.mark.cases(compiled.model_cases())
def test_compiled_model(case, target, backend, sandbox, record, inductor_cache):
    """Output, loss and every parameter's gradient of one compiled training step."""
    outcome = sandbox.call("harness.parity.compiled:run_model", case.model, target, (OUTPUTS.rtol, OUTPUTS.atol),
                           (GRADIENTS.rtol, GRADIENTS.atol), inductor_cache,
                           timeout=max(sandbox.timeout, compiled.MODEL_TIMEOUT_S))
    record.conclude(compiled.judge_model(record.value_of(outcome, "the run itself"), OUTPUTS, GRADIENTS))
