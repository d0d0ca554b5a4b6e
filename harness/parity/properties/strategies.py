"""Hypothesis strategies for the property-parity suite: one per op family, each drawing an
Example (harness.parity.properties.examples) with sides of 1, primes and a few thousand,
zero-size tensors, broadcasting and non-contiguous views, and under the deep profile sides
at a size edge.

The question answered: move training from the CPU to an accelerator (or upgrade torch), do
the ops it lives on give the same numbers? A property check draws many inputs for one op
and holds the op's result on the target against the CPU's, and both against a float64
reference (harness.parity.properties.tally). An example is a reproducer by itself:
hypothesis prints it with a failure ("Failing test case"; "Falsifying example" in older
versions).

The sizes examples are drawn from, and the helpers that draw shapes and layouts: SIDES and
LONG for every profile; the size EDGES (2^15 and 2^16, give or take one) under the deep
profile only (harness.parity.properties.profiles.deep_loaded), each tensor then within
EDGE_ELEMENTS.

torch is imported where it is used, not by this module: suites collect it without
loading torch (as the ops suite does).
"""
from __future__ import annotations

import math

from hypothesis import strategies as st

from harness.parity.properties import profiles
from harness.parity.properties.examples import LAYOUTS, Example, Floats, Index, KeyMask, distinct_pool, fitting_layouts

# --------------------------------------------------------------------------- sizes and drawing helpers
# Sides: 1 (the broadcasting and squeezing edge) and small primes, which no power-of-two
# tiling or vector width divides, so kernels run their remainder paths.
SIDES = (1, 2, 3, 7, 13, 31)
# A last dim of a few thousand, like a vocabulary or a sequence: long reductions and
# multi-block kernels. 3001 is prime.
LONG = (2048, 3001)
# Elements of one input, so a property stays at a few seconds on a CPU.
MAX_ELEMENTS = 1 << 14
# Size edges, drawn under the deep profile only (profiles.deep_loaded): a side
# just below, at and just past 2^15 and 2^16, where a kernel's 16-bit index or its grid
# of at most 65535 threadgroups runs out and MPS has given wrong numbers: matmul with
# N = 32769 (pytorch#111634), Linear(1, 32769) wrong past column 1024 (pytorch#116769),
# bmm with K >= 32767 (pytorch#195163), F.linear with bias on a 3-D input whose leading
# dim passes 65536 (pytorch#189495), Conv1d with more than 65536 output channels wrong
# (pytorch#129207) and then raising (pytorch#134416); harness.parity.known_bugs.cases replays each
# report at its own shape. ci never draws them: its examples stay those it always drew.
EDGES = (2**15 - 1, 2**15, 2**15 + 1, 2**16 - 1, 2**16, 2**16 + 1)
# Elements of each tensor of an example with a side at an edge (every input and the
# output; a strided view's storage holds twice its elements), the other sides shrunk to
# fit: 2^21 float64 values are 16 MiB, and the float64 reference, the dtype on the CPU
# and each side's random values take tenths of a second on 2 CPU cores. Where the
# target's memory allows more, raising it reaches the reports' own shapes (pytorch#189495
# used (65537, 11, 128)); the whole deep profile then runs longer in proportion.
EDGE_ELEMENTS = 1 << 21
SEEDS = st.integers(0, 2**32 - 1)
# Powers of two, so scaling is exact: only the magnitudes change (large logits for softmax,
# large sums against half precision's range).
SCALES = st.sampled_from((1.0, 0.25, 4.0))


# --------------------------------------------------------------------------- drawing helpers

def draw_sides(draw, count: int, budget: int, choices=SIDES) -> list[int]:
    """``count`` sides whose product stays within ``budget`` (a side that would not fit is not offered)."""
    out = []
    for _ in range(count):
        side = draw(st.sampled_from([s for s in choices if s <= budget]))
        budget //= side
        out.append(side)
    return out


def maybe_zeroed(draw, sizes: list[int], which=None) -> list[int]:
    """``sizes``, in about one example in five with one of them (among ``which``) set to 0."""
    which = range(len(sizes)) if which is None else which
    if which and draw(st.integers(0, 4)) == 4:
        sizes = list(sizes)
        sizes[draw(st.sampled_from(list(which)))] = 0
    return sizes


def broadcast_shape(draw, shape: tuple) -> tuple:
    """A shape that broadcasts to ``shape``: some sides 1, some leading dims gone."""
    kept = tuple(s if draw(st.booleans()) else 1 for s in shape)
    return kept[draw(st.integers(0, len(kept))):]


# Sums of 2^15 terms or more (a matmul's K at a size edge, a reduction over one) are drawn
# so that they end in many distinct outputs: at least 9 (``around_edge``'s ``wide``), from
# operands that are not expanded (expanded rows repeat, and so do their sums). The normwise
# rule scales the allowed error by the largest output, and where every output is a sum that
# happens to cancel to near 0, each keeps the float32 error of its 2^16 terms and a correct
# CPU misses float64: F.linear on x (1, 32767) and w (1, 32767), seed 3, scale 4, is 28.06
# in float64 and off by 3.1e-3 in float32 where the rule allows 9.4e-4; on x (2, 65535)
# expanded and w (2, 65535), seed 2, scale 1, the two distinct sums are 9.3 and -10.7, off
# by 5.2e-4 where 4.2e-4 is allowed. At K = 65535 one sum in eight cancels that far on
# this CPU; 9 independent ones together, about once in 10^8.
UNEXPANDED = tuple(name for name in LAYOUTS if name != "expanded")


def summable_layouts(shape: tuple) -> tuple[str, ...]:
    """The layouts for an input that an op works along (softmax, cumsum): all, but not
    expanded when dim 0 is at a size edge. Expanded, the 2^16 terms along it are one value,
    whose running sum leaves float16's range (65504): cumsum of x (65536, 7) expanded,
    seed 0, scale 4, along dim 0 reaches 571392 in float64 and inf in float16, a miss that
    no kernel can help."""
    return tuple(name for name in LAYOUTS if not (name == "expanded" and shape and shape[0] in EDGES))


def _layout(draw, shape: tuple, allowed=tuple(LAYOUTS)) -> str:
    return draw(st.sampled_from(fitting_layouts(shape, allowed)))


def draw_floats(draw, shape: tuple, allowed=tuple(LAYOUTS), distinct: bool = False) -> Floats:
    """A floating input of ``shape`` in a layout drawn among ``allowed`` that fits its dims."""
    return Floats(tuple(shape), _layout(draw, shape, allowed), distinct)


def draw_example(draw, inputs: dict, **options) -> Example:
    """An Example of ``inputs`` (name: spec) and ``options`` (name: value), with a drawn seed and scale."""
    return Example(draw(SEEDS), draw(SCALES), tuple(inputs.items()), tuple(options.items()))


def draw_options(draw, strategies: dict) -> dict:
    """A value drawn from each of ``strategies`` (an op's extra options), by name."""
    return {name: draw(s) for name, s in strategies.items()}


def draw_edge(draw) -> int | None:
    """Under the deep profile, in about one example in five, a side at a size edge (EDGES);
    otherwise None. Under any other profile it draws nothing, so a derandomized ci run
    makes the same choices, and gets the same examples, as before edges existed."""
    if not profiles.deep_loaded() or draw(st.integers(0, 4)) < 4:
        return None
    return draw(st.sampled_from(EDGES))


def around_edge(draw, edge: int, at: str, tensors: tuple[str, ...], wide: str = "") -> dict[str, int]:
    """Sides named by letters, side ``at`` at ``edge``: ``tensors`` spells each tensor's
    sides (inputs and output, e.g. "MK", "KN", "MN"), and every other letter, in the order
    it first appears, gets a side from SIDES that keeps each tensor holding it within
    EDGE_ELEMENTS (1 always fits: an edge is far below it). The letters in ``wide`` (the
    output's, where K is at the edge) get a side of at least 3 while one fits, so 2 of them
    make 9 outputs, and where one cannot, the one before it is large (31 or 13)."""
    sides = {at: edge}
    for name in dict.fromkeys("".join(tensors)):
        if name in sides:
            continue
        room = min(EDGE_ELEMENTS // math.prod(sides.get(n, 1) for n in t) for t in tensors if name in t)
        fitting = [s for s in SIDES if s <= room]
        sides[name] = draw(st.sampled_from([s for s in fitting if s >= 3 or name not in wide] or fitting))
    return sides


def spell(sides: dict[str, int], letters: str) -> tuple[int, ...]:
    """The shape ``letters`` spells with the sides of around_edge ("MK" -> (M, K))."""
    return tuple(sides[n] for n in letters)


@st.composite
def shapes(draw, min_ndim: int = 1, max_ndim: int = 4, long: bool = True, budget: int = MAX_ELEMENTS,
           zero: bool = True, edges: bool = False) -> tuple:
    """A shape: the last dim from SIDES or LONG, the others from SIDES within ``budget``
    elements, and in one example in five one side 0. With ``edges``, under the deep profile,
    in one example in five instead: any one side at a size edge, the others from SIDES
    within EDGE_ELEMENTS, none 0."""
    if edges and (edge := draw_edge(draw)) is not None:
        ndim = draw(st.integers(max(min_ndim, 1), max_ndim))
        others = draw_sides(draw, ndim - 1, EDGE_ELEMENTS // edge)
        at = draw(st.integers(0, ndim - 1))
        return tuple(others[:at] + [edge] + others[at:])
    ndim = draw(st.integers(min_ndim, max_ndim))
    if ndim == 0:
        return ()
    last = draw(st.sampled_from([s for s in SIDES + (LONG if long else ()) if s <= budget]))
    dims = draw_sides(draw, ndim - 1, budget // last) + [last]
    return tuple(maybe_zeroed(draw, dims) if zero else dims)


# Tokens of one embedding lookup: a row's gradient sums up to this many terms, serially
# on the CPU, whose float32 error grows with the terms' magnitude, not the sum's.
TOKENS = 256


# --------------------------------------------------------------------------- examples per op family

@st.composite
def pointwise(draw, low: float | None = None, **options) -> Example:
    """One input of any shape and layout (channels_last too, at 4 dims); with ``low``, its
    values are ``low`` + |N(0, scale)| (a function with poles below, such as lgamma)."""
    shape = draw(shapes())
    x = draw_floats(draw, shape)
    if low is not None:
        x = Floats(x.shape, x.layout, low=low)
    return draw_example(draw, {"x": x}, **draw_options(draw, options))


@st.composite
def along_a_dim(draw, **options) -> Example:
    """One input and a dim to work along (softmax, log_softmax, cumsum); under the deep
    profile the dim, or another, may be at a size edge."""
    shape = draw(shapes(edges=True))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    return draw_example(draw, {"x": draw_floats(draw, shape, summable_layouts(shape))}, dim=dim, **draw_options(draw, options))


@st.composite
def reductions(draw, **options) -> Example:
    """One input and the dims to reduce: all (None), one, or several; keepdim or not.
    Under the deep profile a side may be at a size edge (_reductions_at_an_edge)."""
    if (edge := draw_edge(draw)) is not None:
        return _reductions_at_an_edge(draw, edge, options)
    shape = draw(shapes())
    dims = draw(st.none() | st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    dim = None if dims is None else dims[0] if len(dims) == 1 else tuple(dims)
    return draw_example(draw, {"x": draw_floats(draw, shape)}, dim=dim, keepdim=draw(st.booleans()),
                    **draw_options(draw, options))


def _reductions_at_an_edge(draw, edge: int, options: dict) -> Example:
    """x of 2 to 4 dims, not expanded (UNEXPANDED): one at ``edge``, one wide (13 or 31),
    the rest from SIDES within EDGE_ELEMENTS. Either the edge is reduced (with other dims,
    never the wide one) or it is kept (any others reduced). So a sum over the edge ends in
    13 distinct outputs or more, and no full reduction is drawn, whose lone sum may cancel
    (bfloat16 sum of x (65535,) strided, seed 0: 7.9 in float64, off by 0.56 where the
    rule allows 0.45)."""
    wide = draw(st.sampled_from([s for s in SIDES if s >= 13 and s * edge <= EDGE_ELEMENTS]))
    rest = draw_sides(draw, draw(st.integers(0, 2)), EDGE_ELEMENTS // (edge * wide))
    shape = tuple(draw(st.permutations([edge, wide, *rest])))
    at, kept = shape.index(edge), shape.index(wide)
    if draw(st.booleans()):
        others = [d for d in range(len(shape)) if d not in (at, kept)]
        dims = [at, *draw(st.lists(st.sampled_from(others), unique=True))] if others else [at]
    else:
        dims = draw(st.lists(st.sampled_from([d for d in range(len(shape)) if d != at]), min_size=1, unique=True))
    dim = dims[0] if len(dims) == 1 else tuple(dims)
    return draw_example(draw, {"x": draw_floats(draw, shape, UNEXPANDED)}, dim=dim, keepdim=draw(st.booleans()),
                    **draw_options(draw, options))


@st.composite
def without_ties(draw, dim_none: bool = False, with_k: bool = False, reduces: bool = False,
                 **options) -> Example:
    """Distinct values and a dim (or None: the flattened tensor), for ops that return
    indices (topk, sort, argmax): with a tie two correct kernels may pick different
    indices. Expanded views repeat values along dim 0, so they appear only when the op
    works along another dim. ``with_k``: a k from 0 to the dim's size (topk). ``reduces``:
    the op has no answer over nothing (argmax), so the dim it reduces is never zero-size."""
    shape = draw(shapes(max_ndim=3, budget=len(distinct_pool()) // 2, zero=False))
    dims = st.integers(-len(shape), len(shape) - 1)
    dim = draw(st.none() | dims) if dim_none else draw(dims)
    along_0 = dim is None or dim % len(shape) == 0
    zeroable = list(range(len(shape)))
    if reduces:
        zeroable = [] if dim is None else [d for d in zeroable if d != dim % len(shape)]
    shape = tuple(maybe_zeroed(draw, list(shape), zeroable))
    allowed = tuple(name for name in LAYOUTS if not (along_0 and name == "expanded"))
    if with_k:
        options["k"] = st.integers(0, shape[dim])
    return draw_example(draw, {"x": draw_floats(draw, shape, allowed, distinct=True)}, dim=dim, **draw_options(draw, options))


@st.composite
def linear(draw) -> Example:
    """x (*batch, K) through a weight (N, K), with a bias or not; K may be a few thousand.
    Under the deep profile N, K or the leading dim of a 3-D x may be at a size edge."""
    if (edge := draw_edge(draw)) is not None:
        return _linear_at_an_edge(draw, edge)
    k = draw(st.sampled_from(SIDES + LONG))
    batch = draw_sides(draw, draw(st.integers(0, 2)), MAX_ELEMENTS // k)
    n, = draw_sides(draw, 1, MAX_ELEMENTS // (k * math.prod(batch)))
    *batch, n, k = maybe_zeroed(draw, batch + [n, k])
    inputs = {"x": draw_floats(draw, (*batch, k)), "w": draw_floats(draw, (n, k))}
    if draw(st.booleans()):
        inputs["b"] = draw_floats(draw, (n,))
    return draw_example(draw, inputs)


def _linear_at_an_edge(draw, edge: int) -> Example:
    """out_features N (pytorch#116769), in_features K, or B, the leading dim of a 3-D x
    (pytorch#189495, wrong with a bias only), at ``edge``; x is (B, T, K), (T, K) or (K,).
    With K at the edge x is not 1-D, and neither x nor w expanded (UNEXPANDED)."""
    at = draw(st.sampled_from("NKB"))
    batch = "BT"[3 - (3 if at == "B" else draw(st.integers(2 if at == "K" else 1, 3))):]
    sums = at == "K"
    sides = around_edge(draw, edge, at, (batch + "K", "NK", batch + "N"), wide=batch + "N" if sums else "")
    allowed = UNEXPANDED if sums else tuple(LAYOUTS)
    inputs = {"x": draw_floats(draw, spell(sides, batch + "K"), allowed), "w": draw_floats(draw, spell(sides, "NK"), allowed)}
    if draw(st.booleans()):
        inputs["b"] = draw_floats(draw, spell(sides, "N"))
    return draw_example(draw, inputs)


@st.composite
def matmuls(draw, batch_dims=(0, 2), broadcast: bool = True) -> Example:
    """a (*batch_a, M, K) @ b (*batch_b, K, N), the batches broadcasting against each other.
    Under the deep profile M, N, K or a batch dim may be at a size edge."""
    if (edge := draw_edge(draw)) is not None:
        return _matmuls_at_an_edge(draw, edge, batch_dims, broadcast)
    k = draw(st.sampled_from(SIDES + LONG))
    batch = draw_sides(draw, draw(st.integers(*batch_dims)), MAX_ELEMENTS // k)
    m, n = draw_sides(draw, 2, MAX_ELEMENTS // (k * math.prod(batch)))
    m, n, k = maybe_zeroed(draw, [m, n, k])
    batch_a = broadcast_shape(draw, tuple(batch)) if broadcast else tuple(batch)
    batch_b = broadcast_shape(draw, tuple(batch)) if broadcast else tuple(batch)
    return draw_example(draw, {"a": draw_floats(draw, (*batch_a, m, k)), "b": draw_floats(draw, (*batch_b, k, n))})


def _matmuls_at_an_edge(draw, edge: int, batch_dims: tuple, broadcast: bool) -> Example:
    """M, N (pytorch#111634: N = 32769), K (pytorch#195163: bmm with K >= 32767) or the
    first batch dim at ``edge``; with K at the edge, neither operand expanded (UNEXPANDED)."""
    at = draw(st.sampled_from("MNK" + ("B" if batch_dims[1] else "")))
    batch = "BC"[:draw(st.integers(max(batch_dims[0], int(at == "B")), batch_dims[1]))]
    sums = at == "K"
    # M and N first: with K at the edge they take their 3 or more, whatever the batch
    # sides get (broadcast_shape may leave both operands a batch of 1)
    sides = around_edge(draw, edge, at, ("MN" + batch, "MK" + batch, "KN" + batch), wide="MN" + batch if sums else "")
    batch_a = broadcast_shape(draw, spell(sides, batch)) if broadcast else spell(sides, batch)
    batch_b = broadcast_shape(draw, spell(sides, batch)) if broadcast else spell(sides, batch)
    allowed = UNEXPANDED if sums else tuple(LAYOUTS)
    return draw_example(draw, {"a": draw_floats(draw, (*batch_a, *spell(sides, "MK")), allowed),
                           "b": draw_floats(draw, (*batch_b, *spell(sides, "KN")), allowed)})


@st.composite
def baddbmm(draw) -> Example:
    """beta * input + alpha * (b1 @ b2), batched; input broadcasts to (B, M, N). Under the
    deep profile B, M, N or K may be at a size edge (pytorch#195163 names baddbmm too)."""
    allowed = tuple(LAYOUTS)
    if (edge := draw_edge(draw)) is not None:
        at = draw(st.sampled_from("BMNK"))
        sides = around_edge(draw, edge, at, ("BMN", "BMK", "BKN"), wide="BMN" if at == "K" else "")
        bsz, m, n, k = spell(sides, "BMNK")
        allowed = UNEXPANDED if at == "K" else allowed
    else:
        k = draw(st.sampled_from(SIDES + LONG))
        bsz, m, n = draw_sides(draw, 3, MAX_ELEMENTS // k)
        bsz, m, n, k = maybe_zeroed(draw, [bsz, m, n, k])
    inputs = {"input": draw_floats(draw, broadcast_shape(draw, (bsz, m, n))),
              "b1": draw_floats(draw, (bsz, m, k), allowed), "b2": draw_floats(draw, (bsz, k, n), allowed)}
    return draw_example(draw, inputs, beta=draw(st.sampled_from((1.0, 0.5, 0.0))),
                    alpha=draw(st.sampled_from((1.0, 0.5))))


@st.composite
def layer_norm(draw) -> Example:
    """Normalized over the last one or two dims (never zero-size: a mean over nothing),
    with or without an affine weight and bias. Under the deep profile a side may be at a
    size edge (_layer_norm_at_an_edge)."""
    if (edge := draw_edge(draw)) is not None:
        return _layer_norm_at_an_edge(draw, edge)
    shape = draw(shapes(max_ndim=3, zero=False))
    normalized = shape[-draw(st.integers(1, min(2, len(shape)))):]
    batch = maybe_zeroed(draw, list(shape[:len(shape) - len(normalized)]))
    shape = (*batch, *normalized)
    inputs = {"x": draw_floats(draw, shape)}
    if draw(st.booleans()):
        inputs["weight"] = draw_floats(draw, normalized)
        inputs["bias"] = draw_floats(draw, normalized)
    return draw_example(draw, inputs, normalized_shape=normalized)


def _layer_norm_at_an_edge(draw, edge: int) -> Example:
    """The normalized dim at ``edge`` (up to 31 rows), or ``edge`` rows of 7 to 31 elements
    each. Not rows of 1 to 3: a row of 2 whose two values nearly agree has a variance near
    0, where a correct float32 kernel misses float64 by more than the table allows (x
    (65536, 13, 2) at scale 4, seed 19860: off by 1.5e-4, allowed 1e-4), and among 2^16
    rows one such row is likely."""
    if draw(st.booleans()):
        normalized = (edge,)
        batch = draw_sides(draw, draw(st.integers(0, 2)), EDGE_ELEMENTS // edge)
    else:
        normalized = (draw(st.sampled_from([s for s in SIDES if s >= 7 and s * edge <= EDGE_ELEMENTS])),)
        batch = [edge]
    inputs = {"x": draw_floats(draw, (*batch, *normalized))}
    if draw(st.booleans()):
        inputs["weight"] = draw_floats(draw, normalized)
        inputs["bias"] = draw_floats(draw, normalized)
    return draw_example(draw, inputs, normalized_shape=normalized)


@st.composite
def attention(draw) -> Example:
    """q (B, H, L, E), k and v (B, H, S, E); no mask, a boolean padding mask (per key, or per
    query and key), or is_causal. Dropout is off: its random numbers differ between devices."""
    e = draw(st.sampled_from((1, 8, 13, 64)))
    bsz, heads = draw_sides(draw, 2, 8, choices=(1, 2, 3))
    q_len, k_len = draw_sides(draw, 2, MAX_ELEMENTS // (bsz * heads * e), choices=SIDES + (64,))
    bsz, = maybe_zeroed(draw, [bsz])
    inputs = {"query": draw_floats(draw, (bsz, heads, q_len, e)), "key": draw_floats(draw, (bsz, heads, k_len, e)),
              "value": draw_floats(draw, (bsz, heads, k_len, e))}
    mask = draw(st.sampled_from(("none", "padding", "causal")))
    if mask == "padding":
        inputs["attn_mask"] = KeyMask((bsz, 1, draw(st.sampled_from((1, q_len))), k_len))
    return draw_example(draw, inputs, is_causal=mask == "causal")


@st.composite
def cross_entropy(draw) -> Example:
    """Logits (N, C) or (N, C, T) with C up to a vocabulary's few thousand (under the deep
    profile also a vocabulary at a size edge, like a 32k or 64k tokenizer's, within
    EDGE_ELEMENTS); targets with ignore_index (-100) entries, never all; label smoothing 0
    or 0.1."""
    edge = draw_edge(draw)
    budget = MAX_ELEMENTS if edge is None else EDGE_ELEMENTS
    c = draw(st.sampled_from(SIDES + LONG)) if edge is None else edge
    extra = draw_sides(draw, draw(st.integers(0, 1)), budget // c)
    n, = draw_sides(draw, 1, budget // (c * math.prod(extra)))
    inputs = {"logits": draw_floats(draw, (n, c, *extra)), "target": Index((n, *extra), c, special=-100)}
    return draw_example(draw, inputs, label_smoothing=draw(st.sampled_from((0.0, 0.1))),
                    reduction=draw(st.sampled_from(("mean", "sum", "none"))))


@st.composite
def embedding(draw) -> Example:
    """A (V, D) table looked up by up to TOKENS indices that include padding_idx (0 or V-1,
    or none), and the gradient that flows back into the table (with V = 1, every token's).
    Under the deep profile V may be at a size edge (D then within EDGE_ELEMENTS)."""
    edge = draw_edge(draw)
    vocab = draw(st.sampled_from(SIDES + LONG)) if edge is None else edge
    dim, = draw_sides(draw, 1, (MAX_ELEMENTS if edge is None else EDGE_ELEMENTS) // vocab)
    idx_shape = draw(shapes(max_ndim=2, long=False, budget=min(TOKENS, MAX_ELEMENTS // dim)))
    padding_idx = draw(st.sampled_from((None, 0, vocab - 1)))
    inputs = {"weight": draw_floats(draw, (vocab, dim)), "indices": Index(idx_shape, vocab, special=padding_idx),
              "grad": Floats((*idx_shape, dim))}
    return draw_example(draw, inputs, padding_idx=padding_idx)


@st.composite
def conv1d(draw) -> Example:
    """x (N, C_in, L) with L up to a few thousand, a kernel of 1, 3 or 5, stride, padding,
    dilation and groups; the output length is at least 1. Under the deep profile C_out may
    be at a size edge."""
    if (edge := draw_edge(draw)) is not None:
        return _conv1d_at_an_edge(draw, edge)
    groups = draw(st.sampled_from((1, 2, 3)))
    c_in, c_out = (groups * s for s in draw_sides(draw, 2, 8, choices=(1, 2, 3)))
    length = draw(st.sampled_from([s for s in SIDES + (2048,) if s * c_in <= MAX_ELEMENTS]))
    stride, padding, dilation = (draw(st.sampled_from(v)) for v in ((1, 2), (0, 1, 2), (1, 2)))
    size = draw(st.sampled_from([s for s in (1, 3, 5) if dilation * (s - 1) < length + 2 * padding]))
    batch, = maybe_zeroed(draw, draw_sides(draw, 1, MAX_ELEMENTS // (c_in * length)))
    inputs = {"x": draw_floats(draw, (batch, c_in, length)), "weight": draw_floats(draw, (c_out, c_in // groups, size))}
    if draw(st.booleans()):
        inputs["bias"] = draw_floats(draw, (c_out,))
    return draw_example(draw, inputs, stride=stride, padding=padding, dilation=dilation, groups=groups)


def _conv1d_at_an_edge(draw, edge: int) -> Example:
    """C_out = ``edge`` from 1 to 3 input channels (pytorch#129207 and #134416:
    Conv1d(1, 65537, 3)), so the weight is (edge, C_in, size) and x and the output stay
    within EDGE_ELEMENTS: the output is at most 4 longer than x (padding 2 on each side).
    Not depthwise (groups = C_out): the CPU's float64 and float16 kernels then loop over
    the groups, a parallel region each, and at 65537 groups a call takes a third of a second
    on 2 idle cores and more than a minute on 2 busy ones."""
    c_in = draw(st.sampled_from((1, 2, 3)))
    length = draw(st.sampled_from([s for s in SIDES if (s + 4) * edge <= EDGE_ELEMENTS]))
    stride, padding, dilation = (draw(st.sampled_from(v)) for v in ((1, 2), (0, 1, 2), (1, 2)))
    size = draw(st.sampled_from([s for s in (1, 3, 5) if dilation * (s - 1) < length + 2 * padding]))
    batch, = draw_sides(draw, 1, EDGE_ELEMENTS // ((length + 4) * edge))
    inputs = {"x": draw_floats(draw, (batch, c_in, length)), "weight": draw_floats(draw, (edge, c_in, size))}
    if draw(st.booleans()):
        inputs["bias"] = draw_floats(draw, (edge,))
    return draw_example(draw, inputs, stride=stride, padding=padding, dilation=dilation, groups=1)


@st.composite
def index_select(draw) -> Example:
    shape = draw(shapes(max_ndim=3))
    dim = draw(st.integers(0, len(shape) - 1))
    count = draw(st.sampled_from(SIDES)) if shape[dim] else 0
    return draw_example(draw, {"x": draw_floats(draw, shape), "index": Index((count,), shape[dim])}, dim=dim)


@st.composite
def gather(draw, scatter: bool = False) -> Example:
    """x, a dim, and an index no larger than x off that dim, its values valid for x's dim.
    With ``scatter``: a src of the index's shape, added into x at the index (duplicates
    accumulate)."""
    shape = draw(shapes(max_ndim=3))
    dim = draw(st.integers(0, len(shape) - 1))
    idx_shape = tuple((draw(st.sampled_from(SIDES)) if shape[dim] else 0) if d == dim
                      else draw(st.integers(min(1, s), s)) for d, s in enumerate(shape))
    inputs = {"x": draw_floats(draw, shape), "index": Index(idx_shape, shape[dim])}
    if scatter:
        inputs["src"] = draw_floats(draw, idx_shape)
    return draw_example(draw, inputs, dim=dim)
