"""What the command-line tools (tools.report, tools.compare) share: how they fail and print.

- Bad input, an output that cannot be written, a usage error: one line on stderr, exit 2.
- An unexpected exception (a bug, or input no check foresaw) is no different: one line
  saying it is an internal error, exit 2, never a traceback and never the status a tool
  gives a finding (compare's 1 means regressions). ``MPS_COMPAT_TRACEBACK=1`` prints the
  traceback as well.
- A reader that left (``| head``, a closed pipe) is no error: the rest of the output is
  dropped, files are still written, the exit status is the one the tool would have given.
  The same holds for no stdout at all (``>&-``: Python then has ``sys.stdout = None``).
- A stream that cannot hold a character (an ASCII stdout under the C locale with UTF-8 mode
  off) gets that character as an escape (``\\u2192``); newlines stay newlines, so a table
  stays a table.
- A relative path the user typed means the directory they typed it in. ``./compat`` runs every
  tool from the project's root (``cd``), so it hands the caller's directory on as
  ``MPS_COMPAT_CWD``; ``from_caller`` and ``caller_args`` resolve against it (``./compat report
  good.jsonl --out site`` from elsewhere read the project's good.jsonl and wrote its site/).
"""
from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import traceback
from typing import Callable, TextIO

BAD = 2
TRACEBACK_ENV = "MPS_COMPAT_TRACEBACK"
CWD_ENV = "MPS_COMPAT_CWD"   # the directory ./compat was run from (it runs the tools from the project root)


def from_caller(path: str | None) -> str | None:
    """``path`` as the user meant it: a relative one joined to the directory ./compat was run from
    (``MPS_COMPAT_CWD``), where that is set; an absolute one, "" and None as they are."""
    caller = os.environ.get(CWD_ENV)
    if not path or not caller or os.path.isabs(path):
        return path
    return os.path.join(caller, path)


def caller_args(argv: list[str], options: tuple[str, ...]) -> list[str]:
    """``argv`` with the value of each of ``options`` (``--run-file PATH`` or ``--run-file=PATH``)
    resolved by ``from_caller``; every other argument as it is."""
    out, take = [], False
    for arg in argv:
        if take:
            out.append(from_caller(arg))
            take = False
        elif arg in options:
            out.append(arg)
            take = True
        elif arg.split("=", 1)[0] in options and "=" in arg:
            name, value = arg.split("=", 1)
            out.append(f"{name}={from_caller(value)}")
        else:
            out.append(arg)
    return out


def say(text: str, stream: TextIO | None = None) -> None:
    """Write ``text`` to stdout (or ``stream``) at once. A closed pipe drops it, and what
    follows, and so does a missing stream (stdout closed before the start: ``None``); a
    character the stream cannot encode is written as an escape, every other character,
    newlines included, as itself."""
    stream = stream or sys.stdout
    if stream is None:
        return
    try:
        try:
            stream.write(text)
        except UnicodeEncodeError:
            encoding = stream.encoding or "utf-8"
            stream.write(text.encode(encoding, "backslashreplace").decode(encoding))
        stream.flush()
    except BrokenPipeError:
        _to_devnull(stream)


def _to_devnull(stream: TextIO) -> None:
    """The reader is gone: send the stream to /dev/null, so that neither a later write nor
    the flush at exit fails (the recipe of Python's signal module documentation)."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _stderr_line(kind: str, message: str) -> None:
    """``kind: message`` as one line on stderr (none when stderr is closed). A control
    character from a file's contents (a NUL, an escape sequence, a newline) is spelt ``\\xNN``:
    it must neither act on the terminal nor break the one line in two."""
    if sys.stderr is not None:   # say(text, None) would mean stdout
        line = CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}", message)
        say(f"{kind}: {line}\n", sys.stderr)


def error(message: str) -> int:
    """One "error:" line on stderr (``_stderr_line``); the exit status for it."""
    _stderr_line("error", message)
    return BAD


def note(message: str) -> None:
    """One "note:" line on stderr, for what the user should know but is not wrong (runs of
    one environment id split into columns); no exit status."""
    _stderr_line("note", message)


def summary(doc: str) -> str:
    """A module docstring's first paragraph as one line: a tool's --help description (its
    first line alone cut a sentence that wraps in two)."""
    return " ".join(doc.strip().split("\n\n")[0].split())


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, exit 2, as bad input
        error(f"{message} (see --help)")
        sys.exit(BAD)

    def _print_message(self, message, file=None):  # --help into a closed pipe, too
        stream = file if file is not None else sys.stderr
        if message and stream is not None:
            say(message, stream)


def guarded(main: Callable[[list[str] | None], int]) -> Callable[[list[str] | None], int]:
    """``main`` with any unexpected exception as one line and exit 2."""
    @functools.wraps(main)
    def run(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except Exception as exc:  # noqa: BLE001 - the one place that turns a bug into one line
            if os.environ.get(TRACEBACK_ENV, "0") != "0":
                say(traceback.format_exc(), sys.stderr)
            first = (str(exc).strip().splitlines() or [""])[0][:300]
            return error(f"internal error: {type(exc).__name__}{': ' + first if first else ''} "
                         f"({TRACEBACK_ENV}=1 shows the traceback)")
    return run
