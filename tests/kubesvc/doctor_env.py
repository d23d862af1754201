"""What the doctor tests plant problems in: kubesim over TLS on loopback, agent configs, tokens,
a real ``kubesvc server`` process (mTLS + JWT) and the doctor run in-process or as
``kubesvc doctor``."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import yaml

import kubesim
import wire
from kubesvc._certs import AGENT_ORGANIZATION, write_bundle
from kubesvc._tokens import mint_token
from kubesvc.doctor import Finding, Report, Verdict, run_doctor

from .._procs import kubesvc_command, open_logged, open_process

SECRET = "doctor-test-shared-secret-long-enough-for-hs256"
AGENT = "agent-a"


def service_account_token(subject: str, expires_at: float) -> str:
    """A JWT shaped like a service-account token (the API server's signature is not
    checked by the agent; kubesim accepts it by its value)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    header = part({"alg": "RS256", "kid": "doctor"})
    claims = part({"iss": "kubernetes/serviceaccount", "sub": subject, "exp": int(expires_at)})
    return f"{header}.{claims}.c2lnbmF0dXJl"


def new_sim() -> kubesim.Cluster:
    sim = kubesim.Cluster()
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "hello", "namespace": "default"},
            "data": {"a": "b"},
        }
    )
    return sim


@asynccontextmanager
async def open_kubesim() -> AsyncIterator[kubesim.Server]:
    """kubesim over TLS on a loopback port the OS picks, with a user "agent" that may read
    everything."""
    async with kubesim.open_server(new_sim(), tls=True) as server:
        server.add_user("agent", {"*": ["get", "list", "watch"]})
        yield server


def account(name: str, kubeconfig: Path | str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "kubeConfigFile": str(kubeconfig), **extra}


def write_config(
    tmp_path: Path,
    accounts: Sequence[dict[str, Any]],
    *,
    grpc: str = "127.0.0.1:9",
    clouddriver: dict[str, Any] | None = None,
    name: str = "kubesvc.yaml",
) -> Path:
    config = {
        "clouddriver": {"grpc": grpc, "insecure": True, **(clouddriver or {})},
        "kubernetes": {"accounts": list(accounts)},
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


async def doctor(config: Path, **options: Any) -> Report:
    """The doctor in this process, inside wire's loop as the command runs it. (Its gRPC probe
    closes its TLS connection as the loop ends; against a peer that outlives the loop, the
    socket is then collected unclosed, which warnings-as-errors reports in a later test: the
    tests that probe a real server run ``kubesvc doctor`` as a process.)"""
    async with wire.open_loop():
        return await run_doctor(str(config), **options)


def only(report: Report, account: str, check: str) -> Finding:
    found = [f for f in report.findings if f.account == account and f.check == check]
    assert len(found) == 1, f"{account}/{check}: {found}\n{report.findings}"
    return found[0]


def verdicts(report: Report, account: str) -> dict[str, Verdict]:
    return {f.check: f.verdict for f in report.findings if f.account == account}


# -- the server, a real process ------------------------------------------------------------------


def server_yaml(tmp_path: Path, certs: Path) -> Path:
    config = {
        "grpc": {
            "host": "127.0.0.1",
            "port": 0,
            "tls": {
                "enabled": True,
                "certFile": str(certs / "server.crt"),
                "keyFile": str(certs / "server.key"),
                "caFile": str(certs / "ca.crt"),
                "clientAuth": "REQUIRE",
            },
            "auth": {
                "jwt": {"enabled": True, "algorithms": ["HS256"], "secret": SECRET},
                "x509": {"subjectFilters": [f"O={AGENT_ORGANIZATION}"]},
            },
        },
        "api": {"host": "127.0.0.1", "port": 0},
        "store": {"path": str(tmp_path / "server.db")},
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def clouddriver(certs: Path, token: str) -> dict[str, Any]:
    return {
        "insecure": False,
        "tls": {
            "serverName": "localhost",
            "cacertFile": str(certs / "ca.crt"),
            "clientCertFile": str(certs / f"agent-{AGENT}.crt"),
            "clientKeyFile": str(certs / f"agent-{AGENT}.key"),
        },
        "auth": {"token": token},
    }


def agent_token(accounts: list[str] | None, *, secret: str = SECRET) -> str:
    return mint_token(agent_id=AGENT, accounts=accounts, expires_in=30 * 86400, secret=secret)


@asynccontextmanager
async def open_kubesvc_server(
    nursery: trio.Nursery, tmp_path: Path
) -> AsyncIterator[tuple[Path, int]]:
    """``kubesvc server`` with mTLS and JWT; yields (the certificates' folder, its gRPC port)."""
    certs = tmp_path / "certs"
    write_bundle(certs, agents=[AGENT])
    command = kubesvc_command("server", "-c", str(server_yaml(tmp_path, certs)))
    async with open_logged(nursery, "server", command, tmp_path / "server.log") as server:
        started = await server.wait_for(r"gRPC on [^ ]+:(\d+), REST on")
        yield certs, int(started.group(1))


async def doctor_process(tmp_path: Path, config: Path, *args: str) -> tuple[int, str, str]:
    """``kubesvc doctor --config CONFIG ARGS`` as a process: (exit status, stdout, stderr)."""
    out, err = tmp_path / "doctor.out", tmp_path / "doctor.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        command = kubesvc_command("doctor", "--config", str(config), *args)
        async with open_process(command, stdout=stdout, stderr=stderr) as process:
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.read_text(), err.read_text()


def expired_at() -> float:
    return time.time() - 3600
