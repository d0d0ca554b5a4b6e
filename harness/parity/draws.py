"""The sizes a property example is drawn from, and the helpers that draw shapes and layouts.

SIDES and LONG for every profile; the size EDGES (2^15 and 2^16, give or take one) under
the deep profile only (hypothesis_profiles.deep_loaded), each tensor then within
EDGE_ELEMENTS. The per-op strategies (harness.parity.op_examples) are built from these.
"""
from __future__ import annotations

import math

from hypothesis import strategies as st

from harness.parity import hypothesis_profiles
from harness.parity.examples import LAYOUTS, Example, Floats, fitting_layouts

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
    if not hypothesis_profiles.deep_loaded() or draw(st.integers(0, 4)) < 4:
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

