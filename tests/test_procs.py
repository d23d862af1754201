"""tests/_procs.py: a child a test starts is ended and reaped however the test's block ends
(warnings are errors, so a child left running would fail a later test)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import trio

from ._procs import open_process

_SLEEPER = "import time; print('ready', flush=True); time.sleep(60)"
_STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print('ready', flush=True); time.sleep(60)"
)


async def _ready(process: trio.Process) -> None:
    assert process.stdout is not None
    assert (await process.stdout.receive_some(6)).startswith(b"ready")


async def test_a_cancelled_block_ends_and_reaps_the_child() -> None:
    with trio.move_on_after(60) as scope:
        async with open_process([sys.executable, "-c", _SLEEPER], stdout=subprocess.PIPE) as child:
            await _ready(child)
            scope.cancel()
            await trio.sleep_forever()
    assert child.returncode == -signal.SIGTERM


async def test_a_failed_block_kills_a_child_that_ignores_the_stop_signal() -> None:
    children: list[trio.Process] = []

    async def fail_with_a_stubborn_child() -> None:
        async with open_process(
            [sys.executable, "-c", _STUBBORN], stdout=subprocess.PIPE, grace=0.5
        ) as child:
            children.append(child)
            await _ready(child)
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        await fail_with_a_stubborn_child()
    assert children[0].returncode == -signal.SIGKILL
