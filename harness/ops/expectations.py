"""PyTorch's own expectations of MPS failures, read from the installed torch.

``torch.testing._internal.common_mps`` holds PyTorch's lists of ops (and dtypes) its MPS
consistency test expects to fail or skips: ``mps_ops_modifier`` for the forward test
(``TestConsistency.test_output_match``) and ``mps_ops_grad_modifier`` for the gradient test
(``test_output_grad_match``). They work by appending ``DecorateInfo`` entries to OpInfos.
This module runs them on shallow copies of the OpInfos and reads back only what they
added, so nothing of PyTorch's lists is copied here and every torch version answers for
itself.

The module defines the modifiers only when MPS is available (no-op stubs elsewhere). On a
machine without MPS it is loaded from its source with ``is_available`` reporting True and
``MACOS_VERSION`` set to the macOS the expectations should describe, so a Linux machine
can still show what PyTorch expects on a Mac.
"""
from __future__ import annotations

import copy
import importlib.util
import unittest
from unittest import mock

TESTS = {"forward": ("TestConsistency", "test_output_match", "mps_ops_modifier"),
         "backward": ("TestConsistency", "test_output_grad_match", "mps_ops_grad_modifier")}
DEFAULT_MACOS = 15.0


class Expectations:
    """(op_key, dtype, pass) -> "xfail" or "skip"; absent means PyTorch expects a pass."""

    def __init__(self, table: dict, source: str, available: bool, note: str = ""):
        self.table = table
        self.source = source
        self.available = available
        self.note = note

    def get(self, op_key: str, dtype: str, pass_: str) -> str | None:
        return self.table.get((op_key, dtype, pass_))

    def __len__(self) -> int:
        return len(self.table)


def _load_common_mps(macos: float):
    import torch
    spec = importlib.util.find_spec("torch.testing._internal.common_mps")
    if spec is None:
        return None, "torch.testing._internal.common_mps does not exist in this torch"
    if torch.backends.mps.is_available():
        return importlib.import_module("torch.testing._internal.common_mps"), "installed torch (MPS available)"
    from torch.testing._internal import common_utils
    module = importlib.util.module_from_spec(spec)
    with mock.patch.object(torch.backends.mps, "is_available", return_value=True), \
            mock.patch.object(common_utils, "MACOS_VERSION", macos):
        spec.loader.exec_module(module)
    return module, f"installed torch, read as for macOS {macos:g} (MPS absent here)"


def _kind(decorator) -> str | None:
    if decorator is unittest.expectedFailure:
        return "xfail"
    # unittest.skip("why") gives a closure; common_mps also passes unittest.skip itself
    if decorator is unittest.skip or getattr(decorator, "__qualname__", "").startswith("skip."):
        return "skip"
    return None


def _active(info, cls_name, test_name, dtype) -> bool:
    try:
        return bool(info.is_active(cls_name, test_name, "mps", dtype, {}))
    except TypeError:  # older torch: is_active without param_kwargs
        return bool(info.is_active(cls_name, test_name, "mps", dtype))


def load(op_table: dict, dtypes: tuple[str, ...], macos: float = DEFAULT_MACOS) -> Expectations:
    """Expectations for every op of ``op_table`` (op_key -> OpInfo) and dtype."""
    import torch
    try:
        module, source = _load_common_mps(macos)
    except Exception as exc:  # a module that cannot be read here is reported, not fatal
        return Expectations({}, "unavailable", False, f"common_mps could not be read: {type(exc).__name__}: {exc}")
    if module is None:
        return Expectations({}, "unavailable", False, source)
    table: dict = {}
    for pass_, (cls_name, test_name, modifier_name) in TESTS.items():
        modifier = getattr(module, modifier_name, None)
        if modifier is None:
            continue
        keys = list(op_table)
        originals = [op_table[k] for k in keys]
        copies = [copy.copy(op) for op in originals]
        modifier(copies)
        for key, orig, mod in zip(keys, originals, copies):
            added = tuple(mod.decorators)[len(tuple(orig.decorators)):]
            for info in added:
                kinds = [k for k in map(_kind, getattr(info, "decorators", ())) if k]
                if not kinds:
                    continue
                for dtype in dtypes:
                    if _active(info, cls_name, test_name, getattr(torch, dtype)):
                        # a skip wins over an xfail: PyTorch does not even run it
                        prev = table.get((key, dtype, pass_))
                        table[(key, dtype, pass_)] = "skip" if "skip" in (prev, *kinds) else "xfail"
    return Expectations(table, source, True)


def disagreement(expected: str | None, category: str) -> str | None:
    """How a measured category disagrees with PyTorch's expectation, if it does.

    PyTorch's xfail covers "raises or mismatches the CPU"; a check that ran natively against
    an xfail is an unexpected pass for coverage (the parity suite judges the numbers).
    """
    ran = category in ("native", "cpu-fallback")
    if expected == "xfail" and ran:
        return "unexpected pass"
    if expected is None and not ran:
        return "unexpected failure"
    return None
