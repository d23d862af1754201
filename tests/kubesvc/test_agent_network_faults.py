"""The agent process (``python -m kubesvc agent``) outlives a server address that accepts and
resets every connection, and connects once the real server answers there (issue #12, point 1:
the process used to exit with grpclib's AttributeError within a second, every time)."""

from __future__ import annotations

import functools
import signal
from dataclasses import replace
from pathlib import Path

import trio
import yaml

import server
import wire
from tests._procs import LoggedProcess, kubesvc_command, open_logged
from tests.agent.fault_listeners import FaultListener, reset_after
from tests.e2e.harness import agent_config

RESETS = 12  # connections reset before the real server takes the port
# How long after the accept each reset comes, in turn: the old defect needed the reset to land
# just after the agent's connect returned (in-process, tests/agent/test_link_faults.py hits it
# every time; across processes these spread it over the steps of the agent's setup).
RESET_DELAYS = (0.0, 0.00025, 0.0005, 0.001, 0.002)


async def _must_keep_running(agent: LoggedProcess, watch: trio.CancelScope) -> None:
    """Fail the test the moment the agent exits (the defect), with what it wrote; cancel
    ``watch`` before ending the agent on purpose."""
    with watch:
        await agent.process.wait()
        raise AssertionError(f"the agent exited with {agent.returncode}:\n{agent.output()}")


async def test_the_agent_process_survives_resets_and_connects_when_the_server_answers(
    tmp_path: Path,
) -> None:
    listener = FaultListener(reset_after(RESET_DELAYS))
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
            command = kubesvc_command("agent", "-c", str(config_path))
            async with open_logged(
                nursery, "agent", command, tmp_path / "agent.log", stop_signal=signal.SIGTERM
            ) as agent:
                watch = trio.CancelScope()
                nursery.start_soon(_must_keep_running, agent, watch)
                try:
                    # The agent came back after each of the first RESETS resets: it is alive.
                    await listener.wait_connections(RESETS + 1)
                    assert agent.process.poll() is None, agent.output()
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
                    await agent.wait_for("connected to server")
                    assert [session.agent_id for session in running.state.sessions.agents()]
                    assert agent.process.poll() is None, agent.output()
                finally:
                    watch.cancel()
            nursery.cancel_scope.cancel()
    text = agent.output()
    assert "Traceback" not in text, text
    assert "AttributeError" not in text, text
    lost = [line for line in text.splitlines() if f"127.0.0.1:{listener.port} lost" in line]
    assert len(lost) >= RESETS, text
