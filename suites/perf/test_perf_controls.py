"""The perf suite's controls, first on every target: does the memory reading move by a known
allocation, and does the suite's clock see 8x the work take longer?

One check per control (``perf/controls/<name>``), in the sandbox child (harness/env/
instruments.py): the memory readings perf's long runs take (devices.backend) and the storage
count its model checks are weighed by (harness.optim.measure, read by the optimization suite's
own memory control, harness/optim/controls.py), and perf's clock (harness.env.timing.Clock: the
device's events where it has them), timed alone on the machine as every perf measurement is. A control that fails marks the column "instrument not
trustworthy here" and the perf figures there as unconfirmed (harness/report).
"""
import pytest

from harness.env import instruments

CASES = instruments.table({instruments.MEMORY: ("harness.optim.controls:memory_sees_allocation",),
                           instruments.TIMING: ("harness.env.instruments:timing_sees_queued_work", "clock", True)})


@pytest.mark.cases(CASES)
def test_control(case, target, backend, sandbox, record):
    record.metric(**instruments.metrics_before(case.name))
    outcome = sandbox.call(case.entry, target, *case.args)
    record.conclude(instruments.verdict(record.value_of(outcome, f"the control {case.name}")))
