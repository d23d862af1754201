"""How trio code runs one of grpclib's coroutines: in its own task while nothing waits.

Theory of operation. ``trio_asyncio.aio_as_trio`` runs a coroutine as an asyncio task and
waits for it: three trio scheduling rounds and an asyncio task per call, ~130 us on this
machine in 2026-11 (more than grpclib's own work for a small message). Most of the bridge's
calls never wait, though: a send with flow-control credit writes to the transport's buffer
and returns, and a receive whose bytes have arrived takes them from grpclib's queue.
:func:`cross` steps the coroutine in the calling trio task (trio-asyncio's loop is the
running asyncio loop there, so the futures grpclib makes belong to it); only when the
coroutine yields a future, i.e. must wait for the network, does it move onto the loop, where
an asyncio task resumes it exactly where it stopped (:class:`_Resumed`).

Both ways the coroutine runs under asyncio's rules: its steps run with the loop running, a
future's outcome reaches it at its ``await``, and cancelling the trio caller cancels the
future it waits on, as cancelling its task would. grpclib also needs to know the task a call
runs in (its ``Wrapper`` cancels that task when the stream is reset or the connection lost):
a :class:`_StandIn` is the coroutine's current task at every step, here and on the loop,
and passes a cancel on to the asyncio task that runs the coroutine once there is one.
asyncio's ``_enter_task``/``_leave_task`` (what a task's own step calls) make it current;
tests/wire/test_grpclib_seams.py checks that they still do.

Trio's rules hold too: a cancelled caller raises Cancelled before the coroutine starts, and
every call that returns is a schedule point (a sender in a loop of calls that never wait
still lets the other tasks run).

No reference cycle outlives a call, whichever way it ends: the task, the rest of the
coroutine and the stand-in refer to each other while it runs, and an exception thrown in
holds the frames that hold it. Either would keep what the coroutine received (a whole
batch) until a cyclic collection; the links are cut as the call ends.
"""

from __future__ import annotations

import asyncio
import collections.abc
from asyncio.tasks import _enter_task, _leave_task
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar, cast

import trio
import trio_asyncio

from ._loop import require_loop

__all__ = ["cross"]

_T = TypeVar("_T")


async def cross(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run the asyncio coroutine ``coro`` to its end for the calling trio task; return its
    value or raise its exception. The caller must be inside the bridge's loop (open_loop)."""
    try:
        require_loop("a call into grpclib")
        await trio.lowlevel.checkpoint_if_cancelled()
    except BaseException:
        coro.close()  # never started: close it, or Python warns it was never awaited
        raise
    loop = trio_asyncio.current_loop.get()
    stand_in = _StandIn(loop)
    try:
        waits_on = stand_in.step(coro, None)
    except StopIteration as finished:
        value: _T = finished.value
    else:
        result: _T = await loop.run_aio_coroutine(_Resumed(coro, waits_on, stand_in))
        return result
    await trio.lowlevel.cancel_shielded_checkpoint()
    return value


class _StandIn:
    """The current task, as far as the coroutine's code can tell, at each of its steps.

    grpclib's Wrapper records ``asyncio.current_task()`` on entry and calls its ``cancel()``
    to interrupt the wait (stream reset, connection lost, deadline). Before the coroutine has
    an asyncio task of its own, a cancel is kept and applied when :meth:`adopt` gives it one.
    """

    __slots__ = ("_pending_cancel", "loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.task: asyncio.Task[Any] | None = None
        self._pending_cancel: tuple[Any, ...] | None = None

    def cancel(self, msg: Any = None) -> bool:
        if self.task is not None:
            return self.task.cancel(msg)
        self._pending_cancel = (msg,)
        return True

    # What asyncio.timeout() and TaskGroup ask of the current task besides cancel() (grpclib
    # uses neither today). Before there is a task, at most one cancel is pending.

    def cancelling(self) -> int:
        if self.task is not None:
            return self.task.cancelling()
        return 1 if self._pending_cancel is not None else 0

    def uncancel(self) -> int:
        if self.task is not None:
            return self.task.uncancel()
        self._pending_cancel = None
        return 0

    def adopt(self, task: asyncio.Task[Any], *, apply_pending: bool) -> None:
        """From now on the coroutine runs in ``task``: cancels go to it, and one asked for
        before (``apply_pending``) lands at the coroutine's next wait, as asyncio's would."""
        self.task = task
        if apply_pending and self._pending_cancel is not None:
            task.cancel(*self._pending_cancel)

    def step(self, coro: Coroutine[Any, Any, Any], thrown: BaseException | None) -> Any:
        """One step of ``coro`` (``send(None)``, or ``throw(thrown)``) with the stand-in as its
        loop's current task. Returns what it yielded; raises what it raised, StopIteration at
        its end."""
        try:
            if thrown is not None:
                return self.as_current(coro.throw, thrown)
            return self.as_current(coro.send, None)
        finally:
            thrown = None  # an exception leaving here holds this frame: not itself too

    def as_current(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` with the stand-in as its loop's current task; the task that was
        current (the one running the coroutine, or none in the trio task) steps aside
        meanwhile. A plain function, not a generator-based context manager: the StopIteration
        that ends every call would leave that as a RuntimeError (PEP 479) for contextlib to
        unwrap."""
        loop = self.loop
        running = asyncio.current_task(loop)
        me = cast("asyncio.Task[Any]", self)  # asyncio stores it and hands it out, no more
        if running is not None:
            _leave_task(loop, running)
        _enter_task(loop, me)
        try:
            return call(*args)
        finally:
            _leave_task(loop, me)
            if running is not None:
                _enter_task(loop, running)
            # An exception leaving here holds this frame: let it not hold itself (in
            # ``args``), the task or the stand-in (see the module docstring on cycles).
            args = ()
            running = me = None  # type: ignore[assignment]


class _Resumed(collections.abc.Coroutine[Any, Any, _T]):
    """The rest of a coroutine that yielded in the trio task, run as an asyncio task's coroutine.

    The task drives this object with ``send``/``throw`` as it would a coroutine; each call
    resumes the inner coroutine, which yielded from inside an ``await``: a future (asyncio's
    ``Future.__await__``), or None for a bare yield (``asyncio.sleep(0)``). ``send(None)``
    comes when the future it waits on is done: resuming it with ``send(None)`` makes that
    ``await`` take the future's outcome, as a task's wakeup would. ``throw`` comes with the
    future's exception or the task's cancellation, even before the first ``send`` (a task
    cancelled before it ran): it is thrown into the inner coroutine at its ``await``, so
    every way out runs the inner coroutine's own handlers (grpclib's included).
    """

    __slots__ = ("_coro", "_handed_out", "_stand_in", "_waits_on")

    def __init__(self, coro: Coroutine[Any, Any, _T], waits_on: Any, stand_in: _StandIn) -> None:
        self._coro = coro
        self._waits_on = waits_on
        self._handed_out = False
        self._stand_in = stand_in

    def send(self, value: Any) -> Any:
        if not self._handed_out:
            return self._hand_out()
        return self._resume(None)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else typ() if val is None else val
        try:
            if not self._handed_out:
                # Cancelled before the task ever waited: as if it had, the future it would
                # have waited on is cancelled too; a cancel the stand-in was asked for is moot.
                self._adopt(apply_pending=False)
                future = self._waits_on
                if isinstance(exc, asyncio.CancelledError) and future is not None:
                    future.cancel()
            return self._resume(exc)
        finally:
            exc = typ = val = None  # not kept by the traceback of what it raises

    def close(self) -> None:
        """Close the inner coroutine (its task is being thrown away unfinished). Its handlers
        run with the stand-in current: grpclib's Wrapper asserts some task is."""
        self._stand_in.as_current(self._coro.close)

    def __await__(self) -> Generator[Any, None, _T]:
        raise TypeError("_Resumed is driven by its asyncio task, not awaited")

    def _adopt(self, *, apply_pending: bool) -> None:
        if self._stand_in.task is None:
            task = asyncio.current_task()
            assert task is not None, "a _Resumed runs as an asyncio task's coroutine"
            self._stand_in.adopt(task, apply_pending=apply_pending)

    def _hand_out(self) -> Any:
        """Give the task what the inner coroutine waits on: a pending future (the task waits
        for it), or a bare yield for one already done, so that the callbacks its completion
        queued run first (asyncio's socket calls, for one, remove their reader or writer
        there, before the awaiting task may go on)."""
        self._adopt(apply_pending=True)
        self._handed_out = True
        future = self._waits_on
        if getattr(future, "_asyncio_future_blocking", None) is None:
            # A bare yield (None), or something no task can wait on: the task answers that
            # with "bad yield", thrown into the coroutine, as it would have been.
            return future
        if future.done():
            return None
        future._asyncio_future_blocking = True  # what makes the task wait on it
        return future

    def _resume(self, thrown: BaseException | None) -> Any:
        stand_in = self._stand_in
        assert stand_in.task is not None
        try:
            self._waits_on = stand_in.step(self._coro, thrown)
        except BaseException:  # StopIteration (the task's result) included: it is over
            # The task holds this object, which holds the stand-in, which held the task: a
            # cycle that kept the last future, and the message it carried, until a collection.
            self._waits_on = None
            stand_in.task = None
            raise
        finally:
            thrown = None  # not kept by the traceback of what it raises
        self._handed_out = False
        return self._hand_out()
