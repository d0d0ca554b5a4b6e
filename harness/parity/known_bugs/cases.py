"""Known accelerator bugs: the wrong results users reported, as checks anyone can run.

OpInfo's samples are a few elements and the property checks draw sides up to a few
thousand. The silent wrong results users report against PyTorch's MPS backend live
elsewhere: a dimension just past 2^15 or 2^16, a result that depends on what the
allocator held before, a reduction that goes wrong when called in quick succession. Each
case here is one such report, confirmed in PyTorch's issue tracker (its number, title,
and the versions it names), rebuilt at the edge that exposes it.

Two checks per case and dtype, in the parity suite (suites/parity/test_known_bugs.py):

  parity/<case>/<dtype>/known-bug    the case's samples on the target against the float64
                                     reference, judged by the parity rules (on an
                                     accelerator: as accurate as the CPU, harness.parity.
                                     numerics.accuracy.compare_accuracy; on the CPU: the cpu target's rules
                                     against float64). Each sample runs once, once more after
                                     a dirty allocator cache (freed blocks full of NaN: a
                                     kernel that reads past its operands meets them), and for
                                     a case reported wrong "in rapid succession" RAPID_RUNS
                                     times back to back; the worst run counts. In full
                                     float32: TF32 off, since TF32 is a precision setting the
                                     op parity suite judges, and here a difference must be
                                     the bug. A target that raises where the CPU computes
                                     fails too ("raises"): with the MPS fallback on, an op
                                     should run, slowly, not stop.
  parity/<case>/<dtype>/repeatable   the same op on the same inputs, run back to back and
                                     again after a dirty and after an emptied cache, must give
                                     the first run's bits on the target. A difference is its
                                     own finding ("unrepeatable"): no tolerance excuses a
                                     deterministic op that changes its mind.

Sizes (harness.parity.known_bugs.target): a case's first size is its ``edge``, the smallest
that still crosses the reported edge (a side of 2^15 + 1, not a side of a million), or
``small`` where the report names no edge; it is cheap on a 2-core CPU. Larger sizes go up to the reported shape. The CPU
and the stand-ins run the first size; an accelerator the largest whose working set fits
MEMORY_FRACTION of its memory reading (harness.env.devices.memory_of) and of the host's RAM
(the CPU side and the float64 reference live there), and whose output stays within
JUDGED_MAX elements.

This module holds the cases: their shape (BugCase, Size, Source), the tables (``CASES``; and
``ATTENTION_CASES``, the reports against an accelerator's attention kernels, which
suites/parity/test_attention_known_bugs.py runs beside the attention family) and the checks
made of them (``checks``). harness.parity.known_bugs.target runs a case on a
target at the size it affords; harness.parity.known_bugs.check runs and judges the two
kinds of check.

The table (``CASES``): one row per wrong result reported against an accelerator backend.
Each was read in PyTorch's issue tracker (the number, the title as the tracker has it, the
versions the report names, and the fix where the thread shows one). The shapes are the
report's; ``edge`` is the smallest size that still crosses the reported edge, which the
CPU and the stand-ins run (seconds on a 2-core CPU); the report's full shape runs on an
accelerator whose memory allows it (harness.parity.known_bugs.target.choose_size).

Leads read and left out, and why (the closing note of the issue that built this has more):
  #123151  llama-fast's stories15M gives gibberish on MPS: the thread names no op, shape or
           version (the Llama models are in the model parity suite); its likely relative
           #92311 (argmax) is a case
  #123716  eye(32000) @ eye(32000) gives zeros: 4 GiB a matrix, 8 GiB for the float64
           reference; no smaller edge is known
  #197636  bmm past 2**32 elements: 17 GiB an operand
  #141909  an output past 2**32 elements raises: 21 GiB of output

torch is imported where it is used: the suites collect this table without loading torch.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from harness.core.records import RecordKind
from harness.env import devices

ISSUES = "https://github.com/pytorch/pytorch/issues/"


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a case comes from: the PyTorch issue, as its tracker has it."""
    issue: int
    title: str
    affected: str            # the versions and machines the report names
    fixed: str = ""          # the fix, where the tracker shows one; "" = open or not known
    confirmed: str = ""      # what of the report was read in the tracker

    @property
    def url(self) -> str:
        return f"{ISSUES}{self.issue}"

    @property
    def label(self) -> str:
        return f"pytorch#{self.issue}"


@dataclasses.dataclass(frozen=True)
class Size:
    name: str                # "edge", "reported", ...
    dims: dict               # what the case's ``make`` takes
    shape: str               # in words, for the record


@dataclasses.dataclass(frozen=True)
class BugCase:
    """One reported wrong result as a check.

    ``make(dims)`` gives the samples: each a dict of named float64 (or integer) CPU tensors
    and plain values; ``fn(**sample)`` computes the op on them wherever they are. The
    first sample is the report's own inputs where it gives them (zeros against ones ...),
    the others random values of the same shapes, so a kernel that is only right for the
    report's values is still caught."""
    name: str
    source: Source
    op: str                  # the op's name in the tolerance table (harness.parity.numerics.tolerances)
    what: str                # the wrong result reported, in words
    make: Callable[[dict], list[dict]]
    fn: Callable
    sizes: tuple[Size, ...]  # the edge first, then larger ones for accelerators
    footprint: Callable[[dict], tuple[int, int]]   # elements of the inputs and of the output at dims (largest sample)
    dtypes: tuple[str, ...] = ("float32",)
    normwise: bool = True    # a sum of many terms: judged against the output's magnitude (harness.parity.numerics.accuracy)
    repeatable: bool = True  # a deterministic op: the repeatability check applies
    rapid: bool = False      # reported wrong intermittently in rapid succession: judge RAPID_RUNS runs

    @property
    def subject(self) -> str:
        return self.name


@dataclasses.dataclass(frozen=True)
class Check:
    """A case in one dtype and one kind of check, with the targets that run it (the ``cases`` marker)."""
    case: BugCase
    dtype: str
    kind: str                # RecordKind.KNOWN_BUG | RecordKind.REPEATABLE
    targets: tuple[str, ...]

    @property
    def subject(self) -> str:
        return self.case.name

    @property
    def variant(self) -> str:
        return f"{self.dtype}/{self.kind}"

    @property
    def id(self) -> str:
        return f"{self.case.name}-{self.dtype}"


# --------------------------------------------------------------------------- the table


def _gen(seed: int):
    import torch
    return torch.Generator().manual_seed(seed)


def _rand(*shape, seed: int = 0, low: float = 0.0, high: float = 1.0):
    import torch
    return torch.rand(*shape, generator=_gen(seed), dtype=torch.float64) * (high - low) + low


def _randn(*shape, seed: int = 0):
    import torch
    return torch.randn(*shape, generator=_gen(seed), dtype=torch.float64)


# --------------------------------------------------------------------------- the ops

def matmul(a, b):
    return a @ b


def linear(x, w, b=None):
    import torch.nn.functional as F
    return F.linear(x, w, b)


def gram(a):
    """A transpose view on the left, as a Gram or Hessian matrix is built."""
    return a.T @ a


def bmm(a, b):
    import torch
    return torch.bmm(a, b)


def irfft_of_rfft(signal, n: int):
    import torch
    return torch.fft.irfft(torch.fft.rfft(signal), n=n)


def conv1d(x, w, b):
    import torch.nn.functional as F
    return F.conv1d(x, w, b, padding=1)


def argmax_dim1(x):
    return x.argmax(dim=1)


def reduction(name: str):
    def run(x):
        import torch
        return {"sum": torch.sum, "mean": torch.mean, "nansum": torch.nansum, "count_nonzero": torch.count_nonzero,
                "trace": torch.trace}[name](x)
    run.__name__ = name
    return run


# --------------------------------------------------------------------------- the samples

def _batched_outer(d):
    import torch
    b, n = d["batch"], d["n"]
    return [{"a": torch.zeros(b, 9, 1, dtype=torch.float64), "b": torch.ones(1, n, dtype=torch.float64)},
            {"a": _randn(b, 9, 1, seed=1), "b": _randn(1, n, seed=2)}]


def _linear_wide(d):
    return [{"x": _rand(d["rows"], 1, seed=3), "w": _rand(d["out"], 1, seed=4, low=-1, high=1)}]


def _three_by_three(d):
    return [{"a": _rand(3, 3, seed=5, low=-1, high=1), "b": _rand(3, 3, seed=6, low=-2.5, high=2.5)}]


def _tall(d):
    return [{"a": _randn(d["k"], 25, seed=7)}]


def _bmm_deep(d):
    return [{"a": _randn(d["batch"], 16, d["k"], seed=8), "b": _randn(d["batch"], d["k"], 16, seed=9)}]


def _signals(d):
    import torch
    return [{"signal": _rand(64, seed=10), "n": 64},
            {"signal": torch.linspace(0, 1, 5, dtype=torch.float64), "n": 5}]


def _wide_conv(d):
    import torch
    c = d["channels"]
    return [{"x": torch.ones(1, 1, 3, dtype=torch.float64), "w": _rand(c, 1, 3, seed=11, low=-1, high=1),
             "b": _rand(c, seed=12, low=-1, high=1)}]


def _linear_batched(d):
    return [{"x": _randn(d["batch"], d["seq"], d["k"], seed=13), "w": _randn(d["out"], d["k"], seed=14),
             "b": _randn(d["out"], seed=15)}]


def _vocab(d):
    return [{"x": _randn(9, d["seq"], 1, seed=16), "w": _randn(50304, 1, seed=17)}]


def _pairs(d):
    return [{"x": _randn(10, 2, seed=18)}]


def _volume(d):
    return [{"x": _rand(*d["shape"], seed=19)}]


def _with_nans(d):
    x = _rand(*d["shape"], seed=20).flatten()
    x[::100] = float("nan")
    return [{"x": x.reshape(d["shape"])}]


def _square(d):
    return [{"x": _rand(d["side"], d["side"], seed=21)}]


# --------------------------------------------------------------------------- the table

_SUM_SOURCE = Source(
    178497, "[MPS] Correctness issues in count_nonzero, mean, nansum, sum, and trace",
    affected="MPS; reported 2026-03 against then-current torch; open", fixed="count_nonzero moved to a Metal kernel "
    "(PR #180725); no fix shown for the others",
    confirmed="the MRE: x = rand(16, 2100, 256), trace on rand(20000, 20000), nansum with every 100th element NaN, "
              "each op rerun up to 300,000 times until a result differs")
_VOLUME = (Size("reported", {"shape": (16, 2100, 256)}, "x (16, 2100, 256)"),)

CASES: tuple[BugCase, ...] = (
    BugCase(
        "batched-matmul-n32769",
        Source(111634, "Batched matmul gives incorrect result on MPS devices", affected="torch 2.1.0, macOS 13.5.2",
               fixed="closed; PR #117549 ('Fix torch.mm correctness for large matrices', 2024-01) addresses a "
                     "dimension past 32K",
               confirmed="zeros(911, 9, 1) @ ones(1, 32769) gave 50,505,735 ones, 182,632,455 on a rerun; "
                         "any smaller dimension gave the right result"),
        "matmul", "ones where zeros belong, a different count on each run, past 2^15 columns",
        _batched_outer, matmul,
        (Size("edge", {"batch": 8, "n": 32769}, "(8, 9, 1) @ (1, 32769)"),
         Size("large", {"batch": 113, "n": 32769}, "(113, 9, 1) @ (1, 32769)"),
         Size("reported", {"batch": 911, "n": 32769}, "(911, 9, 1) @ (1, 32769)")),
        lambda d: (d["batch"] * 9 + d["n"], d["batch"] * 9 * d["n"])),
    BugCase(
        "linear-out-features-32769",
        Source(116769, "MPS MatMul (even 2d) broken", affected="torch 2.3.0.dev20240104, macOS 14.1, M3 Max",
               fixed="closed; PR #117549 covers a dimension past 32K (the thread does not say 'Fixes')",
               confirmed="nn.Linear(1, 32769, bias=False) on rand(1025, 1): in each row the first 1024 columns are "
                         "right and every later one wrong; plain 2-D matmul too"),
        "linear", "each row right for its first 1024 columns and wrong after",
        _linear_wide, linear,
        (Size("edge", {"rows": 64, "out": 32769}, "Linear(1, 32769) on (64, 1)"),
         Size("reported", {"rows": 1025, "out": 32769}, "Linear(1, 32769) on (1025, 1)")),
        lambda d: (d["rows"] + d["out"], d["rows"] * d["out"])),
    BugCase(
        "matmul-3x3",
        Source(85406, "mps on apple m1 seems incorrect in matrix multiplication",
               affected="torch 1.12.0 nightly, MacBook Pro M1", fixed="closed; the fix is not shown in the thread",
               confirmed="rand(3,3)*2-1 @ rand(3,3)*5-2.5 off by up to 2.9994; the MPS result equals A @ B.T on "
                         "the CPU (also #84736, #86937)"),
        "matmul", "off by up to 3.0: the second operand read as transposed",
        _three_by_three, matmul, (Size("reported", {}, "(3, 3) @ (3, 3)"),), lambda d: (18, 9)),
    BugCase(
        "gram-matmul-k50000",
        Source(193487, "MPS: allocator-state-dependent silently wrong matmul results (10-30% of scale) on "
                       "2.7-2.13.0; masked (not root-fixed) by #187441",
               affected="torch 2.7 to 2.13.0 on M1 and M2 (Apple7/8 GPUs); M4 does not reproduce",
               fixed="2-D mm/addmm/linear in torch 2.14.0 (PR #183535); open for bmm",
               confirmed="Aw.T @ A (25 x 25 from 50k x 25) wrong in 579 of 625 elements after earlier large "
                         "allocations, right in a fresh process and after torch.mps.empty_cache(); the kernel "
                         "reads past the end of a reduction dimension over 32768"),
        "matmul", "10-30% off after earlier allocations, right after torch.mps.empty_cache()",
        _tall, gram,
        (Size("edge", {"k": 32769}, "(32769, 25).T @ (32769, 25)"),
         Size("reported", {"k": 50000}, "(50000, 25).T @ (50000, 25)")),
        lambda d: (d["k"] * 25, 625)),
    BugCase(
        "bmm-k32767",
        Source(195163, "[MPS] bmm/baddbmm/addbmm silently wrong on M1/M2 when K >= 32767 (2-D paths already routed "
                       "by #183535)",
               affected="torch 2.14 and 2.15 nightlies on M1 and M2 (Apple7/8 GPUs); open",
               fixed="open; proposed PR #195012",
               confirmed="from the report's description: a reduction dimension of 32767 or more with both output "
                         "dimensions >= 16 sums memory past the operands; #183535's 2-D threshold (K > 32768) is "
                         "off by one"),
        "bmm", "memory past the operands summed into the result",
        _bmm_deep, bmm, (Size("edge", {"batch": 2, "k": 32767}, "bmm (2, 16, 32767) @ (2, 32767, 16)"),),
        lambda d: (d["batch"] * 2 * 16 * d["k"], d["batch"] * 256)),
    BugCase(
        "irfft-64",
        Source(124096, "MPS: IRFFT returns incorrect results", affected="torch 2.2, macOS 14.4.1",
               fixed="closed; test/test_mps.py test_ifft guards it; related: PR #123274 (negative frequencies "
                     "dropped on macOS 14.4), #126649 (open: irfft(rfft(linspace(0, 1, 5))) reversed)",
               confirmed="irfft(rfft(rand(64)), n=64) is not the signal on MPS"),
        "fft.irfft", "irfft(rfft(x)) is not x", _signals, irfft_of_rfft,
        (Size("reported", {}, "irfft(rfft(x), n) for n = 64 and 5"),), lambda d: (64, 64), normwise=False),
    BugCase(
        "conv1d-65537-channels",
        Source(134416, "PYTORCH_ENABLE_MPS_FALLBACK does not appear to work for nn.Conv1d",
               affected="reported 2024-08 (MPS, before macOS 15.1)",
               fixed="PR #140726 allows more than 65536 output channels on macOS >= 15.1; before that a guard "
                     "(PR #129484) raises, since the silent wrong result of #129207",
               confirmed="nn.Conv1d(1, 65537, 3, padding=1) on ones(1, 1, 3) raises NotImplementedError with the "
                         "fallback on; #129207: the first channel wrong, the last all zeros"),
        "conv1d", "raises NotImplementedError with the fallback on (earlier: last channel all zeros)",
        _wide_conv, conv1d, (Size("reported", {"channels": 65537}, "Conv1d(1, 65537, 3, padding=1) on (1, 1, 3)"),),
        lambda d: (3 + d["channels"] * 4, d["channels"] * 3)),
    BugCase(
        "linear-batch-65537",
        Source(189495, "[MPS] F.linear with bias silently returns wrong results when 3D batch dim exceeds 2^16 "
                       "(65536)",
               affected="torch 2.12.0, 2.13.0, 2.14 nightly", fixed="closed; PR #189496 flattens the input to 2-D",
               confirmed="F.linear(randn(65537, 11, 128), randn(512, 128), randn(512)) off by about 60; right at "
                         "a leading dimension of 65536, without bias, or from a 2-D input"),
        "linear", "rows past 65536 wrong (the batch index wraps at 16 bits)",
        _linear_batched, linear,
        (Size("edge", {"batch": 65537, "seq": 1, "k": 8, "out": 16}, "F.linear((65537, 1, 8), (16, 8), bias)"),
         Size("large", {"batch": 65537, "seq": 1, "k": 128, "out": 500}, "F.linear((65537, 1, 128), (500, 128), bias)"),
         Size("reported", {"batch": 65537, "seq": 11, "k": 128, "out": 512},
              "F.linear((65537, 11, 128), (512, 128), bias)")),
        lambda d: (d["batch"] * d["seq"] * d["k"] + d["out"] * (d["k"] + 1), d["batch"] * d["seq"] * d["out"])),
    BugCase(
        "linear-vocab-50304",
        Source(122045, "[MPS] torch.nn.functional.linear produces non-negligible error when input size is large "
                       "enough",
               affected="reported 2024-03 (M2 Mac Studio, nanoGPT); 2.5.0.dev20240822 still shows it",
               fixed="open as indexed; test/test_mps.py test_linear_large guards it",
               confirmed="F.linear(randn(9, 1024, 1), randn(50304, 1)) off the CPU with a standard deviation above "
                         "1 at a batch of 9, right at a batch of 1 or split per batch (#109457: GPT-2's lm_head, "
                         "right at batch 8, wrong from 9)"),
        "linear", "a vocabulary-sized projection off by a standard deviation above 1 from a batch of 9",
        _vocab, linear,
        (Size("small", {"seq": 16}, "F.linear((9, 16, 1), (50304, 1)) (below the reported size)"),
         Size("large", {"seq": 64}, "F.linear((9, 64, 1), (50304, 1)) (below the reported size)"),
         Size("reported", {"seq": 1024}, "F.linear((9, 1024, 1), (50304, 1))")),
        lambda d: (9 * d["seq"] + 50304, 9 * d["seq"] * 50304)),
    BugCase(
        "linear-transformer-shape",
        Source(97239, "MPS: torch.nn.Linear/torch.nn.functional.linear returns incorrect results for some shapes",
               affected="macOS 13.2 (MPS)", fixed="closed; macOS 13.3 (as the curated-transformers workaround, "
                                                  "PR #124 there, reports)",
               confirmed="nn.Linear(768, 2304) on rand(253, 144, 768) wrong in many elements; right at (253, 129, "
                         "768); x @ W.T + b right"),
        "linear", "many elements wrong past a second dimension of 129",
        _linear_batched, linear,
        (Size("small", {"batch": 2, "seq": 144, "k": 768, "out": 2304},
              "F.linear((2, 144, 768), (2304, 768), bias) (below the reported size)"),
         Size("large", {"batch": 64, "seq": 144, "k": 768, "out": 2304},
              "F.linear((64, 144, 768), (2304, 768), bias) (below the reported size)"),
         Size("reported", {"batch": 253, "seq": 144, "k": 768, "out": 2304},
              "F.linear((253, 144, 768), (2304, 768), bias)")),
        lambda d: (d["batch"] * d["seq"] * d["k"] + d["out"] * (d["k"] + 1), d["batch"] * d["seq"] * d["out"])),
    BugCase(
        "argmax-dim1-10x2",
        Source(92311, "'mps' and argmax()", affected="reported 2023-01; #98191 the same on torch 2.0.0, macOS 13.0",
               fixed="closed",
               confirmed="torch.argmax(randn(10, 2), dim=1) on mps gave -9223372036854775808 for every row; "
                         "LLaMA_MPS's garbled output was traced to it"),
        "argmax", "INT64_MIN for every row", _pairs, argmax_dim1, (Size("reported", {}, "(10, 2).argmax(dim=1)"),),
        lambda d: (20, 10), normwise=False),
    BugCase("sum-rapid", _SUM_SOURCE, "sum", "an intermittently wrong sum in rapid succession", _volume,
            reduction("sum"), _VOLUME, lambda d: (16 * 2100 * 256, 1), rapid=True),
    BugCase("mean-rapid", _SUM_SOURCE, "mean", "an intermittently wrong mean in rapid succession", _volume,
            reduction("mean"), _VOLUME, lambda d: (16 * 2100 * 256, 1), rapid=True),
    BugCase("nansum-rapid", _SUM_SOURCE, "nansum", "an intermittently wrong nansum in rapid succession", _with_nans,
            reduction("nansum"), _VOLUME, lambda d: (16 * 2100 * 256, 1), rapid=True),
    BugCase("count-nonzero-rapid", _SUM_SOURCE, "count_nonzero",
            "an intermittently wrong count_nonzero in rapid succession", _volume, reduction("count_nonzero"),
            _VOLUME, lambda d: (16 * 2100 * 256, 1), rapid=True),
    BugCase("trace-rapid", _SUM_SOURCE, "trace", "an intermittently wrong trace in rapid succession", _square,
            reduction("trace"),
            (Size("edge", {"side": 4096}, "trace of (4096, 4096)"),
             Size("reported", {"side": 20000}, "trace of (20000, 20000)")),
            lambda d: (d["side"] ** 2, 1), rapid=True),
)


# --------------------------------------------------------------------------- attention

def sdpa(query, key, value, attn_mask=None, enable_gqa=False):
    """scaled_dot_product_attention as a model decodes with it (dropout off), looked up when
    called: a kernel patched in by a stand-in is the one run."""
    import torch.nn.functional as F
    options = {"enable_gqa": True} if enable_gqa else {}
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=0.0, **options)


def _gqa_decode(d):
    return [{"query": _randn(1, 32, 1, 128, seed=22), "key": _randn(1, 2, d["keys"], 128, seed=23),
             "value": _randn(1, 2, d["keys"], 128, seed=24), "enable_gqa": True}]


def _decode_tails(d):
    return [{"query": _randn(1, 4, 1, 64, seed=25 + i), "key": _randn(1, 4, n, 64, seed=30 + i),
             "value": _randn(1, 4, n, 64, seed=35 + i)} for i, n in enumerate(d["keys"])]


# The attention reports. They are a table of their own, run by suites/parity/
# test_attention_known_bugs.py beside the attention family, whose stand-ins reproduce them
# (tests/half_attention_faults.py: standin-gqa-long-half, standin-decode-tail); each is a
# read past the keys, so the dirty-allocator run (freed blocks full of NaN) is the one that
# shows it on an affected Mac, and the repeatable check the other bits it gives on a rerun.
ATTENTION_CASES: tuple[BugCase, ...] = (
    BugCase(
        "sdpa-gqa-decode-1024-keys",
        Source(174861, "[MPS] Out of bounds memory access/corruption and correctness issue in SDPA",
               affected="torch 2.8 to 2.10 on MPS (introduced by PR #152781; 2.7.1 the last good release): "
                        "float16 and bfloat16, grouped-query heads, 1024 keys or more (the two-pass decoding kernel, "
                        "sdpa_vector_2pass_mps)",
               fixed="torch 2.11 (PR #174945 allocates the two-pass kernel's sums and maxs in float32; the thread "
                     "verifies the 2.11.0 release candidate); transformers PR #44359 proposed a workaround for "
                     "torch < 2.11",
               confirmed="the MRE: bfloat16 q (1, 32, 1, 128), k and v (1, 2, 1024, 128), enable_gqa=True against "
                         "the CPU: elements off by more than 1e-2, and two MPS calls giving different results"),
        "nn.functional.scaled_dot_product_attention",
        "one query against 1024 keys with grouped-query heads reads out of bounds: wrong, and other numbers on a "
        "rerun", _gqa_decode, sdpa,
        (Size("reported", {"keys": 1024}, "q (1, 32, 1, 128), k and v (1, 2, 1024, 128), enable_gqa"),),
        lambda d: (32 * 128 + 2 * 2 * d["keys"] * 128, 32 * 128), dtypes=("bfloat16", "float16")),
    BugCase(
        "sdpa-decode-keys-not-multiple-of-32",
        Source(169222, "[MPS] Fix out-of-bounds memory access in SDPA vector kernels",
               affected="a pull request (2025-11-28) against MPS's decoding kernels (sdpa_vector, "
                        "sdpa_vector_2pass_1): at most 8 query rows, as many keys or more, head dim 64, 96 or 128, "
                        "no causal mask, a key length that is not a multiple of 32",
               fixed="closed; the thread shown does not say whether it was merged (its bounds check, i < N, is the "
                     "fix it proposes)",
               confirmed="from the pull request's description: threads of the last partial block of 32 keys read "
                         "K and V past the sequence; right at multiples of 32, gibberish at 38, 39 and 70 keys, "
                         "varying with what the memory held"),
        "nn.functional.scaled_dot_product_attention",
        "a decoding step against a key length that is not a multiple of 32 reads past the keys",
        _decode_tails, sdpa,
        (Size("reported", {"keys": (38, 39, 70)}, "q (1, 4, 1, 64) against 38, 39 and 70 keys of head dim 64"),),
        lambda d: (4 * 64 + 2 * 4 * max(d["keys"]) * 64, 4 * 64), dtypes=("float32", "float16", "bfloat16")),
)


# --------------------------------------------------------------------------- the checks

def checks(kind: str, table: tuple[BugCase, ...] | None = None) -> list[Check]:
    """The checks of ``kind`` (known-bug, or repeatable for the deterministic cases), one per
    case of ``table`` (CASES by default) and dtype, on every target and registered stand-in."""
    every = devices.TARGETS + tuple(devices.STAND_INS)
    return [Check(case, dtype, kind, every) for case in (table or CASES)
            if kind == RecordKind.KNOWN_BUG or case.repeatable for dtype in case.dtypes]


def by_name(name: str) -> BugCase:
    for case in CASES + ATTENTION_CASES:
        if case.name == name:
            return case
    raise KeyError(f"no known-bug case {name!r}")


def source_metrics(case: BugCase, kind: str = RecordKind.KNOWN_BUG) -> dict:
    """Where a case comes from, as metrics of its ``kind`` of record (harness.core.records.RecordKind)."""
    s = case.source
    return {"record_kind": kind, "known_bug": case.name, "issue": s.issue, "issue_url": s.url, "issue_title": s.title,
            "affected": s.affected, "fixed": s.fixed, "reported": case.what}
