"""A test-only pytest plugin (-p tests.prop_sabotage): F.gelu made wrong for non-contiguous
inputs, the shape of a classic accelerator bug (a kernel that assumes contiguous memory).

The error is relative and small: far outside float32's tolerance, inside bfloat16's.
float64 is left right because it is the reference the CPU target is judged against; the
property suite must catch the bug and shrink it to a reproducer.
"""
import torch
import torch.nn.functional as F

ERROR = 2.0 ** -10

_real_gelu = F.gelu


def _gelu(x, *args, **kwargs):
    y = _real_gelu(x, *args, **kwargs)
    if x.is_contiguous() or x.dtype == torch.float64:
        return y
    return y * (1 + ERROR)


F.gelu = _gelu
