"""One verdict per column (machine x torch x target): what the user reads first.

Each column of the matrix is judged on what a user acts on, in six aspects:

  environment            fit or not for this target (the env suite), and the fix when not
  ops                    how many ran natively, fell back to the CPU (which ops), are unsupported
  numerics               real failures by cause; findings about the CPU apart; records of an
                         older judge judged again from their metrics (harness.parity.numerics.rejudge)
  optimizations          which documented optimizations help here and by how much, which do not
  known bugs             reported accelerator bugs this machine has
  against the baseline   what regressed (only with a baseline)

and, where the column ran controls (checks whose answer is known in advance, run on the device
first), its instruments: a failed control marks the column "instrument not trustworthy here",
first in its headline, and shows the verdicts of that suite as unconfirmed (never good); controls
that all passed say so; an aspect measured by a suite none of whose controls passed or failed
here (an older run file, controls deselected) is not good either: "unchecked", a warning, and
the verdict's note says why.

Every count comes from ``classify`` of the matrix's cells, the one source for the verdicts,
the page's sections, matrix.md and matrix.json. The terminal's end summary reads the same
verdicts for the run that just ended (``for_records``). A reason a line quotes is cut at a
few hundred characters (harness.report.matrix.shown); the record in matrix.json keeps it whole.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Collection

from harness.core import errors, models, records, runfiles
from harness.core.records import Category, ClaimKind, RecordKind, Status
from harness.env import fitness
from harness.ops import opsweep
from harness.optim import same_result
from harness.optim.claims import ANY_REDUCTION_SRC, part_of
from harness.parity import compiled
from harness.parity.numerics import causes, rejudge
from harness.perf import against
from harness.report import selection
from harness.report.matrix import (UNTRUSTED_WORDS, Column, Instruments, Matrix, build, cell_key,
                                   instruments_of, is_control, is_emulated, listed as _list, shown, unchecked_of,
                                   visible)

GOOD, WARN, BAD, NONE = "good", "warn", "bad", "none"
SPEED_AGAINST = "speed-and-memory-against-the-baseline"   # the section a slowdown seen once links to
STATES = (BAD, WARN, GOOD, NONE)          # worst first
SYMBOLS = {GOOD: "OK", WARN: "!!", BAD: "XX", NONE: "--"}   # plain ASCII, for the terminal and Markdown
# the Markdown page's key to them (the HTML page spells them as its badges)
SYMBOL_KEY = ("`XX` bad (not fit, a check failed, numbers wrong, a known bug present, a regression, an instrument "
              "that failed its control); `!!` worth a look (ops that fall back or are unsupported, claims that do "
              "not hold, known limitations, verdicts unconfirmed or measured through unchecked instruments); `OK` "
              "none of those; `--` not run here.")


@dataclasses.dataclass
class Aspect:
    name: str             # instruments | environment | ops | numerics | optimizations | known bugs |
                          # speed and memory | against the baseline
    state: str            # good | warn | bad | none (not run here)
    line: str             # one line in the user's words: what is so, and the switch when it is bad
    detail: list[str] = dataclasses.field(default_factory=list)   # what the line counts (ops, causes), complete
    anchor: str = ""      # the section of the page that has the records behind the line
    short: str = ""       # the headline's words for this aspect ("" to leave it out of the headline)


@dataclasses.dataclass
class Verdict:
    column_id: str        # harness.report.matrix.Column.id
    title: str            # machine, torch and target: "NVIDIA H100 80GB HBM3 · torch 2.11.0 · cuda"
    machine: str          # the machine in full: host, chip or GPU with memory, CPU, OS
    state: str            # the worst of the aspects'
    headline: str         # the verdict in one line
    aspects: list[Aspect]
    partial: str = ""     # "" for a complete run; else what was selected and which targets were absent
    older_judge: str = "" # "" unless records here were written by an older judge, and what the report did
    instruments_note: str = ""   # "" unless no control ran here (instruments unchecked), and why


# ----------------------------------------------------------------------------- one record

PROBLEMS = (*Status.BAD, Status.XPASS, Category.UNSUPPORTED, Category.DOES_NOT_HOLD)   # cell keys to act on (FINDINGS)
BROKEN = Status.BAD                                             # cell keys of a check that ran and did not hold
UNDETERMINED = "cause not determined"
CONTROL_FAILED = "an instrument failed its control"   # the cause of a failed control (matrix.is_control)

# What a user must act on, by kind (``finding_of``), in the order the page lists them.
FINDINGS = (
    ("fails", "checks that fail: the machine or the setup is wrong; each reason names the cause and the switch"),
    ("crash / timeout", "checks that crashed or hung: a kernel bug to report with the record"),
    ("known bugs present", "reported accelerator bugs this machine has (the known-bugs section)"),
    ("unsupported ops", "ops with no kernel and no fallback on this target"),
    ("unexpected passes", "checks that pass against an expectation of failure: an expectation to update"),
    ("claims that do not hold", "documented optimizations that did not do what the document says here"),
)


def finding_of(rec: dict) -> str | None:
    """What a user must act on in this record (a kind of FINDINGS), None when nothing."""
    key = cell_key(rec)
    if records.kind_of(rec) in RecordKind.KNOWN_BUGS and key in PROBLEMS:
        return "known bugs present"
    if key in (Status.CRASH, Status.TIMEOUT):
        return "crash / timeout"
    if key in (Status.FAIL, Status.ERROR):
        return "fails"
    return {Category.UNSUPPORTED: "unsupported ops", Status.XPASS: "unexpected passes",
            Category.DOES_NOT_HOLD: "claims that do not hold"}.get(key)


def cause_of(rec: dict) -> str:
    """Why a broken check broke, as the failure groups name it: the cause its judge or its
    reruns found (harness.parity.numerics.causes), a crash or timeout, an error of the check
    itself; UNDETERMINED otherwise, never dropped."""
    met = rec.get("metrics") or {}
    key = cell_key(rec)
    if is_control(rec) and key in BROKEN:
        return CONTROL_FAILED
    cause = met.get("cause")
    if isinstance(cause, str) and cause and cause != "unexplained":
        return cause + (" (suspected)" if met.get("cause_suspected") else "")
    if key in (Status.CRASH, Status.TIMEOUT):
        return {Status.CRASH: "crashed", Status.TIMEOUT: "timed out"}[key]
    if key == Status.ERROR:
        return CHECK_ERRORED
    if cause == "unexplained":
        return "unexplained by any rerun (the kernel itself)"
    return error_cause(rec).get("cause", UNDETERMINED)


OP_RAISED = "the op raised: "   # the cause of an op check whose op raised, its error's first line after it
CHECK_ERRORED = "the check itself errored"


def error_cause(rec: dict) -> dict:
    """The cause, what happened and switch of a broken check whose record names no cause but
    whose reason is an error the harness knows: a library asking torch for a name it lacks
    (harness.core.errors.gap_metrics), a pretrained model whose files are missing
    (harness.core.models.missing_files: the H100's MiniLM checks, "the audit itself failed:
    OSError: Error no file named model.safetensors ..."), or an op check whose op raised on
    its target (category error: "the op raised: " and the error's first line, so the checks
    one error broke are one group). {} for any other record: it stays UNDETERMINED."""
    reason = rec.get("reason") or ""
    found = errors.gap_metrics(reason) or models.missing_files(reason)
    if found or rec.get("suite") != "ops" or rec.get("category") != Category.ERROR:
        return found
    line = records.first_line(reason.removeprefix(f"{Category.ERROR}: "))
    if not line or line.startswith(opsweep.ITSELF_FAILED):   # the sandbox's, not the op's
        return {"cause": CHECK_ERRORED} if line else {}
    target = rec.get("target") or "this target"
    switch = "report it to PyTorch with the op, the dtype and this error (the check's id names them)"
    if target == "mps" or is_emulated(target):
        switch += ("; PYTORCH_ENABLE_MPS_FALLBACK=1 does not help: the fallback sends to the CPU only ops that have "
                   "no MPS kernel, and this one has one. Until it is fixed, compute that op on the CPU (x.cpu())")
    return {"cause": OP_RAISED + line,
            "cause_what": f"the op raised this on {target}: it has a kernel there for this dtype (an op without one "
                          "is counted unsupported), and that kernel rejected these inputs or failed on them",
            "switch": switch}


def _cause_words(rec: dict, cause: str) -> tuple[str, str]:
    """(what happened, the switch that changes it) for a failure group."""
    met = rec.get("metrics") or {}
    if met.get("cause_what") or met.get("switch"):
        return met.get("cause_what") or "", met.get("switch") or ""
    name = cause.removesuffix(" (suspected)")
    if name in causes.CAUSES:
        target = rec.get("target") or ""
        kind = "mps" if is_emulated(target) else {"cpu": "cpu", "cuda": "cuda", "mps": "mps"}.get(target, "stand-in")
        said = causes.describe(name, kind, _dtype(rec))
        what, switch = said.get("cause_what", ""), said.get("switch", "")
        if cause.endswith("(suspected)"):
            what = "suspected from an older judge's metrics: " + what
        return what, switch
    found = error_cause(rec)
    if found.get("cause") == cause and found.get("cause_what"):
        return found["cause_what"], found["switch"]
    return {
        CONTROL_FAILED: ("a check whose answer is known in advance gave another on this device: the suite's "
                         "instrument cannot be trusted here, and its other verdicts in this column are unconfirmed",
                         "read the control's reason (it names the switch); rerun the suite once the control passes"),
        "crashed": ("the process died in the check", "report it to PyTorch with the record (op, dtype, shape)"),
        "timed out": ("the check ran past its time limit", "--check-timeout SECONDS raises the limit; a hang is a "
                                                           "bug to report"),
        CHECK_ERRORED: ("the check's own code raised, not the op", "see the reason; report it to mps-compat"),
    }.get(cause, ("no rerun named a cause; each record's reason says what was seen",
                  "read the reason of each check; rerun with today's judge where the record is older"))


DTYPES = ("float32", "float16", "bfloat16", "complex64", "float64", "int64", "int32", "uint8", "bool")


def dtype_of(rec: dict) -> str:
    met = rec.get("metrics") or {}
    if met.get("dtype"):
        return str(met["dtype"]).removeprefix("torch.")
    parts = [p for part in (rec.get("variant") or "").split("/") for p in part.split("-")]
    return next((p for p in parts if p in DTYPES), "float32")



def _dtype(rec: dict) -> str:
    return dtype_of(rec)


FAMILY_PREFIXES = ("nn.functional", "linalg", "special", "fft", "masked", "sparse", "signal")


def family_of(rec: dict) -> str:
    """The family a check belongs to: for an op, its namespace (nn.functional, linalg, ...,
    torch); a compiled op or model, torch.compile; else the kind of check (models,
    attention, known bugs, claims ...)."""
    kind = records.kind_of(rec)
    if kind in RecordKind.KNOWN_BUGS:
        return "known bugs"
    if is_control(rec):
        return "controls"
    check, subject = rec.get("check", ""), rec.get("subject") or ""
    if subject.startswith(compiled.PREFIX):   # an op or a model under torch.compile against eager
        return "torch.compile"
    if subject.startswith("model") or "model" in (rec.get("metrics") or {}):
        return "models"
    if rec.get("suite") in ("parity", "ops") and check.count("/") >= 2:
        return next((p for p in FAMILY_PREFIXES if subject.startswith(p + ".")), "torch ops")
    return rec.get("suite") or "other"


@dataclasses.dataclass
class FailureGroup:
    cause: str
    what: str
    switch: str
    checks: list[str]                 # check ids, in the order of the records
    columns: list[str] = dataclasses.field(default_factory=list)   # the column of each check, where known


def failure_groups(recs: list[dict] | list[tuple[str, dict]]) -> list[FailureGroup]:
    """Broken checks (fail, error, crash, timeout) grouped by ``cause_of``, biggest group first,
    UNDETERMINED last. ``recs``: records, or (column label, record) pairs."""
    groups: dict[str, FailureGroup] = {}
    words: dict[str, dict[tuple[str, str], str]] = {}   # cause -> each record's (what, switch) -> its dtype
    for item in recs:
        where, rec = item if isinstance(item, tuple) else ("", item)
        if cell_key(rec) not in BROKEN:
            continue
        cause = cause_of(rec)
        said = _cause_words(rec, cause)
        if cause not in groups:
            groups[cause] = FailureGroup(cause, *said, [], [])
        words.setdefault(cause, {}).setdefault(said, _dtype(rec))
        groups[cause].checks.append(rec.get("check", "?"))
        groups[cause].columns.append(where)
    for cause, seen in words.items():
        if len(seen) > 1:   # one cause in several dtypes: its words name each, not the first one's alone
            groups[cause].what, groups[cause].switch = _words_of_dtypes(cause, seen)
    return sorted(groups.values(), key=lambda g: (g.cause == UNDETERMINED, -len(g.checks), g.cause))


def _words_of_dtypes(cause: str, seen: dict[tuple[str, str], str]) -> tuple[str, str]:
    """(what happened, the switch) of a group whose records say them for several dtypes
    (float16 and bfloat16 checks failing for one cause): the table's words with the dtypes
    named together, and each distinct switch; without a table entry, each record's words."""
    dtypes = list(dict.fromkeys(d for d in seen.values() if d))
    switches = list(dict.fromkeys(switch for _, switch in seen if switch))
    name = cause.removesuffix(" (suspected)")
    if name in causes.CAUSES and dtypes:
        what = causes.CAUSES[name].what.format(dtype=" or ".join(dtypes))
        if cause.endswith("(suspected)"):
            what = "suspected from an older judge's metrics: " + what
    else:
        what = "; ".join(dict.fromkeys(w for w, _ in seen if w))
    return what, "; ".join(switches)


def has_bug(rec: dict) -> str:
    """Whether the column shows the reported bug, in words."""
    status, category = rec.get("status"), rec.get("category")
    if status == Status.PASS:
        return "no"
    if status == Status.SKIP:
        return "not run"
    if status in (Status.CRASH, Status.TIMEOUT):
        return f"{status} (a crash or hang in the op: report it with this shape)"
    if category == Category.RAISES:
        return "yes: raises"
    if category == Category.UNREPEATABLE:
        return "yes: other bits on a rerun"
    met = rec.get("metrics") or {}
    if met.get("cause") not in (None, "unexplained"):
        return f"no, but differs: {met['cause']}"
    return "yes: wrong result" + (" (intermittent)" if met.get("intermittent") else "")



# ----------------------------------------------------------------------------- one column


def _n(count: int, one: str, many: str | None = None) -> str:
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def _environment(recs: list[dict], target: str) -> Aspect:
    env = [r for r in recs if r.get("suite") == "env"]
    ran = [r for r in env if r["status"] != Status.SKIP]
    if not ran:
        why = shown(next((r.get("reason") for r in env if r.get("reason")), ""))
        return Aspect("environment", NONE, f"not checked here{': ' + why if why else ''} (./compat suites -m env "
                                           "checks it in seconds)", anchor="environments", short="")
    bad = [r for r in ran if cell_key(r) in BROKEN]
    if bad:
        first = shown(bad[0].get("reason") or bad[0]["check"])
        return Aspect("environment", BAD, f"not fit for {target}: {first}" + (f" (and {len(bad) - 1} more)"
                                                                                if len(bad) > 1 else ""),
                      [f"{r['check']}: {shown(r.get('reason') or cell_key(r))}" for r in bad], "environments",
                      short=f"NOT FIT ({bad[0]['check']})")
    limits = [r for r in ran if cell_key(r) == Status.XFAIL]
    line = f"fit for {target}: {_n(len(ran) - len(limits), 'check')} pass"
    # a fact the machine would not give (sysctl unreadable: harness.env.fitness's "cannot tell")
    # is no limitation of the versions: said as what it is, with how to read it by hand below
    untold = [r for r in limits if (r.get("reason") or "").startswith("cannot tell")]
    known = [r for r in limits if r not in untold]
    if limits:
        said = ([_n(len(known), 'known limitation')] if known else []) + (
            [f"{len(untold)} cannot tell (a fact this machine would not give: {', '.join(r['check'] for r in untold)})"]
            if untold else [])
        return Aspect("environment", WARN, line + ", " + ", ".join(said),
                      [f"{r['check']}: {shown(r.get('reason'))}" for r in limits], "environments",
                      short="fit, with limitations" if known else "fit, some facts unread")
    return Aspect("environment", GOOD, line, anchor="environments", short="fit")


def _untold(recs: list[dict], suite: str) -> int:
    """How many of a suite's checks an emulated device could not answer (skipped with
    emulation_cannot_tell: the CPU underneath lacks what the device has, or takes a path the
    device may not)."""
    return sum(1 for r in recs if r.get("suite") == suite and r["status"] == Status.SKIP
               and (r.get("metrics") or {}).get(records.CANNOT_TELL))


def _ops(recs: list[dict], target: str) -> Aspect:
    ops = [r for r in recs if r.get("suite") == "ops" and r["status"] != Status.SKIP]
    untold = _untold(recs, "ops")
    if not ops:
        return Aspect("ops", NONE, "not run here (pytest suites/ -m ops)", anchor="ops")
    keys = Counter(cell_key(r) for r in ops)
    native = sum(1 for r in ops if cell_key(r) in (Status.PASS, Status.XPASS) and r.get("category") == Category.NATIVE)
    fallback_ops = sorted({op for r in ops if cell_key(r) == Category.CPU_FALLBACK
                           for op in ((r.get("metrics") or {}).get("fallback_ops") or [])})
    unsupported = sorted({r.get("subject") or r["check"] for r in ops if cell_key(r) == Category.UNSUPPORTED})
    broken = [r for r in ops if cell_key(r) in BROKEN]
    fell = keys.get(Category.CPU_FALLBACK, 0)
    parts = [f"{native:,} native", f"{fell:,} {'falls' if fell == 1 else 'fall'} back to the CPU",
             f"{keys.get(Category.UNSUPPORTED, 0):,} unsupported"]
    if broken:
        parts.append(f"{len(broken):,} {'fails or errors' if len(broken) == 1 else 'fail or error'}")
    detail = []
    if fallback_ops:
        detail.append("ops that ran on the CPU: " + ", ".join(fallback_ops))
    if unsupported:
        detail.append("unsupported: " + ", ".join(unsupported))
    detail += [f"{r['check']}: {shown(r.get('reason') or cell_key(r))}" for r in broken]
    state = BAD if broken else WARN if (fallback_ops or unsupported or keys.get(Category.CPU_FALLBACK)) else GOOD
    short = f"ops {native:,} native"
    if fell:   # and which ops, those most of its checks ran on the CPU first
        by_checks = Counter(op for r in ops if cell_key(r) == Category.CPU_FALLBACK
                            for op in set((r.get("metrics") or {}).get("fallback_ops") or []))
        named = [op for op, _ in sorted(by_checks.items(), key=lambda kv: (-kv[1], kv[0]))]
        short += f", {fell:,} {'falls' if fell == 1 else 'fall'} back" + (f" (ran on the CPU: {_list(named, 2)})" if named else "")
    if keys.get(Category.UNSUPPORTED):
        short += f", {keys[Category.UNSUPPORTED]:,} unsupported"
    if broken:   # and why, as the numbers' part says it
        short += f", {len(broken):,} {'fails' if len(broken) == 1 else 'fail'} ({_biggest(failure_groups(broken))})"
    run = f" (of {len(ops):,} op checks run" + (f"; {untold:,} more that only the device itself can answer: the "
                                                "CPU it is emulated on lacks the kernel or dtype, or takes a path a "
                                                "Mac may not)" if untold else ")")
    return Aspect("ops", state, ", ".join(parts) + run, detail, "ops", short)


def judged_wrong(rec: dict) -> bool:
    """Whether a broken parity check broke on its numbers (against float64, or a rerun that gave
    other bits), as opposed to one that broke before any number was judged: a compile that
    failed, a target that raised, a crash, a hang, the check's own error, a run that failed
    before its comparison (not rejudge.has_result: the H100's MiniLM checks, "the run itself failed:
    OSError: ... no file named model.safetensors", written under the parity category with no
    margin; a record of an older judge says so in its ``judged_again``, whose outcome is
    rejudge's classification of the record as it was written)."""
    if cell_key(rec) not in BROKEN:
        return False
    if rec.get("category") == Category.UNREPEATABLE:   # other bits on a rerun: no margin, yet numbers compared
        return True
    again = rec.get("judged_again")
    unjudged = again.get("outcome") == rejudge.NOT_A_RESULT if again else not rejudge.has_result(rec)
    return rec.get("category") == Category.PARITY and not unjudged


# Why a pass of an older parity judge is not today's: the checks that judge passed and today's
# failed on the same H100 and torch (tests/fixtures/recorded/h100-torch2.11 against
# h100-torch2.11-2026-11-24: 12 of 4,116) were NaN or inf on both sides where float64 has a
# number, which agreement with the CPU cannot see and no metric of that judge records.
OLDER_PASS = ("that judge compared with the CPU in the same dtype, where today's also asks float64's rules and "
              "finds NaN or inf where float64 has a number, which none of its metrics records: run the parity "
              "suite again to confirm them")


def older_pass(rec: dict) -> bool:
    """Whether a parity record is a pass (or an unexpected pass) an older judge wrote and the
    report kept as it was (harness.report.matrix.judged_again): its metrics cannot say what
    today's judge would (OLDER_PASS), so it is not counted as confirmed."""
    return (rec.get("judged_again") or {}).get("outcome") == "kept" and rec.get("status") in Status.WORKS


def wrong_on_the_cpu_too(rec: dict) -> bool:
    """Whether a device's NaN or inf is the CPU's too: every element the check found NaN or
    inf where float64 has a number (``non_finite``) is NaN or inf in the CPU's result of the
    same sample and dtype (``non_finite_on_cpu``, harness.parity.numerics.accuracy). Such a
    failure is the op's in that dtype, not the device's: moving to the CPU would not mend it.
    A record without the count (an older judge's, or the CPU's own) is not said to be."""
    met = rec.get("metrics")
    return isinstance(met, dict) and causes.non_finite_shared_with_cpu(met) is True


def kernel_switches(headers: list[dict], target: str) -> list[str]:
    """The MPS kernel switches (fast math, Metal matmul: harness.env.fitness.KERNEL_VARS) the
    runs of an mps column had on, as "NAME=value", each once; [] for any other target."""
    if target != "mps":
        return []
    facts = [h["facts"] for h in headers if isinstance(h.get("facts"), dict)]
    return list(dict.fromkeys(s for f in facts for s in fitness.kernel_switches(f.get("env"),
                                                                              (f.get("torch") or {}).get("version"))))


def _numerics(recs: list[dict], switches: list[str] = ()) -> Aspect:
    """``switches``: the MPS kernel switches the column's runs had on (``kernel_switches``):
    its numbers are of those kernels, and the line says so."""
    par = [r for r in recs if r.get("suite") == "parity" and r["status"] != Status.SKIP]
    if not par:
        return Aspect("numerics", NONE, "not run here (pytest suites/ -m parity)", anchor="parity")
    found_wrong = [r for r in par if judged_wrong(r)]
    groups = failure_groups(found_wrong)
    as_cpu = [r["check"] for r in found_wrong if wrong_on_the_cpu_too(r)]
    unrun = failure_groups([r for r in par if cell_key(r) in BROKEN and not judged_wrong(r)])
    wrong, failed = (sum(len(g.checks) for g in gs) for gs in (groups, unrun))
    rerun = [r["check"] for r in par if cell_key(r) == records.RERUN]
    unconfirmed = [r for r in par if older_pass(r)]
    cpu_side = sum(1 for r in par if causes.cpu_misses_float64((r.get("metrics") or {}).get("cpu_finding")))
    said = []
    if wrong:
        said.append(f"{_n(wrong, 'check')} wrong against float64: "
                    + "; ".join(f"{shown(g.cause)} {len(g.checks)}" for g in groups))
        if as_cpu:
            said[-1] += (f" ({'all' if len(as_cpu) == wrong else f'{len(as_cpu):,} of them'} NaN or inf where the "
                         f"CPU gives NaN or inf too: the op fails in that dtype on the CPU as well, not on this "
                         f"device alone)")
    if failed:
        said.append(f"{_n(failed, 'check')} failed before any number was judged: "
                    + "; ".join(f"{shown(g.cause)} {len(g.checks)}" for g in unrun))
    # Right: a pass of today's judge, nothing else. A known limitation (xfail) is a number known
    # to be off; an unexpected pass (xpass) is a number right where a failure was expected, an
    # expectation to update; a record of an older judge that today's cannot decide from its
    # metrics (rerun) is neither right nor wrong; an older judge's pass kept as it was is
    # unconfirmed. Each is said apart, none counted among the right.
    right = [r for r in par if r["status"] == Status.PASS and not older_pass(r)]
    surprises = [r for r in par if r["status"] == Status.XPASS and not older_pass(r)]
    limits = [r for r in par if r["status"] == Status.XFAIL]
    line = "; ".join(said) if said else (
        f"as right as the CPU: {_n(len(right), 'check')}, none wrong" if right else "none judged by today's rules")
    if surprises:
        line += (f"; {_n(len(surprises), 'unexpected pass', 'unexpected passes')} (right against float64 where a "
                 f"failure was expected: an expectation to update, said in each check's reason)")
    if limits:
        line += (f"; {_n(len(limits), 'known limitation')} (xfail: numbers known to be off, each reason says why "
                 f"and what would lift it)")
    if unconfirmed:
        line += (f"; {_n(len(unconfirmed), 'pass', 'passes')} of an older judge {'is' if len(unconfirmed) == 1 else 'are'} "
                 f"unconfirmed ({OLDER_PASS})")
    if rerun:
        line += f"; {len(rerun):,} of an older judge need a rerun to tell"
    if cpu_side:
        line += f"; the CPU was the less accurate side in {cpu_side:,} (findings about the CPU, not failures)"
    untold = _untold(recs, "parity")
    if untold:
        line += f"; {untold:,} more that only the device itself can answer (skipped on this emulated column)"
    if switches:
        line += (f"; this run had {fitness.switch_words(switches)}: run again without "
                 f"{' and '.join(s.split('=')[0] for s in switches)} before reading "
                 f"{'these failures' if wrong or failed else 'this'} as MPS's own")
    detail = [f"{shown(g.cause)} ({len(g.checks)}): {shown(g.switch)}" for g in groups + unrun]
    detail += [f"{shown(g.cause)}: {', '.join(g.checks)}" for g in groups + unrun]
    if as_cpu:
        detail.append("NaN or inf on the CPU too, at the same elements: " + ", ".join(as_cpu))
    if rerun:
        detail.append("run again for today's judge: " + ", ".join(rerun))
    if unconfirmed:
        detail.append(f"passed under an older judge, unconfirmed ({len(unconfirmed):,}): "
                      + _list((r["check"] for r in unconfirmed), 12))
    if surprises:
        detail.append(f"unexpected passes ({len(surprises):,}): " + _list((r["check"] for r in surprises), 12))
    if limits:
        detail.append(f"known limitations ({len(limits):,}): " + _list((r["check"] for r in limits), 12))
    state = BAD if wrong or failed else WARN if rerun or unconfirmed or surprises or limits else GOOD
    # what is wrong and why, on the first screen: the biggest causes with their counts
    on_cpu = "" if not as_cpu else "; all on the CPU too" if len(as_cpu) == wrong else f"; {len(as_cpu):,} on the CPU too"
    wrong_words = f"{wrong:,} numerically wrong ({_biggest(groups)}{on_cpu})"
    parts = ([wrong_words] if wrong else []) + (
        [f"{_n(failed, 'parity check')} failed to run ({_biggest(unrun)})"] if failed else [])
    # how many checks say so, on the first screen too: "numbers right" of a selection of 136
    # compiled checks is not the op sweep's
    # what is neither wrong nor right, beside them: the known limitations and unexpected passes
    # always (each is a warning); beside "numbers right", what that count leaves out and why
    notes = ([_n(len(surprises), "unexpected pass", "unexpected passes")] if surprises else []) + (
        [f"{_n(len(limits), 'known limitation')} (xfail)"] if limits else [])
    if not parts:
        if right:
            parts.append(f"numbers right in {_n(len(right), 'check')}")
        if rerun:
            notes.append(f"{len(rerun):,} undecided by an older judge (rerun to tell)")
        if unconfirmed:
            notes.append(f"{_n(len(unconfirmed), 'older pass', 'older passes')} unconfirmed" if right or notes
                         else "numbers unconfirmed (an older judge's passes)")
    short = ", ".join(parts + notes)
    return Aspect("numerics", state, line, detail, "failures-by-cause" if wrong or failed else "parity", short)


def _biggest(groups: list[FailureGroup], at_most: int = 2) -> str:
    """The first ``at_most`` causes of these failure groups as "cause count", and the checks of
    the rest: "tf32 3, reduced-precision 2, other 4". An op's own error is one cause here, "the
    op raised", whatever it said (its words are in the detail and the failure tables)."""
    counts: Counter = Counter()
    for g in groups:   # biggest first, as failure_groups sorts them
        counts[OP_RAISED.removesuffix(": ") if g.cause.startswith(OP_RAISED) else g.cause] += len(g.checks)
    causes_ = sorted(counts.items(), key=lambda kv: (kv[0] == UNDETERMINED, -kv[1]))   # as failure_groups
    named = ", ".join(f"{shown(cause)} {n:,}" for cause, n in causes_[:at_most])
    rest = sum(n for _, n in causes_[at_most:])
    return named + (f", other {rest:,}" if rest else "")


def ratio_text(ratio: float) -> str:
    """A ratio in two significant figures, except near 1, where those would say x1 of a 4%
    slowdown beside an x0.97 saving: there, to the hundredth (x1.04, x0.97, x1)."""
    if 0.9 <= ratio < 1.1:
        return f"{ratio:.2f}".rstrip("0").rstrip(".")
    return f"{ratio:.2g}"


def _ratio_words(rec: dict, claimed: bool = False, notes: bool = True) -> str:
    """A claim's measurement in a few words: "peft-lora memory x0.0024 (large workload)";
    with ``claimed``, what the document said beside it, so that a claim that does not hold
    reads as such even where its ratio is a saving: "freeze-backbone time x0.81, documented
    x0.26", "gradient-checkpointing time x1.5, documented at most x1.2"; a source that gives
    no figure is not quoted one ("documented as lower with no figure": the 5% the suite asks
    is its own). Without ``notes``, no workload or first step in parentheses."""
    met = rec.get("metrics") or {}
    ratio = met.get("mem_ratio", met.get("time_ratio"))
    what = "memory" if "mem_ratio" in met else "time"
    # a ratio of the part a technique moves (its basis, harness.optim.claims) is named so: LoRA's
    # x0.0086 is of the optimizer's state, where the peak a batch must fit in went x0.6
    what = f"{met['basis']} {what}" if part_of(met.get("basis")) else what
    workload = records.workload_of(rec)
    # the same claim measured in the plain loop and through the Trainer are two measurements:
    # named alike, one could read as helping and as not holding on the same line
    what += " through the Trainer" if str(rec.get("variant", "")).endswith("/trainer") else ""
    said = f"{rec.get('subject')} {what}" + (f" x{ratio_text(ratio)}" if isinstance(ratio, (int, float)) else "")
    documented = met.get("claimed_ratio")
    if claimed and isinstance(documented, (int, float)) and isinstance(ratio, (int, float)):
        if ANY_REDUCTION_SRC in str(met.get("source", "")):   # "faster", with no figure: 0.95 is ours
            said += ", documented as lower with no figure"
        else:
            said += f", documented {'at most ' if met.get('kind') == ClaimKind.NOT_HIGHER else ''}x{ratio_text(documented)}"
    if claimed and met.get("ratio_category") not in (None, rec.get("category")):   # a saving that cannot train
        said += ", but its step's loss is not finite: it breaks training here"
    if not notes:
        return said
    said_of = [f"{workload} workload"] if workload else []
    first = cold_start_s(met)
    if first is not None:
        said_of.append(f"its first step took {first:.3g} s")
    return said + (f" ({', '.join(said_of)})" if said_of else "")


COLD_START_FACTOR = 10   # a variant's first call this many times its steady step (and a second or more): shown


def cold_start_s(met: dict) -> float | None:
    """The variant's first call's seconds, where it was far longer than its steady step (a
    compile, a cold start: what a user waits for once before any saving), else None."""
    warm, steady = met.get("warmup_b_s"), met.get("median_b_s")
    if not warm or not isinstance(steady, (int, float)) or not isinstance(warm[0], (int, float)):
        return None
    return float(warm[0]) if warm[0] >= 1.0 and warm[0] >= COLD_START_FACTOR * steady else None


def saves(rec: dict) -> bool:
    """Whether a claim that holds measured a saving: its ratio under 1 and, where the ratio was
    timed, its whole interval under 1. A claim that the step costs no more ("not higher") holds
    at x1.04 as at x0.998 (interval 0.989-1.019): the same time, not a saving, and counting it
    as one would let noise move the count of optimizations that help from run to run."""
    met = rec.get("metrics") or {}
    ratio, high = met.get("mem_ratio", met.get("time_ratio")), met.get("ci_high")
    return isinstance(ratio, (int, float)) and ratio < 1 and not (isinstance(high, (int, float)) and high >= 1)


def _optimizations(recs: list[dict]) -> Aspect:
    # A claim is a record the suite judged against a document's figure (holds, does-not-hold,
    # inconclusive), with its ratio; any other optim check (the seed-003 path's "never raises the
    # peak", category n/a, though it records a ratio) is a check like any other: counted nowhere
    # as an optimization, its failure handled with the rest (failure_groups).
    claims = [r for r in recs if r.get("suite") == "optim" and r["status"] != Status.SKIP
              and r.get("category") in Category.CLAIM_VERDICTS
              and isinstance((r.get("metrics") or {}).get("mem_ratio", (r.get("metrics") or {}).get("time_ratio")),
                             (int, float))]
    claimed = {id(r) for r in claims}
    # Does each technique keep what training computes (harness.optim.same_result)? One that does
    # not is said as such, first, and not as a measurement that failed; one that does is counted.
    kept = [r for r in recs if r.get("suite") == "optim" and r.get("subject") == same_result.SUBJECT
            and r["status"] != Status.SKIP]
    keeps = [r for r in kept if cell_key(r) == Status.PASS]
    changes = [r for r in kept if cell_key(r) in BROKEN
               and (r.get("metrics") or {}).get("cause") == same_result.CHANGES_THE_RESULT]
    claimed |= {id(r) for r in changes}
    failed = failure_groups([r for r in recs if r.get("suite") == "optim" and not is_control(r)
                             and id(r) not in claimed and cell_key(r) in BROKEN])
    if not claims and not failed and not kept:
        return Aspect("optimizations", NONE, "not measured here (pytest suites/ -m optim)", anchor="optimizations")

    def ratio(r):
        met = r["metrics"]
        return met.get("mem_ratio", met.get("time_ratio"))
    holds = [r for r in claims if r.get("category") == Category.HOLDS]
    # the best first, a saving of the whole (the peak, the time per sample) before one of a part
    # (the optimizer's state or step: PART_BASES), which says less of what a user gains
    helps = sorted((r for r in holds if saves(r)), key=lambda r: (part_of(r["metrics"].get("basis")) is not None, ratio(r)))
    level = sorted((r for r in holds if not saves(r)), key=ratio, reverse=True)
    def miss(r):   # how far past its bound a claim that does not hold went: the widest misses are named first
        bound = r["metrics"].get("bound")
        return -ratio(r) / bound if isinstance(bound, (int, float)) and bound > 0 else 0.0
    fails = sorted((r for r in claims if cell_key(r) == Category.DOES_NOT_HOLD
                    or r.get("category") == Category.DOES_NOT_HOLD), key=miss)
    unsure = [r for r in claims if r.get("category") == Category.INCONCLUSIVE]
    best = []   # the two best techniques, not one technique twice (in the loop and through the Trainer)
    for r in helps:
        if len(best) < 2 and all(b.get("subject") != r.get("subject") for b in best):
            best.append(r)
    others = f" and {len(helps) - len(best):,} more" if len(helps) > len(best) else ""
    line = (f"{_n(len(helps), 'measured saving')} as documented (best: "
            f"{', '.join(_ratio_words(r) for r in best)}{others})"
            if helps else "" if kept and not claims and not failed else "no documented saving was measured here")
    if changes:   # before anything it saves: the training it stands in for is not what it computes
        line = (f"{_n(len(changes), 'technique changes', 'techniques change')} what training computes, whatever "
                f"{'it saves' if len(changes) == 1 else 'they save'} ({_list(_changes_words(r) for r in changes)})"
                + (f"; {line}" if line else ""))
    if fails:   # before the claims that hold with no saving: what to act on, first where a terminal cuts the line
        line += (f"; {_n(len(fails), 'claim does', 'claims do')} not hold "
                 f"({_list((_ratio_words(r, True) for r in fails), 2)})")
    if level:
        line += (f"; {_n(len(level), 'claim holds', 'claims hold')} with no saving, as documented "
                 f"({_list((_ratio_words(r) for r in level), 2)})")
    if unsure:
        line += f"; {len(unsure):,} inconclusive"
    broke = sum(len(g.checks) for g in failed)   # a measurement that raised, crashed or hung: no ratio
    if broke:
        line += ("; " if line else "") + f"{_n(broke, 'measurement')} failed: " + "; ".join(f"{shown(g.cause)} {len(g.checks)}" for g in failed)
    if keeps:
        line += ("; " if line else "") + (
            f"{len(keeps):,} of {_n(len(kept), 'technique')} {'keeps' if len(keeps) == 1 else 'keep'} the result "
            f"({_list((r['variant'] for r in keeps), 2)})")
    detail = ([f"changes the result: {_changes_words(r)}: {shown(r['metrics'].get('switch') or '')}" for r in changes]
              + [f"helps: {_ratio_words(r)}" for r in helps] + [f"does not hold: {_ratio_words(r, True)}" for r in fails]
              + [f"holds, no saving: {_ratio_words(r)}" for r in level]
              + [f"inconclusive: {_ratio_words(r)}" for r in unsure]
              + [f"failed, {shown(g.cause)} ({', '.join(g.checks)}): {shown(g.switch)}" for g in failed]
              + [f"keeps the result: {r['variant']}" for r in keeps])
    # The headline counts techniques (a technique measured in memory and time, in the loop and through
    # the Trainer, is one optimization), and the claims that do not hold as claims: "18 optimizations
    # help, 5 do not" read 18 savings of 14 techniques, 3 of them among the 5 that did not hold.
    techniques = list(dict.fromkeys(r.get("subject") for r in claims))
    helping = list(dict.fromkeys(r.get("subject") for r in helps))
    do_not = f", {_n(len(fails), 'claim does', 'claims do')} not hold" if fails else ""
    helped = (f"{len(helping):,} of {_n(len(techniques), 'optimization')} {'helps' if len(helping) == 1 else 'help'}"
              if len(techniques) > 1 else _n(len(helping), "optimization helps", "optimizations help"))
    if helps:   # what helps most, named on the first screen: "(best: tf32 time x0.38)" on the H100
        helped += f" (best: {_ratio_words(helps[0], notes=False)})"
    parts = ([f"{_n(len(changes), 'optimization changes', 'optimizations change')} the result"] if changes else []) + (
        [helped + do_not] if claims else []) + (
        [f"{_n(broke, 'optimization measurement')} failed"] if broke else []) + (
        [f"{len(keeps):,} of {len(kept):,} keep the result"] if keeps and not claims else [])
    short = ", ".join(parts)
    return Aspect("optimizations", BAD if broke or changes else WARN if fails else GOOD, line, detail, "optimizations",
                  short)


def _changes_words(rec: dict) -> str:
    """A technique that changes the result, as the first screen names it: which, and what was seen."""
    said = records.first_line(rec.get("reason") or "").split(": ", 1)[0]   # how many and how far; which: the record
    return f"{rec.get('variant') or rec.get('check')}: {shown(said, 120)}" if said else str(rec.get("variant"))


def _known_bugs(recs: list[dict]) -> Aspect:
    bugs = [r for r in recs if records.kind_of(r) in RecordKind.KNOWN_BUGS and r["status"] != Status.SKIP]
    if not bugs:
        return Aspect("known bugs", NONE, "not run here (pytest suites/ -m parity -k known_bug)",
                      anchor="known-bugs")
    present = sorted({(r.get("metrics") or {}).get("known_bug") or r["check"] for r in bugs
                      if has_bug(r).startswith("yes") or cell_key(r) in BROKEN})
    cases = {(r.get("metrics") or {}).get("known_bug") or r["check"] for r in bugs}
    # other bits on a rerun, each as accurate as the first (known_bugs.check): not a bug, but
    # a run is not reproducible bit for bit, which someone comparing training runs reads here
    unrepeatable = sorted(r["check"].split("/")[1] for r in bugs if (r.get("metrics") or {}).get("nondeterministic"))
    other_bits = (f"; {_n(len(unrepeatable), 'op')} {'gives' if len(unrepeatable) == 1 else 'give'} other bits on "
                  f"a rerun, each as accurate as the first "
                  f"(nondeterministic, not a bug: torch.use_deterministic_algorithms(True) asks for a fixed order): "
                  + _list(unrepeatable)) if unrepeatable else ""
    if present:
        return Aspect("known bugs", BAD, f"{_n(len(present), 'reported bug')} of {len(cases)} present here: "
                                         + _list(present) + other_bits, present, "known-bugs",
                      _n(len(present), "known bug") + " present")
    return Aspect("known bugs", GOOD, f"none of the {len(cases)} reported bugs tried is present here" + other_bits,
                  anchor="known-bugs", short="no known bug")


def _speed(recs: list[dict]) -> Aspect:
    perf = [r for r in recs if r.get("suite") == "perf" and r["status"] != Status.SKIP]
    if not perf:
        return Aspect("speed and memory", NONE, "not measured here (pytest suites/ -m perf)", anchor="perf")
    bad = [r for r in perf if cell_key(r) in BROKEN]
    if bad:
        return Aspect("speed and memory", BAD, f"{_n(len(bad), 'check')} of {len(perf)} fail: "
                                               + _list(r["check"] for r in bad),
                      [f"{r['check']}: {shown(r.get('reason'))}" for r in bad], "perf", _n(len(bad), "perf failure"))
    return Aspect("speed and memory", GOOD, f"{_n(len(perf), 'measurement')}, none failed", anchor="perf",
                  short="no speed or memory failure")


# What each suite's controls vouch for: the aspects read through that suite's instruments.
ASPECTS_OF_SUITE = {"ops": ("ops",), "parity": ("numerics", "known bugs"), "optim": ("optimizations",),
                    "perf": ("speed and memory",)}
UNCHECKED_NOTE = ("instruments unchecked: this run has no controls (written before mps-compat had them, or the "
                  "controls were not selected)")


def _instruments(found: Instruments, recs: list[dict]) -> tuple[Aspect | None, str]:
    """(the instruments aspect, or None; the note a verdict carries when there is none).

    A failed control: BAD, its line the one the column is marked with, every failed control in
    the detail. Controls that all passed: GOOD, with how many and of which suites, where every
    record measured here was vouched for by its own run's controls; else (a suite that measured
    here without any, or records of an older run merged in: ``Instruments.unchecked``) a
    warning that names those suites and how much of each, never "checked" in green beside
    aspects marked unchecked. None ran: no aspect,
    a note (``UNCHECKED_NOTE``, or that every control was skipped, and why), unless nothing ran
    here that an instrument measures (the environment suite alone)."""
    unchecked = [unchecked_why(found, s) for s in found.unchecked_suites()]
    if found.failed:
        first, more = found.failed[0], found.failed[1:]
        line = first.untrusted + (f"; and {_list(f'{c.suite} control {c.name}' for c in more)}" if more else "")
        short = f"{UNTRUSTED_WORDS}: {first.suite} control {first.name}" + (
            f" and {_n(len(more), 'more control')}" if more else "")
        detail = [c.untrusted for c in found.failed]
        if found.passed:
            detail.append(f"passed: {_n(len(found.passed), 'control')} ({', '.join(found.passed_suites())})")
        detail += [f"unchecked: {u}" for u in unchecked]
        return Aspect("instruments", BAD, line, detail, "controls", short), ""
    if found.passed:
        passed = f"{_n(len(found.passed), 'control')} passed ({', '.join(found.passed_suites())})"
        detail = [f"skipped here: {c.suite} control {c.name} ({c.message})" for c in found.skipped]
        if unchecked:   # controls passed, but none of some suite's, or not in the runs its records come from
            suites = found.unchecked_suites()
            none = [s for s in suites if not found.controls_ran(s)]
            said = ([f"no {_or(none)} control ran here"] if none else []) + [
                unchecked_why(found, s) for s in suites if s not in none]
            line = (f"instruments unchecked for {', '.join(suites)}: " + "; ".join(said) + f" ({passed}"
                    + (": a run's controls vouch for that run's records only)" if len(none) < len(suites) else ")"))
            detail += [f"unchecked: {u}" for u in unchecked]
            return Aspect("instruments", WARN, line, detail, "controls"), ""
        return Aspect("instruments", GOOD, f"instruments checked: {passed}", detail, "controls"), ""
    if found.skipped:
        return None, ("instruments unchecked: every control was skipped here ("
                      + _list((f"{c.suite} control {c.name}: {c.message}" for c in found.skipped), 4) + ")")
    if not any(r.get("suite") in ASPECTS_OF_SUITE and r["status"] != Status.SKIP for r in recs):
        return None, ""   # only the environment suite ran: it measures with no instrument to check
    return None, UNCHECKED_NOTE


def unchecked_suites(found: Instruments, recs: list[dict]) -> list[str]:
    """The suites that measured here (a check that ran, not a control) with no control of
    theirs passed or failed, or with records of a run in which none did: their instruments were
    never checked there (an older run merged in, controls deselected, or every control of
    theirs skipped). A later run's controls do not vouch for an earlier run's measurements. A
    suite whose control failed is not among them: its records are unconfirmed, which the failed
    control says (``Instruments.failed``), never "unchecked" and "unconfirmed" at once
    (harness.report.matrix.unchecked_of)."""
    return _in_order(unchecked_of(found, recs))


def _or(items: list[str]) -> str:
    """"a", "a or b", "a, b or c"."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def _in_order(suites) -> list[str]:
    return [s for s in ASPECTS_OF_SUITE if s in suites]


def unchecked_why(found: Instruments, suite: str) -> str:
    """Why ``suite``'s records here are unchecked, in a few words: no control of it ran here at
    all, or (its controls ran in other runs) how many of its records come from runs in which
    none did."""
    unvouched, measured = found.unchecked.get(suite, (0, 0))
    if not found.controls_ran(suite):
        return f"no {suite} control ran here"
    if measured == 1:
        return f"the 1 {suite} record here is from a run in which no {suite} control ran"
    return (f"{'all' if unvouched >= measured else f'{unvouched:,} of the'} {measured:,} {suite} records here are "
            f"from runs in which no {suite} control ran")


def _unchecked(aspect: Aspect, suite: str, why: str = "") -> Aspect:
    """An aspect measured through instruments no control checked here: never good (the controls
    exist to tell a healthy device from a broken instrument, and none ran; a warning at best,
    bad stays bad), its line saying so, as an unconfirmed one's does. ``why``: ``unchecked_why``
    (by default: no control of the suite ran here)."""
    if aspect.state == NONE:
        return aspect
    why = why or f"no {suite} control ran here"
    again = ("run the suite again, without deselecting its controls, which run first" if why.startswith("no ")
             else "run the suite again with its controls, which run first, to replace them")
    return dataclasses.replace(
        aspect, state=BAD if aspect.state == BAD else WARN,
        line=f"unchecked ({why}: {again}): {aspect.line}",
        short=f"unchecked: {aspect.short}" if aspect.short else "")   # before it: a short ends in its own "(...)"


EMULATED_TIMES = "times here are the CPU's the Mac is emulated on, not a Mac's"


def _the_cpus_times(aspect: Aspect) -> Aspect:
    """An emulated Mac's optimizations and speed: every time it measured is the CPU's underneath
    (docs/controls.md), and its line says so, that no reader takes a time ratio there for a Mac's."""
    if aspect.name not in ("optimizations", "speed and memory") or aspect.state == NONE:
        return aspect
    return dataclasses.replace(aspect, line=f"{aspect.line} ({EMULATED_TIMES})")


def _timed_with(aspect: Aspect, switches: list[str]) -> Aspect:
    """An mps column's optimizations and speed measured with kernel switches on (``kernel_switches``):
    every time it measured is of the kernels those switches chose, and its line says so."""
    if aspect.name not in ("optimizations", "speed and memory") or aspect.state == NONE:
        return aspect
    return dataclasses.replace(aspect, line=f"{aspect.line} (times of the kernels {', '.join(switches)} chose, not "
                                            "of torch's defaults)")


def _unconfirmed(aspect: Aspect, suite: str) -> Aspect:
    """An aspect measured through instruments that failed their controls: never good (a
    warning at best; bad stays bad), its line saying why it is unconfirmed."""
    if aspect.state == NONE:
        return aspect
    return dataclasses.replace(
        aspect, state=BAD if aspect.state == BAD else WARN,
        line=f"unconfirmed (the {suite} instruments failed their controls): {aspect.line}",
        short=f"unconfirmed: {aspect.short}" if aspect.short else "")


def _gist(detail: str) -> str:
    """A change's detail up to its figures: "inconclusive: slower by more than the tolerance, but
    the host ran 1.44x slower (control)" of "...: 0.1466 ms [0.1439, 0.1491] -> ..."."""
    return shown(": ".join(detail.split(": ")[:2]), 160)


def _against(found: list | None) -> Aspect | None:
    """``found``: this card's columns against the baseline (speed.Against: the regressions and
    warnings of the upgrade check's rules, and how many checks were compared), or None where
    no baseline was compared. The slowdowns seen in one process only are told apart from the
    rest (a slowdown the host's own slowness or the noise leaves undecided, a claim now too
    close to its bound, a check now skipped, an error that grew, a verdict of another revision of
    its judge than the baseline's: compare.across_judges). Where the baseline holds
    only part of the column ("nothing regressed" speaks for the checks both hold), the line
    says how much; perf times the rules did not compare (speed.Against.uncompared: another
    machine, thread count or company) make it a warning, saying why and what compares them,
    where it once read "nothing regressed" in green over a time three times slower."""
    if found is None:
        return None
    changes = [c for a in found for c in a.changes]
    compared, held = sum(a.compared for a in found), sum(a.held for a in found)
    if not compared:
        return Aspect("against the baseline", NONE, f"nothing to compare: the baseline holds none of these "
                      f"{_n(held, 'check')} (keep a baseline of the same selection: ./compat baseline)",
                      anchor="against-the-baseline", short="")
    part = (f" in the {_n(compared, 'check')} the baseline holds too, of {held:,} here (the others cannot regress "
            "against it: ./compat baseline without -m / -k / paths keeps a whole one)") if compared < held else ""
    regressions = [c for c in changes if c.kind == "regression"]
    once = [c for c in changes if c.kind == "warning" and against.seen_once(c.kind, c.detail)]
    unsure = [c for c in changes if c.kind == "warning" and c not in once]
    slower = (f"{_n(len(once), 'time')} slower than the baseline, seen in one process only: "
              + _list(f"{c.check} ({c.rule})" for c in once)
              + " (./compat candidate measures a figure that looks slower again in fresh processes)") if once else ""
    told = (f"{_n(len(unsure), 'warning')}, not a regression: "
            + _list((f"{c.check} ({c.rule}: {_gist(c.detail)})" for c in unsure), 2)) if unsure else ""
    # perf times the rules did not compare (another machine, thread count or company): "nothing
    # regressed" does not speak for them, and the note says what makes them comparable
    uncompared = [n for a in found for n in getattr(a, "uncompared", [])]
    untimed = sum(a.uncompared_times for a in found)
    apart = (f"{_n(untimed, 'perf time')} not compared: {uncompared[0].split(' not compared: ', 1)[1]}"
             if uncompared else "")
    more = "".join(f"; {x}" for x in (slower, told, apart) if x)
    details = [f"{c.check}: {c.rule}: {c.before} -> {c.after} {shown(c.detail)}".strip()
               for c in regressions + once + unsure] + uncompared
    if regressions:
        return Aspect("against the baseline", BAD, f"{_n(len(regressions), 'regression')}: "
                                                   + _list(f"{c.check} ({c.rule})" for c in regressions) + part + more,
                      details, "against-the-baseline", f"{len(regressions)} regressed")
    if once or unsure or untimed:
        short = "; ".join(x for x in (f"{len(once)} slower, seen once" if once else "",
                                      _n(len(unsure), "warning") if unsure else "",
                                      f"{untimed} times not compared" if untimed else "") if x)
        return Aspect("against the baseline", WARN, "nothing regressed" + part + more, details,
                      SPEED_AGAINST if once else "against-the-baseline", f"no regression; {short}")
    return Aspect("against the baseline", GOOD, "nothing regressed" + part, anchor="against-the-baseline",
                  short="no regression" + (f" in {compared:,} of {held:,} checks" if part else ""))


# ----------------------------------------------------------------------------- partial runs

WHOLE_SUITES = ("env", "ops", "parity", "optim", "perf")


def _counts(runs: list) -> str:
    """What one selection chose in the runs that made it: "(18 of 30,807 collected)", summed
    over several ("(33 of 31,463 collected in 3 runs)": ./compat suites makes three, one per
    part); nothing when a run did not count. A run made again (the same counts) counts once."""
    runs = list(dict.fromkeys(runs))
    if not runs or any(r is None for r in runs):
        return ""
    return (f" ({sum(r[0] for r in runs):,} of {sum(r[1] for r in runs):,} collected"
            + (f" in {len(runs)} runs)" if len(runs) > 1 else ")"))


def partial_note(col_headers: list[dict], recs: list[dict], target: str, cut_off: Collection[str] = ()) -> str:
    """"" when the column holds a whole run of every suite; else the selections of the merged
    runs that leave checks out and no other merged run makes up for (harness.report.selection:
    a -k once, then a whole run, is not partial), which suites did not run, whether a run was
    cut off (run ids in ``cut_off``) with nothing to make up for it, and which targets were
    absent. ``recs``: the column's standing records."""
    parts = []
    left_out, cut = selection.uncovered(col_headers, recs, cut_off)
    narrowed: dict[str, list] = {}   # what a selection said -> the (selected, collected) of each run that said it
    for h in left_out:
        sel = selection.selection_of(h)
        said = " ".join(x for x in (f"-m \"{shown(sel['markexpr'])}\"" if sel.get("markexpr") else "",
                                    f"-k \"{shown(sel['keyword'])}\"" if sel.get("keyword") else "",
                                    " ".join(shown(p) for p in selection.narrowed_paths(sel))) if x)
        counted = (sel["selected"], sel["collected"]) if all(
            isinstance(sel.get(k), int) for k in ("selected", "collected")) else None
        narrowed.setdefault(said or "a selection", []).append(counted)
    if narrowed:   # one selection over the runs of ./compat suites (env+ops+parity, optim, perf) is said once
        parts.append("ran " + "; ".join(said + _counts(runs) for said, runs in narrowed.items()))
    ran = {r.get("suite") for r in recs if r["status"] != Status.SKIP}
    missing = [s for s in WHOLE_SUITES if s not in ran]
    if missing and any(r["status"] != Status.SKIP for r in recs):
        parts.append("not run here: " + ", ".join(missing))
    absent = {name: why for name, why in absent_targets(col_headers) if name != target}
    note = ""
    if cut:
        parts.append("a run was cut off or interrupted before its end (the checks it did not reach are missing)")
    if parts:
        note = "partial: " + "; ".join(parts)
    if absent:
        note += ("; " if note else "") + "absent on this machine: " + shown(", ".join(absent))
    return note


# ----------------------------------------------------------------------------- the verdicts

def column_groups(m: Matrix) -> list[tuple[Column, list[Column]]]:
    """The columns a verdict speaks for: one environment and target, its workloads together."""
    groups: dict[tuple[str, str], list[Column]] = {}
    for col in m.columns:
        groups.setdefault((col.env_id, col.target), []).append(col)
    order = {c.id: i for i, c in enumerate(m.columns)}
    # a machine's accelerators before its CPU: the verdict a user came for comes first
    return sorted(((cols[0], cols) for cols in groups.values()),
                  key=lambda g: (g[0].host_label, g[0].target == "cpu", order[g[0].id]))


def worst(states) -> str:
    states = list(states)
    return next((s for s in STATES if s in states), NONE)


def absent_targets(col_headers: list[dict]) -> list[tuple[str, str]]:
    """(target, reason) for each target a run selected and found absent, as its header says
    (the line the terminal printed, with its fix), in the runs' order."""
    return [(name, info.get("reason") or "") for h in col_headers for name, info in (h.get("targets") or {}).items()
            if isinstance(info, dict) and info.get("selected") and not info.get("available")]


def not_run_reason(col_headers: list[dict], recs: list[dict], target: str) -> str:
    """Why a column whose every record is a skip did not run: what its runs said of the target
    when they found it absent (the reason the terminal gave, with its fix), else its records'
    most common reason. Taken from the records alone, two runs of one machine gave two reasons
    for one absent Mac (a whole run: "MPS unavailable: ...; to fix: ...", its thousands of
    device skips; a run of the controls: "not applicable: ... concern macOS", its env rows)."""
    said = Counter(why for name, why in absent_targets(col_headers) if name == target and why)
    if said:
        return said.most_common(1)[0][0]
    return Counter(r.get("reason") or "skipped" for r in recs).most_common(1)[0][0]


def verdicts(m: Matrix, regressions: dict | None = None) -> list[Verdict]:
    """One Verdict per machine x torch x target (``column_groups``). ``regressions``: column
    id -> that column against a baseline (speed.Against), where a baseline was compared."""
    out = []
    not_run: dict[tuple[str, str, str], tuple[Verdict, list[str]]] = {}   # -> the card, its torch releases
    for col, cols in column_groups(m):
        ids = {c.id for c in cols}
        recs = [r for (_, cid), r in m.cells.items() if cid in ids]
        title = f"{col.device} · torch {col.torch_release} · {col.target}{col.label_suffix}"
        headers = [h for c in cols for h in (c.headers or [c.header])]
        partial = partial_note(headers, recs, col.target, [r for c in cols for r in c.cut_off])
        if all(r["status"] == Status.SKIP for r in recs):
            why = shown(not_run_reason(headers, recs, col.target))
            # A target that ran nowhere for one reason is one card, naming each machine and torch
            # once: the columns of other torch versions (tox), other stacks (an upgrade check's
            # candidate) or machines add nothing to read, and were a screen of the same words.
            key = (col.device, col.target, why)
            if key in not_run:
                seen, releases = not_run[key]
                if col.torch_release not in releases:
                    releases.append(col.torch_release)
                seen.title = f"{col.device} · torch {', '.join(releases)} · {col.target}"
                if col.host_label not in seen.machine.split("; "):
                    seen.machine = f"{seen.machine}; {col.host_label}"
                continue
            card = Verdict(col.id, title, col.host_label, NONE, f"not run: {why}", [
                Aspect("environment", NONE, why, anchor="environments")])   # what was selected says nothing here
            not_run[key] = card, [col.torch_release]
            out.append(card)
            continue
        checks = [r for r in recs if not is_control(r)]   # the controls speak through the instruments aspect
        switches = kernel_switches(headers, col.target)
        aspects = [_environment(checks, col.target), _ops(checks, col.target), _numerics(checks, switches),
                   _optimizations(checks), _known_bugs(checks), _speed(checks)]
        if is_emulated(col.target):
            aspects = [_the_cpus_times(a) for a in aspects]
        if switches:
            aspects = [_timed_with(a, switches) for a in aspects]
        runs_checked: dict[str, set[str]] = {}   # from every run's controls, as each column's were
        history: dict[int, dict] = {}             # every control record of their runs, each once
        for c in cols:
            for suite, ids_ in c.instruments.checked_runs.items():
                runs_checked.setdefault(suite, set()).update(ids_)
            history.update((id(r), r) for r in c.instruments.history)
        # the same as each column's (matrix.Column.instruments)
        found = instruments_of(recs, runs_checked, history.values())
        instruments, instruments_note = _instruments(found, recs)
        failed = found.failed_suites()
        for suite in failed:
            aspects = [_unconfirmed(a, suite) if a.name in ASPECTS_OF_SUITE.get(suite, ()) else a for a in aspects]
        for suite in found.unchecked_suites():   # never one of ``failed``: unconfirmed says it
            why = unchecked_why(found, suite)
            aspects = [_unchecked(a, suite, why) if a.name in ASPECTS_OF_SUITE.get(suite, ()) else a for a in aspects]
        if instruments:
            aspects.insert(0, instruments)
        compared = regressions is not None and any(cid in regressions for cid in ids)
        against = _against([regressions[cid] for cid in ids if cid in regressions] if compared else None)
        if against:
            aspects.append(against)
        older = [r for r in recs if r.get("judged_again")]
        older_note = ""
        if older:
            outcomes = Counter(r["judged_again"]["outcome"] for r in older)
            judged = ", ".join(f"{n:,} {word}" for word, n in (
                ("pass now", outcomes.get("passes", 0)), ("need a rerun", outcomes.get("rerun", 0)),
                ("still fail", outcomes.get("remains", 0) + outcomes.get(rejudge.NOT_A_RESULT, 0)),
                ("kept as they were", outcomes.get("kept", 0))) if n)
            older_note = (f"{_n(len(older), 'record was', 'records were')} written by an older judge (parity revision "
                          f"{min(r['judged_again']['judge'] for r in older)}; today's is "
                          f"{records.JUDGES['parity']}): judged again from their metrics, {judged} (python -m "
                          f"tools.rejudge lists why, check by check). Run `pytest suites/ -m \"parity and "
                          f"{col.target}\"` again for today's judge.")
        state = worst(a.state for a in aspects)
        headline = "; ".join(a.short for a in aspects if a.short and a.state != NONE) or (
            f"only the controls ran: {instruments.line.removeprefix('instruments checked: ')}"
            if instruments else "nothing measured")
        out.append(Verdict(col.id, title, col.host_label, state, headline, aspects, partial, older_note,
                           instruments_note))
    return sorted(out, key=lambda v: v.state == NONE)   # a target that is not on its machine: last


def for_records(header: dict, recs: list[dict], end: dict | None = None) -> list[Verdict]:
    """The verdicts of one run: its header, the records it wrote and its end line (the
    terminal's summary; without the end line the run reads as cut off before its end)."""
    run = runfiles.Run(header.get("run") or "this-run", header, "this run", list(recs), end)
    return verdicts(build([run]))


TERMINAL_WIDTH = 240   # a terminal line is cut here (a reason from a run file can be any length)


def _cut(line: str) -> str:
    """One line (a reason's line breaks become spaces, its control characters \\xNN), its indentation
    kept, at most TERMINAL_WIDTH."""
    indent = line[:len(line) - len(line.lstrip(" "))]
    line = indent + visible(" ".join(line.split()))
    return line if len(line) <= TERMINAL_WIDTH else line[:TERMINAL_WIDTH - 1] + "…"


def terminal_lines(found: list[Verdict]) -> list[str]:
    """Each verdict as terminal lines: state, title and headline, then the aspects that are not
    good, and the partial-run note; each line at most TERMINAL_WIDTH characters."""
    return [_cut(line) for line in _terminal_lines(found)]


def _terminal_lines(found: list[Verdict]) -> list[str]:
    lines = []
    for v in found:
        lines.append(f"{SYMBOLS[v.state]} {v.title}: {v.headline}")
        lines += [f"   {a.name}: {a.line}" for a in v.aspects if a.state in (BAD, WARN)]
        if v.partial:
            lines.append(f"   {v.partial}")
        if v.older_judge:
            lines.append(f"   {v.older_judge}")
    return lines
