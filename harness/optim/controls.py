"""The optimization suite's controls: does its memory measurement see memory on this device,
its timer the device's work, and does a technique that lowers memory everywhere lower it here?

The suite judges documented claims by ratios of two measurements: peak memory counted from
tensor storages with the device allocator's own peak beside it (harness.optim.measure, read
by harness.optim.techniques.claim_memory), time in interleaved rounds with the device drained
(harness.optim.ratios.compare_time, through harness.env.timing.timed). Before any claim is
judged on a target, three controls with known answers:

  memory-sees-allocation       64 MiB allocated on the device moves the device's memory reading
                               by 64 MiB (harness.env.instruments), MPS's driver reading by at
                               least that, the suite's storage count by exactly that, and the
                               allocator's peak the suite reads beside it (measure.allocator_peak)
                               by it too, where the device keeps one: reset after a block twice
                               as large was freed, so a reset that does nothing reads that block
  timing-sees-queued-work      8x the work takes at least 3x as long through the suite's timer
                               (harness.env.instruments, timing.timed with the device's sync)
  smaller-batch-lowers-memory  a training step at a quarter of the batch peaks lower, measured as
                               a memory claim is (claim_memory: both sides built, a steady step
                               each, the tracked peak and the allocator's), on a tiny BERT

A batch holds activations in proportion to its size on any device: a measurement that does
not see a quarter of the batch lower the peak cannot see any technique do it.
"""
from __future__ import annotations

from harness.core.records import Category, ClaimKind
from harness.env import devices, instruments
from harness.env.instruments import ALLOCATION, ControlRun, mib, moved_by, signed

# The smaller-batch control's step: the tiny BERT (harness.optim.workloads.PRESETS), long
# enough for its activations to outweigh the weights, quick on a 2-core CPU.
SETUP = {"model": "tiny", "batch": 16, "seq": 32, "dropout": False}
SMALLER = 4      # the batch at a quarter


def optim_readings(target: str, nbytes: int = ALLOCATION) -> dict:
    """The optimization suite's own readings of ``nbytes`` of float32 ones allocated on the
    target, inside its context: the storage count (measure.MemoryTracker, whose peak is the
    suite's memory figure) and the allocator's peak over the allocation (measure.allocator_peak,
    the cross-check it records beside it), with the device's current reading before it. Just
    before the peak is reset, a block instruments.STALE x ``nbytes`` is allocated and freed
    (instruments.stale_peak): a reset that does nothing leaves the peak there, which reads as
    twice the allocation, where an allocation as large as the one before it would read right."""
    import torch

    from harness.optim import measure
    backend = devices.backend(target)
    place = devices.place(target)
    with devices.on_device(target):
        tracker = measure.MemoryTracker()   # measure_memory's counter, without its garbage collection
        with tracker:
            x = torch.ones(nbytes // 4, dtype=torch.float32, device=place)
        del x
        instruments.stale_peak(target, nbytes)
        backend.synchronize()
        before = backend.memory_current()
        with measure.allocator_peak(backend) as cross:
            x = torch.ones(nbytes // 4, dtype=torch.float32, device=place)
        del x
    return {"tracked_bytes": tracker.peak_bytes - tracker.baseline_bytes, "allocator_before": before, **cross}


def optim_judged(own: dict, nbytes: int = ALLOCATION) -> tuple[bool, str]:
    """The suite's own readings held when the storage count saw exactly the allocation and the
    allocator's peak (where the device keeps one) moved by it within MEMORY_SLACK."""
    held = own["tracked_bytes"] == nbytes
    seen = f"storage count {signed(own['tracked_bytes'])}"
    peak, before = own["allocator_peak"], own["allocator_before"]
    if peak is not None:
        moved = peak - before if before is not None else None
        held = held and moved_by(moved, nbytes)
        seen += f", allocator's peak {signed(moved)}"
    return held, seen


def memory_sees_allocation(target: str) -> ControlRun:
    """The sandbox child's entry: a known allocation seen through the device's readings and the
    optimization suite's own."""
    expected = f"the memory readings to move by {mib(ALLOCATION)}"

    def run() -> ControlRun:
        own = optim_readings(target)
        found = instruments.memory_judged(instruments.allocation_readings(target), optim_judged(own))
        return ControlRun(found.name, found.held, found.expected + ", storage count (exactly)",
                          found.seen, found.cause, found.switch, {**found.figures, **own})
    return instruments.guarded(instruments.MEMORY, expected, instruments.MEMORY_CAUSE, instruments.MEMORY_SWITCH, run)


def timing_sees_queued_work(target: str) -> ControlRun:
    """The sandbox child's entry: the optimization suite's timer (timing.timed, as
    ratios.compare_time calls it) sees 8x the work."""
    return instruments.timing_sees_queued_work(target, "timed")


SMALLER_BATCH = "smaller-batch-lowers-memory"
BATCH_CAUSE = ("the optimization suite's memory measurement misses a smaller batch's lower peak here, so its "
               "memory verdicts on this column cannot be trusted")
BATCH_SWITCH = instruments.MEMORY_SWITCH


def smaller_batch_lowers_memory(target: str) -> ControlRun:
    """The sandbox child's entry: a step at a quarter of the batch peaks lower, by the tracked
    storages and by the allocator's peak where the device keeps one."""
    base = SETUP["batch"]
    expected = (f"a training step at batch {SMALLER} to peak lower than at batch {base} (tiny BERT, length "
                f"{SETUP['seq']}) by the tracked storages, and by the allocator's peak where the device keeps one")

    def run() -> ControlRun:
        from harness.optim import techniques, workloads
        from harness.optim.ratios import Bound
        setup = workloads.Setup(**SETUP)
        with instruments.one_thread(devices.place(target) == "cpu"):   # memory is the same; the steps quicker
            wa, wb = workloads.Workload(setup, target), workloads.Workload(setup.but(batch=SMALLER), target)
            found = techniques.claim_memory(wa, wb, "peak", Bound(ClaimKind.LOWER, 1.0), name=SMALLER_BATCH)
        held = found["category"] == Category.HOLDS
        seen = f"tracked {mib(found['bytes_b'])} against {mib(found['bytes_a'])} (ratio {found['mem_ratio']:.3f})"
        if found.get("allocator_held_a") is not None and found.get("allocator_held_b") is not None:
            # the allocator's own figures alone: how far it rose over each step (its peak less what it
            # held before), never added to the tracked bytes, which would lower the smaller side however
            # the allocator read (techniques.allocator_view)
            rise_a, rise_b = (found[f"allocator_peak_{s}"] - found[f"allocator_held_{s}"] for s in "ab")
            held = held and 0 <= rise_b < rise_a
            seen += f", the allocator rose by {mib(rise_b)} over the smaller step against {mib(rise_a)}"
        elif found.get("allocator_ratio") is not None:
            held = held and found["allocator_ratio"] < 1
            seen += (f", the allocator's peak {mib(found['allocator_peak_b'])} against "
                     f"{mib(found['allocator_peak_a'])} (ratio {found['allocator_ratio']:.3f})")
        figures = {k: found.get(k) for k in ("mem_ratio", "bytes_a", "bytes_b", "allocator_ratio", "allocator_peak_a",
                                             "allocator_peak_b", "allocator_held_a", "allocator_held_b",
                                             "allocator_method", "allocator_reason", "peak_phase_a", "peak_phase_b")}
        return ControlRun(SMALLER_BATCH, held, expected, seen, BATCH_CAUSE, BATCH_SWITCH,
                          {**figures, "setup": repr(setup), "smaller_batch": SMALLER})
    return instruments.guarded(SMALLER_BATCH, expected, BATCH_CAUSE, BATCH_SWITCH, run)


def cases() -> tuple[instruments.ControlCase, ...]:
    """The optimization suite's controls, on every target (called when the suite is collected)."""
    return instruments.table({instruments.MEMORY: ("harness.optim.controls:memory_sees_allocation",),
                              instruments.TIMING: ("harness.optim.controls:timing_sees_queued_work",),
                              SMALLER_BATCH: ("harness.optim.controls:smaller_batch_lowers_memory",)})
