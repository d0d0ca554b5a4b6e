"""The optimization suite's controls, first on every target: does its memory measurement see
a known allocation, its timer 8x the work, and a quarter of the batch a lower peak?

One check per control (``optim/controls/<name>``), measured in the sandbox child with the
suite's own instruments (harness/optim/controls.py, harness/env/instruments.py). A control
that fails marks the column "instrument not trustworthy here" and the optimization verdicts
there as unconfirmed (harness/report).
"""
import pytest

from harness.env import instruments
from harness.optim import controls


@pytest.mark.cases(controls.cases())
def test_control(case, target, backend, sandbox, record):
    record.metric(**instruments.metrics_before(case.name))
    outcome = sandbox.call(case.entry, target, *case.args)
    record.conclude(instruments.verdict(record.value_of(outcome, f"the control {case.name}")))
