"""kubesvc processes for end-to-end tests: ``python -m kubesvc agent|server`` as real children.

``open_kubesvc(nursery, name, args, log_path)`` starts one, copies its stderr (the log) into
``log_path`` and keeps its lines, so a test can wait for a line (``wait_for``) instead of
sleeping. However the block exits (a failure, a cancellation), the process is killed if it
still runs and waited for, and its pipe is closed: no test leaves a child behind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import yaml

_KILL_WAIT_SECONDS = 10.0


class KubesvcProcess:
    """A running ``kubesvc`` child and the lines it has logged so far."""

    def __init__(self, name: str, process: trio.Process, log_path: Path) -> None:
        self.name = name
        self.process = process
        self.log_path = log_path
        self.lines: list[str] = []
        self._changed = trio.Event()
        self._pumped = trio.Event()

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def output(self) -> str:
        return "\n".join(self.lines)

    async def wait_for(self, pattern: str) -> re.Match[str]:
        """The first logged line matching the regular expression ``pattern`` (waits for it;
        the caller bounds the wait). Fails when the process exits without logging it."""
        compiled = re.compile(pattern)
        seen = 0
        while True:
            for line in self.lines[seen:]:
                found = compiled.search(line)
                if found:
                    return found
            seen = len(self.lines)
            if self._pumped.is_set():
                raise AssertionError(
                    f"{self.name} exited ({self.returncode}) without logging {pattern!r}:\n"
                    + self.output()
                )
            await self._changed.wait()

    async def signal_and_wait(self, signum: int) -> tuple[int, float]:
        """Send ``signum``; (exit code, seconds until the process exited)."""
        start = trio.current_time()
        self.process.send_signal(signum)
        code = await self.process.wait()
        return code, trio.current_time() - start

    async def _pump(self) -> None:
        stream = self.process.stderr
        assert stream is not None
        pending = b""
        try:
            with self.log_path.open("ab") as log:
                async with stream:
                    while chunk := await stream.receive_some(65536):
                        log.write(chunk)
                        log.flush()
                        pending += chunk
                        *lines, pending = pending.split(b"\n")
                        self.lines.extend(line.decode(errors="replace") for line in lines)
                        self._changed.set()
                        self._changed = trio.Event()
        finally:
            if pending:
                self.lines.append(pending.decode(errors="replace"))
            self._pumped.set()
            self._changed.set()


@asynccontextmanager
async def open_kubesvc(
    nursery: trio.Nursery, name: str, args: Sequence[str], log_path: Path
) -> AsyncIterator[KubesvcProcess]:
    """Start ``python -m kubesvc ARGS``; killed (if still running) and reaped on exit."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "kubesvc", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    child = KubesvcProcess(name, process, log_path)
    try:
        nursery.start_soon(child._pump)
        yield child
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(_KILL_WAIT_SECONDS):
            if process.returncode is None:
                process.kill()
            await process.wait()
            await child._pumped.wait()  # EOF once the child is gone: the pipe is closed


def server_config(tmp_path: Path, store: Path, *, drain_seconds: float, **extra: Any) -> Path:
    """A server.yaml on loopback ports chosen by the OS (the server logs them)."""
    config = {
        "grpc": {"host": "127.0.0.1", "port": 0},
        "api": {"host": "127.0.0.1", "port": 0},
        "store": {"path": str(store)},
        "shutdown": {"drainSeconds": drain_seconds},
        **extra,
    }
    path = tmp_path / f"server-{store.stem}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def server_ports(server: KubesvcProcess) -> tuple[int, int]:
    """(gRPC port, REST port) from the server's start line."""
    found = await server.wait_for(r"gRPC on [^ ]+:(\d+), REST on [^ ]+:(\d+)")
    return int(found.group(1)), int(found.group(2))
