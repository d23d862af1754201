"""``kubesvc agent`` and ``kubesvc server`` as real processes for the graceful-shutdown tests
(tests/e2e/test_sigterm.py, test_sigterm_bounds.py): their config files, kubesim's state and
the server's side by side, and the stop every one of those tests asserts (SIGTERM, exit 0
inside a bound). The processes themselves are tests/_procs.py's ``open_logged``.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

import kubesim

from .._procs import LoggedProcess, kubesvc_command, open_logged
from .harness import agent_config, wait_until

NAMESPACE = "churn"
KINDS = {"ConfigMap": "configmaps", "Pod": "pods"}
AGENT_DRAIN_SECONDS = 8.0
SERVER_DRAIN_SECONDS = 8.0

State = dict[tuple[str, str], str]  # (kind, name) -> resourceVersion


@asynccontextmanager
async def open_kubesvc(
    nursery: trio.Nursery, name: str, args: Sequence[str], log_path: Path
) -> AsyncIterator[LoggedProcess]:
    """``python -m kubesvc ARGS``, its log appended to ``log_path``; killed (if it still
    runs) and reaped when the block ends."""
    async with open_logged(nursery, name, kubesvc_command(*args), log_path) as child:
        yield child


def new_sim() -> kubesim.Cluster:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=200_000, controllers=False))
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    return sim


def sim_state(sim: kubesim.Cluster) -> State:
    return {
        (kind, obj["metadata"]["name"]): obj["metadata"]["resourceVersion"]
        for kind, plural in KINDS.items()
        for obj in sim.list("", "v1", plural, NAMESPACE)
    }


async def server_state(http: httpx.AsyncClient) -> State:
    found: State = {}
    token = ""
    while True:
        page = (
            await http.get(
                "/v1/objects",
                params={"account": "k1", "namespace": NAMESPACE, "continue": token},
            )
        ).json()
        for item in page["items"]:
            if item["kind"] in KINDS:
                found[(item["kind"], item["name"])] = item["resourceVersion"]
        token = page["continue"] or ""
        if not token:
            return found


async def wait_converged(http: httpx.AsyncClient, sim: kubesim.Cluster) -> None:
    """Until the server (a child process: polled) holds kubesim's state."""

    async def equal() -> bool:
        return await server_state(http) == sim_state(sim)

    await wait_until(equal, interval=0.1, what="the server holds kubesim's objects")


def server_config(tmp_path: Path, store: Path, *, drain_seconds: float, **extra: Any) -> Path:
    """A server.yaml on loopback ports chosen by the OS (the server logs them)."""
    config = {
        "grpc": {"host": "127.0.0.1", "port": 0},
        "api": {"host": "127.0.0.1", "port": 0},
        "store": {"path": str(store)},
        "shutdown": {"drainSeconds": drain_seconds},
        **extra,
    }
    path = tmp_path / f"server-{store.stem}.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def write_agent_config(
    tmp_path: Path,
    grpc_port: int,
    kubeconfig: Path,
    *,
    base_delay: str = "100ms",
    drain_seconds: float = AGENT_DRAIN_SECONDS,
) -> Path:
    accounts = [
        {
            "name": "k1",
            "kubeConfigFile": str(kubeconfig),
            "kinds": list(KINDS),
            "namespaces": [NAMESPACE],
        }
    ]
    config = agent_config(
        grpc_port,
        accounts,
        clouddriver={"backoff": {"baseDelay": base_delay, "maxDelay": "10s"}},
        shutdown={"drainSeconds": drain_seconds},
    )
    path = tmp_path / "kubesvc.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def server_ports(server: LoggedProcess) -> tuple[int, int]:
    """(gRPC port, REST port) from the server's start line."""
    found = await server.wait_for(r"gRPC on [^ ]+:(\d+), REST on [^ ]+:(\d+)")
    return int(found.group(1)), int(found.group(2))


@asynccontextmanager
async def open_server_and_agent(
    nursery: trio.Nursery,
    http: httpx.AsyncClient,
    sim: kubesim.Cluster,
    tmp_path: Path,
    server_yaml: Path,
    kubeconfig: Path,
    *,
    server_log: Path,
    agent_log: Path,
    **agent_options: Any,
) -> AsyncIterator[tuple[LoggedProcess, LoggedProcess]]:
    """A server, then an agent connected to it (its SIGTERM handler is set) whose account
    the server holds in full (``http`` points at the server's REST API); both killed, if
    they still run, when the block ends."""
    async with open_kubesvc(
        nursery, "server", ["server", "-c", str(server_yaml)], server_log
    ) as srv:
        grpc_port, api_port = await server_ports(srv)
        http.base_url = httpx.URL(f"http://127.0.0.1:{api_port}")
        agent_yaml = write_agent_config(tmp_path, grpc_port, kubeconfig, **agent_options)
        async with open_kubesvc(
            nursery, "agent", ["agent", "-c", str(agent_yaml)], agent_log
        ) as agent:
            await agent.wait_for(r"connected to server")  # its signal handler is set
            await wait_converged(http, sim)
            yield srv, agent


async def stop(process: LoggedProcess, bound: float) -> float:
    """SIGTERM ``process``; it must exit 0 within ``bound`` seconds. Returns the seconds."""
    code, seconds = await process.signal_and_wait(signal.SIGTERM)
    assert code == 0, f"{process.name} exited {code}:\n{process.output()}"
    assert seconds < bound, f"{process.name} took {seconds:.1f} s:\n{process.output()}"
    return seconds


def assert_clean_store(path: Path) -> None:
    wal = path.with_name(path.name + "-wal")
    assert not wal.exists() or wal.stat().st_size == 0, "the WAL was not checkpointed at close"
