"""The run file's record contract: what a check record holds, the statuses and categories
each suite writes, the kinds of special records, and how a file of an older schema is read.

A run file (written by harness.core.journal, read by harness.core.runfiles) is JSON lines:
a header, one record per check, an end line.
Baselines are run files, kept for months and compared with tomorrow's runs
(harness.report.compare), so what is written here is a public contract:

  * a check's id (``suite/subject/variant``) never changes;
  * a field or a category is added, never renamed; a reader ignores what it does not know;
  * a change in what a record means raises SCHEMA, and ``MIGRATIONS[N]`` (an
    ``update_to_N(record)``) turns a record of schema N - 1 into one of schema N, so the
    reader hands every consumer (the report, compare) records of today's schema.

Schema history:
  1  the first contract.
  2  special records say what they are in ``metrics.record_kind`` (data, not a test's
     name): the report finds seed 003's path by it. update_to_2 derives it from the
     subject of a schema-1 record.
"""
from __future__ import annotations

from typing import Callable, TypedDict

SCHEMA = 2

STATUSES = ("pass", "fail", "skip", "xfail", "xpass", "error", "crash", "timeout")

# Every record's fields and their types (the reader refuses a record without them).
FIELDS = {"check": str, "suite": str, "subject": str, "variant": str, "target": (str, type(None)),
          "status": str, "category": (str, type(None)), "metrics": dict, "reason": str,
          "duration_s": (int, float)}

# The categories each suite writes: what the record is about, beside its status.
CATEGORIES: dict[str, tuple[str, ...]] = {
    "env": ("n/a",),
    # how an op ran (harness.ops.opsweep): natively, with ops on the CPU (the MPS fallback),
    # not at all (NotImplementedError), or it raised otherwise / crashed / hung
    "ops": ("native", "cpu-fallback", "unsupported", "error", "crash", "timeout", "n/a"),
    # numbers against float64 (op, property, model and known-bug checks), a known-bug case
    # that raises where the CPU computes, and whether a rerun gives the same bits
    "parity": ("parity", "raises", "repeatable", "unrepeatable", "n/a"),
    # a documented optimization claim, measured (harness.optim.techniques.claim_verdict)
    "optim": ("holds", "does-not-hold", "inconclusive", "n/a"),
}
# The ops suite's own verdicts on running an op: the report counts a large suite by them.
OP_CATEGORIES = ("native", "cpu-fallback", "unsupported", "n/a")

# Special records: metrics.record_kind says what a record is, for the readers that treat
# it apart (the report's sections).
RECORD_KINDS = {
    "seed-003-path": "seed 003's cumulative optimization path: metrics.rows, one per row of the seed's table",
    "known-bug": "a reported accelerator bug's check: metrics.known_bug, issue, issue_url, reported",
    "repeatable": "a known-bug case rerun for the same bits: metrics.known_bug, runs, differing",
}


class ParityMetrics(TypedDict, total=False):
    """What the report and compare read of a parity record."""
    margin: float            # largest error / allowed error: <= 1 passes
    max_abs_err: float
    max_rel_err: float
    rtol: float
    atol: float
    reference: str           # what the result was compared with (float64, complex128 ...)
    cause: str               # harness.parity.causes: why an accelerator is off
    cause_what: str
    switch: str              # what changes it, in the user's terms
    inputs: str              # a digest per sample (harness.parity.samples.fingerprint)
    worst_sample: int
    record_kind: str


class ClaimMetrics(TypedDict, total=False):
    """What the report and compare read of an optimization record."""
    mem_ratio: float         # peak memory, variant / baseline
    time_ratio: float        # time per sample, variant / baseline
    ci_low: float            # the ratio's 95% bootstrap interval
    ci_high: float
    bound: float             # the ratio the claim must stay within
    kind: str                # "lower" (strictly below the bound) or "not-higher"
    claimed_ratio: float
    rounds: int
    source: str
    workload: str            # part of where the result belongs (harness.core.identity.target_of)
    shape: str
    rows: list               # seed 003's path (record_kind "seed-003-path")
    record_kind: str


class KnownBugMetrics(TypedDict, total=False):
    known_bug: str           # the case (harness/parity/known_bug_cases.py)
    issue: int
    issue_url: str
    issue_title: str
    reported: str            # the wrong result reported, in words
    affected: str
    fixed: str
    shape: str               # the size this machine ran
    runs: int
    differing: list          # the reruns that gave other bits
    record_kind: str


METRICS: dict[str, type] = {"parity": ParityMetrics, "optim": ClaimMetrics, "known-bug": KnownBugMetrics}


# --------------------------------------------------------------------------- reading older files

PATH_SUBJECT = "seed_003_path_never_raises_peak_memory"   # the test that wrote seed 003's path in schema 1


def update_to_2(record: dict) -> dict:
    """Schema 1 -> 2: name the special records' kind, which schema 1 left to the test's name
    (seed 003's path) or to the variant (the known-bug checks, written by schema 1 too)."""
    metrics = dict(record.get("metrics") or {})
    if "record_kind" not in metrics:
        variant = record.get("variant") or ""
        if record.get("suite") == "optim" and record.get("subject") == PATH_SUBJECT:
            metrics["record_kind"] = "seed-003-path"
        elif metrics.get("known_bug"):
            metrics["record_kind"] = "repeatable" if variant.endswith("/repeatable") else "known-bug"
    return {**record, "metrics": metrics}


MIGRATIONS: dict[int, Callable[[dict], dict]] = {2: update_to_2}


def readable(schema) -> bool:
    return isinstance(schema, int) and not isinstance(schema, bool) and 1 <= schema <= SCHEMA


def migrate(record: dict, schema: int) -> dict:
    """A record of ``schema`` as a record of today's SCHEMA."""
    for n in range(schema + 1, SCHEMA + 1):
        record = MIGRATIONS[n](record)
    return record


def kind_of(record: dict) -> str | None:
    """A (migrated) record's special kind, or None for an ordinary check."""
    return (record.get("metrics") or {}).get("record_kind")


def validate(record: dict) -> str | None:
    """What is wrong with a check record, in one phrase; None when it keeps the contract."""
    for name, types in FIELDS.items():
        if name not in record:
            return f"record lacks field {name!r}"
        if not isinstance(record[name], types):
            return f"field {name!r} has type {type(record[name]).__name__}"
    if record["status"] not in STATUSES:
        return f"unknown status {record['status']!r}"
    return None
