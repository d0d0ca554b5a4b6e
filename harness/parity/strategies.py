"""Hypothesis strategies for the property-parity suite, and the runner that judges an example.

The question answered: move training from the CPU to an accelerator (or upgrade torch), do
the ops it lives on give the same numbers? A property check draws many inputs for one op
(sides of 1, small primes and a few thousand, zero-size tensors, broadcasting, transposed,
sliced and expanded views) and holds the op's result on the target against the CPU's, and
both against a float64 reference.

An example is a small printable description: a seed, the shape and memory layout of each
floating input, the range of each integer input, the op's options. Hypothesis prints it
with a failure ("Failing test case"; "Falsifying example" in older versions), and it is a
reproducer by itself. Its tensors are made on the
CPU from the seed (float64, rounded to the dtype under test), moved to each device, and
only there given their layout, so the target and the CPU see the same values through the
same strides.

torch is imported where it is used, not by this module: suites collect it without
loading torch (as the ops suite does).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import math
from typing import Callable

from hypothesis import HealthCheck, note, settings, strategies as st

from harness.parity import hypothesis_profiles, tolerances
from harness.core.devices import TARGETS

# Sides: 1 (the broadcasting and squeezing edge) and small primes, which no power-of-two
# tiling or vector width divides, so kernels run their remainder paths.
SIDES = (1, 2, 3, 7, 13, 31)
# A last dim of a few thousand, like a vocabulary or a sequence: long reductions and
# multi-block kernels. 3001 is prime.
LONG = (2048, 3001)
# Elements of one input, so a property stays at a few seconds on a CPU.
MAX_ELEMENTS = 1 << 14
# Size edges, drawn under the deep profile only (hypothesis_profiles.deep_loaded): a side
# just below, at and just past 2^15 and 2^16, where a kernel's 16-bit index or its grid
# of at most 65535 threadgroups runs out and MPS has given wrong numbers: matmul with
# N = 32769 (pytorch#111634), Linear(1, 32769) wrong past column 1024 (pytorch#116769),
# bmm with K >= 32767 (pytorch#195163), F.linear with bias on a 3-D input whose leading
# dim passes 65536 (pytorch#189495), Conv1d with more than 65536 output channels wrong
# (pytorch#129207) and then raising (pytorch#134416); harness.parity.known_bug_cases replays each
# report at its own shape. ci never draws them: its examples stay those it always drew.
EDGES = (2**15 - 1, 2**15, 2**15 + 1, 2**16 - 1, 2**16, 2**16 + 1)
# Elements of each tensor of an example with a side at an edge (every input and the
# output; a strided view's storage holds twice its elements), the other sides shrunk to
# fit: 2^21 float64 values are 16 MiB, and the float64 reference, the dtype on the CPU
# and each side's random values take tenths of a second on 2 CPU cores. Where the
# target's memory allows more, raising it reaches the reports' own shapes (pytorch#189495
# used (65537, 11, 128)); the whole deep profile then runs longer in proportion.
EDGE_ELEMENTS = 1 << 21
# Tokens of one embedding lookup: a row's gradient sums up to this many terms, serially
# on the CPU, whose float32 error grows with the terms' magnitude, not the sum's.
TOKENS = 256
SEEDS = st.integers(0, 2**32 - 1)
# Powers of two, so scaling is exact: only the magnitudes change (large logits for softmax,
# large sums against half precision's range).
SCALES = st.sampled_from((1.0, 0.25, 4.0))
FLOAT_DTYPES = ("float32", "float16", "bfloat16")

# The settings every property test needs whatever profile is loaded: the journal's record
# fixture is function-scoped on purpose (one record accumulates every example of a check),
# and the first call of a kernel may be slow (compilation, warm-up), which is no property
# of its numbers.
PROPERTY_SETTINGS = settings(
    deadline=None,
    suppress_health_check=(*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture))


# --------------------------------------------------------------------------- layouts

@dataclasses.dataclass(frozen=True)
class Layout:
    """How a view of the drawn shape is taken from a contiguous tensor of ``storage(shape)``."""
    name: str
    min_ndim: int
    storage: Callable[[tuple], tuple]
    view: Callable[[torch.Tensor, tuple], torch.Tensor]


LAYOUTS = {layout.name: layout for layout in (
    Layout("contiguous", 0, lambda s: s, lambda t, s: t),
    # the last two dims swapped: a weight used as w.T, a key as k.transpose(-1, -2)
    Layout("transposed", 2, lambda s: s[:-2] + (s[-1], s[-2]), lambda t, s: t.transpose(-1, -2)),
    # dims -3 and -2 swapped: attention's view(B, L, H, E).transpose(1, 2)
    Layout("permuted", 3, lambda s: s[:-3] + (s[-2], s[-3], s[-1]), lambda t, s: t.transpose(-3, -2)),
    # every other element of the last dim, from offset 1: a stride of 2 and a storage offset
    Layout("strided", 1, lambda s: s[:-1] + (2 * s[-1],), lambda t, s: t[..., 1::2]),
    # dim 0 expanded from size 1: stride 0, one storage row read by every batch entry
    Layout("expanded", 2, lambda s: (1,) + s[1:], lambda t, s: t.expand(s)),
)}


def fitting_layouts(shape: tuple, allowed=tuple(LAYOUTS)) -> list[str]:
    return [name for name in allowed if len(shape) >= LAYOUTS[name].min_ndim]


# --------------------------------------------------------------------------- inputs

@functools.lru_cache(maxsize=1)
def distinct_pool() -> torch.Tensor:
    """Every bfloat16 value with 2**-12 <= |v| < 2**12 (6144 values), as float64.

    float16, float32 and float64 hold each of them exactly (bfloat16's 8-bit significand
    fits in float16's 11 bits, and the range is inside float16's normal range), so values
    drawn from here without replacement stay distinct in every dtype: no ties.
    """
    import torch
    bits = torch.arange(-2**15, 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    values = bits.to(torch.float64)
    keep = torch.isfinite(values) & (values.abs() >= 2.0**-12) & (values.abs() < 2.0**12)
    return values[keep].unique()


@dataclasses.dataclass(frozen=True)
class Floats:
    """A floating input: its shape, its layout, and whether its values must be distinct."""
    shape: tuple[int, ...]
    layout: str = "contiguous"
    distinct: bool = False

    def make(self, gen: torch.Generator, scale: float) -> torch.Tensor:
        import torch
        storage = LAYOUTS[self.layout].storage(self.shape)
        if self.distinct:
            pool = distinct_pool()
            pick = torch.randperm(len(pool), generator=gen)[:math.prod(storage)]
            return pool[pick].reshape(storage)
        return torch.randn(storage, generator=gen, dtype=torch.float64) * scale

    def view(self, t: torch.Tensor) -> torch.Tensor:
        return LAYOUTS[self.layout].view(t, self.shape)

    def __repr__(self):
        return f"Floats({self.shape}, {self.layout!r}{', distinct=True' if self.distinct else ''})"


@dataclasses.dataclass(frozen=True)
class Index:
    """Integer indices in [0, high); ``special`` (an ignore_index or a padding_idx) takes
    about a third of the entries, never all of them."""
    shape: tuple[int, ...]
    high: int
    special: int | None = None

    def make(self, gen: torch.Generator, scale: float) -> torch.Tensor:
        import torch
        idx = torch.randint(0, max(self.high, 1), self.shape, generator=gen)
        if self.special is not None and idx.numel():
            hit = torch.rand(self.shape, generator=gen) < 0.3
            hit.view(-1)[0] = False
            idx[hit] = self.special
        return idx

    def view(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def __repr__(self):
        return f"Index({self.shape}, high={self.high}{f', special={self.special}' if self.special is not None else ''})"


@dataclasses.dataclass(frozen=True)
class KeyMask:
    """A boolean attention mask (True attends): about a third of the keys masked, never
    every key of a query, whose softmax would then be over nothing."""
    shape: tuple[int, ...]

    def make(self, gen: torch.Generator, scale: float) -> torch.Tensor:
        import torch
        keep = torch.rand(self.shape, generator=gen) >= 0.3
        one = torch.randint(0, self.shape[-1], self.shape[:-1] + (1,), generator=gen)
        return keep.scatter(-1, one, True)

    def view(self, t: torch.Tensor) -> torch.Tensor:
        return t

    def __repr__(self):
        return f"KeyMask({self.shape})"


@dataclasses.dataclass(frozen=True)
class Example:
    """One drawn input set: enough to rebuild every tensor, printed compactly."""
    seed: int
    scale: float
    inputs: tuple = ()   # (name, Floats | Index | KeyMask), made in this order from the seed
    options: tuple = ()  # (name, value), passed to the op as they are

    def make(self) -> dict[str, torch.Tensor]:
        """The inputs' storage tensors on the CPU: float64 for floats, made once per example."""
        import torch
        gen = torch.Generator().manual_seed(self.seed)
        return {name: spec.make(gen, self.scale) for name, spec in self.inputs}

    def arguments(self, made: dict, dtype: torch.dtype, device, wide: bool = False, compute=None) -> dict:
        """The op's keyword arguments on ``device``: floats rounded to ``dtype`` on the CPU
        (and, for the reference, widened back to float64 exactly; or to ``compute``), then
        given their layout."""
        import torch
        args = dict(self.options)
        for name, spec in self.inputs:
            t = made[name]
            if isinstance(spec, Floats):
                t = t.to(dtype).to(device=device, dtype=torch.float64 if wide else (compute or dtype))
            else:
                t = t.to(device)
            args[name] = spec.view(t)
        return args

    def layouts(self) -> list[str]:
        return [spec.layout for _, spec in self.inputs if isinstance(spec, Floats)]

    def __repr__(self):
        parts = [f"seed={self.seed}", f"scale={self.scale}"]
        parts += [f"{name}={value!r}" for name, value in self.inputs + self.options]
        return f"Example({', '.join(parts)})"


# --------------------------------------------------------------------------- drawing helpers

def _sides(draw, count: int, budget: int, choices=SIDES) -> list[int]:
    """``count`` sides whose product stays within ``budget`` (a side that would not fit is not offered)."""
    out = []
    for _ in range(count):
        side = draw(st.sampled_from([s for s in choices if s <= budget]))
        budget //= side
        out.append(side)
    return out


def _zeroed(draw, sizes: list[int], which=None) -> list[int]:
    """``sizes``, in about one example in five with one of them (among ``which``) set to 0."""
    which = range(len(sizes)) if which is None else which
    if which and draw(st.integers(0, 4)) == 4:
        sizes = list(sizes)
        sizes[draw(st.sampled_from(list(which)))] = 0
    return sizes


def _broadcast(draw, shape: tuple) -> tuple:
    """A shape that broadcasts to ``shape``: some sides 1, some leading dims gone."""
    kept = tuple(s if draw(st.booleans()) else 1 for s in shape)
    return kept[draw(st.integers(0, len(kept))):]


# Sums of 2^15 terms or more (a matmul's K at a size edge, a reduction over one) are drawn
# so that they end in many distinct outputs: at least 9 (``_around``'s ``wide``), from
# operands that are not expanded (expanded rows repeat, and so do their sums). The normwise
# rule scales the allowed error by the largest output, and where every output is a sum that
# happens to cancel to near 0, each keeps the float32 error of its 2^16 terms and a correct
# CPU misses float64: F.linear on x (1, 32767) and w (1, 32767), seed 3, scale 4, is 28.06
# in float64 and off by 3.1e-3 in float32 where the rule allows 9.4e-4; on x (2, 65535)
# expanded and w (2, 65535), seed 2, scale 1, the two distinct sums are 9.3 and -10.7, off
# by 5.2e-4 where 4.2e-4 is allowed. At K = 65535 one sum in eight cancels that far on
# this CPU; 9 independent ones together, about once in 10^8.
UNEXPANDED = tuple(name for name in LAYOUTS if name != "expanded")


def _summable(shape: tuple) -> tuple[str, ...]:
    """The layouts for an input that an op works along (softmax, cumsum): all, but not
    expanded when dim 0 is at a size edge. Expanded, the 2^16 terms along it are one value,
    whose running sum leaves float16's range (65504): cumsum of x (65536, 7) expanded,
    seed 0, scale 4, along dim 0 reaches 571392 in float64 and inf in float16, a miss that
    no kernel can help."""
    return tuple(name for name in LAYOUTS if not (name == "expanded" and shape and shape[0] in EDGES))


def _layout(draw, shape: tuple, allowed=tuple(LAYOUTS)) -> str:
    return draw(st.sampled_from(fitting_layouts(shape, allowed)))


def _floats(draw, shape: tuple, allowed=tuple(LAYOUTS), distinct: bool = False) -> Floats:
    return Floats(tuple(shape), _layout(draw, shape, allowed), distinct)


def _example(draw, inputs: dict, **options) -> Example:
    return Example(draw(SEEDS), draw(SCALES), tuple(inputs.items()), tuple(options.items()))


def _options(draw, strategies: dict) -> dict:
    return {name: draw(s) for name, s in strategies.items()}


def _edge(draw) -> int | None:
    """Under the deep profile, in about one example in five, a side at a size edge (EDGES);
    otherwise None. Under any other profile it draws nothing, so a derandomized ci run
    makes the same choices, and gets the same examples, as before edges existed."""
    if not hypothesis_profiles.deep_loaded() or draw(st.integers(0, 4)) < 4:
        return None
    return draw(st.sampled_from(EDGES))


def _around(draw, edge: int, at: str, tensors: tuple[str, ...], wide: str = "") -> dict[str, int]:
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


def _spell(sides: dict[str, int], letters: str) -> tuple[int, ...]:
    return tuple(sides[n] for n in letters)


@st.composite
def shapes(draw, min_ndim: int = 1, max_ndim: int = 4, long: bool = True, budget: int = MAX_ELEMENTS,
           zero: bool = True, edges: bool = False) -> tuple:
    """A shape: the last dim from SIDES or LONG, the others from SIDES within ``budget``
    elements, and in one example in five one side 0. With ``edges``, under the deep profile,
    in one example in five instead: any one side at a size edge, the others from SIDES
    within EDGE_ELEMENTS, none 0."""
    if edges and (edge := _edge(draw)) is not None:
        ndim = draw(st.integers(max(min_ndim, 1), max_ndim))
        others = _sides(draw, ndim - 1, EDGE_ELEMENTS // edge)
        at = draw(st.integers(0, ndim - 1))
        return tuple(others[:at] + [edge] + others[at:])
    ndim = draw(st.integers(min_ndim, max_ndim))
    if ndim == 0:
        return ()
    last = draw(st.sampled_from([s for s in SIDES + (LONG if long else ()) if s <= budget]))
    dims = _sides(draw, ndim - 1, budget // last) + [last]
    return tuple(_zeroed(draw, dims) if zero else dims)


# --------------------------------------------------------------------------- examples per op family

@st.composite
def pointwise(draw, **options) -> Example:
    shape = draw(shapes())
    return _example(draw, {"x": _floats(draw, shape)}, **_options(draw, options))


@st.composite
def along_a_dim(draw, **options) -> Example:
    """One input and a dim to work along (softmax, log_softmax, cumsum); under the deep
    profile the dim, or another, may be at a size edge."""
    shape = draw(shapes(edges=True))
    dim = draw(st.integers(-len(shape), len(shape) - 1))
    return _example(draw, {"x": _floats(draw, shape, _summable(shape))}, dim=dim, **_options(draw, options))


@st.composite
def reductions(draw, **options) -> Example:
    """One input and the dims to reduce: all (None), one, or several; keepdim or not.
    Under the deep profile a side may be at a size edge (_reductions_at_an_edge)."""
    if (edge := _edge(draw)) is not None:
        return _reductions_at_an_edge(draw, edge, options)
    shape = draw(shapes())
    dims = draw(st.none() | st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True))
    dim = None if dims is None else dims[0] if len(dims) == 1 else tuple(dims)
    return _example(draw, {"x": _floats(draw, shape)}, dim=dim, keepdim=draw(st.booleans()),
                    **_options(draw, options))


def _reductions_at_an_edge(draw, edge: int, options: dict) -> Example:
    """x of 2 to 4 dims, not expanded (UNEXPANDED): one at ``edge``, one wide (13 or 31),
    the rest from SIDES within EDGE_ELEMENTS. Either the edge is reduced (with other dims,
    never the wide one) or it is kept (any others reduced). So a sum over the edge ends in
    13 distinct outputs or more, and no full reduction is drawn, whose lone sum may cancel
    (bfloat16 sum of x (65535,) strided, seed 0: 7.9 in float64, off by 0.56 where the
    rule allows 0.45)."""
    wide = draw(st.sampled_from([s for s in SIDES if s >= 13 and s * edge <= EDGE_ELEMENTS]))
    rest = _sides(draw, draw(st.integers(0, 2)), EDGE_ELEMENTS // (edge * wide))
    shape = tuple(draw(st.permutations([edge, wide, *rest])))
    at, kept = shape.index(edge), shape.index(wide)
    if draw(st.booleans()):
        others = [d for d in range(len(shape)) if d not in (at, kept)]
        dims = [at, *draw(st.lists(st.sampled_from(others), unique=True))] if others else [at]
    else:
        dims = draw(st.lists(st.sampled_from([d for d in range(len(shape)) if d != at]), min_size=1, unique=True))
    dim = dims[0] if len(dims) == 1 else tuple(dims)
    return _example(draw, {"x": _floats(draw, shape, UNEXPANDED)}, dim=dim, keepdim=draw(st.booleans()),
                    **_options(draw, options))


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
    shape = tuple(_zeroed(draw, list(shape), zeroable))
    allowed = tuple(name for name in LAYOUTS if not (along_0 and name == "expanded"))
    if with_k:
        options["k"] = st.integers(0, shape[dim])
    return _example(draw, {"x": _floats(draw, shape, allowed, distinct=True)}, dim=dim, **_options(draw, options))


@st.composite
def linear(draw) -> Example:
    """x (*batch, K) through a weight (N, K), with a bias or not; K may be a few thousand.
    Under the deep profile N, K or the leading dim of a 3-D x may be at a size edge."""
    if (edge := _edge(draw)) is not None:
        return _linear_at_an_edge(draw, edge)
    k = draw(st.sampled_from(SIDES + LONG))
    batch = _sides(draw, draw(st.integers(0, 2)), MAX_ELEMENTS // k)
    n, = _sides(draw, 1, MAX_ELEMENTS // (k * math.prod(batch)))
    *batch, n, k = _zeroed(draw, batch + [n, k])
    inputs = {"x": _floats(draw, (*batch, k)), "w": _floats(draw, (n, k))}
    if draw(st.booleans()):
        inputs["b"] = _floats(draw, (n,))
    return _example(draw, inputs)


def _linear_at_an_edge(draw, edge: int) -> Example:
    """out_features N (pytorch#116769), in_features K, or B, the leading dim of a 3-D x
    (pytorch#189495, wrong with a bias only), at ``edge``; x is (B, T, K), (T, K) or (K,).
    With K at the edge x is not 1-D, and neither x nor w expanded (UNEXPANDED)."""
    at = draw(st.sampled_from("NKB"))
    batch = "BT"[3 - (3 if at == "B" else draw(st.integers(2 if at == "K" else 1, 3))):]
    sums = at == "K"
    sides = _around(draw, edge, at, (batch + "K", "NK", batch + "N"), wide=batch + "N" if sums else "")
    allowed = UNEXPANDED if sums else tuple(LAYOUTS)
    inputs = {"x": _floats(draw, _spell(sides, batch + "K"), allowed), "w": _floats(draw, _spell(sides, "NK"), allowed)}
    if draw(st.booleans()):
        inputs["b"] = _floats(draw, _spell(sides, "N"))
    return _example(draw, inputs)


@st.composite
def matmuls(draw, batch_dims=(0, 2), broadcast: bool = True) -> Example:
    """a (*batch_a, M, K) @ b (*batch_b, K, N), the batches broadcasting against each other.
    Under the deep profile M, N, K or a batch dim may be at a size edge."""
    if (edge := _edge(draw)) is not None:
        return _matmuls_at_an_edge(draw, edge, batch_dims, broadcast)
    k = draw(st.sampled_from(SIDES + LONG))
    batch = _sides(draw, draw(st.integers(*batch_dims)), MAX_ELEMENTS // k)
    m, n = _sides(draw, 2, MAX_ELEMENTS // (k * math.prod(batch)))
    m, n, k = _zeroed(draw, [m, n, k])
    batch_a = _broadcast(draw, tuple(batch)) if broadcast else tuple(batch)
    batch_b = _broadcast(draw, tuple(batch)) if broadcast else tuple(batch)
    return _example(draw, {"a": _floats(draw, (*batch_a, m, k)), "b": _floats(draw, (*batch_b, k, n))})


def _matmuls_at_an_edge(draw, edge: int, batch_dims: tuple, broadcast: bool) -> Example:
    """M, N (pytorch#111634: N = 32769), K (pytorch#195163: bmm with K >= 32767) or the
    first batch dim at ``edge``; with K at the edge, neither operand expanded (UNEXPANDED)."""
    at = draw(st.sampled_from("MNK" + ("B" if batch_dims[1] else "")))
    batch = "BC"[:draw(st.integers(max(batch_dims[0], int(at == "B")), batch_dims[1]))]
    sums = at == "K"
    # M and N first: with K at the edge they take their 3 or more, whatever the batch
    # sides get (_broadcast may leave both operands a batch of 1)
    sides = _around(draw, edge, at, ("MN" + batch, "MK" + batch, "KN" + batch), wide="MN" + batch if sums else "")
    batch_a = _broadcast(draw, _spell(sides, batch)) if broadcast else _spell(sides, batch)
    batch_b = _broadcast(draw, _spell(sides, batch)) if broadcast else _spell(sides, batch)
    allowed = UNEXPANDED if sums else tuple(LAYOUTS)
    return _example(draw, {"a": _floats(draw, (*batch_a, *_spell(sides, "MK")), allowed),
                           "b": _floats(draw, (*batch_b, *_spell(sides, "KN")), allowed)})


@st.composite
def baddbmm(draw) -> Example:
    """beta * input + alpha * (b1 @ b2), batched; input broadcasts to (B, M, N). Under the
    deep profile B, M, N or K may be at a size edge (pytorch#195163 names baddbmm too)."""
    allowed = tuple(LAYOUTS)
    if (edge := _edge(draw)) is not None:
        at = draw(st.sampled_from("BMNK"))
        sides = _around(draw, edge, at, ("BMN", "BMK", "BKN"), wide="BMN" if at == "K" else "")
        bsz, m, n, k = _spell(sides, "BMNK")
        allowed = UNEXPANDED if at == "K" else allowed
    else:
        k = draw(st.sampled_from(SIDES + LONG))
        bsz, m, n = _sides(draw, 3, MAX_ELEMENTS // k)
        bsz, m, n, k = _zeroed(draw, [bsz, m, n, k])
    inputs = {"input": _floats(draw, _broadcast(draw, (bsz, m, n))),
              "b1": _floats(draw, (bsz, m, k), allowed), "b2": _floats(draw, (bsz, k, n), allowed)}
    return _example(draw, inputs, beta=draw(st.sampled_from((1.0, 0.5, 0.0))),
                    alpha=draw(st.sampled_from((1.0, 0.5))))


@st.composite
def layer_norm(draw) -> Example:
    """Normalized over the last one or two dims (never zero-size: a mean over nothing),
    with or without an affine weight and bias. Under the deep profile a side may be at a
    size edge (_layer_norm_at_an_edge)."""
    if (edge := _edge(draw)) is not None:
        return _layer_norm_at_an_edge(draw, edge)
    shape = draw(shapes(max_ndim=3, zero=False))
    normalized = shape[-draw(st.integers(1, min(2, len(shape)))):]
    batch = _zeroed(draw, list(shape[:len(shape) - len(normalized)]))
    shape = (*batch, *normalized)
    inputs = {"x": _floats(draw, shape)}
    if draw(st.booleans()):
        inputs["weight"] = _floats(draw, normalized)
        inputs["bias"] = _floats(draw, normalized)
    return _example(draw, inputs, normalized_shape=normalized)


def _layer_norm_at_an_edge(draw, edge: int) -> Example:
    """The normalized dim at ``edge`` (up to 31 rows), or ``edge`` rows of 7 to 31 elements
    each. Not rows of 1 to 3: a row of 2 whose two values nearly agree has a variance near
    0, where a correct float32 kernel misses float64 by more than the table allows (x
    (65536, 13, 2) at scale 4, seed 19860: off by 1.5e-4, allowed 1e-4), and among 2^16
    rows one such row is likely."""
    if draw(st.booleans()):
        normalized = (edge,)
        batch = _sides(draw, draw(st.integers(0, 2)), EDGE_ELEMENTS // edge)
    else:
        normalized = (draw(st.sampled_from([s for s in SIDES if s >= 7 and s * edge <= EDGE_ELEMENTS])),)
        batch = [edge]
    inputs = {"x": _floats(draw, (*batch, *normalized))}
    if draw(st.booleans()):
        inputs["weight"] = _floats(draw, normalized)
        inputs["bias"] = _floats(draw, normalized)
    return _example(draw, inputs, normalized_shape=normalized)


@st.composite
def attention(draw) -> Example:
    """q (B, H, L, E), k and v (B, H, S, E); no mask, a boolean padding mask (per key, or per
    query and key), or is_causal. Dropout is off: its random numbers differ between devices."""
    e = draw(st.sampled_from((1, 8, 13, 64)))
    bsz, heads = _sides(draw, 2, 8, choices=(1, 2, 3))
    q_len, k_len = _sides(draw, 2, MAX_ELEMENTS // (bsz * heads * e), choices=SIDES + (64,))
    bsz, = _zeroed(draw, [bsz])
    inputs = {"query": _floats(draw, (bsz, heads, q_len, e)), "key": _floats(draw, (bsz, heads, k_len, e)),
              "value": _floats(draw, (bsz, heads, k_len, e))}
    mask = draw(st.sampled_from(("none", "padding", "causal")))
    if mask == "padding":
        inputs["attn_mask"] = KeyMask((bsz, 1, draw(st.sampled_from((1, q_len))), k_len))
    return _example(draw, inputs, is_causal=mask == "causal")


@st.composite
def cross_entropy(draw) -> Example:
    """Logits (N, C) or (N, C, T) with C up to a vocabulary's few thousand (under the deep
    profile also a vocabulary at a size edge, like a 32k or 64k tokenizer's, within
    EDGE_ELEMENTS); targets with ignore_index (-100) entries, never all; label smoothing 0
    or 0.1."""
    edge = _edge(draw)
    budget = MAX_ELEMENTS if edge is None else EDGE_ELEMENTS
    c = draw(st.sampled_from(SIDES + LONG)) if edge is None else edge
    extra = _sides(draw, draw(st.integers(0, 1)), budget // c)
    n, = _sides(draw, 1, budget // (c * math.prod(extra)))
    inputs = {"logits": _floats(draw, (n, c, *extra)), "target": Index((n, *extra), c, special=-100)}
    return _example(draw, inputs, label_smoothing=draw(st.sampled_from((0.0, 0.1))),
                    reduction=draw(st.sampled_from(("mean", "sum", "none"))))


@st.composite
def embedding(draw) -> Example:
    """A (V, D) table looked up by up to TOKENS indices that include padding_idx (0 or V-1,
    or none), and the gradient that flows back into the table (with V = 1, every token's).
    Under the deep profile V may be at a size edge (D then within EDGE_ELEMENTS)."""
    edge = _edge(draw)
    vocab = draw(st.sampled_from(SIDES + LONG)) if edge is None else edge
    dim, = _sides(draw, 1, (MAX_ELEMENTS if edge is None else EDGE_ELEMENTS) // vocab)
    idx_shape = draw(shapes(max_ndim=2, long=False, budget=min(TOKENS, MAX_ELEMENTS // dim)))
    padding_idx = draw(st.sampled_from((None, 0, vocab - 1)))
    inputs = {"weight": _floats(draw, (vocab, dim)), "indices": Index(idx_shape, vocab, special=padding_idx),
              "grad": Floats((*idx_shape, dim))}
    return _example(draw, inputs, padding_idx=padding_idx)


@st.composite
def conv1d(draw) -> Example:
    """x (N, C_in, L) with L up to a few thousand, a kernel of 1, 3 or 5, stride, padding,
    dilation and groups; the output length is at least 1. Under the deep profile C_out may
    be at a size edge."""
    if (edge := _edge(draw)) is not None:
        return _conv1d_at_an_edge(draw, edge)
    groups = draw(st.sampled_from((1, 2, 3)))
    c_in, c_out = (groups * s for s in _sides(draw, 2, 8, choices=(1, 2, 3)))
    length = draw(st.sampled_from([s for s in SIDES + (2048,) if s * c_in <= MAX_ELEMENTS]))
    stride, padding, dilation = (draw(st.sampled_from(v)) for v in ((1, 2), (0, 1, 2), (1, 2)))
    size = draw(st.sampled_from([s for s in (1, 3, 5) if dilation * (s - 1) < length + 2 * padding]))
    batch, = _zeroed(draw, _sides(draw, 1, MAX_ELEMENTS // (c_in * length)))
    inputs = {"x": _floats(draw, (batch, c_in, length)), "weight": _floats(draw, (c_out, c_in // groups, size))}
    if draw(st.booleans()):
        inputs["bias"] = _floats(draw, (c_out,))
    return _example(draw, inputs, stride=stride, padding=padding, dilation=dilation, groups=groups)


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
    batch, = _sides(draw, 1, EDGE_ELEMENTS // ((length + 4) * edge))
    inputs = {"x": _floats(draw, (batch, c_in, length)), "weight": _floats(draw, (edge, c_in, size))}
    if draw(st.booleans()):
        inputs["bias"] = _floats(draw, (edge,))
    return _example(draw, inputs, stride=stride, padding=padding, dilation=dilation, groups=1)


@st.composite
def index_select(draw) -> Example:
    shape = draw(shapes(max_ndim=3))
    dim = draw(st.integers(0, len(shape) - 1))
    count = draw(st.sampled_from(SIDES)) if shape[dim] else 0
    return _example(draw, {"x": _floats(draw, shape), "index": Index((count,), shape[dim])}, dim=dim)


@st.composite
def gather(draw, scatter: bool = False) -> Example:
    """x, a dim, and an index no larger than x off that dim, its values valid for x's dim.
    With ``scatter``: a src of the index's shape, added into x at the index (duplicates
    accumulate)."""
    shape = draw(shapes(max_ndim=3))
    dim = draw(st.integers(0, len(shape) - 1))
    idx_shape = tuple((draw(st.sampled_from(SIDES)) if shape[dim] else 0) if d == dim
                      else draw(st.integers(min(1, s), s)) for d, s in enumerate(shape))
    inputs = {"x": _floats(draw, shape), "index": Index(idx_shape, shape[dim])}
    if scatter:
        inputs["src"] = _floats(draw, idx_shape)
    return _example(draw, inputs, dim=dim)


# --------------------------------------------------------------------------- checks and their dtypes

@dataclasses.dataclass(frozen=True)
class DtypeCase:
    """A property in one dtype, with the targets that run it (see the ``cases`` marker)."""
    subject: str
    dtype: str
    targets: tuple[str, ...]

    @property
    def variant(self) -> str:  # parity/softmax/float32/property, beside the op sweep's .../float32/forward
        return f"{self.dtype}/property"

    @property
    def id(self) -> str:
        return self.dtype


def dtype_cases(subject: str, cpu: tuple[str, ...] = FLOAT_DTYPES) -> list[DtypeCase]:
    """float32 on every target; float16 and bfloat16 on accelerators, and on the CPU where
    ``cpu`` names them (there they are judged against float64)."""
    from harness.core.devices import STAND_INS  # a registered stand-in is an accelerator here
    return [DtypeCase(subject, dtype, tuple(t for t in TARGETS + tuple(STAND_INS)
                                            if dtype == "float32" or t != "cpu" or dtype in cpu))
            for dtype in FLOAT_DTYPES]


# --------------------------------------------------------------------------- the runner

def _named(out) -> dict[str, torch.Tensor]:
    return out if isinstance(out, dict) else {"out": out}


def _ref_error(verdict: dict) -> float:
    """A side's error against float64: its largest difference, or inf when it has NaN or
    inf where float64 has a number (or the reverse), which max_abs_err, over finite
    elements, does not show."""
    non_finite = not verdict["ok"] and verdict["margin"] <= 1
    return math.inf if non_finite else verdict["max_abs_err"]


def _describe(example: Example, args: dict) -> str:
    """Each input as the op saw it: its layout, shape, strides and storage offset."""
    import torch
    layouts = {name: spec.layout for name, spec in example.inputs if isinstance(spec, Floats)}
    return "; ".join(f"{name} ({layouts.get(name, 'integer')}): shape {tuple(t.shape)} stride {t.stride()} "
                     f"offset {t.storage_offset()}" for name, t in args.items() if isinstance(t, torch.Tensor))


class Tally:
    """One property check on one target and dtype, over all its examples.

    hypothesis calls the test body once per example with the same function-scoped
    fixtures, so one Tally (and the record it writes) sees every example: after each one
    the record holds the worst error and margin so far, the layouts met and the worst
    example, whether the check ends in a pass or a failure.
    """

    def __init__(self, record, dtype: str, target: str, device):
        import torch
        from harness.core import devices
        self.record, self.dtype, self.target, self.device = record, dtype, target, device
        self.torch_dtype = getattr(torch, dtype)
        self.kind, self.stand_in = devices.kind_of(target), devices.stand_in(target)
        self.on_target = target != "cpu"
        self.reference = "float64"  # on an accelerator the CPU's own error is the yardstick
        self.examples = 0
        self.worst = {"max_abs_err": 0.0, "max_rel_err": 0.0, "margin": 0.0}
        self.ref_errs = {"target_ref_err": 0.0, "cpu_ref_err": 0.0}
        self.layouts: collections.Counter = collections.Counter()
        self.worst_example = ""
        record.category = "parity"

    def check(self, op: str | dict, fn: Callable, example: Example, normwise: bool = False) -> None:
        """Run ``fn`` on the example and judge it; AssertionError names the output that is off.

        ``op`` names the op in the tolerance table, or maps each output to its op where
        they differ (a gradient is its backward op's result).

        On the CPU target the op in the dtype is judged against float64 on the same
        (rounded) values, elementwise or, for ops whose low-precision error scales with
        the output's magnitude rather than each element's, ``normwise`` (see
        harness.parity.accuracy). On an accelerator it is judged by its accuracy against float64,
        with the CPU in the same dtype as the yardstick (accuracy.compare_accuracy: the same
        rules, or no less accurate than the CPU); both sides' errors against float64 are
        recorded, and a failure names its cause (harness.parity.causes).
        """
        made = example.make()
        ref = _named(fn(**example.arguments(made, self.torch_dtype, "cpu", wide=True)))
        cpu_args = example.arguments(made, self.torch_dtype, "cpu")
        cpu = _named(fn(**cpu_args))
        if not self.on_target:
            note(f"inputs on cpu: {_describe(example, cpu_args)}")
            verdicts = self._compare(op, cpu, ref, normwise)
        else:
            target_args = example.arguments(made, self.torch_dtype, self.device)
            note(f"inputs on {self.target}: {_describe(example, target_args)}")
            out = self._on_target(fn, target_args, cpu, ref)
            verdicts = self._accuracy(op, out, cpu, ref, normwise)
            for key, side in (("target_ref_err", out), ("cpu_ref_err", cpu)):
                errs = self._compare(op, side, ref, normwise=True)
                self.ref_errs[key] = max(self.ref_errs[key], *(_ref_error(v) for v in errs.values()))
            if not all(v["ok"] for v in verdicts.values()):
                self._diagnose(op, fn, example, made, cpu, ref, normwise, verdicts)
        self._tally(example, verdicts)
        for name, v in verdicts.items():
            cause = f"{v['cause_what']}; {v['switch']}: " if v.get("cause") else ""
            assert v["ok"], (
                f"{v['op']} {self.dtype} on {self.target}: output {name!r} is off against {self.reference}: "
                f"{cause}max_abs_err={v['max_abs_err']:.3g}, margin={v['margin']:.3g} at rtol={v['rtol']:.3g}, "
                f"atol={v['atol']:.3g} ({v['rule']}; {v['source']}): {v['reason']}")

    def _on_target(self, fn: Callable, target_args: dict, cpu: dict, ref: dict) -> dict:
        """The op on the target; a stand-in computes on the CPU in its context and may replace it."""
        if self.stand_in:
            rounded = {k: v.to(self.torch_dtype) if v.is_floating_point() else v for k, v in ref.items()}
            out = self.stand_in.run(lambda: _named(fn(**target_args)), cpu, rounded)
        else:
            out = _named(fn(**target_args))
        return {k: v.cpu() for k, v in out.items()}

    def _accuracy(self, op: str | dict, out: dict, cpu: dict, ref: dict, normwise: bool) -> dict[str, dict]:
        from harness.parity import accuracy
        verdicts = {}
        for name, a in out.items():
            op_name = op[name] if isinstance(op, dict) else op
            tol = tolerances.tolerance(op_name, str(a.dtype).removeprefix("torch."))
            verdicts[name] = {**accuracy.compare_accuracy(a, cpu[name], ref[name], tol, self.torch_dtype,
                                                        tolerances.ACCURACY_FACTOR, tolerances.ACCURACY_ULPS,
                                                        normwise=normwise),
                              "op": op_name, "source": f"{tol.source}; {tolerances.ACCURACY_SOURCE}"}
        return verdicts

    def _diagnose(self, op, fn: Callable, example: Example, made: dict, cpu: dict, ref: dict, normwise: bool,
                  verdicts: dict) -> None:
        """Rerun the failing example on the target in differential ways (harness.parity.causes)."""
        import torch
        from harness.core import devices
        from harness.parity import causes
        first = self._on_target(fn, example.arguments(made, self.torch_dtype, self.device), cpu, ref)

        def passes(out: dict) -> bool:
            return all(v["ok"] for v in self._accuracy(op, out, cpu, ref, normwise).values())

        def rerun(trial: str) -> bool | None:
            if trial == "nondeterministic":
                again = self._on_target(fn, example.arguments(made, self.torch_dtype, self.device), cpu, ref)
                return any(not torch.equal(again[k], first[k]) for k in first)
            if trial == "tf32":
                with devices.tf32(False):
                    return passes(self._on_target(fn, example.arguments(made, self.torch_dtype, self.device),
                                                  cpu, ref))
            if trial == "reduced-precision":
                wide = self._on_target(fn, example.arguments(made, self.torch_dtype, self.device,
                                                             compute=torch.float32), cpu, ref)
                return passes({k: v.to(self.torch_dtype) if v.is_floating_point() else v for k, v in wide.items()})
            return None
        found = causes.describe(causes.diagnose(self.kind, self.dtype, rerun), self.kind, self.dtype)
        for v in verdicts.values():
            if not v["ok"]:
                v.update(found)

    def _compare(self, op: str | dict, actual: dict, expected: dict, normwise: bool) -> dict[str, dict]:
        from harness.parity import accuracy
        verdicts = {}
        for name, a in actual.items():
            op_name = op[name] if isinstance(op, dict) else op
            tol = tolerances.tolerance(op_name, str(a.dtype).removeprefix("torch."))
            verdicts[name] = {**accuracy.compare(a, expected[name], tol, normwise=normwise), "op": op_name,
                              "source": tol.source}
        return verdicts

    def _tally(self, example: Example, verdicts: dict) -> None:
        self.examples += 1
        self.layouts.update(set(example.layouts()))
        # the tolerance on record is the one of the output that came closest to failing
        name, binding = max(verdicts.items(), key=lambda item: item[1]["margin"])
        if self.examples == 1 or binding["margin"] > self.worst["margin"]:
            self.worst_example = repr(example)
            self.record.metric(rtol=binding["rtol"], atol=binding["atol"], tolerance_source=binding["source"],
                               rule=binding["rule"], worst_output=name)
        for key in self.worst:
            self.worst[key] = max(self.worst[key], *(v[key] for v in verdicts.values()))
        self.record.metric(**self.worst, reference=self.reference, dtype=self.dtype, examples=self.examples,
                           layouts=dict(sorted(self.layouts.items())), worst_example=self.worst_example)
        if self.on_target:
            self.record.metric(**self.ref_errs, yardstick="cpu")
            causes_seen = {v["cause"]: v for v in verdicts.values() if v.get("cause")}
            for v in causes_seen.values():
                self.record.metric(cause=v["cause"], cause_what=v["cause_what"], switch=v["switch"])
