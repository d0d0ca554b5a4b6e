"""Known attention bugs: the wrong results users reported against an accelerator's own
attention kernels, run on this machine beside the attention family (test_attention.py).

Each case comes from PyTorch's tracker (harness/parity/known_bugs/cases.py, ATTENTION_CASES:
the issue or pull request, the shapes, the versions it names) and gives the two checks of
every known bug (suites/parity/test_known_bugs.py says how they are judged):

  parity/<case>/<dtype>/known-bug    the case on the target against float64 with the CPU as
                                     the yardstick, first and after a dirty allocator cache
                                     (freed blocks full of NaN: a kernel that reads past its
                                     keys meets them)
  parity/<case>/<dtype>/repeatable   the same bits back to back and after the cache was churned

The cases: pytorch#174861, grouped-query decoding against 1024 keys in half precision (MPS's
two-pass decoding kernel, torch 2.8 to 2.10), and pytorch#169222, a decoding step against a
key length that is not a multiple of 32 (MPS's decoding kernels read the last partial block
past the keys). Their stand-ins: ``-p tests.half_attention_faults --device
standin-gqa-long-half`` and ``standin-decode-tail``.
"""
import pytest

from harness.core.records import RecordKind
from harness.parity.known_bugs import cases, check


@pytest.mark.cases(cases.checks(RecordKind.KNOWN_BUG, cases.ATTENTION_CASES))
def test_known_attention_bug(case, target, backend, sandbox, record):
    outcome = sandbox.call("harness.parity.known_bugs.check:run_case", case.case.name, target, case.dtype)
    record.metric(**cases.source_metrics(case.case))
    record.conclude(check.judge(record.value_of(outcome, "the check itself")))


@pytest.mark.cases(cases.checks(RecordKind.REPEATABLE, cases.ATTENTION_CASES))
def test_attention_repeatable(case, target, backend, sandbox, record):
    outcome = sandbox.call("harness.parity.known_bugs.check:run_repeatability", case.case.name, target, case.dtype)
    record.metric(**cases.source_metrics(case.case, RecordKind.REPEATABLE))
    record.conclude(check.judge_repeatability(record.value_of(outcome, "the check itself")))
