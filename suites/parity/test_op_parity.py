"""Op parity: every OpInfo op x dtype x pass, the target's numbers against the CPU's.

One check per ``parity/<op>/<dtype>/<forward|backward>``; harness/parity/ops/check.py says
what is compared with what, and judges it. On the ``cpu`` target the comparison is the CPU
in the case's dtype against a float64 reference on the same values, so the suite means
something on a machine without an accelerator. On an accelerator the target is judged by
its accuracy against that reference, with the CPU's own error as the yardstick
(harness.parity.numerics.accuracy.compare_accuracy); a failure names its cause and the
switch that changes it. Each check runs in the sandbox child: a crash or a hang costs that
check only. Every record carries the measured error, the margin and the tolerance (with its
source) it was judged against; a check known to miss float64 on a correct CPU carries its
reason beside the case (``case.known``).
"""
import pytest

from harness.parity.ops import check

CASES = check.cases()


@pytest.mark.cases(CASES)
def test_op_parity(case, target, backend, sandbox, record):
    outcome = sandbox.call("harness.parity.ops.check:run_case", case.op_key, target, case.dtype, case.pass_)
    record.conclude(check.judge(record.value_of(outcome, "the check itself"), case.known))
