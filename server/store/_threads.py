"""Blocking database calls from trio: worker threads, each call with a connection of its own.

Both backends use this one mechanism. SQLite: one connection (its core), so calls run one at
a time. PostgreSQL: up to ``size`` connections, opened on demand in the worker thread and kept
while healthy, so ``size`` calls run at once. A call cancelled while its thread runs waits for
the thread (trio's to_thread is not abandoned): a transaction is committed or rolled back,
never left half done, and a connection is never used by two threads at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Concatenate, Generic, ParamSpec, TypeVar

import trio

from .._errors import StoreClosed

log = logging.getLogger("server.store")

R = TypeVar("R")
P = ParamSpec("P")
T = TypeVar("T")


class WorkerThreads(Generic[R]):
    """Runs ``fn(connection, ...)`` in a worker thread with an idle connection (or a new one
    from ``open_connection``, called in that thread). At most ``size`` calls run at once;
    the others wait in line (trio.CapacityLimiter, FIFO). After a call, a connection that
    ``is_broken`` says is unusable is closed instead of reused (the next call opens a new one).
    ``idle``: connections opened already, used first and closed by ``aclose`` like the
    others, whether or not a call ever used them.
    """

    def __init__(
        self,
        open_connection: Callable[[], R],
        close_connection: Callable[[R], None],
        size: int,
        *,
        is_broken: Callable[[R], bool] = lambda _conn: False,
        idle: Sequence[R] = (),
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if len(idle) > size:
            raise ValueError(f"{len(idle)} idle connections for a size of {size}")
        self._open = open_connection
        self._close = close_connection
        self._is_broken = is_broken
        self._size = size
        self._limiter = trio.CapacityLimiter(size)
        self._idle: list[R] = list(idle)  # at most size: one per call that returned
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def start(self) -> None:
        """Open one connection now, so that a bad location fails at open time (raises what
        ``open_connection`` raises)."""
        await self.run(lambda _conn: None)

    async def run(self, fn: Callable[Concatenate[R, P], T], *args: P.args, **kwargs: P.kwargs) -> T:
        """``fn(connection, *args, **kwargs)`` in a worker thread; raises StoreClosed once
        ``aclose`` has begun, else what ``fn`` (or opening a connection) raises."""
        if self._closed:
            raise StoreClosed("the store is closed")
        async with self._limiter:
            if self._closed:
                raise StoreClosed("the store is closed")
            conn: R | None = self._idle.pop() if self._idle else None

            def work() -> T:
                nonlocal conn
                if conn is None:
                    conn = self._open()
                return fn(conn, *args, **kwargs)

            try:
                return await trio.to_thread.run_sync(work)
            finally:
                # The thread has finished here (not abandoned), so conn is no longer in use.
                if conn is not None:
                    if self._closed or self._is_broken(conn):
                        self._close_quietly(conn)
                    else:
                        self._idle.append(conn)

    async def aclose(self) -> None:
        """Refuse new calls, wait for those running, close every connection. Shielded."""
        self._closed = True
        with trio.CancelScope(shield=True):
            # Every slot taken: no call is running any more.
            tokens = [object() for _ in range(self._size)]
            for token in tokens:
                await self._limiter.acquire_on_behalf_of(token)
            idle, self._idle = self._idle, []
            if idle:
                await trio.to_thread.run_sync(self._close_all, idle)
            for token in tokens:
                self._limiter.release_on_behalf_of(token)

    def _close_all(self, conns: list[R]) -> None:
        for conn in conns:
            self._close_quietly(conn)

    def _close_quietly(self, conn: R) -> None:
        try:
            self._close(conn)
        except Exception as exc:  # a broken connection may fail to close; it is gone either way
            log.debug("closing a store connection failed: %s", exc)
