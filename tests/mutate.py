"""A test-only pytest plugin (-p tests.mutate): the parity suite runs on a wrong softmax.

Every ``harness.parity.ops.check:run_case`` call of the suite is redirected to
tests.mutants:run_case_with_wrong_softmax in the sandbox child.
"""
from harness.core import isolate

_real_call = isolate.Sandbox.call


def _mutated_call(self, target, *args, timeout=None):
    if target == "harness.parity.ops.check:run_case":
        target = "tests.mutants:run_case_with_wrong_softmax"
    return _real_call(self, target, *args, timeout=timeout)


isolate.Sandbox.call = _mutated_call
