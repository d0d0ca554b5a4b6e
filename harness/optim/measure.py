"""The one place that measures: peak memory, memory anatomy, time comparisons with verdicts.

Memory is measured the same way on every device, by counting tensor storage bytes
(``MemoryTracker``), not by asking an allocator: the CPU has no allocator peak, MPS keeps
none before torch 2.13, and a caching allocator's numbers depend on what it cached before.
Counting storages gives the same bytes for the same step every time, so a memory claim
needs one measurement per variant. Where the device does have an allocator counter, its
reading is recorded beside ours (``allocator_peak``) as a cross-check, never as the value.

Time cannot be made deterministic, so ``compare_time`` interleaves the baseline and the
variant (A B B A ...), keeps per-round durations, and judges the median ratio by a seeded
bootstrap confidence interval; an undecided claim buys more rounds until its budget is
spent and is then reported ``inconclusive``, never passed.

Every public function returns plain data (dicts of str / int / float / lists), so a result
can travel out of a sandbox child as JSON.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import operator
import statistics
import threading
import time
import weakref
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from harness.ops.audit import call_model, loss_of

# Memory categories, in precedence order: a storage that is both a parameter and saved for
# backward (a weight saved by linear) is a parameter; whatever carries no label is a temporary.
CATEGORIES = ("parameters", "buffers", "gradients", "optimizer_state", "batch", "activations", "temporaries")
VERDICTS = ("holds", "does not hold", "inconclusive")  # what judge() can say
CPU_NO_PEAK = ("the CPU allocator keeps no peak counter, and process RSS also holds the allocator's free "
               "lists and the Python heap: too noisy to compare bytes; the tracked storage peak is the value")


# --------------------------------------------------------------------------- storage tracking

def _storage(t):
    """The untyped storage of a dense tensor; None for sparse, nested, meta or wrapper tensors."""
    if not isinstance(t, torch.Tensor) or t.is_meta or t.layout != torch.strided:
        return None
    try:
        return t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None


def _tensors(sources) -> Iterable[torch.Tensor]:
    """Every tensor in a tensor / module / optimizer state / nested container."""
    if isinstance(sources, torch.Tensor):
        yield sources
    elif isinstance(sources, torch.nn.Module):
        yield from sources.parameters()
        yield from sources.buffers()
    elif isinstance(sources, Mapping):
        for value in sources.values():
            yield from _tensors(value)
    elif isinstance(sources, (list, tuple, set)) or hasattr(sources, "__next__"):
        for value in sources:
            yield from _tensors(value)


def state_bytes(sources) -> int:
    """Bytes of the distinct storages held by ``sources`` (e.g. ``optimizer.state``), each once."""
    seen: dict = {}
    for t in _tensors(sources):
        st = _storage(t)
        if st is not None:
            seen[(t.device.type, t.device.index, st.data_ptr())] = st.nbytes()
    return sum(seen.values())


@functools.lru_cache(maxsize=None)
def storage_outlives_its_python_object() -> bool:
    """True when torch keeps a storage's Python object alive as long as the storage itself.

    The tracker hangs its free-callback on the storage's Python object; that is only right
    if the object dies with the C++ storage, not when the last Python name for it goes.
    torch preserves the object (as it does a tensor's); this checks it on the running torch,
    once per process (it is a property of the build).
    """
    t = torch.empty(1)
    ref = weakref.ref(t.untyped_storage())
    gc.collect()
    alive_with_tensor = ref() is not None
    del t
    gc.collect()
    return alive_with_tensor and ref() is None


class MemoryTracker(TorchDispatchMode):
    """Live and peak bytes of tensor storages, counted from the ops that create them.

    Every tensor an op returns while the mode is active is looked at; each distinct storage
    (device, data pointer) is counted once, at ``storage.nbytes()``, so a view adds nothing.
    A ``weakref.finalize`` on the storage subtracts it when torch frees it. Tensors that
    already exist are counted with ``adopt`` (parameters, optimizer state, the batch), so
    the peak is the whole resident set, comparable to an allocator's.

    The mode sees backward: the autograd engine runs the backward ops with the caller's
    thread-local state, which carries the dispatch-mode stack (at::ThreadLocalState), and
    gradients are op outputs. Optimizer steps (single-tensor, foreach, fused) create their
    state with ops (``zeros_like``) the mode sees; ``torch.tensor`` shows as ``lift_fresh``.

    Blind spots: memory an op uses inside its kernel and frees before returning (matmul or
    attention workspaces, cuBLAS / MPSGraph scratch), allocator rounding and caching, memory
    outside tensors (the autograd graph's nodes, Python objects), tensors created by code
    that bypasses the dispatcher (``torch.from_numpy`` of a new array, C++ extensions
    allocating raw), and resident tensors nobody adopted. Sparse, nested and wrapper
    subclass tensors (DTensor) are skipped.

    ``mark(phase)`` labels the events that follow, so the peak reports its phase.
    ``label(category, tensors)`` files live storages under a CATEGORIES name.
    """

    def __init__(self):
        super().__init__()
        if not storage_outlives_its_python_object():
            raise RuntimeError(f"torch {torch.__version__} frees a storage's Python object before the storage: "
                               "a finalizer on it cannot see when the memory goes, so this tracker cannot count")
        self._lock = threading.RLock()   # finalizers may run on the autograd engine's device threads
        self._live: dict[tuple, list] = {}    # key -> [serial, nbytes, finalizer]
        self._sizes: dict[int, int] = {}      # serial -> largest nbytes seen
        self._labels: dict[int, str] = {}     # serial -> category
        self._events: list[tuple[int, int]] = []  # (serial, +/- bytes), in order
        self._serial = 0
        self._phase = "setup"
        self._peak_event = 0
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_phase = "setup"
        self.baseline_bytes = 0

    # -- counting
    def adopt(self, *sources, category: str | None = None) -> "MemoryTracker":
        """Count tensors that exist already (modules give parameters and buffers)."""
        for t in _tensors(sources):
            serial = self._see(t)
            if serial is not None and category is not None:
                self._label(serial, category)
        return self

    def _see(self, t) -> int | None:
        storage = _storage(t)
        if storage is None or storage.nbytes() == 0:
            return None
        key = (storage.device.type, storage.device.index, storage.data_ptr())
        nbytes = storage.nbytes()
        with self._lock:
            entry = self._live.get(key)
            if entry is not None:
                if nbytes != entry[1]:  # resize_ / an out= op grew the storage in place
                    self._change(entry[0], nbytes - entry[1])
                    entry[1] = nbytes
                    self._sizes[entry[0]] = max(self._sizes[entry[0]], nbytes)
                return entry[0]
            self._serial += 1
            serial = self._serial
            fin = weakref.finalize(storage, self._free, key, serial)
            fin.atexit = False
            self._live[key] = [serial, nbytes, fin]
            self._sizes[serial] = nbytes
            self._change(serial, nbytes)
            return serial

    def _free(self, key, serial) -> None:
        with self._lock:
            entry = self._live.get(key)
            if entry is not None and entry[0] == serial:
                del self._live[key]
                self._change(serial, -entry[1])

    def _change(self, serial: int, delta: int) -> None:
        self.live_bytes += delta
        self._events.append((serial, delta))
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._peak_event = len(self._events)
            self.peak_phase = self._phase

    # -- labels
    def mark(self, phase: str) -> None:
        self._phase = phase

    def label(self, category: str, tensors) -> None:
        """File the live storages of ``tensors`` under ``category`` (earlier CATEGORIES win)."""
        for t in _tensors(tensors):
            storage = _storage(t)
            if storage is None:
                continue
            entry = self._live.get((storage.device.type, storage.device.index, storage.data_ptr()))
            if entry is not None:
                self._label(entry[0], category)

    def _label(self, serial: int, category: str) -> None:
        if category not in CATEGORIES:
            raise ValueError(f"unknown memory category {category!r}; known: {', '.join(CATEGORIES)}")
        old = self._labels.get(serial)
        if old is None or CATEGORIES.index(category) < CATEGORIES.index(old):
            self._labels[serial] = category

    def totals(self) -> dict[str, int]:
        """Bytes per category over the whole window (each storage once, at its largest size)."""
        out = dict.fromkeys(CATEGORIES[:-1], 0)
        for serial, category in self._labels.items():
            out[category] += self._sizes[serial]
        return out

    def at_peak(self) -> dict[str, int]:
        """Bytes per category live at the peak moment; they sum to ``peak_bytes``."""
        live: dict[int, int] = {}
        for serial, delta in self._events[: self._peak_event]:
            live[serial] = live.get(serial, 0) + delta
        out = dict.fromkeys(CATEGORIES, 0)
        for serial, nbytes in live.items():
            out[self._labels.get(serial, "temporaries")] += nbytes
        return out

    # -- mode
    def __enter__(self):
        self.baseline_bytes = self.live_bytes
        return super().__enter__()

    def __exit__(self, *exc):
        """Stop counting: later frees no longer move the numbers."""
        result = super().__exit__(*exc)
        with self._lock:
            for _, _, fin in self._live.values():
                fin.detach()
            self._live.clear()
        return result

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self._see(t)
        return out


def measure_memory(step: Callable[..., Any], adopt: Iterable = (), *, resident: dict | None = None,
                   labelled: bool = False) -> dict:
    """Peak live storage bytes of ``step()``, counting the tensors in ``adopt`` as resident.

    ``resident`` (category -> tensors: parameters, buffers, optimizer_state, batch) adopts
    what lives between steps under its CATEGORIES name, so the peak can say what it is made
    of. With ``labelled``, ``step`` is called with the tracker, to mark its phases
    (``tracker.mark("forward")`` ...) and label what it creates (``tracker.label``).

    Returns ``peak_bytes`` (resident included), ``baseline_bytes`` (resident at the start),
    ``end_bytes`` (live when ``step`` returned; its result is still referenced then),
    ``peak_phase`` (the phase marked when the peak was reached; "step" when unmarked) and
    ``at_peak`` (category -> bytes live at the peak moment, summing to ``peak_bytes``;
    whatever no category claims is a temporary).
    """
    gc.collect()
    tracker = MemoryTracker().adopt(adopt)
    for category, sources in (resident or {}).items():
        tracker.adopt(sources, category=category)
    with tracker:
        tracker.mark("step")
        result = step(tracker) if labelled else step()
        end = tracker.live_bytes
    del result
    return {"peak_bytes": tracker.peak_bytes, "baseline_bytes": tracker.baseline_bytes, "end_bytes": end,
            "peak_phase": tracker.peak_phase, "at_peak": tracker.at_peak()}


# --------------------------------------------------------------------------- allocator cross-check

def _backend_for(device):
    from harness.core import devices
    return devices.backend(torch.device(device).type)


@contextlib.contextmanager
def allocator_peak(backend, model: torch.nn.Module | None = None):
    """Read the device allocator's peak over the block, into the yielded dict.

    CUDA, and MPS from torch 2.13: the allocator's own peak (``reset_peak_memory_stats`` /
    ``max_memory_allocated``). MPS before that keeps no peak: ``current_allocated_memory``
    is sampled after every module's forward (forward hooks on ``model``) and at the end,
    so a peak inside a module or during backward is missed; ``driver_allocated_memory``
    (the whole Metal heap, cache included) is sampled beside it. CPU: None, with the reason.
    Allocator bytes include block rounding and kernel workspaces that the storage count
    leaves out, so they read somewhat higher.
    """
    out: dict[str, Any] = {"allocator_peak": None, "allocator_method": None, "allocator_reason": ""}
    name = getattr(backend, "name", "")
    if name == "cpu":
        out["allocator_reason"] = CPU_NO_PEAK
        yield out
        return
    backend.synchronize()
    if backend.reset_peak():
        yield out
        backend.synchronize()
        out.update(allocator_peak=backend.memory_peak(), allocator_method=f"{name} max_memory_allocated")
        return
    if backend.memory_current() is None:
        out["allocator_reason"] = f"{name}: torch offers no allocated-memory reading here"
        yield out
        return
    samples: list[int] = []
    drivers: list[int] = []
    probe_driver = getattr(backend, "memory_driver", lambda: None)

    def sample(*_):
        backend.synchronize()
        samples.append(backend.memory_current())
        driver = probe_driver()
        if driver is not None:
            drivers.append(driver)

    hooks = [m.register_forward_hook(sample) for m in model.modules()] if model is not None else []
    try:
        sample()
        yield out
        sample()
    finally:
        for hook in hooks:
            hook.remove()
    out.update(allocator_peak=max(samples), allocator_method=f"{name} current_allocated_memory sampled at "
               f"{len(samples)} module boundaries", allocator_driver_peak=max(drivers) if drivers else None)


# --------------------------------------------------------------------------- anatomy

def _params(model) -> list:
    return [p for p in model.parameters() if p.requires_grad]


def training_step(model, batch, optimizer, loss_fn: Callable | None = None, tracker: MemoryTracker | None = None,
                  pack: Callable | None = None):
    """One forward + backward + optimizer step; returns the loss (detached).

    With a ``tracker``, phases are marked and gradients / optimizer state labelled as they
    appear; ``pack`` sees every tensor autograd saves during the forward.
    """
    mark = tracker.mark if tracker is not None else (lambda phase: None)
    mark("forward")
    hooks = (torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t) if pack is not None
             else contextlib.nullcontext())
    with hooks:
        loss = loss_of(call_model(model, batch), batch, loss_fn, model)
    mark("backward")
    loss.backward()
    if tracker is not None:
        tracker.label("gradients", [p.grad for p in model.parameters() if p.grad is not None])
    mark("optimizer")
    optimizer.step()
    if tracker is not None:
        tracker.label("optimizer_state", optimizer.state)
    return loss.detach()


def memory_anatomy(model, batch, optimizer, loss_fn: Callable | None = None, *, warmup_steps: int = 1,
                   backend=None) -> dict:
    """Peak memory of one training step and what it is made of, in bytes.

    ``model`` and ``batch`` are on the device already. ``warmup_steps`` untracked steps
    first create the optimizer state, so the measured step is a steady-state one (state
    resident, not allocated mid-step). Gradients are set to None before the measured step,
    as the Trainer leaves them.

    Returns ``peak_bytes`` and, each storage counted once: ``parameters``, ``buffers``,
    ``gradients``, ``optimizer_state`` (tensors in ``optimizer.state``, step counters
    included), ``activations`` (storages autograd saved for backward during the forward,
    parameters and the batch excluded), ``batch``, ``temporaries`` (peak minus everything
    else live at the peak moment); ``at_peak`` (category -> bytes live at the peak, summing
    to the peak), ``peak_phase`` (forward / backward / optimizer), ``baseline_bytes``, and
    the allocator cross-check (``allocator_peak``, ``allocator_method``, ``allocator_reason``).

    Blind spots: see MemoryTracker; also, non-reentrant ``torch.utils.checkpoint`` saves
    its region's inputs through its own hooks, which hide them from ours: they count as
    temporaries, not activations.
    """
    for _ in range(warmup_steps):
        training_step(model, batch, optimizer, loss_fn)
    optimizer.zero_grad(set_to_none=True)
    gc.collect()
    tracker = MemoryTracker()
    tracker.adopt(_params(model), category="parameters")
    tracker.adopt([p for p in model.parameters() if not p.requires_grad], list(model.buffers()), category="buffers")
    tracker.adopt(optimizer.state, category="optimizer_state")
    tracker.adopt(batch, category="batch")

    def pack(t):
        tracker.label("activations", t)
        return t

    backend = backend if backend is not None else _backend_for(next(model.parameters()).device)
    with allocator_peak(backend, model) as cross, tracker:
        loss = training_step(model, batch, optimizer, loss_fn, tracker, pack)
    totals = tracker.totals()
    at_peak = tracker.at_peak()
    return {"peak_bytes": tracker.peak_bytes, **totals, "temporaries": at_peak["temporaries"], "at_peak": at_peak,
            "peak_phase": tracker.peak_phase, "baseline_bytes": tracker.baseline_bytes, "loss": float(loss), **cross}


# --------------------------------------------------------------------------- verdicts

_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}


def claim_bound(expect) -> tuple[str, float]:
    """A claim about ratio = variant / baseline as (comparison, bound).

    ("lower", f): the variant is lower by at least f x           -> ratio < 1/f
    ("higher", f): the variant is higher by at least f x         -> ratio > f
    ("not higher", t): the variant is at most t x the baseline   -> ratio <= t
    ("not lower", t): the variant is at least 1/t x the baseline -> ratio >= 1/t
    "lower" and "higher" are strict, so ("lower", 1.0) on equal bytes does not hold. A bound
    from harness.optim.claims (``holds_bound``: measured ratio <= bound) is ("not higher", bound).
    """
    kind, factor = expect
    factor = float(factor)
    if factor <= 0:
        raise ValueError(f"claim factor must be positive, got {factor}")
    bounds = {"lower": ("<", 1 / factor), "higher": (">", factor),
              "not higher": ("<=", factor), "not lower": (">=", 1 / factor)}
    if kind not in bounds:
        raise ValueError(f"unknown claim {kind!r}; known: {', '.join(bounds)}")
    return bounds[kind]


# How far a time ratio's median moves between whole reruns of the suite on one machine, beyond
# what one run's bootstrap interval shows (the interval sees the spread of rounds within a run,
# not the drift between runs: clocks, other tenants, which core a thread lands on). Measured by
# benchmarks/optim_stability.py on the 2-core VM: torch.compile's CPU time ratio gave 0.96, 0.99
# and 1.05 in three runs, each interval narrow enough to exclude 1.0 on its own side. A time
# verdict therefore needs its interval to clear the bound by this much, on either side.
TIME_ZONE = 0.05


def judge(ci_low: float, ci_high: float, expect, zone: float = 0.0) -> str:
    """``holds`` when the whole interval satisfies the claim, ``does not hold`` when the whole
    interval violates it, else ``inconclusive``.

    ``zone`` (relative, >= 0) is an indifference zone around the bound: ``holds`` needs the
    interval to satisfy the bound tightened by (1 + zone), ``does not hold`` needs it to violate
    the bound loosened by (1 + zone). A ratio whose true value sits within the zone gets no
    verdict, so run-to-run drift smaller than the zone cannot turn holds into does not hold.
    Memory bytes are exact (zone 0); time ratios use TIME_ZONE.
    """
    if zone < 0:
        raise ValueError(f"zone must be >= 0, got {zone}")
    op, bound = claim_bound(expect)
    tighter, looser = (bound / (1 + zone), bound * (1 + zone)) if op in ("<", "<=") else \
        (bound * (1 + zone), bound / (1 + zone))
    if all(_COMPARE[op](end, tighter) for end in (ci_low, ci_high)):
        return "holds"
    if not any(_COMPARE[op](end, looser) for end in (ci_low, ci_high)):
        return "does not hold"
    return "inconclusive"


def compare_memory(bytes_a: int, bytes_b: int, expect) -> dict:
    """Verdict on a memory claim: storage bytes are deterministic, so one reading each is exact."""
    ratio = bytes_b / bytes_a
    return {"mem_ratio": ratio, "ci_low": ratio, "ci_high": ratio, "rounds": 1, "verdict": judge(ratio, ratio, expect),
            "bytes_a": int(bytes_a), "bytes_b": int(bytes_b), "claim": list(expect)}


# --------------------------------------------------------------------------- time

def bootstrap_ratio_ci(a: list[float], b: list[float], resamples: int = 2000, confidence: float = 0.95,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a), resampling whole rounds.

    Rounds are resampled as pairs (a_i, b_i): an interleaved round shares the machine's
    state of the moment, so keeping pairs keeps drift out of the ratio's spread. Seeded:
    the same durations give the same interval.
    """
    if len(a) != len(b) or not a:
        raise ValueError("need the same, non-zero number of rounds for a and b")
    gen = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(a), (resamples, len(a)), generator=gen)
    ta = torch.tensor(a, dtype=torch.float64)[idx].quantile(0.5, dim=1)
    tb = torch.tensor(b, dtype=torch.float64)[idx].quantile(0.5, dim=1)
    ratios = tb / ta
    tail = (1 - confidence) / 2
    return float(ratios.quantile(tail)), float(ratios.quantile(1 - tail))


def _timed(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Seconds of one call, the device drained before and after so queued work is inside."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], Any], *, sync: Callable[[], None] | None = None, warmup: int = 1,
                repeats: int = 3) -> float:
    """Median seconds of ``repeats`` calls after ``warmup`` discarded ones (a table's figure,
    not a claim's verdict: verdicts come from compare_time's interleaved rounds)."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    return statistics.median(_timed(fn, sync) for _ in range(repeats))


def compare_time(run_a: Callable[[], Any], run_b: Callable[[], Any], expect=("lower", 1.3), *,
                 sync: Callable[[], None] | None = None, warmup: int = 2, rounds: int = 10, budget_s: float = 30.0,
                 max_rounds: int = 400, resamples: int = 2000, confidence: float = 0.95, seed: int = 0,
                 zone: float = TIME_ZONE) -> dict:
    """Judge a time claim about ``run_b`` (the variant) against ``run_a`` (the baseline).

    ``warmup`` calls of each are run and discarded (first-call compilation, allocator
    growth, caches). Then rounds alternate A B, B A, ... (ABBA), so slow drift and
    thermal throttling hit both sides alike. ``sync`` (a Backend's ``synchronize``) is called
    around each timed call; without it only host time is seen on an asynchronous device.

    After ``rounds`` rounds the ratio median(b) / median(a) and its bootstrap interval are
    judged (``judge``, with the indifference ``zone``, default TIME_ZONE); while
    ``inconclusive``, the number of rounds doubles until
    ``budget_s`` seconds (warm-up included) or ``max_rounds`` are spent. Checking as rounds
    accumulate makes the interval's coverage somewhat optimistic; the budget bounds it.

    Returns ``time_ratio``, ``ci_low``, ``ci_high``, ``rounds``, ``verdict``, ``reason``,
    ``median_a_s``, ``median_b_s``, ``durations_a`` / ``durations_b`` (seconds per round),
    ``claim``, ``seconds`` (wall time spent).
    """
    sync = sync or (lambda: None)
    start = time.perf_counter()
    for _ in range(warmup):
        run_a()
        run_b()
    da: list[float] = []
    db: list[float] = []
    target = rounds
    while True:
        while len(da) < target:
            first, second = (run_a, run_b) if len(da) % 2 == 0 else (run_b, run_a)
            t_first, t_second = _timed(first, sync), _timed(second, sync)
            da.append(t_first if first is run_a else t_second)
            db.append(t_second if first is run_a else t_first)
        low, high = bootstrap_ratio_ci(da, db, resamples, confidence, seed)
        verdict = judge(low, high, expect, zone)
        spent = time.perf_counter() - start
        if verdict != "inconclusive" or spent >= budget_s or target >= max_rounds:
            break
        target = min(2 * target, max_rounds)
    op, bound = claim_bound(expect)
    median_a, median_b = statistics.median(da), statistics.median(db)
    ratio = median_b / median_a
    reason = (f"ratio {ratio:.3f}, {confidence:.0%} interval [{low:.3f}, {high:.3f}] against ratio {op} {bound:.3f}"
              f"{f' (zone {zone:.0%})' if zone else ''} after {len(da)} rounds")
    if verdict == "inconclusive":
        reason += (f"; budget of {budget_s:g} s spent" if spent >= budget_s else f"; {max_rounds} rounds reached")
    return {"time_ratio": ratio, "ci_low": low, "ci_high": high, "rounds": len(da), "verdict": verdict,
            "reason": reason, "median_a_s": median_a, "median_b_s": median_b, "durations_a": da, "durations_b": db,
            "claim": list(expect), "zone": zone, "seconds": round(spent, 3)}
