"""Outcome records: a run header, one JSON line per check, a footer; and the reader.

A run file (``reports/runs/<env-id>.jsonl``) may hold several runs of the same
environment, one after another or even interleaved (two sessions at once): every line
carries its run id, and each run starts with its own header line. Each line is written
with a single ``os.write`` on an ``O_APPEND`` descriptor, so a run killed at any moment
leaves complete lines behind (at worst a last line cut short, which the reader reports
and skips) and every record before it.

Only the pytest controller writes; workers send their data on the test report.
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import re
import uuid
from pathlib import Path

from harness.core import records

SCHEMA = records.SCHEMA      # the record contract, its statuses and fields: harness/core/records.py
STATUSES = records.STATUSES
KINDS = ("header", "check", "end")
REASON_MAX = 600


class JournalError(Exception):
    """A run file that cannot be read as a whole; the message is one line naming file and line."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


# --------------------------------------------------------------------------- identity

@dataclasses.dataclass(frozen=True)
class Identity:
    suite: str
    subject: str
    variant: str
    target: str | None

    @property
    def check(self) -> str:
        return "/".join(p for p in (self.suite, self.subject, self.variant) if p)


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
    target, workload = rec.get("target") or "any", workload_of(rec)
    return f"{target} [{workload} workload]" if workload else target


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


# --------------------------------------------------------------------------- outcomes

def _strip(text: str, *prefixes: str) -> str:
    for p in prefixes:
        if text.startswith(p):
            return text[len(p):]
    return text


def first_line(text: str | None) -> str:
    text = (text or "").strip()
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= REASON_MAX else line[:REASON_MAX - 1] + "…"


def error_line(exc: BaseException, limit: int = REASON_MAX) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"[:limit]


def outcome_of(phases: list[dict]) -> tuple[str, str]:
    """Status and reason of a check from its pytest phases.

    Each phase: ``when`` (setup / call / teardown, or ``???`` for a crashed worker),
    ``outcome`` (passed / failed / skipped), ``message``, ``wasxfail`` (None or reason).
    """
    status, reason = None, ""
    for ph in phases:
        when, out, msg, xf = ph["when"], ph["outcome"], ph.get("message") or "", ph.get("wasxfail")
        if when == "???":
            return "crash", first_line(msg) or "the worker process died while running this check"
        if out == "failed" and msg.startswith("Timeout"):
            return "timeout", first_line(msg)
        if when == "setup":
            if out == "failed":
                return "error", first_line(msg)
            if out == "skipped":
                status, reason = ("xfail", first_line(xf)) if xf is not None else ("skip", first_line(msg))
        elif when == "call":
            if out == "failed":
                status, reason = ("xpass", first_line(msg)) if "XPASS(strict)" in msg else ("fail", first_line(msg))
            elif out == "skipped":
                status, reason = ("xfail", first_line(xf)) if xf is not None else ("skip", first_line(msg))
            else:
                status, reason = ("xpass", first_line(xf)) if xf is not None else ("pass", first_line(msg))
        elif when == "teardown" and out == "failed":
            if status in (None, "pass", "xfail", "xpass", "skip"):
                status, reason = "error", "teardown: " + first_line(msg)
    return status or "error", reason


def message_of(longrepr, excinfo=None) -> str:
    """A one-line message for a phase: the skip reason, or the exception's first line."""
    if excinfo is not None:
        try:
            text = excinfo.exconly()
        except Exception:
            text = str(excinfo.value)
        return first_line(_strip(text.strip(), "Failed: ", "Skipped: ", "_pytest.outcomes.Failed: "))
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return first_line(_strip(str(longrepr[2]), "Skipped: "))
    if longrepr is None:
        return ""
    text = str(longrepr)
    return first_line(text.strip().splitlines()[-1] if text.strip() else "")


def clean_xfail(reason: str | None) -> str | None:
    return None if reason is None else _strip(reason, "reason: ")


def json_safe(value, depth: int = 0):
    """Plain JSON for a metric: NaN and infinities as strings, unknown objects by str().

    Metrics cross from an xdist worker to the controller and end in a JSON file; neither
    takes a torch.dtype or a float NaN as it is.
    """
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < 6 and isinstance(value, dict):
        return {str(k): json_safe(v, depth + 1) for k, v in value.items()}
    if depth < 6 and isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v, depth + 1) for v in value]
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        try:
            return json_safe(value.item(), depth + 1)
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


# What a check may say of itself, and the pytest outcome it must have had for that.
STATUS_OVERRIDES = {"crash": "fail", "timeout": "fail", "xpass": "pass"}


def build_record(run_id: str, ident: dict, phases: list[dict], extra: dict, nodeid: str) -> dict:
    status, reason = outcome_of(phases)
    claimed = extra.get("status")
    if claimed in STATUS_OVERRIDES and STATUS_OVERRIDES[claimed] == status:
        status = claimed
    return {
        "kind": "check", "run": run_id,
        "check": Identity(ident["suite"], ident["subject"], ident["variant"], ident["target"]).check,
        "suite": ident["suite"], "subject": ident["subject"], "variant": ident["variant"],
        "target": ident["target"], "status": status,
        "category": extra.get("category") or "n/a",
        "metrics": extra.get("metrics") or {},
        "reason": reason,
        "duration_s": round(sum(float(p.get("duration") or 0.0) for p in phases), 4),
        "nodeid": nodeid,
    }


# --------------------------------------------------------------------------- writing

def encode_line(obj: dict) -> str:
    """One run-file line: JSON (no NaN: metrics went through json_safe) and its newline.
    A lone surrogate (an exception message holding an undecodable file name, say) cannot be
    UTF-8: it is written as U+FFFD, as the reader reads one."""
    text = json.dumps(obj, ensure_ascii=False, default=str, allow_nan=False)
    return _LONE_SURROGATE.sub("\ufffd", text) + "\n"


class Writer:
    """Appends lines to a run file; each line is one write, flushed to the OS at once."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def write(self, obj: dict) -> None:
        data = encode_line(obj).encode("utf-8")
        fd = self._open()
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def probe_writable(path: str | os.PathLike, directory: bool = False) -> str | None:
    """Why ``path`` (a file; with ``directory``, a directory to write files in) cannot be
    written, in a few words, or None when it can. Asked before a run, so that a place
    that cannot take the results is said at the start, not after the run.

    Leaves nothing behind: an existing file is opened for appending and closed; in an
    existing directory a temporary file is made and removed (a run file is never created
    empty); a directory still to be made (the writers make it) needs its nearest existing
    parent to be a directory this process may write in.
    """
    import tempfile
    path = Path(path)
    folder = path if directory else path.parent
    try:
        if path.is_dir() and not directory:
            return "it is a directory"
        if path.exists() and not directory:
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        elif folder.is_dir():
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
                pass
        else:
            nearest = next(p for p in (folder, *folder.parents) if p.exists() or p == p.parent)
            if not nearest.is_dir():
                return f"{nearest} is not a directory"
            if not os.access(nearest, os.W_OK | os.X_OK):
                return f"{nearest} is not writable"
    except OSError as exc:
        return str(exc.strerror or exc)
    return None


def write_files(folder: str | os.PathLike, files: dict[str, bytes]) -> None:
    """Every file into the directory ``folder``, all or none: each to a temporary beside its
    target, and only when all are written, the renames. A reader, or a crash halfway, sees
    the old files or the new ones. A failure before the renames (a ``folder`` that cannot
    be a directory, a full disk, a directory in a file's place) raises OSError and leaves
    every old file as it was; the temporaries are removed either way."""
    import errno
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(folder))
    folder.mkdir(parents=True, exist_ok=True)
    pending: list[tuple[Path, Path]] = []
    try:
        for name, data in files.items():
            target, tmp = folder / name, folder / f".{name}.tmp{os.getpid()}"
            if target.is_dir():
                raise IsADirectoryError(errno.EISDIR, "is a directory", str(target))
            pending.append((tmp, target))
            tmp.write_bytes(data)
        for tmp, target in pending:
            os.replace(tmp, target)
    finally:
        for tmp, _ in pending:
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """One whole file (a comparison, a baseline) written as ``write_files`` writes."""
    path = Path(path)
    write_files(path.parent, {path.name: text.encode("utf-8")})


def header(run_id: str, env_id: str, facts: dict, **extra) -> dict:
    return {"kind": "header", "schema": SCHEMA, "run": run_id, "env_id": env_id, "started": now_iso(),
            "facts": facts, **extra}


# --------------------------------------------------------------------------- reading

@dataclasses.dataclass
class Run:
    run_id: str
    header: dict
    source: str
    records: list[dict] = dataclasses.field(default_factory=list)
    end: dict | None = None

    @property
    def env_id(self) -> str:
        return self.header.get("env_id", "?")

    @property
    def complete(self) -> bool:
        return self.end is not None


@dataclasses.dataclass
class RunFile:
    path: str
    runs: list[Run]
    errors: list[str]


# A lone surrogate ("\ud800" in JSON) is valid JSON but no character: no UTF-8 text, file or
# terminal, can hold it. The reader makes each one U+FFFD, as a UTF-8 decoder does with a bad byte.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _no_lone_surrogates(value):
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_no_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_no_lone_surrogates(k): _no_lone_surrogates(v) for k, v in value.items()}
    return value


def loads(text: str):
    """``json.loads`` for the files this project reads: every lone surrogate becomes U+FFFD.
    Raises ValueError (JSONDecodeError among them) or RecursionError (nested too deep)."""
    obj = json.loads(text)
    return _no_lone_surrogates(obj) if _SURROGATE_ESCAPE.search(text) else obj


def read_file(path: str | os.PathLike) -> RunFile:
    """Every readable run and record of one file, and one line per problem found.

    A bad line does not hide the good ones around it: the caller reports the problems and
    still uses what could be read. A record of an older schema comes back as one of today's
    (harness.core.records.migrate); the header keeps the schema it was written with. A lone surrogate in a string (valid JSON) is read as
    U+FFFD, and the record kept.
    """
    path = str(path)
    runs: dict[str, Run] = {}
    errors: list[str] = []
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        return RunFile(path, [], [f"{path}: cannot read: {exc.strerror or exc}"])
    if not raw.strip():
        return RunFile(path, [], [f"{path}: empty run file (no header)"])
    lines = raw.split(b"\n")
    ends_clean = raw.endswith(b"\n")
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        last = lineno == len(lines) and not ends_clean
        where = f"{path}:{lineno}"
        try:
            obj = loads(line.decode("utf-8"))
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            why = "truncated last line (the run was cut off)" if last else f"not valid JSON ({exc.__class__.__name__})"
            errors.append(f"{where}: {why}")
            continue
        if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
            errors.append(f"{where}: not a run-file line (expected an object with kind header/check/end)")
            continue
        kind, run_id = obj["kind"], obj.get("run")
        if not isinstance(run_id, str):
            errors.append(f"{where}: line has no run id")
            continue
        if kind == "header":
            if not records.readable(obj.get("schema")):
                errors.append(f"{where}: schema version {obj.get('schema')!r}, this reader understands 1 to {SCHEMA}")
                continue
            if not isinstance(obj.get("facts"), dict):
                errors.append(f"{where}: header has no facts")
                continue
            runs[run_id] = Run(run_id, obj, path)
            continue
        run = runs.get(run_id)
        if run is None:
            errors.append(f"{where}: {kind} line for run {run_id!r} with no readable header before it")
            continue
        if kind == "end":
            run.end = obj
            continue
        problem = records.validate(obj)
        if problem:
            errors.append(f"{where}: {problem}")
            continue
        run.records.append(records.migrate(obj, run.header["schema"]))
    return RunFile(path, list(runs.values()), errors)


def find_run_files(paths: list[str]) -> tuple[list[str], list[str]]:
    """Expand directories to their ``*.jsonl`` files; return (files, problems)."""
    files, problems = [], []
    for p in paths:
        pp = Path(p)
        if pp.is_dir():
            found = sorted(str(f) for f in pp.glob("*.jsonl"))
            if not found:
                problems.append(f"{p}: no run files (*.jsonl) in this directory")
            files.extend(found)
        elif pp.exists():
            files.append(str(pp))
        else:
            problems.append(f"{p}: no such file or directory")
    return files, problems
