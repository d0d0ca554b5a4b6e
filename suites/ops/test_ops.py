"""Op coverage and CPU fallback: every OpInfo op x dtype x pass on each target.

One check per ``ops/<op>/<dtype>/<forward|backward>``. Each runs in the sandbox child (a
crash or hang costs that check only) and is classified native / cpu-fallback /
unsupported / error / crash / timeout. On MPS the result is held against PyTorch's own
expectations (torch.testing._internal.common_mps, read by harness.ops.declarations): an
expected failure is an xfail, a check that disagrees is marked "unexpected pass" or
"unexpected failure"; a backward check that failed in the op's forward takes the forward's
expectation. The emulated Mac (``--device standin-mps``, -p tests.standins) is held
against the same expectations, read for its recorded Mac's macOS.
"""
import pytest

from harness.env import devices
from harness.ops import opsweep

CASES = opsweep.emulated(opsweep.cases())


@pytest.mark.cases(CASES)
def test_op_runs_on_target(case, target, backend, sandbox, record):
    outcome = sandbox.call("harness.ops.opsweep:run_case", case.op_key, target, case.dtype, case.pass_)
    on_mps = devices.rules_of(target) == "mps"
    expectations = opsweep.pytorch_expectations(target) if on_mps else None
    expected = expectations.get(case.op_key, case.dtype, case.pass_) if on_mps else None
    forward = expectations.get(case.op_key, case.dtype, "forward") if on_mps and case.pass_ == "backward" else None
    record.conclude(opsweep.judge(opsweep.run_of(outcome), expected, on_mps=on_mps, forward_expected=forward))
