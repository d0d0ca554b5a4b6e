"""Reading run files: every readable run and record, and one line per problem found.

A run file (``reports/runs/<env-id>.jsonl``, written by harness/core/journal.py) may hold
several runs, even interleaved; ``read_file`` groups its lines by run id into ``Run``s,
reads an older schema's record as today's (harness.core.records.migrate), and reports a
bad line without hiding the good ones around it. ``loads`` is the JSON reader for the
files this project reads (a lone surrogate becomes U+FFFD).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

from harness.core import records

KINDS = ("header", "check", "end")


class JournalError(Exception):
    """A run file that cannot be read as a whole; the message is one line naming file and line."""


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
    what the reader does on reading, and the writer (journal.encode_line) before writing."""
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
