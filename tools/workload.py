"""Which training shape ``--workload auto`` takes, and why: this machine's targets, or a
device described by its figures.

    python -m tools.workload [--device cpu,cuda,mps]
    python -m tools.workload --memory-gib 80 --tflops 50     # e.g. an H100, without one

Prints, per device, the ladder of named workloads (harness/optim/workloads.py) with each one's
estimated step time and training memory, whether it fits, and the choice with its reason.
Probing a device runs float32 matmuls on it for about a second. Exit 0, or 2 with one line
on bad input (an absent device, a figure that is not a positive number or is beyond any device).
"""
from __future__ import annotations

import argparse
import math

from harness.env import devices
from harness.optim import workloads
from tools import cli


# The largest figures a described device may have: far beyond any device, yet small enough
# that the estimates made from them stay finite numbers (1e308 GiB in bytes is infinity).
MAX_MEMORY_GIB = 2.0 ** 20   # a pebibyte
MAX_TFLOPS = 1e6             # an exaflop per second


def _positive_up_to(ceiling: float, unit: str):
    """An argparse type: a number above 0 and at most ``ceiling``, said in one line otherwise."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and 0 < value <= ceiling):
            raise argparse.ArgumentTypeError(
                f"must be a number above 0 and at most {ceiling:.0f} ({unit}), not {text!r}")
        return value
    return parse


def table(choice: dict) -> str:
    from tabulate import tabulate
    rows = [[r["name"], f"{r['step_s']:.3g}", f"{r['memory_bytes'] / workloads.GIB:.3g}", "yes" if r["fits"] else "no",
             "<- chosen" if r["name"] == choice["name"] else ""] for r in choice["candidates"]]
    return tabulate(rows, headers=("workload", "est. step s", "est. GiB", "fits", ""), tablefmt="simple")


@cli.guarded
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m tools.workload", description=cli.summary(__doc__))
    parser.add_argument("--device", default=None, help="targets to probe (default: every one present)")
    parser.add_argument("--memory-gib", type=_positive_up_to(MAX_MEMORY_GIB, "GiB"), default=None,
                        help="a device's memory, GiB (no probing)")
    parser.add_argument("--tflops", type=_positive_up_to(MAX_TFLOPS, "TFLOP/s"), default=None,
                        help="its float32 matmul TFLOP/s (no probing)")
    args = parser.parse_args(argv)
    if (args.memory_gib is None) != (args.tflops is None):
        return cli.error("--memory-gib and --tflops describe a device together: give both, or neither")
    if args.memory_gib is not None:
        capacities = [workloads.Capacity("the described device", int(args.memory_gib * workloads.GIB), "as given",
                                      args.tflops * 1e12, "as given")]
    else:
        try:
            names = devices.parse_device_option(args.device) if args.device else [
                t for t in devices.TARGETS if devices.backend(t).availability().available]
        except ValueError as exc:
            return cli.error(str(exc))
        for name in names:
            avail = devices.backend(name).availability()
            if not avail.available:
                return cli.error(f"{name}: {avail.reason}")
        capacities = [workloads.probe(name) for name in names]
    for capacity in capacities:
        choice = workloads.choose(capacity)
        cli.say(f"{choice['reason']}\n\n{table(choice)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
