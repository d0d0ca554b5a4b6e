"""Check ids: where a record's result belongs.

``identity_for`` names a check from where its test lives and its parameters
(``<suite>/<subject>/<variant>``, a public contract: check ids never change); the target
is a column, not part of the id. ``workload_of`` and ``target_of`` say which column of
the matrix (and of a comparison) a record's result goes in.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Identity:
    suite: str
    subject: str
    variant: str
    target: str | None

    @property
    def check(self) -> str:
        return "/".join(p for p in (self.suite, self.subject, self.variant) if p)


def workload_of(rec: dict) -> str:
    """The training workload a record was measured at (``metrics.workload``: small, large,
    the shape ``--workload auto`` chose ...), or "" for a check that trains nothing. A claim
    measured at two workloads is two results: the matrix gives each workload its own column
    and the compare tool keeps them apart, so neither overwrites the other."""
    workload = (rec.get("metrics") or {}).get("workload")
    return workload if isinstance(workload, str) else ""


def target_of(rec: dict) -> str:
    """Where a record's result belongs: its target, with the workload when it has one
    ("cpu", or "cuda [large workload]")."""
    target, workload = rec.get("target") or "any", workload_of(rec)
    return f"{target} [{workload} workload]" if workload else target


def identity_for(path_parts: tuple[str, ...], func_name: str, params: dict) -> Identity | None:
    """The stable id of a check, from where its test lives and its parameters.

    Only tests under a ``suites/`` directory are checks. A parameter named ``case`` that
    has ``subject`` (and optionally ``variant``) names the check (table-driven tests);
    otherwise the subject is the test name without ``test_`` and the other parameters
    form the variant. The target never enters the id: it is a column, not a row.
    """
    if "suites" not in path_parts:
        return None
    idx = len(path_parts) - 1 - path_parts[::-1].index("suites")
    rest = path_parts[idx + 1:]
    suite = rest[0] if len(rest) > 1 else "misc"
    target = params.get("target")
    case = params.get("case")
    if case is not None and hasattr(case, "subject"):
        return Identity(suite, case.subject, getattr(case, "variant", "") or "", target)
    subject = func_name.removeprefix("test_")
    variant = "/".join(str(v) for k, v in sorted(params.items()) if k not in ("target", "case"))
    return Identity(suite, subject, variant, target)
