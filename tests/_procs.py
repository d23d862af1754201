"""Child processes in tests: every one a test starts is ended and waited for.

pytest runs with warnings as errors, so a child still running when its ``Process`` is
collected ("ResourceWarning: subprocess N is still running") or a pipe left open fails
whichever test happens to be running then, often another one. So a test never calls
``trio.lowlevel.open_process``, ``trio.run_process`` or ``subprocess.Popen`` itself:

- ``open_process`` (async) starts a child for the life of an ``async with`` block. On exit,
  also when the test failed or was cancelled (its ``fail_after`` expired), it asks the child
  to stop (``stop_signal``, SIGTERM unless told), waits ``grace`` seconds, kills it, waits
  again and closes its pipes, all shielded from the cancellation and bounded in time.
- ``open_logged`` (async) does the same for a child whose output (stdout and stderr, merged)
  a test reads as it comes: appended to a log file and kept as lines, so a test can wait for
  a line (``LoggedProcess.wait_for``) instead of sleeping, e.g. before it signals a
  ``kubesvc`` role (its SIGTERM handler is set once it logs that it runs).
  ``LoggedProcess.signal_and_wait`` gives the exit code and the seconds it took.
- ``Role`` is a ``kubesvc`` role a test stops and starts again (one process at a time, one
  log file for all of them, the same fixed ports): the chaos test's agent and server.
- ``run`` (sync) runs a command to its end with a timeout; ``subprocess.run`` kills and
  waits for the child on a timeout or any exception (pytest-timeout's signal included).
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import trio

ROOT = Path(__file__).resolve().parents[1]
"""The repository root: children run from here so ``python -m tests....`` finds the tests."""

_Target = int | IO[Any] | None


@asynccontextmanager
async def open_process(
    command: Sequence[str],
    *,
    stdin: _Target = subprocess.DEVNULL,
    stdout: _Target = None,
    stderr: _Target = None,
    cwd: Path | str = ROOT,
    env: Mapping[str, str] | None = None,
    stop_signal: int = signal.SIGTERM,
    grace: float = 10.0,
) -> AsyncIterator[trio.Process]:
    """Start ``command``; on leaving the block, end it and wait for it (see the module doc).

    The caller owns any file it passed as ``stdout``/``stderr``; pipes (``subprocess.PIPE``)
    belong to the process and are closed here. The child's exit code is ``returncode`` after
    the block (None never: the child has been reaped).
    """
    process = await trio.lowlevel.open_process(
        list(command), stdin=stdin, stdout=stdout, stderr=stderr, cwd=cwd, env=env
    )
    try:
        yield process
    finally:
        with trio.CancelScope(shield=True):
            await stop_process(process, stop_signal=stop_signal, grace=grace)


async def stop_process(
    process: trio.Process, *, stop_signal: int = signal.SIGTERM, grace: float = 10.0
) -> None:
    """Ask ``process`` to stop, kill it after ``grace`` s, reap it, close its pipes.

    Bounded (at most about twice ``grace``) and safe to call on a process that already ended.
    Callers in a cancelled scope shield it (``open_process`` does).
    """
    await _end_process(process, stop_signal=stop_signal, grace=grace)
    await _close_pipes(process)


async def _end_process(process: trio.Process, *, stop_signal: int, grace: float) -> None:
    """``stop_process`` without closing the pipes (a reader may still drain them)."""
    if process.returncode is None:
        try:
            process.send_signal(stop_signal)
        except ProcessLookupError:  # ended between the check and the signal
            pass
        with trio.move_on_after(grace):
            await process.wait()
    if process.returncode is None:
        process.kill()
        # SIGKILL cannot be ignored; the bound is for a child stuck in the kernel, which is
        # reported instead of hanging the run.
        with trio.move_on_after(grace):
            await process.wait()
    if process.returncode is None:
        await _close_pipes(process)
        raise RuntimeError(f"child {process.pid} ({process.args!r}) survived SIGKILL")


async def _close_pipes(process: trio.Process) -> None:
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            await pipe.aclose()


def run(
    command: Sequence[str], *, timeout: float = 120, cwd: Path | str = ROOT, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    """``subprocess.run`` with text output captured, no check, and always a timeout."""
    return subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
        **kwargs,
    )


def kubesvc_command(*args: str) -> list[str]:
    """The command line of ``kubesvc ARGS`` run by this interpreter."""
    return [sys.executable, "-m", "kubesvc", *args]


_KEPT_LINES = 20_000  # the lines a LoggedProcess keeps (the log file has them all)


class LoggedProcess:
    """A running child whose merged stdout and stderr are read as they come: appended to
    ``log_path`` and kept as lines (the last ``_KEPT_LINES``). Made by ``open_logged`` or
    ``Role``; ``aclose`` ends it."""

    def __init__(self, name: str, process: trio.Process, log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        self._lines: collections.deque[str] = collections.deque(maxlen=_KEPT_LINES)
        self._count = 0  # lines read in all (the deque may have dropped the first ones)
        self._changed = trio.Event()
        self._pumped = trio.Event()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def output(self) -> str:
        return "\n".join(self._lines)

    async def wait_for(self, pattern: str) -> re.Match[str]:
        """The first line (of those kept) matching the regular expression ``pattern``; waits
        for it (the caller bounds the wait). AssertionError, with the output, when the
        process's output ends without it."""
        compiled = re.compile(pattern)
        seen = 0  # in lines read in all
        while True:
            first = self._count - len(self._lines)
            for line in list(self._lines)[max(0, seen - first) :]:
                if found := compiled.search(line):
                    return found
            seen = self._count
            if self._pumped.is_set():
                raise AssertionError(
                    f"{self.name} exited ({self.process.poll()}) without logging {pattern!r}:\n"
                    + self.output()
                )
            await self._changed.wait()

    async def signal_and_wait(
        self,
        signum: int,
        *,
        within: float = 60.0,
    ) -> tuple[int | None, float]:
        """Send ``signum`` (if it still runs) and wait up to ``within`` s for the exit: (exit
        code, or None while it still runs then; seconds from the signal)."""
        started = trio.current_time()
        if self.process.returncode is None:
            try:
                self.process.send_signal(signum)
            except ProcessLookupError:
                pass  # it ended meanwhile: its code is below
        with trio.move_on_after(within):
            await self.process.wait()
        return self.process.returncode, trio.current_time() - started

    async def aclose(self, *, stop_signal: int = signal.SIGKILL, grace: float = 10.0) -> None:
        """End the child (``stop_signal``, SIGKILL after ``grace``), reap it, read its output
        to the end and close the pipe; shielded and bounded, safe to call again."""
        with trio.CancelScope(shield=True):
            try:
                await _end_process(self.process, stop_signal=stop_signal, grace=grace)
                with trio.move_on_after(grace):  # EOF comes once the child is gone
                    await self._pumped.wait()
            finally:
                await _close_pipes(self.process)

    async def _pump(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        pending = b""
        try:
            with self.log_path.open("ab") as log:
                while chunk := await stream.receive_some(65536):
                    log.write(chunk)
                    log.flush()
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    self._add(line.decode(errors="replace") for line in lines)
        except trio.ClosedResourceError:
            pass  # aclose gave up waiting for EOF (a grandchild holds the pipe)
        finally:
            if pending:
                self._add([pending.decode(errors="replace")])
            self._pumped.set()
            self._changed.set()

    def _add(self, lines: Iterable[str]) -> None:
        for line in lines:
            self._lines.append(line)
            self._count += 1
        self._changed.set()
        self._changed = trio.Event()


async def spawn_logged(
    nursery: trio.Nursery,
    name: str,
    command: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | str = ROOT,
) -> LoggedProcess:
    """Start ``command`` with its output read by a task in ``nursery``. The caller must
    ``aclose`` it (``open_logged`` and ``Role`` do); prefer those."""
    process = await trio.lowlevel.open_process(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    child = LoggedProcess(name, process, log_path)
    nursery.start_soon(child._pump)
    return child


@asynccontextmanager
async def open_logged(
    nursery: trio.Nursery,
    name: str,
    command: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    stop_signal: int = signal.SIGKILL,
    grace: float = 10.0,
) -> AsyncIterator[LoggedProcess]:
    """Start ``command`` (its output read by a task in ``nursery``, which must outlive the
    block); on leaving the block, also on failure or cancellation, end it with
    ``stop_signal`` (SIGKILL unless told: a test that wanted a graceful end has asserted it
    already), reap it and close its pipe (shielded, bounded)."""
    child = await spawn_logged(nursery, name, command, log_path, env=env)
    try:
        yield child
    finally:
        await child.aclose(stop_signal=stop_signal, grace=grace)


class Role:
    """``command`` (a ``kubesvc`` role) that a test ends and starts again, one process at a
    time; every start appends to one log file (after a ``--- start N of NAME`` line).
    ``ready`` is a pattern the role logs once its signal handler is set (``None``: no such
    wait). The owner calls ``aclose`` (shielded, bounded) however its block ends."""

    def __init__(
        self,
        nursery: trio.Nursery,
        name: str,
        command: Sequence[str],
        log_path: Path,
        *,
        ready: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.log_path = log_path
        self.ready = ready
        self.env = dict(env or {})
        self.starts = 0
        self.current: LoggedProcess | None = None
        self._nursery = nursery

    async def start(self) -> None:
        """Spawn the process (the previous one must have ended)."""
        if self.current is not None:
            assert self.current.returncode is not None, f"{self.name} still runs"
            await self.current.aclose()  # reaped already: reads its output's end, closes
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1} of {self.name}\n".encode())
        self.current = await spawn_logged(
            self._nursery, self.name, self.command, self.log_path, env=self.env
        )
        self.starts += 1

    def exited(self) -> int | None:
        """The exit code if the process has ended (None: running, or never started)."""
        return None if self.current is None else self.current.process.poll()

    async def kill(self) -> int:
        """SIGKILL, and reap it; returns the exit code."""
        assert self.current is not None
        code, _ = await self.current.signal_and_wait(signal.SIGKILL, within=10.0)
        assert code is not None, f"{self.name} survived SIGKILL"
        return code

    async def terminate(self, grace: float) -> tuple[int | None, float, bool]:
        """SIGTERM, once the process logged ``ready`` (up to ``grace`` s), and wait up to
        ``grace`` s for it to end; killed if it has not. (exit code or None when it had to
        be killed, seconds from the signal until it ended, whether ``ready`` was seen)."""
        assert self.current is not None
        ready = self.ready is None
        if self.ready is not None:
            with trio.move_on_after(grace):
                try:
                    await self.current.wait_for(self.ready)
                    ready = True
                except AssertionError:
                    pass  # it ended without: the signal below finds it gone
        code, took = await self.current.signal_and_wait(signal.SIGTERM, within=grace)
        if code is None:
            await self.kill()
        return code, took, ready

    async def aclose(self) -> None:
        """Kill and reap whatever runs; safe when cancelled (shielded, bounded)."""
        if self.current is not None:
            await self.current.aclose()

    def log_tail(self, lines: int = 5) -> str:
        """The current process's last ``lines`` lines (for a finding's message)."""
        return "" if self.current is None else "\n".join(self.current.lines[-lines:])
