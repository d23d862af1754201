"""The agent process (``python -m kubesvc agent``) outlives a server address that accepts and
resets every connection, and connects once the real server answers there (issue #12, point 1:
the process used to exit with grpclib's AttributeError within a second, every time)."""

from __future__ import annotations

import functools
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import trio
import yaml

import server
import wire
from tests.agent.fault_listeners import FaultListener, reset_after
from tests.e2e.harness import agent_config

ROOT = Path(__file__).resolve().parents[2]
RESETS = 12  # connections reset before the real server takes the port
# How long after the accept each reset comes, in turn: the old defect needed the reset to land
# just after the agent's connect returned (in-process, tests/agent/test_link_faults.py hits it
# every time; across processes these spread it over the steps of the agent's setup).
RESET_DELAYS = (0.0, 0.00025, 0.0005, 0.001, 0.002)
_OUTPUT_LIMIT = 1 << 20  # the agent's log kept for the assertions (it logs a few KB here)


class _Output:
    """What the agent process writes (stdout and stderr), read as it comes."""

    def __init__(self) -> None:
        self.data = bytearray()
        self._changed = trio.Event()

    async def read(self, stream: trio.abc.ReceiveStream) -> None:
        while chunk := await stream.receive_some():
            self.data += chunk[: max(0, _OUTPUT_LIMIT - len(self.data))]
            self._changed.set()
            self._changed = trio.Event()

    async def wait_for(self, text: str) -> None:
        while text.encode() not in self.data:
            await self._changed.wait()

    def text(self) -> str:
        return self.data.decode(errors="replace")


async def _must_keep_running(
    process: trio.Process, output: _Output, watch: trio.CancelScope
) -> None:
    """Fail the test the moment the agent exits (the defect), with what it wrote; cancel
    ``watch`` before ending the agent on purpose."""
    with watch:
        await process.wait()
        raise AssertionError(f"the agent exited with {process.returncode}:\n{output.text()}")


async def _end(process: trio.Process) -> None:
    """Stop the agent and wait for it, whatever happened to the test (shielded, bounded)."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with trio.move_on_after(10):
                await process.wait()
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_the_agent_process_survives_resets_and_connects_when_the_server_answers(
    tmp_path: Path,
) -> None:
    listener = FaultListener(reset_after(RESET_DELAYS))
    output = _Output()
    with trio.fail_after(60):
        async with wire.open_loop(), trio.open_nursery() as nursery:
            bad: trio.CancelScope = await nursery.start(listener.serve)
            config = agent_config(
                listener.port,
                [],
                clouddriver={"backoff": {"baseDelay": "50ms", "maxDelay": "200ms"}},
                logging={"level": "INFO"},
            )
            config_path = tmp_path / "kubesvc.yaml"
            config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "kubesvc", "agent", "-c", str(config_path)],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            assert process.stdout is not None
            watch = trio.CancelScope()
            try:
                nursery.start_soon(output.read, process.stdout)
                nursery.start_soon(_must_keep_running, process, output, watch)
                # The agent came back after each of the first RESETS resets: it is alive.
                await listener.wait_connections(RESETS + 1)
                assert process.poll() is None, output.text()
                bad.cancel()
                await trio.lowlevel.checkpoint()
                base = server.ServerConfig()
                server_config = replace(
                    base,
                    grpc=replace(base.grpc, host="127.0.0.1", port=listener.port),
                    store=replace(base.store, url="sqlite://:memory:"),
                )
                running: server.RunningServer = await nursery.start(
                    functools.partial(server.run_server, server_config)
                )
                await output.wait_for("connected to server")
                assert [agent.agent_id for agent in running.state.sessions.agents()]
                assert process.poll() is None, output.text()
            finally:
                watch.cancel()
                await _end(process)
                nursery.cancel_scope.cancel()
        await process.stdout.aclose()  # the reader is done: its nursery is
    text = output.text()
    assert "Traceback" not in text, text
    assert "AttributeError" not in text, text
    lost = [line for line in text.splitlines() if f"127.0.0.1:{listener.port} lost" in line]
    assert len(lost) >= RESETS, text
