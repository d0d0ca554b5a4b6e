"""The record contract: the words a check's record is written in, what a judge says
(``Verdict``), a check's id, and how a run file of an older schema is read.

A run file (written and read by harness.core.runfiles) is JSON lines: a header, one record
per check, an end line. Baselines are run files, kept for months and compared with
tomorrow's runs (harness.report.compare), so what is written here is a public contract:

  * a check's id (``suite/subject/variant``) never changes;
  * a field or a category is added, never renamed; a reader ignores what it does not know;
  * a change in what a record means raises SCHEMA, and ``MIGRATIONS[N]`` (an
    ``update_to_N(record)``) turns a record of schema N - 1 into one of schema N, so the
    reader hands every consumer (the report, compare) records of today's schema;
  * the reader takes the fields the consumers dereference as the types written here, or
    not at all: a record (``validate``: FIELDS, METRICS) of other types is skipped, a
    header's field (``check_header``: HEADER, FACTS) of another type left out, each said
    in one line naming the file, the line and the field.

The vocabulary (``Status``, ``Category``, ``RecordKind``, ``ClaimKind``) is plain strings,
spelt once here: the judges write these constants, the readers compare with them, and a
``Verdict`` refuses any other word.

Schema history:
  1  the first contract.
  2  special records say what they are in ``metrics.record_kind`` (data, not a test's
     name): the report finds seed 003's path by it. update_to_2 derives it from the
     subject of a schema-1 record.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Callable

from harness.core import errors

SCHEMA = 2

# The revision of each suite's judge: raised when a judge starts to say something else of the
# same measurements, so a report can tell records of an older judge (``judge_of``) and judge
# them again where their metrics allow (harness.parity.numerics.rejudge). Written into every
# run's header. parity 2: an accelerator judged by its accuracy against float64 with the CPU's
# own error as the yardstick (revision 1 judged same-dtype agreement with the CPU).
JUDGES = {"parity": 2}
# What each revision of a suite's judge held a result against, in a reader's words: a
# comparison of records of two revisions names both (harness.report.compare).
YARDSTICKS = {"parity": {1: "agreement with the CPU in the same dtype",
                         2: "accuracy against float64, the CPU's own error the yardstick"}}
# What a report shows for a record of an older judge whose metrics cannot settle what today's
# judge would say (a tie in an index output, a copy read before it completed): run it again.
RERUN = "rerun"


# --------------------------------------------------------------------------- the vocabulary

class Status:
    """A check record's status. A judge's Verdict says any of them but ERROR (only pytest
    errs: a fixture or the harness itself broke). What each means, in every suite:

      pass     the check holds; a message, if any, is a finding worth reading (the reason)
      xpass    it ran although an expectation said it would not (PyTorch's, a known limit)
      skip     it does not apply here, or there is nothing to judge; the reason says why
      xfail    a known limitation or a documented promise that failed, not a failure of this
               machine's setup (a precision limit, a claim that does not hold here)
      fail     this machine is wrong: the reason names the cause and the switch
      error    the check itself broke (pytest's error in a fixture or teardown)
      crash    the check's process died (a segfault in a kernel): a failure, recorded as crash
      timeout  the check hung and was killed: a failure, recorded as timeout
    """
    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"
    XFAIL = "xfail"
    XPASS = "xpass"
    ERROR = "error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    ALL = (PASS, FAIL, SKIP, XFAIL, XPASS, ERROR, CRASH, TIMEOUT)
    VERDICTS = (PASS, XPASS, SKIP, XFAIL, FAIL, CRASH, TIMEOUT)
    BAD = (FAIL, ERROR, CRASH, TIMEOUT)      # a check that ran and did not hold
    WORKS = (PASS, XPASS)


class Category:
    """What a record is about, beside its status: per suite (``CATEGORIES``).

      ops     how an op ran (harness.ops.opsweep): natively, with ops on the CPU (the MPS
              fallback), not at all (NotImplementedError), or it raised otherwise / crashed / hung
      parity  numbers against float64 (op, property, model and known-bug checks); a known-bug
              case that raises where the CPU computes; whether a rerun gives the same bits; a
              torch.compile'd op or model that raises where eager computes (compile-failed)
      optim   a documented optimization claim, measured: the claim's verdict
      perf    a time taken (its interval narrow, or too wide to compare: noisy), or memory
              over a long run (steady, grows, or no verdict: inconclusive)
      control a known-answer check of a suite's own instrument on the device (ops, parity, optim,
              perf: harness/ops/controls.py and its siblings), whose status says whether the
              instrument can be trusted there; the env suite reads facts and has none
    """
    NA = "n/a"
    NATIVE = "native"
    CPU_FALLBACK = "cpu-fallback"
    UNSUPPORTED = "unsupported"
    ERROR = "error"
    CRASH = "crash"
    TIMEOUT = "timeout"
    PARITY = "parity"
    RAISES = "raises"
    REPEATABLE = "repeatable"
    UNREPEATABLE = "unrepeatable"
    COMPILE_FAILED = "compile-failed"
    HOLDS = "holds"
    DOES_NOT_HOLD = "does-not-hold"
    INCONCLUSIVE = "inconclusive"
    CLAIM_VERDICTS = (HOLDS, DOES_NOT_HOLD, INCONCLUSIVE)
    TIMED = "timed"
    NOISY = "noisy"
    STEADY = "steady"
    GROWS = "grows"
    TIMES = (TIMED, NOISY)                   # a perf figure: its interval narrow, or wide
    GROWTH = (STEADY, GROWS, INCONCLUSIVE)   # memory over a long run
    CONTROL = "control"                      # a known-answer check of the suite's instrument on the device
    RAN = (NATIVE, CPU_FALLBACK)             # an op that ran, natively or with a fallback
    OPS = (NATIVE, CPU_FALLBACK, UNSUPPORTED, NA)   # the ops suite's verdicts on running an op


CATEGORIES: dict[str, tuple[str, ...]] = {
    "env": (Category.NA,),
    "ops": (Category.NATIVE, Category.CPU_FALLBACK, Category.UNSUPPORTED, Category.ERROR, Category.CRASH,
            Category.TIMEOUT, Category.CONTROL, Category.NA),
    "parity": (Category.PARITY, Category.RAISES, Category.REPEATABLE, Category.UNREPEATABLE, Category.COMPILE_FAILED,
               Category.CONTROL, Category.NA),
    "optim": (*Category.CLAIM_VERDICTS, Category.CONTROL, Category.NA),
    "perf": (*Category.TIMES, Category.STEADY, Category.GROWS, Category.INCONCLUSIVE, Category.CONTROL, Category.NA),
}
ALL_CATEGORIES = tuple(dict.fromkeys(c for cats in CATEGORIES.values() for c in cats))

# Markers of checks that cost far more than their suite's others, and the suites that hold
# them (the compile family: seconds per check, in the parity suite). A run narrowed with -m
# includes them only when the expression names the marker (harness.plugin.hooks.opted_out), so
# `-m "parity and cpu"` keeps its budget; `-m compile`, `-m "compile and mps"` and a run without
# -m (pytest suites/, ./compat suites) include them. The report reads a -m run as whole for
# such a suite only when it names the marker (harness.report.selection).
OPT_IN: dict[str, tuple[str, ...]] = {"compile": ("parity",)}
# The subject each opt-in family's check ids begin with (parity/compiled.softmax/float16/backward):
# what a record says of the marker its check carried (harness.report.selection.selects).
OPT_IN_SUBJECT: dict[str, str] = {"compile": "compiled."}


def opt_in_of(subject: str) -> tuple[str, ...]:
    """The opt-in markers (OPT_IN) a check of this subject carries."""
    return tuple(m for m, prefix in OPT_IN_SUBJECT.items() if subject.startswith(prefix))


# the metric on a check an emulated device cannot answer (skipped: only the device itself can);
# the report counts those apart from the checks a column ran
CANNOT_TELL = "emulation_cannot_tell"


class RecordKind:
    """``metrics.record_kind`` of a special record, which the report treats apart."""
    SEED_003_PATH = "seed-003-path"   # seed 003's cumulative optimization path: metrics.rows, one per row
    KNOWN_BUG = "known-bug"           # a reported accelerator bug's check: metrics.known_bug, issue, reported
    REPEATABLE = "repeatable"         # a known-bug case rerun for the same bits: metrics.known_bug, runs
    KNOWN_BUGS = (KNOWN_BUG, REPEATABLE)
    CONTROL = "control"               # a suite's control (<suite>/controls/<name>): metrics.control, expected, seen


class ClaimKind:
    """What an optimization claim says of ratio = variant / baseline (``metrics.kind``)."""
    LOWER = "lower"                   # strictly below the bound: a reduction
    NOT_HIGHER = "not-higher"         # at most the bound: a cost within it
    NONE = "none"                     # the source makes no claim
    ALL = (LOWER, NOT_HIGHER, NONE)


# --------------------------------------------------------------------------- what a judge says

@dataclasses.dataclass(frozen=True)
class Verdict:
    """Every suite's judge returns one; ``record.conclude`` (harness.plugin.record) keeps its
    category, metrics and message on the record and ends the test as its status says."""
    status: str
    category: str | None = None      # the record's category; None: as it is
    message: str = ""
    metrics: dict = dataclasses.field(default_factory=dict)
    cause: str | None = None         # why it failed, where a judge knows (harness.parity.numerics.causes)

    def __post_init__(self):
        if self.status not in Status.VERDICTS:
            raise ValueError(f"unknown verdict status {self.status!r}; one of {', '.join(Status.VERDICTS)}")
        if self.category is not None and self.category not in ALL_CATEGORIES:
            raise ValueError(f"unknown category {self.category!r}; one of {', '.join(ALL_CATEGORIES)}")


# --------------------------------------------------------------------------- a check's id

@dataclasses.dataclass(frozen=True)
class Identity:
    suite: str
    subject: str
    variant: str
    target: str | None

    @property
    def check(self) -> str:
        return "/".join(p for p in (self.suite, self.subject, self.variant) if p)


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
    return place(rec.get("target") or "any", workload_of(rec))


def place(target: str, workload: str | None) -> str:
    """A target and, when there is one, its workload, as ``target_of`` words them."""
    return f"{target} [{workload} workload]" if workload else target


# --------------------------------------------------------------------------- a record's fields

# Every record's fields and their types (the reader refuses a record without them).
FIELDS = {"check": str, "suite": str, "subject": str, "variant": str, "target": (str, type(None)),
          "status": str, "category": (str, type(None)), "metrics": dict, "reason": str,
          "duration_s": (int, float)}
REASON_MAX = 600


def first_line(text: str | None) -> str:
    """A record's reason: the first line of ``text``, at most REASON_MAX characters."""
    text = (text or "").strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= REASON_MAX else line[:REASON_MAX - 1] + "…"


SEEN_KEPT = 200   # what a failing check saw keeps at least this much of its reason (with_cause)


def with_cause(seen: str, found: dict) -> str:
    """A failure's reason: what this check saw first, then its cause in words and the switch
    that changes it (``found``: the metrics cause_what and switch, which keep both whole).

    What was seen leads because a reason is cut at REASON_MAX characters, and a cause's words
    are long (the non-finite one and its switch alone take some 500): put after them, the
    sample, the count and what differs were cut off in every record of that cause. A long
    account of what was seen (a model's diverged gradients, one by one) is itself cut to leave
    the cause and its switch room, but never below SEEN_KEPT characters."""
    told = "; ".join(part for part in (found.get("cause_what"), found.get("switch")) if part)
    if not (seen and told):
        return seen or told
    room = max(REASON_MAX - len(told) - 2, SEEN_KEPT)
    return f"{seen if len(seen) <= room else seen[:room - 1] + '…'}; {told}"


def without_cause(reason: str, metrics: dict) -> str:
    """``reason`` without its cause's words and switch, for a table that gives them once per
    cause. A reason written by ``with_cause`` is cut where they begin (a prefix is enough: the
    end may have been cut at REASON_MAX); in an older one, which led with them or put them
    mid-sentence, the cause's words shrink to their first clause and the switch goes."""
    what, switch = metrics.get("cause_what") or "", metrics.get("switch") or ""
    if not isinstance(what, str) or not isinstance(switch, str) or not (what or switch):
        return reason
    lead = next((p for p in (what, switch) if p), "")[:40]
    at = reason.find("; " + lead)
    if at > 0:
        return reason[:at]
    if what:
        head = min((i for i in (what.find(": "), what.find(" (")) if i > 0), default=len(what))
        reason = reason.replace(what, what[:head])
    if switch:
        reason = reason.replace("; " + switch, "").replace(switch, "")
    return " ".join(reason.split()).replace(" .", ".").replace(" ;", ";").replace(";.", ".").replace(";:", ":")


def error_line(exc: BaseException, limit: int = REASON_MAX) -> str:
    """An exception as one line: its type and the first line of its message, and where a
    library asks this torch for a name it lacks, which library and what to change
    (harness.core.errors)."""
    return errors.one_line(exc)[:limit]


def strip_prefix(text: str, *prefixes: str) -> str:
    """``text`` without the first of ``prefixes`` it starts with."""
    for p in prefixes:
        if text.startswith(p):
            return text[len(p):]
    return text


def recorded_number(value) -> float | None:
    """A figure as a measurement returns it or a record keeps it, as a float: NaN and the
    infinities as ``json_safe`` spells them ("nan", "inf", "-inf") read back; None for
    anything else (absent, other text, a bool)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if value in _SPELT:
        return float(value)
    return None


def json_safe(value, depth: int = 0, limit: int = 6):
    """Plain JSON for a metric: NaN and infinities as strings, unknown objects by str().

    Metrics cross from an xdist worker to the controller and end in a JSON file; neither
    takes a torch.dtype or a float NaN as it is. Objects and lists nested deeper than
    ``limit`` are written as their str(): a metric is a few levels deep, and anything deeper
    is no measurement. A report, whose document holds whole records several levels down
    (harness.report.render.json_text), passes a deeper limit, so that its metrics stay JSON.
    """
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < limit and isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1, limit) for k, v in value.items()}
    if depth < limit and isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1, limit) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        try:
            return json_safe(value.item(), depth + 1, limit)
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def validate(record: dict) -> str | None:
    """What is wrong with a check record, in one phrase; None when it keeps the contract:
    its fields (FIELDS) and the metrics the readers take as objects, lists, text or numbers
    (METRICS), of the types they are read as. A record that breaks it is skipped by the
    reader, which names the file, the line and this phrase."""
    for name, types in FIELDS.items():
        if name not in record:
            return f"record lacks field {name!r}"
        allowed = types if isinstance(types, tuple) else (types,)
        if not isinstance(record[name], allowed) or (isinstance(record[name], bool) and bool not in allowed):
            return f"field {name!r} has type {type(record[name]).__name__}"
    if record["status"] not in Status.ALL:
        return f"unknown status {_quoted(record['status'])}"
    notes: list[str] = []
    _conform(record["metrics"], METRICS, "metrics", notes)
    if not notes and record["metrics"].get("rows"):   # seed 003's path (a schema-1 record names no kind yet)
        notes += _path_base_problems(record["metrics"]["rows"])
    if notes:
        return f"field {notes[0]}" + (f" (and {len(notes) - 1} more)" if len(notes) > 1 else "")
    return None


# --------------------------------------------------------------------------- the types the readers rely on
#
# A run file is data from anywhere (an older version, a file edited by hand, a disk error):
# the readers take a header's facts and a record's metrics as the types written below and
# nothing else, so one value of another type never takes a report or a comparison down.
# A spec is a type, a tuple of specs (any of them), ``Of`` (a list or object of items of one
# spec), ``Shape`` (an object whose named fields keep their specs; the others are free, as a
# reader ignores what it does not know) or NUMBER.

class Of:
    """A list (``container`` list) whose every item, or an object (dict) whose every value,
    keeps ``item``."""

    def __init__(self, container: type, item):
        self.container, self.item = container, item


class Shape:
    """An object whose named fields, where present, keep their specs; ``required`` must be
    present."""

    def __init__(self, fields: dict, required: tuple[str, ...] = ()):
        self.fields, self.required = fields, required


class _Number:
    """A number, never a bool. With ``spelt``: a finite one, or NaN or an infinity as json_safe
    spells them ("nan", "inf", "-inf"), the way the harness writes them; the literals NaN and
    Infinity, which Python's json reads but the harness never writes, are refused there (the
    readers compute with these figures: an interval's bounds, a median's ratio)."""

    def __init__(self, spelt: bool):
        self.spelt = spelt


NUMBER = _Number(spelt=True)
REAL = _Number(spelt=False)     # any number (seed 003's rows, divided by the first: checked apart)
_SPELT = ("nan", "inf", "-inf")
_NONE = type(None)


def _words(spec) -> str:
    """What a spec asks for, in words: "an object", "text or null"."""
    if isinstance(spec, tuple):
        return " or ".join(dict.fromkeys(_words(s) for s in spec))
    if isinstance(spec, _Number):
        return 'a finite number or "nan", "inf", "-inf"' if spec.spelt else "a number"
    if isinstance(spec, Shape):
        return "an object"
    if isinstance(spec, Of):
        return "a list" if spec.container is list else "an object"
    return {str: "text", int: "a whole number", float: "a number", bool: "true or false", dict: "an object",
            list: "a list", _NONE: "null"}.get(spec, spec.__name__)


def _what(value) -> str:
    """What a value is, in the same words."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return f"the literal {json.dumps(value)}"
    if isinstance(value, str):
        return "empty text" if not value else "text"
    return {int: "a whole number", float: "a number", dict: "an object", list: "a list",
            _NONE: "null"}.get(type(value), type(value).__name__)


def _quoted(value, limit: int = 60) -> str:
    """A value for a message, bounded: a field of a run file can be any length."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


_BAD = object()


def _key(name) -> str:
    """A data key in a path, bounded and with no control character (repr where it is odd)."""
    return name if isinstance(name, str) and len(name) <= 40 and name.isprintable() else _quoted(name, 40)


def _conform(value, spec, where: str, notes: list[str]):
    """``value`` as ``spec`` asks, or _BAD when it is of another kind, said in ``notes`` (one
    phrase each, naming its path: ``facts.torch.cuda_devices[0].name``). Inside an object or
    a list, a part of another kind is left out and said; a required field that is missing or
    of another kind makes its object _BAD."""
    before = len(notes)
    kept = _fit(value, spec, where, notes)
    if kept is _BAD and len(notes) == before:
        notes.append(f"{where} is {_what(value)}, not {_words(spec)}")
    return kept


def _fit(value, spec, where: str, notes: list[str]):
    if isinstance(spec, tuple):
        for s in spec:   # a plain type first: None or text where an object may also stand
            if not isinstance(s, (Shape, Of)) and _fit(value, s, where, []) is not _BAD:
                return value
        for s in spec:
            if isinstance(s, (Shape, Of)) and isinstance(value, dict if isinstance(s, Shape) else s.container):
                return _fit(value, s, where, notes)
        return _BAD
    if isinstance(spec, _Number):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return value if not spec.spelt or math.isfinite(value) else _BAD
        return value if spec.spelt and value in _SPELT else _BAD
    if isinstance(spec, Shape):
        if not isinstance(value, dict):
            return _BAD
        missing = [name for name in spec.required if name not in value]
        if missing:
            notes.append(f"{where} lacks {missing[0]}")
            return _BAD
        out = {}
        for name, part in value.items():
            sub = spec.fields.get(name)
            if sub is None:
                out[name] = part
                continue
            kept = _conform(part, sub, f"{where}.{name}", notes)
            if kept is _BAD and name in spec.required:
                return _BAD
            if kept is not _BAD:
                out[name] = kept
        return out
    if isinstance(spec, Of):
        if not isinstance(value, spec.container):
            return _BAD
        if spec.container is list:
            return [kept for i, part in enumerate(value)
                    if (kept := _conform(part, spec.item, f"{where}[{i}]", notes)) is not _BAD]
        return {name: kept for name, part in value.items()
                if (kept := _conform(part, spec.item, f"{where}.{_key(name)}", notes)) is not _BAD}
    if isinstance(value, spec) and not (isinstance(value, bool) and spec in (int, float)):
        return value
    return _BAD


# Seed 003's path, one row per step: the report divides each row by the first (harness.report.sections,
# harness.optim.seedpath.time_cell), so the first row's peak and step time must be positive numbers.
PATH_ROW = Shape({"row": str, "peak_bytes": REAL, "step_s": REAL, "time_ratio": REAL, "ci_low": (REAL, _NONE),
                  "ci_high": (REAL, _NONE), "loss": (NUMBER, _NONE)}, required=("row", "peak_bytes", "step_s"))

# The metrics the report and compare read as objects, lists, text or numbers (a metric not
# named here is shown as it is and never dereferenced). A name means one thing in every suite
# it is written in (``bound`` is not here: a claim's is a number, a parity model's a list).
METRICS = Shape({
    "record_kind": str,
    "workload": (str, _NONE),
    "fallback_ops": Of(list, str),
    "predicted_without_mps_kernel": Of(list, str),
    "ops": dict,
    "known_bug": str,
    "control": str,
    "expected": str,
    "seen": str,
    "cpu_finding": dict,
    "trends": Of(dict, Shape({"verdict": str, "growth_bytes": NUMBER, "per_step_bytes": NUMBER, "ci_low": NUMBER,
                              "ci_high": NUMBER, "tolerance_bytes": NUMBER})),
    "given_back": Of(dict, NUMBER),
    "lengths": (list, str),
    "rows": Of(list, PATH_ROW),
    **{name: (NUMBER, _NONE) for name in ("ci_low", "ci_high", "median_s", "per_shape_s", "seen_s", "mem_ratio",
                                          "time_ratio", "per_second", "import_s", "warm_s", "control_s", "loss_a",
                                          "loss_b")},
    "ratio_category": str,
})


def _path_base_problems(rows: list) -> list[str]:
    """Seed 003's path divides by its first row: a first row with no positive peak or step time
    cannot be drawn."""
    base = rows[0]
    return [f"metrics.rows[0].{name} is {_quoted(base[name])}, not a positive number"
            for name in ("peak_bytes", "step_s") if not base[name] > 0]


# A run's header: its fields, the facts of the machine (harness.env.facts.collect) and their
# sub-fields, as the report, the verdicts and compare read them.
_TEXT = (str, _NONE)
_COUNT = (int, _NONE)
FACTS = Shape({
    "facts_schema": int,
    "host": str,
    "python": Shape({"version": str, "implementation": _TEXT, "executable": _TEXT, "arch": _TEXT, "bits": _COUNT}),
    "os": Shape({"system": _TEXT, "release": _TEXT, "machine": _TEXT, "platform": _TEXT}),
    # proc_translated / hw_arm64: null where sysctl could not be read (then ``unreadable`` says why)
    "mac": (_NONE, Shape({"version": _TEXT, "proc_translated": (bool, _NONE), "hw_arm64": (bool, _NONE),
                          "chip": _TEXT, "model": _TEXT, "gpu_cores": _COUNT, "memory_bytes": _COUNT,
                          "unreadable": Of(dict, str)})),
    "cpu": Shape({"model": _TEXT, "logical": _COUNT, "usable": _COUNT}),
    "nvidia_driver": _TEXT,
    "packages": Of(dict, _TEXT),
    "torch": Shape({"importable": bool, "error": _TEXT, "version": _TEXT, "cuda_available": bool,
                    "mps_available": bool, "mps_built": bool,
                    "cuda_devices": Of(list, Shape({"name": _TEXT, "total_memory": (NUMBER, _NONE),
                                                    "capability": list}))}),
    "tokenizers": dict,
    "env": Of(dict, _TEXT),
    "suite_revision": _TEXT,
})
HEADER = Shape({
    "env_id": str,
    "started": str,
    "facts": FACTS,
    "judges": Of(dict, int),
    "targets": Of(dict, Shape({"selected": bool, "available": bool, "reason": _TEXT})),
    "mps_fallback": Shape({"setting": _TEXT, "source": _TEXT}),
    "selection": Shape({"markexpr": _TEXT, "keyword": _TEXT, "args": Of(list, str), "selected": _COUNT, "collected": _COUNT,
                        "deselected": _COUNT}),
    "pytest_args": Of(list, str),
})
# Without these a header names no run the report can place: it is skipped, with its records.
HEADER_NEEDS = ("env_id", "facts")


def check_header(header: dict) -> tuple[dict | None, list[str]]:
    """A run header as the readers may take it, and what was wrong with it, one phrase each.

    A field of another type than HEADER says is left out where the readers do without it (a
    fact, a target's entry, the start time), and said; an ``env_id`` or ``facts`` of another
    kind leaves nothing to place the run by: (None, the phrase), and the reader skips the
    header and its records."""
    for name in HEADER_NEEDS:
        if name in header and _fit(header[name], HEADER.fields[name], name, []) is _BAD:
            return None, [f"header field {name} is {_what(header[name])}, not {_words(HEADER.fields[name])}: "
                          "this run's header and records are skipped"]
    if not isinstance(header.get("facts"), dict):
        return None, ["header has no facts: this run's header and records are skipped"]
    notes: list[str] = []
    kept = _conform(header, HEADER, "header", notes)
    return kept, [f"header field {note.removeprefix('header.')}: left out" for note in notes]


def kind_of(record: dict) -> str | None:
    """A (migrated) record's special kind (RecordKind), or None for an ordinary check."""
    return (record.get("metrics") or {}).get("record_kind")


def judge_of(record: dict, header: dict | None = None) -> int | None:
    """The revision of the judge that wrote ``record`` (JUDGES), None for a suite without one.
    A header written before JUDGES existed says nothing: a parity record of an accelerator
    is then revision 1 when it was judged against the CPU in the same dtype (``reference``
    "cpu" for an op, "cpu-float32" for a model; no ``accuracy_source``), the current revision
    otherwise."""
    suite = record.get("suite")
    if suite not in JUDGES:
        return None
    said = ((header or {}).get("judges") or {}).get(suite)
    if isinstance(said, int) and not isinstance(said, bool):
        return said
    metrics = record.get("metrics") or {}
    if (suite == "parity" and record.get("target") not in (None, "cpu") and "accuracy_source" not in metrics
            and metrics.get("reference") in ("cpu", "cpu-float32")):
        return 1
    return JUDGES[suite]


# --------------------------------------------------------------------------- reading older files

PATH_SUBJECT = "seed_003_path_never_raises_peak_memory"   # the test that wrote seed 003's path in schema 1


def update_to_2(record: dict) -> dict:
    """Schema 1 -> 2: name the special records' kind, which schema 1 left to the test's name
    (seed 003's path) or to the variant (the known-bug checks, written by schema 1 too)."""
    metrics = dict(record.get("metrics") or {})
    if "record_kind" not in metrics:
        variant = record.get("variant") or ""
        if record.get("suite") == "optim" and record.get("subject") == PATH_SUBJECT:
            metrics["record_kind"] = RecordKind.SEED_003_PATH
        elif metrics.get("known_bug"):
            metrics["record_kind"] = (RecordKind.REPEATABLE if variant.endswith("/repeatable")
                                      else RecordKind.KNOWN_BUG)
    return {**record, "metrics": metrics}


MIGRATIONS: dict[int, Callable[[dict], dict]] = {2: update_to_2}


def readable(schema) -> bool:
    return isinstance(schema, int) and not isinstance(schema, bool) and 1 <= schema <= SCHEMA


def migrate(record: dict, schema: int) -> dict:
    """A record of ``schema`` as a record of today's SCHEMA."""
    for n in range(schema + 1, SCHEMA + 1):
        record = MIGRATIONS[n](record)
    return record
