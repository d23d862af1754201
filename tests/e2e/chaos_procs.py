"""A ``kubesvc`` subprocess the chaos test kills and starts again (the agent, the server).

Every start appends the process's stdout and stderr to one log file (the file handle is
closed right after the spawn: the child keeps its own copy). :meth:`Role.aclose` ends and
reaps whatever is running, shielded and bounded, so a test that fails or is cancelled leaves
no process behind (pytest runs with warnings as errors: a running subprocess at garbage
collection is a ResourceWarning, i.e. a failure).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

__all__ = ["Role"]

_REAP_SECONDS = 10.0  # after SIGKILL a process is gone within milliseconds; this is a bound


class Role:
    """``python -m kubesvc <argv...>``, started by :meth:`start`; one process at a time."""

    def __init__(self, name: str, argv: list[str], log: Path) -> None:
        self.name = name
        self.argv = [sys.executable, "-m", "kubesvc", *argv]
        self.log = log
        self.starts = 0
        self.process: trio.Process | None = None

    async def start(self) -> None:
        """Spawn the process (the previous one must have ended)."""
        assert self.process is None or self.process.returncode is not None, "still running"
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts + 1} of {self.name}\n".encode())
            out.flush()
            self.process = await trio.lowlevel.open_process(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        self.starts += 1

    def exited(self) -> int | None:
        """The exit code if the process has ended (None: running, or never started)."""
        return None if self.process is None else self.process.poll()

    async def kill(self) -> int:
        """SIGKILL, and reap it; returns the exit code."""
        assert self.process is not None
        if self.process.returncode is None:
            self.process.kill()
        with trio.fail_after(_REAP_SECONDS):
            return await self.process.wait()

    async def terminate(self, grace: float) -> tuple[int | None, float]:
        """SIGTERM, and wait up to ``grace`` s for it to end: (exit code or None when it had
        to be killed, seconds until it ended)."""
        assert self.process is not None
        started = trio.current_time()
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        with trio.move_on_after(grace):
            code = await self.process.wait()
            return code, trio.current_time() - started
        await self.kill()
        return None, trio.current_time() - started

    async def aclose(self) -> None:
        """Kill and reap whatever runs; safe when cancelled (shielded, bounded)."""
        if self.process is None:
            return
        with trio.move_on_after(_REAP_SECONDS) as bound:
            bound.shield = True
            if self.process.returncode is None:
                self.process.kill()
            await self.process.wait()

    def log_tail(self, lines: int = 5) -> str:
        """The log's last ``lines`` lines (for a finding's message)."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
