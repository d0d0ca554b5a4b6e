"""The compatibility matrix as data: rows are checks, columns are environment x target.

Built from runs read by ``harness.core.runfiles``; rendered by ``tools.report`` (Markdown,
HTML, JSON) and, in short, at the end of a pytest run.
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter, defaultdict

from packaging.version import InvalidVersion, Version

from harness.core import records
from harness.core.records import Category, Status
from harness.core.runfiles import Run

TARGET_ORDER = {"cpu": 0, "cuda": 1, "mps": 2}

# key, symbol, meaning. The key is what a cell shows: a status, or for a check that ran
# its op category when that is the news (cpu-fallback, unsupported), or for a claim that was
# measured and did not hold its verdict (does-not-hold, inconclusive).
LEGEND = (
    (Status.PASS, "✓", "passed (ran natively)"),
    (Category.CPU_FALLBACK, "↩", "ran, but some ops fell back to the CPU"),
    (Category.UNSUPPORTED, "⊘", "not implemented on this target"),
    (Status.FAIL, "✗", "failed"),
    (Status.ERROR, "E", "the check itself errored"),
    (Status.XFAIL, "x", "known limitation of this version or OS"),
    (Status.XPASS, "X", "expected to fail, but passed"),
    (Category.DOES_NOT_HOLD, "≠", "measured: the documented optimization claim does not hold here"),
    (Category.INCONCLUSIVE, "?", "measured: no verdict (too close to the bound to call, or out of time)"),
    (Status.SKIP, "–", "skipped: not applicable here, or target absent"),
    (Status.CRASH, "☠", "the process died in this check"),
    (Status.TIMEOUT, "◷", "ran out of time"),
    (records.RERUN, "↻", "written by an older judge whose metrics cannot settle it: run the check again"),
)
SYMBOL = {key: sym for key, sym, _ in LEGEND}
# Cell colours, one per legend key: the matrix cells, the summary bars, the filters and
# the charts all use these, so a colour means the same thing everywhere on the page.
KEY_COLOURS = {
    "pass": "#bfe8bf", "cpu-fallback": "#ffe39a", "unsupported": "#fbc28e", "fail": "#f3a0a0", "error": "#eeb0d0",
    "xfail": "#cfcffa", "xpass": "#a9daf7", "does-not-hold": "#f7b8a0", "inconclusive": "#dedede",
    "skip": "#e4e4e4", "crash": "#d98f8f", "timeout": "#dcb6e8", "rerun": "#e8e0c8",
}
KEY_ORDER = [key for key, _, _ in LEGEND]
PREFERRED_METRICS = ("margin", "max_abs_err", "mem_ratio", "time_ratio", "capability", "threads", "device", "usable",
                     "max_abs_diff", "runs")


SHOWN_CHARS = records.REASON_MAX   # a reason or message from a run file, as matrix.md and matrix.html show it
TEXT_MAX = 20_000                  # any one text in matrix.md and matrix.html (a check id, a list of ops ...)
LABEL_CHARS = 100                  # each fact in a column's label (host, CPU, GPU, OS, versions)


def shown(text, limit: int = SHOWN_CHARS) -> str:
    """A reason or message from a run file as matrix.md and matrix.html show it: at most
    ``limit`` characters, then how many more there are. A run file can hold a reason of any
    length, and one copied whole into every place it is shown (a cell's hover text, the
    failures, the verdict cards) makes pages of tens of megabytes; matrix.json keeps the
    whole text. A reason the harness wrote (records.first_line) is never longer."""
    text = "" if text is None else str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…({len(text) - limit:,} more characters in matrix.json)"


def short(text, limit: int = LABEL_CHARS) -> str:
    """A fact in a column's label, at most ``limit`` characters: a label is repeated in every
    table and every record's details, so a host name of any length is cut here (matrix.json's
    columns keep the facts whole)."""
    text = "" if text is None else str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with each control character but tab and newline spelt out as ``\\xNN``. A
    reason can hold any character; a NUL written raw makes git take matrix.md for a binary
    file, and an escape sequence printed raw acts on the terminal. matrix.json keeps the exact
    text (JSON escapes them)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def cell_key(record: dict) -> str:
    """What a record's cell shows: a key of LEGEND."""
    if (record.get("judged_again") or {}).get("outcome") == "rerun":
        return records.RERUN
    cat, status = record.get("category"), record["status"]
    if cat == Category.CPU_FALLBACK and status in Status.WORKS:
        return Category.CPU_FALLBACK
    if cat == Category.UNSUPPORTED and status not in (Status.CRASH, Status.TIMEOUT):
        return Category.UNSUPPORTED
    if cat in (Category.DOES_NOT_HOLD, Category.INCONCLUSIVE) and status == Status.XFAIL:
        return cat
    return status


def perf_metric(metrics: dict) -> str:
    """A perf record's figure: its time, what a new shape costs, or its memory trend."""
    from harness.perf.ops import ms
    if isinstance(metrics.get("per_shape_s"), (int, float)):
        return f"new shape +{ms(max(0.0, metrics['per_shape_s']))}"
    if isinstance(metrics.get("median_s"), (int, float)):
        return ms(metrics["median_s"])
    trends = metrics.get("trends")
    if isinstance(trends, dict) and trends:
        worst = max(trends.items(), key=lambda kv: kv[1].get("growth_bytes", 0) if isinstance(kv[1], dict) else 0)
        grown = worst[1].get("growth_bytes") if isinstance(worst[1], dict) else None
        if isinstance(grown, (int, float)):
            return f"{worst[0]} {grown / 2 ** 20:+.3g} MiB"
    return ""


NOT_SHOWN = ("model", "attn", "seconds", "samples", "samples_without_grad", "pytorch_expects", "disagreement",
             "optimizer_path")


def key_metric(metrics: dict) -> str:
    if not metrics:
        return ""
    if metrics.get("record_kind") == records.RecordKind.CONTROL:   # a control: what it saw (its id names it)
        return f"saw {short(metrics['seen'], 60)}" if isinstance(metrics.get("seen"), str) and metrics["seen"] else ""
    perf = perf_metric(metrics)
    if perf:
        return perf
    if metrics.get("fallback_ops"):
        return f"fallback: {', '.join(metrics['fallback_ops'])}"
    if metrics.get("disagreement"):
        return str(metrics["disagreement"])
    for name in PREFERRED_METRICS + tuple(k for k in metrics if k not in NOT_SHOWN):
        if name in metrics and isinstance(metrics[name], (int, float, str, bool)):
            value = metrics[name]
            if isinstance(value, float):
                value = f"{value:.3g}"
            return f"{name}={value}"
    return ""


def _clean(name: str | None) -> str:
    """A CPU or GPU name without trademark marks and doubled spaces."""
    text = (name or "").replace("(R)", "").replace("(TM)", "").replace("(tm)", "")
    return short(" ".join(text.split()))


def _gib(n) -> str:
    return f"{n / 2 ** 30:.0f} GiB" if isinstance(n, (int, float)) and n > 0 else ""


def chip_name(facts: dict) -> str:
    """A Mac's chip with its GPU cores and memory where the OS told them (Apple M2 Pro, 19-core
    GPU, 32 GiB); "" off a Mac."""
    mac = facts.get("mac") or {}
    if not mac:
        return ""
    cores = mac.get("gpu_cores")
    parts = [_clean(mac.get("chip")) or "Mac", f"{cores}-core GPU" if cores else "", _gib(mac.get("memory_bytes"))]
    return ", ".join(p for p in parts if p)


def gpu_names(facts: dict) -> str:
    """The CUDA devices with their memory (NVIDIA H100 80GB HBM3, 79 GiB); "" without one."""
    devices = [d for d in ((facts.get("torch") or {}).get("cuda_devices") or []) if isinstance(d, dict)]
    named = Counter(f"{_clean(d.get('name')) or 'CUDA device'}" + (f", {_gib(d.get('total_memory'))}"
                                                                   if _gib(d.get("total_memory")) else "")
                    for d in devices)
    return " + ".join(f"{n} x {name}" if n > 1 else name for name, n in named.items())


EMULATED_MAC = "standin-mps"   # the emulated Mac's target (tests/emulated_mps.py); its broken variants add -<what>


def is_emulated(target: str) -> bool:
    """Whether ``target`` is an emulated Mac: a stand-in registered as emulating MPS
    (harness.env.devices), or, in a run file read back where no stand-in is registered, a
    target named standin-mps or standin-mps-<variant>."""
    from harness.env import devices
    name = target or ""
    return (name == EMULATED_MAC or name.startswith(EMULATED_MAC + "-")
            or (devices.is_emulated(name) and devices.rules_of(name) == "mps"))


def emulated_device(facts: dict, target: str) -> str:
    """The one wording of an emulated Mac's column: "emulated Mac (standin-mps) on AMD EPYC".
    Its work ran on this machine's CPU, so it is never named by a Mac's chip, not even where the
    header's facts name one (a run on a Mac, or facts copied from the recorded Mac): there it is
    "the host's CPU"."""
    cpu = _clean((facts.get("cpu") or {}).get("model"))
    chip = _clean((facts.get("mac") or {}).get("chip"))
    on = cpu if cpu and cpu != chip and not cpu.startswith("Apple") else "the host's CPU"
    return f"emulated Mac ({short(target)}) on {on}"


STAND_IN_PREFIX = "standin-"   # the test-only stand-in accelerators' targets (tests/standins.py)


def device_name(facts: dict, target: str) -> str:
    """What ``target`` runs on in the machine ``facts`` describe. A stand-in accelerator that
    emulates no device (standin-tf32 ...) is said to be one, on the CPU it ran on: its card
    must not read as a device."""
    if is_emulated(target):
        return emulated_device(facts, target)
    if (target or "").startswith(STAND_IN_PREFIX):
        cpu = _clean((facts.get("cpu") or {}).get("model")) or "the host's CPU"
        return f"stand-in accelerator ({short(target)}) on {cpu}"
    if target == "cuda":
        return gpu_names(facts) or ("no CUDA device" if not (facts.get("torch") or {}).get("cuda_available")
                                    else "CUDA device (not recorded)")
    if target == "mps":
        return chip_name(facts) or ("no MPS device" if not facts.get("mac") else "MPS device (not recorded)")
    return _clean((facts.get("cpu") or {}).get("model")) or "CPU (model not recorded)"


def machine_name(facts: dict) -> str:
    """The machine in one line: chip (a Mac) or CPU, GPUs, OS."""
    os_, mac = facts.get("os") or {}, facts.get("mac") or {}
    cpu = _clean((facts.get("cpu") or {}).get("model"))
    if mac.get("version") or mac.get("chip"):
        system = f"macOS {short(mac.get('version') or '?')}"
        parts = [chip_name(facts), system]
    else:
        system = " ".join(short(x) for x in (os_.get("system"), os_.get("machine")) if x)
        parts = [gpu_names(facts), cpu, system]
    return ", ".join(p for p in parts if p) or "unknown machine"


def hardware_key(facts: dict) -> str:
    """What tells two machines apart that share a host name, Python and torch: the CPU, the
    chip, the GPUs. Runs whose keys differ are not merged into one column."""
    return "|".join([_clean((facts.get("cpu") or {}).get("model")), chip_name(facts), gpu_names(facts)])


# Beside torch (in the environment id), the packages whose version changes what the suites
# find: the Hugging Face stack the models, the Trainer and the data path come from. Runs of
# one environment id with other versions of them (the upgrade check's candidate with a new
# transformers and the same torch; a `pip install -U transformers` between two runs) are
# other environments: merged, a column would show one's records under the other's versions.
STACK = ("transformers", "datasets", "accelerate")


def stack_of(facts: dict) -> tuple[tuple[str, str], ...]:
    """The versions of ``STACK`` a run header's facts name ("" for one not installed)."""
    packages = facts.get("packages") or {}
    return tuple((name, str(packages.get(name) or "")) for name in STACK)


def merge_key(run: Run) -> tuple:
    """What ``build`` merges runs by: the environment id, the machine, the stack's versions."""
    facts = run.header.get("facts") or {}
    return (run.env_id, hardware_key(facts), stack_of(facts))


def _version_key(text: str | None):
    try:
        return (0, Version((text or "").split("+")[0]))
    except InvalidVersion:
        return (1, text or "")


# ---------------------------------------------------------------------- a column's instruments

# A control is a check whose answer is known in advance, run on the device first in every run
# (harness/ops/controls.py, harness/parity/controls.py, harness/env/instruments.py,
# harness/optim/controls.py): its record says metrics.record_kind "control". One that failed
# means the suite's instrument (the fallback seen, the judge, the memory reading, the timer)
# cannot be trusted on that column, so every verdict of that suite there is unconfirmed.
TRUSTED, UNTRUSTED, UNCHECKED = "trusted", "untrusted", "unchecked"
UNTRUSTED_WORDS = "instrument not trustworthy here"
SUITE_ORDER = ("env", "ops", "parity", "optim", "perf")
# the suites that measure through an instrument a control can check (the environment suite
# reads facts: it has no controls, and a column of it alone has nothing to vouch for)
MEASURING_SUITES = ("ops", "parity", "optim", "perf")


def is_control(rec: dict) -> bool:
    return records.kind_of(rec) == records.RecordKind.CONTROL


@dataclasses.dataclass(frozen=True)
class Control:
    """A control record as the report names it."""
    suite: str
    name: str        # the control's public name (fallback-seen, exact-passes ...)
    check: str
    status: str
    message: str     # its reason, without the words the report puts before it
    run: str = ""    # the run it was recorded in
    # the record itself where it is not the column's newest (a failed control of an earlier run
    # whose measurements still stand: ``instruments_of``), for the Controls section to show
    record: dict | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def untrusted(self) -> str:
        """The line a column whose control failed is marked with, everywhere it is shown."""
        return f"{UNTRUSTED_WORDS}: {self.suite} control {self.name} ({self.message})"


def control_of(rec: dict) -> Control:
    """A control record read back: its name (metrics.control, else its variant), and its reason
    without a leading "instrument not trustworthy here: <name>: " (the control's own message
    says so; the report says it once)."""
    met = rec.get("metrics") or {}
    name = met.get("control") if isinstance(met.get("control"), str) and met.get("control") else \
        (rec.get("variant") or str(rec.get("check", "?")).rsplit("/", 1)[-1])
    message = " ".join(str(rec.get("reason") or "").split())
    for prefix in (f"{UNTRUSTED_WORDS}: ", f"{name}: "):
        message = message.removeprefix(prefix)
    return Control(rec.get("suite") or "?", name, rec.get("check", "?"), rec["status"], message or rec["status"],
                   str(rec.get("run") or ""))


def earlier_control_of(rec: dict) -> Control:
    """A control that failed in an earlier run whose measurements of its suite still stand in
    the column, where a later run's same control (the column's newest record of it) passed:
    its message names its run, and why the later pass does not vouch for that run."""
    found = control_of(rec)
    suite = found.suite
    message = (f"in run {found.run or '?'}: {found.message}; that run's {suite} records still stand here, and a "
               f"later run's passing control vouches only for its own run's: run the {suite} suite again "
               f"(pytest suites/ -m {suite}) to replace them")
    return dataclasses.replace(found, message=message, record=rec)


@dataclasses.dataclass
class Instruments:
    """What a column's controls say of its instruments: every failed one (status fail, error,
    crash or timeout), how many passed, and those that did not apply here (skip, xfail)."""
    failed: list[Control] = dataclasses.field(default_factory=list)
    passed: list[Control] = dataclasses.field(default_factory=list)
    skipped: list[Control] = dataclasses.field(default_factory=list)
    # suite -> the runs in which a control of it passed and none failed (``checked_runs_of``): a
    # record measured in another run (an older run file merged in) was not vouched for by these
    # controls
    checked_runs: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    # suite -> the runs in which a control of it failed and whose records of it stand here: those
    # records are unconfirmed (the failures are in ``failed``), not unchecked
    failed_runs: dict[str, set[str]] = dataclasses.field(default_factory=dict)
    # every control record of the column's runs, not only the newest of each check: a failed
    # control of an earlier run is not erased by a later run's pass (``instruments_of``)
    history: list[dict] = dataclasses.field(default_factory=list, repr=False)
    # suite -> (its records measured here through instruments no control of it checked, its
    # records measured here): a suite with no control passed or failed here, or records of a run
    # in which none did (``unchecked_of``); a suite whose control failed is not here (its records
    # are unconfirmed: ``failed``)
    unchecked: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    @property
    def state(self) -> str:
        """untrusted (a control failed), trusted (controls passed, none failed, and every record
        measured here through an instrument was vouched for by its own run's controls), or
        unchecked (no control ran: an older run file, or all of them skipped; or some suite's
        records here were measured with no control of theirs: ``unchecked`` names them)."""
        return UNTRUSTED if self.failed else UNCHECKED if self.unchecked or not self.passed else TRUSTED

    def failed_suites(self) -> list[str]:
        return _in_suite_order({c.suite for c in self.failed})

    def passed_suites(self) -> list[str]:
        return _in_suite_order({c.suite for c in self.passed})

    def unchecked_suites(self) -> list[str]:
        return _in_suite_order(self.unchecked)

    def controls_ran(self, suite: str) -> bool:
        """Whether a control of ``suite`` passed or failed here (in any of the runs)."""
        return any(c.suite == suite for c in self.passed + self.failed)

    def as_json(self) -> dict:
        """matrix.json's ``columns[].instruments``."""
        return {"state": self.state, "failed": [{"suite": c.suite, "control": c.name, "message": c.message,
                                                 **({"run": c.run} if c.run else {})} for c in self.failed],
                "passed": len(self.passed), "skipped": len(self.skipped),
                "unchecked": [{"suite": s, "records": self.unchecked[s][0], "of": self.unchecked[s][1],
                               "controls_ran": self.controls_ran(s)} for s in self.unchecked_suites()]}


def _suite_rank(suite: str) -> tuple[int, str]:
    return (SUITE_ORDER.index(suite) if suite in SUITE_ORDER else len(SUITE_ORDER), suite)


def _in_suite_order(suites) -> list[str]:
    return sorted(suites, key=_suite_rank)


def instruments_of(recs, checked_runs: dict[str, set[str]] | None = None, history=()) -> Instruments:
    """The Instruments of a column's records (the newest record of each check), suite by suite;
    ``checked_runs`` (``checked_runs_of``): the runs each suite's controls passed in, from every
    record of the runs, where the newest ones alone would forget a run whose controls a later
    run's replaced; without it, the runs of the controls among ``recs``. ``history``: every
    control record of the column's runs (the newest of each check and the older ones): a control
    that failed in a run whose measurements of its suite still stand among ``recs`` is a failed
    control of the column, named with its run, though a later run's same control passed (that
    pass vouches for its own run only)."""
    recs = list(recs)
    found = Instruments(checked_runs=checked_runs if checked_runs is not None else checked_runs_of(recs),
                        history=list(history))
    newest = sorted((r for r in recs if is_control(r)),
                    key=lambda r: (_suite_rank(r.get("suite") or ""), r.get("check", "")))
    for rec in newest:
        control = control_of(rec)
        status = rec["status"]
        (found.failed if status in Status.BAD else found.passed if status in Status.WORKS else found.skipped).append(
            control)
        if status in Status.BAD and rec.get("run"):
            found.failed_runs.setdefault(control.suite, set()).add(rec["run"])
    standing = {(r.get("suite"), r.get("run")) for r in recs
                if not is_control(r) and r["status"] != Status.SKIP and r.get("run")}
    said = {(r.get("check"), r.get("run")) for r in newest}
    for rec in sorted((r for r in found.history if is_control(r) and r["status"] in Status.BAD),
                      key=lambda r: (_suite_rank(r.get("suite") or ""), r.get("check", ""), r.get("run") or "")):
        if (rec.get("check"), rec.get("run")) in said or (rec.get("suite"), rec.get("run")) not in standing:
            continue   # the newest record itself, or a run none of whose measurements are read here any more
        said.add((rec.get("check"), rec.get("run")))
        found.failed.append(earlier_control_of(rec))
        found.failed_runs.setdefault(rec.get("suite") or "", set()).add(rec["run"])
    found.unchecked = unchecked_of(found, recs)
    return found


def unchecked_of(found: Instruments, recs) -> dict[str, tuple[int, int]]:
    """suite -> (how many of its records among ``recs`` no control vouched for, how many it
    measured): the suites that measured here (a check that ran, not a control) with no control
    of theirs passed or failed, or with records of a run in which none did: their instruments
    were never checked there (an older run merged in, controls deselected, or every control of
    theirs skipped). A later run's controls do not vouch for an earlier run's measurements. A
    suite whose control failed here is left out: its records are unconfirmed, which the failed
    control says (``Instruments.failed``), not unchecked as well."""
    failed = {c.suite for c in found.failed}
    checked = {c.suite for c in found.passed + found.failed}
    out: dict[str, tuple[int, int]] = {}
    for suite in MEASURING_SUITES:
        if suite in failed:
            continue
        measured = [r for r in recs if r.get("suite") == suite and r["status"] != Status.SKIP and not is_control(r)]
        if not measured:
            continue
        runs = found.checked_runs.get(suite, set()) | found.failed_runs.get(suite, set())
        if suite not in checked:
            unvouched = len(measured)
        elif runs:
            unvouched = sum(1 for r in measured if r.get("run") and r["run"] not in runs)
        else:
            unvouched = 0
        if unvouched:
            out[suite] = (unvouched, len(measured))
    return out


@dataclasses.dataclass
class Column:
    env_id: str
    target: str
    header: dict          # the newest run header of this environment
    runs: list[str]       # run ids merged into this column, oldest first
    complete: bool        # every merged run wrote its end line and was not interrupted (runfiles.Run.complete)
    headers: list = dataclasses.field(default_factory=list)   # the header of every merged run, oldest first
    cut_off: list = dataclasses.field(default_factory=list)   # the merged runs that did not reach their end (run ids)
    label_suffix: str = ""  # set when two columns would otherwise share a label
    workload: str = ""      # the optimization suite's training workload ("" for checks that train nothing)
    # what its controls say (instruments_of): shared by the columns of one machine and target,
    # its workloads' included, whose records the same instruments measured
    instruments: Instruments = dataclasses.field(default_factory=Instruments)

    @property
    def id(self) -> str:
        return f"{self.env_id}/{self.target}" + (f"/{self.workload}" if self.workload else "")

    @property
    def target_label(self) -> str:
        """The target, and the workload when the column holds one (a small and a large run of
        the optimization suite on one machine are two columns)."""
        return f"{short(self.target)} ({short(self.workload)} workload)" if self.workload else short(self.target)

    @property
    def facts(self) -> dict:
        return self.header.get("facts", {})

    @property
    def torch_release(self) -> str:
        """The torch version without its local build tag (2.8.0+cu128 -> 2.8.0)."""
        return short(((self.facts.get("torch") or {}).get("version") or "none").split("+")[0])

    @property
    def label(self) -> str:
        """Short: host, what the target ran on, torch release and target."""
        return f"{short(self.facts.get('host', '?'))} {self.device} · {self.sublabel}"

    @property
    def sublabel(self) -> str:
        """The label without the host: what a column says under its host's group header."""
        return f"torch {self.torch_release} {self.target_label}{self.label_suffix}"

    @property
    def device(self) -> str:
        """What this column's target ran on, named: the GPU (and its memory) for cuda, the chip
        and its GPU cores for mps, the CPU model for cpu."""
        return device_name(self.facts, self.target)

    @property
    def host_label(self) -> str:
        """The machine: host, then chip or GPUs, CPU and OS (machine_name)."""
        return f"{short(self.facts.get('host', '?'))}: {machine_name(self.facts)}"

    def sort_key(self):
        """Host first (so a host's columns sit together), then torch version numerically."""
        f = self.facts
        return (f.get("host", ""), self.host_label, _version_key((f.get("torch") or {}).get("version")),
                (f.get("python") or {}).get("version", ""),
                tuple(_version_key(v) for _, v in stack_of(f)), TARGET_ORDER.get(self.target, 9), self.workload)


@dataclasses.dataclass
class Matrix:
    columns: list[Column]
    rows: list[str]                        # check ids, grouped by suite
    suites: dict[str, list[str]]           # suite -> check ids
    cells: dict[tuple[str, str], dict]     # (check, column id) -> record
    notes: list[str] = dataclasses.field(default_factory=list)   # what the merge did that a reader must know
    company: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)   # company_of the merged runs
    _summaries: dict | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _counted: dict | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _counted_n: int = dataclasses.field(default=0, init=False, repr=False, compare=False)

    def summary(self, column: Column) -> Counter:
        """How many of the column's cells say each legend key. Counted for every column in one
        pass over the cells, on first use: the page asks once per column per section, and
        counting each time went over every cell some hundred times (3.6 s of a 6 s report)."""
        if self._summaries is None or self._counted is not self.cells or len(self.cells) != self._counted_n:
            self._summaries = defaultdict(Counter)
            for (_, col), r in self.cells.items():
                self._summaries[col][cell_key(r)] += 1
            self._counted, self._counted_n = self.cells, len(self.cells)
        return Counter(self._summaries.get(column.id, ()))


def company_of(runs: list[Run]) -> dict[str, tuple[str, ...]]:
    """Run id -> the suites other than perf that the run also held records of. A perf time
    taken in a pytest run beside other suites (the single serial run an earlier ``./compat
    baseline`` made) is not one taken in a run of perf alone: the same op, same versions, was
    timed 0.3x-1.8x apart that way alone (harness.perf.against.company_apart)."""
    return {run.run_id: tuple(sorted({r.get("suite") or "?" for r in run.records} - {"perf"})) for run in runs}


def build(runs: list[Run]) -> Matrix:
    """Merge runs: per environment, machine and target, the newest record of each check wins.

    An environment id names host, Python and torch; two runs under one id on different
    hardware (another CPU, chip or GPU: ``hardware_key``) or with other versions of the
    Hugging Face stack (``STACK``) are split into columns of their own, each id suffixed with
    its number, and ``Matrix.notes`` says so in one line.
    Records of an older judge are judged again here (``judged_again``)."""
    by_env: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        if run.records:   # a run that recorded nothing (stopped at once) is no machine's column
            by_env[merge_key(run)].append(run)
    machines: dict[str, list[tuple]] = defaultdict(list)   # env id -> its (machine, stack) groups
    for env_id, hw, stack in sorted(by_env):   # numbered in the order of their names, not of the runs a file still holds
        machines[env_id].append((hw, stack))
    notes = [_split_note(env_id, groups, by_env) for env_id, groups in machines.items() if len(groups) > 1]
    columns: dict[str, Column] = {}
    cells: dict[tuple[str, str], dict] = {}
    history: dict[str, list[dict]] = defaultdict(list)   # column id -> every control record of its runs
    for (env_id, hw, stack), env_runs in by_env.items():
        groups = machines[env_id]
        key = env_id if len(groups) == 1 else f"{env_id}#{groups.index((hw, stack)) + 1}"
        env_runs.sort(key=lambda r: (r.header.get("started", ""), r.run_id))
        for run in env_runs:
            for rec in run.records:
                rec = judged_again(rec, run.header)
                target, workload = rec.get("target") or "any", records.workload_of(rec)
                col_id = Column(key, target, {}, [], True, workload=workload).id
                col = columns.get(col_id)
                if col is None:
                    col = columns[col_id] = Column(key, target, run.header, [], True, workload=workload)
                if run.run_id not in col.runs:
                    col.runs.append(run.run_id)
                    col.headers.append(run.header)
                    col.header = run.header
                    col.complete = col.complete and run.complete
                    if not run.complete:
                        col.cut_off.append(run.run_id)
                cells[(rec["check"], col_id)] = rec
                if is_control(rec):
                    history[col_id].append(rec)
    gone = not_collected_any_more(columns.values(), cells, {run.run_id: run for rs in by_env.values() for run in rs})
    for key in gone:
        del cells[key]
    # in check order, not in the order the runs first recorded them: what a list names first
    # ("non-finite: a, b, c") is the same whichever runs the files still hold (``superseded``)
    cells = dict(sorted(cells.items()))
    if gone:
        notes.append(f"{len(gone):,} record{'' if len(gone) == 1 else 's'} left out: the newest whole run of their suite on that target did not "
                     f"run those checks (retired or renamed since, or no longer collected there); the run files keep "
                     f"them ({listed(sorted({check for check, _ in gone}))})")
    suites: dict[str, set[str]] = defaultdict(set)
    for (check, _), rec in cells.items():
        suites[rec["suite"]].add(check)
    ordered_suites = {s: sorted(suites[s]) for s in sorted(suites)}
    rows = [c for s in ordered_suites.values() for c in s]
    ordered = sorted(columns.values(), key=Column.sort_key)
    _disambiguate(ordered)
    _mark_instruments(ordered, cells, None, history)   # each machine and target by its own controls
    return Matrix(ordered, rows, ordered_suites, cells, notes, company_of(runs))


def _split_note(env_id: str, groups: list[tuple], by_env: dict) -> str:
    """The note that says one environment id's runs were split, and by what."""
    return f"runs of {env_id} {apart(env_id, groups, by_env)}: shown as separate columns, not merged"


def apart(env_id: str, groups: list[tuple], by_env: dict) -> str:
    """What sets apart one environment id's runs that are not one environment (``groups``: their
    (machine, stack) parts of ``merge_key``, in order; ``by_env``: merge_key -> its runs), as
    "had 2 different package versions (#1: transformers 5.23.0; #2: transformers 5.24.0)"."""
    machines = len({hw for hw, _ in groups}) > 1
    differ = [i for i, name in enumerate(STACK) if len({stack[i][1] for _, stack in groups}) > 1]

    def named(hw, stack) -> str:
        facts = next(iter(by_env[(env_id, hw, stack)])).header.get("facts") or {}
        versions = ", ".join(f"{stack[i][0]} {stack[i][1] or 'absent'}" for i in differ)
        return "; ".join(x for x in (machine_name(facts) if machines else "", versions) if x).replace("; ", " with ")
    listed_groups = "; ".join(f"#{i + 1}: {named(hw, stack)}" for i, (hw, stack) in enumerate(groups))
    what = ("different machines" if not differ else "different package versions" if not machines
            else "different machines or package versions")
    verb = "came from" if machines else "had"
    return f"{verb} {len(groups)} {what} ({listed_groups})"


def not_collected_any_more(columns, cells: dict[tuple[str, str], dict], runs: dict[str, Run]) -> set[tuple[str, str]]:
    """The cells whose standing record a newer run of the same column shows the suite no longer
    has: that run selected the whole of the record's suite on the column's target, reached its
    end, recorded checks of that suite in this column, and not this one (a check retired or
    renamed since, or no longer collected there). Without them a column would keep a failure
    of a check that no longer exists for ever (harness.report.selection reads the selections)."""
    from harness.report import selection
    gone = set()
    for col in columns:
        order = {run_id: i for i, run_id in enumerate(col.runs)}   # oldest first
        recorded: dict[str, dict[str, set[str]]] = {}   # run -> suite -> its checks in this column
        for run_id in col.runs:
            recorded[run_id] = defaultdict(set)
            for rec in runs[run_id].records:
                if (rec.get("target") or "any") == col.target and records.workload_of(rec) == col.workload:
                    recorded[run_id][rec["suite"]].add(rec["check"])
        newest_whole: dict[str, str] = {}   # suite -> the newest finished run whole for it here
        for run_id in col.runs:
            sel = selection.selection_of(runs[run_id].header)
            for suite in recorded[run_id]:
                if run_id not in col.cut_off and selection.whole_for(sel, suite, col.target):
                    newest_whole[suite] = run_id
        for (check, col_id), rec in cells.items():
            whole = newest_whole.get(rec["suite"]) if col_id == col.id else None
            if whole and order.get(rec.get("run"), -1) < order[whole] and check not in recorded[whole][rec["suite"]]:
                gone.add((check, col_id))
    return gone


def superseded(runs: list[Run]) -> set[str]:
    """The runs ``build`` no longer shows anything of (their ids). In ``build``'s order
    (oldest first, per environment, machine and stack: ``merge_key``), a record stands until a newer one of the
    same check in the same column (target, workload) replaces it, or until a newer whole,
    finished run of its suite there runs without it (``not_collected_any_more``: a check
    retired or renamed since); a run is needed while it holds a standing record, or while it
    is the newest whole, finished run of a suite in a column (whose list of checks decides
    the second case). Leaving the others out changes no cell and no partial line of the
    matrix: only the note counting records left out as retired stops counting theirs, and a
    cut-off run among them no longer marks its column as cut off, every check it reached
    having a newer record. harness.core.runfiles.retire moves them out of a run file, so a
    file used for years holds about one run of each suite and selection."""
    from harness.report import selection
    by_env: dict[tuple, list[Run]] = defaultdict(list)
    for run in runs:
        by_env[merge_key(run)].append(run)
    needed: set[str] = set()
    for env_runs in by_env.values():
        env_runs = sorted(env_runs, key=lambda r: (r.header.get("started", ""), r.run_id))
        order = {run.run_id: i for i, run in enumerate(env_runs)}
        newest: dict[tuple[str, str, str], tuple[str, str]] = {}   # (target, workload, check) -> (run, suite)
        whole: dict[tuple[str, str, str], str] = {}        # (target, workload, suite) -> its newest whole run
        held: dict[tuple[str, str, str, str], set[str]] = defaultdict(set)   # (run, target, workload, suite) -> checks
        for run in env_runs:
            places = set()
            for rec in run.records:
                place = (rec.get("target") or "any", records.workload_of(rec))
                newest[(*place, rec["check"])] = (run.run_id, rec["suite"])
                places.add((*place, rec["suite"]))
                held[(run.run_id, *place, rec["suite"])].add(rec["check"])
            if run.complete:
                sel = selection.selection_of(run.header)
                for target, workload, suite in places:
                    if selection.whole_for(sel, suite, target):
                        whole[(target, workload, suite)] = run.run_id
        needed |= set(whole.values())
        for (target, workload, check), (run_id, suite) in newest.items():
            after = whole.get((target, workload, suite))
            if after is None or order[after] <= order[run_id] or check in held[(after, target, workload, suite)]:
                needed.add(run_id)
    return {run.run_id for run in runs} - needed


def listed(items, at_most: int = 3) -> str:
    """The first ``at_most`` items, and how many more: "a, b, c and 4 more"."""
    items = list(items)
    return ", ".join(items[:at_most]) + (f" and {len(items) - at_most} more" if len(items) > at_most else "")


def judged_again(rec: dict, header: dict) -> dict:
    """A record of an older judge (records.judge_of) as today's judge sees it, where its
    metrics allow (harness.parity.numerics.rejudge): a failure that passes now passes, one
    that only a rerun can settle shows ``rerun``, one that remains fails with its suspected
    cause. The old judge's margin measured agreement with the CPU, not accuracy: it is kept
    as ``older_judge_margin`` and no margin is shown. ``judged_again`` on the record says
    what was done; a current record is returned as it is. A ``judged_again`` a run file
    brought is not the report's own note and is dropped: only this function writes one."""
    if "judged_again" in rec:
        rec = {k: v for k, v in rec.items() if k != "judged_again"}
    judge = records.judge_of(rec, header)
    if judge is None or judge >= records.JUDGES.get(rec.get("suite"), judge):
        return rec
    from harness.parity.numerics import rejudge
    metrics = dict(rec.get("metrics") or {})
    if "margin" in metrics:
        metrics["older_judge_margin"] = metrics.pop("margin")
    note = {"judge": judge, "was": rec["status"]}
    out = {**rec, "metrics": metrics}
    if rec["status"] != Status.FAIL:
        unconfirmed = (": unconfirmed, as today's judge also asks float64's rules and finds NaN or inf where "
                       "float64 has a number" if rec["status"] in Status.WORKS else "")
        note.update(outcome="kept", why=f"{rec['status']} under judge {judge}, which compared with the CPU in the "
                                        f"same dtype{unconfirmed}; run it again for today's judge")
        return {**out, "judged_again": note}
    found = rejudge.classify(rec)
    note.update(outcome=found.outcome, why=found.why)
    reason = f"judged again from the metrics of judge {judge} (it said fail): {found.why}"
    if found.outcome == "passes":
        out.update(status=Status.PASS, reason=reason)
    elif found.outcome == "rerun":
        out.update(reason=reason + "; run the check again to judge it")
    elif found.outcome == "remains":
        out["reason"] = reason
        if found.cause:
            metrics.update(cause=found.cause, cause_suspected=True)
    return {**out, "judged_again": note}


def as_written(rec: dict) -> dict:
    """A record ``judged_again`` returned, with the status and margin its own judge gave it:
    what a comparison with a record of that same judge reads (harness.report.compare); a
    record without the note is returned as it is."""
    note = rec.get("judged_again")
    if not isinstance(note, dict):
        return rec
    metrics = dict(rec.get("metrics") or {})
    if "older_judge_margin" in metrics:
        metrics["margin"] = metrics.pop("older_judge_margin")
    return {**rec, "status": note["was"], "metrics": metrics}


def checked_runs_of(recs) -> dict[str, set[str]]:
    """suite -> the run ids in which a control of that suite passed and none failed: a run is
    checked only by controls that passed in it (one whose control failed is untrusted for that
    suite, and its records unconfirmed: ``instruments_of``). ``recs``: the controls of one
    machine and target (``_mark_instruments``): a control of another target says nothing of
    this one's instruments."""
    passed: dict[str, set[str]] = defaultdict(set)
    failed: dict[str, set[str]] = defaultdict(set)
    for rec in recs:
        if is_control(rec) and rec.get("run"):
            if rec["status"] in Status.BAD:
                failed[rec.get("suite") or ""].add(rec["run"])
            elif rec["status"] in Status.WORKS:
                passed[rec.get("suite") or ""].add(rec["run"])
    return {suite: runs - failed[suite] for suite, runs in passed.items() if runs - failed[suite]}


def _mark_instruments(columns: list[Column], cells: dict[tuple[str, str], dict],
                      checked_runs: dict[str, set[str]] | None = None,
                      history: dict[str, list[dict]] | None = None) -> None:
    """Each column's Instruments, from the controls of its machine and target (its workloads
    together: the optimization suite's controls are one for the small and the large workload).
    ``history``: column id -> every control record its runs wrote (``instruments_of``).
    ``checked_runs`` (one for every column), else each machine and target's own, from the
    controls of that machine and target in ``history``: a run of two targets (cpu and mps, as
    ``./compat suites`` runs on a Mac) whose mps control failed is still checked for cpu by the
    cpu controls that passed in it."""
    groups: dict[tuple[str, str], list[Column]] = defaultdict(list)
    for col in columns:
        groups[(col.env_id, col.target)].append(col)
    by_column: dict[str, list[dict]] = defaultdict(list)
    for (_, col_id), rec in cells.items():
        by_column[col_id].append(rec)
    for cols in groups.values():
        controls = [rec for c in cols for rec in (history or {}).get(c.id, [])]
        found = instruments_of([rec for c in cols for rec in by_column.get(c.id, [])],
                               checked_runs if checked_runs is not None else checked_runs_of(controls), controls)
        for col in cols:
            col.instruments = found


def _disambiguate(columns: list[Column]) -> None:
    """Same host, torch and target twice (other versions of the stack, another Python, another
    build): say which."""
    same: dict[str, list[Column]] = defaultdict(list)
    for c in columns:
        same[c.label].append(c)
    for cols in same.values():
        stacks = [stack_of(c.facts) for c in cols]
        differ = [i for i in range(len(STACK)) if len({st[i][1] for st in stacks}) > 1]
        for c, st in zip(cols, stacks):
            if differ:
                c.label_suffix += " · " + ", ".join(f"{st[i][0]} {short(st[i][1]) or 'absent'}" for i in differ)
    # One host name, CPU and torch on two machines (a cloud's GPU machines): the cpu columns
    # differ by the GPU or the Mac beside them, which says more than an environment id's number.
    same = defaultdict(list)
    for c in columns:
        same[c.label].append(c)
    for cols in same.values():
        for part, missing in ((gpu_names, "without a GPU"), (chip_name, "not a Mac")):
            values = [part(c.facts) for c in cols]
            if len(set(values)) > 1:
                for c, value in zip(cols, values):
                    c.label_suffix += f" · {f'with {value}' if value else missing}"
                break
    for suffix in (lambda c: f" py{short((c.facts.get('python') or {}).get('version'))}",
                   lambda c: f" [{short(c.env_id)}]"):
        seen = Counter(c.label for c in columns)
        for c in columns:
            if seen[c.label] > 1:
                c.label_suffix += suffix(c)


def host_groups(columns: list[Column]) -> list[tuple[str, list[Column]]]:
    """Consecutive columns of one machine, under one header (columns come sorted by host)."""
    groups: list[tuple[str, list[Column]]] = []
    for col in columns:
        if groups and groups[-1][0] == col.host_label:
            groups[-1][1].append(col)
        else:
            groups.append((col.host_label, [col]))
    return groups


# ---------------------------------------------------------------------- across versions

WORKS = (Status.PASS, Category.CPU_FALLBACK, Status.XPASS)   # cell keys that count as "it works here"


@dataclasses.dataclass(frozen=True)
class History:
    """One check on one lineage (one machine: host and hardware; target, Python) across torch
    versions, oldest first.

    Skipped cells say nothing about whether the check works, so they are left out of
    ``steps``. ``first_works``: the first version of the final unbroken run of working
    versions (None when the newest does not work). ``last_worked``: when the newest does
    not work, the newest version that did. ``regressions``: every (worked, broke) pair of
    neighbouring versions, so a fix that follows an earlier breakage says so.
    """
    check: str
    host: str
    target: str
    python: str
    steps: tuple[tuple[str, str], ...]        # (torch release, cell key)
    first_works: str | None
    last_worked: str | None
    regressions: tuple[tuple[str, str], ...]
    # the machine (Column.host_label: host, then chip or GPUs, CPU and OS): two machines that share
    # a host name (a cloud's VMs, all "vm") are two lineages, told apart by it
    machine: str = ""

    @property
    def works_now(self) -> bool:
        return self.steps[-1][1] in WORKS


def lineages(m: Matrix) -> dict[tuple[str, str, str, str], list[Column]]:
    """Columns of one machine (host and hardware: ``hardware_key``), target (with its workload)
    and Python, ordered by torch version (then the stack's versions). Two machines that share a
    host name (a cloud's VMs all call themselves "vm": the recorded H100 and H200) are two
    lineages: merged, what differs between their GPUs read as a torch regression ("worked in
    2.11.0, broke in 2.11.0"). Key: (host, hardware_key, target label, Python)."""
    out: dict[tuple[str, str, str, str], list[Column]] = defaultdict(list)
    for col in m.columns:
        f = col.facts
        out[(f.get("host", "?"), hardware_key(f), col.target_label,
             (f.get("python") or {}).get("version", "?"))].append(col)
    return {k: sorted(cols, key=lambda c: (_version_key((c.facts.get("torch") or {}).get("version")),
                                           tuple(_version_key(v) for _, v in stack_of(c.facts))))
            for k, cols in out.items()}


def version_history(m: Matrix) -> list[History]:
    """Every check whose result changes across the torch versions of a lineage."""
    out = []
    for (host, _, target, python), cols in lineages(m).items():
        if len(cols) < 2:
            continue
        for check in m.rows:
            steps = tuple((c.torch_release + c.label_suffix, cell_key(r)) for c in cols   # + the stack, where two share a torch
                          if (r := m.cells.get((check, c.id))) and r["status"] != Status.SKIP)
            if len({key for _, key in steps}) > 1:
                out.append(_history(check, host, target, python, steps, cols[0].host_label))
    return out


def _history(check: str, host: str, target: str, python: str, steps: tuple, machine: str = "") -> History:
    versions = [v for v, _ in steps]
    works = [key in WORKS for _, key in steps]
    regressions = tuple((versions[i], versions[i + 1]) for i in range(len(steps) - 1) if works[i] and not works[i + 1])
    first_works = last_worked = None
    if works[-1]:
        start = len(works) - 1
        while start > 0 and works[start - 1]:
            start -= 1
        first_works = versions[start]
    else:
        last_worked = next((v for v, w in zip(reversed(versions), reversed(works)) if w), None)
    return History(check, host, target, python, steps, first_works, last_worked, regressions, machine)


def suite_counts(records: list[dict]) -> list[tuple[str, str, Counter]]:
    """(suite, target, counts of cell keys): the short matrix printed after a run."""
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for rec in records:
        counts[(rec["suite"], rec.get("target") or "any")][cell_key(rec)] += 1
    return [(s, t, c) for (s, t), c in sorted(counts.items(), key=lambda kv: (kv[0][0], TARGET_ORDER.get(kv[0][1], 9)))]


def format_counts(counter: Counter) -> str:
    return "  ".join(f"{SYMBOL[k]} {counter[k]}" for k in KEY_ORDER if counter.get(k))
