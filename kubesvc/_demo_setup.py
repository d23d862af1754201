"""The demo's files: certificates, the JWT secret and token, server.yaml and kubesvc.yaml.

They are ordinary config files written into the demo's folder, the same an operator writes,
so the demo exercises the real loading and validation (and a user can read them afterwards
with ``--data-dir``).
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ._certs import AGENT_ORGANIZATION, write_bundle
from ._tokens import mint_token

__all__ = ["AUDIENCE", "DemoFiles", "free_port_or_any", "write_agent_config", "write_files"]

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
    folder: Path, *, account: str, api_port: int, grpc_port: int, host: str = "127.0.0.1"
) -> DemoFiles:
    """Certificates, secret, token and server.yaml in ``folder`` (mTLS with clientAuth
    REQUIRE, JWT HS256 with an audience, an x509 subject filter, SQLite in the folder)."""
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
    server_config = folder / "server.yaml"
    _dump(
        server_config,
        {
            "serverId": "kubesvc-demo",
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
            "store": {"path": "kubesvc.db"},
            # The demo's deploy should answer within the run, not after Clouddriver's 30 s.
            "operations": {"waitMs": 15000},
        },
    )
    return DemoFiles(
        folder, certs, server_config, folder / "kubesvc.yaml", folder / "kubeconfig", token
    )


def write_agent_config(
    files: DemoFiles, *, account: str, grpc_port: int, host: str = "127.0.0.1"
) -> None:
    """kubesvc.yaml: mTLS + the token towards the server, one account on kubesim."""
    _dump(
        files.agent_config,
        {
            "clouddriver": {
                "grpc": f"{host}:{grpc_port}",
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
