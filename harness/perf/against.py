"""A perf record against the same check of a baseline run: what counts as slower, faster, or
memory that now grows (harness.report.compare applies these rules with the others).

Times are only compared between runs **of the same machine** (the run header's host) with the
same threads per process: a figure from another machine says nothing about an upgrade.
Within that, a time is a regression when the candidate is slower than the baseline by more
than the check's tolerance (``TOLERANCE``) *with the two intervals apart*: the candidate's
interval starts above the baseline's interval's end times (1 + tolerance). Two allowances
keep a busy machine from crying wolf:

* the control (harness.env.timing.control_work: pure Python, the same in every torch) is
  timed in every round; when the candidate's control ran slower than the baseline's, the host
  itself was slower, and the allowance grows by that factor;
* the tolerance itself is the run-to-run drift measured on a noisy 2-core VM
  (benchmarks/perf_false_alarms.py: clean reruns against each other, none flagged).

A time slower by more than the tolerance whose intervals are not apart (or whose slowdown the
control explains) is a warning, "inconclusive", never a regression. Faster by as much is an
improvement. What a new input shape costs (``varying-length``) is compared as a difference:
a regression when the candidate's cost per new shape exceeds the baseline's by more than
``SHAPE_TOLERANCE`` of a step, intervals apart. A time that is not slower, measured on a host
whose control ran faster by enough to hide a slowdown beyond the tolerance, is a warning too.

**Cold starts** (``perf-cold-start``). A cold start is what a user waits for from a fresh
process: importing torch and transformers, building the model and its first step (the first
step's own time is ``perf-time``'s). Their sum, per process where the record keeps each, is
compared with TOLERANCE["cold-start"] (50%): a regression with the processes' figures apart,
naming what grew most and what to do; a warning where they overlap. A record without the import
and build figures (an older file) is left to the first step's rule.

**Memory over a long run** (``perf-memory``). Memory that grows where it did not is a
regression; memory that stopped growing, an improvement. Where both sides grow, each reading's
growth per step (harness.perf.memory.growth's figure and interval over the steps between its
thirds) is compared: ``MEMORY_FACTOR`` times faster with the intervals apart is a regression
(1 MiB a step becoming 50 reaches the machine's memory fifty times sooner), overlapping a
warning. A run that grew in the baseline and now crashes, times out or errs (killed for
running out of memory) is a regression; one that was steady and is now too close to call, a
warning.

**Peak memory** (``perf-peak``). A model's training step, inference and generation are also
weighed (harness.perf.models.weighed): the tensor bytes live at the call's peak, counted from
the storages its ops make, as the optimization suite counts them. That count is the same to the
byte for the same call in every run (no noise to allow for, no load to weigh, nothing to
measure again), so a peak larger than the baseline's by more than ``PEAK_TOLERANCE`` (and
``PEAK_FLOOR``) at the same model and shape on the same machine is a regression: an upgrade
that makes a step hold more is one after which a batch that fitted may not. The detail says
which part grew (activations, temporaries, optimizer state ...). Smaller by as much is an
improvement. Another machine may pick other kernels, which keep other tensors: its peak is not
compared.

**Load.** The control says how fast the host ran, not how busy it was: a neighbour that
comes and goes (another session, a build, the other worker on a 2-core VM) takes cores and
memory bandwidth from the measurement without slowing the control's pure Python alike. Every
time therefore records the machine's load around it (harness.env.timing.load_during) and a
time regresses only when both runs met a like load. The loads are *markedly different*
(``load_apart``) when their load per core (the larger of the two one-minute load averages,
over the machine's CPUs) differs by more than ``LOAD_GAP``, half a task per core: on the
2-core VM that is one busy process more beside the measurement, which moved op times 2x in
clean reruns (timing.alone's measurements); the measurement's own threads and the suite's
other worker are there in both runs alike, so they do not count against it. An absolute
ceiling (say one task per core) is not used: a quiet 2-core machine running a 2-thread
measurement is near it already, so it would call every run loaded. Then a slowdown beyond
the tolerance, intervals apart, is a warning: "inconclusive: the baseline was measured under
load X per core, the candidate under Y"; so is a time that is *not* slower under such loads
(``hidden_by``): a baseline measured busy is slower for it, and hides what the candidate lost
(2.0 s at load 1.5 per core against 1.8 s at 0.1 once read unchanged). Where a side's
record has no reading (a file older than the readings, a platform without a load average)
the load is unknown: the figures are judged as before, and the detail says the load is unknown. The same holds for a new shape's
cost, and for a time claim of the optimization suite (harness.report.compare).
"""
from __future__ import annotations

import math
import statistics

from harness.core.records import Category, Status, Verdict
from harness.env import timing

# Allowed slowdown before a time regresses, by what the check times (relative).
TOLERANCE = {"op": 0.30, "train-step": 0.20, "inference": 0.20, "generate": 0.25, "cold-start": 0.50,
             "cold-inference": 0.50, "cold-generate": 0.50}
COLD_KINDS = ("cold-start", "cold-inference", "cold-generate")   # a fresh process's first call (harness.perf.models.COLD)
SHAPE_TOLERANCE = 0.15     # of a step: what a new shape may cost more than it did
SPREAD_Z = 6.0             # a slowdown must stand this many robust deviations out of the pair's spread
# The most the pair's spread may widen the allowance: twice the largest move of a single op
# between clean reruns on the noisy 2-core VM (2-3x). A pair that spread wider than that was
# disturbed (a neighbour's burst in one run), and its spread would otherwise excuse anything:
# a 15x injected slowdown, intervals ten times apart, was once called inconclusive there.
SPREAD_CAP = 6.0
LOAD_GAP = 0.5             # tasks per core: two runs' loads further apart than this are not alike
CONFIRMATIONS = 2          # fresh processes that measure again a figure that looks like a regression
BASELINE_CONFIRMATIONS = 1  # fresh processes that measure again a baseline's figure (kept_again): two in all,
#                             the faster kept. Two more made the baseline's perf run 718 s on the 2-core VM (one
#                             process: 167-201 s) and the self-tests' end-to-end upgrade check 310 s (137 s)
# A weighed call's peak may grow by this much of the baseline's before it regresses: the count is
# exact, so this is not noise but what counts as a loss (a few more temporaries in a new
# transformers are not one; a tenth more of a step's memory is a batch that may no longer fit),
# and at least PEAK_FLOOR bytes, so a tiny model's few kilobytes never are.
PEAK_TOLERANCE = 0.10
PEAK_FLOOR = 2 ** 20
PEAKED = ("train-step", "inference", "generate")   # the model checks that are weighed
TIME_RULES = ("perf-time", "perf-shape", "perf-cold-start")   # the rules whose figures a fresh process may read otherwise


def kind_of(rec: dict) -> str | None:
    """Which rule a perf record falls under: an op time, a model check's name, memory, or None."""
    subject, variant = rec.get("subject") or "", rec.get("variant") or ""
    if subject.startswith("memory-"):
        return "memory"
    if subject.startswith("model-"):
        return variant
    return "op" if rec.get("category") in Category.TIMES else None


def _num(m: dict, key: str) -> float | None:
    v = m.get(key)
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None   # an infinite median or bound is no figure to compare (log of 0)


def machine_of(facts: dict | None) -> str | None:
    """The machine a run's times belong to, from its header's facts: the host name, the CPU
    (model and cores usable), the GPUs and the Mac's chip. A host name alone is not enough:
    CI runners and VMs share names across machines. None when the facts do not say."""
    if not facts or not facts.get("host"):
        return None
    cpu = facts.get("cpu") or {}
    gpus = ",".join(str(d.get("name", d)) if isinstance(d, dict) else str(d)
                    for d in ((facts.get("torch") or {}).get("cuda_devices") or []))
    mac = facts.get("mac") or {}
    chip = mac.get("chip") or mac.get("model") or "" if isinstance(mac, dict) else ""
    parts = [facts["host"], (facts.get("os") or {}).get("machine") or "", str(cpu.get("model") or ""),
             f"{cpu.get('usable') or cpu.get('logical') or '?'} cpus", gpus, chip]
    return " / ".join(p for p in parts if p)


def comparable(a: dict, b: dict, host_a: str | None, host_b: str | None) -> str | None:
    """Why the times of ``a`` and ``b`` (run on machines ``host_a`` / ``host_b``, machine_of)
    cannot be compared, or None when they can."""
    if not host_a or host_a != host_b:
        return f"they ran on different machines ({host_a or '?'} and {host_b or '?'})"
    apart = threads_apart(a, b)
    if apart:
        return f"they ran with {apart[0]} and {apart[1]} threads per process"
    clocks = clocks_apart(a, b)
    return f"they were timed by different clocks ({clocks[0]} and {clocks[1]})" if clocks else None


def clocks_apart(a: dict, b: dict) -> tuple[str, str] | None:
    """The two records' clocks (``metrics.clock``: "wall clock", "cuda events", "mps events"),
    when both say and they differ; None when alike or either is unknown (an older file). A
    device's events time the kernels alone, the wall clock also the host's launches and waits:
    an MPS upgrade from torch 2.14 (the wall clock) to 2.15 (MPS events) changes what a figure
    measures, not how fast the op is, so such times are not compared."""
    ca, cb = ((r.get("metrics") or {}).get("clock") for r in (a, b))
    if not isinstance(ca, str) or not isinstance(cb, str) or ca == cb:
        return None
    return ca, cb


def threads_apart(a: dict, b: dict) -> tuple[str, str] | None:
    """The two records' thread counts per process, as text ("?" where unknown), when they
    differ: their times do not compare (``comparable``); None when they are alike."""
    ta, tb = (a.get("metrics") or {}).get("threads"), (b.get("metrics") or {}).get("threads")
    if ta == tb:
        return None
    return tuple(str(t) if t is not None else "?" for t in (ta, tb))


def company_apart(ca: tuple[str, ...] | None, cb: tuple[str, ...] | None) -> tuple[str, str] | None:
    """The company each side's perf times were taken in, as words, when one side timed them in
    a pytest run beside other suites and the other in a run of perf alone; None when alike or
    either is unknown (``ca`` / ``cb``: the other suites of that record's run, or None).

    The process a time is taken in is part of the measurement: after thousands of op and
    parity checks (an earlier ``./compat baseline``'s single serial run), the same versions on
    the 2-core VM timed softmax 0.42x and linear's backward 1.66x what a run of perf alone did,
    intervals apart, thread count alike. Such times compare only alike."""
    if ca is None or cb is None or bool(ca) == bool(cb):
        return None
    return tuple(f"beside {', '.join(c)}" if c else "in a run of perf alone" for c in (ca, cb))


def load_apart(ma: dict, mb: dict) -> str | None:
    """"the baseline was measured under load X per core, the candidate under Y" when the two
    records' loads (their ``load`` metrics) differ by more than LOAD_GAP per core; None when
    they are alike or either is unknown (``load_unknown`` says which)."""
    la, lb = (timing.load_per_core(m.get("load")) for m in (ma, mb))
    if la is None or lb is None or abs(la - lb) <= LOAD_GAP:
        return None
    return f"the baseline was measured under load {la:.2g} per core, the candidate under {lb:.2g}"


def load_unknown(ma: dict, mb: dict) -> str:
    """Empty when both records say their load; else which side does not (an older file)."""
    missing = [side for side, m in (("baseline", ma), ("candidate", mb)) if timing.load_per_core(m.get("load")) is None]
    if not missing:
        return ""
    return f"load unknown ({' and '.join(missing)}: no load reading, a record older than the readings)"


def under_load(ma: dict, mb: dict, found: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """A time's (kind, rule, detail) changes with the two runs' load weighed in: a regression
    under markedly different load becomes a warning, inconclusive (the module's docstring);
    where a side's load is unknown, the verdict stands and the detail says so."""
    apart, unknown = load_apart(ma, mb), load_unknown(ma, mb)
    out = []
    for kind, rule, detail in found:
        if kind == "regression" and apart:
            out.append(("warning", rule, f"inconclusive: {apart} (more than {LOAD_GAP:g} apart); {detail}"))
        elif kind == "improvement" and apart:
            out.append((kind, rule, f"{detail}; note: {apart}, which may explain it"))
        elif kind == "regression" and unknown:
            out.append((kind, rule, f"{detail}; {unknown}"))
        else:
            out.append((kind, rule, detail))
    return out


ONE_PROCESS = ("seen in one process only: the run had no --baseline, so a figure that looked slower was not "
               "measured again in fresh processes (./compat candidate does)")


def seen_once(kind: str, detail: str) -> bool:
    """Is this change a slowdown that would regress had it been measured again (``measured_once``)?"""
    return kind == "warning" and detail.startswith(f"inconclusive: {ONE_PROCESS}")


def measured_once(mb: dict, found: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """A time's (kind, rule, detail) changes with the candidate's processes weighed in: a
    slowdown is a regression only when the figure was measured again in fresh processes
    (``confirmed``: a run with ``--baseline`` does it for every figure that looks slower,
    ``./compat candidate`` always has one). A figure measured in one process only, a plain run
    compared afterwards (the report's section against your baseline, ``tools.compare`` of two
    plain runs), is a warning: on the 2-core VM, two clean plain runs compared so flagged one
    op in 4 of 30 ordered pairs, moved 2-3x by the process it ran in."""
    if "confirmation" in mb:
        return found
    return [("warning", rule, f"inconclusive: {ONE_PROCESS}: {detail}") if kind == "regression"
            else (kind, rule, detail) for kind, rule, detail in found]


BASELINE_ONCE = ("the baseline's figure was measured in one process (a baseline kept before ./compat baseline measured "
                 "every figure in fresh processes), and a process disturbed while it measured "
                 "(a neighbour's burst: 9x on the 2-core VM, its interval narrow, its control and load unremarkable) "
                 "reads slow: a real improvement, or a disturbed baseline hiding a slowdown, cannot be told apart")


def baseline_once(ma: dict, found: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """A time's (kind, rule, detail) with the baseline's processes weighed in: faster than a
    baseline figure measured in one process only (no ``confirmation``: a baseline kept before
    ``./compat baseline`` measured every figure in fresh processes, or by a plain pytest run
    without ``--save-baseline``) is a warning, not an improvement. The candidate's slower
    figures are measured again in fresh processes before they regress (``confirmed``); a
    baseline's cannot be once its version is gone, and on the 2-core VM a baseline's op slowed
    9x by a neighbour (18.2 ms against 2.0 ms) read a real 4x slowdown of the candidate
    (7.8 ms) as "faster, 0.43x". The warning names what settles it: the baseline kept again."""
    if "confirmation" in ma:
        return found
    return [("warning", rule, f"inconclusive: faster, but {BASELINE_ONCE}: {detail}; to tell, {AGAIN}")
            if kind == "improvement" and rule in ("perf-time", "perf-shape", "perf-cold-start")
            else (kind, rule, detail) for kind, rule, detail in found]


def drift(ma: dict, mb: dict) -> float:
    """How much slower the host itself ran in the candidate (the control's ratio), 1 when unknown."""
    ca, cb = _num(ma, "control_s"), _num(mb, "control_s")
    return cb / ca if ca and cb else 1.0


MIN_SPREAD = 8   # differences it takes to say how widely this machine spreads a time


def group_of(kind: str | None) -> str:
    """Which times share one spread (``spreads``): op times; a model's step, inference and
    generation; cold starts (a fresh process: its import and first step move otherwise than a
    warm call)."""
    return "op" if kind in (None, "op") else "cold-start" if kind in COLD_KINDS else "model"


def spreads(pairs: list[tuple[dict, dict]]) -> dict[str, float]:
    """``spread`` per group of times (``group_of``), each from its own group's pairs alone: a
    pooled figure let unrelated checks set each other's allowance (three cold starts, whose
    repeats differ by their imports, narrowed an op's from 6x to 1.59x and made a regression of
    an op whose own processes spread 1.8-3.0 ms; one noisy op widened a tightly confirmed
    training step's from 1.05x to 1.49x)."""
    groups: dict[str, list[tuple[dict, dict]]] = {}
    for a, b in pairs:
        groups.setdefault(group_of(kind_of(b)), []).append((a, b))
    return {group: spread(members) for group, members in groups.items()}


def _robust_sd(values: list[float], centre: float | None = None) -> float:
    """1.4826 x the median absolute deviation from ``centre`` (the values' median when None):
    a normal spread's standard deviation, untouched by a few wild values."""
    centre = statistics.median(values) if centre is None else centre
    return 1.4826 * statistics.median(abs(x - centre) for x in values)


def _repeats(mb: dict) -> list[float]:
    """The log differences between every two fresh processes that measured the candidate's
    figure again (``confirmed``'s figures): the same versions, the same call, so what moves it
    is this machine alone. Empty for a figure measured once, or a new shape's cost (a difference
    of two times, not a time: no ratio of it means a spread)."""
    figures = (mb.get("confirmation") or {}).get("figures_s") if isinstance(mb.get("confirmation"), dict) else None
    if "per_shape_s" in mb or not isinstance(figures, list):
        return []
    logs = [math.log(f) for f in figures if isinstance(f, (int, float)) and not isinstance(f, bool)
            and math.isfinite(f) and f > 0]
    return [abs(x - y) for i, x in enumerate(logs) for y in logs[i + 1:]]


def spread(pairs: list[tuple[dict, dict]]) -> float:
    """How widely this machine moves a time between processes when nothing else changed, as a
    log's robust standard deviation; ``pairs``: the (baseline, candidate) perf records compared.
    A time regresses only beyond ``exp(SPREAD_Z x spread)`` too (at most SPREAD_CAP): on a
    machine that noisy a 30% slowdown cannot be told from the noise, and is said inconclusive.

    It is taken from what the upgrade does not change, never from the slowdowns it judges (the
    spread of every ratio between the two runs, as it once was, let a broad slowdown hide
    itself: 40 ops slowed unevenly by 1x-5x widened the allowance to 6x and none regressed, and
    20 ops of 40 slowed 2.5x gave none where 18 gave 18). In order:

    * each side's own fresh processes: a candidate's figure that looked slower was measured
      again, and a baseline kept by ``./compat baseline`` measured every figure so
      (``confirmed``); how far those processes of one version lie apart is this machine's
      noise and nothing else's. Differences of two processes, like the ratio of the two runs'
      figures (each one process), so the scales agree. From MIN_SPREAD differences on they
      alone decide; fewer (one figure measured again: three differences) are weighed with
      the next, the larger of the two ruling;
    * the pairs the upgrade moved less than their tolerance (each time's own, less the host's
      drift), ``_unmoved_spread``: noise moves times both ways, an upgrade's shift one way, so
      each way is measured apart, about no move at all, and the narrower rules. Half the ops
      slowed 1.25x (within the tolerance) once widened the allowance to 169% from these pairs'
      spread about their median, and a 2.5x slowdown confirmed in three processes within 2%
      read inconclusive; now the faster half (1% noise) rules, and it regresses;
    * else 0: too few to say, and the tolerance rules.

    Near 0.02 on a quiet machine; 0.1 to 0.2 between clean reruns on the noisy 2-core VM."""
    repeats = [d for pair in pairs for rec in pair for d in _repeats(rec.get("metrics") or {})]
    if len(repeats) >= MIN_SPREAD:
        return _robust_sd(repeats, 0.0)   # differences of one version with itself: centred on 0
    unmoved = _unmoved_spread(pairs)
    return max(_robust_sd(repeats, 0.0), unmoved) if repeats else unmoved


def _unmoved_spread(pairs: list[tuple[dict, dict]]) -> float:
    """The spread of the times the upgrade moved less than their tolerance, from MIN_SPREAD of
    them on (else 0): the moves down and the moves up, each about 0 (no move), each a robust
    deviation of its own (a way with fewer than half of MIN_SPREAD moves counts as none), and
    the smaller of the two. A machine's noise moves times both ways alike, so both ways are wide
    on a noisy machine; an upgrade that shifts many times one way (a few percent, or 25%, within
    the tolerance) widens one way only, which then does not count."""
    moves = []
    for a, b in pairs:
        ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
        x, y = _num(ma, "median_s"), _num(mb, "median_s")
        if not x or not y or x <= 0 or y <= 0 or "per_shape_s" in ma or "per_shape_s" in mb:
            continue
        moved = math.log(y / x) - math.log(max(1.0, drift(ma, mb)))
        if abs(moved) <= math.log(1 + TOLERANCE.get(kind_of(b) or "op", TOLERANCE["op"])):
            moves.append(moved)
    if len(moves) < MIN_SPREAD:
        return 0.0
    ways = ([-m for m in moves if m <= 0], [m for m in moves if m >= 0])
    return min(_robust_sd(way, 0.0) if len(way) >= MIN_SPREAD // 2 else 0.0 for way in ways)


# What a figure that is not slower, but whose comparison could hide a slowdown, says (``_time``,
# ``hidden_by``): the words the comparison's note counts them by (harness.report.compare), and
# what measures them alike again.
NOT_SLOWER = "not slower beyond the tolerance here, but"
FASTER_HOST = "not slower beyond the tolerance as measured, but the candidate's host ran"
AGAIN = ("measure both sides at a quiet moment on this machine: keep the baseline again with nothing else running "
         "(./compat baseline), then the candidate (./compat candidate SPEC)")


def hidden_by(ma: dict, mb: dict, rule: str, found: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    """A time that neither regressed nor warned, measured under markedly different load
    (``load_apart``), is a warning, inconclusive: the busier side's figure is the slower for
    it, so a baseline measured while the machine was busy (load 1.5 per core, 2.0 s) hides
    what the candidate lost on a quiet one (0.1 per core, 1.8 s: unchanged, it read). What
    changes it: both sides measured at a quiet moment. ``found``: the time's changes so far;
    an improvement keeps its note (``under_load``). A side without a reading: as before."""
    apart = load_apart(ma, mb)
    if found or not apart:
        return found
    la, lb = (timing.load_per_core(m.get("load")) for m in (ma, mb))
    busier = ("keep the baseline again on a quiet machine (./compat baseline), then measure the candidate "
              "(./compat candidate SPEC)" if la > lb else
              "measure the candidate again with nothing else running (./compat candidate SPEC)")
    return [("warning", rule, f"inconclusive: {NOT_SLOWER} {apart} (more than {LOAD_GAP:g} apart), so the busier "
                              f"side's time is slower for it and a slowdown may be hidden: {_said(ma, mb)}; {busier}")]


def _said(ma: dict, mb: dict) -> str:
    """The two figures, short: a time's median or a new shape's cost."""
    key = "per_shape_s" if "per_shape_s" in ma else "median_s"
    x, y = _num(ma, key), _num(mb, key)
    if x is None or y is None:
        return "the figures are not both recorded"
    what = "a new shape cost " if key == "per_shape_s" else ""
    ratio = f", {y / x:.3g}x" if x > 0 and key == "median_s" else ""
    return f"{what}{x * 1e3:.4g} ms -> {y * 1e3:.4g} ms{ratio}"


def _time(ma: dict, mb: dict, tolerance: float, noise: float = 0.0) -> list[tuple[str, str, str]]:
    keys = ("median_s", "ci_low", "ci_high")
    if any(_num(m, k) is None for m in (ma, mb) for k in keys) or not _num(ma, "median_s"):
        return []
    ratio = mb["median_s"] / ma["median_s"]
    host = drift(ma, mb)
    slower, faster = max(1.0, host), min(1.0, host)
    noise_factor = min(math.exp(SPREAD_Z * noise), SPREAD_CAP)
    allowed = max(1 + tolerance, noise_factor)
    figures = (f"{ma['median_s'] * 1e3:.4g} ms [{ma['ci_low'] * 1e3:.4g}, {ma['ci_high'] * 1e3:.4g}] -> "
               f"{mb['median_s'] * 1e3:.4g} ms [{mb['ci_low'] * 1e3:.4g}, {mb['ci_high'] * 1e3:.4g}], "
               f"{ratio:.3g}x; tolerance {tolerance:.0%}"
               + (f", widened to {allowed - 1:.0%} by this machine's spread between processes" if allowed > 1 + tolerance else ""))
    control = f"; the control ran {host:.3g}x as long (the host's own speed)" if abs(host - 1) > 0.02 else ""
    if mb["ci_low"] > ma["ci_high"] * allowed * slower:
        return [("regression", "perf-time", f"slower: {figures}{control}, intervals apart")]
    if ratio > (1 + tolerance):
        why = (f"the host ran {host:.3g}x slower (control)" if ratio <= (1 + tolerance) * slower
               else "this machine spreads a time too widely between processes" if ratio <= allowed * slower
               else "the intervals overlap: too noisy to tell")
        return [("warning", "perf-time", f"inconclusive: slower by more than the tolerance, but {why}: {figures}")]
    if host < 1 and ratio / host > allowed:   # the candidate's host ran faster: a slowdown it hid
        return [("warning", "perf-time", f"inconclusive: {FASTER_HOST} {1 / host:.3g}x faster than the baseline's "
                                         f"(by its control, pure Python, the same in every torch): allowed for, "
                                         f"it is {ratio / host:.3g}x slower, beyond the tolerance: {figures}; "
                                         f"{AGAIN}")]
    if mb["ci_high"] * allowed < ma["ci_low"] * faster:
        return [("improvement", "perf-time", f"faster: {figures}{control}, intervals apart")]
    return []


def _shape(ma: dict, mb: dict) -> list[tuple[str, str, str]]:
    keys = ("per_shape_s", "ci_low", "ci_high", "seen_s")
    if any(_num(m, k) is None for m in (ma, mb) for k in keys):
        return []
    step = ma["seen_s"]
    allowed = SHAPE_TOLERANCE * step * max(1.0, drift(ma, mb))
    figures = (f"a new shape cost {ma['per_shape_s'] * 1e3:.3g} ms [{ma['ci_low'] * 1e3:.3g}, "
               f"{ma['ci_high'] * 1e3:.3g}] -> {mb['per_shape_s'] * 1e3:.3g} ms [{mb['ci_low'] * 1e3:.3g}, "
               f"{mb['ci_high'] * 1e3:.3g}] per step (a step: {step * 1e3:.3g} ms; tolerance {SHAPE_TOLERANCE:.0%} "
               f"of a step)")
    if mb["ci_low"] - ma["ci_high"] > allowed:
        return [("regression", "perf-shape", f"each new input shape costs more: {figures}")]
    if mb["per_shape_s"] - ma["per_shape_s"] > allowed:
        return [("warning", "perf-shape", f"inconclusive: the cost per new shape grew, intervals overlap: {figures}")]
    if ma["ci_low"] - mb["ci_high"] > allowed:
        return [("improvement", "perf-shape", f"a new input shape costs less: {figures}")]
    return []


MEMORY_FACTOR = 2.0   # memory that grew on both sides regresses when it grows this much faster per step
MEMORY_FIX = ("train in shorter runs or restart between epochs (or restart a serving process every so many requests), "
              "stay on the versions before until it is fixed (try the next release with ./compat candidate SPEC), and "
              "report it to PyTorch with this run file")


def _per_step(trend) -> tuple[float, float, float] | None:
    """A reading's growth per step (harness.perf.memory.growth): its figure and its interval,
    the growth between the first and last thirds over the steps between their centres; None
    where the record cannot say (an older record, too few readings: no interval)."""
    if not isinstance(trend, dict):
        return None
    steps, per = trend.get("steps"), _num(trend, "per_step_bytes")
    low, high = _num(trend, "ci_low"), _num(trend, "ci_high")
    if not isinstance(steps, int) or isinstance(steps, bool) or None in (per, low, high):
        return None
    span = steps - max(2, steps // 3)
    return (per, low / span, high / span) if span > 0 else None


def _trends(rec: dict) -> dict:
    trends = (rec.get("metrics") or {}).get("trends")
    return trends if isinstance(trends, dict) else {}


def _rates(a: dict, b: dict) -> list[tuple[str, str, str]]:
    """Memory that grows on both sides: each reading's growth per step against the baseline's.
    Faster by more than MEMORY_FACTOR with the two intervals apart is a regression (a run that
    grew 1 MiB a step and now 50 reaches the machine's memory fifty times sooner), by as much
    with the intervals overlapping a warning (inconclusive), a reading that was steady and now
    grows a regression too; slower by as much, intervals apart, an improvement."""
    ta, tb = _trends(a), _trends(b)
    worse, unsure, better = [], [], []
    for name in sorted(set(ta) & set(tb)):
        va, vb = (t.get("verdict") if isinstance(t, dict) else None for t in (ta[name], tb[name]))
        ra, rb = _per_step(ta[name]), _per_step(tb[name])
        if rb is None or vb != Category.GROWS:
            if ra and va == Category.GROWS and vb == Category.STEADY:
                better.append(f"{name} no longer grows (was {_mib(ra[0])}/step)")
            continue
        if va == Category.STEADY:
            worse.append(f"{name} now grows too ({_mib(rb[0])}/step, interval [{_mib(rb[1])}, {_mib(rb[2])}]; "
                         "steady in the baseline)")
            continue
        if ra is None or va != Category.GROWS or ra[0] <= 0:
            continue
        said = (f"{name} {_mib(ra[0])}/step [{_mib(ra[1])}, {_mib(ra[2])}] -> {_mib(rb[0])}/step "
                f"[{_mib(rb[1])}, {_mib(rb[2])}], {rb[0] / ra[0]:.3g}x")
        if rb[1] > MEMORY_FACTOR * ra[2]:
            worse.append(said)
        elif rb[0] > MEMORY_FACTOR * ra[0]:
            unsure.append(said)
        elif rb[2] * MEMORY_FACTOR < ra[1]:
            better.append(said)
    rule = f"beyond {MEMORY_FACTOR:g}x"
    if worse:
        return [("regression", "perf-memory", f"memory grows faster per step over a long run than it did ({rule}, "
                                              f"intervals apart): {'; '.join(worse + unsure)}; a long run reaches "
                                              f"the machine's memory that much sooner: {MEMORY_FIX}")]
    if unsure:
        return [("warning", "perf-memory", f"inconclusive: memory grows faster per step than it did ({rule}), but "
                                           f"the intervals overlap: {'; '.join(unsure)}; measure the candidate's "
                                           "long runs again with nothing else running (./compat candidate SPEC -- "
                                           "-m perf)")]
    if better:
        return [("improvement", "perf-memory", f"memory grows more slowly per step than it did: {'; '.join(better)}")]
    return []


# A long run's lengths: records with ``buckets`` stepped through a few lengths its warm-up met;
# older ones drew a new length most steps, and on MPS each new shape grows the graph cache that
# the driver reading counts, which read as growth per step (harness.perf.memory).
LENGTHS_APART = ("not comparable: the baseline's long run drew a new input length most steps, the candidate's "
                 "steps through a few lengths its warm-up met (on MPS each new shape grows the graph cache the "
                 "driver reading counts), so less growth may be that, not the versions; keep the baseline "
                 "again (./compat baseline -m perf) to compare them")


def _memory(a: dict, b: dict) -> list[tuple[str, str, str]]:
    """``_memory_rules``; where the baseline's long run drew random lengths and the candidate's
    stepped through buckets its warm-up met, an improvement is a warning (``LENGTHS_APART``):
    fewer new shapes alone grow MPS's graph cache less. A candidate that grows more, with fewer
    new shapes, regresses as ever."""
    found = _memory_rules(a, b)
    ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
    if "buckets" in ma or "buckets" not in mb:
        return found
    return [("warning", rule, f"{LENGTHS_APART}: {detail}") if kind == "improvement" else (kind, rule, detail)
            for kind, rule, detail in found]


def _memory_rules(a: dict, b: dict) -> list[tuple[str, str, str]]:
    """Memory over a long run (harness.perf.memory): the category, and where both sides grow
    the growth per step (``_rates``). A run that grew in the baseline and now dies (crash,
    timeout, error: a process killed for running out of memory) is a regression here, since
    the status rule reads a failure on both sides; one that was steady and is now too close to
    call is a warning."""
    ca, cb = a.get("category"), b.get("category")
    if ca == Category.GROWS and b.get("status") in Status.BAD and cb != Category.GROWS:
        return [("regression", "perf-memory", f"memory grew over a long run in the baseline; now the run ends in "
                                              f"{b.get('status')}: {b.get('reason') or 'no reason recorded'}; a run "
                                              "whose memory grows ends killed for running out of memory or stalled "
                                              f"in swap: {MEMORY_FIX}")]
    if cb == Category.GROWS and ca != Category.GROWS:
        return [("regression", "perf-memory", f"memory now grows over a long run (was {ca}): {b.get('reason', '')}")]
    if ca == Category.GROWS and cb == Category.STEADY:
        return [("improvement", "perf-memory", "memory no longer grows over a long run")]
    if ca == Category.GROWS and cb == Category.GROWS:
        return _rates(a, b)
    if ca == Category.STEADY and cb == Category.INCONCLUSIVE:
        ta, tb = _trends(a), _trends(b)
        said = []
        for name, t in sorted(tb.items()):
            if not isinstance(t, dict) or t.get("verdict") != Category.INCONCLUSIVE:
                continue
            grown, low, high, tol = (_num(t, k) for k in ("growth_bytes", "ci_low", "ci_high", "tolerance_bytes"))
            was = _num(ta.get(name) or {}, "growth_bytes") if isinstance(ta.get(name), dict) else None
            said.append(f"{name} {_mib(grown or 0.0)} over the run"
                        + (f" (was {_mib(was)})" if was is not None else "")
                        + (f", interval [{_mib(low)}, {_mib(high)}]" if low is not None and high is not None
                           else ", no interval")
                        + (f", tolerance {_mib(tol)}" if tol is not None else ""))
        return [("warning", "perf-memory", "inconclusive: memory was steady over a long run and is now too close to "
                                           f"call: {'; '.join(said) or b.get('reason') or 'no figures recorded'}; it "
                                           "may have started to grow; measure the candidate's long runs again with "
                                           "nothing else running, with more steps if too few readings were taken "
                                           "(./compat candidate SPEC -- -m perf)")]
    return []


def _mib(n: float) -> str:
    return f"{n / 2 ** 20:.4g} MiB"


# A cold start's parts (harness.perf.models.cold_start's figures), what each is in words, and what
# a user does when it grew.
COLD_PARTS = (
    ("import_s", "importing torch and transformers",
     "see what the import now loads (python -X importtime -c 'import transformers' 2> imports.txt) and keep one "
     "long-lived process (a server, a notebook kernel) rather than a fresh one per job, or stay on the versions before"),
    ("build_s", "building the model",
     "load it once and keep it (a long-lived process), pass low_cpu_mem_usage=True to from_pretrained, or stay on "
     "the versions before"),
    ("first_step_s", "the first step (lazy initialisation, kernel choice, graph building)",
     "warm the model up with one step before serving or timing, or stay on the versions before"))


def _cold_figure(m: dict, parts: tuple[str, ...]) -> tuple[float, float | None, float | None] | None:
    """A cold start's whole seconds, ``parts`` (import, build) and the first step: the median of
    its processes' totals with their fastest and slowest as its interval, where the record keeps
    every process (``processes``); else the medians' sum, the first step's interval beside it."""
    procs = m.get("processes")
    keys = (*parts, "first_step_s")
    if isinstance(procs, list) and len(procs) >= 2 and all(
            isinstance(p, dict) and all(_num(p, k) is not None for k in keys) for p in procs):
        totals = sorted(sum(p[k] for k in keys) for p in procs)
        return statistics.median(totals), totals[0], totals[-1]
    centre = _num(m, "median_s")
    if centre is None:
        return None
    fixed = sum(m[k] for k in parts)
    low, high = _num(m, "ci_low"), _num(m, "ci_high")
    return fixed + centre, (fixed + low if low is not None else None), (fixed + high if high is not None else None)


FIRST_CALL = {"cold-start": "the first step", "cold-inference": "the first inference",
              "cold-generate": "the first generation"}


def _cold(ma: dict, mb: dict, tolerance: float, said: set[str] = frozenset(),
          call: str = "cold-start") -> list[tuple[str, str, str]]:
    """A cold start as a user waits for it (``perf-cold-start``): importing torch and
    transformers, building the model and its first step, where the records keep them (an
    older record without the import or build figures: the first step's time rule alone).
    Slower by more than ``tolerance`` with the processes' figures apart (the candidate's fastest
    above the baseline's slowest times 1 + tolerance, and the host's own slowness) is a
    regression naming what grew and what to do; slower by as much otherwise, a warning
    (inconclusive); faster by as much, figures apart, an improvement. Where the first step grew
    most and its own time rule already said as much (``said``: the kinds it found), nothing
    more is said: the same loss, counted once. ``call``: which cold check (``COLD_KINDS``): its
    first call is a training step, an inference or a generation, each named as such."""
    parts = tuple(k for k in ("import_s", "build_s") if _num(ma, k) is not None and _num(mb, k) is not None)
    fa, fb = (_cold_figure(m, parts) for m in (ma, mb)) if parts else (None, None)
    if fa is None or fb is None or fa[0] <= 0:
        return []
    host = drift(ma, mb)
    slower, faster = max(1.0, host), min(1.0, host)
    ratio = fb[0] / fa[0]
    first = {"first_step_s": (_num(ma, "median_s"), _num(mb, "median_s"))}
    moves = sorted(((mb_v - ma_v, k) for k, (ma_v, mb_v) in
                    ({k: (_num(ma, k), _num(mb, k)) for k in parts} | first).items()
                    if ma_v is not None and mb_v is not None), reverse=True)
    words = {k: (w, fix) for k, w, fix in COLD_PARTS}
    if call != "cold-start":   # a serving process's first call: an inference or a generation
        words["first_step_s"] = (f"{FIRST_CALL[call]} (lazy initialisation, kernel choice, graph building)",
                                 "send one warm-up request when the process starts, before serving, or stay on the "
                                 "versions before")
    grew = [f"{words[k][0]} {ma[k if k != 'first_step_s' else 'median_s']:.3g} s -> "
            f"{mb[k if k != 'first_step_s' else 'median_s']:.3g} s" for d, k in moves if d > 0]
    lead = moves[0][1] if moves and moves[0][0] > 0 else "first_step_s"
    interval = (lambda f: f" [{f[1]:.3g}, {f[2]:.3g}]" if f[1] is not None and f[2] is not None else "")
    kind = ("regression" if fb[1] is not None and fa[2] is not None and fb[1] > fa[2] * (1 + tolerance) * slower
            else "warning" if ratio > 1 + tolerance
            else "improvement" if fb[2] is not None and fa[1] is not None and fb[2] * (1 + tolerance) < fa[1] * faster
            else None)
    if kind is None or (kind in said and lead == "first_step_s"):
        return []
    figures = (f"{fa[0]:.3g} s{interval(fa)} -> {fb[0]:.3g} s{interval(fb)} from a fresh process to "
               f"its {FIRST_CALL.get(call, 'the first step').removeprefix('the ')}, "
               f"{ratio:.3g}x; tolerance {tolerance:.0%}")
    what = " + ".join(words[k][0].split(" (")[0] for k in (*parts, "first_step_s"))
    if kind == "regression":
        return [("regression", "perf-cold-start", f"a cold start takes longer ({what}): {figures}, the processes' "
                                                  f"figures apart; what grew: {', '.join(grew) or 'each a little'}; "
                                                  f"{words[lead][0]} grew most: {words[lead][1]}")]
    if kind == "warning":
        why = (f"the host ran {host:.3g}x slower (control)" if ratio <= (1 + tolerance) * slower
               else "the processes' figures overlap: too noisy to tell")
        return [("warning", "perf-cold-start", f"inconclusive: a cold start ({what}) slower by more than the "
                                               f"tolerance, but {why}: {figures}; what grew: "
                                               f"{', '.join(grew) or 'each a little'}; measure the candidate again "
                                               "with nothing else running (./compat candidate SPEC)")]
    return [("improvement", "perf-cold-start", f"a cold start takes less time ({what}): {figures}, the "
                                               "processes' figures apart")]


def _peak(ma: dict, mb: dict) -> list[tuple[str, str, str]]:
    a, b = _num(ma, "peak_bytes"), _num(mb, "peak_bytes")
    if a is None or b is None or a <= 0 or any(ma.get(k) != mb.get(k) for k in ("model", "shape")):
        return []
    allowed = max(PEAK_TOLERANCE * a, PEAK_FLOOR)
    pa, pb = (m.get("peak_at") if isinstance(m.get("peak_at"), dict) else {} for m in (ma, mb))
    moves = sorted(((_num(pb, c) or 0.0) - (_num(pa, c) or 0.0), c) for c in set(pa) | set(pb))
    grew = [f"{c.replace('_', ' ')} {d / 2 ** 20:+.3g} MiB" for d, c in reversed(moves) if d > 0][:3]
    shrank = [f"{c.replace('_', ' ')} {d / 2 ** 20:+.3g} MiB" for d, c in moves if d < 0][:3]
    phases = (f", reached in {ma['peak_phase']} -> {mb['peak_phase']}"
              if ma.get("peak_phase") != mb.get("peak_phase") and ma.get("peak_phase") and mb.get("peak_phase") else "")

    def said(parts: list[str]) -> str:   # what moved first: the terminal's table cuts a long detail
        return (f"{_mib(a)} -> {_mib(b)} of tensors, {b / a:.3g}x" + (f" ({', '.join(parts)})" if parts else "")
                + f"{phases}; tolerance {PEAK_TOLERANCE:.0%} (the storages' bytes, the same in every run of the "
                  "same call)")
    if b - a > allowed:
        return [("regression", "perf-peak", f"holds more memory at its peak: {said(grew)}")]
    if a - b > allowed:
        return [("improvement", "perf-peak", f"holds less memory at its peak: {said(shrank)}")]
    return []


def changes(a: dict, b: dict, host_a: str | None, host_b: str | None,
            noise: float | dict = 0.0, provisional: bool = False,
            times_apart: bool = False) -> list[tuple[str, str, str]]:
    """(kind, rule, detail) for one perf check seen in both runs; ``noise``: the two runs'
    ``spreads`` (or one ``spread`` for every group); ``provisional``: ``b`` is a figure just measured, not yet recorded
    (``looks_slower``), judged without the two runs' loads (``under_load``) and without asking
    that a slowdown was seen in more than one process (``measured_once``); ``times_apart``:
    the two times were taken in unlike company (``company_apart``), so only memory is compared."""
    kind = kind_of(b)
    if kind == "memory":
        return _memory(a, b)
    ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
    peak = _peak(ma, mb) if kind in PEAKED and host_a and host_a == host_b else []   # bytes: no load, no threads
    if (kind is None or a.get("category") not in Category.TIMES or times_apart
            or comparable(a, b, host_a, host_b)):
        return peak
    tolerance = TOLERANCE.get(kind, TOLERANCE["op"])
    if isinstance(noise, dict):
        noise = noise.get(group_of(kind), 0.0)
    found = _shape(ma, mb) if kind == "varying-length" else _time(ma, mb, tolerance, noise)
    if not provisional:
        found = hidden_by(ma, mb, "perf-shape" if kind == "varying-length" else "perf-time", found)
    if kind in COLD_KINDS:
        found = found + _cold(ma, mb, tolerance, {k for k, _, _ in found}, kind)
    return (found if provisional else baseline_once(ma, measured_once(mb, under_load(ma, mb, found)))) + peak


# --------------------------------------------------------------------------- confirming a figure

def provisional(check: str, verdict: Verdict) -> dict:
    """A record-shaped view of a perf check's verdict before it is recorded."""
    _, subject, variant = check.split("/", 2)
    return {"check": check, "suite": "perf", "subject": subject, "variant": variant, "status": verdict.status,
            "category": verdict.category, "metrics": verdict.metrics, "reason": verdict.message}


def looks_slower(baseline: dict | None, check: str, verdict: Verdict, machine_a: str | None,
                 machine_b: str | None) -> bool:
    """Would this figure be a regression against the baseline's (the rules above, no spread)?
    The load is not weighed here: a figure taken under a load the baseline's was not is
    worth measuring again, and the fresh processes may meet a quieter machine."""
    if baseline is None:
        return False
    found = changes(baseline, provisional(check, verdict), machine_a, machine_b, provisional=True)
    return any(kind == "regression" and rule in TIME_RULES for kind, rule, _ in found)   # a peak reads the same again


def figure_of(run: dict) -> float:
    """What a measurement is ranked by when it was repeated: its time (a cold start's: its
    first step's median, the figure perf-time judges), or a new shape's cost."""
    if "per_shape_s" in run:
        return run["per_shape_s"]
    return run["median_s"]


COLD_FIXED = ("import_s", "build_s")   # a cold start's parts before its first step (harness.perf.models.cold_start)


def _fastest_parts(runs: list[dict], kept: dict) -> dict:
    """A cold start measured again: ``kept`` (the run of the fastest first step) with each part
    before the first step at its fastest over ``runs``, in the run and in each of its processes:
    interference only adds time, so each part's minimum is its least disturbed figure. Ranking
    runs by their whole wait once kept the process whose import was fastest and whose first
    step was slowed twice (a disturbed one), and judged that first step: a false regression."""
    if kept.get("what") not in COLD_KINDS or not all(_num(r, k) is not None for r in runs for k in COLD_FIXED):
        return kept
    best = {k: min(r[k] for r in runs) for k in COLD_FIXED}
    procs = [{**p, **{k: min(p[k], best[k]) for k in COLD_FIXED if _num(p, k) is not None}} if isinstance(p, dict)
             else p for p in kept.get("runs") or []]
    return {**kept, **best, "runs": procs}


def is_time(verdict: Verdict) -> bool:
    """Whether a perf verdict holds a time (timed or noisy), which fresh processes can measure again."""
    return verdict.category in Category.TIMES


# The times a baseline measures again in fresh processes (``kept_again``): an op's and a warm
# model call's. A cold start already takes its figure over COLD_PROCESSES processes, and a new
# shape's cost is the difference of two times in one process, which interference moves either
# way (its fastest is not its least disturbed). Measuring every time again made the baseline's
# perf run on the 2-core VM 1,086 s against about 200 s, its cold starts and varying lengths
# 540 s of it.
BASELINE_KINDS = ("op", "train-step", "inference", "generate")


def kept_again(check: str, verdict: Verdict) -> bool:
    """Whether a baseline measures this perf check's figure again in BASELINE_CONFIRMATIONS
    fresh processes (BASELINE_KINDS, a time)."""
    return is_time(verdict) and kind_of(provisional(check, verdict)) in BASELINE_KINDS


def confirmed(runs: list[dict], judge, for_baseline: bool = False) -> Verdict:
    """A figure measured again in fresh processes, because it looked like a regression or
    (``for_baseline``) because it is kept as a baseline, which no later run can measure again:
    the fastest (``figure_of``) is kept (interference only ever adds time; a real slowdown is
    in every process), a cold start's import and build each at their fastest
    (``_fastest_parts``), and the record says so, with every figure."""
    kept = _fastest_parts(runs, min(runs, key=figure_of))
    v = judge(kept)
    figures = [round(figure_of(r), 9) for r in runs]
    what = ("first steps; importing and building each at their fastest"
            if kept.get("what") in COLD_KINDS else "")
    why = "it is kept as a baseline" if for_baseline else "it looked slower than the baseline"
    note = (f"; {why}, so it was measured in {len(runs)} processes "
            f"({', '.join(f'{f * 1e3:.4g} ms' for f in figures)}{f', {what}' if what else ''}): the fastest is kept")
    return Verdict(v.status, v.category, v.message + note,
                   {**v.metrics, "confirmation": {"processes": len(runs), "figures_s": figures}})
