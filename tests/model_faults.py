"""Attention faults injected into whole-model parity's sandbox children, for the self-tests of
suites/parity/test_model_inputs.py (tests/test_model_inputs_suite.py): each is a bug users
report, reproduced on the CPU, and the self-tests assert that exactly the checks built to
catch it fail, with the right cause.

``MPS_COMPAT_MODEL_FAULT`` is a comma-separated list of:

  nan-half  ``scaled_dot_product_attention`` and ``softmax`` return NaN on every query row
            whose mask hides an entry, when they compute in float16 or bfloat16 (the input's
            dtype, or autocast's): NaNs in half precision with padding (pytorch#182726,
            transformers#40858). float32 and float64 are untouched.
  gqa       ``scaled_dot_product_attention`` with ``enable_gqa=True`` gives query head h the
            key/value head h % kv_heads instead of h // (heads / kv_heads): grouped-query
            heads mapped wrongly, in every dtype, float64 included. transformers passes
            ``enable_gqa`` where no mask is passed (an unpadded prompt; on MPS from torch 2.13
            always) and repeats the key/value heads itself otherwise, which this fault spares.
  long      ``scaled_dot_product_attention`` with more than LONG_KEYS keys and at most
            DECODE_ROWS query rows (the single-query kernel a device picks for decoding)
            attends to blocks of LONG_KEYS keys separately and averages their outputs, without
            weighing each block by its share of the softmax (the rescale a two-pass kernel
            forgets): wrong only past 512 keys, in every dtype. A prefill (many query rows)
            is untouched, so recomputing the sequence without the cache stays right.

How a fault gets there: ``MPS_COMPAT_SANDBOX_PRELOAD=tests.model_faults`` makes every sandbox
child import this module (harness.core.isolate.prepare_child), which installs the faults
the variable names; ``-p tests.model_faults`` does the same and adds itself to that
variable for the children. In a test, ``install(faults)`` / ``uninstall()`` do it by hand.
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from harness.core import isolate

VAR = "MPS_COMPAT_MODEL_FAULT"
KNOWN = ("nan-half", "gqa", "long")
LONG_KEYS = 512
DECODE_ROWS = 8
MASKED = -1e4           # an additive mask entry at or below this hides its key (transformers uses the dtype's min)
HALF = (torch.float16, torch.bfloat16)

_REAL = {"sdpa": F.scaled_dot_product_attention, "softmax": F.softmax}
_ACTIVE: tuple[str, ...] = ()


def _half(t: torch.Tensor) -> bool:
    """Whether a kernel given ``t`` computes in half precision: its dtype, or autocast's on its device."""
    if t.dtype in HALF:
        return True
    device = t.device.type
    return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) in HALF


def _hidden(mask: torch.Tensor) -> torch.Tensor:
    """Which mask entries hide their key: False in a boolean mask, very negative in an additive one."""
    return ~mask if mask.dtype == torch.bool else mask <= MASKED


def _nan_rows(out: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``out`` (..., rows, dim) with NaN on the rows ``rows`` (broadcastable to out's leading dims) marks."""
    return out.masked_fill(torch.broadcast_to(rows, out.shape[:-1]).unsqueeze(-1), float("nan"))


def sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **kwargs):
    real = _REAL["sdpa"]
    if "gqa" in _ACTIVE and enable_gqa and query.shape[-3] != key.shape[-3]:
        groups = query.shape[-3] // key.shape[-3]
        key, value = key.repeat(1, groups, 1, 1), value.repeat(1, groups, 1, 1)   # tiled, not interleaved
        enable_gqa = False
    if "long" in _ACTIVE and key.shape[-2] > LONG_KEYS and query.shape[-2] <= DECODE_ROWS and not is_causal:
        blocks = []
        for start in range(0, key.shape[-2], LONG_KEYS):
            part = slice(start, start + LONG_KEYS)
            mask = attn_mask[..., part] if attn_mask is not None else None
            blocks.append(real(query, key[..., part, :], value[..., part, :], attn_mask=mask, dropout_p=dropout_p,
                               scale=scale, enable_gqa=enable_gqa, **kwargs))
        out = torch.stack(blocks).mean(0)
    else:
        out = real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                   enable_gqa=enable_gqa, **kwargs)
    if "nan-half" in _ACTIVE and attn_mask is not None and _half(query):
        out = _nan_rows(out, _hidden(attn_mask).any(-1))
    return out


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    out = _REAL["softmax"](input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)
    if "nan-half" in _ACTIVE and _half(input) and dim in (-1, input.dim() - 1):
        out = out.masked_fill((input <= MASKED).any(-1, keepdim=True), float("nan"))
    return out


def install(faults) -> None:
    """Make the named faults (KNOWN) active in this process, replacing any before."""
    global _ACTIVE
    faults = tuple(f for f in faults if f)
    unknown = [f for f in faults if f not in KNOWN]
    if unknown:
        raise ValueError(f"{VAR}: unknown fault {', '.join(map(repr, unknown))}; known: {', '.join(KNOWN)}")
    _ACTIVE = faults
    F.scaled_dot_product_attention = sdpa
    F.softmax = softmax


def uninstall() -> None:
    global _ACTIVE
    _ACTIVE = ()
    F.scaled_dot_product_attention = _REAL["sdpa"]
    F.softmax = _REAL["softmax"]


_preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m]
if __name__ not in _preload:   # loaded as a pytest plugin: reach the sandbox children too
    os.environ[isolate.PRELOAD_VAR] = ",".join([*_preload, __name__])
if os.environ.get(VAR):
    install(os.environ[VAR].split(","))
