"""Seeing MPS CPU fallbacks: the warning that names the aten op, captured per call; and
telling an op without a kernel here (``no_kernel``) from an op that broke.

With ``PYTORCH_ENABLE_MPS_FALLBACK=1`` an op without an MPS kernel runs on the CPU and
torch warns once per process: "The operator 'aten::X' is not currently supported on the
MPS backend and will fall back to run on the CPU. This may have performance
implications." (aten/src/ATen/mps/MPSFallback.mm, TORCH_WARN_ONCE). ``capture()`` turns
warn-always on for its duration, so the outcome of one check does not depend on which
check ran first, and returns the aten ops named.
"""
from __future__ import annotations

import contextlib
import re
import warnings

FALLBACK_RE = re.compile(r"The operator '([^']+)' is not currently supported on the MPS backend "
                         r"and will fall back to run on the CPU")

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


def ops_named(messages) -> list[str]:
    """The aten ops named by fallback warnings among ``messages``, first-seen order, once each."""
    found: dict[str, None] = {}
    for msg in messages:
        for match in FALLBACK_RE.finditer(str(msg)):
            found.setdefault(match.group(1), None)
    return list(found)


class Capture:
    def __init__(self):
        self.ops: list[str] = []
        self.other_warnings: list[str] = []


@contextlib.contextmanager
def capture():
    """Record fallback warnings raised inside the block (and keep them from the console)."""
    import torch
    result = Capture()
    previous = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield result
    finally:
        torch.set_warn_always(previous)
    messages = [str(w.message) for w in caught]
    result.ops = ops_named(messages)
    result.other_warnings = [m.splitlines()[0] for m in messages if not FALLBACK_RE.search(m)][:5]
