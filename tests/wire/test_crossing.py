"""wire/_bridge/_crossing.py: grpclib's coroutines run for trio callers, stepped in the trio
task until they must wait, then resumed by an asyncio task, under asyncio's rules both ways."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Generator
from typing import Any

import pytest
import trio
from grpclib.exceptions import StreamTerminatedError
from grpclib.utils import Wrapper

from wire._bridge._crossing import cross

from ._loop import in_loop

pytestmark = pytest.mark.trio


@in_loop
async def test_a_coroutine_that_never_waits_runs_in_the_calling_trio_task() -> None:
    ran_in: list[trio.lowlevel.Task] = []

    async def quick(value: int) -> int:
        ran_in.append(trio.lowlevel.current_task())
        return value * 2

    with trio.fail_after(5):
        assert await cross(quick(21)) == 42
    assert ran_in == [trio.lowlevel.current_task()]


@in_loop
async def test_each_call_is_a_schedule_point_for_the_other_trio_tasks() -> None:
    other_ran = trio.Event()

    async def quick() -> None:
        pass

    async def other() -> None:
        other_ran.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            # Without a schedule point a loop of calls that never wait would starve `other`;
            # with one, trio runs it by this task's second turn at the latest.
            for _ in range(3):
                await cross(quick())
                if other_ran.is_set():
                    break
            assert other_ran.is_set()


@in_loop
async def test_an_exception_raised_before_any_wait_reaches_the_caller() -> None:
    async def fails() -> None:
        raise StreamTerminatedError("reset")

    with trio.fail_after(5), pytest.raises(StreamTerminatedError, match="reset"):
        await cross(fails())


@in_loop
async def test_a_cancelled_caller_raises_cancelled_before_the_coroutine_starts() -> None:
    started: list[bool] = []

    async def never() -> None:
        started.append(True)

    with trio.CancelScope() as scope:
        scope.cancel()
        await cross(never())
    assert scope.cancelled_caught
    assert started == []  # and, closed, it raises no "never awaited" warning


@in_loop
async def test_a_coroutine_that_waits_gets_the_futures_result_at_its_await() -> None:
    loop = asyncio.get_running_loop()
    seen: list[object] = []

    async def waits() -> str:
        future: asyncio.Future[str] = loop.create_future()
        loop.call_soon(future.set_result, "first")
        seen.append(await future)
        await asyncio.sleep(0)  # a bare yield, after the task took over
        second: asyncio.Future[str] = loop.create_future()
        loop.call_soon(second.set_exception, StreamTerminatedError("broken"))
        try:
            await second
        except StreamTerminatedError as exc:
            seen.append(str(exc))
        return "done"

    with trio.fail_after(5):
        assert await cross(waits()) == "done"
    assert seen == ["first", "broken"]


@in_loop
async def test_cancelling_the_trio_caller_cancels_the_wait_inside_the_coroutine() -> None:
    loop = asyncio.get_running_loop()
    waiting = trio.Event()
    outcome: list[str] = []

    async def waits_forever() -> None:
        future: asyncio.Future[None] = loop.create_future()
        loop.call_soon(waiting.set)
        try:
            await future
        except asyncio.CancelledError:
            outcome.append(f"cancelled at the await; future cancelled: {future.cancelled()}")
            raise

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:

            async def caller() -> None:
                await cross(waits_forever())

            nursery.start_soon(caller)
            await waiting.wait()
            nursery.cancel_scope.cancel()
    assert outcome == ["cancelled at the await; future cancelled: True"]


@in_loop
async def test_grpclibs_wrapper_sees_one_task_for_the_whole_call_and_can_interrupt_it() -> None:
    """grpclib's Wrapper (every client stream operation runs in one) records the current task
    on entry, discards it on exit, and cancels it when the stream is reset: both before the
    coroutine first waits (in the trio task) and after (in the asyncio task)."""
    loop = asyncio.get_running_loop()
    wrapper = Wrapper()
    waiting = trio.Event()

    async def quick() -> str:
        with wrapper:
            return "quick"

    async def waits() -> None:
        with wrapper:
            await asyncio.sleep(0)  # the asyncio task takes over here
            future: asyncio.Future[None] = loop.create_future()
            loop.call_soon(waiting.set)
            await future

    with trio.fail_after(5):
        assert await cross(quick()) == "quick"
        assert not wrapper._tasks  # the same task left as entered
        async with trio.open_nursery() as nursery:
            errors: list[BaseException] = []

            async def caller() -> None:
                try:
                    await cross(waits())
                except StreamTerminatedError as exc:
                    errors.append(exc)

            nursery.start_soon(caller)
            await waiting.wait()
            wrapper.cancel(StreamTerminatedError("the connection was lost"))
    assert [str(e) for e in errors] == ["the connection was lost"]
    assert not wrapper._tasks


@in_loop
async def test_a_wrapper_cancel_before_the_asyncio_task_starts_still_interrupts_the_wait() -> None:
    loop = asyncio.get_running_loop()
    wrapper = Wrapper()

    async def waits() -> None:
        with wrapper:
            future: asyncio.Future[None] = loop.create_future()
            # Queued now, runs before the task that will resume this coroutine has started.
            loop.call_soon(wrapper.cancel, StreamTerminatedError("reset early"))
            await future

    with trio.fail_after(5), pytest.raises(StreamTerminatedError, match="reset early"):
        await cross(waits())


@pytest.mark.parametrize("ending", ["received", "cancelled"])
@in_loop
async def test_a_coroutine_that_waited_leaves_no_cycle_holding_what_it_received(
    ending: str,
) -> None:
    """The asyncio task, the rest of the coroutine and the stand-in refer to each other while
    the call runs, and a CancelledError thrown in holds the frames it passed; once the call
    is over, none of them waits for a cyclic collection to be freed (that held every batch
    bench_wire's server read)."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    async def waits() -> int:  # as grpclib's Buffer.read waits for data
        held = bytearray(100_000)  # noqa: F841  (what a cycle would keep)
        return len(await queue.get())

    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with trio.fail_after(5):
            if ending == "received":
                asyncio.get_running_loop().call_soon(queue.put_nowait, b"x" * 100_000)
                assert await cross(waits()) == 100_000
            else:
                with trio.move_on_after(0.01):
                    await cross(waits())
            await trio.lowlevel.checkpoint()
        gc.collect()
        left = {type(o).__name__ for o in gc.garbage} & {
            "_StandIn",
            "_Resumed",
            "Task",
            "bytearray",
        }
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not left


@in_loop
async def test_asyncio_timeout_works_inside_a_crossed_coroutine() -> None:
    """asyncio.timeout cancels the current task and takes the cancel back (uncancel,
    cancelling): the stand-in passes all of it to the task that runs the coroutine."""
    loop = asyncio.get_running_loop()

    async def times_out() -> str:
        try:
            async with asyncio.timeout(0.01):
                await loop.create_future()
        except TimeoutError:
            return "timed out"
        return "not reached"

    with trio.fail_after(5):
        assert await cross(times_out()) == "timed out"


@in_loop
async def test_a_bad_yield_is_thrown_into_the_coroutine_as_a_task_would() -> None:
    class _Yields42:
        def __await__(self) -> Generator[Any, None, None]:
            yield 42

    async def yields_badly() -> str:
        try:
            await _Yields42()
        except RuntimeError as exc:
            return str(exc)
        return "not reached"

    with trio.fail_after(5):
        assert await cross(yields_badly()) == "Task got bad yield: 42"


@in_loop
async def test_closing_the_rest_of_a_coroutine_runs_its_handlers_under_the_stand_in() -> None:
    """A coroutine thrown away unfinished (its task never ran: ``close``) still exits
    grpclib's Wrapper, which asserts that some task is current."""
    from wire._bridge._crossing import _Resumed, _StandIn

    loop = asyncio.get_running_loop()
    wrapper = Wrapper()
    exited: list[bool] = []

    async def waits() -> None:
        with wrapper:
            try:
                await loop.create_future()
            finally:
                exited.append(True)

    coro = waits()
    stand_in = _StandIn(loop)
    pending = stand_in.step(coro, None)
    rest: _Resumed[None] = _Resumed(coro, pending, stand_in)
    rest.close()
    assert exited == [True]
    assert not wrapper._tasks
