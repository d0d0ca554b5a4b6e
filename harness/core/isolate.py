"""Run risky checks in a persistent child process: a crash or a hang costs one check.

An op that segfaults or aborts inside a device kernel (it happens on MPS) would end the
pytest process that ran it, and a hang in native code cannot be interrupted from Python.
So such checks run in a child: ``Sandbox.call("module:function", *args)`` sends the call
over a socket and waits. If the child dies, the call returns a ``crash`` outcome naming
the signal or exit code; if it takes longer than the timeout, the child is killed and the
call returns ``timeout``. The next call starts a fresh child. Between calls the child
stays up, so imports (torch, op_db) are paid once, not per check.

A call's limit counts the call alone. A child is started under a start-up limit of its own
(importing torch and OpInfo's op_db takes tens of seconds on a loaded machine) and says when
it is ready; the warm-up steps the plugin asked for (``warm``) are run again in every child
started after the first, before the next call's clock starts, so a crash or a hang does not
charge the restart to the check after it. A child that cannot start is a ``crash`` outcome
that says so, not a check that hung.

The child inherits the environment, so ``PYTORCH_ENABLE_MPS_FALLBACK`` as decided by the
suite holds there too. It is started fresh (not forked): forking a process that has
initialised Metal or CUDA is unsafe.
"""
from __future__ import annotations

import dataclasses
import gc
import importlib
import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path

from harness.core import errors

ROOT = Path(__file__).resolve().parents[2]   # the project root: harness/core/isolate.py
THREADS_VAR = "MPS_COMPAT_SANDBOX_THREADS"
# Modules every child imports at start, comma-separated: a test plugin that changes what
# the checks compute (a stand-in target, a wrong kernel) must reach the children too.
PRELOAD_VAR = "MPS_COMPAT_SANDBOX_PRELOAD"
# How long a child may take to start (its preloads, and the warm-up steps it replays) before
# it is given up: generous, because start-up is not what a check's limit is about.
STARTUP_TIMEOUT = 600.0
# Set where coverage.py measures every process (its subprocess support): a child ended then gets
# SIGTERM, which coverage catches to write its data, instead of SIGKILL, which loses it.
COVERAGE_VAR = "COVERAGE_PROCESS_START"
# The longest wait a call makes, and the largest --check-timeout (harness/plugin/options.py):
# one day. Connection.poll waits in poll(2) on Linux and macOS, which takes milliseconds as a
# C int (2**31 - 1 ms, about 24.8 days) and raises OverflowError beyond it; a check still
# running after a day is hung for every purpose of this suite.
MAX_TIMEOUT = 86400.0
WARM = "harness.core.isolate:warm"   # the call whose steps a fresh child replays


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


def _bounded(seconds: float) -> float:
    """A limit the platform can wait: at most MAX_TIMEOUT (NaN too), at least 0."""
    if not seconds <= MAX_TIMEOUT:
        return MAX_TIMEOUT
    return max(seconds, 0.0)


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
    def __init__(self, timeout: float = 120.0, preload: tuple[str, ...] = (), threads: int | None = None,
                 startup_timeout: float = STARTUP_TIMEOUT):
        self.timeout = timeout
        self.preload = preload          # modules the child imports at start
        self.threads = threads          # torch intra-op threads of the child (None: torch's default)
        self.startup_timeout = startup_timeout
        self._proc: subprocess.Popen | None = None
        self._conn: Connection | None = None
        self.starts = 0
        self.last_start_s = 0.0         # seconds the newest child took to be ready (start and replay)
        # The warm() steps asked for so far, each with its limit: a child started after the
        # first pays them again before its first call, as the first child did in the warm-up.
        self._warmed: dict[str, float] = {}

    def _start(self) -> Outcome | None:
        """Start a child and wait until it is ready (its preloads imported, the warm-up steps
        replayed), under the start-up limit rather than a call's. None when it is ready; else
        the ``crash`` outcome saying why it is not, with the child stopped."""
        parent, child = socket.socketpair()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        if self.threads:
            env[THREADS_VAR] = str(self.threads)
        # Started as a script file, not with -m: OpInfo's sample iterators call inspect.stack()
        # for every op, and a "<frozen runpy>" frame on the stack sends inspect.getmodule
        # through all of sys.modules each time (measured: 8x slower op checks).
        begun = time.monotonic()
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(child.fileno()), *self.preload],
            pass_fds=(child.fileno(),), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        child.close()
        self._conn = Connection(parent.detach())
        self.starts += 1
        # A check limit above the start-up limit is the user's word that this machine is slow.
        limit = _bounded(max(self.startup_timeout, self.timeout))
        kind, payload = self._answer(limit)
        problem = None
        if kind == "timeout":
            problem = (f"the sandbox child did not start within {limit:g} s (importing torch and the preloaded "
                       f"modules): the machine is overloaded or an import hangs; run fewer workers (-n)")
        elif kind == "crash":
            problem = f"{_describe_exit(payload)} while starting, before the call"
        elif kind != "ready":
            problem = f"the sandbox child failed while starting: {payload}"
        if problem is None:
            problem = self._replay()
        self.last_start_s = time.monotonic() - begun
        if problem is None:
            return None
        self._stop()
        return Outcome("crash", detail=problem)

    def _replay(self) -> str | None:
        """Run the warm-up steps again in a fresh child; None when it lived through them, else
        why it did not. A step that raises now is left to the check, which meets the same failure."""
        for what, step_limit in self._warmed.items():
            limit = _bounded(max(self.startup_timeout, step_limit))
            kind, payload = self._ask(WARM, (what,), limit)
            if kind == "timeout":
                return f"the sandbox child did not start within {limit:g} s: its warm-up step {what!r} hung"
            if kind == "crash":
                return f"{_describe_exit(payload)} while starting (its warm-up step {what!r}), before the call"
        return None

    def _answer(self, limit: float) -> tuple[str, object]:
        """The child's next message within ``limit`` seconds: (its kind, its payload), else
        ("timeout", None) with the child killed, or ("crash", its exit code) if it died."""
        try:
            if not self._conn.poll(limit):
                self._stop()
                return "timeout", None
            return self._conn.recv()
        except (EOFError, OSError, ConnectionError):
            try:
                code = self._proc.wait(timeout=10) if self._proc else None
            except subprocess.TimeoutExpired:   # it closed its end but lives on: it stopped answering
                code = None
            self._stop()
            return "crash", code

    def _ask(self, target: str, args: tuple, limit: float) -> tuple[str, object]:
        """Send one call and wait for its answer (``_answer``)."""
        try:
            self._conn.send((target, args))
        except (OSError, ConnectionError):
            pass   # the child is gone: _answer finds its end of the socket closed and says how it ended
        return self._answer(limit)

    def _stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            if os.environ.get(COVERAGE_VAR):
                # measured by coverage.py (docs/controls.md): SIGTERM lets it write the child's data
                self._proc.terminate()
                try:
                    self._proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._proc.kill()
            else:
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
        where nothing of the last one lingers: its caches, its allocator, its kernel choices).
        The fresh child replays the warm-up steps before that call, outside its clock, as the
        first child paid them before the first check."""
        self._stop()

    def call(self, target: str, *args, timeout: float | None = None) -> Outcome:
        """Run ``module:function(*args)`` in the child; never raises for the child's faults.
        ``timeout`` (default the sandbox's) counts the call alone, not a child's start; a
        limit beyond MAX_TIMEOUT waits MAX_TIMEOUT (the platform's wait cannot take more)."""
        limit = _bounded(self.timeout if timeout is None else timeout)
        if self._proc is None or self._proc.poll() is not None:
            self._stop()
            failed = self._start()
            if failed is not None:
                return failed
        started = time.monotonic()
        kind, payload = self._ask(target, args, limit)
        seconds = time.monotonic() - started
        if kind == "timeout":
            return Outcome("timeout", detail=f"no answer within {limit:g} s: the child was killed", seconds=seconds)
        if kind == "crash":
            return Outcome("crash", detail=_describe_exit(payload), seconds=seconds)
        if kind == "ok":
            if target == WARM and args:
                self._warmed[args[0]] = max(limit, self._warmed.get(args[0], 0.0))
            return Outcome("ok", value=payload, seconds=seconds)
        return Outcome("raised", detail=str(payload), seconds=seconds)


def settle() -> None:
    """Take what the process holds for good (torch, OpInfo's op_db, a session's collected
    checks) out of the cyclic garbage collector's sweeps (``gc.freeze``): every full sweep
    otherwise walks those millions of objects again, for nothing, and the sweeps come often
    while checks allocate. Measured (gc.callbacks) on a parity run of 3 ops on 2 cores: the
    pytest process swept for 1.35 s without and 0.33 s with it (frozen after its start-up
    and after collection), its sandbox child 0.77 s and 0.53 s, of about 15 s of CPU.
    Objects created afterwards are swept as before, and a frozen object is still freed when
    nothing refers to it."""
    gc.freeze()


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
    try:
        prepare_child(preload)
    except Exception as exc:  # a preload that fails: said to the parent in one line, as a start that failed
        conn.send(("broken", errors.one_line(exc)))
        sys.exit(1)
    settle()
    conn.send(("ready", None))   # the parent's start-up limit ends here, and a call's begins
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        target, args = msg
        try:
            value = _resolve(target)(*args)
            if target == WARM:   # what a warm-up step loaded (op_db) is held for good
                settle()
            conn.send(("ok", value))
        except Exception as exc:  # the function's own failure travels back as one line
            conn.send(("raised", errors.one_line(exc)))


if __name__ == "__main__":
    # Run as a file, this script's folder heads sys.path; the package is found through
    # PYTHONPATH instead, so harness modules are never importable under bare names.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)
    _child(int(sys.argv[1]), sys.argv[2:])
