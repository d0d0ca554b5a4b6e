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
``SHAPE_TOLERANCE`` of a step, intervals apart. Memory that grows where it did not is a
regression; memory that stopped growing, an improvement.

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
load X per core, the candidate under Y". Where a side's record has no reading (a file older
than the readings, a platform without a load average) the load is unknown: the figures are
judged as before, and the detail says the load is unknown. The same holds for a new shape's
cost, and for a time claim of the optimization suite (harness.report.compare).
"""
from __future__ import annotations

import math
import statistics

from harness.core.records import Category, Verdict
from harness.env import timing

# Allowed slowdown before a time regresses, by what the check times (relative).
TOLERANCE = {"op": 0.30, "train-step": 0.20, "inference": 0.20, "generate": 0.25, "cold-start": 0.50}
SHAPE_TOLERANCE = 0.15     # of a step: what a new shape may cost more than it did
SPREAD_Z = 6.0             # a slowdown must stand this many robust deviations out of the pair's spread
# The most the pair's spread may widen the allowance: twice the largest move of a single op
# between clean reruns on the noisy 2-core VM (2-3x). A pair that spread wider than that was
# disturbed (a neighbour's burst in one run), and its spread would otherwise excuse anything:
# a 15x injected slowdown, intervals ten times apart, was once called inconclusive there.
SPREAD_CAP = 6.0
LOAD_GAP = 0.5             # tasks per core: two runs' loads further apart than this are not alike
CONFIRMATIONS = 2          # fresh processes that measure again a figure that looks like a regression
# A weighed call's peak may grow by this much of the baseline's before it regresses: the count is
# exact, so this is not noise but what counts as a loss (a few more temporaries in a new
# transformers are not one; a tenth more of a step's memory is a batch that may no longer fit),
# and at least PEAK_FLOOR bytes, so a tiny model's few kilobytes never are.
PEAK_TOLERANCE = 0.10
PEAK_FLOOR = 2 ** 20
PEAKED = ("train-step", "inference", "generate")   # the model checks that are weighed
TIME_RULES = ("perf-time", "perf-shape")           # the rules whose figures a fresh process may read otherwise


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
    return f"they ran with {apart[0]} and {apart[1]} threads per process" if apart else None


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


def drift(ma: dict, mb: dict) -> float:
    """How much slower the host itself ran in the candidate (the control's ratio), 1 when unknown."""
    ca, cb = _num(ma, "control_s"), _num(mb, "control_s")
    return cb / ca if ca and cb else 1.0


MIN_SPREAD = 8   # differences it takes to say how widely this machine spreads a time


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

    * the candidate's own fresh processes: a figure that looked slower was measured again
      (``confirmed``), and how far those processes of one version lie apart is this machine's
      noise and nothing else's. Differences of two processes, like the ratio of the two runs'
      figures (each one process), so the scales agree. Used from MIN_SPREAD differences on;
    * else the pairs the upgrade moved less than their tolerance (each time's own, less the
      host's drift): their spread about their median. Bounded by the tolerance, it cannot grow
      with the slowdowns it judges, and a shift of every time alike does not widen it;
    * else 0: too few to say, and the tolerance rules.

    Near 0.02 on a quiet machine; 0.1 to 0.2 between clean reruns on the noisy 2-core VM."""
    repeats = [d for _, mb in pairs for d in _repeats(mb.get("metrics") or {})]
    if len(repeats) >= MIN_SPREAD:
        return _robust_sd(repeats, 0.0)   # differences of one version with itself: centred on 0
    unmoved = []
    for a, b in pairs:
        ma, mb = a.get("metrics") or {}, b.get("metrics") or {}
        x, y = _num(ma, "median_s"), _num(mb, "median_s")
        if not x or not y or "per_shape_s" in ma or "per_shape_s" in mb:
            continue
        moved = math.log(y / x) - math.log(max(1.0, drift(ma, mb)))
        if abs(moved) <= math.log(1 + TOLERANCE.get(kind_of(b) or "op", TOLERANCE["op"])):
            unmoved.append(moved)
    return _robust_sd(unmoved) if len(unmoved) >= MIN_SPREAD else 0.0


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


def _memory(a: dict, b: dict) -> list[tuple[str, str, str]]:
    ca, cb = a.get("category"), b.get("category")
    if cb == Category.GROWS and ca != Category.GROWS:
        return [("regression", "perf-memory", f"memory now grows over a long run (was {ca}): {b.get('reason', '')}")]
    if ca == Category.GROWS and cb == Category.STEADY:
        return [("improvement", "perf-memory", "memory no longer grows over a long run")]
    return []


def _mib(n: float) -> str:
    return f"{n / 2 ** 20:.4g} MiB"


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
            noise: float = 0.0, provisional: bool = False, times_apart: bool = False) -> list[tuple[str, str, str]]:
    """(kind, rule, detail) for one perf check seen in both runs; ``noise``: the two runs'
    ``spread``; ``provisional``: ``b`` is a figure just measured, not yet recorded
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
    found = _shape(ma, mb) if kind == "varying-length" else _time(ma, mb, TOLERANCE.get(kind, TOLERANCE["op"]), noise)
    return (found if provisional else measured_once(mb, under_load(ma, mb, found))) + peak


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
    """What a measurement is ranked by when it was repeated: its time, or a new shape's cost."""
    return run["per_shape_s"] if "per_shape_s" in run else run["median_s"]


def confirmed(runs: list[dict], judge) -> Verdict:
    """A figure that looked like a regression, measured again in fresh processes: the fastest
    is kept (interference only ever adds time; a real slowdown is in every process), and the
    record says so, with every figure."""
    kept = min(runs, key=figure_of)
    v = judge(kept)
    figures = [round(figure_of(r), 9) for r in runs]
    note = (f"; it looked slower than the baseline, so it was measured in {len(runs)} processes "
            f"({', '.join(f'{f * 1e3:.4g} ms' for f in figures)}): the fastest is kept")
    return Verdict(v.status, v.category, v.message + note,
                   {**v.metrics, "confirmation": {"processes": len(runs), "figures_s": figures}})
