"""JSON files two bench processes hand each other (kubesim's process tells the bench what it
built; a host of agents tells it its counts): written whole or not at all, polled for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

__all__ = ["read_json", "write_json"]


def write_json(path: Path, value: dict[str, Any]) -> None:
    """Write ``path`` whole or not at all (another process polls for it)."""
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(value))
    partial.rename(path)


async def read_json(
    path: Path, limit: float, process: trio.Process, poll: float = 0.1
) -> dict[str, Any]:
    """Poll for ``path`` (written by ``process``) for up to ``limit`` seconds; raises
    RuntimeError at once if ``process`` ended first."""
    found = trio.Path(path)
    with trio.fail_after(limit):
        while not await found.exists():
            if process.poll() is not None:
                raise RuntimeError(f"{process.args!r} ended ({process.returncode})")
            await trio.sleep(poll)
    value: dict[str, Any] = json.loads(await found.read_text())
    return value
