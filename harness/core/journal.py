"""Writing run files: a run header, one JSON line per check, a footer.

A run file (``reports/runs/<env-id>.jsonl``) may hold several runs of the same
environment, one after another or even interleaved (two sessions at once): every line
carries its run id, and each run starts with its own header line. Each line is written
with a single ``os.write`` on an ``O_APPEND`` descriptor, so a run killed at any moment
leaves complete lines behind (at worst a last line cut short, which the reader reports
and skips) and every record before it.

Only the pytest controller writes; workers send their data on the test report. A check's
id is harness/core/identity.py's, its record harness/core/outcomes.py's, and the reader
harness/core/runfiles.py. ``write_files`` and ``write_atomic`` replace whole files (a
baseline, a comparison, a report) all at once.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import uuid
from pathlib import Path

from harness.core import records, runfiles

SCHEMA = records.SCHEMA      # the record contract, its statuses and fields: harness/core/records.py
STATUSES = records.STATUSES


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:6]


def encode_line(obj: dict) -> str:
    """One run-file line: JSON (no NaN: metrics went through json_safe) and its newline.
    A lone surrogate (an exception message holding an undecodable file name, say) cannot be
    UTF-8: it is written as U+FFFD, as the reader reads one."""
    text = json.dumps(obj, ensure_ascii=False, default=str, allow_nan=False)
    return runfiles.without_lone_surrogates(text) + "\n"


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
