"""SQLite's write groups (server/store/_sqlite_groups.py): the writes waiting together go to
the worker thread in one hop, each still failing or succeeding alone."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
from trio.testing import wait_all_tasks_blocked

from server import StoreError
from server.store._sqlite_groups import HandedBack, WriteGroups


class Log:
    """The handle the calls get: what they did, and in which hop."""

    def __init__(self) -> None:
        self.done: list[tuple[int, str]] = []
        self.hops = 0


class Gate:
    """Holds the first group in ``admit`` until opened, so later writers queue behind it."""

    def __init__(self) -> None:
        self.opened = trio.Event()
        self.refusals: list[Exception] = []

    async def admit(self) -> None:
        if self.refusals:
            raise self.refusals.pop()
        await self.opened.wait()


async def open_groups(
    nursery: trio.Nursery, log: Log, gate: Gate, **options: int
) -> tuple[WriteGroups[Log], list[int]]:
    committed: list[int] = []

    async def hop(run_all: Callable[[Log, Sequence[Any]], Any], calls: Sequence[Any]) -> Any:
        log.hops += 1
        return await trio.to_thread.run_sync(run_all, log, calls)

    groups: WriteGroups[Log] = WriteGroups(hop, **options)
    await nursery.start(groups.run, gate.admit, committed.append)
    return groups, committed


async def queue_in_order(
    nursery: trio.Nursery, writers: Sequence[Callable[[], Awaitable[object]]]
) -> None:
    """Start ``writers`` one after the other, each queued before the next starts."""
    for writer in writers:
        nursery.start_soon(writer)
        await wait_all_tasks_blocked()


def call(name: str, fail: bool = False) -> Callable[[Log], str]:
    def run(log: Log) -> str:
        if fail:
            raise ValueError(f"{name} failed")
        log.done.append((log.hops, name))
        return name

    return run


async def test_writes_waiting_together_go_in_one_hop_and_fail_alone() -> None:
    log, gate = Log(), Gate()
    results: dict[str, object] = {}

    async def write(groups: WriteGroups[Log], name: str, fail: bool = False) -> None:
        try:
            results[name] = await groups.write(call(name, fail), 100)
        except ValueError as exc:
            results[name] = str(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            groups, committed = await open_groups(nursery, log, gate)
            async with trio.open_nursery() as writers:
                await queue_in_order(
                    writers,
                    [functools.partial(write, groups, f"w{i}", i == 7) for i in range(20)],
                )
                gate.opened.set()
            nursery.cancel_scope.cancel()
    assert results == {f"w{i}": ("w7 failed" if i == 7 else f"w{i}") for i in range(20)}
    # w0 alone (taken before the others came), then the 19 that waited together, in order.
    assert log.done == [(1, "w0")] + [(2, f"w{i}") for i in range(1, 20) if i != 7]
    assert committed == [100, 1900]


async def test_a_group_is_bounded_in_calls_and_bytes() -> None:
    log, gate = Log(), Gate()
    sizes = list(enumerate([1, 100, 100, 100, 1000, 10, 10, 10, 10, 10, 10]))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            groups, committed = await open_groups(
                nursery, log, gate, max_group=4, max_group_bytes=250
            )
            async with trio.open_nursery() as writers:
                await queue_in_order(
                    writers,
                    [functools.partial(groups.write, call(f"w{i}"), size) for i, size in sizes],
                )
                gate.opened.set()
            nursery.cancel_scope.cancel()
    # The first alone; 100+100 (a third would pass 250); 100 alone (1000 would pass it); the
    # large one alone; then 4 small ones (the most calls a group holds) and the last 2.
    assert committed == [1, 200, 100, 1000, 40, 20]


async def test_admit_failing_fails_the_group_and_the_next_group_goes_on() -> None:
    log, gate = Log(), Gate()
    gate.opened.set()
    gate.refusals.append(StoreError("the log is over its bound"))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            groups, _ = await open_groups(nursery, log, gate)
            with pytest.raises(StoreError, match="over its bound"):
                await groups.write(call("first"), 10)
            assert await groups.write(call("second"), 10) == "second"
            nursery.cancel_scope.cancel()
    assert [name for _, name in log.done] == ["second"]


async def test_a_cancelled_writer_leaves_the_queue_and_the_end_hands_calls_back() -> None:
    log, gate = Log(), Gate()
    handed_back: list[str] = []

    async def write_or_hand_back(groups: WriteGroups[Log], name: str) -> None:
        try:
            await groups.write(call(name), 10)
        except HandedBack:
            handed_back.append(name)

    with trio.fail_after(10):
        async with trio.open_nursery() as late_writers, trio.open_nursery() as nursery:
            groups, _ = await open_groups(nursery, log, gate)
            async with trio.open_nursery() as writers:
                cancelled = trio.CancelScope()

                async def cancellable() -> None:
                    with cancelled:
                        await groups.write(call("cancelled"), 10)

                await queue_in_order(
                    writers,
                    [
                        functools.partial(groups.write, call("first"), 10),  # in admit
                        cancellable,
                        functools.partial(groups.write, call("kept"), 10),
                    ],
                )
                cancelled.cancel()  # it still waits in the queue: it leaves it
                await wait_all_tasks_blocked()
                gate.opened.set()
            assert [name for _, name in log.done] == ["first", "kept"]
            # The writer task stops while one group waits in admit and a call is queued:
            # neither ran, both are handed back to their writers.
            gate.opened = trio.Event()
            await queue_in_order(
                late_writers,
                [
                    functools.partial(write_or_hand_back, groups, "held"),
                    functools.partial(write_or_hand_back, groups, "queued"),
                ],
            )
            nursery.cancel_scope.cancel()
        assert not groups.running
        with pytest.raises(HandedBack):
            await groups.write(call("late"), 10)
    assert sorted(handed_back) == ["held", "queued"]
    assert [name for _, name in log.done] == ["first", "kept"]
