"""The optimization suite's cases: one per claim x quantity x entry point.

Built from the claims table's ``WHERE_MEASURED`` (harness/optim/claims.py): a ``ClaimCase``
per row, of the shape harness.core.cases.Case. The journal names it
``optim/<claim>/<quantity>`` (the plain-PyTorch loop) or ``optim/<claim>/<quantity>/trainer``
(through the Trainer); its pytest id is ``<claim>-<quantity>`` or ``<claim>-<quantity>-trainer``.
``known`` is what the table knows before it runs: None (measured) or a ``Known("skip", ...)``.
"""
from __future__ import annotations

from harness.core.cases import Known
from harness.optim import claims


class ClaimCase:
    """One claim x quantity through one entry point (claims.LOOP or claims.TRAINER)."""

    def __init__(self, claim: str, quantity: str, entry: str = claims.LOOP, known: Known | None = None):
        if known is not None and known.outcome != "skip":
            raise ValueError(f"optim/{claim}/{quantity}: only a skip is known before a claim runs "
                             f"(a claim that does not hold is already an expected failure), not {known.outcome!r}")
        trainer = entry == claims.TRAINER
        self.subject, self.variant = claim, f"{quantity}/{entry}" if trainer else quantity
        self.quantity, self.entry, self.known = quantity, entry, known
        self.targets = claims.TARGET_CLASSES
        self.id = f"{claim}-{quantity}" + (f"-{entry}" if trainer else "")


def cases(entry: str) -> list[ClaimCase]:
    """The cases measured through ``entry``, in the claims table's order."""
    return [ClaimCase(name, quantity, where, known)
            for (name, quantity, where), known in claims.WHERE_MEASURED.items() if where == entry]


CASES = cases(claims.LOOP)
TRAINER_CASES = cases(claims.TRAINER)
