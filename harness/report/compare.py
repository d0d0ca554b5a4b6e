"""The pre-upgrade regression check: a baseline set of runs against a candidate, check by check.

Each side is the run files of one environment (a host with its Python and package versions):
the newest record of each (check, target) stands for it. Checks present on both sides are
compared by the rules below; checks on one side only are listed as appeared / disappeared,
and the summary line always counts both.

Which records are the same check (``match``): the same check at the same target and
workload ("cpu [small workload]"). A record without a workload tag (a measurement that
raised before the suite tagged its record, in run files older than issue 26) is matched
with the other side's only record of that check and target, and the change says so: it is
the same check, and its failure is a regression, not a check that appeared.

Enough in common (``overlap_problem``): a comparison speaks only for the checks both sides
hold, so two sides that share none, or little, are refused with one line rather than
reported as "0 regressions". tools.compare wants at least half of each side's checks in
the other (two runs of one selection share nearly all; under half is another selection,
target or --workload); ``--partial`` accepts any overlap but none. ``pytest --baseline``
judges from this run's side: a ``-k`` / ``-m`` subset of the baseline is the normal case
there (the baseline's other checks were not run, not lost), so at least half of this run's
checks must be found in the baseline, and the baseline's checks outside what the run took
whole are counted in a note, not listed as disappeared (``within_selection``).

  rule            kind         when
  status          regression   it ran without failing, and now fails / errors / crashes / times out
                  improvement  it failed, and now runs without failing
  limitation      regression   it passed, and now is a known limitation (xfail) outside optim
                  improvement  it was a known limitation, and now passes
  fallback        regression   native -> cpu-fallback -> unsupported, one step or more
                  improvement  the other way
                  warning      either way, where two revisions of the ops suite read the fallbacks
                               (metrics' fallback_reader): not comparable, keep the baseline again
  claim           regression   an optimization claim held, and now does not hold
                  improvement  it did not hold, and now holds
                  warning      it held, and now has no verdict (inconclusive)
  claim-ratio     regression   the claim's ratio worsened by more than the claim's own tolerance
                               (intervals compared, so noise within them does not count)
                  warning      a time claim's regression (this rule or ``claim``) measured under
                               markedly different load: inconclusive (harness/perf/against.py)
  parity-nan      regression   it failed (or was a known limitation, xfail, on both sides)
                               with NaN or inf that the CPU gives at the same elements
                               too (the computation's in that precision), or with finite errors,
                               and now fails with NaN or inf the CPU does not give: the device's own
                  warning      it failed with finite errors, and now with NaN or inf that are all
                               the CPU's too, or whose share the record cannot say (further off)
                  improvement  the other way: its NaN are now all the CPU's too, or gone
  parity-growth   warning      a parity error (its margin: error / allowed) grew by more than
                               ``factor`` (default 2x) while still passing, or while failing on
                               both sides, or a known limitation (xfail) on both (further off
                               than it was); margins below ``floor`` are ignored
  nondeterministic warning     a repeatable check that passes on both sides now gives other
                               bits on a rerun, each as accurate as the first (not reproducible
                               bit for bit any more)
                  improvement  the other way: the first run's bits on every rerun again
  coverage        warning      it ran, and now is skipped (the reason says why)
  target-lost     regression   every check compared on a target (mps, cuda, ...) that ran there in
                               the baseline is skipped in the candidate: the device itself is gone
                               (a torch that no longer supports this macOS, a CPU-only wheel); one
                               change per target, beside each check's coverage warning, naming why
  judge           warning      two revisions of the check's judge wrote its records (a baseline
                               kept before this project was upgraded: records.judge_of), and
                               their verdicts differ even with the older one judged again from
                               its metrics where they allow: not comparable, whatever the two
                               statuses; between such records no verdict or margin is compared
                               (``across_judges``), and a note first counts them and says to keep
                               the baseline again
  perf-time       regression   a time (an op, a model's step, inference, generation, cold start)
                               slower by more than its tolerance, intervals apart, on the same
                               machine (harness/perf/against.py has the allowances)
                  warning      slower by as much, but too noisy to tell, or the two runs' load
                               per core more than 0.5 apart (inconclusive; unknown load, in
                               older files: judged as before, and said); not slower, but
                               measured under load more than 0.5 apart, or on a host its
                               control says ran faster by enough to hide a slowdown
                               (inconclusive: keep the baseline again at a quiet moment)
                  (none)       taken on another machine, at another thread count, or in unlike
                               company (one side's pytest run held other suites, the other's
                               perf alone: against.company_apart): not compared, said in a note
                  improvement  faster by as much, intervals apart
  perf-shape      regression   a new input shape costs more than it did, by over 15% of a step
  perf-peak       regression   a model's training step, inference or generation holds more memory
                               at its peak, beyond 10% (tensor storages counted, exact: the same
                               bytes in every run), at the same model and shape on the same machine
                  improvement  it holds less by as much
  perf-cold-start regression   a cold start (importing torch and transformers, building the
                               model, its first step: those the records keep) slower by more than
                               50%, the processes' figures apart; the detail names what grew
                  warning      slower by as much, figures overlapping (inconclusive)
                  improvement  faster by as much, figures apart
  perf-memory     regression   memory grows over a long run, and did not; it grew on both sides
                               and now grows more than 2x faster per step, intervals apart (or a
                               reading that was steady now grows too); it grew, and the run now
                               crashes, times out or errs (killed for running out of memory)
                  warning      it grew on both sides, now 2x faster per step, intervals
                               overlapping; it was steady, and is now too close to call
                  improvement  it no longer grows, or grows 2x slower per step, intervals apart

A control (a check whose answer is known in advance, run on the device first: ``records.kind_of``
"control") is compared like any check: one that passed and now fails is a ``status`` regression.
A candidate whose controls failed has instruments that cannot be trusted, so its regressions are
preceded by one line per suite, "the candidate's <suite> instruments failed their controls
(<name> on <target>): its verdicts are unconfirmed" (``instrument_lines``; ``instruments`` in
the JSON); a suite that measured on a target where none of its controls ran (an older run file,
the controls deselected) gets one too: its instruments were not checked there.

Only regressions make the check fail (exit 1 in tools.compare, a failed session with
``pytest --baseline``). Bad input raises ``CompareError`` with one line naming the problem.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Iterable

from harness.core import records, runfiles
from harness.core.records import Category, Status
from harness.env import fitness
from harness.optim import techniques
from harness.parity.numerics import causes, rejudge
from harness.perf import against
from harness.report import selection
from harness.report.matrix import (SUITE_ORDER, apart, as_written, company_of, control_of, is_control, judged_again,
                                   merge_key)
from harness.report.render import escape

COMPARE_SCHEMA = 1
KINDS = ("regression", "warning", "improvement", "appeared", "disappeared")
BAD = Status.BAD
WORKS = Status.WORKS
VERDICTS = (Status.PASS, Status.FAIL, Status.XFAIL, Status.XPASS)   # what a judge says of a result
# The rules that read a judge's verdict or its margin: between records of two revisions of the
# judge they would compare two yardsticks, not two versions (``across_judges``)
JUDGED_RULES = ("status", "limitation", "parity-growth", "parity-nan")
FALLBACK_ORDER = {Category.NATIVE: 0, Category.CPU_FALLBACK: 1, Category.UNSUPPORTED: 2}
DEFAULT_FACTOR = 2.0
DEFAULT_FLOOR = 0.01         # margin (error / allowed): below 1% of the tolerance, growth is rounding
CLAIM_SLACK_UNKNOWN = 0.10   # a claim no longer in harness.optim.claims: SLACK_DEFAULT's memory figure


class CompareError(Exception):
    """Input that cannot be compared; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Change:
    kind: str
    rule: str
    check: str
    target: str
    before: str
    after: str
    detail: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Side:
    label: str                          # what the user passed, for messages
    env_id: str
    header: dict
    records: dict[tuple[str, str], dict]
    complete: bool                      # every run wrote its end line
    sources: list[str]
    # run id -> the suites beside perf in that run (matrix.company_of); a run not in it: unknown
    company: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    headers: dict[str, dict] = dataclasses.field(default_factory=dict)   # run id -> its header
    # its records are judged again already, as today's judge sees them (matrix.judged_again: a
    # report's column); a side read from run files holds them as their judges wrote them
    judged_again: bool = False

    @property
    def packages(self) -> dict:
        return (self.header.get("facts") or {}).get("packages") or {}

    @property
    def machine(self) -> str | None:
        """The machine its times belong to (harness.perf.against.machine_of)."""
        return against.machine_of(self.header.get("facts"))

    def header_of(self, rec: dict) -> dict:
        """The header of the run that wrote ``rec`` (which judges wrote it: records.judge_of)."""
        return self.headers.get(rec.get("run"), self.header)

    def judge_of(self, rec: dict) -> int | None:
        """The revision of the judge that wrote ``rec``, by its own run's header (records.judge_of)."""
        return records.judge_of(rec, self.header_of(rec))

    def today(self, rec: dict) -> dict:
        """``rec`` as today's judge sees it, where its metrics allow (matrix.judged_again)."""
        return rec if self.judged_again else judged_again(rec, self.header_of(rec))

    def as_written(self, rec: dict) -> dict:
        """``rec`` with the status and margin its own judge gave it (matrix.as_written)."""
        return as_written(rec) if self.judged_again else rec

    def describe(self) -> str:
        p = self.packages
        versions = ", ".join(f"{k} {p[k]}" for k in ("torch", "transformers", "datasets") if p.get(k))
        host = (self.header.get("facts") or {}).get("host", "?")
        cut = "" if self.complete else ", cut off or interrupted before its end"
        return f"{self.env_id} (host {host}; {versions}; {len(self.records)} checks{cut})"


# --------------------------------------------------------------------------- loading

def side_from_runs(label: str, runs: list[runfiles.Run], sources: list[str], latest: bool = False) -> Side:
    """One side from runs already read: the newest record of each check over the runs, or
    with ``latest`` the newest run alone. Raises CompareError when they hold no check or
    more than one environment."""
    runs = [r for r in runs if r.records]
    if not runs:
        raise CompareError(f"{label}: no check records")
    runs.sort(key=lambda r: (r.header.get("started", ""), r.run_id))
    if latest:
        runs = runs[-1:]
    envs = sorted({r.env_id for r in runs})
    if len(envs) > 1:
        raise CompareError(f"{label}: runs of {len(envs)} environments ({', '.join(envs[:4])}); compare one "
                           "environment with one: pass that environment's run file")
    # One environment id (host, Python, torch) with another Hugging Face stack or machine is
    # another environment, a column of its own in the matrix (merge_key): merged into one side,
    # a candidate with transformers 5.24 cut off at 6 of 10 checks was filled in with 5.23's
    # records and read "10 unchanged".
    by_env: dict[tuple, list[runfiles.Run]] = {}
    for run in runs:
        by_env.setdefault(merge_key(run), []).append(run)
    if len(by_env) > 1:
        groups = [(hw, stack) for _, hw, stack in sorted(by_env)]
        raise CompareError(f"{label}: runs of {envs[0]} {apart(envs[0], groups, by_env)}; a side is one set of "
                           "versions (the newest record of each check over them would mix them): pass the run file "
                           "of one, or --latest for the newest run alone")
    newest: dict[tuple[str, str], dict] = {}
    for run in runs:
        for rec in run.records:
            newest[(rec["check"], records.target_of(rec))] = rec
    # cut off only where a run that did not reach its end has no whole, finished run beside it to
    # make up for the checks it missed (harness.report.selection)
    _, cut = selection.uncovered([r.header for r in runs], list(newest.values()),
                                 [r.run_id for r in runs if not r.complete])
    return Side(label, envs[0], runs[-1].header, newest, not cut, sources, company_of(runs),
                {r.run_id: r.header for r in runs})


def load_side(paths: list[str], label: str | None = None, latest: bool = False) -> Side:
    """Read run files (or directories of them) as one side. Every problem is fatal here:
    a comparison over half a file would report checks as disappeared that were only unread."""
    label = label or " ".join(paths)
    files, problems = runfiles.find_run_files(paths)
    if problems:
        raise CompareError(problems[0])
    runs: list[runfiles.Run] = []
    for path in files:
        rf = runfiles.read_file(path)
        if rf.errors:
            more = f" (and {len(rf.errors) - 1} more problem line(s))" if len(rf.errors) > 1 else ""
            raise CompareError(rf.errors[0] + more)
        runs.extend(rf.runs)
    return side_from_runs(label, runs, files, latest)


# --------------------------------------------------------------------------- rules

def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _state(rec: dict) -> str:
    """What a cell said, for the before / after columns."""
    cat = rec.get("category") or Category.NA
    return rec["status"] if cat in (Category.NA, Category.PARITY) else f"{rec['status']} ({cat})"


def _claim_slack(rec: dict) -> float:
    quantity = (rec.get("variant") or "").split("/")[0]
    try:
        from harness.optim import claims
        return claims.slack(rec["subject"], quantity)
    except (KeyError, AttributeError, AssertionError):
        return CLAIM_SLACK_UNKNOWN


def _claim_changes(a: dict, b: dict) -> list[tuple[str, str, str]]:
    out = _claim_verdicts(a, b)
    if (a.get("variant") or "").split("/")[0] == "time":   # a time claim: judged under a like load only
        out = against.under_load(a.get("metrics") or {}, b.get("metrics") or {}, out)
    return out


# A held claim turned inconclusive, by why its verdict stopped (the record's ``stopped``).
HELD_NOW_INCONCLUSIVE = {
    "zone": "the claim held; now its ratio is too close to the bound to call",
    techniques.NOT_THE_BOTTLENECK: "the claim held; now loading is no bottleneck here, so it is not judged",
    None: "the claim held; now no verdict within the time budget"}


def _claim_verdicts(a: dict, b: dict) -> list[tuple[str, str, str]]:
    ca, cb = a.get("category"), b.get("category")
    out = []
    ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
    if ca == Category.HOLDS and cb == Category.DOES_NOT_HOLD:
        broke = mb.get("ratio_category") not in (None, cb)   # its ratio holds, its loss is not finite
        why = (b.get("reason") or "").removeprefix("the claim does not hold here: ")
        out.append(("regression", "claim", "the claim held and no longer holds" + (f": {why}" if broke and why else "")))
    elif ca == Category.DOES_NOT_HOLD and cb == Category.HOLDS:
        out.append(("improvement", "claim", "the claim now holds"))
    if ca == Category.HOLDS and cb == Category.INCONCLUSIVE:
        out.append(("warning", "claim", HELD_NOW_INCONCLUSIVE.get(mb.get("stopped"), HELD_NOW_INCONCLUSIVE[None])))
    if not all(_number(m.get(k)) is not None for m in (ma, mb) for k in ("ci_low", "ci_high", "bound")):
        return out  # not a measured claim (seed 003's path table has ratios, no interval, no bound)
    for key in ("mem_ratio", "time_ratio"):
        ra, rb = _number(ma.get(key)), _number(mb.get(key))
        if ra is None or rb is None or cb == Category.DOES_NOT_HOLD:
            continue
        slack = _claim_slack(a)
        high_a, low_b = _number(ma["ci_high"]), _number(mb["ci_low"])
        if low_b > high_a * (1 + slack):
            out.append(("regression", "claim-ratio", f"{key} {ra:.3g} -> {rb:.3g}: worse by more than the claim's "
                                                     f"tolerance ({slack:.0%}), intervals apart"))
    return out


def _parity_growth(a: dict, b: dict, factor: float, floor: float) -> tuple[str, str, str] | None:
    """A parity check whose margin (error / allowed error) grew by more than ``factor``,
    passing on both sides, or failing on both (a standing failure that got worse: the status
    rule is silent there; or a known limitation, xfail, on both, which the status rule never
    reads). The margin, not the raw error, is compared: it is scaled by the
    tolerance, which grows with the values, so larger sample inputs alone do not look like a
    regression. An infinite margin (NaN or inf) is left to ``parity-nan``."""
    passing = a["status"] == Status.PASS and b["status"] == Status.PASS
    failing = a["status"] == b["status"] and a["status"] in (Status.FAIL, Status.XFAIL) and a.get("suite") == "parity"
    if not (passing or failing):
        return None
    ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
    if not isinstance(ma, dict) or not isinstance(mb, dict):
        return None
    ga, gb = _number(ma.get("margin")), _number(mb.get("margin"))
    if ga is None or gb is None or gb < floor or gb <= factor * ga:
        return None
    grown = "from 0" if ga == 0 else f"{gb / ga:.3g}x"
    detail = f"margin {ga:.3g} -> {gb:.3g} ({grown}), " + (
        "still within tolerance" if passing else "failing on both sides, now further off" if a["status"] == Status.FAIL
        else "a known limitation (xfail) on both sides, now further off")
    ea, eb = _number(ma.get("max_abs_err")), _number(mb.get("max_abs_err"))
    if ea is not None and eb is not None:
        detail += f"; max_abs_err {ea:.3g} -> {eb:.3g}"
    note = _inputs_note(a, b)
    return ("warning", "parity-growth", detail + (f"; {note}" if note else ""))


def _parity_nan(a: dict, b: dict) -> tuple[str, str, str] | None:
    """A check failing on both sides (or a known limitation, xfail, on both: a limitation that
    starts to give the device's own NaN is as much a loss) with NaN or inf where float64 has
    numbers, whose NaNs moved
    between its yardstick's too and its own (harness.parity.numerics.causes
    .non_finite_shared_with_cpu): the status rule is silent (a failure stays a failure), and
    a device that starts to give NaN where the CPU gives numbers, or a compiled function that
    starts to give NaN where eager gives numbers (``non_finite_in_eager``, the compiled checks'
    count), is what users lose. So is a standing failure with finite errors that now gives NaN
    or inf of the device's own (the margin rule skips an infinite margin): a regression; NaN
    that are all the yardstick's too is a warning (further off, as the computation's in that
    precision); the other way, an improvement."""
    both_xfail = a["status"] == b["status"] == Status.XFAIL   # a known limitation whose NaN became the device's own
    if not both_xfail and (a["status"] not in BAD or b["status"] not in BAD):
        return None
    ma, mb = a.get("metrics"), b.get("metrics")
    if not isinstance(ma, dict) or not isinstance(mb, dict):
        return None
    share, whose, own = ("non_finite_in_eager", "eager's", "the compiled function's own") if (
        "non_finite_in_eager" in ma or "non_finite_in_eager" in mb) else ("non_finite_on_cpu", "the CPU's",
                                                                          "the device's own")
    was, now = (causes.non_finite_shared_with_cpu(m, share) for m in (ma, mb))
    if was is None and now is not None and _finite_failure(ma):
        counts = f"{min(mb[share], mb['non_finite'])} of {mb['non_finite']}"
        if not now:   # a standing failure that now gives NaN the yardstick does not: the margin rule sees no figure
            return ("regression", "parity-nan", f"it failed with finite errors (margin {_number(ma['margin']):.3g}); "
                                                f"now it gives NaN or inf, of which only {counts} are {whose} too, "
                                                f"the rest {own}: {b.get('reason') or ''}".rstrip(": "))
        return ("warning", "parity-nan", f"it failed with finite errors (margin {_number(ma['margin']):.3g}); now it "
                                         f"gives NaN or inf, all {whose} too ({counts}: the computation's in that "
                                         "precision), further off than it was")
    if was is None and now is None and _finite_failure(ma) and isinstance(mb.get("non_finite"), int) \
            and mb["non_finite"] > 0:   # no yardstick's count beside it (the CPU's own record, an older judge's)
        return ("warning", "parity-nan", f"it failed with finite errors (margin {_number(ma['margin']):.3g}); now "
                                         f"{mb['non_finite']} element(s) NaN or inf, further off than it was")
    if now is None and was is not None and not was and _finite_failure(mb):
        return ("improvement", "parity-nan", f"it gave NaN or inf of {own}; now it fails with finite errors (margin "
                                             f"{_number(mb['margin']):.3g})")
    if was is None or now is None or was == now:
        return None
    counts = f"{min(mb[share], mb['non_finite'])} of {mb['non_finite']}"
    if was:
        return ("regression", "parity-nan", f"its NaN or inf were all {whose} too, at the same elements; now only "
                                            f"{counts} are, the rest {own}: {b.get('reason') or ''}"
                .rstrip(": "))
    return ("improvement", "parity-nan", f"its NaN or inf are now all {whose} too ({counts}: the computation's in "
                                         f"that precision), where some were {own}")


def _finite_failure(metrics: dict) -> bool:
    """Whether a failing record's metrics say it failed with finite errors: a finite margin
    and no element NaN or inf (a record that cannot say, no margin, is not one)."""
    return _number(metrics.get("margin")) is not None and not metrics.get("non_finite")


def _repeatability(a: dict, b: dict) -> tuple[str, str, str] | None:
    """A repeatability check that passes on both sides, whose reruns started or stopped giving
    other bits (``nondeterministic``: each as accurate as the first, harness.parity.known_bugs
    .check): no number got worse, but a run is no longer reproducible bit for bit (or is again),
    which a user who compares training runs loses. A warning, not a regression."""
    if a["status"] != Status.PASS or b["status"] != Status.PASS:
        return None
    was, now = (bool((r.get("metrics") or {}).get("nondeterministic")) for r in (a, b))
    if was == now:
        return None
    if now:
        return ("warning", "nondeterministic", f"now gives other bits on a rerun of the same inputs (each as accurate "
                                               f"as the first): {b.get('reason') or ''}".rstrip(": "))
    return ("improvement", "nondeterministic", "gives the first run's bits on every rerun again")


def _inputs_note(a: dict, b: dict) -> str:
    """Did the result change on the same inputs? OpInfo generates the sample inputs anew in
    each torch release; the op-parity records carry a digest per sample (``inputs``) and the
    sample that decided (``worst_sample``). A check that stopped at a failing sample is judged
    by that sample; two passing ones by all their samples. Empty when the records cannot say."""
    fa, fb = ((r.get("metrics") or {}).get("inputs") for r in (a, b))
    if not isinstance(fa, str) or not isinstance(fb, str):
        return ""
    fa, fb = fa.split(), fb.split()
    failed = b if b["status"] not in WORKS else a if a["status"] not in WORKS else None
    if failed is not None:
        i = (failed.get("metrics") or {}).get("worst_sample")
        if not isinstance(i, int) or i >= len(fa) or i >= len(fb):
            return f"sample {i} exists in one version only" if isinstance(i, int) else ""
        return (f"sample {i} has the same inputs in both versions: the kernel's result changed" if fa[i] == fb[i]
                else f"sample {i} has other inputs in the other version: OpInfo's samples changed")
    if fa == fb:
        return f"the same {len(fa)} sample inputs in both versions"
    shared = len(set(fa) & set(fb))
    return f"the sample inputs differ ({len(fa)} -> {len(fb)} samples, {shared} identical)"


def _memory_says(a: dict, b: dict) -> bool:
    """Whether a long run's memory change is perf-memory's to say, not the status rule's: both
    sides grow (a failure on both: perf-memory compares the growth per step), or one grows and
    the other is a memory verdict (steady, inconclusive: a pass) or a baseline that skipped it.
    A side that grew against one that crashed, timed out, erred, or a candidate that skipped it,
    is not: the status rule and perf-memory say it (a run that grew until it was killed for
    running out of memory was once silent)."""
    ca, cb = a.get("category"), b.get("category")
    if ca == Category.GROWS and cb == Category.GROWS:
        return True
    other = b if ca == Category.GROWS else a if cb == Category.GROWS else None
    if other is None or other["status"] in BAD:
        return False
    return not (other is b and b["status"] == Status.SKIP)   # skipped now: the coverage warning


def compare_records(a: dict, b: dict, factor: float = DEFAULT_FACTOR, floor: float = DEFAULT_FLOOR,
                    machines: tuple[str | None, str | None] = (None, None),
                    noise: float | dict = 0.0, times_apart: bool = False) -> list[tuple[str, str, str]]:
    """(kind, rule, detail) for one check seen on both sides; empty when nothing changed
    that matters. ``machines``: where each side ran (perf times compare on one machine only);
    ``times_apart``: its perf times were taken in unlike company (against.company_apart)."""
    sa, sb = a["status"], b["status"]
    optim = a.get("suite") == "optim"
    perf = a.get("suite") == "perf"
    out: list[tuple[str, str, str]] = []
    if perf and _memory_says(a, b):
        pass   # memory that grows (or stopped): perf-memory below says it, with the figures
    elif sb in BAD and sa not in BAD and sa != Status.SKIP:
        out.append(("regression", "status", b.get("reason") or sb))
    elif sb in BAD and sa == Status.SKIP:
        out.append(("regression", "status", f"ran for the first time and {sb}: {b.get('reason') or ''}".rstrip(": ")))
    elif sa in BAD and sb not in BAD and sb != Status.SKIP:
        out.append(("improvement", "status", f"was {sa}: {a.get('reason') or ''}".rstrip(": ")))
    elif sa != Status.SKIP and sb == Status.SKIP:
        out.append(("warning", "coverage", f"now skipped: {b.get('reason') or ''}".rstrip(": ")))
    elif not optim and sa in WORKS and sb == Status.XFAIL:
        note = _inputs_note(a, b)
        out.append(("regression", "limitation", (f"({note}) " if note else "") + (b.get("reason") or
                                                                                 "now a known limitation")))
    elif not optim and sa == Status.XFAIL and sb in WORKS:
        note = _inputs_note(a, b)
        out.append(("improvement", "limitation", (f"({note}) " if note else "") +
                    f"was a known limitation: {a.get('reason') or ''}".rstrip(": ")))
    fa, fb = FALLBACK_ORDER.get(a.get("category")), FALLBACK_ORDER.get(b.get("category"))
    if fa is not None and fb is not None and fa != fb:
        ops = ", ".join((b.get("metrics") or {}).get("fallback_ops") or [])
        detail = f"{a['category']} -> {b['category']}" + (f" ({ops})" if ops else "")
        readers = [(r.get("metrics") or {}).get("fallback_reader") or 1 for r in (a, b)]
        if a.get("suite") == "ops" and readers[0] != readers[1]:
            out.append(("warning", "fallback", f"{detail}: not comparable: the fallbacks were read by two revisions of "
                                               f"the ops suite (reader {readers[0]} in the baseline, {readers[1]} in "
                                               "the candidate: the later one leaves out what the samples' making "
                                               "and the other pass fell back on, and sees the MPS kernels' own "
                                               "fallbacks); keep the baseline again (./compat baseline) to compare "
                                               "them"))
        else:
            out.append(("regression" if fb > fa else "improvement", "fallback", detail))
    if optim:
        out += _claim_changes(a, b)
    if perf:
        out += against.changes(a, b, *machines, noise, times_apart=times_apart)
    for found in (_parity_growth(a, b, factor, floor), _parity_nan(a, b), _repeatability(a, b)):
        if found:
            out.append(found)
    return out


def _is_verdict(rec: dict) -> bool:
    """Whether a record's status is its judge's word on a result: a pass, an expected mismatch,
    an unexpected pass, or a failure of a result it compared (rejudge.has_result); not a skip,
    an error, a crash, a timeout, nor a run that failed before anything was compared."""
    return rec["status"] in VERDICTS and (rec["status"] != Status.FAIL or rejudge.has_result(rec))


def across_judges(baseline: Side, candidate: Side, a: dict, b: dict, judges: tuple[int | None, int | None],
                  **rules) -> list[tuple[str, str, str]]:
    """(kind, rule, detail) for one check whose two records were written by two revisions of
    its judge (``judges``: records.judge_of; a baseline kept before this project was upgraded).
    Their verdicts and margins are of two yardsticks, not two versions: on one torch build, the
    recorded H100's float16 ``matrix_exp`` passed under parity judge 1, equal to the CPU bit for
    bit, and fails under judge 2, which finds NaN where float64 has numbers (the CPU's as well).
    So the rules that read a verdict or a margin (JUDGED_RULES) are not applied between them.
    Each record is taken as today's judge sees it where its metrics allow (matrix.judged_again:
    an older failure that accuracy clears passes), and where the two verdicts still differ the
    check is a warning, ``judge``: not comparable, keep the baseline again. A verdict judged
    again is an estimate from largest errors (harness.parity.numerics.rejudge), so it never
    makes a regression either. What no judge says (a skip, an error, a crash, a timeout, a
    fallback, a rerun's other bits) is compared by the rules as ever; ``rules`` are
    compare_records' figures."""
    wa, wb = baseline.as_written(a), candidate.as_written(b)
    both = _is_verdict(wa) and _is_verdict(wb)
    out = [found for found in compare_records(wa, wb, **rules)
           if found[1] not in JUDGED_RULES or (found[1] == "status" and not both)]
    if both:
        ta, tb = baseline.today(a), candidate.today(b)
        if ta["status"] != tb["status"]:
            out.insert(0, ("warning", "judge", _not_comparable(wb, (ta, tb), judges)))
    return out


def _not_comparable(b: dict, today: tuple[dict, dict], judges: tuple[int | None, int | None]) -> str:
    """The ``judge`` warning's detail: which judge wrote each side, what to do, what judging the
    older record again made of it, and the candidate's reason (what each judge held a result
    against is said once, in judge_lines)."""
    parts = [f"not comparable: judged by {b.get('suite')} judge {judges[0]} in the baseline, judge {judges[1]} in "
             "the candidate; keep the baseline again with this mps-compat (./compat baseline) to compare them"]
    for who, rec in zip(("baseline", "candidate"), today):
        note = rec.get("judged_again")
        if not isinstance(note, dict) or note.get("outcome") == "kept":
            continue
        if note.get("outcome") == "rerun":
            parts.append(f"judge {note['judge']}'s metrics cannot settle the {who}'s {note['was']}: {note['why']}")
        else:
            still = "still " if rec["status"] == note["was"] else ""
            parts.append(f"judged again from judge {note['judge']}'s metrics, the {who}'s {note['was']} would "
                         f"{still}read {rec['status']} today (an estimate from its largest errors): {note['why']}")
    if b["status"] != Status.PASS and b.get("reason"):
        parts.append(f"the candidate's {b['status']}: {b['reason']}")
    return "; ".join(parts)


def judge_lines(judged: Counter, not_comparable: Counter) -> list[str]:
    """One line per pair of judge revisions the two sides' records were written by (``judged``:
    (suite, the baseline's revision, the candidate's) -> checks; ``not_comparable``: the same
    -> its ``judge`` warnings), said before anything else: an upgrade of this project between
    the baseline and the candidate changed the yardstick, not torch, and every change below
    reads differently for it."""
    lines = []
    for (suite, ja, jb), n in sorted(judged.items(), key=lambda kv: -kv[1]):
        words = records.YARDSTICKS.get(suite, {})
        said = [f"{j} ({words[j]})" if j in words else str(j) for j in (ja, jb)]
        k = not_comparable[(suite, ja, jb)]
        differ = (f"the {k:,} whose verdicts still differ are warnings ('judge': not comparable), not regressions"
                  if k else "none of their verdicts differ once judged so, but their margins are not compared")
        lines.append(f"{n:,} {suite} check(s) were judged by two revisions of the {suite} judge: judge {said[0]} "
                     f"wrote the baseline's records, judge {said[1]} the candidate's; their verdicts and "
                     "margins are not compared with each other (an older failure is judged again from its metrics "
                     f"where they allow), and {differ}; to compare them, keep the baseline again with this "
                     "mps-compat (./compat baseline)")
    return lines


# --------------------------------------------------------------------------- the comparison

def uncompared_count(notes: list[str]) -> int:
    """The perf times a list of "N perf time(s) not compared: ..." notes counts (each leads
    with its count): Comparison.uncompared_times, and the first screen's line."""
    return sum(int(n.split(" ", 1)[0]) for n in notes)


@dataclasses.dataclass
class Comparison:
    baseline: Side
    candidate: Side
    changes: list[Change]
    unchanged: int
    factor: float
    floor: float
    notes: list[str] = dataclasses.field(default_factory=list)
    shared: int = 0                     # checks compared: held by both sides
    instruments: list[str] = dataclasses.field(default_factory=list)   # instrument_lines of the candidate
    judges: list[str] = dataclasses.field(default_factory=list)   # judge_lines: said first, the JSON's first notes
    uncompared: list[str] = dataclasses.field(default_factory=list)   # the notes of perf times not compared
    #                                     (another machine, thread count, company): counted in ``uncompared_times``

    @property
    def uncompared_times(self) -> int:
        """How many perf times the rules did not compare: "nothing regressed" does not speak for them."""
        return uncompared_count(self.uncompared)

    def of(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def regressions(self) -> list[Change]:
        return self.of("regression")

    def counts(self) -> dict[str, int]:
        return {k: len(self.of(k)) for k in KINDS} | {"unchanged": self.unchanged}

    def version_changes(self) -> list[tuple[str, str | None, str | None]]:
        """The packages whose versions differ, and Python's where both sides record it (a
        candidate built on another interpreter would blame its change on the SPECs)."""
        pa, pb = dict(self.baseline.packages), dict(self.candidate.packages)
        py = [((s.header.get("facts") or {}).get("python") or {}).get("version")
              for s in (self.baseline, self.candidate)]
        if all(isinstance(v, str) for v in py):
            pa["python"], pb["python"] = py
        return [(k, pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]

    def as_dict(self) -> dict:
        def side(s: Side) -> dict:
            return {"env_id": s.env_id, "sources": s.sources, "checks": len(s.records), "complete": s.complete,
                    "packages": s.packages, "host": (s.header.get("facts") or {}).get("host"),
                    "machine": s.machine}
        return {"compare_schema": COMPARE_SCHEMA, "record_schema": records.SCHEMA,
                "baseline": side(self.baseline), "candidate": side(self.candidate),
                "versions": [{"package": k, "baseline": a, "candidate": b} for k, a, b in self.version_changes()],
                "factor": self.factor, "floor": self.floor, "counts": self.counts(), "in_common": self.shared,
                "notes": self.judges + self.notes, "instruments": self.instruments,
                "changes": [c.as_dict() for c in self.changes]}


def instrument_lines(side: Side, who: str = "the candidate") -> list[str]:
    """One line per suite whose controls failed on ``side`` (status fail, error, crash or timeout),
    naming them and their targets: the verdicts of that suite there are unconfirmed. Then one
    per suite that measured on a target where none of its controls passed or failed (an older
    run file, the controls deselected): nothing checked its instruments there either."""
    failed: dict[str, list[str]] = {}
    checked: set[tuple[str, str]] = set()     # (suite, target) with a control that passed or failed
    measured: dict[str, list[str]] = {}       # suite -> the targets its checks ran on
    for (_, target), rec in sorted(side.records.items()):
        suite, device = rec.get("suite") or "?", rec.get("target") or "any"   # the device, without a workload
        if is_control(rec):
            if rec["status"] in BAD or rec["status"] == Status.PASS:
                checked.add((suite, device))
            if rec["status"] in BAD:
                failed.setdefault(suite, []).append(f"{control_of(rec).name} on {target}")
        elif rec["status"] != Status.SKIP and suite in SUITE_ORDER[1:]:   # env measures with no instrument
            if device not in measured.setdefault(suite, []):
                measured[suite].append(device)
    order = {s: i for i, s in enumerate(SUITE_ORDER)}

    def ranked(item):
        return order.get(item[0], len(order)), item[0]
    lines = [f"{who}'s {suite} instruments failed their controls ({', '.join(names)}): its verdicts are unconfirmed"
             for suite, names in sorted(failed.items(), key=ranked)]
    unchecked = {suite: [t for t in targets if (suite, t) not in checked] for suite, targets in measured.items()}
    lines += [f"{who}'s {suite} instruments were not checked on {', '.join(targets)} (no control of the suite ran "
              "there: an older run, or the controls deselected): its verdicts there are unconfirmed"
              for suite, targets in sorted(unchecked.items(), key=ranked) if targets]
    return lines


def check_figures(factor: float, floor: float) -> None:
    """Raise CompareError unless ``factor`` and ``floor`` are figures a comparison can use: a
    NaN compares false with everything, so a NaN floor or factor would silently switch the
    parity-growth rule off."""
    if not (math.isfinite(factor) and factor > 1):
        raise CompareError(f"--factor must be a finite number greater than 1, got {factor:g}")
    if not (math.isfinite(floor) and floor >= 0):
        raise CompareError(f"--floor must be a finite number of at least 0, got {floor:g}")


# --------------------------------------------------------------------------- which checks meet

Key = tuple[str, str]


@dataclasses.dataclass
class Matching:
    """Which records of the two sides are the same check: ``pairs`` (baseline key, candidate
    key), ``untagged`` (the pairs matched across a missing workload tag, by candidate key),
    and the keys of one side only."""
    pairs: list[tuple[Key, Key]]
    untagged: set[Key]
    only_baseline: list[Key]
    only_candidate: list[Key]


def _bare(rec: dict) -> tuple[str, str]:
    """A record's check and target without its workload."""
    return rec["check"], rec.get("target") or "any"


def match(baseline: Side, candidate: Side) -> Matching:
    """The same check at the same target (and workload) on both sides; then, among the rest,
    a record without a workload tag and the other side's one record of that check and target
    with a tag. A measurement that raised before the suite tagged its record (run files
    older than issue 26) reads ``cpu`` where its result belongs to ``cpu [small workload]``;
    matched, it is compared with its baseline (a regression, say), where unmatched it would
    be listed apart as appeared and disappeared and never fail the gate. Only a lone partner
    is taken: with two workloads to choose from the record is not guessed at."""
    a, b = baseline.records, candidate.records
    pairs = [(k, k) for k in a if k in b]
    only_a = {k for k in a if k not in b}
    only_b = {k for k in b if k not in a}
    untagged: set[Key] = set()
    for lone, lone_recs, pool, pool_recs, lone_is_a in ((only_a, a, only_b, b, True), (only_b, b, only_a, a, False)):
        tagged: dict[tuple[str, str], list[Key]] = {}
        for k in pool:
            if records.workload_of(pool_recs[k]):
                tagged.setdefault(_bare(pool_recs[k]), []).append(k)
        for k in sorted(lone):
            if records.workload_of(lone_recs[k]):
                continue
            partners = [p for p in tagged.get(_bare(lone_recs[k]), []) if p in pool]
            if len(partners) != 1:
                continue
            pair = (k, partners[0]) if lone_is_a else (partners[0], k)
            pairs.append(pair)
            untagged.add(pair[1])
            lone.discard(k)
            pool.discard(partners[0])
    return Matching(pairs, untagged, sorted(only_a), sorted(only_b))


# --------------------------------------------------------------------------- enough in common

BOTH = "both"                 # tools.compare: each side's checks mostly found in the other
FROM_CANDIDATE = "candidate"  # pytest --baseline: this run's checks mostly found in the baseline
PARTIAL = "partial"           # --partial: any overlap at all
MIN_SHARED = 0.5              # the share of a side's checks that must be in common


def _holds(side: Side) -> str:
    """What a side holds, for a message: "120 checks (ops, parity; cpu, mps)"."""
    suites = sorted({r.get("suite") or "?" for r in side.records.values()})
    targets = sorted({t for _, t in side.records})
    more = f" and {len(targets) - 4} more" if len(targets) > 4 else ""
    n = len(side.records)
    return f"{n} check{'' if n == 1 else 's'} ({', '.join(suites)}; {', '.join(targets[:4])}{more})"


def overlap_problem(baseline: Side, candidate: Side, judged_from: str = BOTH) -> str | None:
    """Why these two sides are not worth comparing, in one line, or None when they are.

    A comparison can only speak for the checks both sides hold: a candidate of the env suite
    against a baseline of the ops suite shares none, and its "0 regressions" would read as a
    clean upgrade. So (``judged_from``):

    * ``BOTH`` (tools.compare): at least MIN_SHARED of each side's checks must be in the
      other. Two runs of one selection share nearly all (checks come and go between versions
      by the few percent OpInfo's op list and the claims table change); under half means
      another selection, another target or another ``--workload``;
    * ``FROM_CANDIDATE`` (``pytest --baseline``): this run is often a ``-k`` / ``-m`` subset
      of the baseline, and the baseline's other checks are simply not run here; what matters
      is that this run's checks find theirs, so MIN_SHARED of the candidate's checks must be
      in the baseline;
    * ``PARTIAL`` (``--partial``): the user accepts a partial overlap; none at all is still
      nothing to compare.

    Under ``BOTH`` a side that was cut off before its end (``Side.complete``: a run killed
    between two lines reads back whole, with no end line; one interrupted or stopped by -x
    says so in its end line) is refused too: half its checks in
    common was enough to exit 0 where the crash partway was the upgrade's. ``--partial`` takes
    it, and the comparison says it was cut off.
    """
    shared = len(match(baseline, candidate).pairs)
    n_a, n_b = len(baseline.records), len(candidate.records)
    if judged_from == FROM_CANDIDATE:
        if shared and shared >= MIN_SHARED * n_b:
            return None
        found = f"only {shared} of this run's {_holds(candidate)} are" if shared else \
            f"none of this run's {_holds(candidate)} is"
        return (f"{found} in the baseline, which holds {_holds(baseline)}: "
                "run the selection the baseline was kept with, or keep a baseline of this selection first "
                "(--save-baseline FILE with the same -m, -k and --workload)")
    if judged_from not in (BOTH, PARTIAL):
        raise ValueError(f"unknown overlap rule {judged_from!r}; known: {BOTH}, {FROM_CANDIDATE}, {PARTIAL}")
    cut = [side for side in (candidate, baseline) if not side.complete]
    if cut and judged_from == BOTH:
        side = cut[0]
        return (f"{side.label} was cut off before its end (a run in it did not reach its end: killed, crashed, "
                f"interrupted, stopped by -x or a time limit, or still running) and holds {_holds(side)}: what it did not reach may be what broke, so it passes no "
                "upgrade check; run it again to its end, or pass --partial to compare what it holds")
    if shared and (judged_from == PARTIAL or shared >= MIN_SHARED * max(n_a, n_b)):
        return None
    held = f"the baseline holds {_holds(baseline)}, the candidate {_holds(candidate)}" + (
        "" if candidate.complete else " (it was cut off or interrupted before its end)")
    if not shared:
        return (f"nothing to compare: {held}, 0 in common: compare runs of the same selection "
                "(the same suites, targets and --workload)")
    return (f"too little to compare: {held}, only {shared} in common: compare runs of the same selection "
            f"(the same suites, targets and --workload), or pass --partial to compare the {shared} they share")


# --------------------------------------------------------------------------- the comparison

def switch_notes(baseline: Side, candidate: Side, compared: list[dict]) -> list[str]:
    """A note when the two sides ran with different MPS kernel switches (fast math, Metal matmul:
    harness.env.fitness.KERNEL_VARS) and mps checks were compared: their numbers and times are
    of different kernels, so a change there may be the switch's doing, not the versions'."""
    mps = sum(r.get("target") == "mps" for r in compared)
    on = [fitness.kernel_switches((s.header.get("facts") or {}).get("env"),
                                  ((s.header.get("facts") or {}).get("torch") or {}).get("version"))
          for s in (baseline, candidate)]
    if not mps or on[0] == on[1]:
        return []
    said = [", ".join(o) if o else "neither switch" for o in on]
    return [f"{mps} mps check(s) compared across different MPS kernel switches: the baseline ran with {said[0]}, the "
            f"candidate with {said[1]}; those switches change the kernels MPS runs (fast math, the Metal matmul), so a "
            "change on mps may be the switch's doing, not the versions'; run both sides with the same "
            f"{' and '.join(fitness.KERNEL_VARS)}"]


def _selected_as(header: dict) -> tuple[str, str, tuple[str, ...]]:
    """A run's selection as something to compare: its -m, its -k, its paths inside a suite."""
    sel = selection.selection_of(header)
    return ((sel.get("markexpr") or "").strip(), (sel.get("keyword") or "").strip(),
            tuple(sorted(selection.narrowed_paths(sel))))


def within_selection(baseline: Side, run: Side) -> tuple[Side, int]:
    """``baseline`` narrowed to what ``run`` (judged from its side: ``pytest --baseline``, and
    ./compat candidate's runs) set out to run, and how many of the baseline's checks that
    leaves out. Listed as disappeared, the checks a run never asked for buried the ones that
    went (`pytest suites -m env --baseline B` listed 84 parity checks of B). A baseline check
    the run has no record of stays, and is listed as disappeared, when a selection of the run
    (each of its runs' own: ./compat candidate's parts) certainly selected it (its paths, -m
    and -k: harness.report.selection.selects), even where the whole suite is gone, or when the
    baseline's run of it made the same selection as one of the run's (the same -m, -k and paths
    inside a suite: `./compat baseline -m "parity and cpu"`, then the candidate with it). Else
    (a -m, -k, path or --deselect that leaves it out) it was not asked for here."""
    chosen = [selection.selection_of(h) for h in (run.headers.values() or [run.header])]
    same = {_selected_as(h) for h in (run.headers.values() or [run.header])}
    ran = {_bare(r) for r in run.records.values()}
    alike = {run_id for run_id, header in baseline.headers.items() if _selected_as(header) in same}

    def asked(rec: dict) -> bool:
        return _bare(rec) in ran or rec.get("run") in alike or any(selection.selects(sel, rec) for sel in chosen)
    keep = {key: rec for key, rec in baseline.records.items() if asked(rec)}
    return dataclasses.replace(baseline, records=keep), len(baseline.records) - len(keep)


def _uncompared_keys(pairs: list[tuple[dict, dict, tuple[str, str]]], unlike: dict,
                     machines: tuple[str | None, str | None]) -> set[tuple[str, str]]:
    """The perf times the rules do not compare (another machine, another thread count, unlike
    company: the notes count them): no rule spoke for them, so they are not "unchanged"."""
    timed = [(a, b, kb) for a, b, kb in pairs if a.get("category") in Category.TIMES]
    if machines[0] != machines[1]:
        return {kb for _, _, kb in timed}
    return set(unlike) | {kb for a, b, kb in timed if against.threads_apart(a, b) or against.clocks_apart(a, b)}


def targets_lost(candidate: Side, pairs: list[tuple[dict, dict, tuple[str, str]]]) -> list[Change]:
    """``target-lost``: one regression per target (mps, cuda...) whose every compared check the
    candidate skipped where the baseline ran some: the accelerator is gone, whatever each check's
    own coverage warning says (a torch that dropped this macOS skipped every mps check with
    "MPS unavailable", and exited 0 with "4 warnings"). The reason is the candidate's own for the
    target (its header), else its checks' commonest skip reason."""
    ran: Counter = Counter()
    skipped: dict[str, list[str]] = {}
    for a, b, _ in pairs:
        target = b.get("target") or a.get("target") or "any"
        if target in ("any", "cpu"):
            continue   # no device to lose: the CPU runs wherever torch imports
        ran[target] += a["status"] != Status.SKIP
        skipped.setdefault(target, []).append((b.get("reason") or "") if b["status"] == Status.SKIP else None)
    lost = []
    for target, reasons in sorted(skipped.items()):
        if not ran[target] or any(r is None for r in reasons):
            continue
        said = (((candidate.header.get("targets") or {}).get(target) or {}).get("reason") or
                Counter(reasons).most_common(1)[0][0] or "no reason given")
        lost.append(Change("regression", "target-lost", f"(every {target} check)", target,
                           f"{ran[target]} ran", f"all {len(reasons)} skipped",
                           f"the candidate cannot run on {target}: every check compared there is skipped "
                           f"({len(reasons)}, {ran[target]} of which ran in the baseline): {said}"))
    return lost


def compare(baseline: Side, candidate: Side, factor: float = DEFAULT_FACTOR,
            floor: float = DEFAULT_FLOOR, judged_from: str | None = None) -> Comparison:
    """The comparison, check by check. ``judged_from`` (BOTH, FROM_CANDIDATE, PARTIAL) first
    refuses sides with too little in common (``overlap_problem``), raising CompareError with
    its line; None leaves that to the caller."""
    check_figures(factor, floor)
    if judged_from is not None:
        problem = overlap_problem(baseline, candidate, judged_from)
        if problem:
            raise CompareError(problem)
    changes: list[Change] = []
    unchanged = 0
    machines = (baseline.machine, candidate.machine)
    found_pairs = match(baseline, candidate)
    pairs = [(baseline.records[ka], candidate.records[kb], kb) for ka, kb in found_pairs.pairs]
    # perf times taken in unlike company (one side beside other suites, the other alone) are not compared
    unlike = {kb: apart for a, b, kb in pairs if a.get("category") in Category.TIMES
              for apart in [against.company_apart(baseline.company.get(a.get("run")),
                                                  candidate.company.get(b.get("run")))] if apart}
    noise = against.spreads([(a, b) for a, b, kb in pairs
                            if a.get("category") in Category.TIMES and b.get("category") in Category.TIMES
                            and kb not in unlike])
    uncompared_keys = _uncompared_keys(pairs, unlike, machines)
    entries = ([(kb, a, b) for a, b, kb in pairs] + [(k, baseline.records[k], None) for k in found_pairs.only_baseline]
               + [(k, None, candidate.records[k]) for k in found_pairs.only_candidate])
    judged: Counter = Counter()       # (suite, the baseline's judge, the candidate's) -> checks (judge_lines)
    not_comparable: Counter = Counter()   # the same -> its 'judge' warnings
    for key, a, b in sorted(entries, key=lambda e: e[0]):
        if a is None or b is None:
            rec = a or b
            changes.append(Change("disappeared" if b is None else "appeared", "presence", key[0], key[1],
                                  _state(a) if a else "", _state(b) if b else "", rec.get("reason") or ""))
            continue
        judges = (baseline.judge_of(a), candidate.judge_of(b))
        rules = dict(factor=factor, floor=floor, machines=machines, noise=noise, times_apart=key in unlike)
        if judges[0] != judges[1]:   # a baseline kept before this project was upgraded
            found = across_judges(baseline, candidate, a, b, judges, **rules)
            judged[(a.get("suite"), *judges)] += 1
            not_comparable[(a.get("suite"), *judges)] += sum(rule == "judge" for _, rule, _ in found)
        else:
            found = compare_records(a, b, **rules)
        if key in found_pairs.untagged:
            bare = "baseline" if not records.workload_of(a) else "candidate"
            caution = (f"(matched across a missing workload tag: the {bare}'s record has no workload tag, "
                       f"taken to be this one) ")
            found = [(kind, rule, caution + detail) for kind, rule, detail in found]
        target = records.target_of(b) if records.workload_of(b) else records.target_of(a)
        changes += [Change(kind, rule, key[0], target, _state(a), _state(b), detail) for kind, rule, detail in found]
        unchanged += not found and key not in uncompared_keys
    changes += targets_lost(candidate, pairs)
    notes = []
    if found_pairs.untagged:
        notes.append(f"{len(found_pairs.untagged)} check(s) matched across a missing workload tag: a record without "
                     "one (a measurement that failed before the suite tagged its records, in an older run file) was "
                     "compared with the other side's only record of that check and target; read them with care")
    notes += switch_notes(baseline, candidate, [b for _, b, _ in pairs])
    timed = [a for a, _, _ in pairs if a.get("category") in Category.TIMES]
    first = len(notes)   # from here, the notes of perf times not compared are kept apart too (``uncompared``)
    for (ca, cb), n in sorted(Counter(unlike.values()).items(), key=lambda kv: -kv[1]):
        notes.append(f"{n} perf time(s) not compared: the baseline timed them {ca}, the candidate {cb}; after "
                     "thousands of other checks in one process the same op times 0.3x-1.8x what it does in a run of "
                     "perf alone, versions alike, so such times compare only alike (a baseline kept by an earlier "
                     "./compat baseline ran every suite in one run: keep it again with ./compat baseline)")
    claims = sum(a.get("suite") == "optim" and a.get("category") in Category.CLAIM_VERDICTS for a, _, _ in pairs)
    if claims and machines[0] != machines[1]:
        notes.append(f"{claims} optimization claim(s) compared across two machines (see machines above): a claim's "
                     "ratio is each machine's own, so a verdict or ratio that changed may be the machine's doing, "
                     "not the versions'; to judge an upgrade, run both sides on one machine")
    if timed and machines[0] != machines[1]:
        notes.append(f"{len(timed)} perf time(s) not compared: the baseline ran on "
                     f"{machines[0] or 'an unnamed machine'}, "
                     f"the candidate on {machines[1] or 'an unnamed machine'}; times (and the models' peak memory, "
                     "which another device's kernels change) compare on one machine only "
                     "(keep a baseline on this machine: ./compat baseline -m perf)")
    elif timed:
        apart: dict[tuple[str, str], int] = {}
        for a, b, _ in pairs:
            key = against.threads_apart(a, b) if a.get("category") in Category.TIMES else None
            if key:
                apart[key] = apart.get(key, 0) + 1
        for (ta, tb), n in sorted(apart.items(), key=lambda kv: -kv[1]):
            notes.append(f"{n} perf time(s) not compared: the baseline measured them with {ta} thread(s) per "
                         f"process, the candidate with {tb}; a time only compares at one thread count "
                         "(pytest-xdist's -n shares the cores among its workers: run both sides with the same -n, "
                         "or both with ./compat baseline and ./compat candidate, which time perf serially)")
        clocks: Counter = Counter(against.clocks_apart(a, b) for a, b, _ in pairs
                                  if a.get("category") in Category.TIMES and not against.threads_apart(a, b))
        for (ca, cb), n in sorted(((k, n) for k, n in clocks.items() if k), key=lambda kv: -kv[1]):
            notes.append(f"{n} perf time(s) not compared: the baseline timed them by the {ca}, the candidate by the "
                         f"{cb}; a device's events time its kernels alone, the wall clock also the launches and "
                         "waits (MPS times ops by its events from torch 2.15, by the wall clock before), so the two "
                         "figures measure different things; the models' steps, timed by the wall clock on both "
                         "sides, are still compared")
    uncompared = [n for n in notes[first:] if " perf time(s) not compared: " in n]
    untold = [c for c in changes if c.kind == "warning" and c.rule.startswith("perf-") and c.rule != "perf-memory"
              and c.detail.startswith("inconclusive: ") and not against.seen_once(c.kind, c.detail)]
    hidden = [c for c in untold if c.detail.startswith((f"inconclusive: {against.NOT_SLOWER}",
                                                        f"inconclusive: {against.FASTER_HOST}"))]
    untold = [c for c in untold if c not in hidden]
    if hidden:   # not slower as measured, but the two sides were not measured alike
        notes.append(f"{len(hidden)} perf figure(s) not slower, but not comparable: one side was measured under "
                     "markedly more load, or the candidate's host ran faster by its control, which can hide a "
                     "slowdown; keep the baseline again at a quiet moment (./compat baseline) and measure the "
                     "candidate with nothing else running (./compat candidate SPEC)")
    if untold:   # what the user does about them: a warning with no switch is one they cannot act on
        host = sum("(control)" in c.detail for c in untold)
        notes.append(f"{len(untold)} perf figure(s) slower but inconclusive"
                     + (f" ({host} because the host itself ran slower, by the control)" if host else "")
                     + ": the machine was busy or noisy while one side was measured, not necessarily the "
                       "versions; measure the candidate again with nothing else running (./compat candidate "
                       "SPEC, or ./compat suites -m perf and python -m tools.compare), and keep baselines at a "
                       "quiet moment too (./compat baseline)")
    return Comparison(baseline, candidate, changes, unchanged, factor, floor, notes, len(pairs),
                      instrument_lines(candidate), judge_lines(judged, not_comparable), uncompared)


# --------------------------------------------------------------------------- rendering

SHOW_AT_MOST = 40   # appeared / disappeared rows in table and md output (json has every one)


DETAIL_WIDTH = 160  # table output only; md and json keep the whole text


def _rows(changes: Iterable[Change], width: int | None = None) -> list[list[str]]:
    def cut(text: str) -> str:
        return text if width is None or len(text) <= width else text[:width - 1] + "…"
    return [[c.check, c.target, c.rule, c.before, c.after, cut(c.detail)] for c in changes]


COMPARISON_STARTS = (b"# Upgrade check", b"mps-compat: upgrade check", b'{\n "compare_schema"')   # render's formats


def output_problem(path) -> str | None:
    """Why a comparison cannot be written to ``path`` (``--compare-out``, ``tools.compare
    --out``), or None: a file that holds something other than an earlier comparison, which
    replacing would lose."""
    why = runfiles.held_otherwise(path, lambda head: head.startswith(COMPARISON_STARTS),
                                  "an upgrade check's comparison")
    return f"{why}; replacing it would lose what it holds; give a new path or an earlier comparison" if why else None


def render(cmp: Comparison, fmt: str = "table", show_all: bool = False) -> str:
    """The comparison as a readable table (``table``), Markdown (``md``) or JSON (``json``)."""
    import json
    if fmt == "json":
        return json.dumps(cmp.as_dict(), indent=1, ensure_ascii=False)
    from tabulate import tabulate
    md = fmt == "md"
    tablefmt = "github" if md else "simple"

    esc = escape if md else str

    heading = (lambda t: f"## {t}") if md else (lambda t: f"{t}\n{'-' * len(t)}")
    lines = ["# Upgrade check: baseline against candidate" if md else "mps-compat: upgrade check", "",
             f"- baseline:  {esc(cmp.baseline.describe())}", f"- candidate: {esc(cmp.candidate.describe())}"]
    versions = cmp.version_changes()
    if versions:
        lines.append("- versions:  " + esc(", ".join(f"{k} {a or '-'} -> {b or '-'}" for k, a, b in versions)))
    if cmp.baseline.machine != cmp.candidate.machine:
        lines.append(f"- machines:  {esc(cmp.baseline.machine or '?')} -> {esc(cmp.candidate.machine or '?')}")
    c = cmp.counts()
    summary = (f"{c['regression']} regression(s), {c['warning']} warning(s), {c['improvement']} improvement(s), "
               f"{c['appeared']} appeared, {c['disappeared']} disappeared, {c['unchanged']} unchanged"
               + (f", {cmp.uncompared_times} perf time(s) not compared" if cmp.uncompared_times else ""))
    if md:   # a page is read from the top: its verdict first (a terminal's last line is the one seen)
        lines += ["", f"**{summary}**"]
    lines.append("")
    for line in cmp.judges:   # first: a yardstick that changed between the sides reads as changes below
        lines += [f"**note: {esc(line)}**" if md else f"note: {line}", ""]
    for line in cmp.instruments:   # before the regressions: a candidate whose instruments failed proves nothing
        lines += [f"**{esc(line)}**" if md else line, ""]
    titles = {"regression": "Regressions", "warning": "Warnings", "improvement": "Improvements",
              "appeared": "Checks only in the candidate", "disappeared": "Checks only in the baseline"}
    for kind in KINDS:
        changes = cmp.of(kind)
        if not changes:
            continue
        if kind in ("appeared", "disappeared"):  # the ones that did not pass first: those are news
            changes = sorted(changes, key=lambda c: (not (c.after or c.before).startswith(BAD), c.check, c.target))
        shown = changes if show_all or kind in ("regression", "warning", "improvement") else changes[:SHOW_AT_MOST]
        # A detail quotes a record's reason, which can be any length: Markdown keeps a reason's
        # length (records.REASON_MAX), the JSON the whole text.
        rows = [[esc(v) for v in row] for row in _rows(shown, records.REASON_MAX if md else DETAIL_WIDTH)]
        lines += [heading(f"{titles[kind]} ({len(changes)})"), "",
                  tabulate(rows, headers=["check", "target", "rule", "baseline", "candidate", "detail"],
                           tablefmt=tablefmt, disable_numparse=True), ""]
        if len(shown) < len(changes):
            lines += [f"... and {len(changes) - len(shown)} more (--all, or --format json, lists every one)", ""]
    for note in cmp.notes:
        lines += [f"note: {esc(note)}", ""]
    if not md:
        lines.append(summary)
    if not cmp.candidate.complete:
        lines.append("note: the candidate run was cut off or interrupted before its end; checks it did not reach are listed as "
                     "disappeared")
    return "\n".join(lines) + "\n"
