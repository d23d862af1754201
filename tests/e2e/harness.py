"""Real parts, wired together on loopback: kubesim, the server and the agent.

``open_stack`` starts kubesim (HTTP, token auth), the server (gRPC + REST on port 0, SQLite
in ``tmp_path``) and an agent whose config file points at both, and yields a ``Stack`` with
the handles the tests need. Everything runs in the test's own trio loop (with the bridge's
asyncio loop open) and stops when the block exits.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import trio
import yaml

import agent
import kubesim
import server
import server.api
import wire


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

    @property
    def store(self) -> Any:
        return self.server.state.store

    def write_config(self, accounts: Sequence[dict[str, Any]], **top: Any) -> None:
        """Rewrite the agent's config file (the live-reload tests swap accounts this way)."""
        grpc_port = self.server.grpc_port
        self.config_path.write_text(
            yaml.safe_dump(agent_config(grpc_port, accounts, **top)), encoding="utf-8"
        )


def agent_config(grpc_port: int, accounts: Sequence[dict[str, Any]], **top: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "clouddriver": {
            "grpc": f"127.0.0.1:{grpc_port}",
            "insecure": True,
            "keepAliveHeartbeatSeconds": 5,
            "backoff": {"baseDelay": "100ms", "maxDelay": "1s"},
        },
        "kubernetes": {"accounts": list(accounts)},
        "budget": {"bytes": "8Mi"},
        "server": {"host": "127.0.0.1", "port": 0},
        "prometheus": {"enabled": True, "port": 0},
    }
    config.update(top)
    return config


@asynccontextmanager
async def open_stack(
    tmp_path: Path,
    *,
    accounts: Sequence[dict[str, Any]] | None = None,
    sim: kubesim.Cluster | None = None,
    server_config: server.ServerConfig | None = None,
    **agent_top: Any,
) -> AsyncIterator[Stack]:
    sim = sim or kubesim.Cluster()
    base = server_config or server.ServerConfig()
    config = replace(
        base,
        grpc=replace(base.grpc, host="127.0.0.1", port=0),
        api=replace(base.api, host="127.0.0.1", port=0),
        store=replace(base.store, path=str(tmp_path / "server.db")),
    )
    async with wire.open_loop(), kubesim.open_server(sim, host="127.0.0.1", port=0) as kube:
        kubeconfig = tmp_path / "kubeconfig"
        kube.kubeconfig(kubeconfig, user="admin")
        async with trio.open_nursery() as nursery:
            running = await nursery.start(
                lambda task_status: server.run_server(
                    config, serve_api=server.api.serve_api, task_status=task_status
                )
            )
            config_path = tmp_path / "kubesvc.yaml"
            accounts = accounts or [{"name": "k1", "kubeConfigFile": str(kubeconfig)}]
            config_path.write_text(
                yaml.safe_dump(agent_config(running.grpc_port, accounts, **agent_top)),
                encoding="utf-8",
            )
            the_agent = await nursery.start(
                lambda task_status: agent.run_agent(
                    str(config_path), reload_poll_seconds=0.2, task_status=task_status
                )
            )
            yield Stack(sim, kube, running, the_agent, config_path, kubeconfig, nursery)
            nursery.cancel_scope.cancel()


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


async def wait_until(predicate: Any, *, interval: float = 0.05) -> None:
    """Poll an async predicate until it holds (the caller bounds it with fail_after)."""
    while not await predicate():
        await trio.sleep(interval)


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


@asynccontextmanager
async def open_receiver_stack(
    tmp_path: Path,
    receiver: Any,
    *,
    sim: kubesim.Cluster | None = None,
    accounts: Sequence[dict[str, Any]] | None = None,
    **agent_top: Any,
) -> AsyncIterator[ReceiverStack]:
    """kubesim + the real agent + a recording receiver (tests/e2e/receiver.py)."""
    sim = sim or kubesim.Cluster()
    async with wire.open_loop(), kubesim.open_server(sim, host="127.0.0.1", port=0) as kube:
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
            yield ReceiverStack(sim, kube, receiver, the_agent, config_path, kubeconfig,
                                grpc_port, nursery, receiver_scope)
            nursery.cancel_scope.cancel()
