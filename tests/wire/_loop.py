"""Run a trio test inside wire.open_loop().

A pytest-trio fixture cannot provide the loop: fixtures run in their own tasks, and the
trio-asyncio loop is found through a context variable that does not cross tasks.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import ParamSpec

import wire

P = ParamSpec("P")


def in_loop(test: Callable[P, Awaitable[None]]) -> Callable[P, Awaitable[None]]:
    """Decorate an async test so that its body runs with the bridge's asyncio loop open."""

    @functools.wraps(test)
    async def run(*args: P.args, **kwargs: P.kwargs) -> None:
        async with wire.open_loop():
            await test(*args, **kwargs)

    return run
