"""Idle pacing (agent/_pacing.py): a quiet run sleeps before it blocks, so that what arrives
meanwhile is handled in one pass; object events and operations turn it off for a while."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import trio
import trio.testing

from agent._pacing import QUIET_SECONDS, Pacer, busy, idle_pacing, unpaced
from agent.watch import WatchTarget
from wire import EventType

from .test_reflector import PODS, open_env, pod


async def test_a_quiet_loop_sleeps_the_delay_before_it_blocks_unless_a_timer_is_due(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slept: list[float] = []
    pacer = Pacer(0.02, sleep=slept.append)
    pacer.before_io_wait(0.0)  # tasks are runnable: the loop only polls
    pacer.before_io_wait(5.0)
    pacer.before_io_wait(0.02)  # a timer fires within the delay: no later than it would
    pacer.before_io_wait(0.005)
    pacer.before_io_wait(0.03)
    assert slept == [0.02, 0.02]
    assert pacer.paced == 2


async def test_busy_turns_pacing_off_for_the_quiet_seconds(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slept: list[float] = []
    pacer = Pacer(0.02, sleep=slept.append)
    pacer.busy()
    pacer.before_io_wait(5.0)
    assert slept == []
    autojump_clock.jump(QUIET_SECONDS / 2)
    pacer.before_io_wait(5.0)
    assert slept == []
    autojump_clock.jump(QUIET_SECONDS / 2)
    pacer.before_io_wait(5.0)
    assert slept == [0.02]


async def test_unpaced_holds_pacing_off_while_it_runs_and_for_the_quiet_seconds_after(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slept: list[float] = []
    pacer = Pacer(0.02, sleep=slept.append)
    with pacer.unpaced():
        with pacer.unpaced():  # operations overlap
            pass
        autojump_clock.jump(10 * QUIET_SECONDS)
        pacer.before_io_wait(5.0)  # the outer one still holds
    pacer.before_io_wait(5.0)
    assert slept == []
    autojump_clock.jump(QUIET_SECONDS)
    pacer.before_io_wait(5.0)
    assert slept == [0.02]


def test_a_pacer_needs_a_positive_delay() -> None:
    for delay in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="delay > 0"):
            Pacer(delay)


async def test_without_a_pacer_busy_and_unpaced_do_nothing() -> None:
    with idle_pacing(0) as pacer:
        assert pacer is None
        busy()
        with unpaced():
            busy()


@pytest.mark.timeout(10)  # the mock clock moves only if pacing works: fail fast if not
async def test_a_run_is_paced_once_and_unpaced_after(mock_clock: trio.testing.MockClock) -> None:
    """Through trio's loop, on a clock that moves only as the pacer sleeps: each of those
    sleeps passes its time and wakes the loop (as the I/O that arrived meanwhile would)."""
    slept: list[float] = []
    token = trio.lowlevel.current_trio_token()
    paced_five = trio.Event()

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        mock_clock.jump(seconds)
        # The loop's wait returns at once; after the fifth pacing, the test goes on.
        token.run_sync_soon(paced_five.set if len(slept) == 5 else lambda: None)

    with trio.fail_after(10), idle_pacing(0.01, sleep=sleep) as pacer:
        assert pacer is not None
        with pytest.raises(RuntimeError, match="paced already"), idle_pacing(0.05):
            pass
        await paced_five.wait()  # nothing else to run: every wait of the loop is paced
        assert slept == [0.01] * 5
        paced = len(slept)
        with unpaced():  # the module's unpaced() reaches the run's one pacer
            pacer.before_io_wait(5.0)  # what the loop would call now: held
        assert len(slept) == paced
    with pytest.raises(KeyError):  # the instrument is gone from the run
        trio.lowlevel.remove_instrument(pacer)
    with idle_pacing(0) as none:  # and the run is free for another; busy() reaches nothing
        assert none is None
        busy()


async def test_what_arrives_while_the_pacer_sleeps_is_read_in_one_pass() -> None:
    """The mechanism, on a real socket: whatever arrives while the pacer sleeps (here, written
    by the sleep itself: bursts of 5, 7 and 3 messages) is there when the loop waits, so one
    wake-up reads each burst, where an unpaced reader could wake for every message."""
    bursts = iter([5, 7, 3])
    reader, writer = socket.socketpair()
    reader.setblocking(False)

    def sleep(seconds: float) -> None:
        for _ in range(next(bursts, 0)):
            writer.send(b"x" * 100)

    reads: list[int] = []
    with trio.fail_after(10), reader, writer, idle_pacing(0.05, sleep=sleep) as pacer:
        assert pacer is not None
        while sum(reads) < 15 * 100:
            await trio.lowlevel.wait_readable(reader)
            reads.append(len(os.read(reader.fileno(), 65536)))
    assert reads == [500, 700, 300]
    assert pacer.paced == 3


async def test_object_events_mark_the_run_busy_and_bookmarks_do_not(tmp_path: Path) -> None:
    slept: list[float] = []
    with trio.fail_after(20), idle_pacing(0.02, sleep=slept.append) as pacer:
        assert pacer is not None
        async with open_env(tmp_path) as env:
            reflector = env.reflector(WatchTarget(PODS))
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            listed = pacer.busy_until
            assert listed > -float("inf")  # the list
            env.sim.create(pod("a"))
            await env.receiver.wait_for(lambda: "a" in env.receiver.names("Pod"))
            changed = pacer.busy_until
            assert changed > listed
            # Only bookmarks from here on (kubesim's come every 0.2 s): the mark stays.
            bookmarks = env.receiver.count(EventType.BOOKMARK, "Pod")
            await env.receiver.wait_for(
                lambda: env.receiver.count(EventType.BOOKMARK, "Pod") >= bookmarks + 2
            )
            assert pacer.busy_until == changed
