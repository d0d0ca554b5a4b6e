"""Wrong attention, injected for the attention family's self-tests: a pytest plugin
(``-p tests.attention_faults``) that also reaches the sandbox children
(``MPS_COMPAT_SANDBOX_PRELOAD=tests.attention_faults``, harness.core.isolate), selected by
``MPS_COMPAT_ATTENTION_FAULT``:

  gqa        grouped-query attention maps query head h to key/value head h % H_kv (the
             key/value heads tiled with ``repeat``) instead of h // (H_q / H_kv) (grouped,
             ``repeat_interleave``), in every dtype, float64 included: a bug that does not
             depend on the dtype, which a float64 run of the same function would share
  long       keys past LONG_LIMIT are dropped (and the mask's columns with them), in every
             dtype: a result wrong only past some key length
  nan-half   in float16 and bfloat16 only, NaN on every query row whose mask hides at least
             one key (False in a boolean mask, -inf in an additive one): the NaN of
             transformers#40858

Each wraps ``torch.nn.functional.scaled_dot_product_attention``, the function the suite
calls (looked up when called), whatever kernel is selected; matmul, softmax and
``repeat_interleave``, which the reference (harness.parity.properties.attention.reference_attention)
is made of, are left alone. Nothing is patched when the variable is unset.
"""
from __future__ import annotations

import functools
import math
import os

import torch
import torch.nn.functional as F

from harness.core import isolate

VAR = "MPS_COMPAT_ATTENTION_FAULT"
FAULTS = ("gqa", "long", "nan-half")
LONG_LIMIT = 512
HALF = (torch.float16, torch.bfloat16)

_preload = [m for m in os.environ.get(isolate.PRELOAD_VAR, "").split(",") if m]
if __name__ not in _preload:
    os.environ[isolate.PRELOAD_VAR] = ",".join([*_preload, __name__])


def _tiled_heads(real):
    @functools.wraps(real)
    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if enable_gqa and key.size(-3) != query.size(-3):
            groups = query.size(-3) // key.size(-3)
            tile = (1,) * (key.dim() - 3) + (groups, 1, 1)
            key, value = key.repeat(*tile), value.repeat(*tile)
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)
    return attention


def _short_memory(real):
    @functools.wraps(real)
    def attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kw):
        if key.size(-2) > LONG_LIMIT:
            key, value = key[..., :LONG_LIMIT, :], value[..., :LONG_LIMIT, :]
            if attn_mask is not None and attn_mask.size(-1) > LONG_LIMIT:
                attn_mask = attn_mask[..., :LONG_LIMIT]
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    **kw)
    return attention


def _nan_on_masked_rows(real):
    @functools.wraps(real)
    def attention(query, key, value, attn_mask=None, *args, **kw):
        out = real(query, key, value, attn_mask, *args, **kw)
        if attn_mask is None or query.dtype not in HALF:
            return out
        hidden = ~attn_mask if attn_mask.dtype == torch.bool else attn_mask == -math.inf
        return out.masked_fill(hidden.any(dim=-1, keepdim=True), math.nan)
    return attention


_WRAPPERS = {"gqa": _tiled_heads, "long": _short_memory, "nan-half": _nan_on_masked_rows}


def wrong(fault: str, real=None):
    """``real`` (scaled_dot_product_attention by default) with ``fault`` in it, unpatched:
    for a self-test that compares the two in one process."""
    if fault not in _WRAPPERS:
        raise ValueError(f"{VAR}: unknown fault {fault!r}; known: {', '.join(FAULTS)}")
    return _WRAPPERS[fault](real or F.scaled_dot_product_attention)


FAULT = os.environ.get(VAR, "")
if FAULT and not getattr(F.scaled_dot_product_attention, "_attention_fault", None):
    F.scaled_dot_product_attention = wrong(FAULT)
    F.scaled_dot_product_attention._attention_fault = FAULT
