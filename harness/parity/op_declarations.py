"""What PyTorch itself declares about comparing an op with the CPU, read from its OpInfo:
the ops its test_compare_cpu skips or expects to differ, and its per-op tolerance overrides
for the device-vs-CPU tests (harness.parity.opparity uses both).
"""
from __future__ import annotations

from harness.parity import tolerances


def _skip_reason(decorator) -> str | None:
    """The reason of a ``unittest.skip(reason)`` decorator, by applying it to a stub."""
    import unittest

    def stub():
        return None
    try:
        decorated = decorator(stub)
    except Exception:
        return None
    if decorated is stub:
        return None
    try:
        decorated()
    except unittest.SkipTest as exc:
        return str(exc) or "skipped"
    except Exception:
        return None
    return None


def pytorch_compare_cpu(op, device_type: str, dtype) -> tuple[str, str] | None:
    """What PyTorch's ``TestCommon.test_compare_cpu`` declares for this op on ``device_type``.

    ("skip", reason) for outputs PyTorch does not compare with the CPU, ("xfail", "") for
    a known mismatch, None for no declaration.
    """
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        try:
            active = info.is_active("TestCommon", "test_compare_cpu", device_type, dtype, {})
        except TypeError:  # older signature without param_kwargs
            active = info.is_active("TestCommon", "test_compare_cpu", device_type, dtype)
        if not active:
            continue
        for dec in info.decorators:
            if getattr(dec, "__name__", "") == "expectedFailure" or dec is __import__("unittest").expectedFailure:
                return ("xfail", "")
            reason = _skip_reason(dec)
            if reason is not None:
                return ("skip", reason)
    return None


def pytorch_tolerance(op, device_type: str, dtype, pass_: str) -> tolerances.Tolerance | None:
    """PyTorch's own per-op tolerance for comparing this device with the CPU, if it has one.

    The ``toleranceOverride`` decorators of the OpInfo for the device-vs-CPU tests:
    ``TestConsistency.test_output_match`` / ``test_output_grad_match`` (test_mps.py) on
    MPS, ``TestCommon.test_compare_cpu`` elsewhere.
    """
    if device_type == "mps":
        where = ("TestConsistency", "test_output_grad_match" if pass_ == "backward" else "test_output_match")
    else:
        where = ("TestCommon", "test_compare_cpu")
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != where[1] or getattr(info, "cls_name", None) != where[0]:
            continue
        try:
            active = info.is_active(where[0], where[1], device_type, dtype, {})
        except TypeError:
            active = info.is_active(where[0], where[1], device_type, dtype)
        for dec in info.decorators if active else ():
            tol = getattr(dec, "d", {}).get(dtype)
            if tol is not None:
                return tolerances.Tolerance(tol.rtol, tol.atol, f"PyTorch's toleranceOverride for {op.name} "
                                                                f"in {where[0]}.{where[1]} ({device_type})")
    return None
