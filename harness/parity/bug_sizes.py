"""The size a known-bug case runs at on a target: its working set in bytes (working_set), and
the largest of its sizes that fits the device's and the host's memory readings and the
judged output limit (choose_size).
"""
from __future__ import annotations

from typing import Callable

from harness.core import devices
from harness.parity.known_bugs import BugCase, Size

GIB = 2**30
MEMORY_FRACTION = 0.25      # of the device's memory reading, and of the host's, for one case's working set
# Output elements a size may have: judging one (harness.parity.accuracy.compare_accuracy, about 30
# float64 passes on the host) takes about 8 s per 2**25 elements on a 2-core VM, and a
# check judges two runs of each sample within the sandbox's time limit.
JUDGED_MAX = 2**25 + 2**20


def working_set(case: BugCase, size: Size, dtype: str) -> tuple[int, int]:
    """Bytes on the target (inputs and output in ``dtype``) and on the host (the CPU's copy
    in ``dtype``, the float64 reference, the target's result brought back)."""
    import torch
    item = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    n = sum(case.footprint(size.dims))
    return n * item, n * (2 * item + 8)


def choose_size(case: BugCase, target: str, dtype: str, memory: Callable[[str], tuple[int, str]] | None = None
                ) -> tuple[Size, str]:
    """The size a target runs and why: the edge on the CPU and on stand-ins; on an
    accelerator the largest size whose working set fits MEMORY_FRACTION of the device's
    memory reading and of the host's RAM, and whose output has at most JUDGED_MAX
    elements (the judging is on the host)."""
    edge = case.sizes[0]
    if devices.kind_of(target) in ("cpu", "stand-in") or len(case.sizes) == 1:
        return edge, ("the edge size: the CPU and stand-ins run the smallest size that crosses the reported edge"
                      if len(case.sizes) > 1 else "the case has one size")
    memory = memory or _memory
    dev_bytes, dev_how = memory(target)
    host_bytes, host_how = memory("host")
    for size in reversed(case.sizes):
        on_dev, on_host = working_set(case, size, dtype)
        if case.footprint(size.dims)[1] > JUDGED_MAX:
            continue
        if on_dev <= MEMORY_FRACTION * dev_bytes and on_host <= MEMORY_FRACTION * host_bytes:
            return size, (f"{size.name}: {on_dev / GIB:.2g} GiB on the device within {MEMORY_FRACTION:.0%} of "
                          f"{dev_bytes / GIB:.3g} GiB ({dev_how}), {on_host / GIB:.2g} GiB on the host within "
                          f"{MEMORY_FRACTION:.0%} of {host_bytes / GIB:.3g} GiB ({host_how})")
    return edge, (f"{edge.name}: no larger size fits {MEMORY_FRACTION:.0%} of the memory readings ({dev_bytes / GIB:.3g} "
                  f"GiB, {dev_how}; host {host_bytes / GIB:.3g} GiB, {host_how})")


def _memory(where: str) -> tuple[int, str]:
    """A memory reading: the host's available RAM, or the device's (harness.core.sizing.memory_of)."""
    if where == "host":
        import psutil
        return int(psutil.virtual_memory().available), "available RAM"
    from harness.core import sizing
    return sizing.memory_of(where)
