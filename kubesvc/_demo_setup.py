"""The demo's files: certificates, the JWT secret and token, server.yaml and kubesvc.yaml.

They are ordinary config files written into the demo's folder, the same an operator writes,
so the demo exercises the real loading and validation (and a user can read them afterwards
with ``--data-dir``).
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ._certs import AGENT_ORGANIZATION, write_bundle
from ._tokens import mint_token

__all__ = [
    "AUDIENCE",
    "DemoFiles",
    "free_port_or_any",
    "replica_id",
    "server_config",
    "write_agent_config",
    "write_files",
    "write_replica_config",
    "write_trust",
]

AUDIENCE = "kubesvc"
AGENT_ID = "demo-agent"


@dataclass(frozen=True, slots=True)
class DemoFiles:
    folder: Path
    certs: Path
    server_config: Path
    agent_config: Path
    kubeconfig: Path
    token: str


def free_port_or_any(host: str, port: int) -> int:
    """``port`` when it can be bound on ``host`` now, else 0 (the server then picks one)."""
    if port == 0:
        return 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return 0
    return port


def _dump(path: Path, data: dict[str, Any], mode: int = 0o600) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        yaml.safe_dump(data, file, sort_keys=False)


def write_files(
    folder: Path,
    *,
    account: str,
    api_port: int,
    grpc_port: int,
    host: str = "127.0.0.1",
    store_url: str = "",
) -> DemoFiles:
    """Certificates, secret, token and server.yaml in ``folder`` (mTLS with clientAuth
    REQUIRE, JWT HS256 with an audience, an x509 subject filter, SQLite in the folder unless
    ``store_url`` names another store)."""
    files = write_trust(folder, account=account, host=host)
    store = {"url": store_url} if store_url else {"path": "kubesvc.db"}
    _dump(
        files.server_config,
        server_config(
            server_id="kubesvc-demo", host=host, api_port=api_port, grpc_port=grpc_port, store=store
        ),
    )
    return files


def write_trust(folder: Path, *, account: str, host: str = "127.0.0.1") -> DemoFiles:
    """Certificates (one server certificate for ``localhost`` and ``host``, shared by every
    replica), the JWT secret and the agent's token in ``folder``; no config file yet."""
    folder.mkdir(parents=True, exist_ok=True)
    certs = folder / "certs"
    write_bundle(certs, sans=("localhost", host), agents=(AGENT_ID,), days=7)
    secret = secrets.token_hex(32)
    secret_file = certs / "jwt.secret"
    secret_file.write_text(secret + "\n", encoding="utf-8")
    secret_file.chmod(0o600)
    token = mint_token(
        agent_id=AGENT_ID, accounts=[account], expires_in=86400, secret=secret, audience=AUDIENCE
    )
    return DemoFiles(
        folder,
        certs,
        folder / "server.yaml",
        folder / "kubesvc.yaml",
        folder / "kubeconfig",
        token,
    )


def server_config(
    *, server_id: str, host: str, api_port: int, grpc_port: int, store: dict[str, Any]
) -> dict[str, Any]:
    """server.yaml's content for one server (paths relative to the demo's folder)."""
    return {
        "serverId": server_id,
        "grpc": {
            "host": host,
            "port": grpc_port,
            "tls": {
                "enabled": True,
                "certFile": "certs/server.crt",
                "keyFile": "certs/server.key",
                "caFile": "certs/ca.crt",
                "clientAuth": "REQUIRE",
            },
            "auth": {
                "jwt": {
                    "enabled": True,
                    "algorithms": ["HS256"],
                    "secretFile": "certs/jwt.secret",
                    "audience": AUDIENCE,
                },
                "x509": {"subjectFilters": [f"O={AGENT_ORGANIZATION}"]},
            },
        },
        "api": {"host": host, "port": api_port},
        "store": store,
        # The demo's deploy should answer within the run, not after Clouddriver's 30 s.
        "operations": {"waitMs": 15000},
    }


def write_replica_config(
    files: DemoFiles,
    *,
    index: int,
    api_port: int,
    grpc_port: int,
    store_url: str,
    heartbeat_ms: int,
    lease_ttl_ms: int,
    host: str = "127.0.0.1",
) -> Path:
    """server-<index>.yaml: replica ``index`` (``demo-replica-<index>``) on the shared store,
    with the demo's short heartbeat and lease TTL (a killed replica's PRIMARY moves within
    seconds) and a short drain (Ctrl-C ends the demo quickly). Mode 0600: the URL may hold a
    password."""
    path = files.folder / f"server-{index}.yaml"
    config = server_config(
        server_id=replica_id(index),
        host=host,
        api_port=api_port,
        grpc_port=grpc_port,
        store={"url": store_url},
    )
    config["replicas"] = {"heartbeatMs": heartbeat_ms, "leaseTtlMs": lease_ttl_ms}
    config["shutdown"] = {"drainSeconds": 5}
    _dump(path, config)
    return path


def replica_id(index: int) -> str:
    """The serverId of the demo's replica ``index`` (1-based)."""
    return f"demo-replica-{index}"


def write_agent_config(
    files: DemoFiles, *, account: str, addresses: Sequence[str], host: str = "127.0.0.1"
) -> None:
    """kubesvc.yaml: mTLS + the token towards the server, one account on kubesim. One
    address is ``clouddriver.grpc``; several (the replicas) are ``grpcAddresses``, dialled in
    turn: the agent moves to the next when one dies."""
    if not addresses:
        raise ValueError("the agent needs at least one server address")
    where = {"grpc": addresses[0]} if len(addresses) == 1 else {"grpcAddresses": list(addresses)}
    _dump(
        files.agent_config,
        {
            "clouddriver": {
                **where,
                "insecure": False,
                "tls": {
                    "serverName": "localhost",
                    "cacertFile": str(files.certs / "ca.crt"),
                    "clientCertFile": str(files.certs / f"agent-{AGENT_ID}.crt"),
                    "clientKeyFile": str(files.certs / f"agent-{AGENT_ID}.key"),
                },
                "auth": {"token": files.token},
                "keepAliveHeartbeatSeconds": 5,
                "backoff": {"baseDelay": "200ms", "maxDelay": "2s"},
            },
            "kubernetes": {
                "accounts": [{"name": account, "kubeConfigFile": str(files.kubeconfig)}]
            },
            "budget": {"bytes": "16Mi"},
            "server": {"host": host, "port": 0},
            "logging": {"level": "WARNING"},
        },
    )
