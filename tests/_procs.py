"""Child processes in tests: every one a test starts is ended and waited for.

pytest runs with warnings as errors, so a child still running when its ``Process`` is
collected ("ResourceWarning: subprocess N is still running") or a pipe left open fails
whichever test happens to be running then, often another one. So a test never calls
``trio.lowlevel.open_process``, ``trio.run_process`` or ``subprocess.Popen`` itself:

- ``open_process`` (async) starts a child for the life of an ``async with`` block. On exit,
  also when the test failed or was cancelled (its ``fail_after`` expired), it asks the child
  to stop (``stop_signal``, SIGTERM unless told), waits ``grace`` seconds, kills it, waits
  again and closes its pipes, all shielded from the cancellation and bounded in time.
- ``run`` (sync) runs a command to its end with a timeout; ``subprocess.run`` kills and
  waits for the child on a timeout or any exception (pytest-timeout's signal included).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
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
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            await pipe.aclose()
    if process.returncode is None:
        raise RuntimeError(f"child {process.pid} ({process.args!r}) survived SIGKILL")


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
