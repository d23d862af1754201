"""``kubesvc demo --replicas N``: the shared PostgreSQL and the N server processes.

Theory of operation. Several replicas need a store they share: ``--store postgresql://...``
names an existing one (left as it is at the end), else ``open_demo_postgres`` starts a
throwaway server from the binaries the tests use (kubesvc/_postgres.py: initdb into a
temporary folder, a unix socket there, no TCP port), stopped and its folder removed when the
demo ends, however it ends. No binaries: a ``DemoError`` that says how to get them or to pass
``--store``.

Each replica is ``kubesvc server -c server-<i>.yaml`` in a process of its own, as in
production, so a ``kill -9`` of one leaves the others (and the demo) running. Each runs in a
session of its own: the terminal's Ctrl-C reaches only the demo, which then stops them in
order (SIGTERM, they drain; SIGKILL after a bound). Their output goes to
``<folder>/replica-<i>.log``; the line a server logs once both listeners are up gives the
bound ports (so port 0 works) and tells the demo it is ready.
"""

from __future__ import annotations

import collections
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import trio

from ._postgres import TEST_SETTINGS, NoPostgres, TempPostgres, find_binaries

__all__ = [
    "DemoError",
    "DemoPostgres",
    "Replica",
    "open_demo_postgres",
    "open_replicas",
    "postgres_binaries",
]

# A server logs this once gRPC and REST listen (server/_app.py).
_STARTED = re.compile(r"gRPC on [^ ]+:(\d+), REST on [^ ]+:(\d+)")
_START_PATIENCE = 120.0  # seconds for a replica to listen (imports + migrations, loaded box)
_TAIL_LINES = 40  # a replica's last lines, kept for the error when it fails to start
_DRAIN_GRACE = 15.0  # SIGTERM -> SIGKILL (the demo's replicas drain within 5 s, + 5 s more)
_KILL_WAIT = 10.0
_DATABASE = "kubesvc"


class DemoError(Exception):
    """The demo cannot run as asked; the message says what to do instead."""


@dataclass(frozen=True, slots=True)
class DemoPostgres:
    """The store the replicas share: ``url`` for them; ``server`` when the demo started
    it from the binaries in ``binaries`` (None: the user's, from ``--store``)."""

    url: str
    server: TempPostgres | None = None
    binaries: Path | None = None


_NO_BINARIES = (
    "kubesvc demo --replicas needs PostgreSQL, and no server binaries were found ({why}). "
    "Install them (Debian/Ubuntu: apt-get install postgresql; or pip install pgserver into "
    "this Python environment; or set KUBESVC_PG_BIN to a folder holding initdb, pg_ctl and "
    "postgres), or pass --store postgresql://user@host:port/db to use an existing server."
)


def postgres_binaries() -> Path:
    """Where the PostgreSQL server binaries are; raises DemoError saying how to get them
    (or to pass ``--store``) when there are none."""
    try:
        return find_binaries()
    except NoPostgres as exc:
        raise DemoError(_NO_BINARIES.format(why=exc)) from exc


@asynccontextmanager
async def open_demo_postgres(store_url: str | None) -> AsyncIterator[DemoPostgres]:
    """``store_url`` as it is, or a throwaway PostgreSQL with a database ``kubesvc``, stopped
    (``pg_ctl stop``, waited for) and its folder removed on exit, also when cancelled.

    Raises DemoError when there are no binaries, RuntimeError when initdb or the start fails.
    """
    if store_url:
        yield DemoPostgres(store_url)
        return
    binaries = postgres_binaries()
    # Fast, not durable (fsync off): the demo's database does not outlive the demo.
    server = TempPostgres(dict(TEST_SETTINGS))
    # initdb and pg_ctl block for seconds: worker threads, waited for even when cancelled
    # (abandoning one would leave a server running with nobody to stop it). A failed start
    # removes its own folder.
    await trio.to_thread.run_sync(server.start)
    try:
        await trio.to_thread.run_sync(server.create_database, _DATABASE)
        yield DemoPostgres(server.url(_DATABASE), server, binaries)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(server.stop)


@dataclass(eq=False)
class Replica:
    """One server process: its config, log file and, once started, the process and the
    ports it bound."""

    index: int  # 1-based
    server_id: str
    config: Path
    log_path: Path
    host: str = "127.0.0.1"
    process: trio.Process | None = None
    grpc_port: int = 0
    api_port: int = 0
    listening: trio.Event = field(default_factory=trio.Event)
    ended: trio.Event = field(default_factory=trio.Event)
    tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=_TAIL_LINES)
    )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def api(self) -> str:
        return f"http://{self.host}:{self.api_port}"

    @property
    def grpc(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_text(self) -> str:
        """How the process ended: ``killed by SIGKILL``, ``exit code 1``, or ``running``."""
        code = None if self.process is None else self.process.poll()
        if code is None:
            return "running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"


@asynccontextmanager
async def open_replicas(
    nursery: trio.Nursery, replicas: Sequence[Replica], *, cwd: Path
) -> AsyncIterator[Sequence[Replica]]:
    """Start every replica and wait until each listens (its ports are then set).

    Their output is read by tasks in ``nursery``, which must outlive the block. On exit,
    also when cancelled, every replica still running gets SIGTERM, then SIGKILL after a
    bound, and is reaped (shielded). Raises DemoError, with the end of its log, when one
    ends or stays silent before it listens.
    """
    try:
        for replica in replicas:
            await _spawn(nursery, replica, cwd)
        for replica in replicas:
            await _wait_listening(replica)
        yield replicas
    finally:
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as stopping:
                for replica in replicas:
                    stopping.start_soon(_stop, replica)


async def _spawn(nursery: trio.Nursery, replica: Replica, cwd: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "kubesvc",
        "server",
        "-c",
        str(replica.config),
        "--log-level",
        "INFO",
    ]
    replica.process = await trio.lowlevel.open_process(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        # Not in the terminal's process group: Ctrl-C is the demo's to hand on, in order.
        start_new_session=True,
    )
    nursery.start_soon(_pump, replica)


async def _pump(replica: Replica) -> None:
    """Copy the replica's output to its log file; note its ports from the start line; set
    ``ended`` once it has exited."""
    process = replica.process
    assert process is not None
    assert process.stdout is not None
    pending = b""
    try:
        with replica.log_path.open("ab") as log:
            while chunk := await process.stdout.receive_some(65536):
                log.write(chunk)
                log.flush()
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    _note(replica, raw.decode(errors="replace"))
                # A line longer than this is not the start line; keep the buffer bounded.
                pending = pending[-65536:]
    except (trio.ClosedResourceError, trio.BrokenResourceError):
        pass  # the pipe was closed at the stop
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(_KILL_WAIT):
            await process.wait()
        replica.ended.set()


def _note(replica: Replica, line: str) -> None:
    replica.tail.append(line)
    if not replica.listening.is_set() and (found := _STARTED.search(line)):
        replica.grpc_port, replica.api_port = int(found.group(1)), int(found.group(2))
        replica.listening.set()


async def _wait_listening(replica: Replica) -> None:
    with trio.move_on_after(_START_PATIENCE):
        async with trio.open_nursery() as race:

            async def ended() -> None:
                await replica.ended.wait()
                race.cancel_scope.cancel()

            async def listening() -> None:
                await replica.listening.wait()
                race.cancel_scope.cancel()

            race.start_soon(ended)
            race.start_soon(listening)
    if replica.listening.is_set():
        return
    why = (
        f"ended ({replica.exit_text()})"
        if replica.ended.is_set()
        else f"did not listen within {_START_PATIENCE:.0f} s"
    )
    last = "\n".join(f"    {line}" for line in replica.tail) or "    (no output)"
    raise DemoError(
        f"server replica {replica.index} ({replica.server_id}) {why}; the end of "
        f"{replica.log_path}:\n{last}"
    )


async def _stop(replica: Replica) -> None:
    """SIGTERM (the replica drains), SIGKILL after ``_DRAIN_GRACE``, reaped; bounded."""
    process = replica.process
    if process is None:
        return
    if process.returncode is None:
        try:
            process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass  # it ended meanwhile
        with trio.move_on_after(_DRAIN_GRACE):
            await process.wait()
    if process.returncode is None:
        process.kill()
        with trio.move_on_after(_KILL_WAIT):
            await process.wait()
    with trio.move_on_after(_KILL_WAIT):
        await replica.ended.wait()  # the pump has read the output to its end
    if process.stdout is not None:
        await process.stdout.aclose()
