"""Controls: checks whose answer is known before they run, made on the device itself, so a
column can say whether its suite's instruments can be trusted there.

A suite measures through instruments (the MPS fallback warnings it watches, the parity judge,
the memory readings, the timer) that were written and tested on one machine and then trusted
on another. A column that is all green on a Mac whose memory reading never moves, or whose
timer returns before the GPU has worked, says nothing. So every suite that measures a device
opens each target's run with a few controls (``<suite>/controls/<name>``): a known allocation
must move the memory reading by its size, work eight times larger must take longer, an op
that has no kernel must be seen falling back. A control that fails marks its column
"instrument not trustworthy here" in the report, and the suite's other verdicts there as
unconfirmed (harness.report).

This module holds what the controls share, and the two instruments that the optimization
and perf suites both use (the memory reading and the timer):

  ``ControlRun``   what a control found, made in the sandbox child (harness.core.isolate)
  ``verdict``      its record (category ``control``, ``metrics.record_kind`` "control")
  ``ControlCase``  a row of a suite's control table (``<suite>/controls/<name>``)
  ``allocation_readings`` / ``memory_judged``   64 MiB allocated on the device moves the
                               reading by 64 MiB, the peak by as much after a reset that
                               follows a larger block, and MPS's driver reading by at least
                               that (the memory control, with the storage count both suites
                               weigh by: harness/optim/controls.py)
  ``timing_sees_queued_work``  k matmuls twice the size (8x the work, the same launches)
                               take at least 3x as long through the timer, whose readings
                               are finite and above zero and whose small job lasted long
                               enough to be measured

The ops controls are in harness/ops/controls.py, the parity judge's in
harness/parity/controls.py, the smaller-batch control and the optimization suite's own
memory reading in harness/optim/controls.py. The env suite reads facts and has no device
instrument, so it has no controls.

Every control's device work runs inside the target's context (devices.on_device: an
emulated device's rules hold there only) on tensors placed where the target keeps them
(devices.place); statistics in float64 stay outside it (float64 is device work that an
emulated Mac refuses, as MPS does).
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import statistics
import time
from typing import Callable

from harness.core.records import Category, RecordKind, Status, Verdict, error_line
from harness.env import devices, timing

UNTRUSTED = "instrument not trustworthy here"
SUBJECT = "controls"


# --------------------------------------------------------------------------- a control's result

@dataclasses.dataclass(frozen=True)
class ControlRun:
    """What a control saw (made in the sandbox child, judged in the pytest process).

    ``held``: True when the known answer was seen, False when not, None when the control
    cannot apply on this target (``seen`` then says why). ``cause``: what a miss means, in
    the user's terms; ``switch``: what to do about it. ``figures``: the numbers behind it."""
    name: str
    held: bool | None
    expected: str
    seen: str
    cause: str = ""
    switch: str = ""
    figures: dict = dataclasses.field(default_factory=dict)


def verdict(run: ControlRun) -> Verdict:
    """A control's record: a pass, a skip with the reason it cannot apply, or a failure whose
    one line names the control, what was expected, what was seen, the cause and the switch."""
    metrics = {"record_kind": RecordKind.CONTROL, "control": run.name, "expected": run.expected,
               "seen": run.seen, **run.figures}
    if run.held is None:
        return Verdict(Status.SKIP, Category.CONTROL, f"control {run.name} does not apply here: {run.seen}", metrics)
    if run.held:
        return Verdict(Status.PASS, Category.CONTROL, "", metrics)
    tail = "; ".join(part for part in (run.cause, run.switch) if part)
    return Verdict(Status.FAIL, Category.CONTROL,
                   f"{UNTRUSTED}: {run.name}: expected {run.expected}, saw {run.seen}" + (f"; {tail}" if tail else ""),
                   metrics)


def metrics_before(name: str) -> dict:
    """What a control's record says before the control runs: a crash or a hang of the sandbox
    child still leaves a record the report knows as this control's."""
    return {"record_kind": RecordKind.CONTROL, "control": name}


def guarded(name: str, expected: str, cause: str, switch: str, run: Callable[[], ControlRun]) -> ControlRun:
    """``run()``, or, where it raises, a control that did not hold, saying what was raised:
    an instrument that fails on the device is as untrustworthy as one that reads wrong."""
    try:
        return run()
    except Exception as exc:  # the device's own error is what the user must see
        return ControlRun(name, False, expected, error_line(exc, 300), cause, switch)


@dataclasses.dataclass(frozen=True)
class ControlCase:
    """One control of a suite's table, of the shape harness.core.cases.Case: the check
    ``<suite>/controls/<name>``, run in the sandbox child as ``entry(target, *args)``, which
    returns a ControlRun."""
    name: str
    entry: str                       # "module:function" in the sandbox child
    targets: tuple[str, ...]
    args: tuple = ()
    subject: str = SUBJECT

    @property
    def variant(self) -> str:
        return self.name

    @property
    def id(self) -> str:
        return f"{SUBJECT}-{self.name}"


def every_target() -> tuple[str, ...]:
    """The targets a control table names: the real ones and every registered stand-in (the
    plugin keeps a stand-in to the suites it serves, harness.plugin.options.serves)."""
    return devices.TARGETS + tuple(devices.STAND_INS)


def table(entries: dict[str, tuple]) -> tuple[ControlCase, ...]:
    """A suite's controls from name -> (entry, *args), every one on every target."""
    targets = every_target()
    return tuple(ControlCase(name, entry, targets, tuple(args)) for name, (entry, *args) in entries.items())


# --------------------------------------------------------------------------- memory

MIB = 2 ** 20
ALLOCATION = 64 * MIB       # what the memory control allocates: well above any reading's noise
MEMORY_SLACK = 0.10         # a reading may move by the allocation within this share of it
STALE = 2                   # a block this many times the allocation is made and freed before the peak's reset:
                            # a reset that does nothing leaves the peak at it, STALE x what a reset peak reads
MEMORY = "memory-sees-allocation"
MEMORY_CAUSE = ("this suite's memory figures do not follow the device's allocations: its memory verdicts on this "
                "column cannot be trusted")
MEMORY_SWITCH = "report it with this run file; meanwhile judge memory there by Activity Monitor or nvidia-smi"


def moved_by(delta: int | None, nbytes: int) -> bool:
    """Whether a reading moved by ``nbytes`` within MEMORY_SLACK of it."""
    return delta is not None and abs(delta - nbytes) <= MEMORY_SLACK * nbytes


def mib(n: float | None) -> str:
    return "no reading" if n is None else f"{n / MIB:.1f} MiB"


def signed(delta: float | None) -> str:
    """A reading's move, with its sign: "+64.0 MiB", "-1.5 MiB", "no reading"."""
    return "no reading" if delta is None else f"{delta / MIB:+.1f} MiB"


def stale_peak(target: str, nbytes: int) -> None:
    """Allocate and free STALE x ``nbytes`` on the target (inside its context), to be done just
    before the peak is reset and ``nbytes`` measured: a reset that does nothing then leaves the
    peak at this larger block, which the judge tells from the allocation, instead of at an
    earlier one that the allocation may exceed (a no-op reset read right before)."""
    import torch
    block = torch.ones(STALE * nbytes // 4, dtype=torch.float32, device=devices.place(target))
    del block


def allocation_readings(target: str, nbytes: int = ALLOCATION) -> dict:
    """The target's memory readings (devices.backend: current, the peak where the device keeps
    one, and MPS's driver figure where offered) before and after ``nbytes`` of float32 ones are
    allocated on it (torch.ones writes every page, so even the CPU's resident set holds them),
    inside the target's context. Python's garbage collector is held off meanwhile: a
    collection between the two readings would free other tensors and move the reading by
    something else (collecting first instead costs a quarter of a second with transformers
    loaded).

    Before the first reading, a block STALE x ``nbytes`` is allocated and freed (``stale_peak``:
    a peak whose reset does nothing reads it), and the caching allocator's cache is emptied
    (Backend.empty_cache): MPS's driver reading counts the allocator's heaps, cached blocks
    included, so with that block still cached the allocation could reuse it and leave the
    driver reading where it was; emptied, the allocation needs a new heap and the driver
    reading grows by at least its size (a heap of 1 GiB on a Mac with unified memory, holding
    any allocation from 10 MiB to 512 MiB: MPSAllocator.h, ``createHeapBlock``)."""
    import torch
    backend = devices.backend(target)
    with devices.on_device(target), _no_collection():
        stale_peak(target, nbytes)
        backend.synchronize()
        backend.empty_cache()
        before = backend.memory_current()
        driver_before = _driver(backend)
        keeps_peak = backend.reset_peak()
        x = torch.ones(nbytes // 4, dtype=torch.float32, device=devices.place(target))
        backend.synchronize()
        after = backend.memory_current()
        peak = backend.memory_peak() if keeps_peak else None
        driver_after = _driver(backend)
        del x
        backend.synchronize()
        freed = backend.memory_current()
    return {"allocated_bytes": nbytes, "current_before": before, "current_after": after, "current_freed": freed,
            "keeps_peak": keeps_peak, "peak_after": peak, "driver_before": driver_before, "driver_after": driver_after,
            "stale_bytes": STALE * nbytes,
            "reading": "resident set (psutil)" if devices.rules_of(target) in ("cpu", "stand-in") else
            f"{devices.rules_of(target)} allocated memory"}


@contextlib.contextmanager
def _no_collection():
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _driver(backend) -> int | None:
    driver = getattr(backend, "memory_driver", None)
    return driver() if driver is not None else None


def driven_by(delta: int | None, nbytes: int) -> bool:
    """Whether a driver reading grew by at least ``nbytes`` less MEMORY_SLACK of it: it counts
    whole heaps, so it may grow by more (a 1 GiB heap for 64 MiB on a Mac), never by less."""
    return delta is not None and delta >= (1 - MEMORY_SLACK) * nbytes


def stale_note(moved: int | None, figures: dict) -> str:
    """What a peak that moved by the block freed before its reset (``stale_bytes``, STALE x the
    allocation) says: the reset did nothing."""
    stale = figures.get("stale_bytes")
    if moved is None or not stale or moved < (1 - MEMORY_SLACK) * stale:
        return ""
    return " (not reset)"


def memory_judged(figures: dict, also_held: tuple[bool, str] | None = None) -> ControlRun:
    """The memory control from ``allocation_readings``' figures: the current reading moved by
    the allocation within MEMORY_SLACK; the peak too where the device keeps one (reset after a
    block STALE x larger was freed, so a reset that does nothing reads that block); and the
    driver reading, where the device offers one (MPS's ``driver_allocated_memory``, which
    perf's long runs judge growth by), grew by at least the allocation while it was held.
    ``also_held``: a suite's own readings, judged by that suite (held, what they saw), for
    harness.optim.controls."""
    n = figures["allocated_bytes"]
    before, after, peak = figures["current_before"], figures["current_after"], figures["peak_after"]
    driver_before, driver_after = figures.get("driver_before"), figures.get("driver_after")
    has_driver = driver_before is not None and driver_after is not None
    expected = (f"the readings to move by the {mib(n)} allocated (within {MEMORY_SLACK:.0%}): memory"
                + (", peak (reset first)" if figures["keeps_peak"] else "") + (", driver (at least)" if has_driver else ""))
    if before is None or after is None:
        return ControlRun(MEMORY, None, expected, "this device offers no memory reading in this torch "
                          "(the suite records none either)", figures=figures)
    moved = after - before
    peak_moved = None if peak is None else peak - before
    driver_moved = driver_after - driver_before if has_driver else None
    seen = [f"{figures['reading']} {signed(moved)}"]
    held = moved_by(moved, n)
    if figures["keeps_peak"]:
        seen.append(f"peak {signed(peak_moved)}{stale_note(peak_moved, figures)}")
        held = held and moved_by(peak_moved, n)
    if has_driver:
        seen.append(f"driver {signed(driver_moved)}")
        held = held and driven_by(driver_moved, n)
    if also_held is not None:
        seen.append(also_held[1])
        held = held and also_held[0]
    return ControlRun(MEMORY, held, expected, ", ".join(seen), MEMORY_CAUSE, MEMORY_SWITCH,
                      {**figures, "current_moved": moved, "peak_moved": peak_moved, "driver_moved": driver_moved})


# --------------------------------------------------------------------------- timing

TIMING = "timing-sees-queued-work"
MATMULS = 4                  # k: matmuls per job, the same on both sides (the same launches)
MIN_JOB_S = 0.003            # the small job must last this long for the comparison to mean anything
RATIO_FLOOR = 3.0            # 8x the arithmetic must take at least this much longer
ROUNDS = 5                   # interleaved rounds per attempt (medians)
ATTEMPTS = 3                 # a noisy machine gets this many attempts before the control gives up
SIZES = (64, 91, 128, 181, 256, 362, 512, 724, 1024, 1448, 2048, 2896, 4096)   # n, by about sqrt(2)
CPU_CAP = 512                # the largest n where the work is a stand-in's on this CPU: 2n = 1024
HOST_CAP = 1448              # the largest n on the CPU target itself: 2n = 2896 (``_sizes``)
TIMING_CAUSE = ("the timer returns before the device has worked, so this suite's times are launch times and its "
                "speed verdicts on this column cannot be trusted")
TIMING_ZERO_CAUSE = ("the timer reads zero or no number for the device's work, so this suite's times and speed "
                     "verdicts on this column cannot be trusted")
TIMING_SWITCH = ("report it with this run file; trust no speed figure there that was not taken with the device "
                 "synchronized")


def _sizes(target: str) -> tuple[int, ...]:
    """The sizes an attempt calibrates through, smallest first (it stops at the first that reads
    MIN_JOB_S). A device's go up to SIZES' last; a stand-in's, whose work runs on this CPU (the
    project's CI machines, where every broken variant's timer reads short and so climbs to the
    cap), to CPU_CAP. The CPU target's go on to HOST_CAP: an attempt whose small job never
    reads MIN_JOB_S fails, and one thread with a matrix unit (an Apple-silicon core through
    Accelerate, about 1 TFLOP/s) runs four 512 x 512 matmuls in about 1 ms; only so fast a CPU
    climbs past 512, where the larger sizes cost it little."""
    place = devices.place(target)
    cap = SIZES[-1] if place != "cpu" else HOST_CAP if target == "cpu" else CPU_CAP
    return tuple(n for n in SIZES if n <= cap)


def timer(target: str, kind: str) -> Callable[[Callable[[], object]], float]:
    """The suite's timer of one call on ``target``, with the device drained before and after
    (devices.synchronizer): ``clock`` is the perf suite's (timing.Clock: the device's own
    events where it has them, else the wall clock), ``timed`` the optimization suite's
    (timing.timed: the wall clock, as harness.optim.ratios.compare_time reads it)."""
    sync = devices.synchronizer(target)
    if kind == "clock":
        clock = timing.Clock(devices.place(target), sync)
        return lambda fn: clock.seconds(fn)
    if kind == "timed":
        return lambda fn: timing.timed(fn, sync)
    raise ValueError(f"unknown timer {kind!r}: clock (perf) or timed (optim)")


def _job(n: int, place: str):
    """k matmuls of two n x n float32 matrices made once: the same launches at any n."""
    import torch
    gen = torch.Generator().manual_seed(n)
    a, b = (torch.rand(n, n, generator=gen).to(place) for _ in range(2))

    def job():
        return [a @ b for _ in range(MATMULS)]
    return job


def _attempt(target: str, read, place: str) -> dict:
    """One attempt: calibrate n upward until the small job reads MIN_JOB_S (the least of three
    reads: interference only adds time) or the largest size is reached, then time the job at
    n against the job at 2n in interleaved rounds. With the process's CPU time over the
    rounds: on the CPU, a process that had the CPU for a fraction of the rounds measured the
    machine's other tenants, not its work."""
    n, small = SIZES[0], 0.0
    for n in _sizes(target):
        job = _job(n, place)
        job()
        small = min(read(job) for _ in range(3))
        if small >= MIN_JOB_S:
            break
    small_job, large_job = _job(n, place), _job(2 * n, place)
    small_job(), large_job()
    small_s, large_s = [], []
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(ROUNDS):   # A B, B A, ...: drift hits both sides alike
        for side in ((small_job, large_job) if i % 2 == 0 else (large_job, small_job)):
            (small_s if side is small_job else large_s).append(read(side))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"n": n, "calibrated": small >= MIN_JOB_S, "calibration_small_s": small, "small_s": small_s,
            "large_s": large_s, "cpu_share": cpu / wall if wall > 0 else None}


def _readable(seconds: float) -> bool:
    """A reading a ratio can be taken of: a finite number above zero."""
    return math.isfinite(seconds) and seconds > 0


def _ratio(attempt: dict) -> float:
    """The larger job's median over the smaller's; NaN where either median is not a finite
    number above zero (a clock that reads zero: no ratio, never an infinite one that passes)."""
    small, large = statistics.median(attempt["small_s"]), statistics.median(attempt["large_s"])
    return large / small if _readable(small) and _readable(large) else float("nan")


def timing_readings(target: str, kind: str) -> dict:
    """Up to ATTEMPTS attempts (``_attempt``) while the ratio of medians stays under
    RATIO_FLOOR; none after one whose small job never reached MIN_JOB_S at the largest size
    (the timer sees no device work: no other attempt will)."""
    place = devices.place(target)
    started = time.perf_counter()
    attempts = []
    with devices.on_device(target), one_thread(place == "cpu"):
        read = timer(target, kind)
        for _ in range(ATTEMPTS):
            attempts.append(_attempt(target, read, place))
            if not attempts[-1]["calibrated"] or _ratio(attempts[-1]) >= RATIO_FLOOR:
                break
    return {"timer": kind, "matmuls": MATMULS, "on_cpu": place == "cpu", "attempts": attempts,
            "seconds": round(time.perf_counter() - started, 3)}


@contextlib.contextmanager
def one_thread(on_cpu: bool):
    """Where the work is the CPU's, one intra-op thread while the control times it: a team of
    OpenMP threads waits at every barrier for its slowest member, so on a machine whose cores
    other processes share, each job reads the scheduler's stalls rather than its arithmetic
    (measured on this project's 2-core VM under a load of 5: four 64 x 64 matmuls read 120 ms
    with 2 threads, 0.03 ms with 1). The timer is the instrument under test, not the threads."""
    if not on_cpu:
        yield
        return
    import torch
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


STARVED = 0.5     # on the CPU, a process that had the CPU for less of its rounds' time than this was starved


def timing_judged(figures: dict) -> ControlRun:
    """The timing control from ``timing_readings``' figures (judged outside the device's
    context: the intervals are float64), by its last attempt.

    Fails, before any ratio is compared, when the timer's medians are not finite numbers above
    zero (a clock that reads zero, as an event pair that never records its times gives: the
    ratio of two zeros passes anything), or when the small job read under MIN_JOB_S even at
    the largest size: the timer returns before the device has worked (interference only adds
    time, so a busy machine cannot make a working timer read short), or reads in the wrong
    unit. Else holds when the larger job's median is at least RATIO_FLOOR x the smaller's. A
    small job that did read MIN_JOB_S, whose 8x larger twin still did not read RATIO_FLOOR x
    longer in any attempt, shows readings made of something else than this work (the
    machine's other tenants, which stall both sides alike, or a fixed cost per job):
    inconclusive, a skip that says what was seen, never a flaky failure."""
    k, last = figures["matmuls"], figures["attempts"][-1]
    n = last["n"]
    small, large = statistics.median(last["small_s"]), statistics.median(last["large_s"])
    ratio = _ratio(last)
    expected = (f"{k} matmuls of {2 * n} x {2 * n} (8x the work of {n} x {n}, as many launches) to take "
                f"{RATIO_FLOOR:g}x as long or more through the suite's timer")
    tries = len(figures["attempts"])
    rounds = f"medians of {len(last['small_s'])} interleaved rounds{f', attempt {tries}' if tries > 1 else ''}"
    out = {**figures, "n": n, "ratio": ratio if math.isfinite(ratio) else None, "small_median_s": small,
           "large_median_s": large}
    if not (_readable(small) and _readable(large)):
        seen = (f"{large * 1e3:.3g} ms against {small * 1e3:.3g} ms ({rounds}; calibration read "
                f"{last['calibration_small_s'] * 1e3:.3g} ms at {n} x {n}): readings of zero or no number")
        return ControlRun(TIMING, False, expected, seen, TIMING_ZERO_CAUSE, TIMING_SWITCH, out)
    widths = [timing.summary(side)["width"] for side in (last["small_s"], last["large_s"])]
    out["widths"] = widths
    seen = f"{ratio:.2f}x ({large * 1e3:.3g} ms against {small * 1e3:.3g} ms, {rounds})"
    if not last["calibrated"]:
        seen += (f"; the small job read {last['calibration_small_s'] * 1e3:.3g} ms at the largest size, under "
                 f"{MIN_JOB_S * 1e3:g} ms")
        return ControlRun(TIMING, False, expected, seen, TIMING_CAUSE, TIMING_SWITCH, out)
    if ratio >= RATIO_FLOOR:
        return ControlRun(TIMING, True, expected, seen, figures=out)
    busy = []
    if max(widths) > timing.NOISY_WIDTH:
        busy.append(f"interval widths {', '.join(f'{w:.0%}' for w in widths)}")
    share = last["cpu_share"]
    if figures["on_cpu"] and share is not None and share < STARVED:
        busy.append(f"the process had the CPU {share:.0%} of the time")
    if small < MIN_JOB_S / 3:
        busy.append(f"calibrated on a reading of {last['calibration_small_s'] * 1e3:.3g} ms that the rounds did not "
                    "repeat")
    why = "; ".join(busy) or "the readings did not grow with the work: a fixed cost per job, or stalls"
    return ControlRun(TIMING, None, expected,
                      f"inconclusive: {seen} ({why}): the machine is too busy to tell; run again on a quieter one",
                      figures=out)


def timing_sees_queued_work(target: str, kind: str = "clock", alone: bool = False) -> ControlRun:
    """The sandbox child's entry: work 8x larger seen through the suite's timer (``kind``:
    ``clock`` for perf, ``timed`` for optim). ``alone``: hold the machine while timing, as a
    perf measurement does (timing.alone); an optimization check runs beside the others."""
    expected = f"work 8x larger to take at least {RATIO_FLOOR:g}x as long"

    def run() -> ControlRun:
        # not alone: the plugin holds the shared side of the lock around a check that is not perf's
        with timing.alone() if alone else contextlib.nullcontext(0.0) as waited:
            figures = timing_readings(target, kind)
        return timing_judged({**figures, "waited_s": round(waited, 3)})
    return guarded(TIMING, expected, TIMING_CAUSE, TIMING_SWITCH, run)
