"""Seeing MPS CPU fallbacks: the warnings that say an op ran on the CPU, captured per call (and,
for a check that runs in phases, per phase); and telling an op without a kernel here
(``no_kernel``) from an op that broke.

MPS says an op ran on the CPU in two ways:

* The generic fallback. With ``PYTORCH_ENABLE_MPS_FALLBACK=1`` an op without an MPS kernel
  runs on the CPU and torch warns once per process: "The operator 'aten::X' is not currently
  supported on the MPS backend and will fall back to run on the CPU. This may have
  performance implications." (aten/src/ATen/mps/MPSFallback.mm, TORCH_WARN_ONCE).
  ``FALLBACK_RE``; recorded as the aten op it names.
* An MPS kernel's own fallback (``IN_KERNEL_RE``): an op that has an MPS kernel sends some
  inputs to the CPU from inside that kernel, whatever PYTORCH_ENABLE_MPS_FALLBACK says, with a
  warning of its own (TORCH_WARN_ONCE at its own call site). Recorded as "<what> (in-kernel)":
  the op the message names, else the check's own op, else what the message says fell back.

``capture()`` turns warn-always on for its duration, so the outcome of one check does not
depend on which check ran first, and returns the ops named; ``Phases`` keeps them per phase.
"""
from __future__ import annotations

import contextlib
import re
import warnings

FALLBACK_RE = re.compile(r"The operator '([^']+)' is not currently supported on the MPS backend "
                         r"and will fall back to run on the CPU")

# The MPS kernels' own fallback warnings, as PyTorch's sources write them (read in
# pytorch/pytorch, aten/src/ATen/native/mps/operations/): every one starts "MPS: ", says what
# the kernel cannot do, then "Falling back on CPU. This may have performance implications."
#  - Indexing.mm (at 01117679): nonzero of a complex input, in its out= kernel ("MPS: nonzero op
#    is not supported for complex datatypes. Falling back on CPU. ...") and in its functional
#    one, whose text has no full stop before "Falling". Earlier releases also sent nonzero there
#    before macOS 14 ("MPS: nonzero op is supported natively starting from macOS 14.0. Falling
#    back on CPU. ...") and, on macOS 14, for 2**24 elements or more or a complex input, in a text
#    that runs "...for the provided input on MacOS14Falling back on CPU..." with no space.
#  - Pooling.mm (at 003540fc): avg_pool2d, forward and backward, given divisor_override on an
#    int64 input ("MPS: passing divisor to Average Pooling op with int64 input is not
#    supported on MPS backend. Falling back on CPU. ..."): it names no aten op.
#  - releases that ran on macOS 13 gated median, pixel_shuffle, grid_sampler_2d,
#    unique_consecutive, randperm and upsampling by a scale factor on its minor versions
#    ("MPS: median op is supported natively starting from macOS 13.0. Falling back on CPU. ...")
#    and the FFTs on macOS 14 ("MPS: FFT operations are only supported natively starting from
#    macOS 14.0. ...").
# One "MPS: " warning is no fallback: constant_pad_nd beyond 3 dimensions "uses View Ops default
# implementation", on the device; it says nothing of the CPU and is not matched. The pattern
# also takes "falling back to (the) CPU", the generic warning's wording, should a kernel say it so.
IN_KERNEL_RE = re.compile(r"^MPS: (?P<said>.*?)\s*[Ff]alling back (?:on|to) (?:the )?CPU\b")
# "MPS: <name> op ..." names the kernel's op (nonzero, median, grid_sampler_2d...); "MPS: passing
# divisor to Average Pooling op" and "MPS: FFT operations" name none.
KERNEL_NAMED_RE = re.compile(r"^MPS: (?P<op>[A-Za-z_][A-Za-z0-9_]*) op\b")
IN_KERNEL = "in-kernel"
# Which revision of this reading wrote an op check's category (its metrics' ``fallback_reader``):
# 2 reads each phase apart (the samples' making is not the op's) and the kernels' own warnings
# too; records without it (1) counted every generic warning of the whole check. A category that
# differs between the two is the reader's doing as much as the versions' (harness.report.compare).
READER = 2

# A kernel without the sample's dtype: from torch 2.8 ATen's dispatch macros raise
# NotImplementedError, in 2.6 and 2.7 RuntimeError ('"ndtri_cpu" not implemented for 'Half''), for the
# same missing kernel (pytorch#155470); the CPU's FFT library said "MKL FFT doesn't support tensors of
# type: Half" as a RuntimeError until pytorch#192349: unsupported either way, not an op that broke.
# (A Mac's fallback to such a CPU kernel answers so on MPS.)
NO_DTYPE_KERNEL = re.compile(r"\" not implemented for '[^']+'|MKL FFT doesn't support tensors of type")


def no_kernel(error: BaseException | str) -> bool:
    """Whether an error (or its line, "RuntimeError: ...") says the op has no kernel here for
    these inputs: NotImplementedError, or an older torch's RuntimeError for a missing dtype."""
    if isinstance(error, BaseException):
        return isinstance(error, NotImplementedError) or (
            isinstance(error, RuntimeError) and bool(NO_DTYPE_KERNEL.search(str(error))))
    return "NotImplementedError" in error or ("RuntimeError" in error and bool(NO_DTYPE_KERNEL.search(error)))


def in_kernel(message, op: str | None = None) -> str | None:
    """The name an MPS kernel's own fallback warning is recorded under, or None for any other
    message: "aten::<name> (in-kernel)" where the message names the kernel's op, else
    "<op> (in-kernel)" for the check's own ``op``, else what the message says fell back."""
    text = str(message)
    found = IN_KERNEL_RE.match(text)
    if found is None:
        return None
    named = KERNEL_NAMED_RE.match(text)
    what = f"aten::{named['op']}" if named else op or found["said"].rstrip(" .") or "an MPS kernel"
    return f"{what} ({IN_KERNEL})"


def is_in_kernel(name: str) -> bool:
    """Whether a recorded fallback name is an MPS kernel's own (``in_kernel``)."""
    return name.endswith(f" ({IN_KERNEL})")


def is_fallback(message) -> bool:
    """Whether a warning's text says an op ran on the CPU, either way."""
    text = str(message)
    return bool(FALLBACK_RE.search(text)) or IN_KERNEL_RE.match(text) is not None


def ops_named(messages, op: str | None = None) -> list[str]:
    """The ops that fallback warnings among ``messages`` name, first-seen order, once each: the
    aten ops of the generic fallback and the MPS kernels' own fallbacks (``in_kernel``; ``op``
    names one whose message names no op)."""
    found: dict[str, None] = {}
    for msg in messages:
        for match in FALLBACK_RE.finditer(str(msg)):
            found.setdefault(match.group(1), None)
        name = in_kernel(msg, op)
        if name is not None:
            found.setdefault(name, None)
    return list(found)


class Capture:
    def __init__(self):
        self.ops: list[str] = []
        self.other_warnings: list[str] = []

    def read(self, messages: list[str], op: str | None = None) -> None:
        self.ops = ops_named(messages, op)
        self.other_warnings = [m.splitlines()[0] for m in messages if not is_fallback(m)][:5]


@contextlib.contextmanager
def capture(op: str | None = None):
    """Record fallback warnings raised inside the block (and keep them from the console); ``op``
    names an MPS kernel's own fallback whose warning names no op. The result is read when the
    block ends, also when it raises."""
    import torch
    result = Capture()
    previous = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    caught: list = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield result
    finally:
        torch.set_warn_always(previous)
        result.read([str(w.message) for w in caught], op)


class Phases:
    """The fallbacks of one check, per phase (harness.ops.opsweep.run_case: the making of the
    samples, the op forward, its backward), each phase under its own ``capture`` so a warning
    lands in the phase that gave it; ``op`` names an in-kernel fallback that names no op.
    ``ops``: phase -> names, first-seen order, once each, in the order the phases first ran."""

    def __init__(self, op: str | None = None):
        self.op = op
        self.ops: dict[str, list[str]] = {}
        self.other_warnings: list[str] = []

    @contextlib.contextmanager
    def phase(self, name: str):
        seen = None
        try:
            with capture(self.op) as seen:
                yield seen
        finally:
            if seen is not None:
                kept = self.ops.setdefault(name, [])
                kept.extend(o for o in seen.ops if o not in kept)
                self.other_warnings.extend(w for w in seen.other_warnings if w not in self.other_warnings)

    def of(self, name: str) -> list[str]:
        return list(self.ops.get(name, ()))
