"""Where a training step's memory peak is, what holds it, and what a technique can lower of it.

One labelled, tracked step (``weigh``: harness.optim.measure's categories and phases, with
the device allocator's own peak beside it), the anatomy of a peak (seed 003's columns),
the story a record tells about it, and the second measurement with AdamW one parameter at
a time when a claim's peak sits in the optimizer's step (``single_tensor_alternative``).
Used by the claim measurements of harness/optim/techniques.py and trainer_runs.py.
"""
from __future__ import annotations

from harness.optim import allocator, ratios

# What each memory claim's technique makes smaller (harness.optim.measure categories): the part of
# the peak it can lower. A peak made of something else is one the technique cannot move.
LOWERS = {
    "larger-batch": ("activations", "temporaries"),
    "batch-multiple-of-8": ("activations", "temporaries"),
    "gradient-accumulation": ("activations", "temporaries"),
    "gradient-checkpointing": ("activations",),
    "fp16-autocast": ("activations",),
    "bf16-autocast": ("activations",),
    "torch-cuda-amp-on-mac": ("activations",),
    "adafactor": ("optimizer_state",),
    "adamw-8bit": ("optimizer_state",),
    "fused-adamw": ("temporaries",),
    "freeze-backbone": ("gradients", "optimizer_state"),
    "peft-lora": ("gradients", "optimizer_state"),
    "shorter-max-length": ("activations", "temporaries"),
    "dynamic-padding": ("activations", "temporaries"),
    "sdpa-attention": ("activations", "temporaries"),
    "torch-compile": ("activations", "temporaries"),
}
# The optimizer the alternative measurement uses when a peak sits in AdamW's step.
SINGLE_TENSOR = "adamw-single"


def weigh(measure, w) -> dict:
    """One labelled, tracked step of ``w`` (phases, categories), with the device allocator's
    own peak read over the same step where the device keeps one."""
    from harness.core import devices
    backend = devices.backend(w.device.split(":")[0])
    with allocator.allocator_peak(backend, w.model) as reading:
        m = measure.measure_memory(w.step, resident=w.resident(), labelled=True)
    return {**m, **reading}


ANATOMY_KEYS = ("parameters", "buffers", "gradients", "optimizer_state", "batch", "activations", "temporaries")


def anatomy_of(m: dict) -> dict:
    """What the peak is made of: bytes per category live at the peak moment (seed 003's
    columns), the phase, and the peak itself."""
    return {**{k: m["at_peak"].get(k, 0) for k in ANATOMY_KEYS}, "peak_bytes": m["peak_bytes"],
            "peak_phase": m["peak_phase"]}


def allocator_view(ma: dict, mb: dict, claim_expect, verdict: str, basis: str) -> dict:
    """The device allocator's peaks beside the tracked bytes, and whether they would say
    otherwise about the claim (allocator bytes include block rounding and kernel workspaces)."""
    a, b = ma.get("allocator_peak"), mb.get("allocator_peak")
    out = {"allocator_method": ma.get("allocator_method") or mb.get("allocator_method"),
           "allocator_peak_a": a, "allocator_peak_b": b}
    if a is None or b is None:
        out["allocator_reason"] = ma.get("allocator_reason") or mb.get("allocator_reason") or ""
        return out
    if ma.get("allocator_driver_peak") is not None:
        out.update(allocator_driver_peak_a=ma["allocator_driver_peak"],
                   allocator_driver_peak_b=mb.get("allocator_driver_peak"))
    by_allocator = ratios.compare_memory(a, b, claim_expect)
    out["allocator_ratio"] = by_allocator["mem_ratio"]
    if basis != "optimizer-state" and by_allocator["verdict"] != verdict:
        out["allocator_disagrees"] = (f"by the allocator's peak ({out['allocator_method']}) the claim "
                                      f"{by_allocator['verdict']}: ratio {by_allocator['mem_ratio']:.3f} against "
                                      f"{verdict} by the tracked storages")
    return out


def share(m: dict, categories) -> float:
    """The fraction of the peak held by ``categories`` at the peak moment."""
    return sum(m["at_peak"].get(c, 0) for c in categories) / m["peak_bytes"] if m["peak_bytes"] else 0.0


def makeup(m: dict, top: int = 3) -> str:
    """The ``top`` categories of the peak, largest first, as shares (\"activations 60%, ...\")."""
    parts = sorted(((v, k) for k, v in m["at_peak"].items() if v), reverse=True)[:top]
    return ", ".join(f"{k.replace('_', ' ')} {v / m['peak_bytes']:.0%}" for v, k in parts)


def peak_story(name: str, ma: dict, mb: dict) -> str:
    """Where each side's peak is and what holds it, and how much of it the technique can
    lower, in a user's terms."""
    mib = 2 ** 20
    text = (f"baseline peak {ma['peak_bytes'] / mib:.1f} MiB in the {ma['peak_phase']} phase ({makeup(ma)}); "
            f"with the technique {mb['peak_bytes'] / mib:.1f} MiB in the {mb['peak_phase']} phase ({makeup(mb)})")
    lowers = LOWERS.get(name)
    if lowers:
        what = " and ".join(c.replace("_", " ") for c in lowers)
        text += f"; {name} lowers {what}: {share(ma, lowers):.0%} of the baseline's peak"
    return text + "."


def single_tensor_alternative(measure, wa, wb, name: str, claim_expect, ma: dict, mb: dict) -> dict | None:
    """A memory claim that does not hold with the peak in AdamW's step: measure both sides
    again with AdamW one parameter at a time (``foreach=False``; CUDA's default is foreach,
    whose temporaries span every parameter at once) and say where the peak goes."""
    from harness.optim.workloads import Workload
    if "optimizer" not in (ma["peak_phase"], mb["peak_phase"]):
        return None
    if not (wa.setup.optimizer == wb.setup.optimizer and wa.setup.optimizer in ("adamw", "adamw-foreach")):
        return None
    alt = [Workload(w.setup.but(optimizer=SINGLE_TENSOR), w.device) for w in (wa, wb)]
    for w in alt:
        w.step()
    aa, ab = (weigh(measure, w) for w in alt)
    res = ratios.compare_memory(aa["peak_bytes"], ab["peak_bytes"], claim_expect)
    return {"optimizer": SINGLE_TENSOR, "mem_ratio": res["mem_ratio"], "verdict": res["verdict"],
            "peak_phase_a": aa["peak_phase"], "peak_phase_b": ab["peak_phase"],
            "anatomy_a": anatomy_of(aa), "anatomy_b": anatomy_of(ab),
            "story": alternative_story(name, wa.setup.optimizer, aa, res)}


def alternative_story(name: str, optimizer: str, alt_baseline: dict, res: dict) -> str:
    """What the single-tensor AdamW measurement says about a claim whose peak sat in the
    optimizer's step: where the peak goes, and what the technique does to it there."""
    head = f"The peak is in AdamW's step ({optimizer}), which {name} does not shrink; with AdamW(foreach=False) "
    change = 1 - res["mem_ratio"]
    effect = (f"{name} lowers it by {change:.0%}" if change > 0 else
              f"{name} raises it by {-change:.0%}" if change < 0 else f"{name} leaves it unchanged")
    tail = f" (ratio {res['mem_ratio']:.3f}: the claim {res['verdict']} there)."
    if alt_baseline["peak_phase"] == "optimizer":
        floor = share(alt_baseline, ("parameters", "buffers", "gradients", "optimizer_state"))
        return (head + f"the peak stays in the optimizer step, {floor:.0%} of it the weights, gradients and "
                f"optimizer state themselves, and {effect}" + tail)
    return head + f"the baseline's peak moves to the {alt_baseline['peak_phase']} phase and {effect}" + tail
