"""The compatibility matrix as data: rows are checks, columns are environment x target.

Built from runs read by ``harness.journal``; rendered by ``tools.report`` (Markdown,
HTML, JSON) and, in short, at the end of a pytest run.
"""
from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

from packaging.version import InvalidVersion, Version

from harness.journal import Run

TARGET_ORDER = {"cpu": 0, "cuda": 1, "mps": 2}

# key, symbol, meaning. The key is what a cell shows: a status, or for a check that ran
# its op category when that is the news (cpu-fallback, unsupported).
LEGEND = (
    ("pass", "✓", "passed (ran natively)"),
    ("cpu-fallback", "↩", "ran, but some ops fell back to the CPU"),
    ("unsupported", "⊘", "not implemented on this target"),
    ("fail", "✗", "failed"),
    ("error", "E", "the check itself errored"),
    ("xfail", "x", "known limitation of this version or OS"),
    ("xpass", "X", "expected to fail, but passed"),
    ("does-not-hold", "≠", "measured: the documented optimization claim does not hold here"),
    ("inconclusive", "?", "measured: no verdict within the time budget"),
    ("skip", "–", "skipped: not applicable here, or target absent"),
    ("crash", "☠", "the process died in this check"),
    ("timeout", "⏱", "ran out of time"),
)
SYMBOL = {key: sym for key, sym, _ in LEGEND}
KEY_ORDER = [key for key, _, _ in LEGEND]
PREFERRED_METRICS = ("margin", "max_abs_err", "mem_ratio", "time_ratio", "capability", "threads", "device", "usable")


def cell_key(record: dict) -> str:
    cat, status = record.get("category"), record["status"]
    if cat == "cpu-fallback" and status in ("pass", "xpass"):
        return "cpu-fallback"
    if cat == "unsupported" and status not in ("crash", "timeout"):
        return "unsupported"
    if cat in ("does-not-hold", "inconclusive") and status == "xfail":
        return cat
    return status


NOT_SHOWN = ("model", "attn", "seconds", "samples", "samples_without_grad", "pytorch_expects", "disagreement",
             "optimizer_path")


def key_metric(metrics: dict) -> str:
    if not metrics:
        return ""
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

    @property
    def id(self) -> str:
        return f"{self.env_id}/{self.target}"

    @property
    def facts(self) -> dict:
        return self.header.get("facts", {})

    @property
    def label(self) -> str:
        """Short: host, torch release (without its local build tag) and target."""
        f = self.facts
        torch_v = ((f.get("torch") or {}).get("version") or "none").split("+")[0]
        return f"{f.get('host', '?')} torch {torch_v} {self.target}{self.label_suffix}"

    def sort_key(self):
        f = self.facts
        return (f.get("host", ""), _version_key((f.get("torch") or {}).get("version")),
                (f.get("python") or {}).get("version", ""), TARGET_ORDER.get(self.target, 9))


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
                target = rec.get("target") or "any"
                col_id = f"{env_id}/{target}"
                col = columns.get(col_id)
                if col is None:
                    col = columns[col_id] = Column(env_id, target, run.header, [], True)
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


def suite_counts(records: list[dict]) -> list[tuple[str, str, Counter]]:
    """(suite, target, counts of cell keys): the short matrix printed after a run."""
    counts: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for rec in records:
        counts[(rec["suite"], rec.get("target") or "any")][cell_key(rec)] += 1
    return [(s, t, c) for (s, t), c in sorted(counts.items(), key=lambda kv: (kv[0][0], TARGET_ORDER.get(kv[0][1], 9)))]


def format_counts(counter: Counter) -> str:
    return "  ".join(f"{SYMBOL[k]} {counter[k]}" for k in KEY_ORDER if counter.get(k))
