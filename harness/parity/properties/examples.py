"""What one drawn property example is: the memory layouts a view may take (LAYOUTS), the
specs of its inputs (Floats, Index, KeyMask) and Example, the small printable description
(a seed, each input's shape and layout, the op's options) from which its tensors are made.

An example's tensors are made on the CPU from the seed (float64, rounded to the dtype under
test), moved to each device, and only there given their layout, so the target and the CPU
see the same values through the same strides. torch is imported where it is used.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch


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
    # a 4-D tensor in channels_last memory (N, H, W, C stored, seen as N, C, H, W): what
    # x.to(memory_format=torch.channels_last) gives, the layout vision kernels prefer
    Layout("channels_last", 4, lambda s: (s[0], s[2], s[3], s[1]), lambda t, s: t.permute(0, 3, 1, 2)),
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
    low: float | None = None   # values low + |N(0, scale)|: a function defined from there on (lgamma's poles)

    def make(self, gen: torch.Generator, scale: float) -> torch.Tensor:
        import torch
        storage = LAYOUTS[self.layout].storage(self.shape)
        if self.distinct:
            pool = distinct_pool()
            pick = torch.randperm(len(pool), generator=gen)[:math.prod(storage)]
            return pool[pick].reshape(storage)
        values = torch.randn(storage, generator=gen, dtype=torch.float64) * scale
        return values if self.low is None else self.low + values.abs()

    def view(self, t: torch.Tensor) -> torch.Tensor:
        return LAYOUTS[self.layout].view(t, self.shape)

    def __repr__(self):
        return (f"Floats({self.shape}, {self.layout!r}{', distinct=True' if self.distinct else ''}"
                f"{f', low={self.low}' if self.low is not None else ''})")


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

    def arguments(self, made: dict, dtype: torch.dtype, device, wide: bool = False, compute=None,
                  contiguous: bool = False) -> dict:
        """The op's keyword arguments on ``device``: floats rounded to ``dtype`` on the CPU
        (and, for the reference, widened back to float64 exactly; or to ``compute``), then
        given their layout; with ``contiguous``, the view is copied into fresh contiguous
        memory: the same values through another code path (how the reference is made, so a
        kernel that ignores strides cannot agree with it)."""
        import torch
        args = dict(self.options)
        for name, spec in self.inputs:
            t = made[name]
            if isinstance(spec, Floats):
                t = t.to(dtype).to(device=device, dtype=torch.float64 if wide else (compute or dtype))
            else:
                t = t.to(device)
            t = spec.view(t)
            args[name] = t.contiguous() if contiguous else t
        return args

    def layouts(self) -> list[str]:
        return [spec.layout for _, spec in self.inputs if isinstance(spec, Floats)]

    def __repr__(self):
        parts = [f"seed={self.seed}", f"scale={self.scale}"]
        parts += [f"{name}={value!r}" for name, value in self.inputs + self.options]
        return f"Example({', '.join(parts)})"

