"""The one place time is measured: a call timed with the device drained, rounds of calls with
a control beside them, and the intervals every time figure and verdict is judged by.

Two suites time things. The optimization suite times a technique against its baseline in one
process (harness.optim.ratios.compare_time: interleaved rounds, a ratio's interval); the perf
suite (harness.perf) times an op or a model step on its own and compares that figure with the
same check of another run (harness.report.compare). Both go through ``timed`` / ``Clock`` and
the bootstrap below, so a change in how time is taken changes both alike.

How a figure is taken (``time_rounds``):

* the device is drained before and after what is timed (``Backend.synchronize``), so queued
  kernels are inside the figure; where the device has timing events (``torch.cuda.Event``;
  ``torch.mps.event.Event`` from torch 2.15, before which it could hang) the figure is the
  device's own elapsed time between two events, else the host's wall clock (``Clock``);
* ``warmup`` calls are discarded (first-call compilation, allocator growth, caches);
* a round repeats the call ``inner`` times, chosen so a round lasts at least ``min_round_s``
  (a clock's resolution and a launch's overhead stay small in it); the figure is seconds per
  call;
* each round also times a **control** (``control_work``): fixed pure-Python work that no
  torch version changes. Its median says how fast this host ran while the checks ran: a
  later run whose control is 30% slower ran on a slower or busier machine, and a time that
  grew by as much is not the upgrade's doing (harness.report.compare widens its allowance
  by the control's drift);
* one measurement at a time on the machine (``alone``): parallel workers build and import
  in parallel, but never time while another one computes;
* rounds are added until the median's interval is narrow (``target_width``) or the budget is
  spent; the median's 95% interval is a seeded percentile bootstrap over rounds, and a figure
  whose interval stayed wide is labelled ``noisy``;
* the machine's load is read before and after (``load_during``: the one-minute load average
  and the CPU count) and kept with the figure: the control sees a slower host, but not a host
  whose other tenants come and go, and a time taken beside a busy neighbour compares only
  with one taken under a like load (harness.perf.against.load_apart).

Plain data out (dicts of floats and lists), so a result travels out of a sandbox child as JSON.
"""
from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from typing import Any, Callable

RESAMPLES = 2000
CONFIDENCE = 0.95
NOISY_WIDTH = 0.25      # an interval wider than this fraction of its median: the figure is noisy
CONTROL_LOOPS = 20_000  # control_work's size: about 1 ms of CPython on a 2020s core


# --------------------------------------------------------------------------- the machine, alone

LOCK_VAR = "MPS_COMPAT_TIMING_LOCK"   # where the lock files live (default: the temp directory)


def _lock_base() -> str:
    return os.environ.get(LOCK_VAR) or os.path.join(tempfile.gettempdir(), "mps-compat-timing")


@contextlib.contextmanager
def _flock(path: str, exclusive: bool):
    try:
        import fcntl
    except ImportError:   # no flock (Windows): measurements may overlap; their intervals say so
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@contextlib.contextmanager
def alone():
    """Hold the machine while measuring: no other check of any session computes meanwhile.

    Two xdist workers on a 2-core machine share its cores, caches and memory bandwidth (on a
    VM, maybe one physical core's two hyperthreads): in clean reruns an op timed while the
    other worker trained a model ran 2x slower than the same op timed beside an idle worker,
    each run's own interval narrow (benchmarks/perf_false_alarms.py). So a measurement takes
    the machine-wide lock exclusively, and every other check holds it shared while it runs
    (``beside``, taken by the plugin around each check that is not a measurement): checks run
    in parallel with each other, never during a measurement. A turnstile keeps a waiting
    measurement from starving behind a stream of shared holders. File locks (flock), so
    they hold across xdist workers, their sandbox children and other sessions. Imports and
    model building stay outside, in parallel. Yields the seconds waited.
    """
    base = _lock_base()
    started = time.perf_counter()
    with _flock(base + ".turnstile", True), _flock(base + ".lock", True):
        yield time.perf_counter() - started


def load_now() -> float | None:
    """The machine's one-minute load average (runnable tasks, all CPUs), or None where the
    platform keeps none (Windows) or will not say."""
    try:
        return round(float(os.getloadavg()[0]), 2)
    except (AttributeError, OSError):
        return None


@contextlib.contextmanager
def load_during():
    """The machine's load around a measurement, into the yielded dict: ``before`` and
    ``after`` (``load_now``, None where unknown) and ``cpus`` (the machine's logical CPUs:
    the load average counts tasks over all of them, whatever this process may use). The
    average moves over a minute, so two readings bracket a measurement of seconds the way
    the load the measurement met did; ``after`` also holds the measurement's own threads,
    alike in every run of the same check."""
    reading = {"before": load_now(), "after": None, "cpus": os.cpu_count()}
    try:
        yield reading
    finally:
        reading["after"] = load_now()


def load_per_core(reading) -> float | None:
    """The larger of a ``load_during`` reading's two load averages per CPU, or None when the
    reading is missing (a record older than the readings) or holds no figure."""
    if not isinstance(reading, dict):
        return None
    cpus = reading.get("cpus")
    loads = [v for v in (reading.get("before"), reading.get("after"))
             if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and v >= 0]
    if not loads or not isinstance(cpus, int) or isinstance(cpus, bool) or cpus < 1:
        return None
    return max(loads) / cpus


@contextlib.contextmanager
def beside():
    """Run beside other checks, but never while a measurement holds the machine (``alone``)."""
    base = _lock_base()
    with _flock(base + ".turnstile", True):
        held = _flock(base + ".lock", False)
        held.__enter__()
    try:
        yield
    finally:
        held.__exit__(None, None, None)


# --------------------------------------------------------------------------- one call

def timed(fn: Callable[[], Any], sync: Callable[[], None]) -> float:
    """Seconds of one call, the device drained before and after so queued work is inside."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def median_time(fn: Callable[[], Any], *, sync: Callable[[], None] | None = None, warmup: int = 1,
                repeats: int = 3) -> float:
    """Median seconds of ``repeats`` calls after ``warmup`` discarded ones (a quick reading,
    such as the workload probe's matmul rate; figures and verdicts come from rounds)."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    return statistics.median(timed(fn, sync) for _ in range(repeats))


def control_work(loops: int = CONTROL_LOOPS) -> int:
    """Fixed pure-Python work (no torch, no allocation that grows): the control's unit."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total


# --------------------------------------------------------------------------- the device's clock

MPS_EVENT_TIMING_SINCE = "2.15"
MPS_EVENT_TIMING_SOURCE = (
    "pytorch#196395 (2026-09, in torch 2.15): before it, an MPS event's record() and synchronize() "
    "shared one completion flag, so end.synchronize() then start.elapsed_time(end) could wait forever "
    "(pytorch#162872), and the times were host callbacks' clock_gettime, which a short interval could "
    "give in reverse ('End event ... was not recorded after start event'); from 2.15 an event's time is "
    "its command buffer's GPUEndTime")


def mps_events_time_the_device(torch_version: str) -> bool:
    """Whether ``torch.mps.event.Event`` timing is the device's own and cannot hang: from torch
    2.15 only (MPS_EVENT_TIMING_SOURCE). Before it, MPS is timed by the wall clock with the
    device drained before and after, as a device without events is. A hang guard: a 2.15
    nightly or release candidate is not known to hold the fix and is timed by the wall clock
    (fitness.has_fix); a 2.16 nightly, branched after 2.15, is trusted."""
    from harness.env.fitness import has_fix
    return has_fix(torch_version, MPS_EVENT_TIMING_SINCE)


class Clock:
    """Times ``inner`` calls of a function on ``device`` (``"cpu"``, ``"cuda"``, ``"mps"``...).

    ``method`` says how: ``cuda events`` / ``mps events`` (the device's elapsed time between two
    events recorded around the calls; documented APIs, looked up with getattr so a torch without
    them falls back; MPS's only from torch 2.15, ``mps_events_time_the_device``), else ``wall
    clock`` with the device drained before and after.
    """

    def __init__(self, device: str, sync: Callable[[], None] | None = None, events: bool = True):
        import torch
        self.device = device
        kind = device.split(":")[0]
        self.sync = sync or (lambda: None)
        self._event = None
        if events and kind == "cuda" and torch.cuda.is_available():
            self._event = torch.cuda.Event
        elif events and kind == "mps" and mps_events_time_the_device(torch.__version__):
            self._event = getattr(getattr(getattr(torch, "mps", None), "event", None), "Event", None)
        self.method = f"{kind} events" if self._event is not None else "wall clock"
        self._kind = kind

    def seconds(self, fn: Callable[[], Any], inner: int = 1) -> float:
        """Seconds per call of ``inner`` back-to-back calls."""
        if self._event is None:
            self.sync()
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            self.sync()
            return (time.perf_counter() - t0) / inner
        start, end = self._event(enable_timing=True), self._event(enable_timing=True)
        self.sync()
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        if self._kind == "mps":
            self.sync()          # the device drained, not the event waited on (see mps_events_time_the_device)
        else:
            end.synchronize()
        return start.elapsed_time(end) / 1000.0 / inner


# --------------------------------------------------------------------------- intervals

def _quantiles(samples, resamples: int, seed: int):
    import torch
    gen = torch.Generator().manual_seed(seed)
    data = torch.tensor(samples, dtype=torch.float64)
    idx = torch.randint(0, len(samples), (resamples, len(samples)), generator=gen)
    return data, idx


def bootstrap_median_ci(samples: list[float], resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                        seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of ``samples``. Seeded: the same samples
    give the same interval."""
    if not samples:
        raise ValueError("no samples to take an interval of")
    data, idx = _quantiles(samples, resamples, seed)
    medians = data[idx].quantile(0.5, dim=1)
    tail = (1 - confidence) / 2
    return float(medians.quantile(tail)), float(medians.quantile(1 - tail))


def bootstrap_ratio_ci(a: list[float], b: list[float], resamples: int = RESAMPLES, confidence: float = CONFIDENCE,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(b) / median(a), resampling whole rounds.

    Rounds are resampled as pairs (a_i, b_i): an interleaved round shares the machine's
    state of the moment, so keeping pairs keeps drift out of the ratio's spread. Seeded:
    the same durations give the same interval.
    """
    if len(a) != len(b) or not a:
        raise ValueError("need the same, non-zero number of rounds for a and b")
    data_a, idx = _quantiles(a, resamples, seed)
    import torch
    data_b = torch.tensor(b, dtype=torch.float64)
    ratios = data_b[idx].quantile(0.5, dim=1) / data_a[idx].quantile(0.5, dim=1)
    tail = (1 - confidence) / 2
    return float(ratios.quantile(tail)), float(ratios.quantile(1 - tail))


def bootstrap_difference_ci(a: list[float], b: list[float], resamples: int = RESAMPLES,
                            confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the median of the paired differences b_i - a_i."""
    if len(a) != len(b) or not a:
        raise ValueError("need the same, non-zero number of paired samples for a and b")
    return bootstrap_median_ci([y - x for x, y in zip(a, b)], resamples, confidence, seed)


def relative_width(low: float, high: float, centre: float) -> float:
    """An interval's width as a fraction of its centre (inf for a centre of 0)."""
    return (high - low) / centre if centre > 0 else float("inf")


ONE_SAMPLE = ("one sample, so no interval: its spread is unknown and it cannot be told from another run's "
              "figure; take two or more")


def summary(samples: list[float], **extra) -> dict:
    """Median, its interval, the relative width and ``noisy`` for a list of seconds.

    One sample has no interval (a bootstrap of one value is that value, a width of 0 that
    would read as narrow): its bounds are infinite, its width too, it is ``noisy``, and
    ``no_interval`` says why (``ONE_SAMPLE``), so no judge calls it timed and no comparison
    reads it as a figure (harness.perf.against takes finite bounds only)."""
    median = statistics.median(samples)
    if len(samples) == 1:
        return {"median_s": median, "ci_low": float("-inf"), "ci_high": float("inf"), "rounds": 1,
                "width": float("inf"), "noisy": True, "no_interval": ONE_SAMPLE, **extra}
    low, high = bootstrap_median_ci(samples)
    width = relative_width(low, high, median)
    return {"median_s": median, "ci_low": low, "ci_high": high, "rounds": len(samples),
            "width": width, "noisy": width > NOISY_WIDTH, **extra}


# --------------------------------------------------------------------------- rounds

def inner_for(fn: Callable[[], Any], clock: Clock, min_round_s: float, most: int = 10_000) -> int:
    """Calls per round so that a round lasts at least ``min_round_s``."""
    inner = 1
    while inner < most:
        took = clock.seconds(fn, inner) * inner
        if took >= min_round_s:
            return inner
        inner = min(most, max(inner * 2, int(inner * min_round_s / max(took, 1e-9) * 1.2)))
    return most


def time_rounds(fn: Callable[[], Any], clock: Clock, *, warmup: int = 3, min_round_s: float = 0.005,
                rounds: int = 9, max_rounds: int = 41, budget_s: float = 3.0, target_width: float = 0.10,
                control: Callable[[], Any] = control_work) -> dict:
    """The figure of ``fn``: seconds per call, the median over rounds with its interval.

    Returns ``summary``'s fields (``median_s``, ``ci_low``, ``ci_high``, ``rounds``, ``width``,
    ``noisy``) and ``inner`` (calls per round), ``clock`` (how time was read), ``durations``
    (seconds per call, per round), ``control_s`` (the control's median seconds on this host,
    timed in every round beside the call, alternately before and after it), ``seconds`` (wall
    time spent). More rounds are bought while the interval is wider than ``target_width`` and
    the budget lasts.
    """
    start = time.perf_counter()
    for _ in range(warmup):
        fn()
    clock.sync()
    inner = inner_for(fn, clock, min_round_s)
    durations: list[float] = []
    controls: list[float] = []
    target = rounds
    while True:
        while len(durations) < target:
            if len(durations) % 2:
                durations.append(clock.seconds(fn, inner))
                controls.append(timed(control, lambda: None))
            else:
                controls.append(timed(control, lambda: None))
                durations.append(clock.seconds(fn, inner))
        out = summary(durations)
        spent = time.perf_counter() - start
        if out["width"] <= target_width or spent >= budget_s or target >= max_rounds:
            break
        target = min(max_rounds, target + max(4, target // 2))
    return {**out, "inner": inner, "clock": clock.method, "durations": durations,
            "control_s": statistics.median(controls), "seconds": round(time.perf_counter() - start, 3)}
