"""A check's record from its pytest phases: status, reason and metrics as JSON.

``outcome_of`` reads the status and one-line reason from the setup / call / teardown
phases (a crashed xdist worker's ``???`` phase included); ``build_record`` makes the run
file's check line from them (harness/core/records.py has the contract). ``message_of``,
``first_line`` and ``error_line`` make the one-line reasons; ``json_safe`` makes a
metric plain JSON.
"""
from __future__ import annotations

import math

from harness.core.identity import Identity

REASON_MAX = 600


def strip_prefix(text: str, *prefixes: str) -> str:
    """``text`` without the first of ``prefixes`` it starts with."""
    for p in prefixes:
        if text.startswith(p):
            return text[len(p):]
    return text


def first_line(text: str | None) -> str:
    text = (text or "").strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= REASON_MAX else line[:REASON_MAX - 1] + "…"


def error_line(exc: BaseException, limit: int = REASON_MAX) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:limit]


def outcome_of(phases: list[dict]) -> tuple[str, str]:
    """Status and reason of a check from its pytest phases.

    Each phase: ``when`` (setup / call / teardown, or ``???`` for a crashed worker),
    ``outcome`` (passed / failed / skipped), ``message``, ``wasxfail`` (None or reason).
    """
    status, reason = None, ""
    for ph in phases:
        when, out, msg, xf = ph["when"], ph["outcome"], ph.get("message") or "", ph.get("wasxfail")
        if when == "???":
            return "crash", first_line(msg) or "the worker process died while running this check"
        if out == "failed" and msg.startswith("Timeout"):
            return "timeout", first_line(msg)
        if when == "setup":
            if out == "failed":
                return "error", first_line(msg)
            if out == "skipped":
                status, reason = ("xfail", first_line(xf)) if xf is not None else ("skip", first_line(msg))
        elif when == "call":
            if out == "failed":
                status, reason = ("xpass", first_line(msg)) if "XPASS(strict)" in msg else ("fail", first_line(msg))
            elif out == "skipped":
                status, reason = ("xfail", first_line(xf)) if xf is not None else ("skip", first_line(msg))
            else:
                status, reason = ("xpass", first_line(xf)) if xf is not None else ("pass", first_line(msg))
        elif when == "teardown" and out == "failed":
            if status in (None, "pass", "xfail", "xpass", "skip"):
                status, reason = "error", "teardown: " + first_line(msg)
    return status or "error", reason


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


def json_safe(value, depth: int = 0):
    """Plain JSON for a metric: NaN and infinities as strings, unknown objects by str().

    Metrics cross from an xdist worker to the controller and end in a JSON file; neither
    takes a torch.dtype or a float NaN as it is.
    """
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < 6 and isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if depth < 6 and isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        try:
            return json_safe(value.item(), depth + 1)
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


# What a check may say of itself, and the pytest outcome it must have had for that.
STATUS_OVERRIDES = {"crash": "fail", "timeout": "fail", "xpass": "pass"}


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
        "category": extra.get("category") or "n/a",
        "metrics": extra.get("metrics") or {},
        "reason": reason,
        "duration_s": round(sum(float(p.get("duration") or 0.0) for p in phases), 4),
        "nodeid": nodeid,
    }
