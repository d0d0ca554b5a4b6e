"""Op coverage and CPU fallback: every OpInfo op x dtype x pass on each target.

One check per ``ops/<op>/<dtype>/<forward|backward>``. Each runs in the sandbox child (a
crash or hang costs that check only) and is classified native / cpu-fallback /
unsupported / error / crash / timeout. On MPS the result is held against PyTorch's own
expectations (torch.testing._internal.common_mps, read by harness.ops.declarations): an
expected failure is an xfail, a check that disagrees is marked "unexpected pass" or
"unexpected failure".
"""
import pytest

from harness.ops import opsweep

CASES = opsweep.cases()


@pytest.fixture(scope="session")
def pytorch_expectations():
    from harness.ops import declarations
    return declarations.mps_expectations(declarations.op_table(), opsweep.OP_DTYPES)


@pytest.mark.cases(CASES)
def test_op_runs_on_target(case, target, backend, sandbox, record, request):
    outcome = sandbox.call("harness.ops.opsweep:run_case", case.op_key, target, case.dtype, case.pass_)
    expected = None
    if target == "mps":
        expected = request.getfixturevalue("pytorch_expectations").get(case.op_key, case.dtype, case.pass_)
    record.conclude(opsweep.judge(opsweep.run_of(outcome), expected, on_mps=target == "mps"))
