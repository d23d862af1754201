"""SQLite's writes in groups: the writes that wait together go to the worker thread in one hop.

Why. The SQLite store has one connection, so its writes run one at a time, each a hop from
trio to the worker thread and back. On a busy machine the hop costs more than the statement:
each wakeup of the thread, and of trio after it, waits for a slice of a contended CPU. 1,000
agents reconnecting at once queue thousands of small writes (their agent rows, their
accounts' states, the resume points of their bookmark batches); one hop each, they took
longer than an agent waits for its Welcome (30 s), the agents hung up and came back, and the
registration storm never ended (tests/bench/bench_agents.py at 1,000 agents).

Theory of operation. ``write(call, nbytes)`` queues the call and waits. One task
(``run``, started by the store's upkeep) takes the queued calls (up to ``max_group`` of them
and ``max_group_bytes``, in the order they came), asks the WAL checkpointer to admit them
once, runs them in one hop, each in its own transaction as before (a call that fails rolls
back only itself, and raises in its own writer), reports their bytes to the checkpointer and
wakes their writers. A writer cancelled while its call waits in the queue leaves it; once
its call is taken, it waits for it (the transaction is done or rolled back, never
abandoned) and then raises Cancelled. When ``run`` ends, the calls it has not run are
handed back (HandedBack): their writers run them themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import outcome
import trio

__all__ = ["MAX_GROUP", "MAX_GROUP_BYTES", "HandedBack", "WriteGroups"]

H = TypeVar("H")
T = TypeVar("T")

#: Calls in one hop at most: a group holds the connection, and reads wait behind it.
MAX_GROUP = 128
#: A group's writes, in the bytes their callers expect to write, at most (its first call may
#: be larger alone): the checkpointer admits a group against its bound as one write, so the
#: log may pass the bound by one group. Grouping is for the many small writes; a large
#: batch gains nothing from company.
MAX_GROUP_BYTES = 256 * 1024


@dataclass(eq=False, slots=True)
class _Job(Generic[H]):
    call: Callable[[H], Any]
    nbytes: int
    done: trio.Event = field(default_factory=trio.Event)
    taken: bool = False
    #: None when handed back (``run`` ended before taking it): the writer runs it itself
    result: outcome.Outcome[Any] | None = None


def _run_all(handle: H, calls: Sequence[Callable[[H], Any]]) -> list[outcome.Outcome[Any]]:
    """In the worker thread: each call in turn, its outcome captured (so one failing call
    fails only its own writer)."""
    return [outcome.capture(call, handle) for call in calls]


class WriteGroups(Generic[H]):
    """Writes through ``hop`` (``WorkerThreads.run``) in groups; see the module docstring."""

    def __init__(
        self,
        hop: Callable[[Callable[[H, Sequence[Callable[[H], Any]]], Any], Any], Awaitable[Any]],
        *,
        max_group: int = MAX_GROUP,
        max_group_bytes: int = MAX_GROUP_BYTES,
    ) -> None:
        self._hop = hop
        self._max_group = max_group
        self._max_group_bytes = max_group_bytes
        self._queue: list[_Job[H]] = []
        self._wake = trio.Event()
        self._running = False
        self.groups = 0  # hops made, for the tests and the curious
        self.calls = 0

    @property
    def running(self) -> bool:
        return self._running

    async def write(self, call: Callable[[H], T], nbytes: int) -> T:
        """Run ``call(handle)`` in a group; returns what it returns, raises what it raises.
        Raises HandedBack, the call not run, when ``run`` is not running or ended before
        taking it: the caller then writes by itself."""
        if not self._running:
            raise HandedBack("the write groups are not running")
        job: _Job[H] = _Job(call, nbytes)
        self._queue.append(job)
        self._wake.set()
        try:
            await job.done.wait()
        except BaseException:
            if not job.taken:  # still queued (or handed back as ``run`` ended)
                if job in self._queue:
                    self._queue.remove(job)
                raise
            with trio.CancelScope(shield=True):
                await job.done.wait()  # taken: its transaction is done before we go
            raise
        if job.result is None:
            raise HandedBack("the write groups stopped before this write")
        result: T = job.result.unwrap()
        return result

    async def run(
        self,
        admit: Callable[[], Awaitable[None]],
        committed: Callable[[int], None],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Take the queued calls and run them, a group per hop, until cancelled; ``admit``
        is awaited before each group (it may raise: the group's writers get the error) and
        ``committed(nbytes)`` called after it. Hands the queued calls back when it ends."""
        self._running = True
        task_status.started()
        try:
            while True:
                while not self._queue:
                    self._wake = trio.Event()
                    await self._wake.wait()
                group = self._take()
                for job in group:
                    job.taken = True
                await self._one_group(group, admit, committed)
        finally:
            self._running = False
            queued, self._queue = self._queue, []
            for job in queued:
                job.done.set()  # result None: handed back

    def _take(self) -> list[_Job[H]]:
        """The next group: the first queued call, and the ones after it while the group
        stays within ``max_group`` calls and ``max_group_bytes``."""
        count, nbytes = 1, self._queue[0].nbytes
        while count < min(self._max_group, len(self._queue)):
            nbytes += self._queue[count].nbytes
            if nbytes > self._max_group_bytes:
                break
            count += 1
        group = self._queue[:count]
        del self._queue[:count]
        return group

    async def _one_group(
        self,
        group: list[_Job[H]],
        admit: Callable[[], Awaitable[None]],
        committed: Callable[[int], None],
    ) -> None:
        results: list[outcome.Outcome[Any]] | None = None
        failure: Exception | None = None
        try:
            await admit()
            try:
                results = await self._hop(_run_all, [job.call for job in group])
            finally:
                committed(sum(job.nbytes for job in group))
            self.groups += 1
            self.calls += len(group)
        except Exception as exc:  # admit's StoreError, the hop's StoreClosed: every writer's
            failure = exc
        finally:
            # Also when this task is cancelled (the hop is never abandoned: it ran, or it
            # never began, and then its calls are handed back unrun).
            for index, job in enumerate(group):
                if results is not None:
                    job.result = results[index]
                elif failure is not None:
                    job.result = outcome.Error(failure)
                job.done.set()


class HandedBack(Exception):
    """The call was not run (the write groups are not running, or stopped before taking it):
    the writer writes by itself."""
