"""A test-only pytest plugin (-p tests.sabotage) that breaks chosen op checks on purpose.

MPS_COMPAT_SABOTAGE_CRASH / _HANG name op keys (comma-separated) whose sandboxed run is
replaced by a child that aborts / sleeps. The suite must record them as crash / timeout
and carry on with their neighbours.
"""
import os

from harness.core import isolate

_real_call = isolate.Sandbox.call


def _names(var):
    return {n for n in os.environ.get(var, "").split(",") if n}


def _sabotaged_call(self, target, *args, timeout=None):
    if target == "harness.ops.opsweep:run_case":
        if args[0] in _names("MPS_COMPAT_SABOTAGE_CRASH"):
            return _real_call(self, "tests.sandbox_targets:aborts")
        if args[0] in _names("MPS_COMPAT_SABOTAGE_HANG"):
            return _real_call(self, "tests.sandbox_targets:hangs", timeout=2)
    return _real_call(self, target, *args, timeout=timeout)


isolate.Sandbox.call = _sabotaged_call
