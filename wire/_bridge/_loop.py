"""The asyncio loop grpclib runs on, inside trio: opened once, found by every crossing.

Theory of operation. Every process runs trio; :func:`open_loop` runs trio-asyncio's loop for
the duration of a block (opened once at the entry point, or per test). A crossing from trio
into asyncio is ``_crossing.cross``: free while grpclib's coroutine need not wait, an asyncio
task (~130 us) when it must, so the bridge crosses once per message or per batch, never per
event. The loop is found through a
context variable, which child tasks inherit: :func:`require_loop` turns "no loop" into an
error that says what is missing instead of trio-asyncio's. Opening the loop is also where
the process-wide settings the bridge depends on are made, once: glibc's malloc thresholds
(wire/_malloc.py) and grpclib's fast paths (_grpclib.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio_asyncio

from .._malloc import tune_malloc
from ._grpclib import install_fast_paths

__all__ = ["open_loop", "require_loop"]


@asynccontextmanager
async def open_loop() -> AsyncIterator[None]:
    """Run the asyncio loop the bridge needs, for the duration of the block. Open it once, at
    the process entry point (or per test). Also tunes glibc's malloc for the process (see
    _malloc.py: MiB-sized messages otherwise cost page faults on every copy) and installs
    grpclib's fast paths (see _grpclib.install_fast_paths)."""
    tune_malloc()
    install_fast_paths()
    async with trio_asyncio.open_loop():
        yield


def require_loop(what: str) -> None:
    """Raise RuntimeError naming ``what`` when no bridge loop is open in this task."""
    if trio_asyncio.current_loop.get() is None:
        raise RuntimeError(
            f"{what} needs the bridge's asyncio loop: run it inside `async with wire.open_loop()`"
            " (in this task or one of its parents)"
        )
