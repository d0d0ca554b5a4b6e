"""Benchmark: what a model costs to build, initialised afresh or from kept initial weights.

    python benchmarks/optim_build.py [--models macbert-large bert-small] [--rounds 5] [--device cpu]

The optimization suite builds about thirty models in a run (a claim's sides, the rows of the
tutorial's path, the Trainer's two trainers per claim): on the CPU target, 30 bert-small and
10 tiny ones in `pytest suites/ -m "optim and cpu"`. At the large workload each is
macbert-large, 335M parameters that the seeded initialisation draws one by one on the CPU
before they are copied to the device. harness.optim.workloads.build_model now initialises a
model size once per process (``initial_weights``) and copies those values into a model made
on the meta device, then placed where it runs.

For each model size this times, in interleaved rounds, a build that initialises (the kept
weights dropped first: what every build cost before) and a build from the kept weights, on
``--device``, and checks that both give the same parameters and buffers, bit for bit, as a
model made directly with the seed. It prints the medians and ranges. Figures are printed,
never asserted (a mismatch is printed as such and makes the exit status 1).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from tabulate import tabulate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "benchmarks"))

from optim_zone_stop import above  # noqa: E402

from harness.env import devices  # noqa: E402
from harness.optim import workloads  # noqa: E402


def seeded(setup: workloads.Setup):
    """The model made the direct way: the seed set, the classifier constructed (its own
    initialisation), as every build did before the weights were kept."""
    import torch
    from transformers import BertForSequenceClassification
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(workloads.SEED)
        return BertForSequenceClassification(workloads._config(setup))


def same_values(a, b) -> bool:
    import torch
    ta, tb = (dict([*m.named_parameters(), *m.named_buffers()]) for m in (a, b))
    return list(ta) == list(tb) and all(
        ta[k].dtype == tb[k].dtype and torch.equal(ta[k].cpu(), tb[k].cpu()) for k in ta)


def build_seconds(setup: workloads.Setup, device: str, fresh: bool) -> float:
    """One build's seconds: with ``fresh``, the kept weights dropped first, so that the build
    initialises them (as every build did before) and copies them in."""
    if fresh:
        workloads.forget_weights()
    start = time.perf_counter()
    model = workloads.build_model(setup, device)
    devices.synchronizer(device)()
    seconds = time.perf_counter() - start
    del model
    return seconds


def device_type(text: str) -> str:
    """An argparse type: a device this machine has ("cpu", "cuda", "cuda:0", "mps"), judged by
    the suites' own backends (harness.env.devices), whose reason is the one line a refusal says."""
    kind = text.split(":")[0]
    if kind not in devices.TARGETS:
        raise argparse.ArgumentTypeError(f"unknown device {text!r}; known: {', '.join(devices.TARGETS)}")
    found = devices.backend(kind).availability()
    if not found.available:
        raise argparse.ArgumentTypeError(f"{text} is not available here: {found.reason}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["macbert-large", "bert-small"],
                        choices=sorted(workloads.PRESETS), help="model sizes (harness.optim.workloads.PRESETS)")
    parser.add_argument("--rounds", type=above(1, int, inclusive=True), default=5,
                        help="interleaved rounds per model size")
    parser.add_argument("--device", type=device_type, default="cpu",
                        help="where the models' tensors live: cpu, cuda, cuda:0, mps")
    args = parser.parse_args(argv)
    rows, mismatched = [], []
    for name in args.models:
        setup = workloads.Setup(model=name)
        if not same_values(seeded(setup), workloads.build_model(setup, args.device)):
            mismatched.append(name)
        fresh, kept = [], []
        for i in range(args.rounds):   # the order swapped every round
            for is_fresh in ((True, False) if i % 2 == 0 else (False, True)):
                (fresh if is_fresh else kept).append(build_seconds(setup, args.device, is_fresh))
        params = sum(t.numel() for t in workloads.initial_weights(setup).values())
        rows.append([name, f"{params / 1e6:.1f}M", f"{statistics.median(fresh):.3f}",
                     f"{min(fresh):.3f}-{max(fresh):.3f}", f"{statistics.median(kept):.3f}",
                     f"{min(kept):.3f}-{max(kept):.3f}",
                     f"{statistics.median(fresh) / statistics.median(kept):.1f}x",
                     "no" if name in mismatched else "yes"])
    print(f"building a model on {args.device}, {args.rounds} interleaved rounds (seconds)")
    print(tabulate(rows, headers=["model", "weights", "initialised, median", "range", "from kept weights, median",
                                  "range", "faster", "same values as a seeded model"]))
    for name in mismatched:
        print(f"MISMATCH: {name}: a model built from kept weights differs from one made with the seed")
    return 1 if mismatched else 0


if __name__ == "__main__":
    sys.exit(main())
