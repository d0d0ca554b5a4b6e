"""The one shape of a case, and of what is known about it before it runs.

Every suite's table of cases (the ops sweep's op x dtype x pass, op parity's, the
properties' dtypes, the known bugs' checks, the claims x quantity) yields objects of the
shape ``Case``: what the journal names the check (``<suite>/<subject>/<variant>``), the
pytest id, and the targets that run it. The ``cases`` marker (harness.plugin.hooks) runs
a test once per case and target and refuses anything else with one clear line.

What is known before a case runs is data beside the case, in one form, ``Known``: a known
limit (the check runs and a miss is an expected failure with its reason), a check not run
where it cannot mean anything (a skip with its reason), each with where the knowledge
comes from. PyTorch's own declarations (OpInfo's DecorateInfo, common_mps) are read from
the installed torch, not copied (harness.ops.declarations).
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Literal, Protocol, runtime_checkable

OUTCOMES = ("limit", "skip")


@runtime_checkable
class Case(Protocol):
    """What the ``cases`` marker needs of a case."""
    subject: str            # <suite>/<subject>/<variant> in the journal: a public contract
    variant: str
    id: str                 # the pytest id beside the target
    targets: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Known:
    """Something known about a case before it runs.

    ``limit``: the check runs; a miss is recorded as an expected failure (xfail) with
    ``reason``, a pass stays a pass. ``skip``: the check is not run here, for ``reason``.
    ``source``: where the knowledge comes from (a measurement, a document, an issue)."""
    outcome: Literal["limit", "skip"]
    reason: str
    source: str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"Known.outcome must be one of {OUTCOMES}, not {self.outcome!r}")
        if not self.reason:
            raise ValueError("a Known needs its reason: the user reads it")


class DtypePass:
    """The ids of an op x dtype x pass case, in every table that has one (the op sweep's
    ``ops/<op>/<dtype>/<pass>``, the perf suite's ``perf/<op>/<dtype>/<pass>``): the variant is
    ``<dtype>/<pass>``, the pytest id ``<subject>-<dtype>-<pass>``. The case has ``subject``
    (the op), ``dtype`` and ``pass_``."""
    subject: str
    dtype: str
    pass_: str

    @property
    def variant(self) -> str:
        return f"{self.dtype}/{self.pass_}"

    @property
    def id(self) -> str:
        return f"{self.subject}-{self.dtype}-{self.pass_}"


def check_table(cases: Iterable, where: str) -> list:
    """The cases of a table, each of the shape ``Case``, ids unique on each target (one
    check may be a case per target, as the environment's are); else one clear error."""
    cases = list(cases)
    seen: dict[tuple[str, str], int] = {}
    for i, case in enumerate(cases):
        if not isinstance(case, Case):
            missing = [a for a in ("subject", "variant", "id", "targets") if not hasattr(case, a)]
            raise TypeError(f"{where}: case {i} ({type(case).__name__}) is not a Case: it lacks {', '.join(missing)}")
        for target in case.targets:
            if (case.id, target) in seen:
                raise ValueError(f"{where}: cases {seen[case.id, target]} and {i} share the id {case.id!r} "
                                 f"on {target}")
            seen[case.id, target] = i
    return cases
