"""Known accelerator bugs: the wrong results users reported, run on this machine.

"Is my accelerator as right as my CPU" at the sizes and in the situations where users
found it was not: a dimension just past 2^15 or 2^16, a result that depends on what the
allocator held before, a reduction that goes wrong in rapid succession. Each case comes
from an issue in PyTorch's tracker (harness/parity/known_bugs/cases.py has the table: the
issue, the shapes, the versions it names) and gives two checks per dtype:

  parity/<case>/<dtype>/known-bug    the case on the target against float64 with the CPU as
                                     the yardstick (the parity rules); raising where the CPU
                                     computes fails too
  parity/<case>/<dtype>/repeatable   the same op on the same inputs gives the same bits back
                                     to back and after the allocator was churned

On the CPU target the case runs against float64 (the suite works on any machine); on an
accelerator at the largest of the case's sizes its memory allows. Each check runs in the
sandbox child: a crash or a hang costs that check only.
"""
import pytest

from harness.core.records import RecordKind
from harness.parity.known_bugs import cases, check


@pytest.mark.cases(cases.checks(RecordKind.KNOWN_BUG))
def test_known_bug(case, target, backend, sandbox, record):
    outcome = sandbox.call("harness.parity.known_bugs.check:run_case", case.case.name, target, case.dtype)
    record.metric(**cases.source_metrics(case.case))
    record.conclude(check.judge(record.value_of(outcome, "the check itself")))


@pytest.mark.cases(cases.checks(RecordKind.REPEATABLE))
def test_repeatable(case, target, backend, sandbox, record):
    outcome = sandbox.call("harness.parity.known_bugs.check:run_repeatability", case.case.name, target, case.dtype)
    record.metric(**cases.source_metrics(case.case, RecordKind.REPEATABLE))
    record.conclude(check.judge_repeatability(record.value_of(outcome, "the check itself")))
