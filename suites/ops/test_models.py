"""Does this model run natively? One training step of each built-in model on each target.

The aten ops a forward, a backward and an AdamW step dispatch are recorded (a
TorchDispatchMode, harness/ops/audit.py); on MPS the ops that fell back to the CPU are named by
their warnings. Every target also gets the static prediction for MPS from the installed
torch's kernel table: the audited ops that have no MPS kernel and are not composites.
The step runs in the sandbox child, so a crashing kernel costs this check only.
"""
import pytest

from harness.core import models  # cheap: transformers and torch load inside the sandbox child

MODEL_NAMES = list(models.MODELS)


@pytest.fixture(scope="session")
def kernel_table():
    from harness.ops import kernels
    try:
        table = kernels.load_installed().table
    except kernels.KernelsError as exc:
        pytest.skip(f"no kernel table for the installed torch: {exc}")
    return {"mps_ops": set(kernels.mps_ops(table)), "composite_ops": set(kernels.composite_ops(table))}


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_step_runs_natively(model, target, backend, sandbox, record, kernel_table):
    outcome = sandbox.call("harness.ops.audit:audit_builtin", model, target)
    record.value_of(outcome, "the audit itself")
    from harness.ops import audit
    result = outcome.value
    predicted = audit.predict_native(result["ops"], kernel_table["mps_ops"],
                                     composite_ops=kernel_table["composite_ops"])
    record.category = "cpu-fallback" if result["fallback_ops"] else "native"
    record.metric(model=model, attn=result.get("attn_implementation"),
                  ops={phase: len(names) for phase, names in result["ops"].items()},
                  fallback_ops=result["fallback_ops"], optimizer_path=(result.get("optimizer") or {}).get("path"),
                  # ops another device chose for itself (its own SDPA kernel...) carry a note instead
                  predicted_without_mps_kernel=[op for op in predicted["without_kernel"] if op not in predicted["notes"]],
                  predicted_notes=predicted["notes"])
    if result["error"]:
        record.category = "unsupported" if "NotImplementedError" in result["error"] else "n/a"
        pytest.fail(result["error"], pytrace=False)
    assert all(result["ops"][phase] for phase in audit.PHASES), result["ops"]
