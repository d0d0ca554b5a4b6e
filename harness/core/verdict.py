"""One verdict for every check, and the one place that turns it into a pytest outcome.

Each suite's judge (harness.env.env_checks, opsweep, op_judge, bug_check, bug_repeat, techniques) returns
a ``Verdict``; a test body hands it to ``record.conclude(verdict)`` (harness.pytest_plugin.
Recorder), which keeps its category, metrics and message on the record and ends the test
the way its status says. So the statuses mean the same in every suite:

  pass     the check holds; the message, if any, is a finding worth reading (the record's reason)
  xpass    it ran although an expectation said it would not (PyTorch's, a known limit):
           the test passes, the record says xpass
  skip     it does not apply here, or there is nothing to judge; the message says why
  xfail    a known limitation or a documented promise that failed, not a failure of this
           machine's setup (a precision limit, a claim that does not hold here)
  fail     this machine is wrong: the message names the cause and the switch
  crash    the check's process died (a segfault in a kernel): a failure, recorded as crash
  timeout  the check hung and was killed: a failure, recorded as timeout
"""
from __future__ import annotations

import dataclasses

STATUSES = ("pass", "xpass", "skip", "xfail", "fail", "crash", "timeout")


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: str
    category: str | None = None      # the record's category (native, parity, holds ...); None: as it is
    message: str = ""
    metrics: dict = dataclasses.field(default_factory=dict)
    cause: str | None = None         # why it failed, where a judge knows (harness.parity.causes)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}; one of {', '.join(STATUSES)}")


def conclude(record, verdict: Verdict) -> None:
    """Put ``verdict`` on ``record`` and end the test as its status says (raising pytest's
    skip / xfail / fail; returning for pass and xpass)."""
    import pytest
    if verdict.category is not None:
        record.category = verdict.category
    record.metric(**verdict.metrics)
    if verdict.cause is not None:
        record.metric(cause=verdict.cause)
    if verdict.status in ("pass", "xpass"):
        record.note = verdict.message
        if verdict.status == "xpass":
            record.status = "xpass"
        return
    if verdict.status == "skip":
        pytest.skip(verdict.message)
    if verdict.status == "xfail":
        pytest.xfail(verdict.message)
    if verdict.status in ("crash", "timeout"):
        record.status = verdict.status
        pytest.fail(f"{verdict.status}: {verdict.message}", pytrace=False)
    pytest.fail(verdict.message, pytrace=False)
