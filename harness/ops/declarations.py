"""What PyTorch declares about its ops, read from the installed torch: one reader for the
ops and parity suites.

PyTorch's OpInfo database (``torch.testing._internal.common_methods_invocations.op_db``) is
the op table (``op_table``): each entry knows its dtypes per device type, whether it
supports autograd, how to make sample inputs, and carries ``DecorateInfo`` entries that
say, per test class, test, device type and dtype (``DecorateInfo.is_active``), what
PyTorch's own tests expect. This module reads those declarations; nothing of PyTorch's
lists is copied here, so every torch version answers for itself:

  device_only          OpInfo entries decorated onlyCUDA / onlyCPU (the jiterator ops)
  mps_expectations     ``torch.testing._internal.common_mps``: the ops (and dtypes) PyTorch's
                       MPS consistency test expects to fail or skips, forward
                       (``TestConsistency.test_output_match``, ``mps_ops_modifier``) and
                       gradient (``test_output_grad_match``, ``mps_ops_grad_modifier``); the
                       ops suite holds each MPS cell against them
  compare_cpu          what ``TestCommon.test_compare_cpu`` declares: outputs PyTorch does not
                       compare with the CPU (a skip, with PyTorch's reason) or a known mismatch
  tolerance_override   PyTorch's own per-op tolerance for the device-vs-CPU tests

The common_mps modifiers work by appending DecorateInfo entries to OpInfos: they are run on
shallow copies and only what they added is read. The module defines the modifiers only
when MPS is available (no-op stubs elsewhere); on a machine without MPS it is loaded from
its source with ``is_available`` reporting True and ``MACOS_VERSION`` set to the macOS the
expectations should describe, so a Linux machine can still show what PyTorch expects on a
Mac.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import importlib.util
import unittest
from typing import NamedTuple
from unittest import mock

from harness.core.records import Category

XFAIL, SKIP = "xfail", "skip"
MPS_TESTS = {"forward": ("TestConsistency", "test_output_match", "mps_ops_modifier"),
             "backward": ("TestConsistency", "test_output_grad_match", "mps_ops_grad_modifier")}
COMPARE_CPU = ("TestCommon", "test_compare_cpu")
DEFAULT_MACOS = 15.0


# --------------------------------------------------------------------------- the op table

@contextlib.contextmanager
def hypothesis_profile_kept():
    """A block that imports PyTorch's test utilities, without their side effect on hypothesis.

    ``torch.testing._internal.common_utils`` (which op_db and common_device_type import)
    loads PyTorch's own hypothesis profile when it is imported: "dev" (10 examples), or
    "pytorch_ci" where the CI variable is set. Loaded during collection, it would stay in
    force for every property test made after it, whose settings take what they do not name
    from the profile loaded when they are made: on a first run (no cached op table, so
    op_db is imported at collection) the property checks drew 10 examples instead of the
    ci profile's 20. The profile loaded before the block is loaded again after it.
    """
    from hypothesis import settings
    current = getattr(settings, "get_current_profile_name", None)   # hypothesis >= 6.140
    before = current() if current is not None else None
    try:
        yield
    finally:
        if before is not None and current() != before:
            settings.load_profile(before)


def op_key(op) -> str:
    """An OpInfo's key: its name, and its variant when it has one ("nn.functional.conv2d", "var_mean.unbiased")."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@functools.lru_cache(maxsize=1)
def op_table() -> dict:
    """op_key -> OpInfo, from the installed torch (imported once per process)."""
    with hypothesis_profile_kept():
        from torch.testing._internal.common_methods_invocations import op_db
    return {op_key(op): op for op in op_db}


def device_only(op) -> str | None:
    """The device type an OpInfo entry runs on alone (decorated onlyCUDA / onlyCPU), or None."""
    with hypothesis_profile_kept():
        from torch.testing._internal import common_device_type as cdt
    for dec in op.decorators:
        if dec is getattr(cdt, "onlyCUDA", None):
            return "cuda"
        if dec is getattr(cdt, "onlyCPU", None):
            return "cpu"
    return None


# --------------------------------------------------------------------------- reading a DecorateInfo

def is_active(info, cls_name: str, test_name: str, device_type: str, dtype) -> bool:
    """``DecorateInfo.is_active`` on any torch: older ones take no ``param_kwargs``."""
    try:
        return bool(info.is_active(cls_name, test_name, device_type, dtype, {}))
    except TypeError:
        return bool(info.is_active(cls_name, test_name, device_type, dtype))


def declared(decorator) -> tuple[str, str] | None:
    """What one decorator of a DecorateInfo declares: (XFAIL, "") for an expected failure,
    (SKIP, reason) for a skip (``unittest.skip("why")``, which common_mps also passes as
    ``unittest.skip`` itself), None for anything else (a tolerance override ...). A skip's
    reason is read by applying the decorator to a stub and calling it."""
    if decorator is unittest.expectedFailure or getattr(decorator, "__name__", "") == "expectedFailure":
        return XFAIL, ""

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
        return SKIP, str(exc) or "skipped"
    except Exception:
        return None
    return None


# --------------------------------------------------------------------------- PyTorch's MPS expectations

@dataclasses.dataclass
class Expectations:
    """(op_key, dtype, pass) -> XFAIL or SKIP; absent means PyTorch expects a pass."""
    table: dict
    source: str
    available: bool
    note: str = ""

    def get(self, key: str, dtype: str, pass_: str) -> str | None:
        return self.table.get((key, dtype, pass_))

    def __len__(self) -> int:
        return len(self.table)


def _load_common_mps(macos: float):
    import torch
    spec = importlib.util.find_spec("torch.testing._internal.common_mps")
    if spec is None:
        return None, "torch.testing._internal.common_mps does not exist in this torch"
    if torch.backends.mps.is_available():
        with hypothesis_profile_kept():
            return importlib.import_module("torch.testing._internal.common_mps"), "installed torch (MPS available)"
    with hypothesis_profile_kept():
        from torch.testing._internal import common_utils
    module = importlib.util.module_from_spec(spec)
    with mock.patch.object(torch.backends.mps, "is_available", return_value=True), \
            mock.patch.object(common_utils, "MACOS_VERSION", macos), hypothesis_profile_kept():
        spec.loader.exec_module(module)
    return module, f"installed torch, read as for macOS {macos:g} (MPS absent here)"


def mps_expectations(table: dict, dtypes: tuple[str, ...], macos: float = DEFAULT_MACOS) -> Expectations:
    """PyTorch's MPS expectations for every op of ``table`` (op_key -> OpInfo) and dtype."""
    import torch
    try:
        module, source = _load_common_mps(macos)
    except Exception as exc:  # a module that cannot be read here is reported, not fatal
        return Expectations({}, "unavailable", False, f"common_mps could not be read: {type(exc).__name__}: {exc}")
    if module is None:
        return Expectations({}, "unavailable", False, source)
    found: dict = {}
    for pass_, (cls_name, test_name, modifier_name) in MPS_TESTS.items():
        modifier = getattr(module, modifier_name, None)
        if modifier is None:
            continue
        keys = list(table)
        originals = [table[k] for k in keys]
        copies = [copy.copy(op) for op in originals]
        modifier(copies)
        for key, orig, mod in zip(keys, originals, copies):
            added = tuple(mod.decorators)[len(tuple(orig.decorators)):]
            for info in added:
                kinds = [d[0] for d in map(declared, getattr(info, "decorators", ())) if d]
                if not kinds:
                    continue
                for dtype in dtypes:
                    if is_active(info, cls_name, test_name, "mps", getattr(torch, dtype)):
                        # a skip wins over an xfail: PyTorch does not even run it
                        prev = found.get((key, dtype, pass_))
                        found[(key, dtype, pass_)] = SKIP if SKIP in (prev, *kinds) else XFAIL
    return Expectations(found, source, True)


def disagreement(expected: str | None, category: str) -> str | None:
    """How a measured category disagrees with PyTorch's expectation, if it does.

    PyTorch's xfail covers "raises or mismatches the CPU"; a check that ran natively against
    an xfail is an unexpected pass for coverage (the parity suite judges the numbers).
    """
    ran = category in Category.RAN
    if expected == XFAIL and ran:
        return "unexpected pass"
    if expected is None and not ran:
        return "unexpected failure"
    return None


# --------------------------------------------------------------------------- comparing with the CPU

def compare_cpu(op, device_type: str, dtype) -> tuple[str, str] | None:
    """What PyTorch's ``TestCommon.test_compare_cpu`` declares for this op on ``device_type``:
    (SKIP, reason) for outputs PyTorch does not compare with the CPU, (XFAIL, "") for a
    known mismatch, None for no declaration."""
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != COMPARE_CPU[1]:
            continue
        if not is_active(info, *COMPARE_CPU, device_type, dtype):
            continue
        for dec in info.decorators:
            found = declared(dec)
            if found is not None:
                return found
    return None


class Override(NamedTuple):
    """A per-op tolerance PyTorch declares (a ``toleranceOverride``), with where it is declared."""
    rtol: float
    atol: float
    source: str


def tolerance_override(op, device_type: str, dtype, pass_: str) -> Override | None:
    """PyTorch's own per-op tolerance for comparing this device with the CPU, if it has one.

    The ``toleranceOverride`` decorators of the OpInfo for the device-vs-CPU tests:
    ``TestConsistency.test_output_match`` / ``test_output_grad_match`` (test_mps.py) on
    MPS, ``TestCommon.test_compare_cpu`` elsewhere.
    """
    if device_type == "mps":
        where = MPS_TESTS["backward" if pass_ == "backward" else "forward"][:2]
    else:
        where = COMPARE_CPU
    for info in getattr(op, "decorators", ()):
        if getattr(info, "test_name", None) != where[1] or getattr(info, "cls_name", None) != where[0]:
            continue
        for dec in info.decorators if is_active(info, *where, device_type, dtype) else ():
            tol = getattr(dec, "d", {}).get(dtype)
            if tol is not None:
                return Override(tol.rtol, tol.atol, f"PyTorch's toleranceOverride for {op.name} in "
                                                    f"{where[0]}.{where[1]} ({device_type})")
    return None
