"""Does this model run natively? One training step of each built-in model on each target.

The aten ops a forward, a backward and an AdamW step dispatch are recorded (a
TorchDispatchMode, harness/ops/audit.py); on MPS the ops that fell back to the CPU are named
by their warnings. Every target also gets the static prediction for MPS from the installed
torch's kernel table: the audited ops that have no MPS kernel and are not composites.
The step runs in the sandbox child, so a crashing kernel costs this check only; the
verdict is harness.ops.audit.judge_builtin's.
"""
import pytest

from harness.core import models  # cheap: transformers and torch load inside the sandbox child
from harness.core.records import Status, Verdict

MODEL_NAMES = list(models.MODELS)


@pytest.fixture(scope="session")
def kernel_table():
    """The installed torch's MPS kernel table, or why there is none (then the checks skip with it)."""
    from harness.ops import kernels
    try:
        table = kernels.load_installed().table
    except kernels.KernelsError as exc:
        return Verdict(Status.SKIP, message=f"no kernel table for the installed torch: {exc}")
    return {"mps_ops": set(kernels.mps_ops(table)), "composite_ops": set(kernels.composite_ops(table))}


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_step_runs_natively(model, target, backend, sandbox, record, kernel_table):
    if isinstance(kernel_table, Verdict):
        record.conclude(kernel_table)
    outcome = sandbox.call("harness.ops.audit:audit_builtin", model, target)
    result = record.value_of(outcome, "the audit itself")
    from harness.ops import audit
    record.conclude(audit.judge_builtin(model, result, kernel_table["mps_ops"], kernel_table["composite_ops"]))
