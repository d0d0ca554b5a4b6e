"""A check's record on the pytest side: the ``record`` a test writes into, the one mapping
from a judge's Verdict to pytest's outcome (``conclude``), and the record built from the
test's pytest phases (``build_record``).

A test body runs its check (in the sandbox child where it may crash or hang), hands the
judge's ``Verdict`` (harness.core.records) to ``record.conclude``, and is done: its
category, metrics and message are kept on the ``Recorder``, and the test ends the way the
verdict's status says. After the test, ``outcome_of`` reads the status and the one-line
reason from its setup / call / teardown phases (a crashed xdist worker's ``???`` phase
included) and ``build_record`` makes the run file's check line (the contract:
harness/core/records.py).
"""
from __future__ import annotations

from harness.core import errors, models
from harness.core.records import Category, Identity, Status, Verdict, first_line, strip_prefix, with_cause
from harness.env import devices


class Recorder:
    """What a check reports beyond pass/fail: its category and metrics."""

    def __init__(self):
        self.category: str | None = None
        self.metrics: dict = {}
        # A check that learns its fate out of process (a sandbox child crashed or timed
        # out, or ran although expected to fail) says so here: crash / timeout / xpass.
        self.status: str | None = None
        # What a check that passed (or passed against an expectation) has to say: the
        # record's reason, as a failure's message is (an xpass's expectation, a finding).
        self.note: str = ""

    def metric(self, **values) -> None:
        self.metrics.update(values)

    def value_of(self, outcome, what: str = "the check itself"):
        """A sandbox outcome's value; a crash or a hang is recorded as such and fails the check.
        An emulated device that cannot tell what the device would do (the child raised
        harness.env.devices.BeyondEmulation) skips it with that reason: only the device can."""
        if outcome.kind in (Status.CRASH, Status.TIMEOUT):
            self.conclude(Verdict(outcome.kind, message=outcome.detail))
        if outcome.kind == "raised" and devices.beyond_emulation(outcome.detail):
            self.conclude(devices.cannot_tell(outcome.detail))
        if outcome.kind != "ok":
            # a version gap (harness.core.errors) is a cause with its switch, which its line names already; a
            # model whose files are missing (harness.core.models) is one too, and the line says it and the
            # install: the H100's MiniLM checks read "the run itself failed: OSError: ..." and nothing to do
            seen, found = f"{what} failed: {outcome.detail}", errors.gap_metrics(outcome.detail)
            if not found and (found := models.missing_files(outcome.detail) or models.reference_failed(outcome.detail)):
                seen = with_cause(seen, found)
            self.conclude(Verdict(Status.FAIL, message=seen, metrics=found))
        return outcome.value

    def conclude(self, verdict: Verdict, in_example: bool = False) -> None:
        """Keep ``verdict`` on this record and end the test as its status says (``conclude``)."""
        conclude(self, verdict, in_example)


def conclude(record: Recorder, verdict: Verdict, in_example: bool = False) -> None:
    """Put ``verdict`` on ``record`` and end the test as its status says (raising pytest's
    skip / xfail / fail; returning for pass and xpass). ``in_example``: the check runs in a
    hypothesis example, which a failure must leave as any failure for hypothesis to shrink,
    with pytest's traceback kept: hypothesis writes the failing example there."""
    import pytest
    if verdict.category is not None:
        record.category = verdict.category
    record.metric(**verdict.metrics)
    if verdict.cause is not None:
        record.metric(cause=verdict.cause)
    if verdict.status in Status.WORKS:
        record.note = verdict.message
        if verdict.status == Status.XPASS:
            record.status = Status.XPASS
        return
    if verdict.status == Status.SKIP:
        pytest.skip(verdict.message)
    if verdict.status == Status.XFAIL:
        pytest.xfail(verdict.message)
    if verdict.status in (Status.CRASH, Status.TIMEOUT):
        record.status = verdict.status
        pytest.fail(f"{verdict.status}: {verdict.message}", pytrace=False)
    pytest.fail(verdict.message, pytrace=in_example)


# --------------------------------------------------------------------------- the record from pytest's phases

def outcome_of(phases: list[dict]) -> tuple[str, str]:
    """Status and reason of a check from its pytest phases.

    Each phase: ``when`` (setup / call / teardown, or ``???`` for a crashed worker),
    ``outcome`` (passed / failed / skipped), ``message``, ``wasxfail`` (None or reason).
    """
    status, reason = None, ""
    for ph in phases:
        when, out, msg, xf = ph["when"], ph["outcome"], ph.get("message") or "", ph.get("wasxfail")
        if when == "???":
            return Status.CRASH, first_line(msg) or "the worker process died while running this check"
        if out == "failed" and msg.startswith("Timeout"):
            return Status.TIMEOUT, first_line(msg)
        if when == "setup":
            if out == "failed":
                return Status.ERROR, first_line(msg)
            if out == "skipped":
                status, reason = (Status.XFAIL, first_line(xf)) if xf is not None else (Status.SKIP, first_line(msg))
        elif when == "call":
            if out == "failed":
                status, reason = ((Status.XPASS, first_line(msg)) if "XPASS(strict)" in msg
                                  else (Status.FAIL, first_line(msg)))
            elif out == "skipped":
                status, reason = (Status.XFAIL, first_line(xf)) if xf is not None else (Status.SKIP, first_line(msg))
            else:
                status, reason = (Status.XPASS, first_line(xf)) if xf is not None else (Status.PASS, first_line(msg))
        elif when == "teardown" and out == "failed":
            if status in (None, Status.PASS, Status.XFAIL, Status.XPASS, Status.SKIP):
                status, reason = Status.ERROR, "teardown: " + first_line(msg)
    return status or Status.ERROR, reason


def message_of(longrepr, excinfo=None) -> str:
    """A one-line message for a phase: the skip reason, or the exception's first line."""
    if excinfo is not None:
        try:
            text = excinfo.exconly()
        except Exception:
            text = str(excinfo.value)
        return first_line(strip_prefix(text.strip(), "Failed: ", "Skipped: ", "_pytest.outcomes.Failed: "))
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return first_line(strip_prefix(str(longrepr[2]), "Skipped: "))
    if longrepr is None:
        return ""
    text = str(longrepr)
    return first_line(text.strip().splitlines()[-1] if text.strip() else "")


def clean_xfail(reason: str | None) -> str | None:
    return None if reason is None else strip_prefix(reason, "reason: ")


# What a check may say of itself, and the pytest outcome it must have had for that.
STATUS_OVERRIDES = {Status.CRASH: Status.FAIL, Status.TIMEOUT: Status.FAIL, Status.XPASS: Status.PASS}


def build_record(run_id: str, ident: dict, phases: list[dict], extra: dict, nodeid: str) -> dict:
    status, reason = outcome_of(phases)
    claimed = extra.get("status")
    if claimed in STATUS_OVERRIDES and STATUS_OVERRIDES[claimed] == status:
        status = claimed
    return {
        "kind": "check", "run": run_id,
        "check": Identity(ident["suite"], ident["subject"], ident["variant"], ident["target"]).check,
        "suite": ident["suite"], "subject": ident["subject"], "variant": ident["variant"],
        "target": ident["target"], "status": status,
        "category": extra.get("category") or Category.NA,
        "metrics": extra.get("metrics") or {},
        "reason": reason,
        "duration_s": round(sum(float(p.get("duration") or 0.0) for p in phases), 4),
        "nodeid": nodeid,
    }
