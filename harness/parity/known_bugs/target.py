"""Where and at what size a known-bug case runs.

``choose_size`` picks the size a target runs: the edge on the CPU and the stand-ins; on an
accelerator the largest of the case's sizes whose working set (``working_set``) fits the
device's and the host's memory readings and whose output stays within the judged limit.
``Target`` runs the case's op on a device or a stand-in (TF32 off, optionally in rapid
succession) and churns or cleans the allocator between runs; ``on_target`` runs a check's
work with a clean allocator after it.
"""
from __future__ import annotations

import math
from typing import Callable

from harness.env import devices
from harness.parity.known_bugs.cases import BugCase, Size, by_name

GIB = 2**30
MEMORY_FRACTION = 0.25      # of the device's memory reading, and of the host's, for one case's working set
# Output elements a size may have: judging one (harness.parity.numerics.accuracy.compare_accuracy,
# about 30 float64 passes on the host) takes about 8 s per 2**25 elements on a 2-core VM,
# and a check judges two runs of each sample within the sandbox's time limit.
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
    """A memory reading: the host's available RAM, or the device's (harness.env.devices.memory_of)."""
    if where == "host":
        import psutil
        return int(psutil.virtual_memory().available), "available RAM"
    return devices.memory_of(where)


# --------------------------------------------------------------------------- running on the target

CHURNS = ("a dirty cache", "an emptied cache")   # the allocator states a rerun follows (Target.churn)
CHURN_SIZES = (1, 2)        # the churn's tensors, in multiples of each input's and the output's size


def tensors_of(tree) -> list:
    """The tensors among a result's or a sample's leaves, in order."""
    import torch
    from torch.utils import _pytree
    return [x for x in _pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


def cast_sample(sample: dict, dtype, device) -> dict:
    """A sample's floating tensors in ``dtype`` on ``device``; integers and flags as they are.
    The dtype changes on the CPU, before the copy: MPS has no float64 to copy from."""
    import torch
    return {k: (v.to(dtype=dtype).to(device) if v.is_floating_point() else v.to(device))
            if isinstance(v, torch.Tensor) else v for k, v in sample.items()}


def to_cpu(tree):
    """A result with each tensor brought to the CPU."""
    import torch
    from torch.utils import _pytree
    return _pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


class Target:
    """Runs a case's op on a target: the device, or a stand-in computing on the CPU. Each
    run copies the inputs to the device anew, so a run after ``churn`` sees its operands
    wherever the allocator now puts them."""

    def __init__(self, target: str):
        self.name = target
        self.kind = devices.kind_of(target)
        self.stand_in = devices.stand_in(target)
        self.backend = devices.backend(target)
        self.device = devices.place(target)

    def run(self, case: BugCase, sample: dict, dtype, cpu=None, reference=None, times: int = 1):
        """The op in full float32: TF32 off (devices.tf32(False)). TF32 is a precision
        setting the op parity suite judges (its cause "tf32"); here a difference must be
        the bug. With ``times`` > 1 the inputs are copied once and the op is launched that
        many times back to back, nothing read back in between ("in rapid succession");
        the results come back as a list, brought to the host after the last launch."""
        args = cast_sample(sample, dtype, self.device)
        with devices.tf32(False):
            if self.stand_in is not None:
                results = [self.stand_in.run(lambda: case.fn(**args), cpu, reference) for _ in range(times)]
            else:
                results = [case.fn(**args) for _ in range(times)]
        return results[0] if times == 1 else [to_cpu(r) for r in results]

    def sync(self) -> None:
        self.backend.synchronize()

    def clean(self) -> None:
        """Empty the allocator's cache after a check that dirtied it: the next check in this
        process starts from a clean state, as a fresh process would."""
        self.sync()
        self.backend.empty_cache()
        if self.stand_in is not None:
            self.stand_in.churned(True)

    def churn(self, like: list, empty: bool) -> None:
        """Allocate tensors the sizes of ``like`` (the inputs and the output) and twice that,
        fill them with NaN and free them: a kernel that reads past its operands now meets
        NaN there. ``empty``: then empty the allocator's cache too (the cure the reports
        name), so the next allocation is fresh memory."""
        import torch
        with devices.on_device(self.name):   # the device's allocations: an emulated device's, in its context
            held = [torch.full((max(1, t.numel() * factor),), math.nan, device=self.device)
                    for t in like for factor in CHURN_SIZES]
            held.append(torch.full((7,), math.nan, device=self.device))
            self.sync()
            del held
        if empty:
            self.backend.empty_cache()
        if self.stand_in is not None:
            self.stand_in.churned(empty)


def on_target(work, name: str, target: str, dtype: str) -> dict:
    """``work(case, target, dtype)``, then a clean allocator for the next check in this process."""
    tgt = Target(target)
    try:
        return work(by_name(name), tgt, dtype)
    finally:
        tgt.clean()
