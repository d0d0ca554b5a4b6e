"""The ops suite's controls, first on every target: is the fallback seen, is a native op
native, is the fallback warning seen again after torch has given it once?

One check per control (``ops/controls/<name>``), each with an answer known from this torch's
kernel table and run in the sandbox child through the suite's own classification and capture
(harness/ops/controls.py). A control that fails marks the column "instrument not trustworthy
here" and the ops verdicts there as unconfirmed (harness/report).
"""
import pytest

from harness.env import instruments
from harness.ops import controls


@pytest.mark.cases(controls.cases())
def test_control(case, target, backend, sandbox, record):
    record.metric(**instruments.metrics_before(case.name))
    outcome = sandbox.call(case.entry, target, *case.args)
    record.conclude(instruments.verdict(record.value_of(outcome, f"the control {case.name}")))
