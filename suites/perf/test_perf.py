"""Speed and memory on the target, as figures a later run of the same machine is compared with.

Three tables (harness/perf): op time (``perf/<op>/<dtype>/<pass>``, harness/perf/ops.py),
model time (``perf/model-<arch>/<train-step|inference|generate|cold-start|cold-inference|cold-generate|varying-length>``,
harness/perf/models.py) and memory over a long run (``perf/memory-<arch>/<loop|trainer>``,
harness/perf/memory.py). Each check is measured in the sandbox child at the target's
workload shape (``--workload``) and recorded with its interval, its rounds, its clock and the
control's reading: a time is a pass whose category says whether its interval is narrow
(``timed``) or not (``noisy``); memory that keeps growing fails. What a time means comes from
comparing it with a baseline of the same machine (``./compat baseline -m perf``, then
``./compat candidate ...``; the rules are in harness/report/compare.py). With ``--baseline``,
a figure that looks like a regression is measured again in fresh processes before it is
recorded, and the fastest is kept: interference only adds time, a real slowdown is in every
process. With ``--save-baseline`` (``./compat baseline``) every op and warm model time is
measured so (a cold start already takes its figure over several processes): no later
run can measure the old version's figure again, and a baseline figure a neighbour slowed
would hide the candidate's slowdown or read as its improvement.
"""
import pytest

from harness.perf import against, memory, models, ops

# Sandbox time limits (seconds): a cold start runs several fresh interpreters.
TIMEOUT = {"op": 300, "model": 900, "cold-start": 1800, "memory": 1200}


def _where(workload: dict) -> dict:
    return {"workload": workload["name"], "workload_shape": workload["setup"]}


def _timed(case, target, workload, sandbox, record, baseline_of, keeping_baseline, entry, args, judge, timeout):
    """Measure in the sandbox child and judge; with ``--baseline``, a figure that looks like a
    regression is measured again in fresh processes first, and with ``--save-baseline`` every
    op and warm model time is (harness.perf.against.confirmed: the fastest is kept; kept_again)."""
    run = record.value_of(sandbox.call(entry, *args, timeout=timeout), "the timing")
    verdict = judge(run)
    check = f"perf/{case.subject}/{case.variant}"
    base, there, here = baseline_of(check, f"{target} [{workload['name']} workload]")
    keep = keeping_baseline and against.kept_again(check, verdict)
    if keep or against.looks_slower(base, check, verdict, there, here):
        runs = [run]
        for _ in range(against.BASELINE_CONFIRMATIONS if keep else against.CONFIRMATIONS):
            sandbox.restart()
            runs.append(record.value_of(sandbox.call(entry, *args, timeout=timeout), "the timing"))
        verdict = against.confirmed(runs, judge, for_baseline=keep)
    record.conclude(verdict)


@pytest.mark.cases(ops.CASES)
def test_op_time(case, target, backend, sandbox, record, workload, baseline_of, keeping_baseline):
    """One op's forward or backward (or the AdamW step) at the workload's shapes."""
    record.metric(**_where(workload))
    skip = case.not_timed(target, backend)
    if skip is not None:
        record.conclude(skip)
    _timed(case, target, workload, sandbox, record, baseline_of, keeping_baseline, "harness.perf.ops:run_case",
           (case.op, case.dtype, case.pass_, target, workload["name"]), ops.judge, TIMEOUT["op"])


@pytest.mark.cases(models.CASES)
def test_model_time(case, target, backend, sandbox, record, workload, baseline_of, keeping_baseline):
    """An architecture's step, inference, generation, cold start or per-shape cost."""
    record.metric(**_where(workload))
    skip = case.not_timed()
    if skip is not None:
        record.conclude(skip)
    _timed(case, target, workload, sandbox, record, baseline_of, keeping_baseline, "harness.perf.models:measure",
           (case.arch, case.what, target, workload["name"]), models.judge,
           TIMEOUT["cold-start" if case.what in models.COLD else "model"])


@pytest.mark.cases(memory.CASES)
def test_memory_over_a_long_run(case, target, backend, sandbox, record, workload):
    """Memory read after every step of a long training run: does it keep growing?"""
    record.metric(**_where(workload))
    outcome = sandbox.call("harness.perf.memory:measure", case.arch, case.entry, target, workload["name"],
                           timeout=TIMEOUT["memory"])
    record.conclude(memory.judge(record.value_of(outcome, "the long run")))
