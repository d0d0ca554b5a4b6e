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
                                     accelerator: as accurate as the CPU, harness.parity.accuracy.
                                     compare_accuracy; on the CPU: the cpu target's rules
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

Sizes (harness.parity.bug_sizes): a case's first size is its ``edge``, the smallest that still crosses the reported
edge (a side of 2^15 + 1, not a side of a million), or ``small`` where the report names
no edge; it is cheap on a 2-core CPU. Larger sizes go up to the reported shape. The CPU
and the stand-ins run the first size; an accelerator the largest whose working set fits
MEMORY_FRACTION of its memory reading (harness.core.sizing.memory_of) and of the host's RAM
(the CPU side and the float64 reference live there), and whose output stays within
JUDGED_MAX elements.

This module holds the cases' shape (BugCase, Size, Source; the table is
harness.parity.known_bug_cases) and the checks made of them; bug_target runs a case on a
target, bug_check and bug_repeat run and judge the two kinds of check.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from harness.core import devices

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
    op: str                  # the op's name in the tolerance table (harness.parity.tolerances)
    what: str                # the wrong result reported, in words
    make: Callable[[dict], list[dict]]
    fn: Callable
    sizes: tuple[Size, ...]  # the edge first, then larger ones for accelerators
    footprint: Callable[[dict], tuple[int, int]]   # elements of the inputs and of the output at dims (largest sample)
    dtypes: tuple[str, ...] = ("float32",)
    normwise: bool = True    # a sum of many terms: judged against the output's magnitude (harness.parity.accuracy)
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
    kind: str                # "known-bug" | "repeatable"
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


def checks(kind: str, table: tuple[BugCase, ...] | None = None) -> list[Check]:
    from harness.parity.known_bug_cases import CASES
    every = devices.TARGETS + tuple(devices.STAND_INS)
    return [Check(case, dtype, kind, every) for case in (table or CASES)
            if kind == "known-bug" or case.repeatable for dtype in case.dtypes]


def by_name(name: str) -> BugCase:
    from harness.parity.known_bug_cases import CASES
    for case in CASES:
        if case.name == name:
            return case
    raise KeyError(f"no known-bug case {name!r}")


def source_metrics(case: BugCase, kind: str = "known-bug") -> dict:
    """Where a case comes from, as metrics of its ``kind`` of record (harness.core.records:
    "known-bug" or "repeatable")."""
    s = case.source
    return {"record_kind": kind, "known_bug": case.name, "issue": s.issue, "issue_url": s.url, "issue_title": s.title,
            "affected": s.affected, "fixed": s.fixed, "reported": case.what}
