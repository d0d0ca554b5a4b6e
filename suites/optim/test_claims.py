"""Every documented optimization, measured on the target against the document's claim.

One check per claim and quantity (``optim/<claim>/<memory|time>``, and ``.../trainer`` where
the claim also goes through the Trainer), driven by the claims table (harness/optim/claims.py:
the source, the claimed ratio, its tolerance, the gates, where each is measured, the cases)
and measured in the sandbox child by harness/optim/techniques.py (the plain-PyTorch loop) or
trainer_runs.py (the Trainer) with harness/optim/measure.py and ratios.py: peak memory by
counting storages (deterministic), time by interleaved rounds with a bootstrap interval.
The record's category is the verdict: ``holds`` (a pass), ``does-not-hold`` or
``inconclusive`` (recorded as expected failures, with the measured ratio and interval: the
document's promise is what failed, not the run). Where the document makes no claim for the
target, or a gate keeps the technique away (a package, a torch or macOS version, a device
capability), the check is skipped with the reason (``ClaimCase.not_measured``). An emulated
device (``--device standin-mps`` with ``-p tests.standins``) is judged by the rules of the
device it emulates (harness.env.devices.rules_of: the claims, the bounds and the gates of
``mps``) and by its recorded machine's facts (``claims.gate_facts``), and measured through its
own context, queue and memory API in the sandbox child.
"""
import sys

import pytest

from harness.env import devices
from harness.optim import claims, same_result, seedpath, techniques

# Sandbox time limit of one measurement (seconds), by workload.
TIMEOUT = {"small": 600, "medium": 1800, "large": 3600}
# Where each entry point measures, in the sandbox child.
MEASURE = {claims.LOOP: "harness.optim.techniques:measure_claim",
           claims.TRAINER: "harness.optim.trainer_runs:measure_trainer_claim"}


def _path_family(request, target: str) -> tuple[str, ...]:
    """The checks of seed 003's path (harness.optim.seedpath.FAMILY) this session runs on
    ``target``: each path claim's time check and the path itself. They are timed together in
    the sandbox child, each row once per round, so every one of them asks for the same family
    (a -k that keeps one of them times only the rows it needs)."""
    wanted = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if params.get("target") != target or getattr(item, "module", None) is not sys.modules[__name__]:
            continue   # another suite's check in the same session (env's case is an EnvCheck)
        case = params.get("case")
        if item.originalname == "test_seed_003_path_never_raises_peak_memory":
            wanted.add(seedpath.PATH)
        elif isinstance(case, claims.ClaimCase) and case.entry == claims.LOOP and case.quantity == "time":
            wanted.add(case.subject)
    return tuple(name for name in seedpath.FAMILY if name in wanted)


def _limit(scale: str, check: str, family: tuple[str, ...]) -> float:
    """The sandbox limit of one call: TIMEOUT, or for a member of the path's family (which may
    be the one that times the whole family) TIMEOUT for each member: each keeps its own."""
    return TIMEOUT[scale] * (len(family) if check in family else 1)


def _workload_metrics(workload: dict) -> dict:
    """The workload a record was measured at: its name (part of where the result belongs:
    harness.core.records.workload_of), the shape, and why that shape.

    Put on the record before the measurement starts: a measurement that raises (out of
    memory) or crashes ends the test on the spot, and the record keeps only the metrics it
    already held. Without the workload it would belong to the bare target ("cpu", not "cpu
    [small workload]") and an upgrade check would list it apart from the baseline's result,
    as a check that appeared, never as the regression it is."""
    return {"workload": workload["name"], "shape": workload["setup"], "workload_reason": workload["reason"]}


@pytest.mark.cases(claims.CASES)
def test_documented_optimization(case, target, backend, env_facts, sandbox, record, workload, request):
    """A claim's quantity through the plain-PyTorch loop, or through transformers' Trainer
    and the documented TrainingArguments flags (the ``.../trainer`` checks)."""
    rules = devices.rules_of(target)
    record.metric(**case.metrics(rules))
    skip = case.not_measured(rules, claims.gate_facts(target, env_facts))
    if skip is not None:
        record.conclude(skip)
    scale = workload["name"]
    record.metric(**_workload_metrics(workload))
    family = _path_family(request, target) if case.entry == claims.LOOP else ()
    extra = (family,) if case.entry == claims.LOOP else ()   # the Trainer's claims are timed pair by pair
    outcome = sandbox.call(MEASURE[case.entry], case.subject, case.quantity, target, scale, *extra,
                           timeout=_limit(scale, case.subject if case.quantity == "time" else "", family))
    run = record.value_of(outcome, "the measurement")
    record.conclude(techniques.claim_verdict(run, case.document, _workload_metrics(workload)))


def test_seed_003_path_never_raises_peak_memory(target, backend, sandbox, record, request, workload):
    """Seed 003's table, reproduced: baseline, + gradient accumulation, + checkpointing,
    + Adafactor, + freezing, + a halved max length; peak memory must not rise row by row."""
    scale = workload["name"]
    record.metric(**_workload_metrics(workload))
    family = _path_family(request, target)
    outcome = sandbox.call("harness.optim.seedpath:seed_003_path", target, scale, family,
                           timeout=_limit(scale, seedpath.PATH, family))
    rows = record.value_of(outcome, "the measurement")
    table = seedpath.path_table(rows, claims.SEED_003_PATH)
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    if reporter is not None and capture is not None:  # printed past pytest's output capture
        with capture.global_and_fixture_disabled():
            reporter.write_line("")
            reporter.write_line(f"{claims.SEED_003_PATH.title}, on {target} ({scale} workload: {workload['setup']}):")
            for line in table.splitlines():
                reporter.write_line(line)
    record.conclude(seedpath.path_verdict(rows, _workload_metrics(workload)))


@pytest.mark.parametrize("technique", same_result.TECHNIQUES)
def test_optimization_keeps_the_result(technique, target, backend, env_facts, sandbox, record):
    """Gradient accumulation gives the big batch's gradients, checkpointing and compile the
    same gradients; freezing and LoRA train exactly the parameters they should."""
    skip = claims.not_applicable(technique, devices.rules_of(target), claims.gate_facts(target, env_facts), via="torch")
    if skip is not None:
        record.conclude(skip)
    outcome = sandbox.call("harness.optim.same_result:keeps_the_result", technique, target, timeout=TIMEOUT["small"])
    record.conclude(same_result.same_result_verdict(record.value_of(outcome, "the measurement"), technique))
