"""When a drain cannot finish: the bound, and a second signal (``kubesvc`` as processes).

A REST client that sent half a request body and then nothing keeps the server's drain from
finishing. Past ``shutdown.drainSeconds`` the server stops anyway, exits 0 and its store is
clean; a second SIGTERM ends the drain at once with exit code 143 (128 + SIGTERM), the code
docs/configuration.md documents.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import trio

import kubesim
from server.store import open_sqlite_store

from .._procs import LoggedProcess
from .drain_stack import (
    NAMESPACE,
    new_sim,
    open_kubesvc,
    server_config,
    server_ports,
    wait_converged,
    write_agent_config,
)

HALF_A_REQUEST = b"POST /armory/accounts HTTP/1.1\r\nhost: s\r\ncontent-length: 100\r\n\r\n{"


@asynccontextmanager
async def _server_holding_a_request(
    nursery: trio.Nursery, tmp_path: Path, config: Path
) -> AsyncIterator[tuple[LoggedProcess, trio.SocketStream]]:
    """A server process and a REST connection to it that sent half a request (a test may
    close it early); both closed, the server killed if it still runs, when the block ends."""
    server_args = ["server", "-c", str(config)]
    async with open_kubesvc(nursery, "server", server_args, tmp_path / "server.log") as server:
        _, api_port = await server_ports(server)
        stream = await trio.open_tcp_stream("127.0.0.1", api_port)
        async with stream:
            await stream.send_all(HALF_A_REQUEST)
            yield server, stream


async def _assert_clean(store: Path) -> None:
    wal = store.with_name(store.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0
    async with open_sqlite_store(str(store)) as reopened:
        assert await reopened.list_accounts() == []


async def test_the_drain_bound_stops_the_server_with_exit_0(tmp_path: Path) -> None:
    store = tmp_path / "server.db"
    bound = 1.5
    path = server_config(tmp_path, store, drain_seconds=bound)
    with trio.fail_after(60):
        async with (
            trio.open_nursery() as nursery,
            _server_holding_a_request(nursery, tmp_path, path) as (server, stream),
        ):
            async with stream:
                code, seconds = await server.signal_and_wait(signal.SIGTERM)
            assert code == 0, server.output()
            assert bound <= seconds < bound + 5, seconds
            await server.wait_for(r"did not finish within 1.5 s: stopping now")
            assert "Traceback" not in server.output()
        await _assert_clean(store)


async def test_a_second_sigterm_stops_a_drain_at_once_with_143(tmp_path: Path) -> None:
    store = tmp_path / "server.db"
    path = server_config(tmp_path, store, drain_seconds=60)
    with trio.fail_after(60):
        async with (
            trio.open_nursery() as nursery,
            _server_holding_a_request(nursery, tmp_path, path) as (server, stream),
        ):
            async with stream:
                server.process.send_signal(signal.SIGTERM)
                await server.wait_for(r"REST API: draining 1 connection")
                code, seconds = await server.signal_and_wait(signal.SIGTERM)
            assert code == 128 + signal.SIGTERM, server.output()
            assert seconds < 5, seconds
            await server.wait_for(r"SIGTERM received again, stopping now")
            assert "Traceback" not in server.output()
        await _assert_clean(store)


async def test_the_drain_bound_stops_an_agent_whose_server_froze(tmp_path: Path) -> None:
    """The server is frozen (SIGSTOP): no Ack, no end of the call. The agent's drain runs out
    at its bound, it exits 0 all the same, and after a restart nothing is lost."""
    sim = new_sim()
    churn = kubesim.Churn(sim, rate=1, kinds=("configmaps",), namespace=NAMESPACE, seed=5)
    for _ in range(20):
        churn.step()  # objects to sync: the agent has read them once the server holds them
    store = tmp_path / "server.db"
    server_yaml = server_config(tmp_path, store, drain_seconds=10)
    with trio.fail_after(90):
        async with (
            kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
            trio.open_nursery() as nursery,
            httpx.AsyncClient(timeout=10) as http,
            open_kubesvc(
                nursery, "server", ["server", "-c", str(server_yaml)], tmp_path / "s.log"
            ) as server,
        ):
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", user="admin")
            grpc_port, api_port = await server_ports(server)
            http.base_url = httpx.URL(f"http://127.0.0.1:{api_port}")
            agent_yaml = write_agent_config(tmp_path, grpc_port, kubeconfig, drain_seconds=2)
            agent_args = ["agent", "-c", str(agent_yaml)]
            async with open_kubesvc(nursery, "agent", agent_args, tmp_path / "a.log") as agent:
                await agent.wait_for(r"connected to server")
                await wait_converged(http, sim)
                server.process.send_signal(signal.SIGSTOP)
                try:
                    for _ in range(20):
                        churn.step()
                    code, seconds = await agent.signal_and_wait(signal.SIGTERM)
                finally:
                    server.process.send_signal(signal.SIGCONT)
                assert code == 0, agent.output()
                assert 2 <= seconds < 6, seconds
                await agent.wait_for(r"the drain did not finish within 2 s")
                assert "Traceback" not in agent.output()
            async with open_kubesvc(nursery, "agent", agent_args, tmp_path / "a.log") as agent:
                await agent.wait_for(r"connected to server")  # its signal handler is in place
                await wait_converged(http, sim)
                code, _ = await agent.signal_and_wait(signal.SIGTERM)
                assert code == 0, agent.output()
            code, _ = await server.signal_and_wait(signal.SIGTERM)
            assert code == 0, server.output()
