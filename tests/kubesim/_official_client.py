"""Calling the official (blocking) kubernetes client from trio tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one blocking client call in a worker thread (the server runs in this trio loop).

    Returns Any: the client's models type every field Optional, which tests need not prove."""
    return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs))
