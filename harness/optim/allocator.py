"""The device allocator's own peak over a block: the cross-check beside the counted storages.

harness/optim/measure.py counts tensor storages, the same bytes on every device; the
allocator's reading (CUDA's and MPS's peak counters, or MPS's current allocation sampled at
module boundaries before torch 2.13) is recorded beside it, never as the value. The CPU
keeps no peak: ``CPU_NO_PEAK`` says why.
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CPU_NO_PEAK = ("the CPU allocator keeps no peak counter, and process RSS also holds the allocator's free "
               "lists and the Python heap: too noisy to compare bytes; the tracked storage peak is the value")


def backend_for(device):
    """The harness.core.devices Backend of ``device``'s type (a torch.device or a string)."""
    import torch

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
