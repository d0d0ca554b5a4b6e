"""Run files: writing them as a run goes, and reading every run and record back.

A run file (``reports/runs/<env-id>.jsonl``) is JSON lines: a run header, one record per
check, an end line (the record contract: harness.core.records). It may hold several runs of
the same environment, one after another or even interleaved (two sessions at once): every
line carries its run id, and each run starts with its own header line.

Writing. Only the pytest controller writes (harness.plugin.hooks); workers send their data
on the test report. Each line is written with a single ``os.write`` on an ``O_APPEND``
descriptor, so a run killed at any moment leaves complete lines behind (at worst a last
line cut short, which the reader reports and skips) and every record before it. A write
that fails part-way (a full disk) is undone, the file cut back to its last complete line,
and raises OSError for the caller to say; a ``Writer`` that finds a file ending mid-line
(a run killed while writing) starts on a fresh line, so its own header and records stay
readable. ``write_files`` and ``write_atomic`` replace whole files (a baseline, a
comparison, a report) all at once. ``probe_writable`` says before a run why a place cannot
take its results; a FIFO, which would block the run, is refused there.

Reading. ``find_run_files`` expands directories to their run files and says what each
other input is when it is none (missing, a FIFO or device, a symbolic link loop, a directory
that cannot be read). ``read_file`` reads only a regular file, groups its lines by run id into
``Run``s, reads an older schema's record as today's (harness.core.records.migrate), and
reports a bad line, or a header repeated for a run already begun, without hiding the good
lines around it. ``loads`` is the JSON reader for the files this project reads (a lone
surrogate becomes U+FFFD). A file is read a line at a time, and a gzip file (``.gz``) as well.

Keeping. ``retire`` moves the runs the report no longer shows anything of (chosen by
harness.report.matrix.superseded) out of a run file into ``superseded/<name>.gz`` beside it,
at the end of each run (harness.plugin.hooks), so that a file appended to before every
upgrade stays about one run of each suite long, and nothing a run wrote is lost. A fragment
of a line whose write was cut off, once a later run has written after it (``cut_short``), goes
to the same archive: it stays in the file only until the next run of it ends, so that the
report does not name it for ever, and nothing but such a fragment moves without its run.
"""
from __future__ import annotations

import codecs
import dataclasses
import datetime as _dt
import errno
import fcntl
import gzip
import json
import os
import re
import stat
import sys
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
    """Appends lines to a run file; each line is one write, flushed to the OS at once.

    A line either lands whole or not at all, as far as this process can see to it: a write
    that fails part-way (ENOSPC, EIO) cuts the file back to the size it had before, then
    raises the OSError. Where it cannot be cut back (a device, or another session appended
    meanwhile), the next line this writer writes starts on a fresh line. A file that already
    ends mid-line (an earlier run killed while writing) gets a newline before the first line,
    so that the reader, which skips the fragment, reads this run's header and records whole.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fd: int | None = None
        self._torn = False   # a failed write left part of a line behind

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = _open_shared(self.path)
            try:
                if _ends_mid_line(self.path, fd):
                    self._append(fd, b"\n")
            except OSError:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def write(self, obj: dict) -> None:
        data = encode_line(obj).encode("utf-8")
        fd = self._open()
        if self._torn:
            data = b"\n" + data
        self._append(fd, data)
        self._torn = False

    def _append(self, fd: int, data: bytes) -> None:
        """``data`` at the end of the file, or, when a write fails, nothing: what was written
        of it is cut off again where that is safe, and the OSError goes to the caller."""
        try:
            before = os.fstat(fd)
        except OSError:
            before = None
        view = memoryview(data)
        try:
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError:
            if not _cut_back(self.path, fd, before, data):
                self._torn = True
            raise

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def _open_shared(path: Path) -> int:
    """``path`` opened for appending, holding a shared lock (``flock``) until it is closed:
    while any writer holds one, ``retire`` leaves the file alone. A file that ``retire``
    replaced between this open and the lock is opened again (the lock is on the file that
    was opened; lines appended to the replaced one would be lost). Where locks are not
    offered (a device, some network filesystems) the file is written without one."""
    while True:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
        except OSError:
            return fd
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                return fd
        except FileNotFoundError:   # replaced, or removed by the user: open the path anew
            pass
        except OSError:
            return fd
        os.close(fd)


def _ends_mid_line(path: Path, fd: int) -> bool:
    """Whether the regular file open on ``fd`` ends with a byte other than a newline (its
    last line was cut short). A device or a file this process cannot read is taken as
    ending cleanly: there is nothing to read back."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return False
        rfd = os.open(path, os.O_RDONLY)
        try:
            return os.pread(rfd, 1, st.st_size - 1) != b"\n"
        finally:
            os.close(rfd)
    except OSError:
        return False


def _cut_back(path: Path, fd: int, before: os.stat_result | None, data: bytes) -> bool:
    """After a write of ``data`` failed: cut the file back to its size ``before`` it, when what
    it grew by since is a beginning of ``data`` (this write's, not another session's lines,
    whatever a failing write reported having written). True when no part of ``data`` is
    left in the file; False where that cannot be known or done (a device, a file changed)."""
    if before is None or not stat.S_ISREG(before.st_mode):
        return False
    try:
        grown = os.fstat(fd).st_size - before.st_size
        if grown == 0:
            return True
        if not 0 < grown <= len(data):
            return False
        rfd = os.open(path, os.O_RDONLY)
        try:
            if os.pread(rfd, grown, before.st_size) != data[:grown]:
                return False
        finally:
            os.close(rfd)
        os.ftruncate(fd, before.st_size)
    except OSError:
        return False
    return True


_KINDS_OF_FILE = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                  (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def kind_of_file(mode: int) -> str:
    """What a file that is not a regular file is, in words ("a FIFO")."""
    return next((words for test, words in _KINDS_OF_FILE if test(mode)), "not a regular file")


def os_error_words(exc: OSError) -> str:
    """An OSError's cause in a few words; a symbolic link loop is said as such (the system's
    words, "Too many levels of symbolic links", do not name it)."""
    if exc.errno == errno.ELOOP:
        return "symbolic link loop"
    return str(exc.strerror or exc)


def probe_writable(path: str | os.PathLike, directory: bool = False, replace: bool = False) -> str | None:
    """Why ``path`` (a file; with ``directory``, a directory to write files in) cannot be
    written, in a few words, or None when it can. Asked before a run, so that a place
    that cannot take the results is said at the start, not after the run.

    Leaves nothing behind: an existing file is opened for appending and closed; in an
    existing directory a temporary file is made and removed (a run file is never created
    empty); a directory still to be made (the writers make it) needs its nearest existing
    parent to be a directory this process may write in.

    A file to append to (a run file) may be a regular file or a character device
    (``/dev/null``); a FIFO or socket is refused, as opening one blocks until a reader comes.
    A file to ``replace`` (a baseline, a comparison: written beside and renamed over) must
    be a regular file: the rename would put a file where the device was.
    """
    import tempfile
    path = Path(path)
    folder = path if directory else path.parent
    try:
        try:
            st = os.stat(path)   # stat never blocks, not even on a FIFO
        except (FileNotFoundError, NotADirectoryError):   # absent: the folder's checks below say why
            st = None
        if st is not None and not directory:
            if stat.S_ISDIR(st.st_mode):
                return "it is a directory"
            if not (stat.S_ISREG(st.st_mode) or (stat.S_ISCHR(st.st_mode) and not replace)):
                return f"not a regular file ({kind_of_file(st.st_mode)})"
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
        return os_error_words(exc)
    return None


HEAD_BYTES = 1 << 16   # enough of a file to tell what it holds


def held_otherwise(path: str | os.PathLike, ours, words: str) -> str | None:
    """Why the existing file at ``path`` must not take what this project writes there, in a
    few words, or None when it may: absent, empty, not a regular file (``probe_writable``
    speaks of those), unreadable (the write will say why), or a file ``ours`` recognises from
    its first bytes (a run file, an earlier comparison, a kernel table). Asked before a run
    that appends to or replaces a file the user named, so that a path mistyped as
    ``README.md`` loses nothing and mixes nothing into it."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    if not head.strip() or ours(head):
        return None
    first = next((line for line in head.splitlines() if line.strip()), b"")
    return f"it holds something other than {words} (it begins {quoted(first.decode('utf-8', 'replace'), 50)})"


def looks_like_run_file(head: bytes) -> bool:
    """Whether a file's first bytes are a run file's: its first line is a run-file line, or
    begins as this project's writer begins one (a line cut off while being written, its
    file appended to since, or longer than ``head``)."""
    start = len(head) - len(head.lstrip())
    end = head.find(b"\n", start)
    line = head[start:] if end == -1 else head[start:end]
    return line.startswith(b'{"kind": "') or _parsed(line, False)[1] is None


def run_file_problem(path: str | os.PathLike, replace: bool = False) -> str | None:
    """Why a run file named by the user (``--run-file``, appended to; ``--save-baseline``,
    replaced whole: ``replace``) cannot be ``path``, or None: a compressed name (a run is written as
    plain lines, which a ``.gz`` reader cannot read back), or a file that holds something
    else (appending would mix a run into it; replacing would lose it)."""
    if str(path).endswith(".gz"):
        return ("its name ends in .gz, but a run is written as plain JSON lines (only the archive of superseded "
                "runs is compressed), which could not be read back; give a name ending in .jsonl")
    why = held_otherwise(path, looks_like_run_file, "run records")
    if why:
        loses = "replacing it would lose what it holds" if replace else "appending this run would mix its lines into it"
        return f"{why}; {loses}; give a new path or a run file (*.jsonl)"
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
        """Whether the run reached every check it selected: it wrote its end line, that line
        does not say pytest was interrupted (exit status 2: Ctrl-C, or a time limit's SIGINT),
        and, where the end line counts them, every selected test ended. Pytest stopped by ``-x``
        or ``--maxfail`` ends well with exit status 1, the checks it had not reached missing all
        the same: only the counts tell (an end line without them, from an older run file, is
        taken at its word)."""
        if self.end is None or self.end.get("exitstatus") == INTERRUPTED:
            return False
        reached, selected = self.end.get("reached"), self.end.get("selected")
        counted = all(isinstance(n, int) and not isinstance(n, bool) for n in (reached, selected))
        return not (counted and reached < selected)


# pytest's ExitCode.INTERRUPTED, as the end line records it
INTERRUPTED = 2


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


def quoted(value, limit: int = 60) -> str:
    """A value from a file quoted in a problem line, cut to ``limit`` characters: a run id or a
    schema can be anything, a megabyte included, and the line must stay one readable line."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def read_file(path: str | os.PathLike, slim: bool = False) -> RunFile:
    """Every readable run and record of one file, and one line per problem found.

    A bad line does not hide the good ones around it: the caller reports the problems and
    still uses what could be read. A record of an older schema comes back as one of today's
    (harness.core.records.migrate); the header keeps the schema it was written with. A lone
    surrogate in a string (valid JSON) is read as U+FFFD, and the record kept.

    A header repeated for a run already begun (a file spliced by hand, or two runs given one
    id) is reported and ignored: the run keeps its first header and every record, before the
    repeat and after it. Only a regular file is read: a FIFO would block the reader, a device
    never end, so anything else is one problem line.

    ``slim``: each record keeps only what tells which check, suite, target and workload it
    is (``retire`` reads every run of a file that may be a gigabyte old, to choose).
    """
    path = str(path)
    runs: dict[str, Run] = {}
    first_header: dict[str, int] = {}   # run id -> the line of its header
    errors: list[str] = []
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return RunFile(path, [], [f"{path}: not a regular file ({kind_of_file(st.st_mode)}); give a run file"])
        fh = gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    except OSError as exc:
        return RunFile(path, [], [f"{path}: cannot read: {os_error_words(exc)}"])
    seen_any = False
    archived = path.endswith(".gz")
    held: tuple[str, bytes] | None = None   # a bad line that a fragment is if a line follows it
    with fh:
        for lineno, line, last, problem in _lines(fh):
            if problem:
                errors.append(f"{path}:{lineno}: {problem}")
                break
            if not line.strip():
                continue
            if held is not None:   # a line follows it: a fragment, when it is the start of one cut short
                errors.append(f"{held[0]}: {_parsed(held[1], False, archived, fragment=True)[1]}")
                held = None
            seen_any = True
            where = f"{path}:{lineno}"
            # in an archive, a fragment is one retire moved there (a later line followed it in its run file)
            obj, why = _parsed(line, last, archived, fragment=archived)
            if why and not last and why.startswith("not valid JSON"):
                held = (where, line)
                continue
            if why:
                errors.append(f"{where}: {why}")
                continue
            _take(obj, path, lineno, runs, first_header, errors, slim)
    if held is not None:   # the file's last line: corrupt, whatever it begins as
        errors.append(f"{held[0]}: {_parsed(held[1], False, archived, fragment=archived)[1]}")
    if not seen_any and not errors:
        return RunFile(path, [], [f"{path}: empty run file (no header)"])
    return RunFile(path, list(runs.values()), errors)


def _lines(fh):
    """``(lineno, line, last, problem)`` for each line of an open run file, read one at a time
    (a history of many runs is hundreds of megabytes; it is never held whole). ``last``: the
    line is the file's last and has no newline (a run cut off while writing it). ``problem``:
    the file could not be read on from there (a compressed file cut short); nothing follows."""
    lineno = 0
    try:
        for line in fh:
            lineno += 1
            ends = line.endswith(b"\n")
            yield lineno, line[:-1] if ends else line, not ends, None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:   # zlib.error is not raised by gzip's reader
        yield lineno + 1, b"", True, f"cannot read on: {os_error_words(exc) if isinstance(exc, OSError) and exc.errno else 'compressed data cut short or damaged'}"


FRAGMENT = ("a fragment of a line whose write was cut off (a run killed while writing it; the lines after it "
            "are whole)")


def _parsed(line: bytes, last: bool, archived: bool = False, fragment: bool = False) -> tuple[dict | None, str | None]:
    """One line's object, or why it is none. With ``fragment`` (the caller saw a line after it), a
    line that is the beginning of a run-file line cut short (``cut_short``) is the fragment a
    killed run left, which a later run's Writer put a newline after: said as that, with what
    removes it (``archived``: the line is in a ``retire`` archive, where it is kept as it was
    written), not as a corrupt line."""
    try:
        obj = loads(line.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        if last:
            return None, "truncated last line (the run was cut off)"
        if fragment and cut_short(line):
            return None, (f"{FRAGMENT}, kept here as it was written" if archived else
                          f"{FRAGMENT}: harmless; the next run that appends to this file moves it to {SUPERSEDED}/ "
                          "when it ends, or delete this line")
        return None, f"not valid JSON ({exc.__class__.__name__})"
    if not isinstance(obj, dict) or obj.get("kind") not in KINDS:
        return None, "not a run-file line (expected an object with kind header/check/end)"
    if not isinstance(obj.get("run"), str):
        return None, "line has no run id"
    return obj, None


LINE_START = '{"kind": "'
_CUT_UNICODE = re.compile(r"(\\+)u[0-9a-fA-F]{0,3}$")   # a \uXXXX escape cut before its fourth digit


def cut_short(line: bytes) -> bool:
    """Whether ``line`` is what a write cut off leaves of a run-file line: the beginning of one
    JSON object, cut before its end (mid-string, mid-number, even mid-character), not a whole
    value and not anything that no more bytes could make valid. A corrupt line (a stray byte
    or character, garbage, half of one line joined to another) is not: that stays bad input.
    Decided by completing the cut: closing an open string, finishing a cut literal or number
    and a dangling key or value, then the open objects and arrays, and parsing the result."""
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(line, final=False)
    except UnicodeDecodeError:
        return False
    if not (text.startswith(LINE_START) or LINE_START.startswith(text)):
        return False   # every line this project writes begins so (encode_line of a header, record, end)
    stack, in_string, escaped = [], False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch or not stack:
                return False   # a closer that does not match, or the object ended before the line did
    if not stack:
        return False
    closers = "".join(reversed(stack))
    if in_string:
        cut = _CUT_UNICODE.search(text)
        if escaped:                                   # cut right after a backslash
            text = text[:-1]
        elif cut and len(cut.group(1)) % 2:           # the backslash before the u is not itself escaped
            text = text[:cut.start() + len(cut.group(1)) - 1]
        heads = [text + '"']
    else:
        heads = [text, text + "0"] + [text + word[n:] for word in ("true", "false", "null")
                                      for n in range(1, len(word)) if text.endswith(word[:n])]
    for head in heads:
        for fill in ("", "null", ": null", '"": null'):
            try:
                json.loads(head + fill + closers)
                return True
            except (ValueError, RecursionError):
                pass
    return False


def _take(obj: dict, path: str, lineno: int, runs: dict, first_header: dict, errors: list, slim: bool = False) -> None:
    """One readable line into ``runs`` (a header, a record, an end line), or a problem into ``errors``."""
    kind, run_id, where = obj["kind"], obj["run"], f"{path}:{lineno}"
    if kind == "header":
        if run_id in runs:
            errors.append(f"{where}: repeated header for run {quoted(run_id)} (its first at line "
                          f"{first_header[run_id]}): ignored")
            return
        if not records.readable(obj.get("schema")):
            errors.append(f"{where}: schema version {quoted(obj.get('schema'))}, "
                          f"this reader understands 1 to {records.SCHEMA}")
            return
        if not isinstance(obj.get("facts"), dict):
            errors.append(f"{where}: header has no facts")
            return
        obj, problems = records.check_header(obj)   # a field of another type: left out, or the run skipped
        errors.extend(f"{where}: {p}" for p in problems)
        if obj is None:
            return
        runs[run_id] = Run(run_id, obj, path)
        first_header[run_id] = lineno
        return
    run = runs.get(run_id)
    if run is None:
        errors.append(f"{where}: {kind} line for run {quoted(run_id)} with no readable header before it")
        return
    if kind == "end":
        run.end = obj
        return
    problem = records.validate(obj)
    if problem:
        errors.append(f"{where}: {problem}")
        return
    if slim:
        workload = records.workload_of(obj)
        run.records.append({"check": sys.intern(obj["check"]), "suite": sys.intern(obj["suite"]),
                            "target": obj.get("target"), "metrics": {"workload": workload} if workload else {}})
        return
    run.records.append(records.migrate(obj, run.header["schema"]))


RUN_FILE_SUFFIXES = (".jsonl", ".jsonl.gz")   # a run file, and an archive of superseded runs (``retire``)


def find_run_files(paths: list[str]) -> tuple[list[str], list[str]]:
    """Expand directories to their ``*.jsonl`` and ``*.jsonl.gz`` files (not the hidden ones,
    not in the directories below: ``reports/runs`` is not its ``superseded`` archives); return (files,
    problems). Each input is looked at with ``os.stat``, which never blocks, so that a FIFO is
    said (one problem line) rather than read forever; a directory that cannot be listed or a
    symbolic link loop is said as what it is, not as "no run files" or "no such file". A file
    named twice (by name and through its directory, or by two spellings) is read once: its
    runs would otherwise count twice in the report's "from N run(s) in M file(s)"."""
    files, problems = [], []
    for p in paths:
        pp = Path(p)
        try:
            st = os.stat(pp)
        except (FileNotFoundError, NotADirectoryError):
            problems.append(f"{p}: no such file or directory")
            continue
        except OSError as exc:
            problems.append(f"{p}: {os_error_words(exc)}")
            continue
        if stat.S_ISDIR(st.st_mode):
            try:
                with os.scandir(pp) as entries:
                    names = [e.name for e in entries]
            except OSError as exc:
                problems.append(f"cannot read directory {p}: {os_error_words(exc)}")
                continue
            found = sorted(str(pp / n) for n in names if n.endswith(RUN_FILE_SUFFIXES) and not n.startswith("."))
            if not found:
                problems.append(f"{p}: no run files (*.jsonl, *.jsonl.gz) in this directory")
            files.extend(found)
        elif stat.S_ISREG(st.st_mode):
            files.append(str(pp))
        else:
            problems.append(f"{p}: not a regular file ({kind_of_file(st.st_mode)}); give a run file")
    seen: set[str] = set()
    once = []
    for f in files:
        key = os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            once.append(f)
    return once, problems


# --------------------------------------------------------------------------- a history kept bounded

# Every run appends to its environment's file, and a run of every suite writes some 17 MB on
# one target: after a few dozen runs the report would read hundreds of megabytes (and hold
# them parsed, a gigabyte) to show what the newest runs alone say. ``retire`` moves out of
# the file the runs the merge no longer reads, into a compressed file beside it that keeps
# them, so that nothing a run wrote is ever lost.
SUPERSEDED = "superseded"


def archive_of(path: str | os.PathLike) -> Path:
    """Where ``retire`` moves a run file's superseded runs: ``superseded/<name>.gz`` beside it,
    a gzip file of run-file lines (one member per retirement) that ``read_file`` reads."""
    path = Path(path)
    return path.parent / SUPERSEDED / (path.name + ".gz")


@dataclasses.dataclass
class Retired:
    """What ``retire`` moved: ``runs`` runs, ``records`` check records of them, out of a file
    of ``size_before`` bytes that now has ``size_after``, into ``archive``."""
    path: Path
    archive: Path
    runs: int
    records: int
    size_before: int
    size_after: int


def retire(path: str | os.PathLike, choose) -> Retired | None:
    """Move the runs ``choose(runs)`` names (a set of run ids, from every run ``read_file``
    reads in ``path``) out of the run file into ``archive_of(path)``, each of their lines as
    it was; every other line, a problem line included, stays where it was, in its order, but for
    a fragment a cut-off write left (``cut_short``, a whole line: a later run wrote after it),
    which goes to the archive with them: left in the file, every report would name it for ever.

    Only while no writer has the file open: each ``Writer`` holds a shared lock, and this
    takes the exclusive one without waiting, so a run still writing (another session, a run
    of another ``./compat suites`` phase) is never cut off; a file locked or changing, a
    device, or a system without locks leaves the file as it is (None, as when nothing is
    chosen): the next run tries again. The new file is written beside the old and put in its
    place by a rename, after the runs are in the archive: a crash at any point leaves every
    line in the run file, the archive, or both. An OSError (a full disk) leaves the run file
    as it was and goes to the caller. A run file reached through a symbolic link is rewritten
    where it lies (its archive beside it there), the link left a link."""
    path = Path(os.path.realpath(path))
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.samestat(st, os.stat(path)):   # replaced before the lock: the next run
                return None
        except OSError:   # a writer holds it (BlockingIOError), or no locks are offered here
            return None
        rf = read_file(path, slim=True)
        gone = set(choose(rf.runs))
        if not gone and not any(FRAGMENT in error for error in rf.errors):
            return None
        archive = archive_of(path)
        archive.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.retire{os.getpid()}"
        part = archive.parent / f".{archive.name}.part{os.getpid()}"
        try:
            with open(path, "rb") as src, open(tmp, "wb") as keep, open(part, "wb") as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as out:
                held = None   # a line that is a fragment if a line follows it
                for line in src:
                    if held is not None:
                        (out if line.strip() else keep).write(held)   # followed: the fragment goes with the runs
                        held = None
                    if _run_of(line) in gone:
                        out.write(line if line.endswith(b"\n") else line + b"\n")
                    elif line.endswith(b"\n") and _fragment(line[:-1]):
                        held = line
                    else:
                        keep.write(line)
                if held is not None:   # the file's last line: not a fragment a later run wrote after
                    keep.write(held)
                keep.flush()
                os.fsync(keep.fileno())
            if os.fstat(fd).st_size != st.st_size:   # appended to without the lock: leave it be
                return None
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
            _append_whole(archive, part.read_bytes())
            os.replace(tmp, path)
        finally:
            for leftover in (tmp, part):
                try:
                    leftover.unlink(missing_ok=True)
                except OSError:
                    pass
        moved = [run for run in rf.runs if run.run_id in gone]
        if not moved:   # only fragments moved: no run to say was retired (the report stops naming them)
            return None
        return Retired(path, archive, len(moved), sum(len(run.records) for run in moved),
                       st.st_size, os.stat(path).st_size)
    finally:
        os.close(fd)


def _fragment(line: bytes) -> bool:
    """A line (without its newline) that does not parse and is a cut-off write's fragment."""
    try:
        loads(line.decode("utf-8"))
        return False
    except (ValueError, RecursionError):
        return bool(line.strip()) and cut_short(line)


def _run_of(line: bytes) -> str | None:
    """The run id of a run-file line, None for a line that has none (it stays in the file)."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    run = obj.get("run") if isinstance(obj, dict) else None
    return run if isinstance(run, str) else None


def _append_whole(path: Path, data: bytes) -> None:
    """``data`` at the end of ``path``, on disk, or, when that fails, the file cut back as the
    Writer cuts back a line written in part (``_cut_back``) and the OSError raised: a
    compressed member written in part would make the archive unreadable from there on."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        before = os.fstat(fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            _cut_back(path, fd, before, data)
            raise
    finally:
        os.close(fd)
