"""``--workload auto``: the training shape at which the optimization claims mean something here.

A claim about a training technique is a claim about a step whose time goes into arithmetic
and whose memory goes into activations. Measured on a step too short, a GPU reports its
kernel-launch overhead (on an H100, bert-small at batch 16 made fp16 autocast *slower*,
ratio 1.24, while macbert-large at batch 32 gave 0.41); measured on a shape too big, the
suite does not finish or does not fit. So the shape is chosen per device from two readings
taken on it (``probe``):

* its memory: free memory on CUDA (``torch.cuda.mem_get_info``), the Metal working-set
  limit on MPS (``torch.mps.recommended_max_memory``), and on the CPU the available RAM,
  capped (``CPU_MEMORY_CAP``) so a big server does not train a large model on its CPU;
* its float32 matmul throughput, timed on the device (``n x n`` matmuls, the median).

``choose`` walks the ladder of named workloads (``LADDER``, smallest first) and takes the
first whose estimated step lasts at least ``MIN_STEP_S`` (launch overhead then stays a
small part of it), provided its estimated memory fits in ``MEMORY_FRACTION`` of the
device's and its step stays under ``MAX_STEP_S`` (the time budget); where none is long
enough, the largest that fits. The estimates (``estimate``) are arithmetic on the model's
config, not measurements:

* step FLOPs: 6 x non-embedding parameters x tokens (forward 2, backward 4; Kaplan et al.
  2020, "Scaling Laws for Neural Language Models", sec. 2.1) plus attention's
  12 x layers x batch x length^2 x hidden;
* memory: 16 bytes per parameter (float32 weights, gradients and AdamW's two moments) plus
  activations of ``length x batch x hidden x (34 + 5 x heads x length / hidden)`` bytes
  per layer at 16 bits (Korthikanti et al. 2022, "Reducing Activation Recomputation in
  Large Transformer Models", sec. 4.1), doubled for float32.

The step-time estimate divides by the peak matmul rate, so it is a lower bound of the real
step: the choice errs towards the larger, more meaningful shape.
"""
from __future__ import annotations

import dataclasses

from harness.optim.workloads import PRESETS, Setup

GIB = 2 ** 30
LADDER = ("small", "medium", "large")
MIN_STEP_S = 0.1          # a BERT step launches ~100 kernels per layer at ~10 us (CUDA) to tens of us (MPS) each
MAX_STEP_S = 2.0          # the optimization suite runs ~60 measured steps per claim and side
MEMORY_FRACTION = 0.5     # of the device's memory reading: room for the other side and the allocator's cache
CPU_MEMORY_CAP = 8 * GIB  # the CPU trains the small shapes only, however much RAM the machine has


@dataclasses.dataclass(frozen=True)
class Capacity:
    """What ``probe`` read on a device (a stand-in may report another device's figures)."""
    device: str
    memory_bytes: int
    memory_source: str
    flops: float              # float32 matmul FLOP/s
    flops_source: str


def estimate(setup: Setup) -> dict:
    """Parameters, step FLOPs, the step time at ``flops`` 1 (seconds per FLOP/s), and the
    training memory of ``setup`` (float32, AdamW), from the model's config alone."""
    c = PRESETS[setup.model]
    h, layers, heads, inner, vocab = (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
                                      c["intermediate_size"], c["vocab_size"])
    per_layer = 4 * h * h + 4 * h + 2 * h * inner + h + inner + 4 * h   # attention, MLP, two LayerNorms
    body = layers * per_layer + h * h + h + 2 * h + 2                    # + pooler and classifier
    embeddings = (vocab + 512 + 2) * h + 2 * h
    tokens = setup.batch * setup.seq
    flops = 6 * body * tokens + 12 * layers * setup.batch * setup.seq ** 2 * h
    activations = 2 * layers * setup.seq * setup.batch * h * (34 + 5 * heads * setup.seq / h)
    params = body + embeddings
    return {"params": params, "step_flops": flops, "memory_bytes": int(16 * params + activations)}


def choose(capacity: Capacity, scales: dict[str, Setup] | None = None, ladder=LADDER) -> dict:
    """The named workload for ``capacity``: ``{"name", "setup", "reason", "candidates"}``."""
    if scales is None:
        from harness.optim.workloads import SCALES as scales
    budget = MEMORY_FRACTION * capacity.memory_bytes
    rows = []
    for name in ladder:
        e = estimate(scales[name])
        step_s = e["step_flops"] / capacity.flops
        rows.append({"name": name, "step_s": step_s, "memory_bytes": e["memory_bytes"],
                     "fits": e["memory_bytes"] <= budget and step_s <= MAX_STEP_S})
    fitting = [r for r in rows if r["fits"]]
    long_enough = [r for r in fitting if r["step_s"] >= MIN_STEP_S]
    pick = long_enough[0] if long_enough else fitting[-1] if fitting else rows[0]
    why = (f"the first whose step (about {pick['step_s']:.3g} s) is at least {MIN_STEP_S:g} s" if long_enough else
           f"no shape that fits gives a step of {MIN_STEP_S:g} s: the largest that fits ({pick['step_s']:.3g} s)"
           if fitting else "nothing fits the memory and time budget: the smallest")
    reason = (f"auto on {capacity.device}: {pick['name']} ({describe(scales[pick['name']])}), {why}, "
              f"estimated {pick['memory_bytes'] / GIB:.2g} GiB of {MEMORY_FRACTION:.0%} x "
              f"{capacity.memory_bytes / GIB:.3g} GiB ({capacity.memory_source}) at "
              f"{capacity.flops / 1e12:.3g} TFLOP/s ({capacity.flops_source})")
    return {"name": pick["name"], "setup": describe(scales[pick["name"]]), "reason": reason, "candidates": rows}


def describe(setup: Setup) -> str:
    return f"{setup.model}, batch {setup.batch}, length {setup.seq}"


# --------------------------------------------------------------------------- readings on the device

def memory_of(device: str) -> tuple[int, str]:
    """The memory the workload may plan with on ``device``, and where the figure comes from."""
    import torch
    kind = device.split(":")[0]
    if kind == "cuda":
        free, total = torch.cuda.mem_get_info()
        return int(free), f"free of {total / GIB:.3g} GiB, torch.cuda.mem_get_info"
    if kind == "mps":
        fn = getattr(getattr(torch, "mps", None), "recommended_max_memory", None)
        if fn is not None:
            return int(fn()), "torch.mps.recommended_max_memory"
    import psutil
    available = int(psutil.virtual_memory().available)
    if kind == "cpu":
        return min(available, CPU_MEMORY_CAP), (f"available RAM capped at {CPU_MEMORY_CAP / GIB:g} GiB"
                                                 if available > CPU_MEMORY_CAP else "available RAM")
    return available, "available RAM (torch offers no device memory reading here)"


def matmul_flops(device: str, n: int | None = None, repeats: int = 5) -> tuple[float, str]:
    """float32 matmul FLOP/s on ``device``: the median of ``repeats`` timed ``n x n`` products
    after a warm-up, the device drained around each (harness.optim.ratios.median_time)."""
    import torch

    from harness.core import devices
    from harness.optim import ratios
    kind = device.split(":")[0]
    n = n or (512 if kind == "cpu" else 4096)
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    seconds = ratios.median_time(lambda: a @ b, sync=devices.backend(kind).synchronize, warmup=1, repeats=repeats)
    return 2 * n ** 3 / seconds, f"median of {repeats} float32 {n}x{n} matmuls"


def probe(device: str) -> Capacity:
    memory, memory_source = memory_of(device)
    flops, flops_source = matmul_flops(device)
    return Capacity(device, memory, memory_source, flops, flops_source)


def resolve(option: str, device: str) -> dict:
    """What ``--workload OPTION`` means on ``device`` (run where the device is: the sandbox)."""
    from harness.optim.workloads import SCALES
    if option != "auto":
        if option not in SCALES:
            raise ValueError(f"unknown workload {option!r}; known: auto, {', '.join(SCALES)}")
        return {"name": option, "setup": describe(SCALES[option]), "reason": f"--workload {option}",
                "candidates": []}
    return choose(probe(device))
