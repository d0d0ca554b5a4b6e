"""The property checks' runner and judge: Tally runs an op on one drawn example on the CPU
(in the dtype and in float64) and on the target, judges it by the parity rules
(harness.parity.numerics.accuracy), names a failure's cause (harness.parity.numerics.causes),
and keeps the check's record across every example hypothesis draws. An example that misses
ends the test through the record's verdict path (a failing Verdict, which hypothesis
shrinks like any failure).
"""
from __future__ import annotations

import collections
import math
from typing import TYPE_CHECKING, Callable

from hypothesis import note

from harness.core.records import Category, Status, Verdict, with_cause
from harness.env import devices
from harness.parity.numerics import causes, tolerances
from harness.parity.properties.examples import Example, Floats

if TYPE_CHECKING:
    import torch


def _named(out) -> dict[str, torch.Tensor]:
    return out if isinstance(out, dict) else {"out": out}


def _ref_error(verdict: dict) -> float:
    """A side's error against float64: its largest difference, or inf when it has NaN or
    inf where float64 has a number (or the reverse), which max_abs_err, over finite
    elements, does not show."""
    non_finite = not verdict["ok"] and (verdict.get("non_finite") or verdict["margin"] <= 1)
    return math.inf if non_finite else verdict["max_abs_err"]


def _describe(example: Example, args: dict) -> str:
    """Each input as the op saw it: its layout, shape, strides and storage offset."""
    import torch
    layouts = {name: spec.layout for name, spec in example.inputs if isinstance(spec, Floats)}
    return "; ".join(f"{name} ({layouts.get(name, str(t.dtype).removeprefix('torch.'))}): shape {tuple(t.shape)} stride {t.stride()} "
                     f"offset {t.storage_offset()}" for name, t in args.items() if isinstance(t, torch.Tensor))


class Tally:
    """One property check on one target and dtype, over all its examples.

    hypothesis calls the test body once per example with the same function-scoped
    fixtures, so one Tally (and the record it writes) sees every example: after each one
    the record holds the worst error and margin so far, the layouts met and the worst
    example, whether the check ends in a pass or a failure.
    """

    def __init__(self, record, dtype: str, target: str, device):
        import torch
        self.record, self.dtype, self.target, self.device = record, dtype, target, device
        self.torch_dtype = getattr(torch, dtype)
        # the rules' kind names the causes (the emulated Mac's are MPS's); a stand-in computes in its context
        self.kind, self.stand_in = devices.rules_of(target), devices.stand_in(target)
        self.on_target = target != "cpu"
        self.reference = "float64"  # on an accelerator the CPU's own error is the yardstick
        self.examples = 0
        self.worst = {"max_abs_err": 0.0, "max_rel_err": 0.0, "margin": 0.0}
        self.ref_errs = {"target_ref_err": 0.0, "cpu_ref_err": 0.0}
        self.layouts: collections.Counter = collections.Counter()
        self.worst_example = ""
        record.category = Category.PARITY

    def check(self, op: str | dict, fn: Callable, example: Example, normwise: bool = False,
              reference: Callable | None = None) -> None:
        """Run ``fn`` on the example and judge it; an output that is off fails the check, its
        message naming the output, the cause and the switch.

        The float64 reference is computed another way than the result it judges, so that a
        bug that does not depend on the dtype cannot give the same wrong answer on both
        sides and cancel out (on the CPU target the reference is otherwise the very kernel
        under test, in float64): always on contiguous copies of the inputs (a kernel that
        ignores strides then misses it), and by ``reference`` where given, a function with
        ``fn``'s arguments that computes the same thing from other ops (attention written
        out as matmul, softmax, matmul).

        ``op`` names the op in the tolerance table, or maps each output to its op where
        they differ (a gradient is its backward op's result).

        On the CPU target the op in the dtype is judged against float64 on the same
        (rounded) values, elementwise or, for ops whose low-precision error scales with
        the output's magnitude rather than each element's, ``normwise`` (see
        harness.parity.numerics.accuracy). On an accelerator it is judged by its accuracy against float64,
        with the CPU in the same dtype as the yardstick (accuracy.compare_accuracy: the same
        rules, or no less accurate than the CPU); both sides' errors against float64 are
        recorded, and a failure names its cause (harness.parity.numerics.causes).
        """
        made = example.make()
        ref = _named((reference or fn)(**example.arguments(made, self.torch_dtype, "cpu", wide=True, contiguous=True)))
        cpu_args = example.arguments(made, self.torch_dtype, "cpu")
        cpu = _named(fn(**cpu_args))
        if not self.on_target:
            note(f"inputs on cpu: {_describe(example, cpu_args)}")
            verdicts = self._compare(op, cpu, ref, normwise)
            from harness.parity.numerics import accuracy
            for name, v in verdicts.items():
                if not v["ok"] and (count := accuracy.non_finite(cpu[name], ref[name])):
                    v.update(non_finite=count, margin=math.inf, **causes.describe("non-finite", "cpu", self.dtype))
        else:
            target_args = example.arguments(made, self.torch_dtype, self.device)
            note(f"inputs on {self.target}: {_describe(example, target_args)}")
            out = self._on_target(fn, target_args, cpu, ref)
            verdicts = self._accuracy(op, out, cpu, ref, normwise)
            for key, side in (("target_ref_err", out), ("cpu_ref_err", cpu)):
                errs = self._compare(op, side, ref, normwise=True)
                self.ref_errs[key] = max(self.ref_errs[key], *(_ref_error(v) for v in errs.values()))
            if not all(v["ok"] for v in verdicts.values()):
                self._diagnose(op, fn, example, made, out, cpu, ref, normwise, verdicts)
        self._tally(example, verdicts)
        for name, v in verdicts.items():
            if v["ok"]:
                continue
            seen = (f"{v['op']} {self.dtype} on {self.target}: output {name!r} is off against {self.reference}: "
                    f"max_abs_err={v['max_abs_err']:.3g}, margin={v['margin']:.3g} at rtol={v['rtol']:.3g}, "
                    f"atol={v['atol']:.3g} ({v['rule']}; {v['source']}): {v['reason']}")
            self.record.conclude(Verdict(Status.FAIL, Category.PARITY, with_cause(seen, v) if v.get("cause") else seen),
                                 in_example=True)

    def _on_target(self, fn: Callable, target_args: dict, cpu: dict, ref: dict) -> dict:
        """The op on the target; a stand-in computes on the CPU in its context and may replace it."""
        if self.stand_in:
            rounded = {k: v.to(self.torch_dtype) if v.is_floating_point() else v for k, v in ref.items()}
            out = self.stand_in.run(lambda: _named(fn(**target_args)), cpu, rounded)
        else:
            out = _named(fn(**target_args))
        return {k: v.cpu() for k, v in out.items()}

    def _accuracy(self, op: str | dict, out: dict, cpu: dict, ref: dict, normwise: bool) -> dict[str, dict]:
        from harness.parity.numerics import accuracy
        verdicts = {}
        for name, a in out.items():
            op_name = op[name] if isinstance(op, dict) else op
            tol = tolerances.tolerance(op_name, str(a.dtype).removeprefix("torch."))
            verdicts[name] = {**accuracy.compare_accuracy(a, cpu[name], ref[name], tol, self.torch_dtype,
                                                        tolerances.ACCURACY_FACTOR, tolerances.ACCURACY_ULPS,
                                                        normwise=normwise),
                              "op": op_name, "source": f"{tol.source}; {tolerances.ACCURACY_SOURCE}"}
        return verdicts

    def _diagnose(self, op, fn: Callable, example: Example, made: dict, first: dict, cpu: dict, ref: dict,
                  normwise: bool, verdicts: dict) -> None:
        """Rerun the failing example on the target in differential ways (harness.parity.numerics.causes).
        ``first``: the failing run's result, which a second run is compared with (a rerun made
        here to compare with would be a second run already: on a device that gives other bits
        on every run, the failing one would never be seen again)."""
        import torch

        def passes(out: dict) -> bool:
            return all(v["ok"] for v in self._accuracy(op, out, cpu, ref, normwise).values())

        def rerun(trial: str) -> bool | None:
            if trial == "nondeterministic":
                again = self._on_target(fn, example.arguments(made, self.torch_dtype, self.device), cpu, ref)
                return any(not torch.equal(again[k], first[k]) for k in first) and passes(again)
            if trial == "tf32":
                with devices.tf32(False):
                    return passes(self._on_target(fn, example.arguments(made, self.torch_dtype, self.device),
                                                  cpu, ref))
            if trial == "reduced-precision":
                wide = self._on_target(fn, example.arguments(made, self.torch_dtype, self.device,
                                                             compute=torch.float32), cpu, ref)
                if not passes({k: v.to(self.torch_dtype) if v.is_floating_point() else v for k, v in wide.items()}):
                    return False
                # float32 is right: is the miss one half precision reaches, or the half kernel's own?
                return causes.half_precision_explains(self.dtype, causes.tensor_misses(
                    (first[k], cpu[k], ref[k]) for k, v in verdicts.items() if not v["ok"]))
            return None
        found = causes.describe(causes.diagnose(self.kind, self.dtype, rerun, *verdicts.values()), self.kind,
                                self.dtype)
        for v in verdicts.values():
            if not v["ok"]:
                v.update(found)

    def _compare(self, op: str | dict, actual: dict, expected: dict, normwise: bool) -> dict[str, dict]:
        from harness.parity.numerics import accuracy
        verdicts = {}
        for name, a in actual.items():
            op_name = op[name] if isinstance(op, dict) else op
            tol = tolerances.tolerance(op_name, str(a.dtype).removeprefix("torch."))
            verdicts[name] = {**accuracy.compare(a, expected[name], tol, normwise=normwise), "op": op_name,
                              "source": tol.source}
        return verdicts

    def _tally(self, example: Example, verdicts: dict) -> None:
        self.examples += 1
        self.layouts.update(set(example.layouts()))
        # the tolerance on record is the one of the output that came closest to failing
        name, binding = max(verdicts.items(), key=lambda item: item[1]["margin"])
        if self.examples == 1 or binding["margin"] > self.worst["margin"]:
            self.worst_example = repr(example)
            self.record.metric(rtol=binding["rtol"], atol=binding["atol"], tolerance_source=binding["source"],
                               rule=binding["rule"], worst_output=name)
        for key in self.worst:
            self.worst[key] = max(self.worst[key], *(v[key] for v in verdicts.values()))
        self.record.metric(**self.worst, reference=self.reference, dtype=self.dtype, examples=self.examples,
                           layouts=dict(sorted(self.layouts.items())), worst_example=self.worst_example)
        failed = [v for v in verdicts.values() if not v["ok"]]
        if failed:   # NaN or inf where float64 has numbers, of the example that failed last (the one shown)
            self.record.metric(non_finite=sum(v.get("non_finite", 0) for v in failed))
            if self.on_target:   # and of them, how many the CPU gives too (accuracy.compare_accuracy)
                self.record.metric(non_finite_on_cpu=sum(v.get("non_finite_on_cpu", 0) for v in failed))
        if self.on_target:
            self.record.metric(**self.ref_errs, yardstick="cpu")
            causes_seen = {v["cause"]: v for v in verdicts.values() if v.get("cause")}
            for v in causes_seen.values():
                self.record.metric(cause=v["cause"], cause_what=v["cause_what"], switch=v["switch"])
