"""Speed and memory on the target, as figures a later run of the same machine is compared with.

Three tables (harness/perf): op time (``perf/<op>/<dtype>/<pass>``, harness/perf/ops.py),
model time (``perf/model-<arch>/<train-step|inference|generate|cold-start|varying-length>``,
harness/perf/models.py) and memory over a long run (``perf/memory-<arch>/<loop|trainer>``,
harness/perf/memory.py). Each check is measured in the sandbox child at the target's
workload shape (``--workload``) and recorded with its interval, its rounds, its clock and the
control's reading: a time is a pass whose category says whether its interval is narrow
(``timed``) or not (``noisy``); memory that keeps growing fails. What a time means comes from
comparing it with a baseline of the same machine (``./compat baseline -m perf``, then
``./compat candidate ...``; the rules are in harness/report/compare.py).
"""
import pytest

from harness.perf import memory, models, ops

# Sandbox time limits (seconds): a cold start runs several fresh interpreters.
TIMEOUT = {"op": 300, "model": 900, "cold-start": 1800, "memory": 1200}


def _where(workload: dict) -> dict:
    return {"workload": workload["name"], "workload_shape": workload["setup"]}


@pytest.mark.cases(ops.CASES)
def test_op_time(case, target, backend, sandbox, record, workload):
    """One op's forward or backward (or the AdamW step) at the workload's shapes."""
    record.metric(**_where(workload))
    skip = case.not_timed(target, backend)
    if skip is not None:
        record.conclude(skip)
    outcome = sandbox.call("harness.perf.ops:run_case", case.op, case.dtype, case.pass_, target, workload["name"],
                           timeout=TIMEOUT["op"])
    record.conclude(ops.judge(record.value_of(outcome, "the timing")))


@pytest.mark.cases(models.CASES)
def test_model_time(case, target, backend, sandbox, record, workload):
    """An architecture's step, inference, generation, cold start or per-shape cost."""
    record.metric(**_where(workload))
    skip = case.not_timed()
    if skip is not None:
        record.conclude(skip)
    outcome = sandbox.call("harness.perf.models:measure", case.arch, case.what, target, workload["name"],
                           timeout=TIMEOUT["cold-start" if case.what == "cold-start" else "model"])
    record.conclude(models.judge(record.value_of(outcome, "the timing")))


@pytest.mark.cases(memory.CASES)
def test_memory_over_a_long_run(case, target, backend, sandbox, record, workload):
    """Memory read after every step of a long training run: does it keep growing?"""
    record.metric(**_where(workload))
    outcome = sandbox.call("harness.perf.memory:measure", case.arch, case.entry, target, workload["name"],
                           timeout=TIMEOUT["memory"])
    record.conclude(memory.judge(record.value_of(outcome, "the long run")))
