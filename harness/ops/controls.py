"""The ops suite's controls: does the suite see, on this device, how an op ran?

The ops suite classifies each op as native, cpu-fallback or unsupported by watching what
the device says while the op runs (harness.ops.opsweep, with harness.ops.fallback.capture):
MPS's fallback warning names an op that ran on the CPU, NotImplementedError says an op has
no kernel. A device whose warnings never reach the suite (a warnings filter, a torch build
that swallows them) would make every op look native, and nothing in an all-green column
would say so. So the ops suite opens every target with checks whose answer is known: the
first three from this torch's own kernel table (harness.ops.kernels: the installed torch's
native_functions.yaml, the table the macOS wheel ships too), the fourth from the device's own
warning; each through the suite's classification and capture:

  fallback-seen        an op with no kernel for the device (and, on MPS, a CPU kernel for the
                       fallback to run) is seen falling back, named by the warning, with the
                       fallback on (PYTORCH_ENABLE_MPS_FALLBACK=1), or raising NotImplementedError
                       with it off; on the CPU or CUDA, where there is no fallback, raising
                       NotImplementedError: unsupported
  native-seen          an op with a kernel for the device runs natively: no fallback warning
  fallback-seen-again  MPS warns of a fallback once per process (TORCH_WARN_ONCE, one call site
                       in aten/src/ATen/mps/MPSFallback.mm); the suite turns warn-always on so a
                       check sees its own op's warning whatever ran before it. The op is run once
                       first, outside the capture, and must still be seen under it. On the CPU
                       and CUDA the same property is checked with a warning torch gives once per
                       process there (torch.meshgrid's, TORCH_WARN_ONCE in
                       aten/src/ATen/native/TensorShape.cpp)
  in-kernel-fallback-seen
                       on MPS, an op whose MPS kernel sends these operands to the CPU itself
                       (nonzero of a complex input, avg_pool2d with a divisor on an int64 one:
                       ``IN_KERNEL_CALLS``) and says so in a warning of its own ("MPS: ...
                       Falling back on CPU", harness.ops.fallback.IN_KERNEL_RE) is read as
                       cpu-fallback, named "(in-kernel)", not as native. The device's own
                       warnings are read first, with a wider net than the suite's
                       (``SAYS_CPU``): one that speaks of falling back to the CPU and that the
                       suite reads as native is a miss, such as a torch that words it anew.
                       Where this torch's kernels give no such warning (they ran those operands
                       on the device) there is nothing to see, and it is skipped; elsewhere
                       MPS's kernels are not there, and it does not apply

The ops are reached from a plain torch call on an obvious sample (``CALLS``), picked at run
time from the table: a torch whose table gives none of them a missing kernel skips the
control with the reason. Each runs in the sandbox child inside the target's context
(devices.on_device), its sample placed where the target keeps tensors (devices.place).
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import subprocess
import sys
import warnings

from harness.core.records import Category
from harness.env import devices, instruments
from harness.env.facts import FALLBACK_VAR
from harness.env.instruments import ControlRun
from harness.ops import fallback, kernels, opsweep

KEYS = {"cpu": "CPU", "cuda": "CUDA", "mps": kernels.MPS_KEY, "stand-in": "CPU"}   # rules -> dispatch key


@dataclasses.dataclass(frozen=True)
class OpCall:
    """An op reached from a plain torch call: ``torch.<function>(x, *extra)`` on a float32
    sample of eight 0.25s dispatches ``aten`` (its native_functions.yaml entry)."""
    aten: str
    function: str          # dotted under torch: "special.ndtri"
    extra: tuple = ()

    @property
    def spelt(self) -> str:
        return f"torch.{self.function}(x{''.join(f', {a!r}' for a in self.extra)})"

    def run(self, x):
        import torch
        fn = torch
        for part in self.function.split("."):
            fn = getattr(fn, part)
        return fn(x, *self.extra)


# Candidates, in order of preference: ops that some device lacks a kernel for, and ops every
# device has one for. Which is which on a device is read from the table at run time; in torch
# 2.15 special_ndtri, special_log_ndtr and special_airy_ai have CPU and CUDA kernels and no MPS
# one, _fused_dropout CUDA's alone, histogram.bin_ct none for CUDA.
WITHOUT = (
    OpCall("special_ndtri", "special.ndtri"),
    OpCall("special_log_ndtr", "special.log_ndtr"),
    OpCall("special_airy_ai", "special.airy_ai"),
    OpCall("_fused_dropout", "_fused_dropout", (0.5,)),
    OpCall("histogram.bin_ct", "histogram", (4,)),
)
WITH = (OpCall("mul.Tensor", "mul", (2.0,)), OpCall("exp", "exp"))
CALLS = WITHOUT + WITH


def kernel_keys(table: dict, name: str) -> set[str]:
    """The dispatch keys an entry has a kernel for, its structured delegate's included
    (torchgen's rule, harness.ops.kernels)."""
    row = table[name]
    keys = set(row["dispatch_keys"])
    if row["structured_delegate"]:
        keys |= set(table.get(row["structured_delegate"], {}).get("dispatch_keys", ()))
    return keys


def has_kernel(table: dict, name: str, rules: str) -> bool:
    """Whether the table gives ``name`` a kernel of its own for the device ``rules`` names
    (MPS by harness.ops.kernels' own rule)."""
    if rules == "mps":
        return bool(table[name]["mps"])
    return KEYS.get(rules, "CPU") in kernel_keys(table, name)


def pick(table: dict, rules: str, with_kernel: bool) -> OpCall | None:
    """The first call whose op has a kernel for the device (``with_kernel``: of WITH, then
    WITHOUT) or lacks one (of WITHOUT); one that lacks it must not be a composite (those run as
    other ops), and on MPS must have a CPU kernel (the fallback runs it on the CPU)."""
    for call in WITH + WITHOUT if with_kernel else WITHOUT:
        if call.aten not in table:
            continue
        if with_kernel and has_kernel(table, call.aten, rules):
            return call
        if (not with_kernel and not has_kernel(table, call.aten, rules) and not table[call.aten]["composite"]
                and (rules != "mps" or "CPU" in kernel_keys(table, call.aten))):
            return call
    return None


def classify(call: OpCall, target: str) -> opsweep.OpRun:
    """``call`` on ``target``, classified as the ops sweep classifies a sample's run
    (harness.ops.opsweep.run_case): under the suite's capture, NotImplementedError is
    unsupported, any other error is an error, and a run that the fallback warnings name ops of
    is cpu-fallback."""
    import torch

    def once():
        x = torch.full((8,), 0.25, dtype=torch.float32, device=devices.place(target))
        call.run(x)
        devices.synchronizer(target)()
        yield True
    return opsweep.classified(target, once(), op=call.aten)


def _names(run: opsweep.OpRun, aten: str) -> bool:
    """Whether the fallback warnings named ``aten`` (by its op name, any overload spelling)."""
    base = aten.split(".")[0]
    return any(op.removeprefix("aten::").split(".")[0] == base for op in run.fallback_ops)


def _seen(run: opsweep.OpRun) -> str:
    said = run.category + (f", the fallback warning naming {', '.join(run.fallback_ops)}" if run.fallback_ops else "")
    return said + (f" ({run.message[:160]})" if run.message else "")


def _figures(call: OpCall, run: opsweep.OpRun, table_source: str) -> dict:
    return {"op": call.aten, "call": call.spelt, "category_seen": run.category, "warned_ops": list(run.fallback_ops),
            "error": run.message, "kernel_table": table_source}


def _setting() -> tuple[bool, str]:
    """Whether MPS's fallback is on in this process (the suite sets 1 or 0 before torch loads;
    torch >= 2.8 reads any other value but 0 as on too), and the setting in words."""
    value = os.environ.get(FALLBACK_VAR)
    return value is not None and value.strip() not in ("", "0"), f"{FALLBACK_VAR}={value or 'unset'}"


@functools.lru_cache(maxsize=1)
def _table():
    """The installed torch's kernel table, read once per process (0.5 s of YAML)."""
    snap = kernels.load_installed()
    return snap.table, f"{snap.source} (torch {snap.torch_version})"


WARNINGS_CAUSE = ("the ops suite does not see this device's fallback warnings, so an op that runs on the CPU is "
                  "reported native and its cpu-fallback verdicts cannot be trusted on this column")
WARNINGS_SWITCH = ("run without a warnings filter that hides UserWarning (PYTHONWARNINGS, -W, filterwarnings in a "
                   "conftest) and report it with this run file")
NATIVE_CAUSE = ("an op this torch has a kernel for is reported falling back or failing, so the ops suite's "
                "verdicts on this column cannot be trusted")
NATIVE_SWITCH = "check that torch is the wheel its kernel table describes (python -m tools.kernels); report it"
UNSUPPORTED_CAUSE = ("an op with no kernel for this device is not classified unsupported, so the ops suite's verdicts "
                     "cannot be trusted on this column")
UNSUPPORTED_SWITCH = "report it with this run file"
NONE_MISSING = "no op reachable from a plain torch call ({names}) lacks a {key} kernel in this torch's table ({source})"


# --------------------------------------------------------------------------- the controls (sandbox child)

def _picked(target: str, with_kernel: bool):
    """The target's device rules, the op picked from this torch's kernel table (with or without
    a kernel for that device; None when no candidate fits), the table's key and its source."""
    rules = devices.rules_of(target)
    table, source = _table()
    return rules, pick(table, rules, with_kernel=with_kernel), KEYS.get(rules, "CPU"), source


def fallback_seen(target: str) -> ControlRun:
    """An op without a kernel for the device, seen as the device's rules say it must be."""
    name = "fallback-seen"
    rules, call, key, source = _picked(target, with_kernel=False)
    if call is None:
        return ControlRun(name, None, f"an op without a {key} kernel to be seen as such",
                          NONE_MISSING.format(names=", ".join(c.aten for c in CALLS), key=key, source=source))
    on, setting = _setting()
    if rules == "mps" and on:
        expected = (f"{call.spelt} (aten::{call.aten}, no MPS kernel in this torch's table) to fall back to the CPU "
                    f"with MPS's warning naming it ({setting})")
        cause, switch = WARNINGS_CAUSE, WARNINGS_SWITCH
    elif rules == "mps":
        expected = (f"{call.spelt} (aten::{call.aten}, no MPS kernel in this torch's table) to raise "
                    f"NotImplementedError: unsupported ({setting}: the fallback is off)")
        cause, switch = UNSUPPORTED_CAUSE, UNSUPPORTED_SWITCH
    else:
        expected = f"{call.spelt} (aten::{call.aten}, no {key} kernel in this torch's table) to be unsupported " \
                   "(NotImplementedError)"
        cause, switch = UNSUPPORTED_CAUSE, UNSUPPORTED_SWITCH

    def run() -> ControlRun:
        found = classify(call, target)
        if rules == "mps" and on:
            held = found.category == Category.CPU_FALLBACK and _names(found, call.aten)
        else:
            held = found.category == Category.UNSUPPORTED
        return ControlRun(name, held, expected, _seen(found), cause, switch, _figures(call, found, source))
    return instruments.guarded(name, expected, cause, switch, run)


def native_seen(target: str) -> ControlRun:
    """An op with a kernel for the device runs natively, with no fallback warning."""
    name = "native-seen"
    rules, call, key, source = _picked(target, with_kernel=True)
    if call is None:
        return ControlRun(name, None, f"an op with a {key} kernel to run natively",
                          f"no op of {', '.join(c.aten for c in CALLS)} has a {key} kernel in this torch's table "
                          f"({source})")
    expected = (f"{call.spelt} (aten::{call.aten}, {'an' if key == 'MPS' else 'a'} {key} kernel in this torch's "
                "table) to run natively, no fallback warning")

    def run() -> ControlRun:
        found = classify(call, target)
        held = found.category == Category.NATIVE and not found.fallback_ops
        return ControlRun(name, held, expected, _seen(found), NATIVE_CAUSE, NATIVE_SWITCH,
                          _figures(call, found, source))
    return instruments.guarded(name, expected, NATIVE_CAUSE, NATIVE_SWITCH, run)


def _spend(run, always: bool = False) -> list[str]:
    """Call ``run`` with torch's warn-always off (its default; ``always``: on) and the warnings
    it gives kept from the console: a TORCH_WARN_ONCE there is spent for the process. The first
    lines of the warnings given."""
    import torch
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(always)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                run()
            except Exception:  # what it raises is seen again under the capture, where it counts
                pass
    finally:
        torch.set_warn_always(before)
    return [str(w.message).splitlines()[0] for w in caught]


MESHGRID = "torch.meshgrid"   # the start of its once-per-process warning's text


def _meshgrid(place: str):
    import torch
    a = torch.ones(2, device=place)
    return torch.meshgrid(a, a)


def _fresh_process_warns() -> bool | None:
    """Whether torch.meshgrid without ``indexing`` warns at all in this torch: asked of a fresh
    interpreter, where nothing has spent its once. None when that cannot be told."""
    code = ("import warnings, torch\nwith warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n    torch.meshgrid(torch.ones(2), torch.ones(2))\n"
            f"print(sum(str(x.message).startswith({MESHGRID!r}) for x in w))\n")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
        return int(done.stdout.strip().splitlines()[-1]) > 0
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def fallback_seen_again(target: str) -> ControlRun:
    """A warning torch gives once per process, seen again through the suite's capture after
    torch already gave it: the MPS fallback's on MPS, torch.meshgrid's elsewhere."""
    name = "fallback-seen-again"
    rules = devices.rules_of(target)
    if rules != "mps":
        return _once_seen_again(name, target)
    table, source = _table()
    call = pick(table, rules, with_kernel=False)
    on, setting = _setting()
    expected = "the fallback warning seen again after torch gave it once in this process"
    if call is None:
        return ControlRun(name, None, expected, NONE_MISSING.format(names=", ".join(c.aten for c in CALLS),
                                                                    key="MPS", source=source))
    if not on:
        return ControlRun(name, None, expected,
                          f"the MPS fallback is off ({setting}; --mps-fallback on turns it on): an op without a "
                          "kernel raises, there is no fallback warning to see again")
    expected = (f"MPS's fallback warning for {call.spelt} (aten::{call.aten}) seen again under the suite's capture "
                "after torch already gave it once in this process (TORCH_WARN_ONCE)")
    switch = ("the suite must turn warn-always on around each check (torch.set_warn_always(True)); report it with "
              "this run file")
    cause = ("the ops suite sees a fallback only in the first check that meets it, so later ops that fall back are "
             "reported native on this column")

    def run() -> ControlRun:
        import torch
        with devices.on_device(target):
            x = torch.full((8,), 0.25, dtype=torch.float32, device=devices.place(target))
            first = _spend(lambda: call.run(x))
        found = classify(call, target)
        held = found.category == Category.CPU_FALLBACK and _names(found, call.aten)
        return ControlRun(name, held, expected, _seen(found), cause, switch,
                          {**_figures(call, found, source), "first_call_warned": bool(first)})
    return instruments.guarded(name, expected, cause, switch, run)


def _once_seen_again(name: str, target: str) -> ControlRun:
    """On a device without a fallback: torch.meshgrid's once-per-process warning seen again."""
    expected = (f"{MESHGRID}'s once-per-process warning (TORCH_WARN_ONCE) seen again under the suite's capture "
                "after torch already gave it in this process")
    cause = ("a warning torch gives once per process is seen only the first time under the suite's capture, so a "
             "check's warnings depend on which checks ran before it on this column")
    switch = "the capture must turn warn-always on (torch.set_warn_always(True)); report it with this run file"

    def run() -> ControlRun:
        place = devices.place(target)
        with devices.on_device(target):
            first = _spend(lambda: _meshgrid(place))
            with fallback.capture() as cap:
                _meshgrid(place)
        again = [w for w in cap.other_warnings if w.startswith(MESHGRID)]
        figures = {"first_call_warned": any(w.startswith(MESHGRID) for w in first), "warnings_seen": cap.other_warnings}
        if again:
            return ControlRun(name, True, expected, f"seen again: {again[0][:120]}", figures=figures)
        if not figures["first_call_warned"] and _fresh_process_warns() is False:
            return ControlRun(name, None, expected, f"this torch gives no warning at {MESHGRID} without indexing, "
                              "even in a fresh process: no once-per-process warning to see again", figures=figures)
        return ControlRun(name, False, expected, "no such warning under the capture", cause, switch, figures)
    return instruments.guarded(name, expected, cause, switch, run)


# --------------------------------------------------------------------------- MPS kernels' own fallbacks

@dataclasses.dataclass(frozen=True)
class KernelCall:
    """A call whose MPS kernel sends its operands to the CPU itself, with a warning of its own
    (harness.ops.fallback.IN_KERNEL_RE), in the PyTorch sources read for it."""
    aten: str      # the op the check would be of: names a fallback whose warning names no op
    spelt: str

    def run(self, place: str):
        import torch
        if self.aten == "nonzero":     # Indexing.mm: complex input
            return torch.nonzero(torch.tensor([1 + 1j, 0j, 2j], dtype=torch.complex64, device=place))
        x = torch.arange(16, dtype=torch.int64, device=place).view(1, 1, 4, 4)   # Pooling.mm: int64 and a divisor
        return torch.nn.functional.avg_pool2d(x, 2, divisor_override=3)


IN_KERNEL_CALLS = (KernelCall("nonzero", "torch.nonzero of a complex64 tensor"),
                   KernelCall("avg_pool2d", "avg_pool2d of an int64 tensor with divisor_override=3"))
# A warning of MPS that speaks of running on the CPU, caught wider than the suite's own pattern
# (fallback.IN_KERNEL_RE), so that a wording the suite does not know is a miss, not a pass.
SAYS_CPU = re.compile(r"^MPS\b(?=.*\bCPU\b).*\bfall(?:s|ing)?[\s-]*back", re.IGNORECASE)
IN_KERNEL_CAUSE = "an MPS kernel's own CPU fallback reads native, so this column's native ops cells may hide CPU work"
IN_KERNEL_SWITCH = "report it with this run file (harness.ops.fallback.IN_KERNEL_RE must read this torch's wording)"


def _warned(run) -> list[str]:
    """The first lines of the warnings ``run()`` gives with warn-always on (each call of a
    TORCH_WARN_ONCE site warns), kept from the console; what it raises is seen again under the
    capture, where it counts."""
    return _spend(run, always=True)


def in_kernel_fallback_seen(target: str) -> ControlRun:
    """On MPS, an MPS kernel's own fallback to the CPU, seen as the device says it (its warning),
    read by the suite as cpu-fallback named "(in-kernel)"."""
    name = "in-kernel-fallback-seen"
    expected = ("MPS kernels' own fallback warnings (\"MPS: ... Falling back on CPU\": complex nonzero, int64 "
                "avg_pool2d with a divisor) read as cpu-fallback named in-kernel")
    if devices.rules_of(target) != "mps":
        return ControlRun(name, None, expected, f"only MPS's kernels fall back to the CPU in-kernel; {target} has "
                                                "none of them")

    def run() -> ControlRun:
        place = devices.place(target)
        met, missed, read = [], [], {}
        for call in IN_KERNEL_CALLS:
            with devices.on_device(target):
                said = [w for w in _warned(lambda: call.run(place)) if SAYS_CPU.search(w)]
            if not said:
                continue
            met.append(call.aten)

            def once():
                call.run(place)
                devices.synchronizer(target)()
                yield True
            found = opsweep.classified(target, once(), op=call.aten)
            read[call.aten] = {"warned": said[0][:200], "category_seen": found.category,
                               "warned_ops": list(found.fallback_ops)}
            if not (found.category == Category.CPU_FALLBACK and any(map(fallback.is_in_kernel, found.fallback_ops))):
                missed.append(f"{call.spelt} read {found.category} though MPS warned \"{said[0][:70]}...\"")
        figures = {"calls": read}
        if not met:
            return ControlRun(name, None, expected, "this torch's MPS kernels gave no fallback warning for "
                              + " or ".join(c.spelt for c in IN_KERNEL_CALLS)
                              + " (they ran them on the device): no in-kernel fallback to see here", figures=figures)
        if missed:
            more = f" (and {len(missed) - 1} more)" if len(missed) > 1 else ""
            return ControlRun(name, False, expected, missed[0] + more, IN_KERNEL_CAUSE, IN_KERNEL_SWITCH, figures)
        return ControlRun(name, True, expected, "; ".join(f"{aten}: {', '.join(r['warned_ops'])}"
                                                         for aten, r in read.items()), figures=figures)
    return instruments.guarded(name, expected, IN_KERNEL_CAUSE, IN_KERNEL_SWITCH, run)


def cases() -> tuple[instruments.ControlCase, ...]:
    """The ops suite's controls, on every target (called when the suite is collected, after
    the stand-ins are registered)."""
    return instruments.table({"fallback-seen": ("harness.ops.controls:fallback_seen",),
                              "native-seen": ("harness.ops.controls:native_seen",),
                              "fallback-seen-again": ("harness.ops.controls:fallback_seen_again",),
                              "in-kernel-fallback-seen": ("harness.ops.controls:in_kernel_fallback_seen",)})
