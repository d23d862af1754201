"""Idle pacing (agent/_pacing.py): a quiet run sleeps before it blocks, so that what arrives
meanwhile is handled in one pass; object events and operations turn it off for a while."""

from __future__ import annotations

import os
import socket
import threading
import time
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


async def test_a_run_is_paced_once_and_unpaced_after() -> None:
    # The real clock: an autojump clock tells trio's loop to block for 0 s, never paced.
    slept: list[float] = []
    with trio.fail_after(10), idle_pacing(0.002, sleep=slept.append) as pacer:
        assert pacer is not None
        with pytest.raises(RuntimeError, match="paced already"), idle_pacing(0.05):
            pass
        await trio.sleep(0.05)  # blocks for longer than the delay: paced (a recorded sleep)
        paced = len(slept)
        assert paced >= 1
        with unpaced():  # still reaches the one pacer
            await trio.sleep(0.05)
        assert len(slept) == paced
    with idle_pacing(0) as none:  # the run is free again; busy() reaches nothing
        assert none is None
        busy()
        await trio.sleep(0.05)
    assert len(slept) == paced


async def test_a_paced_run_handles_what_arrives_in_few_passes() -> None:
    """The real thing: a socket written to every 2 ms from a thread, read by a trio task of a
    paced run. Unpaced, every message is a wake-up of its own; paced (50 ms), each pass of the
    loop takes whatever arrived while it slept."""
    messages, gap, delay = 25, 0.002, 0.05
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    written: list[float] = []

    def write() -> None:
        # The span is taken around the sends: a read can only follow a send, and a second
        # read within one pass needs a send after the pass began.
        written.append(time.monotonic())
        for _ in range(messages):
            writer.send(b"x" * 100)
            time.sleep(gap)
        written.append(time.monotonic())

    reads = 0
    received = 0
    with trio.fail_after(20), reader, writer, idle_pacing(delay) as pacer:
        assert pacer is not None
        thread = threading.Thread(target=write)
        thread.start()
        try:
            while received < messages * 100:
                await trio.lowlevel.wait_readable(reader)
                received += len(os.read(reader.fileno(), 65536))
                reads += 1
        finally:
            thread.join()
    span = written[-1] - written[0]
    # One pass per delay the writing lasted, and one for the first message and the last.
    assert reads <= 2 + span / delay, (reads, span)
    assert pacer.paced >= 1


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
