"""The parity suite's controls: does its judge tell a right result from a wrong one on this
device, and does it measure against the reference it says it does?

The parity suite judges a device's result by its accuracy against a float64 reference made
on the CPU, with the CPU's own error in the same dtype as the yardstick (harness.parity.ops
.check: ``wide_reference`` makes the reference, ``accuracy.compare_accuracy`` judges an
accelerator, ``against_reference`` the CPU target). A judge that passes everything, or fails
everything, or measures against a reference rounded like the result, gives a column of
verdicts that says nothing about the device. So the suite opens every target with three
checks whose answer is known, made with those same functions on ``a * b - c``:

  exact-passes           small integers, so the result is exact in float32 on any correct device:
                         computed on the device, it must pass the judge
  perturbed-fails        the same result, read back from the device, moved by 2^-10 of itself
                         (about 1e-3, hundreds of times float32's tolerance; exact in float32):
                         it must fail the judge. Moved after it is read, so a stand-in that
                         replaces the device's result (the oracle gives the reference) is
                         moved too
  reference-float64-cpu  a = b = 1 + 2^-12, c = 1: a * b - c is 2^-11 + 2^-24 exactly, which float32
                         holds, yet float32 arithmetic rounds a * b to even and gives 2^-11. The
                         reference must be that exact value, on the CPU, computed in float64

The operation and its sample are plain objects with the interface the parity functions take
of an OpInfo op and sample (a name, a call; input, args, kwargs, ``transform``,
``output_process_fn_grad``): importing OpInfo costs seconds a control does not have. The
device's result is computed inside the target's context (a stand-in's ``run``, as the suite
computes it), the reference and the judging outside it (float64 is device work an emulated
Mac refuses, as MPS does).
"""
from __future__ import annotations

import dataclasses

from harness.env import devices, instruments
from harness.env.instruments import ControlRun

FACTOR = 1 + 2 ** -10        # how far perturbed-fails moves the device's result, relatively
EXACT_A = 1 + 2 ** -12       # reference-float64-cpu's inputs: a = b = EXACT_A, c = 1
EXACT_VALUE = 2 ** -11 + 2 ** -24    # a * b - c, exactly; float32 arithmetic gives 2^-11
NAME = "controls.mul_sub"    # the op's name: the tolerance table's default class
JUDGE_CAUSE = "so the parity verdicts on this column cannot be told from the judge's own errors"


@dataclasses.dataclass
class MulSub:
    """``a * b - c``, remembering the dtype and device of every call's inputs: the reference's
    calls must be float64 on the CPU."""
    name: str = NAME
    calls: list = dataclasses.field(default_factory=list)

    def __call__(self, a, b, c):
        self.calls.append((str(a.dtype).removeprefix("torch."), a.device.type))
        return a * b - c


@dataclasses.dataclass
class Sample:
    """A sample as the parity functions take OpInfo's (harness.parity.ops.samples)."""
    input: object
    args: tuple = ()
    kwargs: dict = dataclasses.field(default_factory=dict)

    def output_process_fn_grad(self, out):
        return out

    def transform(self, f):
        """The sample with ``f`` applied to every tensor and dtype in it, without grad (OpInfo's
        SampleInput.transform does the same)."""
        import torch

        def each(x):
            if isinstance(x, (torch.Tensor, torch.dtype)):
                with torch.no_grad():
                    return f(x)
            if isinstance(x, (list, tuple)):
                return type(x)(each(v) for v in x)
            if isinstance(x, dict):
                return {k: each(v) for k, v in x.items()}
            return x
        return Sample(each(self.input), each(self.args), each(self.kwargs))


def integers_sample():
    """Small integers in float32: ``a * b - c`` is exact in float32 on any correct device."""
    import torch
    a = torch.arange(1.0, 17.0)
    return Sample(a, (torch.arange(3.0, 19.0), torch.arange(0.0, 16.0) * 5))


def rounding_sample():
    """a = b = 1 + 2^-12 and c = 1, in float32: the product's 2^-24 is a tie float32 rounds away."""
    import torch
    a = torch.full((4,), EXACT_A, dtype=torch.float32)
    return Sample(a, (a.clone(), torch.ones(4)))


def on_target(op: MulSub, sample: Sample, target: str, cpu, reference):
    """``op`` on ``sample`` computed on the target as the parity suite computes a target's
    result (harness.parity.ops.check): the sample moved to the device and evaluated there,
    read back after the device has finished; a stand-in's inside its ``run`` (its context, its
    finish)."""
    import torch

    from harness.parity.ops import samples

    def compute():
        out = samples.evaluate(op, samples.convert(sample, torch.float32, torch.float32, devices.place(target)),
                               "forward", 0, None)
        devices.synchronizer(target)()
        return out
    stand_in = devices.stand_in(target)
    return stand_in.run(compute, cpu, reference) if stand_in is not None else compute()


def judged(op: MulSub, sample: Sample, result, cpu, reference, target: str) -> dict:
    """``result`` judged as the parity suite judges a target's (harness.parity.ops.check): on
    the CPU target against float64 (``against_reference``); on an accelerator by its accuracy,
    with the CPU's error as the yardstick (``accuracy.compare_accuracy``), again with the
    reference's sensitivity to rounding-sized input changes as slack where it missed."""
    import torch

    from harness.parity.numerics import accuracy, tolerances
    from harness.parity.ops import check, samples
    dt, wide = torch.float32, torch.float64
    tol = tolerances.tolerance(op.name, "float32")
    if devices.rules_of(target) == "cpu":
        return check.against_reference(op, sample, result, reference, dt, wide, "forward", tol)

    def compare(slack=None):
        return accuracy.compare_accuracy(result, cpu, reference, tol, dt, tolerances.ACCURACY_FACTOR,
                                         tolerances.ACCURACY_ULPS, slack=slack)
    found = compare()
    if not found["ok"]:
        found = compare(accuracy.slack_of(reference, [samples.wide_reference(op, sample, dt, wide, "forward", trial,
                                                                             like=cpu)
                                                      for trial in range(len(samples.TRIALS))]))
    return found


def _sides(op: MulSub, sample: Sample):
    """The CPU's result in float32 and the float64 reference, as the suite makes them."""
    import torch

    from harness.parity.ops import samples
    cpu = samples.evaluate(MulSub(), sample, "forward", 0, None)
    reference = samples.wide_reference(MulSub(), sample, torch.float32, torch.float64, "forward", like=cpu)
    return cpu, reference


def _figures(found: dict) -> dict:
    return {"judged_ok": found["ok"], "max_abs_err": found["max_abs_err"], "margin": found["margin"],
            "rtol": found["rtol"], "atol": found["atol"], "rule": found.get("rule"), "judge_reason": found["reason"]}


def _said(found: dict) -> str:
    return (f"{'a pass' if found['ok'] else 'a failure'} (max error {found['max_abs_err']:.3g}, margin "
            f"{found['margin']:.3g} at rtol {found['rtol']:g}, atol {found['atol']:g})")


# --------------------------------------------------------------------------- the controls (sandbox child)

def exact_passes(target: str) -> ControlRun:
    """An exact result computed on the device passes the suite's judge."""
    name = "exact-passes"
    expected = "a * b - c on small integers (exact in float32) computed on the device to pass the parity judge"
    cause = ("the device gets an exact float32 result wrong, or the judge fails a right one, "
             f"{JUDGE_CAUSE}")
    switch = "compare with --device cpu, and report it with this run file"

    def run() -> ControlRun:
        sample = integers_sample()
        cpu, reference = _sides(MulSub(), sample)
        result = on_target(MulSub(), sample, target, cpu, reference)
        found = judged(MulSub(), sample, result, cpu, reference, target)
        return ControlRun(name, bool(found["ok"]), expected, _said(found), cause, switch, _figures(found))
    return instruments.guarded(name, expected, cause, switch, run)


def perturbed_fails(target: str) -> ControlRun:
    """The device's exact result moved by 2^-10 of itself fails the same judge."""
    name = "perturbed-fails"
    expected = ("a * b - c computed on the device, moved by 2^-10 of itself (about 1e-3), to fail the parity "
                "judge")
    cause = f"the judge passes a result hundreds of times outside float32's tolerance, {JUDGE_CAUSE}"
    switch = ("check the tolerances (harness/parity/numerics/tolerances.py) and the judge's yardstick, and report it "
              "with this run file")

    def run() -> ControlRun:
        sample = integers_sample()
        cpu, reference = _sides(MulSub(), sample)
        result = on_target(MulSub(), sample, target, cpu, reference) * FACTOR
        found = judged(MulSub(), sample, result, cpu, reference, target)
        return ControlRun(name, not found["ok"], expected, _said(found), cause, switch,
                          {**_figures(found), "moved_by": FACTOR - 1})
    return instruments.guarded(name, expected, cause, switch, run)


def reference_float64_cpu(target: str) -> ControlRun:
    """The reference the judge measures against is computed in float64 on the CPU and holds
    the exact value that float32 arithmetic misses."""
    name = "reference-float64-cpu"
    expected = (f"the reference of a * b - c at a = b = 1 + 2^-12, c = 1 to be {EXACT_VALUE!r} (2^-11 + 2^-24, "
                "exact), computed in float64 on the CPU (float32 arithmetic gives 2^-11)")
    cause = ("the parity judge measures against a reference rounded like the result, or made elsewhere than the "
             "CPU, so its verdicts on this column measure nothing")
    switch = "report it with this run file"

    def run() -> ControlRun:
        import torch

        from harness.parity.ops import samples
        sample = rounding_sample()
        op = MulSub()
        cpu = samples.evaluate(MulSub(), sample, "forward", 0, None)
        reference = samples.wide_reference(op, sample, torch.float32, torch.float64, "forward", like=cpu)
        values = sorted({float(v) for v in reference.flatten()})
        computed = sorted(set(op.calls))
        held = (values == [EXACT_VALUE] and reference.device.type == "cpu"
                and computed == [("float64", "cpu")])
        seen = (f"{', '.join(repr(v) for v in values)} on {reference.device.type} in {reference.dtype}, computed from "
                f"{' and '.join(f'{d} on {w}' for d, w in computed) or 'nothing this control saw'}")
        return ControlRun(name, held, expected, seen, cause, switch,
                          {"reference_values": values, "computed_in": [list(c) for c in computed],
                           "float32_gives": sorted({float(v) for v in cpu.flatten()})})
    return instruments.guarded(name, expected, cause, switch, run)


def cases() -> tuple[instruments.ControlCase, ...]:
    """The parity suite's controls, on every target (called when the suite is collected)."""
    return instruments.table({"exact-passes": ("harness.parity.controls:exact_passes",),
                              "perturbed-fails": ("harness.parity.controls:perturbed_fails",),
                              "reference-float64-cpu": ("harness.parity.controls:reference_float64_cpu",)})
