"""The wrong results of harness/parity/known_bugs/cases.py, reproduced on the CPU: a stand-in
accelerator for the known-bug suite's self-tests (registered by tests/standins.py as
``standin-known-bugs``).

Each reproduction patches one aten op, at the reported edge only, the way the report
says the device got it wrong: ones where zeros belong past 2^15 columns, the second
operand of a 3x3 matmul read transposed, rows past 2^16 wrapping to row 0, a result that
is wrong after a dirty allocator cache and right after it was emptied, a reduction wrong
on every fifth call ... ``MPS_COMPAT_REPRODUCE`` (comma-separated case names) picks which
ones are on; unset, all are. It is read when a check runs, so a test can set it and the
sandbox children (which inherit the environment) see the same.
"""
from __future__ import annotations

import os

import torch

VAR = "MPS_COMPAT_REPRODUCE"
aten = torch.ops.aten
EVERY = 5   # a "rapid succession" reduction is wrong on every EVERY-th call
OVER_READ_SPARED = 13   # the allocator case: every 13th element of the result is right, the rest NaN


def _mm_shape(func, args) -> tuple[int, int, int]:
    """(M, K, N) of an aten.mm call; zeros for any other op."""
    if func is not aten.mm.default:
        return 0, 0, 0
    a, b = args[0], args[1]
    return a.shape[0], a.shape[1], b.shape[1]


def _ones_past_2_15(state, func, args, kwargs, out):
    """#111634: zeros @ ones past 2^15 columns gave ones where zeros belong."""
    m, k, n = _mm_shape(func, args)
    if func is aten.mm.default and k == 1 and n > 2**15 and m >= 72:
        out = out.clone()
        out[:, 2**15:] += 1
        return out
    return None


def _wrong_past_1024_columns(state, func, args, kwargs, out):
    """#116769: Linear(1, 32769), every row wrong after its first 1024 columns."""
    m, k, n = _mm_shape(func, args)
    if func is aten.mm.default and n > 2**15 and m > 1:
        out = out.clone()
        out[:, 1024:] = out.roll(1, dims=0)[:, 1024:]
        return out
    return None


def _transposed_3x3(state, func, args, kwargs, out):
    """#85406: a 3x3 matmul computed as A @ B.T."""
    if func is aten.mm.default and _mm_shape(func, args) == (3, 3, 3):
        return func(args[0], args[1].T)
    return None


def _dirty_cache_over_read(state, func, args, kwargs, out):
    """#193487: a reduction dimension past 2^15 reads what the allocator left after the
    operands: wrong after a dirty cache, right fresh or after empty_cache. Users saw 10-30%
    of scale off (whatever their freed blocks held); after the check's own churn the freed
    blocks hold NaN (harness/parity/known_bugs/target.py, Target.churn), so the elements
    that read past the operands are NaN here, as they would be on an affected Mac (all but
    one in OVER_READ_SPARED: the report had 579 of 625 wrong)."""
    m, k, n = _mm_shape(func, args)
    if func is aten.mm.default and k > 2**15 and state.dirty:
        spared = torch.arange(out.numel()).reshape(out.shape) % OVER_READ_SPARED == 0
        return torch.where(spared, out, torch.full_like(out, float("nan")))
    return None


def _one_term_too_many(state, func, args, kwargs, out):
    """#195163: bmm with K >= 32767 and both output sides >= 16 sums one term past the operands."""
    if func is aten.bmm.default:
        a, b = args[0], args[1]
        if a.shape[2] >= 32767 and a.shape[1] >= 16 and b.shape[2] >= 16:
            return out + a[:, :, -1:] @ b[:, -1:, :]
    return None


def _imaginary_dropped(state, func, args, kwargs, out):
    """#124096 / PR #123274: irfft lost part of the spectrum (here: the imaginary parts)."""
    if func is aten._fft_c2r.default:
        return func(torch.complex(args[0].real, torch.zeros_like(args[0].real)), *args[1:], **kwargs)
    return None


def _raises_past_65536_channels(state, func, args, kwargs, out):
    """#134416: more than 65536 output channels raise, fallback or not."""
    if func is aten.convolution.default and args[1].shape[0] > 65536:
        raise NotImplementedError("Output channels > 65536 not supported at the MPS device")
    return None


def _rows_wrap_at_2_16(state, func, args, kwargs, out):
    """#189495: F.linear with bias, rows past 2^16 get row (i - 65536)'s result."""
    if func is aten.addmm.default and out.shape[0] > 2**16:
        out = out.clone()
        out[2**16:] = out[:out.shape[0] - 2**16]
        return out
    return None


def _vocab_noise(state, func, args, kwargs, out):
    """#122045: a (50304, 1) projection off with a standard deviation above 1."""
    m, k, n = _mm_shape(func, args)
    if func is aten.mm.default and n == 50304:
        noise = torch.randn(out.shape, generator=torch.Generator().manual_seed(0), dtype=out.dtype)
        return out + 1.4 * noise
    return None


def _rows_past_129(state, func, args, kwargs, out):
    """#97239: Linear(768, 2304) wrong past a second dimension of 129."""
    if func is aten.addmm.default and args[1].shape[1] == 768 and out.shape[1] == 2304 and out.shape[0] > 129:
        out = out.clone()
        out[129:] += 0.5
        return out
    return None


def _int64_min(state, func, args, kwargs, out):
    """#92311: argmax(dim=1) gave INT64_MIN for every row."""
    if func is aten.argmax.default and (args[1:2] or [kwargs.get("dim")])[0] == 1:
        return torch.full_like(out, torch.iinfo(torch.int64).min)
    return None


def _intermittent(op):
    """#178497: the reduction is wrong on every EVERY-th call of the process (here: 1% off,
    or one off for a count)."""
    def reproduce(state, func, args, kwargs, out):
        if func is not op:
            return None
        state.calls[op] = state.calls.get(op, 0) + 1
        if state.calls[op] % EVERY:
            return None
        return out + 1 if op is aten.count_nonzero.default else out * 1.01
    return reproduce


REPRODUCTIONS = {
    "batched-matmul-n32769": _ones_past_2_15,
    "linear-out-features-32769": _wrong_past_1024_columns,
    "matmul-3x3": _transposed_3x3,
    "gram-matmul-k50000": _dirty_cache_over_read,
    "bmm-k32767": _one_term_too_many,
    "irfft-64": _imaginary_dropped,
    "conv1d-65537-channels": _raises_past_65536_channels,
    "linear-batch-65537": _rows_wrap_at_2_16,
    "linear-vocab-50304": _vocab_noise,
    "linear-transformer-shape": _rows_past_129,
    "argmax-dim1-10x2": _int64_min,
    "sum-rapid": _intermittent(aten.sum.default),
    "mean-rapid": _intermittent(aten.mean.default),
    "nansum-rapid": _intermittent(aten.nansum.default),
    "count-nonzero-rapid": _intermittent(aten.count_nonzero.default),
    "trace-rapid": _intermittent(aten.trace.default),
}


def selected() -> list:
    names = [n.strip() for n in os.environ.get(VAR, "").split(",") if n.strip()]
    unknown = [n for n in names if n not in REPRODUCTIONS and n != "none"]
    if unknown:
        raise KeyError(f"{VAR}: no reproduction for {', '.join(unknown)}")
    return list(REPRODUCTIONS.values()) if not names else [REPRODUCTIONS[n] for n in names if n != "none"]
