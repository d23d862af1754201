"""Waiting in tests: on a condition the code signals, or, where only polling can see it (a
child process's endpoint, state a real component exposes no signal for), by polling with a
deadline and a failure message that says what did not happen.

Both take their own bound (``timeout``), unlike the house rule for library code (deadlines
are the caller's cancel scopes): the point of these helpers is the message that names what
did not happen, which a test's outer ``fail_after`` cannot give.

Never a fixed sleep to "give it time": on a loaded machine no fixed time is enough, and on
an idle one it is wasted.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable

import trio

Predicate = Callable[[], bool] | Callable[[], Awaitable[bool]]


async def _holds(predicate: Predicate) -> bool:
    result = predicate()
    if inspect.isawaitable(result):
        return bool(await result)
    return bool(result)


async def wait_until(
    predicate: Predicate,
    *,
    timeout: float = 60.0,  # noqa: ASYNC109 (see the module doc)
    what: str = "",
    interval: float = 0.02,
) -> None:
    """Poll ``predicate`` (sync or async) every ``interval`` s until it holds.

    Raises AssertionError naming ``what`` (else the predicate) after ``timeout`` s.
    """
    with trio.move_on_after(timeout):
        while not await _holds(predicate):
            await trio.sleep(interval)
        return
    raise AssertionError(f"not true after {timeout} s: {what or predicate!r}")


class Changes:
    """A condition variable without a lock: code calls ``notify()`` whenever the state a test
    waits on may have changed; ``wait_for`` re-checks its predicate at each notification."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait_for(
        self,
        predicate: Callable[[], bool],
        *,
        timeout: float = 60.0,  # noqa: ASYNC109 (see the module doc)
        what: str = "",
    ) -> None:
        """Return once ``predicate()`` holds; AssertionError naming ``what`` after ``timeout`` s."""
        with trio.move_on_after(timeout):
            while not predicate():
                await self._event.wait()
            return
        raise AssertionError(f"not true after {timeout} s: {what or predicate!r}")
