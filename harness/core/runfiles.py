"""Run files: writing them as a run goes, and reading every run and record back.

A run file (``reports/runs/<env-id>.jsonl``) is JSON lines: a run header, one record per
check, an end line (the record contract: harness.core.records). It may hold several runs of
the same environment, one after another or even interleaved (two sessions at once): every
line carries its run id, and each run starts with its own header line.

Writing. Only the pytest controller writes (harness.plugin.hooks); workers send their data
on the test report. Each line is written with a single ``os.write`` on an ``O_APPEND``
descriptor, so a run killed at any moment leaves complete lines behind (at worst a last
line cut short, which the reader reports and skips) and every record before it.
``write_files`` and ``write_atomic`` replace whole files (a baseline, a comparison, a
report) all at once.

Reading. ``read_file`` groups a file's lines by run id into ``Run``s, reads an older
schema's record as today's (harness.core.records.migrate), and reports a bad line without
hiding the good ones around it. ``loads`` is the JSON reader for the files this project
reads (a lone surrogate becomes U+FFFD).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import uuid
from pathlib import Path

from harness.core import records

KINDS = ("header", "check", "end")


# --------------------------------------------------------------------------- the lines

def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def encode_line(obj: dict) -> str:
    """One run-file line: JSON (no NaN: metrics went through json_safe) and its newline.
    A lone surrogate (an exception message holding an undecodable file name, say) cannot be
    UTF-8: it is written as U+FFFD, as the reader reads one."""
    text = json.dumps(obj, ensure_ascii=False, default=str, allow_nan=False)
    return without_lone_surrogates(text) + "\n"


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
    return {"kind": "header", "schema": records.SCHEMA, "run": run_id, "env_id": env_id, "started": now_iso(),
            "facts": facts, "judges": dict(records.JUDGES), **extra}


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


def without_lone_surrogates(value):
    """``value`` (a string, or lists and dicts of them) with every lone surrogate made U+FFFD:
    what the reader does on reading, and the writer (encode_line) before writing."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [without_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {without_lone_surrogates(k): without_lone_surrogates(v) for k, v in value.items()}
    return value


def loads(text: str):
    """``json.loads`` for the files this project reads: every lone surrogate becomes U+FFFD.
    Raises ValueError (JSONDecodeError among them) or RecursionError (nested too deep)."""
    obj = json.loads(text)
    return without_lone_surrogates(obj) if _SURROGATE_ESCAPE.search(text) else obj


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
                errors.append(f"{where}: schema version {obj.get('schema')!r}, "
                              f"this reader understands 1 to {records.SCHEMA}")
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
