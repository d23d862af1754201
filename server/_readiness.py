"""Whether this replica should receive traffic: ``GET /health/ready`` (the readiness probe).

Theory of operation. A replica is ready while it is not draining and its store answers a
ping (``Store.ping``: PostgreSQL's ``SELECT 1`` on a connection of its own, SQLite's read of
the file). Liveness (``/health``) asks nothing of the store: a database outage must take
replicas out of the Service, not restart them all.

Probes must not load the database, and a probe must be answered within its own timeout even
when the database hangs. So the pings run in one task of their own (``run``), one at a time
and only when a probe asks: a probe takes the last answer while it is younger than
``cache_seconds``; otherwise it asks for a ping and waits for it at most ``timeout_seconds``.
A ping still running after ``timeout_seconds`` (a database that accepts and never answers)
makes every probe answer "not ready" at once until it ends. Times are trio's clock
(autojump_clock in the tests).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from ._errors import StoreError

__all__ = ["Readiness", "ReadinessAnswer"]

log = logging.getLogger("server.readiness")

#: A probe reuses the last ping's answer for this long.
CACHE_SECONDS = 1.0
#: A probe waits this long for a ping; a ping running longer means "not ready".
TIMEOUT_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class ReadinessAnswer:
    """``ready``, or why not (``reason``, for the 503's body and the log)."""

    ready: bool
    reason: str = ""


class Readiness:
    """The replica's readiness (see the module docstring). ``run`` must be running in the
    server's nursery for probes to get fresh answers; ``drain()`` makes it not ready for
    good."""

    def __init__(
        self,
        ping: Callable[[], Awaitable[None]],
        *,
        cache_seconds: float = CACHE_SECONDS,
        timeout_seconds: float = TIMEOUT_SECONDS,
    ) -> None:
        self._ping = ping
        self._cache_seconds = cache_seconds
        self._timeout_seconds = timeout_seconds
        self._draining = False
        self._last: ReadinessAnswer | None = None
        self._last_at = -float("inf")
        self._ping_started: float | None = None  # while a ping runs
        self._wanted = trio.Event()  # a probe wants a fresh answer
        self._answered = trio.Event()  # set (and replaced) at each ping's end
        self.pings = 0  # pings started (tests: the cache holds the database's load down)

    def drain(self) -> None:
        """The replica is shutting down: not ready from now on."""
        self._draining = True

    async def check(self) -> ReadinessAnswer:
        """The answer for one probe: at once from the cache or the drain, else after the next
        ping, or "not ready" after ``timeout_seconds`` without one."""
        if self._draining:
            return ReadinessAnswer(False, "the server is draining (shutting down)")
        now = trio.current_time()
        if self._last is not None and now - self._last_at < self._cache_seconds:
            return self._last
        if self._ping_started is not None and now - self._ping_started >= self._timeout_seconds:
            return self._no_answer(now - self._ping_started)
        answered = self._answered
        self._wanted.set()
        with trio.move_on_after(self._timeout_seconds):
            await answered.wait()
            if self._draining:
                return ReadinessAnswer(False, "the server is draining (shutting down)")
            assert self._last is not None
            return self._last
        return self._no_answer(self._timeout_seconds)

    def _no_answer(self, seconds: float) -> ReadinessAnswer:
        return ReadinessAnswer(False, f"the store has not answered a ping for {seconds:.1f} s")

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Ping the store whenever a probe asks for a fresh answer, one ping at a time, until
        cancelled."""
        task_status.started()
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            self._ping_started = trio.current_time()
            self.pings += 1
            try:
                await self._ping()
                answer = ReadinessAnswer(True)
            except StoreError as exc:
                answer = ReadinessAnswer(False, f"the store is unreachable: {exc}")
            finally:
                self._ping_started = None
            if answer.ready != (self._last is None or self._last.ready):  # a change: say so
                log.warning("readiness: %s", "ready again" if answer.ready else answer.reason)
            self._last, self._last_at = answer, trio.current_time()
            self._answered.set()
            self._answered = trio.Event()
