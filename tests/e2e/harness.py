"""Real parts, wired together on loopback: kubesim, the server and the agent.

``open_stack`` starts kubesim (HTTP, token auth), the server (gRPC + REST on port 0, SQLite
in ``tmp_path``) and an agent whose config file points at both, and yields a ``Stack`` with
the handles the tests need. Everything runs in the test's own trio loop (with the bridge's
asyncio loop open) and stops when the block exits.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

import agent
import kubesim
import server
import server.api
import wire
from agent import Agent
from server import ServerConfig

# The e2e tests' one way to wait for state a real component shows but does not signal.
from .._wait import wait_until as wait_until
from .ops_client import OrcaClient


@dataclass
class Stack:
    sim: kubesim.Cluster
    kube: Any  # kubesim's running server (url, requests, faults)
    server: server.RunningServer
    agent: agent.Agent
    config_path: Path
    kubeconfig: Path
    nursery: trio.Nursery
    extra: dict[str, Any] = field(default_factory=dict)
    server_task: Task | None = None  # stop_server()/start_server() restart the server
    agent_task: Task | None = None  # stop() it to kill the agent (like a crashed pod)
    server_config: ServerConfig | None = None
    clouddriver: dict[str, Any] = field(default_factory=dict)

    @property
    def store(self) -> Any:
        return self.server.state.store

    def write_config(self, accounts: Sequence[dict[str, Any]], **top: Any) -> None:
        """Rewrite the agent's config file (the live-reload tests swap accounts this way)."""
        self.config_path.write_text(self.config_text(accounts, **top), encoding="utf-8")

    def config_text(self, accounts: Sequence[dict[str, Any]], **top: Any) -> str:
        """An agent config for this stack's server (the first agent's clouddriver settings,
        updated by ``top["clouddriver"]`` when given)."""
        clouddriver = {**self.clouddriver, **top.pop("clouddriver", {})}
        config = agent_config(self.server.grpc_port, accounts, clouddriver=clouddriver, **top)
        return yaml.safe_dump(config)

    async def start_agent(
        self, agent_id: str, accounts: Sequence[dict[str, Any]] | None = None, **top: Any
    ) -> tuple[Agent, Task]:
        """Another agent (its own config file, agent id ``agent_id``) in this stack."""
        config_path = self.config_path.with_name(f"{agent_id}.yaml")
        accounts = accounts or [{"name": "k1", "kubeConfigFile": str(self.kubeconfig)}]
        config_path.write_text(self.config_text(accounts, **top), encoding="utf-8")
        found: tuple[Agent, Task] = await start_task(
            self.nursery, _agent_runner(config_path, agent_id)
        )
        return found

    async def stop_server(self) -> None:
        assert self.server_task is not None
        await self.server_task.stop()

    async def start_server(self) -> None:
        """Start the server again on the same ports and SQLite file (after stop_server)."""
        assert self.server_config is not None
        config = replace(
            self.server_config,
            grpc=replace(self.server_config.grpc, port=self.server.grpc_port),
            api=replace(self.server_config.api, port=self.server.api_port or 0),
        )
        self.server, self.server_task = await start_task(self.nursery, _server_runner(config))


@dataclass
class Task:
    """A task started under its own cancel scope, so that a test can end it alone."""

    scope: trio.CancelScope
    done: trio.Event

    async def stop(self) -> None:
        """Cancel it and wait until it has finished (its sockets are closed then)."""
        self.scope.cancel()
        await self.done.wait()


async def start_task(nursery: trio.Nursery, starter: Any) -> tuple[Any, Task]:
    """``await nursery.start(starter)`` under a scope of its own: (what it reported, Task)."""

    async def run(*, task_status: trio.TaskStatus[tuple[Any, Task]]) -> None:
        task = Task(trio.CancelScope(), trio.Event())
        try:
            with task.scope:
                await starter(task_status=_TaskRelay(task_status, task))
        finally:
            task.done.set()

    found: tuple[Any, Task] = await nursery.start(run)
    return found


def _server_runner(config: server.ServerConfig) -> Any:
    async def run(*, task_status: Any) -> None:
        await server.run_server(config, serve_api=server.api.serve_api, task_status=task_status)

    return run


def _agent_runner(config_path: Path, agent_id: str) -> Any:
    environ = {**os.environ, "POD_NAME": agent_id}

    async def run(*, task_status: Any) -> None:
        await agent.run_agent(
            str(config_path), environ=environ, reload_poll_seconds=0.2, task_status=task_status
        )

    return run


#: In ``clouddriver={"grpcAddresses": [...]}``, the server's own address (its port is known
#: only once it listens).
SERVER_ADDRESS = "<the server>"


def agent_config(
    grpc_port: int,
    accounts: Sequence[dict[str, Any]],
    *,
    clouddriver: dict[str, Any] | None = None,
    **top: Any,
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "clouddriver": {
            "grpc": f"127.0.0.1:{grpc_port}",
            "insecure": True,
            "keepAliveHeartbeatSeconds": 5,
            "backoff": {"baseDelay": "100ms", "maxDelay": "1s"},
            **(clouddriver or {}),
        },
        "kubernetes": {"accounts": list(accounts)},
        "budget": {"bytes": "8Mi"},
        "server": {"host": "127.0.0.1", "port": 0},
        "prometheus": {"enabled": True, "port": 0},
    }
    addresses = config["clouddriver"].get("grpcAddresses")
    if addresses is not None:
        # Several addresses instead of one: SERVER_ADDRESS among them is this server's.
        del config["clouddriver"]["grpc"]
        config["clouddriver"]["grpcAddresses"] = [
            f"127.0.0.1:{grpc_port}" if a == SERVER_ADDRESS else a for a in addresses
        ]
    config.update(top)
    return config


@asynccontextmanager
async def open_stack(
    tmp_path: Path,
    *,
    accounts: Sequence[dict[str, Any]] | None = None,
    sim: kubesim.Cluster | None = None,
    server_config: server.ServerConfig | None = None,
    clouddriver: dict[str, Any] | None = None,
    agent_id: str = "agent-a",
    kube_tls: bool = True,
    **agent_top: Any,
) -> AsyncIterator[Stack]:
    """kubesim (over HTTPS with a CA and a token, as a real cluster; plain HTTP when
    ``kube_tls`` is off) + the server + one agent (id ``agent_id``).

    ``clouddriver`` adds to the agent's clouddriver section (TLS, auth); ``server_config``
    keeps its TLS/auth and accounts settings, and gets loopback ports and a SQLite file in
    ``tmp_path``."""
    sim = sim or kubesim.Cluster()
    base = server_config or server.ServerConfig()
    config = replace(
        base,
        grpc=replace(base.grpc, host="127.0.0.1", port=0),
        api=replace(base.api, host="127.0.0.1", port=0),
        store=replace(base.store, url=server.store.sqlite_url(str(tmp_path / "server.db"))),
    )
    async with (
        wire.open_loop(),
        kubesim.open_server(sim, host="127.0.0.1", port=0, tls=kube_tls) as kube,
    ):
        kubeconfig = tmp_path / "kubeconfig"
        kube.kubeconfig(kubeconfig, user="admin")
        async with trio.open_nursery() as nursery:
            running, server_task = await start_task(nursery, _server_runner(config))
            config_path = tmp_path / "kubesvc.yaml"
            accounts = accounts or [{"name": "k1", "kubeConfigFile": str(kubeconfig)}]
            config_path.write_text(
                yaml.safe_dump(
                    agent_config(running.grpc_port, accounts, clouddriver=clouddriver, **agent_top)
                ),
                encoding="utf-8",
            )
            the_agent, agent_task = await start_task(nursery, _agent_runner(config_path, agent_id))
            yield Stack(
                sim,
                kube,
                running,
                the_agent,
                config_path,
                kubeconfig,
                nursery,
                server_task=server_task,
                agent_task=agent_task,
                server_config=config,
                clouddriver=dict(clouddriver or {}),
            )
            nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_orca(
    tmp_path: Path, *, http_timeout: float = 5.0, **stack_options: Any
) -> AsyncIterator[tuple[Stack, OrcaClient]]:
    """``open_stack(tmp_path, **stack_options)``, and an OrcaClient on its REST API (httpx,
    ``http_timeout`` a request, 5 s as httpx's default), once account k1 has a PRIMARY agent:
    what every test that drives operations as Orca does starts with."""
    async with open_stack(tmp_path, **stack_options) as stack:
        base = f"http://127.0.0.1:{stack.server.api_port}"
        async with httpx.AsyncClient(base_url=base, timeout=http_timeout) as http:
            await wait_until(
                lambda: stack.server.state.sessions.primary_session("k1") is not None,
                what="k1 has a PRIMARY agent",
            )
            yield stack, OrcaClient(http)


ObjectKey = tuple[str, str, str, str]  # (apiVersion, kind, namespace, name)


async def stored_objects(stack: Stack, account: str) -> dict[ObjectKey, dict[str, Any]]:
    """Every object the server holds for ``account``, keyed (apiVersion, kind, ns, name)."""
    found: dict[ObjectKey, dict[str, Any]] = {}
    token: str | None = None
    while True:
        page = await stack.store.query_objects(account=account, limit=1000, continue_token=token)
        for obj in page.objects:
            found[(obj.api_version, obj.kind, obj.namespace, obj.name)] = json.loads(obj.body)
        token = page.next_token
        if not token:
            return found


@dataclass
class ReceiverStack:
    sim: kubesim.Cluster
    kube: Any
    receiver: Any  # tests.e2e.receiver.Receiver
    agent: agent.Agent
    config_path: Path
    kubeconfig: Path
    grpc_port: int
    nursery: trio.Nursery
    receiver_scope: trio.CancelScope

    def write_config(self, accounts: Sequence[dict[str, Any]], **top: Any) -> None:
        self.config_path.write_text(
            yaml.safe_dump(agent_config(self.grpc_port, accounts, **top)), encoding="utf-8"
        )

    def stop_receiver(self) -> None:
        """Take the receiver down: its listener and every open call go away."""
        self.receiver_scope.cancel()

    async def start_receiver(self) -> None:
        """Serve the receiver again on the same port."""
        self.receiver_scope = await self.nursery.start(
            _serve_in_scope, self.receiver.handler, self.grpc_port
        )


async def _serve_in_scope(
    handler: Any, port: int, *, task_status: trio.TaskStatus[trio.CancelScope]
) -> None:
    with trio.CancelScope() as scope:
        await wire.serve(handler, "127.0.0.1", port, task_status=_Relay(task_status, scope))


class _Relay:
    """Reports the cancel scope instead of the port to the starter of _serve_in_scope."""

    def __init__(self, outer: trio.TaskStatus[trio.CancelScope], scope: trio.CancelScope) -> None:
        self._outer, self._scope = outer, scope
        self.port = 0

    def started(self, value: int = 0) -> None:
        self.port = value
        self._outer.started(self._scope)


class _TaskRelay:
    """Reports (value, Task) to the starter of start_task."""

    def __init__(self, outer: trio.TaskStatus[tuple[Any, Task]], task: Task) -> None:
        self._outer, self._task = outer, task

    def started(self, value: Any = None) -> None:
        self._outer.started((value, self._task))


@asynccontextmanager
async def open_receiver_stack(
    tmp_path: Path,
    receiver: Any,
    *,
    sim: kubesim.Cluster | None = None,
    accounts: Sequence[dict[str, Any]] | None = None,
    kube_tls: bool = True,
    **agent_top: Any,
) -> AsyncIterator[ReceiverStack]:
    """kubesim (over HTTPS unless ``kube_tls`` is off) + the real agent + a recording
    receiver (tests/e2e/receiver.py)."""
    sim = sim or kubesim.Cluster()
    async with (
        wire.open_loop(),
        kubesim.open_server(sim, host="127.0.0.1", port=0, tls=kube_tls) as kube,
    ):
        kubeconfig = tmp_path / "kubeconfig"
        kube.kubeconfig(kubeconfig, user="admin")
        async with trio.open_nursery() as nursery:
            # Bind once on port 0 to learn a free port, then serve under a scope of our own
            # so that tests can take the receiver down and bring it back on the same port.
            probe = trio.socket.socket()
            await probe.bind(("127.0.0.1", 0))
            grpc_port = probe.getsockname()[1]
            probe.close()
            receiver_scope = await nursery.start(_serve_in_scope, receiver.handler, grpc_port)
            config_path = tmp_path / "kubesvc.yaml"
            accounts = accounts or [{"name": "k1", "kubeConfigFile": str(kubeconfig)}]
            config_path.write_text(
                yaml.safe_dump(agent_config(grpc_port, accounts, **agent_top)), encoding="utf-8"
            )
            the_agent = await nursery.start(
                lambda task_status: agent.run_agent(
                    str(config_path), reload_poll_seconds=0.2, task_status=task_status
                )
            )
            yield ReceiverStack(
                sim,
                kube,
                receiver,
                the_agent,
                config_path,
                kubeconfig,
                grpc_port,
                nursery,
                receiver_scope,
            )
            nursery.cancel_scope.cancel()


def churned(churn: kubesim.Churn) -> int:
    """How many changes ``churn`` has made so far."""
    stats = churn.statistics()
    return stats.created + stats.updated + stats.deleted


async def wait_churned(churn: kubesim.Churn, changes: int) -> None:
    """Wait until ``churn`` (running elsewhere) has made ``changes`` changes in all.

    A fixed amount of work, not of time: on a loaded machine churn just takes longer.
    """
    await wait_until(lambda: churned(churn) >= changes, what=f"churn made {changes} changes")


async def run_churn(churn: kubesim.Churn, changes: int) -> kubesim.ChurnStatistics:
    """Run ``churn`` until it has made ``changes`` changes; return its statistics."""
    async with trio.open_nursery() as nursery:
        await nursery.start(churn.run)
        await wait_churned(churn, changes)
        nursery.cancel_scope.cancel()
    return churn.statistics()
