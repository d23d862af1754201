"""tests/_procs.py: a child a test starts is ended and reaped however the test's block ends
(warnings are errors, so a child left running would fail a later test)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from ._procs import Role, open_logged, open_process

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


_GRACEFUL = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "print('handler set', flush=True)\n"
    "print('on stderr', file=sys.stderr, flush=True)\n"
    "time.sleep(60)\n"
)


async def test_a_logged_child_is_waited_for_by_line_and_signalled(tmp_path: Path) -> None:
    log = tmp_path / "child.log"
    with trio.fail_after(30):
        async with (
            trio.open_nursery() as nursery,
            open_logged(nursery, "child", [sys.executable, "-c", _GRACEFUL], log) as child,
        ):
            assert (await child.wait_for(r"handler (\w+)")).group(1) == "set"
            await child.wait_for("on stderr")  # stdout and stderr, merged
            code, seconds = await child.signal_and_wait(signal.SIGTERM, within=20)
            assert (code, child.returncode) == (0, 0)
            assert 0 <= seconds < 20
            with pytest.raises(AssertionError, match="exited \\(0\\) without logging 'never'"):
                await child.wait_for("never")
    assert log.read_text().splitlines() == ["handler set", "on stderr"]


async def test_a_role_starts_again_and_is_signalled_once_ready(tmp_path: Path) -> None:
    log = tmp_path / "role.log"
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            role = Role(nursery, "child", [sys.executable, "-c", _GRACEFUL], log, ready="set")
            try:
                await role.start()
                assert role.current is not None
                await role.current.wait_for("set")
                assert await role.kill() == -signal.SIGKILL
                assert role.exited() == -signal.SIGKILL
                await role.start()  # a new process; the log has both
                code, seconds, ready = await role.terminate(20)
                assert (code, ready) == (0, True)
                assert seconds < 20
            finally:
                await role.aclose()
    text = log.read_text()
    assert role.starts == 2
    assert text.count("handler set") == 2
    assert text.index("--- start 1 of child") < text.index("--- start 2 of child")
