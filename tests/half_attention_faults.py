"""Attention wrong only where a real MPS kernel could be: stand-in accelerators for the
attention family's and the model checks' self-tests (tests/test_parity_review77.py), a
pytest plugin (``-p tests.half_attention_faults``) that registers them as targets and
reaches the sandbox children (harness.core.isolate.PRELOAD_VAR).

Each stand-in is the CPU with ``torch.nn.functional.scaled_dot_product_attention`` replaced
while the target side computes (the CPU yardstick and the float64 reference are untouched),
wrong the way a report or a kernel's own constraints say a device was:

  standin-causal-leak        float16 / bfloat16 only: is_causal applies the causal mask once
                             per group of 4 query rows, so rows see up to key 4 * (i // 4) + 3
                             (pytorch#195910, reported at q, k, v (1, 4, 64, 64))
  standin-causal-leak-square the same, only where the query and key lengths are equal (the
                             report's own shape, a prefill)
  standin-long-q             float16 / bfloat16 only: with more than 64 query rows and keys,
                             the rows past 64 attend to the first 64 keys alone (a result
                             wrong past one 64-row query block: MPS's half-only prefill path)
  standin-nan-empty-additive float16 / bfloat16 only: NaN on query rows whose every key an
                             additive mask hides with -inf (the row-softmax over nothing)
  standin-gqa-long-half      pytorch#174861 as reported: half precision, grouped-query heads,
                             at most 8 query rows against 1024 keys or more, head dim 64, 96
                             or 128, no mask or a boolean one, not causal: the last 32 keys
                             are dropped (the two-pass kernel reading the wrong block)
  standin-decode-tail        every dtype: at most 8 query rows against a key length that is not
                             a multiple of 32, head dim 64, 96 or 128, not causal: the last
                             partial block of 32 keys is read as if it were whole, its missing
                             keys and values zeros (pytorch#169222's read past the keys)
  standin-decode-nomask-half float16 / bfloat16 only: at most 8 query rows against more keys
                             (a decoding step): the attention mask is ignored, so left padding
                             is attended
  standin-decode-headdim     every dtype: at most 8 query rows against more than 512 keys
                             with a head dim MPS's decode kernels take (64, 96, 128, 256):
                             the keys past 512 are dropped. Any other head dim is right, as
                             on a Mac, where only those reach the kernel
  standin-fp16-min           float16 / bfloat16 only: additive mask entries at or below
                             float16's lowest value (-65504, what transformers fills a float16
                             model's mask with) are taken as -inf and a row left with none is
                             NaN (a kernel that adds the mask in float16, where the sum
                             overflows, without torch's safe softmax)

Nothing here is loaded by default: select one with ``--device`` after
``-p tests.half_attention_faults``.
"""
from __future__ import annotations

import contextlib
import math
import os

import torch
import torch.nn.functional as F

from harness.core import isolate
from harness.env import devices

_preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m]
if __name__ not in _preload:
    os.environ[isolate.PRELOAD_VAR] = ",".join([*_preload, __name__])

HALF = (torch.float16, torch.bfloat16)
DECODE_ROWS = 8
MPS_DECODE_HEAD_DIMS = (64, 96, 128, 256)
FP16_MIN = torch.finfo(torch.float16).min
REAL = F.scaled_dot_product_attention


def _half(t: torch.Tensor) -> bool:
    """Whether a kernel given ``t`` computes in half precision: its dtype, or autocast's."""
    if t.dtype in HALF:
        return True
    device = t.device.type
    return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) in HALF


def _real(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    return REAL(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **kw)


def causal_leak(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    if not (is_causal and _half(q)):
        return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)
    rows, keys = q.size(-2), k.size(-2)
    seen = torch.arange(keys, device=q.device)[None, :] <= (torch.arange(rows, device=q.device)[:, None] // 4) * 4 + 3
    return _real(q, k, v, seen, dropout_p, False, scale, **kw)


def causal_leak_square(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    if q.size(-2) != k.size(-2):
        return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)
    return causal_leak(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)


def long_q(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    out = _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)
    if q.size(-2) <= 64 or k.size(-2) <= 64 or not _half(q):
        return out
    mask = attn_mask[..., :64] if attn_mask is not None and attn_mask.dim() and attn_mask.size(-1) > 64 else attn_mask
    short = _real(q, k[..., :64, :], v[..., :64, :], mask, dropout_p, is_causal, scale, **kw)
    out = out.clone()
    out[..., 64:, :] = short[..., 64:, :]
    return out


def nan_empty_additive(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    out = _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)
    if attn_mask is None or attn_mask.dtype == torch.bool or not _half(q):
        return out
    empty = torch.broadcast_to(torch.isneginf(attn_mask).all(-1), out.shape[:-1])
    return out.masked_fill(empty.unsqueeze(-1), math.nan)


def gqa_long_half(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kw):
    if (_half(q) and enable_gqa and q.size(-3) != k.size(-3) and q.size(-2) <= DECODE_ROWS and k.size(-2) >= 1024
            and q.size(-1) in (64, 96, 128) and not is_causal and (attn_mask is None or attn_mask.dtype == torch.bool)):
        n = k.size(-2) - 32
        mask = attn_mask[..., :n] if attn_mask is not None else None
        return _real(q, k[..., :n, :], v[..., :n, :], mask, dropout_p, False, scale, enable_gqa=True, **kw)
    return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa=enable_gqa, **kw)


def decode_tail(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    keys = k.size(-2)
    if q.size(-2) <= DECODE_ROWS and keys >= q.size(-2) and keys % 32 and q.size(-1) in (64, 96, 128) \
            and not is_causal:
        pad = 32 - keys % 32
        k = torch.cat([k, k.new_zeros(*k.shape[:-2], pad, k.size(-1))], dim=-2)
        v = torch.cat([v, v.new_zeros(*v.shape[:-2], pad, v.size(-1))], dim=-2)
        if attn_mask is not None and attn_mask.dim() and attn_mask.size(-1) == keys:
            fill = True if attn_mask.dtype == torch.bool else 0.0
            attn_mask = torch.cat([attn_mask, attn_mask.new_full((*attn_mask.shape[:-1], pad), fill)], dim=-1)
    return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)


def decode_nomask_half(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    if attn_mask is not None and q.size(-2) <= DECODE_ROWS and k.size(-2) > q.size(-2) and _half(q):
        attn_mask = None
    return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)


def decode_headdim(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    if q.size(-2) <= DECODE_ROWS and k.size(-2) > 512 and q.size(-1) in MPS_DECODE_HEAD_DIMS:
        k, v = k[..., :512, :], v[..., :512, :]
        if attn_mask is not None and attn_mask.dim() and attn_mask.size(-1) > 512:
            attn_mask = attn_mask[..., :512]
    return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)


def fp16_min(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
    if attn_mask is None or attn_mask.dtype == torch.bool or not _half(q):
        return _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)
    out = _real(q, k, v, attn_mask, dropout_p, is_causal, scale, **kw)
    hidden = attn_mask.float() <= FP16_MIN
    empty = torch.broadcast_to(hidden.all(-1) & ~torch.isneginf(attn_mask).all(-1), out.shape[:-1])
    return out.masked_fill(empty.unsqueeze(-1), math.nan)


class WrongAttention(devices.StandIn):
    """The CPU, with scaled_dot_product_attention replaced by ``fn`` while the target computes."""

    def __init__(self, name: str, fn, summary: str):
        self.name, self.summary, self.fn = name, summary, fn

    @contextlib.contextmanager
    def context(self):
        F.scaled_dot_product_attention = self.fn
        try:
            yield
        finally:
            F.scaled_dot_product_attention = REAL


STAND_INS = (
    WrongAttention("standin-causal-leak", causal_leak, "is_causal masks per group of 4 query rows in half precision"),
    WrongAttention("standin-causal-leak-square", causal_leak_square,
                   "is_causal masks per group of 4 query rows in half precision, where L == S"),
    WrongAttention("standin-long-q", long_q, "query rows past 64 see the first 64 keys, half precision"),
    WrongAttention("standin-nan-empty-additive", nan_empty_additive,
                   "NaN on rows an additive mask hides wholly with -inf, half precision"),
    WrongAttention("standin-gqa-long-half", gqa_long_half, "pytorch#174861: GQA decode past 1023 keys, half"),
    WrongAttention("standin-decode-tail", decode_tail,
                   "a decoding step reads its last partial block of 32 keys whole (pytorch#169222), every dtype"),
    WrongAttention("standin-decode-nomask-half", decode_nomask_half, "a decoding step ignores the mask, half"),
    WrongAttention("standin-decode-headdim", decode_headdim,
                   "a decoding step drops keys past 512 at head dims 64/96/128/256, every dtype"),
    WrongAttention("standin-fp16-min", fp16_min, "float16's lowest mask value taken as -inf, no safe softmax, half"),
)
for _stand_in in STAND_INS:
    devices.register_stand_in(_stand_in)
