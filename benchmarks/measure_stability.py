"""How stable harness.optim.measure is on this machine: each built-in model's training-step
memory measured twice (it must repeat to the byte), gradient checkpointing's effect on
tiny BERT's memory, and one interleaved time comparison of the two.

    python -m benchmarks.measure_stability [--models bert,gpt2] [--budget 20]

Prints one JSON object per line.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from harness.core import models
from harness.core.records import ClaimKind
from harness.optim import measure, ratios
from harness.optim.ratios import Bound


def anatomy(name: str, checkpointing: bool = False) -> dict:
    ex = models.example(name)
    if checkpointing:
        ex.model.gradient_checkpointing_enable()
    optimizer = torch.optim.AdamW(ex.model.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    result = measure.memory_anatomy(ex.model, ex.batch, optimizer, ex.loss_fn)
    result["seconds"] = round(time.perf_counter() - t0, 3)
    return result


def stepper(name: str, checkpointing: bool):
    """A callable running one training step of a fresh model (for timing)."""
    ex = models.example(name)
    if checkpointing:
        ex.model.gradient_checkpointing_enable()
    ex.model.train()
    optimizer = torch.optim.AdamW(ex.model.parameters(), lr=1e-3)

    def step():
        measure.training_step(ex.model, ex.batch, optimizer, ex.loss_fn)
        optimizer.zero_grad(set_to_none=True)
    return step


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(n for n, s in models.MODELS.items() if not s.pretrained))
    parser.add_argument("--budget", type=float, default=20.0, help="seconds for the time comparison")
    args = parser.parse_args(argv)
    drop = ("loss", "seconds", "allocator_reason")
    for name in args.models.split(","):
        first, second = anatomy(name), anatomy(name)
        same = {k: v for k, v in first.items() if k not in drop} == {k: v for k, v in second.items() if k not in drop}
        first.pop("allocator_reason")
        print(json.dumps({"model": name, "repeatable": same, **first}))
    plain, ckpt = anatomy("bert"), anatomy("bert", checkpointing=True)
    print(json.dumps({"claim": "gradient checkpointing lowers peak memory (bert)",
                      **ratios.compare_memory(plain["peak_bytes"], ckpt["peak_bytes"], Bound(ClaimKind.LOWER, 1.0)),
                      "activations": [plain["activations"], ckpt["activations"]]}))
    result = ratios.compare_time(stepper("bert", False), stepper("bert", True), Bound(ClaimKind.NOT_HIGHER, 1.2),
                                  budget_s=args.budget)
    result.pop("durations_a")
    result.pop("durations_b")
    print(json.dumps({"claim": "gradient checkpointing costs at most 20% time (bert)", **result}))


if __name__ == "__main__":
    main()
