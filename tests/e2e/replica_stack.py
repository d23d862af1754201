"""Two ``kubesvc server`` replicas on one PostgreSQL, two ``kubesvc agent`` processes for one
cluster (kubesim over TLS), for the replica tests (tests/e2e/test_replicas.py, issue #13).

Every replica sits behind a loopback proxy of its own (a ``ChaosProxy`` playing the address a
Kubernetes Service or a pod's DNS name gives it): the agents are configured with the proxies'
addresses (``clouddriver.grpcAddresses``), agent ``a`` with r1's first and ``b`` with r2's
first, so each starts on a different replica and both declare the account ``k1``. A replica
that is killed and started again listens on a new port (ports come from the OS); its proxy is
pointed there, as a Service's endpoint moves to the new pod. While nothing listens behind a
proxy, it resets every connection at once, as a Service with no ready endpoint does.

The replicas use short heartbeats (0.5 s) and leases (5 s) so that a killed replica's
accounts are taken over within seconds; production's defaults are 2 s and 10 s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

import kubesim

from .._procs import Role, kubesvc_command
from .chaos_proxy import ChaosProxy
from .drain_stack import KINDS, NAMESPACE, server_ports
from .harness import agent_config, wait_until

HEARTBEAT_MS = 500
LEASE_TTL_MS = 5000  # margin for heartbeats held up on a loaded machine; recovery ~5 s
DRAIN_SECONDS = 8.0
WAIT_MS = 20_000  # operations.waitMs: a dispatched deploy's deadline


@dataclass
class Replica:
    """One server replica: its process (``role``), its stable address (``proxy``) and the
    ports its current process listens on."""

    name: str
    role: Role
    proxy: ChaosProxy
    grpc_port: int = 0
    api_port: int = 0
    http: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=10))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    async def start(self) -> None:
        """Start its process; once it logs its ports, point its proxy and REST client there."""
        await self.role.start()
        assert self.role.current is not None
        self.grpc_port, self.api_port = await server_ports(self.role.current)
        self.proxy.target = ("127.0.0.1", self.grpc_port)
        self.http.base_url = httpx.URL(f"http://127.0.0.1:{self.api_port}")

    async def kill(self) -> None:
        """kill -9: no drain, no release of its leases, its TCP connections dropped by the
        kernel (the proxy resets the agents' ends)."""
        await self.role.kill()
        self.proxy.cut()
        self.proxy.restore()  # new connections are tried upstream again: refused, reset


@dataclass
class ReplicaStack:
    sim: kubesim.Cluster
    kube: Any  # kubesim's running server (its faults)
    replicas: dict[str, Replica]
    agents: dict[str, Role]

    def replica(self, name: str) -> Replica:
        return self.replicas[name]

    async def clouddrivers(self, via: str) -> list[dict[str, Any]]:
        answer = await self.replicas[via].http.get("/armory/clouddrivers")
        assert answer.status_code == 200, answer.text
        drivers: list[dict[str, Any]] = answer.json()
        return drivers

    async def primary_holder(self, via: str) -> str | None:
        """The replica that holds k1's PRIMARY (its lease) as ``via`` sees it; None while no
        live replica does. Exactly one may hold it: more is a failure here."""
        holders = [d["id"] for d in await self.clouddrivers(via) if d.get("primaries", 0) > 0]
        assert len(holders) <= 1, f"more than one replica holds a PRIMARY: {holders}"
        return holders[0] if holders else None

    async def wait_primary(self, via: str, *, not_on: str | None = None) -> str:
        """Until one live replica (other than ``not_on``) holds k1's PRIMARY; its name."""
        found: list[str] = []

        async def held() -> bool:
            holder = await self.primary_holder(via)
            if holder is None or holder == not_on:
                return False
            found.append(holder)
            return True

        await wait_until(held, interval=0.1, what=f"a replica other than {not_on} holds k1")
        return found[-1]


def _server_yaml(tmp_path: Path, name: str, store_url: str, proxy_port: int) -> Path:
    config = {
        "serverId": name,
        "grpc": {"host": "127.0.0.1", "port": 0},
        "api": {"host": "127.0.0.1", "port": 0},
        "store": {"url": store_url},
        "shutdown": {"drainSeconds": DRAIN_SECONDS},
        "operations": {"waitMs": WAIT_MS},
        "replicas": {
            "heartbeatMs": HEARTBEAT_MS,
            "leaseTtlMs": LEASE_TTL_MS,
            "address": f"127.0.0.1:{proxy_port}",
        },
    }
    path = tmp_path / f"server-{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def _agent_yaml(
    tmp_path: Path,
    name: str,
    kubeconfig: Path,
    addresses: list[str],
    shard: dict[str, Any] | None = None,
) -> Path:
    account: dict[str, Any] = {"name": "k1", "kubeConfigFile": str(kubeconfig)}
    if shard is None:
        account.update(kinds=list(KINDS), namespaces=[NAMESPACE])
    else:  # the shard says the kinds and namespaces (docs/sharding.md)
        account["shard"] = shard
    accounts = [account]
    config = agent_config(
        0,
        accounts,
        clouddriver={
            "grpcAddresses": addresses,
            "backoff": {"baseDelay": "100ms", "maxDelay": "1s"},
        },
        shutdown={"drainSeconds": DRAIN_SECONDS},
    )
    path = tmp_path / f"agent-{name}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


@asynccontextmanager
async def open_replica_stack(
    tmp_path: Path,
    sim: kubesim.Cluster,
    store_url: str,
    shards: dict[str, dict[str, Any]] | None = None,
) -> AsyncIterator[ReplicaStack]:
    """kubesim over TLS, replicas r1 and r2 on ``store_url``, agents a and b (connected);
    everything killed, if it still runs, when the block ends. ``shards``: per agent ("a",
    "b") the ``shard:`` of its account, instead of both serving k1 whole."""
    async with (
        kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
        trio.open_nursery() as nursery,
    ):
        try:
            async with AsyncExitStack() as cleanup:
                yield await _start(tmp_path, sim, kube, nursery, cleanup, store_url, shards or {})
        finally:
            nursery.cancel_scope.cancel()


async def _start(
    tmp_path: Path,
    sim: kubesim.Cluster,
    kube: Any,
    nursery: trio.Nursery,
    cleanup: AsyncExitStack,
    store_url: str,
    shards: dict[str, dict[str, Any]],
) -> ReplicaStack:
    kubeconfig = tmp_path / "kubeconfig"
    kube.kubeconfig(kubeconfig, user="admin")
    replicas: dict[str, Replica] = {}
    for name in ("r1", "r2"):
        proxy = ChaosProxy(("127.0.0.1", 1), name=f"service-{name}")
        await nursery.start(proxy.serve)
        role = Role(
            nursery,
            name,
            kubesvc_command(
                "server", "-c", str(_server_yaml(tmp_path, name, store_url, proxy.port))
            ),
            tmp_path / f"{name}.log",
            ready=r"gRPC on ",
        )
        cleanup.push_async_callback(role.aclose)
        replica = replicas[name] = Replica(name, role, proxy)
        cleanup.push_async_callback(replica.http.aclose)
    for replica in replicas.values():
        await replica.start()
    first, second = replicas["r1"].address, replicas["r2"].address
    agents: dict[str, Role] = {}
    for name, addresses in (("a", [first, second]), ("b", [second, first])):
        role = Role(
            nursery,
            f"agent-{name}",
            kubesvc_command(
                "agent",
                "-c",
                str(_agent_yaml(tmp_path, name, kubeconfig, addresses, shards.get(name))),
            ),
            tmp_path / f"agent-{name}.log",
            ready=r"connected to server",
            env={"POD_NAME": f"agent-{name}"},
        )
        cleanup.push_async_callback(role.aclose)
        await role.start()
        agents[name] = role
    for role in agents.values():
        assert role.current is not None
        await role.current.wait_for(r"connected to server")
    return ReplicaStack(sim, kube, replicas, agents)
