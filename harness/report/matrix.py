"""The compatibility matrix as data: rows are checks, columns are environment x target.

Built from runs read by ``harness.core.runfiles``; rendered by ``tools.report`` (Markdown,
HTML, JSON) and, in short, at the end of a pytest run.
"""
from __future__ import annotations

import dataclasses
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
    (Category.INCONCLUSIVE, "?", "measured: no verdict within the time budget"),
    (Status.SKIP, "–", "skipped: not applicable here, or target absent"),
    (Status.CRASH, "☠", "the process died in this check"),
    (Status.TIMEOUT, "⏱", "ran out of time"),
)
SYMBOL = {key: sym for key, sym, _ in LEGEND}
# Cell colours, one per legend key: the matrix cells, the summary bars, the filters and
# the charts all use these, so a colour means the same thing everywhere on the page.
KEY_COLOURS = {
    "pass": "#bfe8bf", "cpu-fallback": "#ffe39a", "unsupported": "#fbc28e", "fail": "#f3a0a0", "error": "#eeb0d0",
    "xfail": "#cfcffa", "xpass": "#a9daf7", "does-not-hold": "#f7b8a0", "inconclusive": "#dedede",
    "skip": "#e4e4e4", "crash": "#d98f8f", "timeout": "#dcb6e8",
}
KEY_ORDER = [key for key, _, _ in LEGEND]
PREFERRED_METRICS = ("margin", "max_abs_err", "mem_ratio", "time_ratio", "capability", "threads", "device", "usable",
                     "max_abs_diff", "runs")


def cell_key(record: dict) -> str:
    """What a record's cell shows: a key of LEGEND."""
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


def _version_key(text: str | None):
    try:
        return (0, Version((text or "").split("+")[0]))
    except InvalidVersion:
        return (1, text or "")


@dataclasses.dataclass
class Column:
    env_id: str
    target: str
    header: dict          # the newest run header of this environment
    runs: list[str]       # run ids merged into this column, oldest first
    complete: bool        # every merged run wrote its end line
    label_suffix: str = ""  # set when two columns would otherwise share a label
    workload: str = ""      # the optimization suite's training workload ("" for checks that train nothing)

    @property
    def id(self) -> str:
        return f"{self.env_id}/{self.target}" + (f"/{self.workload}" if self.workload else "")

    @property
    def target_label(self) -> str:
        """The target, and the workload when the column holds one (a small and a large run of
        the optimization suite on one machine are two columns)."""
        return f"{self.target} ({self.workload} workload)" if self.workload else self.target

    @property
    def facts(self) -> dict:
        return self.header.get("facts", {})

    @property
    def torch_release(self) -> str:
        """The torch version without its local build tag (2.8.0+cu128 -> 2.8.0)."""
        return ((self.facts.get("torch") or {}).get("version") or "none").split("+")[0]

    @property
    def label(self) -> str:
        """Short: host, torch release and target."""
        return f"{self.facts.get('host', '?')} {self.sublabel}"

    @property
    def sublabel(self) -> str:
        """The label without the host: what a column says under its host's group header."""
        return f"torch {self.torch_release} {self.target_label}{self.label_suffix}"

    @property
    def host_label(self) -> str:
        """The host and what tells machines apart: chip and macOS on a Mac, CPU and OS elsewhere."""
        f = self.facts
        mac, os_ = f.get("mac") or {}, f.get("os") or {}
        if mac.get("version"):
            machine = f"{mac.get('chip') or (f.get('cpu') or {}).get('model') or '?'}, macOS {mac['version']}"
        else:
            machine = ", ".join(str(x) for x in ((f.get("cpu") or {}).get("model"), os_.get("system"),
                                                 os_.get("machine")) if x)
        return f"{f.get('host', '?')} ({machine or 'unknown machine'})"

    def sort_key(self):
        """Host first (so a host's columns sit together), then torch version numerically."""
        f = self.facts
        return (f.get("host", ""), self.host_label, _version_key((f.get("torch") or {}).get("version")),
                (f.get("python") or {}).get("version", ""), TARGET_ORDER.get(self.target, 9), self.workload)


@dataclasses.dataclass
class Matrix:
    columns: list[Column]
    rows: list[str]                        # check ids, grouped by suite
    suites: dict[str, list[str]]           # suite -> check ids
    cells: dict[tuple[str, str], dict]     # (check, column id) -> record

    def summary(self, column: Column) -> Counter:
        return Counter(cell_key(r) for (check, col), r in self.cells.items() if col == column.id)


def build(runs: list[Run]) -> Matrix:
    """Merge runs: per environment and target, the newest record of each check wins."""
    by_env: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_env[run.env_id].append(run)
    columns: dict[str, Column] = {}
    cells: dict[tuple[str, str], dict] = {}
    for env_id, env_runs in by_env.items():
        env_runs.sort(key=lambda r: (r.header.get("started", ""), r.run_id))
        for run in env_runs:
            for rec in run.records:
                target, workload = rec.get("target") or "any", records.workload_of(rec)
                col_id = Column(env_id, target, {}, [], True, workload=workload).id
                col = columns.get(col_id)
                if col is None:
                    col = columns[col_id] = Column(env_id, target, run.header, [], True, workload=workload)
                if run.run_id not in col.runs:
                    col.runs.append(run.run_id)
                    col.header = run.header
                    col.complete = col.complete and run.complete
                cells[(rec["check"], col_id)] = rec
    suites: dict[str, set[str]] = defaultdict(set)
    for (check, _), rec in cells.items():
        suites[rec["suite"]].add(check)
    ordered_suites = {s: sorted(suites[s]) for s in sorted(suites)}
    rows = [c for s in ordered_suites.values() for c in s]
    ordered = sorted(columns.values(), key=Column.sort_key)
    _disambiguate(ordered)
    return Matrix(ordered, rows, ordered_suites, cells)


def _disambiguate(columns: list[Column]) -> None:
    """Same host, torch and target twice (another Python, another build): say which."""
    for suffix in (lambda c: f" py{(c.facts.get('python') or {}).get('version')}", lambda c: f" [{c.env_id}]"):
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
    """One check on one lineage (host, target, Python) across torch versions, oldest first.

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

    @property
    def works_now(self) -> bool:
        return self.steps[-1][1] in WORKS


def lineages(m: Matrix) -> dict[tuple[str, str, str], list[Column]]:
    """Columns of one host, target (with its workload) and Python, ordered by torch version."""
    out: dict[tuple[str, str, str], list[Column]] = defaultdict(list)
    for col in m.columns:
        f = col.facts
        out[(f.get("host", "?"), col.target_label, (f.get("python") or {}).get("version", "?"))].append(col)
    return {k: sorted(cols, key=lambda c: _version_key((c.facts.get("torch") or {}).get("version")))
            for k, cols in out.items()}


def version_history(m: Matrix) -> list[History]:
    """Every check whose result changes across the torch versions of a lineage."""
    out = []
    for (host, target, python), cols in lineages(m).items():
        if len(cols) < 2:
            continue
        for check in m.rows:
            steps = tuple((c.torch_release, cell_key(r)) for c in cols
                          if (r := m.cells.get((check, c.id))) and r["status"] != Status.SKIP)
            if len({key for _, key in steps}) > 1:
                out.append(_history(check, host, target, python, steps))
    return out


def _history(check: str, host: str, target: str, python: str, steps: tuple) -> History:
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
    return History(check, host, target, python, steps, first_works, last_worked, regressions)


def suite_counts(records: list[dict]) -> list[tuple[str, str, Counter]]:
    """(suite, target, counts of cell keys): the short matrix printed after a run."""
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for rec in records:
        counts[(rec["suite"], rec.get("target") or "any")][cell_key(rec)] += 1
    return [(s, t, c) for (s, t), c in sorted(counts.items(), key=lambda kv: (kv[0][0], TARGET_ORDER.get(kv[0][1], 9)))]


def format_counts(counter: Counter) -> str:
    return "  ".join(f"{SYMBOL[k]} {counter[k]}" for k in KEY_ORDER if counter.get(k))
