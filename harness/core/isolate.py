"""Run risky checks in a persistent child process: a crash or a hang costs one check.

An op that segfaults or aborts inside a device kernel (it happens on MPS) would end the
pytest process that ran it, and a hang in native code cannot be interrupted from Python.
So such checks run in a child: ``Sandbox.call("module:function", *args)`` sends the call
over a socket and waits. If the child dies, the call returns a ``crash`` outcome naming
the signal or exit code; if it takes longer than the timeout, the child is killed and the
call returns ``timeout``. The next call starts a fresh child. Between calls the child
stays up, so imports (torch, op_db) are paid once, not per check.

The child inherits the environment, so ``PYTORCH_ENABLE_MPS_FALLBACK`` as decided by the
suite holds there too. It is started fresh (not forked): forking a process that has
initialised Metal or CUDA is unsafe.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the project root: harness/core/isolate.py
THREADS_VAR = "MPS_COMPAT_SANDBOX_THREADS"
# Modules every child imports at start, comma-separated: a test plugin that changes what
# the checks compute (a stand-in target, a wrong kernel) must reach the children too.
PRELOAD_VAR = "MPS_COMPAT_SANDBOX_PRELOAD"


def threads_per_worker(workers: int, cores: int | None = None) -> int | None:
    """Intra-op threads for each of ``workers`` sandbox children sharing the machine.

    Two pytest-xdist workers whose children each spin up every core's worth of OpenMP
    threads oversubscribe the CPU (measured on 2 cores: -n 2 slower than -n 0). None for a
    single worker: torch's default then.
    """
    if workers <= 1:
        return None
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores // workers)


@dataclasses.dataclass
class Outcome:
    kind: str                 # "ok" | "raised" | "crash" | "timeout"
    value: object = None      # the function's return value when kind == "ok"
    detail: str = ""          # one line for everything else
    seconds: float = 0.0


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the child process stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the child process was killed by {name}"
    return f"the child process exited with status {code}"


class Sandbox:
    def __init__(self, timeout: float = 120.0, preload: tuple[str, ...] = (), threads: int | None = None):
        self.timeout = timeout
        self.preload = preload          # modules the child imports at start
        self.threads = threads          # torch intra-op threads of the child (None: torch's default)
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self.starts = 0

    def _start(self) -> None:
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        if self.threads:
            env[THREADS_VAR] = str(self.threads)
        # Started as a script file, not with -m: OpInfo's sample iterators call inspect.stack()
        # for every op, and a "<frozen runpy>" frame on the stack sends inspect.getmodule
        # through all of sys.modules each time (measured: 8x slower op checks).
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(child.fileno()), *self.preload],
            pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        child.close()
        self._conn = Connection(parent.detach())
        self.starts += 1

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        if self._proc is not None:
            self._proc.wait()
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        # The child keeps no state worth a clean exit, and tearing down an interpreter
        # with torch loaded takes seconds: end it at once.
        self._stop()

    def restart(self) -> None:
        """End the child now: the next call runs in a fresh process (a measurement repeated
        where nothing of the last one lingers: its caches, its allocator, its kernel choices)."""
        self._stop()

    def call(self, target: str, *args, timeout: float | None = None) -> Outcome:
        """Run ``module:function(*args)`` in the child; never raises for the child's faults."""
        limit = self.timeout if timeout is None else timeout
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            self._start()
        started = time.monotonic()
        try:
            self._conn.send((target, args))
            if not self._conn.poll(limit):
                self._stop()
                return Outcome("timeout", detail=f"no answer within {limit:g} s: the child was killed",
                               seconds=time.monotonic() - started)
            kind, payload = self._conn.recv()
        except (EOFError, OSError, ConnectionError):
            code = self._proc.wait() if self._proc else None
            self._stop()
            return Outcome("crash", detail=_describe_exit(code), seconds=time.monotonic() - started)
        seconds = time.monotonic() - started
        if kind == "ok":
            return Outcome("ok", value=payload, seconds=seconds)
        return Outcome("raised", detail=str(payload), seconds=seconds)


def _resolve(target: str):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def prepare_child(preload: list[str] = ()) -> None:
    """What every child process does first: the thread count it was given, and the modules
    it must import (``preload`` and ``PRELOAD_VAR``'s). A process a check starts on its own
    (the perf suite's cold starts) calls it too, so an injected fault reaches it as well."""
    if os.environ.get(THREADS_VAR):
        import torch
        torch.set_num_threads(int(os.environ[THREADS_VAR]))
    for module in [*preload, *filter(None, os.environ.get(PRELOAD_VAR, "").split(","))]:
        importlib.import_module(module)


def warm(what: str) -> None:
    """Pay one start-up cost in the child before the first check would (the plugin's warm-up,
    harness/plugin/hooks.py): ``"torch"`` imports a module, ``"module:function"`` calls the
    function and drops what it returns (``harness.ops.declarations:op_table``: OpInfo's op_db),
    ``"device:cuda"`` makes the device's first tensor (its context)."""
    kind, _, name = what.partition(":")
    if kind == "device":
        import torch
        torch.ones(1, device=name).sum().item()
    elif name:
        _resolve(what)()
    else:
        importlib.import_module(what)


def _child(fd: int, preload: list[str]) -> None:
    conn = Connection(fd)
    prepare_child(preload)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        target, args = msg
        try:
            conn.send(("ok", _resolve(target)(*args)))
        except Exception as exc:  # the function's own failure travels back as one line
            text = str(exc).strip().splitlines()
            conn.send(("raised", f"{type(exc).__name__}: {text[0] if text else ''}"))


if __name__ == "__main__":
    # Run as a file, this script's folder heads sys.path; the package is found through
    # PYTHONPATH instead, so harness modules are never importable under bare names.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    _child(int(sys.argv[1]), sys.argv[2:])
