"""Regressions injected into the perf suite's processes, for its self-tests: preloaded in every
sandbox child (``MPS_COMPAT_SANDBOX_PRELOAD=tests.perf_faults``, harness.core.isolate), and in the
cold-start processes they start, so the fault is where the measurement is.

``MPS_COMPAT_PERF_FAULTS`` is a comma-separated list of:

  slow:<name>   ``torch.<name>`` computes its result ``SLOW_REPEATS`` times (an op that got
                slower, as ``at::mul_out`` did from torch 2.7 to 2.9); its backward is untouched;
                ``slow:<name>:<times>`` computes it that many times instead (several of them, each
                by its own factor: a broad, uneven slowdown)
  disturbed:<name>[:<times>]  as ``slow:<name>``, in the first process of a run only: a
                neighbour's burst while one process measured (the run's processes share the
                directory ``MPS_COMPAT_PERF_DISTURB_DIR``, where the first to call ``torch.<name>``
                leaves a mark; every later process, the fresh ones that measure a figure again
                among them, computes at full speed)
  leak          every optimizer step keeps ``LEAK_BYTES`` of new tensor alive (a leak that grows
                step by step, as in pytorch#121113)
  serve-leak    every ``torch.nn.functional.embedding`` call under ``torch.inference_mode()`` keeps
                ``LEAK_BYTES`` of new tensor alive (inference whose memory grows request by request,
                as in pytorch#181213); training is untouched
  per-shape     ``torch.nn.functional.embedding`` sleeps ``SHAPE_COST_S`` the first time a table
                sees an input shape (what the MPS graph cache does when it builds a graph per
                shape: per model, so another model's shapes do not count), for a table's first
                ``SHAPE_LIMIT`` shapes: the varying-length run's; the long memory runs, which
                no shape cost can fail, would otherwise sleep for each of their lengths
  bloat         every ``torch.nn.functional.embedding`` call also makes ``BLOAT_BYTES`` of tensor
                on the table's device, held until the next optimizer step (the last
                ``BLOAT_HELD`` of them without one): a step, inference or generation that holds
                more at its peak, and does not grow (an upgrade that saves more for backward)
  cold-serve    the first ``torch.nn.functional.embedding`` call of a process without autograd
                (an inference or a generation) sleeps ``COLD_SERVE_S``: a serving process's first
                request an upgrade made slow; training and every later call are untouched, and the
                warm inference and generation checks discard their first calls, so only
                ``cold-inference`` and ``cold-generate`` can see it

Each fault changes only what it names: the self-tests check that the upgrade check flags
exactly the checks that measure it.
"""
import collections
import functools
import os
import time
import weakref

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

VAR = "MPS_COMPAT_PERF_FAULTS"
DISTURB_DIR_VAR = "MPS_COMPAT_PERF_DISTURB_DIR"
SLOW_REPEATS = 16       # beyond compare's noise allowance on loaded CI (exp(6 x spread), about 3x there, times the
                        # host's drift): at 4x, a candidate run beside another CI worker was said inconclusive
LEAK_BYTES = 2 * 2 ** 20
SHAPE_COST_S = 0.25      # about a step of the small BERT on a loaded 2-core CI machine (150-300 ms): 80 ms fell
                         # inside the tolerance (15% of a step, times the host's drift) there once
SHAPE_LIMIT = 7          # the varying-length run's fixed length and its 6 new ones (harness.perf.models.SHAPE_STEPS)

BLOAT_BYTES = 16 * 2 ** 20   # per lookup: GPT-2 looks up twice a forward, 32 MiB on a small-workload step of ~200 MiB,
                             # beyond perf-peak's 10%
BLOAT_HELD = 4               # lookups held where no optimizer steps (inference, generation): bounded, not a leak

COLD_SERVE_S = 1.0           # several times a small model's first inference on the 2-core VM (about 0.1-0.3 s)

FAULTS = [f for f in os.environ.get(VAR, "").split(",") if f]
_KEPT: list = []          # what the leak keeps alive
_HELD: collections.deque = collections.deque(maxlen=BLOAT_HELD)   # what the bloat holds
_SEEN: dict = {}          # id of a live table -> the shapes the per-shape cost has been paid for


def _slowed(fn, repeats: int = SLOW_REPEATS):
    @functools.wraps(fn)
    def slow(*args, **kwargs):
        for _ in range(repeats - 1):
            fn(*args, **kwargs)
        return fn(*args, **kwargs)
    return slow


def _disturbed(fn, name: str, repeats: int = SLOW_REPEATS):
    """``fn`` slowed ``repeats`` times in the first process of the run to call it (decided at
    that first call, after any fork: the mark is a file created exclusively), else as it is."""
    first: list[bool] = []

    @functools.wraps(fn)
    def disturbed(*args, **kwargs):
        if not first:
            mark = os.path.join(os.environ[DISTURB_DIR_VAR], f"disturbed-{name}")
            try:
                os.close(os.open(mark, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                first.append(True)
            except FileExistsError:
                first.append(False)
        for _ in range(repeats - 1 if first[0] else 0):
            fn(*args, **kwargs)
        return fn(*args, **kwargs)
    return disturbed


def _leak(optimizer, args, kwargs):
    _KEPT.append(torch.ones(LEAK_BYTES // 4))   # written, so the pages are resident


def _per_shape(fn):
    @functools.wraps(fn)
    def embedding(input, weight, *args, **kwargs):
        # per table object, forgotten with it: a new model's table may reuse a freed one's memory
        if id(weight) not in _SEEN:
            _SEEN[id(weight)] = set()
            weakref.finalize(weight, _SEEN.pop, id(weight), None)
        seen = _SEEN[id(weight)]
        if tuple(input.shape) not in seen and len(seen) < SHAPE_LIMIT:
            seen.add(tuple(input.shape))
            time.sleep(SHAPE_COST_S)
        return fn(input, weight, *args, **kwargs)
    return embedding


def _bloated(fn):
    @functools.wraps(fn)
    def embedding(input, weight, *args, **kwargs):
        # made by an op, so the storage count sees it; empty, so it costs the step no time
        _HELD.append(torch.empty(BLOAT_BYTES // 4, device=weight.device))
        return fn(input, weight, *args, **kwargs)
    return embedding


def _serving_leak(fn):
    @functools.wraps(fn)
    def embedding(input, weight, *args, **kwargs):
        if torch.is_inference_mode_enabled():
            _KEPT.append(torch.ones(LEAK_BYTES // 4))   # written, so the pages are resident
        return fn(input, weight, *args, **kwargs)
    return embedding


def _cold_serving(fn):
    served = []

    @functools.wraps(fn)
    def embedding(input, weight, *args, **kwargs):
        if not served and not torch.is_grad_enabled():
            served.append(True)
            time.sleep(COLD_SERVE_S)
        return fn(input, weight, *args, **kwargs)
    return embedding


def _release(optimizer, args, kwargs):
    _HELD.clear()


for fault in FAULTS:
    if fault.startswith("slow:"):
        _, name, *times = fault.split(":")
        setattr(torch, name, _slowed(getattr(torch, name), int(times[0]) if times else SLOW_REPEATS))
    elif fault.startswith("disturbed:"):
        _, name, *times = fault.split(":")
        setattr(torch, name, _disturbed(getattr(torch, name), name, int(times[0]) if times else SLOW_REPEATS))
    elif fault == "leak":
        register_optimizer_step_post_hook(_leak)
    elif fault == "per-shape":
        torch.nn.functional.embedding = _per_shape(torch.nn.functional.embedding)
    elif fault == "serve-leak":
        torch.nn.functional.embedding = _serving_leak(torch.nn.functional.embedding)
    elif fault == "cold-serve":
        torch.nn.functional.embedding = _cold_serving(torch.nn.functional.embedding)
    elif fault == "bloat":
        torch.nn.functional.embedding = _bloated(torch.nn.functional.embedding)
        register_optimizer_step_post_hook(_release)
    else:
        raise ValueError(f"{VAR}: unknown fault {fault!r}; known: slow:<torch function>[:<times>], leak, "
                         "serve-leak, per-shape, bloat, cold-serve")
