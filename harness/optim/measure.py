"""The one place that measures memory: peak memory, what it is made of, and the device
allocator's own peak beside it.

Memory is measured the same way on every device, by counting tensor storage bytes
(``MemoryTracker``), not by asking an allocator: the CPU has no allocator peak, MPS keeps
none before torch 2.13, and a caching allocator's numbers depend on what it cached before.
Counting storages gives the same bytes for the same step every time, so a memory claim
needs one measurement per variant. Where the device does have an allocator counter, its
reading (CUDA's and MPS's peak counters, or MPS's current allocation sampled at module
boundaries before torch 2.13) is recorded beside ours (``allocator_peak``) as a
cross-check, never as the value. The CPU keeps no peak: ``CPU_NO_PEAK`` says why.
``weigh`` is one training step of a harness.optim.workloads.Workload weighed that way;
``weighed`` keeps it per workload key, since the same step gives the same bytes.

Time cannot be made deterministic: harness/optim/ratios.py times two runs against each other
in interleaved rounds and judges the ratio by a bootstrap interval.

Every public function returns plain data (dicts of str / int / float / lists), so a result
can travel out of a sandbox child as JSON.
"""
from __future__ import annotations

import contextlib
import functools
import gc
import threading
import weakref
from typing import Any, Callable, Iterable, Mapping

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode
from torch.utils._pytree import tree_leaves

from harness.core.models import call_model, loss_of
from harness.env import devices
from harness.optim.workloads import built, key_of

# Memory categories, in precedence order: a storage that is both a parameter and saved for
# backward (a weight saved by linear) is a parameter; whatever carries no label is a temporary.
CATEGORIES = ("parameters", "buffers", "gradients", "optimizer_state", "batch", "activations", "temporaries")


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
    ``pause()`` / ``resume(*resident)`` leave torch's dispatch stack and come back, for
    stretches that repeat what was already counted (an accumulated step's later micro-batches).
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
        self.paused = False

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

    # -- pausing
    def pause(self) -> bool:
        """Stop seeing ops until ``resume``: the mode leaves torch's dispatch stack, so the ops in
        between cost nothing. Storages already counted still leave the count when freed; what
        is made in between is not counted (``resume`` adopts what must be). Only when this mode
        is the innermost one (a mode entered after it would be popped instead): returns
        whether it paused."""
        if not self.paused and _get_current_dispatch_mode() is self:
            TorchDispatchMode.__exit__(self, None, None, None)
            self.paused = True
        return self.paused

    def resume(self, *resident) -> None:
        """See ops again, and count ``resident``: tensors made while paused that live on (a
        gradient that accumulation replaced instead of adding into), each storage once."""
        if self.paused:
            TorchDispatchMode.__enter__(self)
            self.paused = False
        self.adopt(*resident)

    # -- mode
    def __enter__(self):
        self.baseline_bytes = self.live_bytes
        return super().__enter__()

    def __exit__(self, *exc):
        """Stop counting: later frees no longer move the numbers."""
        result = None if self.paused else super().__exit__(*exc)   # a paused mode has left the stack already
        self.paused = False
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

    backend = backend if backend is not None else backend_for(next(model.parameters()).device)
    with allocator_peak(backend, model) as cross, tracker:
        loss = training_step(model, batch, optimizer, loss_fn, tracker, pack)
    totals = tracker.totals()
    at_peak = tracker.at_peak()
    return {"peak_bytes": tracker.peak_bytes, **totals, "temporaries": at_peak["temporaries"], "at_peak": at_peak,
            "peak_phase": tracker.peak_phase, "baseline_bytes": tracker.baseline_bytes, "loss": float(loss), **cross}


# --------------------------------------------------------------------------- the allocator's own peak

CPU_NO_PEAK = ("the CPU allocator keeps no peak counter, and process RSS also holds the allocator's free "
               "lists and the Python heap: too noisy to compare bytes; the tracked storage peak is the value")


def backend_for(device):
    """The harness.env.devices Backend of ``device``'s type (a torch.device or a string)."""
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
    if name == "cpu" or isinstance(backend, devices.CPUBackend):   # a stand-in that is not emulating is the CPU
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


# --------------------------------------------------------------------------- a workload's step, weighed

def weigh(w) -> dict:
    """One labelled, tracked step of ``w`` (phases, categories), with the device allocator's
    own peak read over the same step where the device keeps one, and the step's loss
    (``loss``: the sum over the micro-batches it stepped through).

    The allocator's figure is its own, as it read it: it counts every tensor on the device
    (the claim's other side too), so what it held before the step is recorded beside it
    (``allocator_held``). Its rise over the step (peak less held) is never corrected with the
    tracked bytes: a cross-check made of the figures it checks would agree with them however
    the allocator reads. The claim adds that rise to the step's resident tensors, adopted by
    name (harness.optim.techniques.allocator_view)."""
    micro = weigh_micro_batches(w.setup)
    losses = []   # the weighed step's loss: a technique that lowers memory and breaks training does not help
    m = weigh_call(w.target, w.model, lambda tracker: losses.append(w.step(tracker, micro)), w.resident())
    if micro is not None:
        m["micro_batches_weighed"] = f"{micro} of {w.setup.grad_accum}"
    m["loss"] = losses[-1] if losses else None
    return m


def weigh_call(target: str, model, call: Callable[[MemoryTracker], Any], resident: dict) -> dict:
    """``measure_memory`` of ``call(tracker)`` (labelled: it marks its phases and labels what it
    makes) with ``resident`` adopted by category, and the allocator's own peak read over the same
    call on ``target`` where the device keeps one (``allocator_peak``), with what the allocator
    held before it (``allocator_held``). ``weigh`` (a claim's step) and the perf suite's model
    checks (a training step, inference, generation) weigh through it."""
    backend = devices.backend(target.split(":")[0])   # an emulated device reads its own memory API
    held = None
    if not isinstance(backend, devices.CPUBackend) and getattr(backend, "name", "") != "cpu":
        backend.synchronize()
        held = backend.memory_current()
    with allocator_peak(backend, model) as reading:
        m = measure_memory(call, resident=resident, labelled=True)
    if reading["allocator_peak"] is not None and held is not None:
        reading["allocator_held"] = held
    return {**m, **reading}


# An accumulated step's peak is reached again in every micro-batch after the first (the
# gradients exist from then on and each later micro-batch adds the same activations and
# temporaries, all micro-batches having one shape), then in the optimizer step: so its first
# WEIGH_MICRO_BATCHES micro-batches and the optimizer step weigh what all of them do, to the
# byte, phase and anatomy included (tests/test_optim_suite.py checks it on every row of seed
# 003's path). The other micro-batches stay resident. On an H100 at the large workload, a
# tracked step of 32 micro-batches took most of a memory check's 13 to 53 s.
WEIGH_MICRO_BATCHES = 2


def weigh_micro_batches(setup) -> int | None:
    """How many of ``setup``'s micro-batches ``weigh`` steps through: WEIGH_MICRO_BATCHES for an
    accumulated step of more, None (all) otherwise, and with dynamic padding, where each
    micro-batch has its own width and the widest may come last."""
    if setup.dynamic_padding or setup.grad_accum <= WEIGH_MICRO_BATCHES:
        return None
    return WEIGH_MICRO_BATCHES


_WEIGHED: dict[tuple, dict] = {}


def weighed(w) -> dict:
    """``weigh`` of a steady step of ``w`` (the optimizer state exists from the first step on),
    taken once per workload key (harness.optim.workloads.key_of: setup, target, torch settings)
    in a process: storage bytes are the same for the same step every time, so the claims that
    share a side (the path's rows, the baseline) and seed 003's path read one measurement."""
    key = key_of(w.setup, w.target)
    if key not in _WEIGHED:
        w.step(micro_batches=weigh_micro_batches(w.setup))   # the optimizer state, made by a first step
        _WEIGHED[key] = weigh(w)
    return _WEIGHED[key]


def weighed_setup(setup, target: str) -> dict:
    """``weighed`` of ``setup`` on ``target``, its workload built (harness.optim.workloads.built)
    only when this process has not weighed it yet: seed 003's path reads the rows its memory
    claims weighed without building each macbert-large row again (a model made and moved
    to the device, seconds each on an H100, for a figure already kept)."""
    kept = _WEIGHED.get(key_of(setup, target))
    return kept if kept is not None else weighed(built(setup, target))


def forget_weighed() -> None:
    """Drop every kept measurement (the next ``weighed`` measures again)."""
    _WEIGHED.clear()
