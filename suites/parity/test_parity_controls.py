"""The parity suite's controls, first on every target: does an exact result pass the judge,
a result moved by 2^-10 fail it, and is the reference float64, on the CPU, and exact?

One check per control (``parity/controls/<name>``), made with the suite's own reference and
judge on the device (harness/parity/controls.py), in the sandbox child. A control that fails
marks the column "instrument not trustworthy here" and the parity verdicts there as
unconfirmed (harness/report).
"""
import pytest

from harness.env import instruments
from harness.parity import controls


@pytest.mark.cases(controls.cases())
def test_control(case, target, backend, sandbox, record):
    record.metric(**instruments.metrics_before(case.name))
    outcome = sandbox.call(case.entry, target, *case.args)
    record.conclude(instruments.verdict(record.value_of(outcome, f"the control {case.name}")))
