"""A full agent-server session with `kubesvc certs` and `kubesvc token` material: mTLS with a
required client certificate and a subject filter, plus a JWT naming the allowed accounts."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

import kubesim
import server
from kubesvc._certs import AGENT_ORGANIZATION, write_bundle
from kubesvc._tokens import mint_token
from tests.e2e.harness import Stack, open_stack, stored_objects, wait_until

SECRET = "k" * 48


def _server_config(certs: Path) -> server.ServerConfig:
    base = server.ServerConfig()
    tls = server.TlsSettings(
        str(certs / "server.crt"),
        str(certs / "server.key"),
        server.ClientAuth.REQUIRE,
        str(certs / "ca.crt"),
    )
    auth = server.AuthSettings(
        jwt=server.JwtSettings(secret=SECRET, audience="kubesvc"),
        subject_filters=(re.compile(f"O={AGENT_ORGANIZATION}"),),
    )
    return replace(base, grpc=replace(base.grpc, tls=tls, auth=auth))


def _clouddriver(certs: Path, token: str) -> dict[str, Any]:
    return {
        "insecure": False,
        "tls": {
            "serverName": "localhost",
            "cacertFile": str(certs / "ca.crt"),
            "clientCertFile": str(certs / "agent-agent-a.crt"),
            "clientKeyFile": str(certs / "agent-agent-a.key"),
        },
        "auth": {"token": token},
    }


def _sim() -> kubesim.Cluster:
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
async def _mtls_stack(
    tmp_path: Path, accounts: list[str], expires_in: int = 600, now: float | None = None
) -> AsyncIterator[Stack]:
    """The stack with `kubesvc certs` material for agent-a and a token for ``accounts``."""
    certs = tmp_path / "certs"
    write_bundle(certs, agents=["agent-a"])
    token = mint_token(
        agent_id="agent-a",
        accounts=accounts,
        expires_in=expires_in,
        secret=SECRET,
        audience="kubesvc",
        now=now,
    )
    async with open_stack(
        tmp_path,
        sim=_sim(),
        server_config=_server_config(certs),
        clouddriver=_clouddriver(certs, token),
    ) as stack:
        yield stack


async def test_agent_streams_to_the_server_over_mtls_with_a_token(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with _mtls_stack(tmp_path, ["k1"]) as stack:

            async def synced() -> bool:
                objects = await stored_objects(stack, "k1")
                return ("v1", "ConfigMap", "default", "hello") in objects

            await wait_until(synced)
            agents = stack.server.state.sessions.agents()
            assert [a.agent_id for a in agents] == ["agent-a"]
            assert stack.agent.link.status.connected


async def test_a_token_for_other_accounts_registers_nothing(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with _mtls_stack(tmp_path, ["someone-else"]) as stack:

            async def refused() -> bool:
                status = stack.agent.link.status
                return "k1" in status.last_error or status.roles.get("k1") == "REJECTED"

            await wait_until(refused)
            assert await stored_objects(stack, "k1") == {}


async def test_an_expired_token_gets_no_session(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with _mtls_stack(tmp_path, ["k1"], expires_in=60, now=0.0) as stack:

            async def refused() -> bool:
                return "expired" in stack.agent.link.status.last_error

            await wait_until(refused)
            assert stack.server.state.sessions.agents() == []
