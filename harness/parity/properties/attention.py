"""The attention property family: ``torch.nn.functional.scaled_dot_product_attention`` as
training and inference use it (grouped-query heads, a value head dim of its own, an
explicit scale, causal attention between sequences of different lengths, boolean and
additive masks with fully masked rows, one new token against a long cache), on each
attention kernel a target can select, judged against attention written out by hand.

Why a family of its own. The one attention property of suites/parity/test_properties.py
draws none of that, and its float64 reference is the very op under test run in float64: on
the cpu target a bug that does not depend on the dtype (a wrong head mapping, keys dropped
past some length) gives the same wrong answer on both sides and cancels out. Here the
reference is ``reference_attention``: matmul, softmax, matmul in float64 on contiguous
copies of the inputs, with ``repeat_interleave`` for grouped-query heads and the causal,
boolean and additive masks applied by hand; it never calls scaled_dot_product_attention.

What is here:

  specs        BoolMask and AdditiveMask (an examples.Floats: rounded to the dtype like any
               float input), which unlike examples.KeyMask may mask every key of a query
               row, in any of examples.LAYOUTS
  strategies   one per family member (gqa, value_dim, causal, masks, long_kv), each drawing
               an examples.Example with strategies.draw_example
  reference    reference_attention, the written-out float64 attention
  kernels      KERNELS, the attention kernels ``torch.nn.attention.sdpa_kernel`` selects, the
               target kinds where each can be selected (``unselectable`` says why not), and
               per example whether torch would run it (``refusal``: torch's own answer,
               ``torch._fused_sdp_choice`` under the selection, with the reason it warns)
  cases        AttentionCase, a family member x dtype x kernel with the targets that run it
  runner       KernelTally: a properties.tally.Tally given the reference, which counts the
               examples torch refuses on the kernel and skips a check that ran none

Sizes. Every member but long_kv keeps each tensor within strategies.MAX_ELEMENTS and at most
SHORT_KEYS keys (a fault that drops keys past a length shows in long_kv alone); long_kv
draws LONG_KEYS keys and sizes its batch and heads so that each tensor, in float64 (the
reference's width) and with a strided view's doubled storage, stays within LONG_KV_BYTES.
causal and masks draw, in about one example in four, query and key lengths past MPS's
64-row query blocks (LONG_QUERIES), where its half-precision prefill kernel runs more than
one block.

Examples every profile runs (``EXAMPLES``, hypothesis's @example in the suite): the shapes
reports name and the cases a derandomized ci run of 20 draws may miss: pytorch#195910's
causal prefill, pytorch#174861's grouped-query decoding step, fully masked rows of every
mask kind and fill, and query blocks past 64 rows.

torch is imported where it is used: the suites are collected without loading torch.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import warnings
from typing import TYPE_CHECKING, Callable

from hypothesis import strategies as st

from harness.parity.properties import strategies as S
from harness.parity.properties.examples import LAYOUTS, Example, Floats, fitting_layouts

if TYPE_CHECKING:
    import torch

OP = "nn.functional.scaled_dot_product_attention"   # its row in the tolerance table

# --------------------------------------------------------------------------- sizes

# Head dims: 1 (the degenerate edge), 8, a prime no vector width divides, 64 and 128 (the
# usual ones: BERT, Llama, and two that MPS's own kernels take: MPS_KERNEL_HEAD_DIMS).
HEAD_DIMS = (1, 8, 13, 64, 128)
# The head dims torch's MPS attention kernels are built for (aten/src/ATen/native/mps/
# operations/Attention.mm, read at pytorch main 00a5f92): the decoding kernels (at most 8
# query rows: sdpa_vector, and sdpa_vector_2pass from 1024 keys) 64, 96, 128 and 256; the
# prefill kernel (more than 8 rows) also 32, 72 and 80; the half-precision prefill kernel on
# Metal's performance primitives 64, 96, 128 and 256. Any other head dim, and a float mask
# of another dtype than the query's, takes MPSGraph's general path instead.
MPS_DECODE_HEAD_DIMS = (64, 96, 128, 256)
MPS_PREFILL_HEAD_DIMS = (32, 64, 72, 80, 96, 128, 256)
# Query and key lengths of the short members: S.SIDES and 64, never past SHORT_KEYS.
LENGTHS = S.SIDES + (64,)
SHORT_KEYS = 512
# Query (and key) lengths past MPS's query blocks: its prefill kernel tiles the queries by
# 32 rows (16 at head dim 256), the half-precision one on Metal's performance primitives by
# 64 (BQ in Attention.mm), a path float16 and bfloat16 alone take. 65 and 130 cross one and
# two 64-row edges, 127 and 128 end at one, 257 crosses four (with head dims of 13 or less:
# each tensor stays within strategies.MAX_ELEMENTS). Drawn by causal and masks in about one
# example in four, in every dtype (an example is drawn once for all of them).
LONG_QUERIES = (65, 127, 128, 130, 257)
BLOCK_EDGE = 64
# One new token against a cache of a thousand to four thousand keys (a decoding step):
# powers of two, where a kernel's blocks divide evenly, and 1031 (prime), where they do not.
LONG_KEYS = (1024, 1031, 2048, 4096)
LONG_HEAD_DIMS = (8, 64, 128)
# Each long_kv tensor in float64 within 4 MiB, a strided view's storage (twice the view's
# elements) included: any device's memory holds it, and an example (the float64 reference,
# the dtype's run) takes about 70 ms on 2 busy CPU cores.
LONG_KV_BYTES = 4 * 2**20
# Grouped-query heads in long_kv: the written-out reference (and the CPU's math kernel)
# repeats each key/value head for its group, so the keys as repeated stay within this many
# times a tensor's budget (16 query heads over 2 at 1024 keys and head dim 64; at head dim
# 128, 8): an example then takes about 0.3 s on 2 busy CPU cores (pytorch#174861's 32 over 2
# at head dim 128 runs as an explicit example, EXAMPLES).
GQA_SPREAD = 4
FLOAT64_BYTES = 8
# An explicit ``scale``, as a factor of torch's default 1 / sqrt(E) (None: no scale given),
# or 1 / E (muP's attention scale): a kernel that ignores the argument gives other numbers.
# Tied to E, so the scores stay in the range models give them: a fixed scale of 0.5 with
# E = 128 and inputs at scale 4 makes logits of about 90, where a correct float32 kernel's
# rounding of the scores (about 6e-5) moves a two-key softmax enough to miss float64 by
# 1.3e-4 (deep profile: q (2, 2, 3, 128), k (2, 2, 2, 128), v (2, 2, 2, 64), seed 199).
SCALE_FACTORS = (None, 0.5, 2.0, "1/E")
# How an additive mask hides a key: -inf (what torch's own boolean masks become), -10000
# (BERT's extended attention mask) and float32's lowest value (transformers'
# torch.finfo(dtype).min, as built in float32; float16 and bfloat16 round it to -inf).
# float16's lowest value (torch.finfo(torch.float16).min, -65504: what transformers fills the
# mask of a model loaded in float16 with; -65536 in bfloat16).
FILLS = {"-inf": -math.inf, "-1e4": -1e4, "float32-min": -3.4028234663852886e38, "float16-min": -65504.0}
# The fills that may hide a whole row (draw_mask says why not -1e4): -inf makes it empty (0
# out); float32's lowest swamps every score in float32 and in float64 alike (a uniform
# average), and is -inf in float16 and bfloat16; float16's lowest hides a whole row as a
# float16 model's padding does, and there only a number is asked (``finite_only``).
EMPTY_ROW_FILLS = ("-inf", "float32-min", "float16-min")
# A row wholly at float16's lowest value (as float16, bfloat16 and float32 hold it) is a
# softmax over score - 65504: the answer depends on how the kernel keeps the sum (float32
# keeps the scores only to 2^-8 there), and the row is padding whose output no model reads.
# What must hold is that it is a number: a kernel that adds the mask in float16, where the
# sum overflows to -inf, and has no safe softmax gives NaN there, and the NaN spreads.
FLOAT16_MIN_BAND = (-65536.0, -65504.0)
# Mask shapes, by what they broadcast over: a per-key padding mask, a 4-D mask per query
# and key as transformers builds it, one per head, one shared by the batch, and 2-D.
MASK_FORMS = ("keys", "queries-keys", "heads", "shared", "2d")


# --------------------------------------------------------------------------- mask specs

def _drawn_shape(shape: tuple, layout: str) -> tuple:
    """The shape whose values a mask draws: the view's, or, for a layout that broadcasts
    (expanded: one storage row read by every batch entry), its storage's."""
    storage = tuple(LAYOUTS[layout].storage(tuple(shape)))
    return storage if math.prod(storage) < math.prod(shape) else tuple(shape)


def _storage_for(layout: str, shape: tuple, values: torch.Tensor, filler: torch.Tensor) -> torch.Tensor:
    """A storage tensor whose view under ``layout`` shows ``values`` (drawn at
    ``_drawn_shape``): written through the layout's own view, so any layout of
    examples.LAYOUTS works. The storage's elements the view does not show (a strided
    view's every other one) come from ``filler``: a kernel that ignores strides reads them."""
    if tuple(values.shape) != tuple(shape):   # a broadcasting layout: its storage is what was drawn
        return values.contiguous()
    storage = filler.clone()
    LAYOUTS[layout].view(storage, tuple(shape)).copy_(values)
    return storage


def _masked_entries(shape: tuple, gen: torch.Generator, empty_rows: bool) -> torch.Tensor:
    """True where a key is hidden: about a third of each row, never all of it, except, with
    ``empty_rows``, whole rows (at least one, about a quarter) hidden entirely."""
    import torch
    hidden = torch.rand(shape, generator=gen) < 0.3
    if not shape or shape[-1] == 0:
        return hidden
    one = torch.randint(0, shape[-1], shape[:-1] + (1,), generator=gen)
    hidden = hidden.scatter(-1, one, False)
    if empty_rows:
        rows = torch.rand(shape[:-1], generator=gen) < 0.25
        if rows.numel():
            rows.view(-1)[torch.randint(0, rows.numel(), (1,), generator=gen)] = True
        hidden |= rows.unsqueeze(-1)
    return hidden


@dataclasses.dataclass(frozen=True)
class BoolMask:
    """A boolean attention mask (True attends), in any layout. Unlike examples.KeyMask it may
    hide every key of some query rows (``empty_rows``): since torch 2.5 the math kernel
    gives 0 there, and a kernel that gives NaN is wrong."""
    shape: tuple[int, ...]
    layout: str = "contiguous"
    empty_rows: bool = False

    def make(self, gen: torch.Generator, scale: float) -> torch.Tensor:
        import torch
        keep = ~_masked_entries(_drawn_shape(self.shape, self.layout), gen, self.empty_rows)
        filler = torch.rand(LAYOUTS[self.layout].storage(self.shape), generator=gen) < 0.5
        return _storage_for(self.layout, self.shape, keep, filler)

    def view(self, t: torch.Tensor) -> torch.Tensor:
        return LAYOUTS[self.layout].view(t, self.shape)

    def __repr__(self):
        return (f"BoolMask({self.shape}, {self.layout!r}{', empty_rows=True' if self.empty_rows else ''})")


@dataclasses.dataclass(frozen=True)
class AdditiveMask(Floats):
    """A float attention mask added to the scores: ``fill`` (FILLS) on hidden keys and, with
    ``bias``, a finite bias elsewhere (a relative-position or ALiBi term); with
    ``empty_rows`` some query rows are all ``fill``. A Floats, so it is rounded to the dtype
    under test like the other inputs (float32's lowest value becomes -inf in float16), and
    widened back exactly for the reference."""
    fill: str = "-inf"
    bias: bool = False
    empty_rows: bool = False

    def make(self, gen: torch.Generator, scale: float) -> torch.Tensor:
        import torch
        shape = _drawn_shape(self.shape, self.layout)
        hidden = _masked_entries(shape, gen, self.empty_rows)
        values = torch.zeros(shape, dtype=torch.float64)
        if self.bias:
            values = torch.randn(shape, generator=gen, dtype=torch.float64)
        values = values.masked_fill(hidden, FILLS[self.fill])
        filler = torch.randn(LAYOUTS[self.layout].storage(self.shape), generator=gen, dtype=torch.float64)
        return _storage_for(self.layout, self.shape, values, filler)

    def __repr__(self):
        extra = "".join((", bias=True" if self.bias else "", ", empty_rows=True" if self.empty_rows else ""))
        return f"AdditiveMask({self.shape}, {self.layout!r}, fill={self.fill!r}{extra})"


# --------------------------------------------------------------------------- strategies

def _sides_within(draw, count: int, budget: int, choices) -> list[int]:
    return S.draw_sides(draw, count, max(budget, 1), choices=choices)


def _scale(draw, e: int) -> dict:
    """No ``scale`` option, or one drawn from SCALE_FACTORS for head dim ``e``."""
    factor = draw(st.sampled_from(SCALE_FACTORS))
    if factor is None:
        return {}
    return {"scale": 1.0 / e if factor == "1/E" else factor / math.sqrt(e)}


def mask_shape(form: str, bsz: int, heads: int, q_len: int, k_len: int) -> tuple:
    return {"keys": (bsz, 1, 1, k_len), "queries-keys": (bsz, 1, q_len, k_len), "heads": (bsz, heads, q_len, k_len),
            "shared": (1, 1, q_len, k_len), "2d": (q_len, k_len)}[form]


def draw_mask(draw, shape: tuple, kind: str | None = None, empty_rows: bool | None = None) -> BoolMask | AdditiveMask:
    """A boolean or additive mask of ``shape`` in a layout that fits it; ``kind`` and
    ``empty_rows`` drawn where not given.

    A fill of -1e4 never hides a whole row (EMPTY_ROW_FILLS): such a row is not empty but a softmax over
    score - 10000, where float32 keeps the scores only to its spacing at 10000 (2^-10), so a
    correct float32 kernel misses float64 there by more than the table allows (deep profile:
    q (1, 1, 2, 1), k and v (1, 1, 3, 1), every key of query 1 at -1e4, seed 0: off by
    1.5e-4 where 1e-4 + 3e-5 x |value| is allowed, math and flash alike): a limit of the
    mask's encoding, which the model's loss ignores on padded rows, not of any kernel."""
    kind = kind or draw(st.sampled_from(("bool", "additive")))
    fill = draw(st.sampled_from(tuple(FILLS))) if kind == "additive" else "-inf"
    empty = (draw(st.booleans()) if empty_rows is None else empty_rows) and fill in EMPTY_ROW_FILLS
    layout = draw(st.sampled_from(fitting_layouts(shape)))
    if kind == "bool":
        return BoolMask(tuple(shape), layout, empty)
    return AdditiveMask(tuple(shape), layout, fill=fill, bias=draw(st.booleans()), empty_rows=empty)


def _padding(draw, bsz: int, heads: int, q_len: int, k_len: int) -> dict:
    """No mask (two draws in four), is_causal, or a mask that hides some keys of every row
    (never a whole row: the masks member draws those)."""
    choice = draw(st.sampled_from(("none", "none", "causal", "mask")))
    if choice == "causal":
        return {"is_causal": True}
    if choice == "mask":
        form = draw(st.sampled_from(("keys", "queries-keys")))
        return {"attn_mask": draw_mask(draw, mask_shape(form, bsz, heads, q_len, k_len), empty_rows=False)}
    return {}


# The layouts a model's q, k and v take: contiguous, (B, L, H, E).transpose(1, 2) and a
# batch broadcast from one row. Every fused kernel needs the last dim at stride 1, which the
# other layouts break for one tensor in two; drawn freely for all three, a fused kernel would
# run about one example in eight.
MODEL_LAYOUTS = ("contiguous", "permuted", "expanded")


def _qkv(draw, bsz: int, q_heads: int, kv_heads: int, q_len: int, k_len: int, e: int, ev: int) -> dict:
    """q (B, H_q, L, E), k (B, H_kv, S, E), v (B, H_kv, S, E_v): in half the examples each in
    a layout a model gives them (MODEL_LAYOUTS), in the others in any layout."""
    allowed = MODEL_LAYOUTS if draw(st.booleans()) else tuple(LAYOUTS)
    return {"query": S.draw_floats(draw, (bsz, q_heads, q_len, e), allowed),
            "key": S.draw_floats(draw, (bsz, kv_heads, k_len, e), allowed),
            "value": S.draw_floats(draw, (bsz, kv_heads, k_len, ev), allowed)}


def _example(draw, tensors: dict, extra: dict, **options) -> Example:
    """An Example of q, k, v, an optional mask (in ``extra``: attn_mask) and options."""
    inputs = dict(tensors)
    if "attn_mask" in extra:
        inputs["attn_mask"] = extra["attn_mask"]
    options.update({k: v for k, v in extra.items() if k != "attn_mask"})
    options.setdefault("is_causal", False)
    return S.draw_example(draw, inputs, **options)


@st.composite
def gqa(draw) -> Example:
    """Grouped-query attention (``enable_gqa=True``): H_q = groups x H_kv query heads share
    H_kv key/value heads, query head h reading key/value head h // groups (Llama, Mistral,
    Qwen). H_kv is 1 (multi-query), 2 or 3, so that a mapping that tiles the key/value heads
    (``repeat``) instead of grouping them (``repeat_interleave``) gives other numbers; the
    batch may be 0; no mask, is_causal or a padding mask; an explicit scale or not."""
    kv_heads = draw(st.sampled_from((2, 3, 1)))
    groups = draw(st.sampled_from((2, 3, 4)))
    q_heads = kv_heads * groups
    e = draw(st.sampled_from(HEAD_DIMS))
    budget = S.MAX_ELEMENTS // (q_heads * e)
    q_len, k_len = _sides_within(draw, 2, budget, LENGTHS)
    bsz, = _sides_within(draw, 1, min(budget // max(q_len, k_len), S.MAX_ELEMENTS // (q_heads * q_len * k_len)),
                         (1, 2, 3))
    bsz, = S.maybe_zeroed(draw, [bsz])
    extra = _padding(draw, bsz, q_heads, q_len, k_len)
    return _example(draw, _qkv(draw, bsz, q_heads, kv_heads, q_len, k_len, e, e), extra, enable_gqa=True,
                    **_scale(draw, e))


@st.composite
def value_dim(draw) -> Example:
    """A value head dim E_v other than the query/key head dim E, smaller or larger (the
    output is (..., L, E_v); pytorch#176767 returned the wrong shape); no mask, is_causal or
    a padding mask; an explicit scale or not."""
    e, ev = draw(st.lists(st.sampled_from(HEAD_DIMS), min_size=2, max_size=2, unique=True))
    bsz, heads = _sides_within(draw, 2, 8, (1, 2, 3))
    budget = S.MAX_ELEMENTS // (bsz * heads * max(e, ev))
    q_len, k_len = _sides_within(draw, 2, budget, LENGTHS)
    extra = _padding(draw, bsz, heads, q_len, k_len)
    return _example(draw, _qkv(draw, bsz, heads, heads, q_len, k_len, e, ev), extra, **_scale(draw, e))


def _past_a_block(draw) -> bool:
    """In about one example in four: lengths past a 64-row query block (LONG_QUERIES)."""
    return draw(st.integers(0, 3)) == 3


def _long_sizes(draw) -> tuple[int, int, int]:
    """Batch, heads and a head dim for lengths past a query block: 1 or 2 each, and a head dim
    that MPS's kernels take first (64, then 128, 8 and 13; shrinking keeps 64)."""
    bsz, heads = _sides_within(draw, 2, 2, (1, 2))
    return bsz, heads, draw(st.sampled_from((64, 128, 8, 13)))


@st.composite
def causal(draw) -> Example:
    """is_causal with a query length L other than the key length S. torch's causal mask is
    top-left aligned (``ones(L, S).tril()``: query i sees keys 0..i whatever S is; the
    function's documentation writes it out), not bottom-right as a chunk of queries at the
    end of a cache would want; both L < S and L > S are drawn. Every query sees key 0, so no
    row is empty. In about one example in four both lengths are 64 or more and one is past
    a 64-row query block (LONG_QUERIES: MPS's half-precision prefill kernel, where a causal
    mask applied per group of query rows leaked, pytorch#195910). An explicit scale or not."""
    if _past_a_block(draw):
        bsz, heads, e = _long_sizes(draw)
        lengths = (BLOCK_EDGE,) + LONG_QUERIES
        budget = S.MAX_ELEMENTS // (bsz * heads * e)
        if sum(n <= budget for n in lengths) < 2:   # 128 wide: the shortest pair past an edge
            e = 8
            budget = S.MAX_ELEMENTS // (bsz * heads * e)
        q_len = draw(st.sampled_from([n for n in LONG_QUERIES if n <= budget]))
        k_len = draw(st.sampled_from([n for n in lengths if n <= budget and n != q_len]))
    else:
        e = draw(st.sampled_from(HEAD_DIMS))
        bsz, heads = _sides_within(draw, 2, 8, (1, 2, 3))
        budget = S.MAX_ELEMENTS // (bsz * heads * e)
        q_len = draw(st.sampled_from([n for n in LENGTHS if n <= budget]))
        k_len = draw(st.sampled_from([n for n in LENGTHS if n <= budget and n != q_len]))
    return _example(draw, _qkv(draw, bsz, heads, heads, q_len, k_len, e, e), {"is_causal": True}, **_scale(draw, e))


@st.composite
def masks(draw) -> Example:
    """A boolean or an additive mask (fill -inf, -1e4, float32's or float16's lowest; with a
    finite bias or not) in each broadcast form (MASK_FORMS) and layout, in half the examples
    with query rows whose every key is hidden (transformers#40858: NaN with a 4-D mask). A
    fully hidden row is 0 by torch's math kernel since 2.5 (reference_attention says why);
    a NaN there fails as "non-finite". At least 2 keys: with one, a mask that keeps a key in
    every row hides nothing. In about one example in four the query and key lengths are 64 or
    more, one past a 64-row query block (LONG_QUERIES), the mask within the element budget."""
    form = draw(st.sampled_from(MASK_FORMS))
    if _past_a_block(draw):
        bsz, heads, e = _long_sizes(draw)
        bsz, heads = (1, 1) if form in ("heads", "queries-keys") else (bsz, heads)

        def fits(q_len, k_len):
            shapes = ((bsz, heads, q_len, e), (bsz, heads, k_len, e), mask_shape(form, bsz, heads, q_len, k_len))
            return all(math.prod(shape) <= S.MAX_ELEMENTS for shape in shapes)
        e = e if fits(LONG_QUERIES[0], BLOCK_EDGE) else 8
        q_len = draw(st.sampled_from([n for n in LONG_QUERIES if fits(n, BLOCK_EDGE)]))
        k_len = draw(st.sampled_from([n for n in (BLOCK_EDGE,) + LONG_QUERIES if fits(q_len, n)]))
    else:
        e = draw(st.sampled_from(HEAD_DIMS))
        bsz, heads = _sides_within(draw, 2, 8, (1, 2, 3))
        budget = S.MAX_ELEMENTS // (bsz * heads * e)
        k_len = draw(st.sampled_from([n for n in LENGTHS if 2 <= n <= budget]))
        q_len, = _sides_within(draw, 1, budget // k_len if form == "heads" else budget, LENGTHS)
    mask = draw_mask(draw, mask_shape(form, bsz, heads, q_len, k_len))
    return _example(draw, _qkv(draw, bsz, heads, heads, q_len, k_len, e, e), {"attn_mask": mask}, **_scale(draw, e))


def long_kv_budget() -> int:
    """Elements of one long_kv tensor as the op sees it: LONG_KV_BYTES in float64, halved
    for a strided view, whose storage holds twice its elements."""
    return LONG_KV_BYTES // FLOAT64_BYTES // 2


@st.composite
def long_kv(draw) -> Example:
    """One query token against LONG_KEYS keys, a decoding step against a KV cache, where a
    kernel splits the keys into blocks and one that reads past its block or its buffer
    (pytorch#174861, an out-of-bounds access in SDPA) or drops a block gives wrong numbers:
    batch and heads sized so that each tensor stays within ``long_kv_budget``. In half the
    examples grouped-query heads as Llama-family models decode with them (``enable_gqa``: 1
    or 2 key/value heads, each shared by 2 to 16 query heads: pytorch#174861 was reported at
    32 query heads over 2, 1024 keys, head dim 128, in half precision). No mask, or a per-key
    padding mask hiding about a third of each sequence's keys, boolean or additive (fill
    -inf, -1e4, float32's or float16's lowest); an explicit scale or not."""
    k_len = draw(st.sampled_from(LONG_KEYS))
    e = draw(st.sampled_from([d for d in LONG_HEAD_DIMS if k_len * d <= long_kv_budget()]))
    if draw(st.booleans()):
        kv_heads = draw(st.sampled_from((2, 1)))
        bsz, = _sides_within(draw, 1, long_kv_budget() // (k_len * e * kv_heads), (1, 2, 3))
        fits = [g for g in (16, 2, 4, 8) if bsz * kv_heads * g * k_len * e <= GQA_SPREAD * long_kv_budget()]
        q_heads, options = kv_heads * draw(st.sampled_from(fits or [2])), {"enable_gqa": True}
    else:
        bsz, kv_heads = _sides_within(draw, 2, long_kv_budget() // (k_len * e), (1, 2, 3))
        q_heads, options = kv_heads, {}
    extra = {}
    if draw(st.booleans()):
        extra["attn_mask"] = draw_mask(draw, (bsz, 1, 1, k_len), empty_rows=False)
    return _example(draw, _qkv(draw, bsz, q_heads, kv_heads, 1, k_len, e, e), extra, **options, **_scale(draw, e))


# --------------------------------------------------------------------------- examples every profile runs

def _qkv_specs(q: tuple, k: tuple, layout: str = "contiguous") -> tuple:
    return (("query", Floats(q, layout)), ("key", Floats(k, layout)), ("value", Floats(k, layout)))


# member -> examples run in every profile beside the drawn ones (the suite's @example): the
# shapes the reports name, and what a derandomized ci run of 20 draws may not reach.
EXAMPLES: dict[str, tuple[Example, ...]] = {
    "causal": (
        # pytorch#195910's own shape: q, k, v (1, 4, 64, 64), is_causal, a prefill (L == S)
        Example(0, 1.0, _qkv_specs((1, 4, 64, 64), (1, 4, 64, 64)), (("is_causal", True),)),
        # a prefill of 130 rows at head dim 64: three 64-row query blocks, the last of 2 rows
        Example(1, 1.0, _qkv_specs((1, 2, 130, 64), (1, 2, 130, 64), "permuted"), (("is_causal", True),)),
        # four blocks and a row, against fewer keys
        Example(2, 4.0, _qkv_specs((1, 2, 257, 13), (1, 2, 127, 13)), (("is_causal", True),)),
    ),
    "masks": (
        # fully masked rows, one of each mask kind and fill that may hide a whole row
        Example(3, 1.0, _qkv_specs((2, 2, 7, 64), (2, 2, 13, 64)) + (
            ("attn_mask", BoolMask((2, 1, 7, 13), "contiguous", empty_rows=True)),), (("is_causal", False),)),
        Example(4, 1.0, _qkv_specs((2, 2, 7, 8), (2, 2, 13, 8)) + (
            ("attn_mask", AdditiveMask((2, 2, 7, 13), "contiguous", fill="-inf", empty_rows=True)),),
            (("is_causal", False),)),
        Example(5, 4.0, _qkv_specs((1, 3, 13, 64), (1, 3, 31, 64)) + (
            ("attn_mask", AdditiveMask((1, 1, 13, 31), "strided", fill="float32-min", bias=True, empty_rows=True)),),
            (("is_causal", False),)),
        Example(6, 1.0, _qkv_specs((2, 2, 13, 64), (2, 2, 31, 64), "permuted") + (
            ("attn_mask", AdditiveMask((2, 1, 13, 31), "contiguous", fill="float16-min", empty_rows=True)),),
            (("is_causal", False),)),
        # 128 query rows against 127 keys, a padding mask with fully masked rows: two query blocks
        Example(7, 1.0, _qkv_specs((1, 1, 128, 64), (1, 1, 127, 64)) + (
            ("attn_mask", BoolMask((1, 1, 128, 127), "contiguous", empty_rows=True)),), (("is_causal", False),)),
    ),
    "long-kv": (
        # pytorch#174861's own shape: q (1, 32, 1, 128), k and v (1, 2, 1024, 128), enable_gqa
        Example(8, 1.0, (("query", Floats((1, 32, 1, 128))), ("key", Floats((1, 2, 1024, 128))),
                         ("value", Floats((1, 2, 1024, 128)))), (("is_causal", False), ("enable_gqa", True))),
    ),
}


# The family: member -> (its strategy, what it draws, in a line).
MEMBERS: dict[str, tuple[Callable, str]] = {
    "gqa": (gqa, "grouped-query heads (enable_gqa)"),
    "value-dim": (value_dim, "a value head dim other than the query's"),
    "causal": (causal, "is_causal with query length != key length (top-left aligned)"),
    "masks": (masks, "boolean and additive masks, fully masked rows included"),
    "long-kv": (long_kv, f"one query against {LONG_KEYS[0]}-{LONG_KEYS[-1]} keys"),
}


# --------------------------------------------------------------------------- the reference

def reference_attention(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False):
    """Attention written out, in float64, from other ops than scaled_dot_product_attention:
    scores = q @ k^T x scale, the masks applied, softmax over the keys, @ v.

    - ``enable_gqa``: query head h reads key/value head h // (H_q / H_kv), so the key/value
      heads are repeated in place (``repeat_interleave``), as torch documents.
    - ``is_causal``: query i sees keys 0..i (top-left aligned, ``tril`` of an L x S matrix),
      whatever the lengths.
    - a boolean mask hides the keys where it is False; an additive one is added to the
      scores (-inf hides).
    - a query row whose every key is hidden (-inf everywhere after the masks) is 0: the
      softmax over nothing is undefined, and torch's math kernel returns 0 there since
      torch 2.5 (``_safe_softmax``; before, NaN), which is what attention over no keys
      should give a model (the row then adds nothing). A kernel that gives NaN there is wrong
      (cause "non-finite"). A row hidden by finite fills (-1e4) is not empty: its softmax
      is over the scores plus the fill, as any kernel computes it.

    Every input is copied to a contiguous float64 tensor first, so no kernel's handling of
    strides is shared with the result under test.
    """
    import torch
    q, k, v = (t.detach().to(torch.float64).contiguous() for t in (query, key, value))
    if enable_gqa and k.size(-3) != q.size(-3):
        groups = q.size(-3) // k.size(-3)
        k, v = k.repeat_interleave(groups, dim=-3), v.repeat_interleave(groups, dim=-3)
    factor = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = torch.matmul(q, k.transpose(-1, -2)) * factor
    q_len, k_len = q.size(-2), k.size(-2)
    if is_causal:
        seen = torch.ones(q_len, k_len, dtype=torch.bool).tril()
        scores = scores.masked_fill(~seen, -math.inf)
    if attn_mask is not None:
        mask = attn_mask.detach().contiguous()
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, -math.inf)
        else:
            scores = scores + mask.to(torch.float64)
    empty = torch.isneginf(scores).all(dim=-1, keepdim=True)
    weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=-1).masked_fill(empty, 0.0)
    return torch.matmul(weights, v)


# --------------------------------------------------------------------------- kernels

@dataclasses.dataclass(frozen=True)
class Kernel:
    """An attention kernel ``torch.nn.attention.sdpa_kernel`` selects: its name in the check
    id, its SDPBackend member, and the target kinds (harness.env.devices.kind_of) whose
    dispatcher may choose it."""
    name: str
    member: str
    kinds: tuple[str, ...]
    what: str
    heading: str = ""   # how torch's warnings name it: "<heading> kernel not used because:"


# The CPU's dispatcher (sdp_utils_cpp) chooses between math and flash only; CUDA's among
# all four; MPS's, where torch has one (``mps_choice``), among math and whatever it offers.
# A stand-in computes on the CPU, so it has the CPU's kernels.
KERNELS: dict[str, Kernel] = {k.name: k for k in (
    Kernel("math", "MATH", ("cpu", "stand-in", "cuda", "mps"),
           "the composite math kernel (on MPS: torch's MPS attention kernel where torch routes math there)"),
    Kernel("flash", "FLASH_ATTENTION", ("cpu", "stand-in", "cuda", "mps"), "FlashAttention", "flash"),
    Kernel("efficient", "EFFICIENT_ATTENTION", ("cuda", "mps"), "memory-efficient attention (xFormers' kernel)",
           "memory efficient"),
    Kernel("cudnn", "CUDNN_ATTENTION", ("cuda",), "cuDNN's fused attention", "cudnn"),
)}

# What torch says when the selected kernel cannot run the inputs (sdp_utils*.cpp): a refusal,
# not a failure. Anything else it raises is a failure of the check.
REFUSALS = ("No available kernel", "No viable backend")


class Refused(Exception):
    """torch will not run this example on the selected kernel; ``reason`` says why, in its words."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _torch_version() -> str:
    import torch
    return torch.__version__.split("+")[0]


@functools.lru_cache(maxsize=None)
def mps_choice() -> bool:
    """Whether this torch lets the MPS dispatcher choose an attention kernel: it does where
    ``aten::_fused_sdp_choice`` has an MPS kernel. Where not (torch 2.15 among them), MPS
    always takes the math branch, whatever sdpa_kernel selects; that branch runs torch's MPS
    attention kernel (``aten::_scaled_dot_product_attention_math_for_mps``, torch >= 2.5)
    for inputs without grad and without dropout (contiguous ones; on macOS 15 and later in
    newer torch, any), the composite math otherwise.

    A torch built without MPS (Linux, where the emulated Mac runs) registers no MPS kernel
    at all, so there its kernel table answers: the installed torch's
    native_functions.yaml, the one the macOS wheel of the same version ships
    (harness.ops.kernels)."""
    import torch
    if not torch.backends.mps.is_built():
        from harness.ops import kernels
        try:
            return "_fused_sdp_choice" in kernels.mps_ops(kernels.load_installed().table)
        except kernels.KernelsError:
            return False   # no table: flash and efficient skip on MPS with the reason; math still runs
    has_kernel = getattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", None)  # private: may go
    if has_kernel is None:
        return False  # then flash and efficient skip on MPS with the reason; math still runs
    try:
        return bool(has_kernel("aten::_fused_sdp_choice", "MPS"))
    except RuntimeError:  # no such op registered in this torch
        return False


def unselectable(kernel: Kernel, kind: str) -> str | None:
    """Why ``kernel`` cannot be selected on a target of ``kind`` with this torch (None when it
    can): then the check is skipped with this reason, for every example."""
    import torch
    if kind not in kernel.kinds:
        return f"a {kind} target has no {kernel.name} attention kernel to select"
    if getattr(getattr(torch.nn, "attention", None), "sdpa_kernel", None) is None:
        return (f"torch {_torch_version()} has no torch.nn.attention.sdpa_kernel (added in torch 2.3): no attention "
                "kernel can be selected; upgrade torch to check each one")
    if not hasattr(torch.nn.attention.SDPBackend, kernel.member):
        return f"torch {_torch_version()} has no SDPBackend.{kernel.member}"
    if kind == "mps" and kernel.name != "math" and not mps_choice():
        return (f"torch {_torch_version()} offers no choice of attention kernel on MPS (aten::_fused_sdp_choice has "
                "no MPS kernel): scaled_dot_product_attention takes its math branch whatever sdpa_kernel selects, "
                "and that branch runs torch's MPS attention kernel (the math checks cover it)")
    return None


@functools.lru_cache(maxsize=1)
def gqa_missing() -> str | None:
    """Why this torch cannot run grouped-query attention (None when it can): enable_gqa
    arrived in torch 2.5. Asked of the function itself, on a tiny input, not of a version."""
    import torch
    import torch.nn.functional as F
    tiny = torch.zeros(1, 2, 1, 1)
    try:
        F.scaled_dot_product_attention(tiny, tiny[:, :1], tiny[:, :1], enable_gqa=True)
    except TypeError:
        return (f"torch {_torch_version()}'s scaled_dot_product_attention has no enable_gqa (added in torch 2.5): "
                "grouped-query models repeat their key/value heads themselves there")
    return None


def selecting(kernel: Kernel):
    """The context in which torch may use ``kernel`` alone."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel([getattr(SDPBackend, kernel.member)])


def _reason(text: str) -> str:
    """torch's message without its source location and the example's own sizes, so that
    refusals of one kind count together."""
    text = text.split(" (Triggered internally")[0].strip()
    return re.split(r"\. Got |\. Instead got ", text)[0].rstrip(".")


def rejection_reasons(kernel: Kernel, said: list[str]) -> list[str]:
    """The reasons torch gave for rejecting ``kernel``: the warnings after the heading that
    names it ("Flash attention kernel not used because:"). CUDA's dispatcher explains every
    fused kernel in turn, the CPU's only flash; where no heading names it, every reason."""
    mine, others, current = [], [], None
    for text in said:
        reason = _reason(text)
        if reason.endswith("because:"):
            current = reason.lower()
            continue
        if kernel.heading and current is not None and current.startswith(kernel.heading):
            mine.append(reason)
        others.append(reason)
    return mine or others


def refusal(kernel: Kernel, kind: str, query, key, value, attn_mask=None, is_causal=False, scale=None,
            enable_gqa=False) -> str | None:
    """Why torch would not run this example on ``kernel`` (None when it would), in torch's
    words: its own choice (``torch._fused_sdp_choice``, what scaled_dot_product_attention
    asks) under the selection, and the warning it gives for a kernel it rejects (the one
    naming the constraint: "Flash attention requires q,k,v to have the same last
    dimension"). The MPS math branch is never refused (``mps_choice``)."""
    import torch
    from torch.nn.attention import SDPBackend
    if kind == "mps" and not mps_choice():
        return None
    choose = getattr(torch, "_fused_sdp_choice", None)  # private: where a torch lacks it, ``attend`` asks
    if choose is None:                                   # by running the example and reading torch's refusal
        return None
    gqa_kw = {"enable_gqa": True} if enable_gqa else {}
    with selecting(kernel), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            chosen = choose(query, key, value, attn_mask, 0.0, is_causal, scale=scale, **gqa_kw)
        except RuntimeError as exc:
            said = str(exc).strip()
            if not said.startswith(REFUSALS):
                raise
            why = rejection_reasons(kernel, [str(w.message) for w in seen])
            return why[-1] if why else _reason(said)
    wanted = getattr(SDPBackend, kernel.member)
    if chosen != int(wanted.value if hasattr(wanted, "value") else wanted):
        return f"torch chose kernel {chosen} instead of {kernel.member}"
    return None


def attend(kernel: Kernel, kind: str, device) -> Callable:
    """scaled_dot_product_attention on ``kernel`` for tensors on ``device`` (the target's),
    raising Refused where torch would not run it there; on another device (the CPU as the
    accelerator's yardstick) with torch's own choice. Dropout is off: its random numbers
    differ between devices. The function is looked up when called, so a patched one (a fault
    injected by the self-tests) is the one judged."""
    import torch
    home = torch.device(device).type

    def fn(query, key, value, **options):
        import torch.nn.functional as F
        if query.device.type != home:
            return F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, **options)
        why = refusal(kernel, kind, query, key, value, **options)
        if why is not None:
            raise Refused(why)
        with selecting(kernel), warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            try:
                return F.scaled_dot_product_attention(query, key, value, dropout_p=0.0, **options)
            except RuntimeError as exc:  # torch refusing the kernel, where it could not be asked first
                if not str(exc).strip().startswith(REFUSALS):
                    raise
                why = rejection_reasons(kernel, [str(w.message) for w in seen])
                raise Refused(why[-1] if why else _reason(str(exc))) from None
    return fn


# --------------------------------------------------------------------------- cases

ATTENTION_DTYPES = ("float32", "float16", "bfloat16")


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    """A family member in one dtype on one kernel, with the targets that run it (the
    ``cases`` marker): ``parity/attention.<member>/<dtype>/<kernel>``."""
    member: str
    dtype: str
    kernel: str
    targets: tuple[str, ...]

    @property
    def subject(self) -> str:
        return f"attention.{self.member}"

    @property
    def variant(self) -> str:
        return f"{self.dtype}/{self.kernel}"

    @property
    def id(self) -> str:
        return f"{self.dtype}-{self.kernel}"


def attention_cases(member: str) -> list[AttentionCase]:
    """Every dtype on every kernel, each on the targets whose kind can select the kernel
    (KERNELS): the CPU and stand-ins math and flash; CUDA all four; MPS math, flash and
    efficient (flash and efficient skip, with the reason, where torch offers MPS no choice);
    an emulating stand-in as the device it emulates (devices.rules_of)."""
    from harness.env.devices import STAND_INS, TARGETS, rules_of  # a registered stand-in is a target here
    if member not in MEMBERS:
        raise KeyError(f"unknown attention member {member!r}; known: {', '.join(MEMBERS)}")
    return [AttentionCase(member, dtype, kernel.name,
                          tuple(t for t in TARGETS + tuple(STAND_INS) if rules_of(t) in kernel.kinds))
            for dtype in ATTENTION_DTYPES for kernel in KERNELS.values()]


# --------------------------------------------------------------------------- rows a finite fill hides

def hides_rows_finitely(example: Example) -> bool:
    """Whether ``example``'s mask hides whole rows with float16's lowest value (FLOAT16_MIN_BAND)."""
    mask = dict(example.inputs).get("attn_mask")
    return isinstance(mask, AdditiveMask) and mask.empty_rows and mask.fill == "float16-min"


def finite_only(fn: Callable) -> Callable:
    """``fn`` (the op, or the reference) with its output on every query row wholly at float16's
    lowest value set to 0 where it is a number: there only a number is asked
    (FLOAT16_MIN_BAND says why), so NaN or inf stay and fail as non-finite, and any number
    passes. The other rows are judged as ever."""
    import torch

    def blind(**args):
        out = fn(**args)
        mask = args.get("attn_mask")
        if mask is None or mask.dtype == torch.bool or not out.is_floating_point():
            return out
        low, high = FLOAT16_MIN_BAND
        rows = ((mask >= low) & (mask <= high)).all(-1).to(out.device)
        rows = torch.broadcast_to(rows, out.shape[:-1]).unsqueeze(-1)
        return torch.where(rows & torch.isfinite(out), torch.zeros_like(out), out)
    blind.__name__ = getattr(fn, "__name__", "attention")
    return blind


# --------------------------------------------------------------------------- the runner

class KernelTally:
    """One attention check: a properties.tally.Tally that judges each example on one
    kernel against ``reference_attention``, and counts, without judging, the examples
    torch refuses to run on that kernel (flash with a value dim of its own, say).

    Judged normwise, as the matmul-like ops are: an output is a sum over the keys of
    weights x values, so an element that cancels to near 0 keeps the absolute error of the
    sum, and a weight is a softmax of scores whose float32 rounding grows with their size.
    Against float64, a correct float32 kernel's error follows the output's magnitude, not
    each element's (harness.parity.numerics.accuracy).

    A check is about its kernel: one whose every example was refused is a skip, with
    torch's reasons, not a pass (``finish``); one that ran some says how many it ran and
    why the others were refused (metrics ``examples`` and ``refused``, and the record's
    reason)."""

    def __init__(self, tally, kernel: Kernel, kind: str, record):
        import collections
        self.tally, self.kernel, self.kind, self.record = tally, kernel, kind, record
        self.fn = attend(kernel, kind, tally.device)
        self.refused: collections.Counter = collections.Counter()
        record.metric(kernel=kernel.name, examples=0)

    def check(self, example: Example) -> None:
        fn, reference = self.fn, reference_attention
        if hides_rows_finitely(example):
            fn, reference = finite_only(fn), finite_only(reference)
        try:
            if dict(example.options).get("enable_gqa") and (missing := gqa_missing()):
                raise Refused(missing)
            self.tally.check(OP, fn, example, normwise=True, reference=reference)
        except Refused as refused:
            self.refused[refused.reason] += 1
            self.record.metric(refused=dict(self.refused.most_common()), examples=self.tally.examples)

    def finish(self) -> None:
        """After the last example: a skip when the kernel ran none, else a note of the refusals."""
        from harness.core.records import Status, Verdict
        total = sum(self.refused.values())
        why = "; ".join(f"{reason} ({n})" for reason, n in self.refused.most_common(3))
        if self.tally.examples == 0 and total:
            self.record.conclude(Verdict(Status.SKIP, message=(
                f"torch {_torch_version()} refused all {total} drawn examples on {self.kernel.name} "
                f"({self.kernel.what}) here: {why}")))
        elif total:
            self.record.note = (f"{self.kernel.name} ran {self.tally.examples} of {self.tally.examples + total} drawn "
                                f"examples; torch refused the others: {why}")
