"""The ``workload`` fixture's choice: what ``--workload`` means on a target, decided once.

harness.core.sizing chooses the shape, in the sandbox, where the device is; here that
choice is made once per run and target, kept in the config's stash, and shared by the
xdist workers through a locked file, so every check of a run measures the same shape.
"""
from __future__ import annotations

import json

import pytest

CHOICES = pytest.StashKey[dict]()   # target -> {"name", "setup", "reason"}, per process


def workload_for(request, target: str, sandbox, tmp_path_factory) -> dict:
    """``{"name", "setup", "reason"}`` for ``target`` at this run's ``--workload``; the check
    fails (with the reason) when the shape cannot be chosen there."""
    from filelock import FileLock
    option = request.config.getoption("--workload")
    cache = request.config.stash.setdefault(CHOICES, {})
    if target in cache:
        return cache[target]

    def choose() -> dict:
        outcome = sandbox.call("harness.core.sizing:resolve", option, target)
        if outcome.kind != "ok":
            pytest.fail(f"--workload {option}: choosing the shape on {target} failed ({outcome.kind}): "
                        f"{outcome.detail}", pytrace=False)
        return {k: outcome.value[k] for k in ("name", "setup", "reason")}
    worker = getattr(request.config, "workerinput", None)
    if worker is None:  # one process: nothing to share
        cache[target] = choose()
        return cache[target]
    # xdist: the workers of this session share one choice (the session's testrunuid in the name)
    shared = tmp_path_factory.getbasetemp().parent / f"workload-{worker['testrunuid']}-{option}-{target}.json"
    with FileLock(f"{shared}.lock"):
        if shared.is_file():
            cache[target] = json.loads(shared.read_text())
        else:
            cache[target] = choose()
            shared.write_text(json.dumps(cache[target]))
    return cache[target]
