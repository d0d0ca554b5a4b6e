"""A test-only pytest plugin (-p tests.optim_sabotage): the optimization suite measures
sabotaged techniques (see tests/optim_mutants.py)."""
from harness.core import isolate

_real_call = isolate.Sandbox.call


def _sabotaged_call(self, target, *args, timeout=None):
    if target == "harness.optim.techniques:measure_claim":
        target = "tests.optim_mutants:measure_claim_sabotaged"
    elif target == "harness.optim.trainer_runs:measure_trainer_claim":
        target = "tests.optim_mutants:measure_trainer_claim_sabotaged"
    elif target == "harness.optim.same_result:keeps_the_result":
        target = "tests.optim_mutants:keeps_the_result_sabotaged"
    return _real_call(self, target, *args, timeout=timeout)


isolate.Sandbox.call = _sabotaged_call
