"""Issue 5 acceptance, end to end: the real agent against a server with mTLS (client
certificates required, subject filter) and JWT (HS256). An agent with the right certificate and
token serves its account; every wrong credential is refused with a clear reason that the
agent's link reports, and nothing of the refused agents is registered."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import jwt
import trio

from server import ServerConfig, parse_server_config

from ..wire._certs import CertificateAuthority, Issued
from .harness import Stack, open_stack, wait_until

SECRET = "e2e-shared-secret-that-is-long-enough-for-hs256"


def _token(
    *,
    secret: str = SECRET,
    accounts: list[str] | None = None,
    expires_in: float = 3600,
    subject: str = "agent",
) -> str:
    now = int(time.time())
    claims: dict[str, Any] = {"sub": subject, "iat": now, "exp": int(now + expires_in)}
    if accounts is not None:
        claims["accounts"] = accounts
    return jwt.encode(claims, secret, algorithm="HS256")


def _server_config(ca: CertificateAuthority, server_cert: Issued) -> ServerConfig:
    return parse_server_config(
        {
            "grpc": {
                "tls": {
                    "enabled": True,
                    "certFile": str(server_cert.cert),
                    "keyFile": str(server_cert.key),
                    "caFile": str(ca.cert_path),
                    "clientAuth": "REQUIRE",
                },
                "auth": {
                    "jwt": {"enabled": True, "algorithms": ["HS256"], "secret": SECRET},
                    "x509": {"subjectFilters": ["^CN=agent-"]},
                },
            },
        }
    )


def _clouddriver(ca: CertificateAuthority, client: Issued, token: str | None) -> dict[str, Any]:
    section: dict[str, Any] = {
        "insecure": False,
        "tls": {
            "cacertFile": str(ca.cert_path),
            "clientCertFile": str(client.cert),
            "clientKeyFile": str(client.key),
        },
    }
    section["auth"] = {"token": token} if token is not None else {}
    return section


async def _refused(
    stack: Stack,
    agent_id: str,
    account: str,
    clouddriver: dict[str, Any],
    *,
    welcomed: bool = False,
) -> str:
    """Run an agent with ``clouddriver`` settings until its link reports an error; that error.

    ``welcomed``: the call itself is allowed (an agent says Hello before it knows its
    clusters, with no accounts) and the refusal comes when it announces the account."""
    accounts = [{"name": account, "kubeConfigFile": str(stack.kubeconfig)}]
    refused, task = await stack.start_agent(agent_id, accounts, clouddriver=clouddriver)

    async def failed() -> bool:
        return bool(refused.link.status.last_error)

    await wait_until(failed)
    await task.stop()
    if not welcomed:
        assert refused.link.status.sessions == 0, "the refused agent got a Welcome"
    assert refused.link.status.roles == {}
    return refused.link.status.last_error


async def test_only_the_right_certificate_and_token_get_in(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server_cert = ca.issue("server", server=True)
    good_cert = ca.issue("agent-good", server=False)
    (tmp_path / "stranger").mkdir()
    stranger_ca = CertificateAuthority(tmp_path / "stranger", name="stranger CA")
    untrusted_cert = stranger_ca.issue("agent-untrusted", server=False)
    wrong_subject_cert = ca.issue("intruder", server=False)
    good = _token(accounts=["k1"])
    with trio.fail_after(60):
        async with open_stack(
            tmp_path,
            server_config=_server_config(ca, server_cert),
            clouddriver=_clouddriver(ca, good_cert, good),
        ) as stack:

            async def serving() -> bool:
                return stack.agent.link.status.roles.get("k1") == "PRIMARY"

            await wait_until(serving)
            assert stack.agent.link.status.last_error == ""

            reasons = {
                "no token": await _refused(
                    stack, "agent-no-token", "k-a", _clouddriver(ca, good_cert, None)
                ),
                "bad token": await _refused(
                    stack,
                    "agent-bad-token",
                    "k-b",
                    _clouddriver(
                        ca, good_cert, _token(secret="not-the-server-secret-but-as-long-as-it")
                    ),
                ),
                "expired token": await _refused(
                    stack,
                    "agent-expired",
                    "k-c",
                    _clouddriver(ca, good_cert, _token(expires_in=-3600)),
                ),
                "other accounts": await _refused(
                    stack,
                    "agent-other-accounts",
                    "k-d",
                    _clouddriver(ca, good_cert, _token(accounts=["k1", "k-elsewhere"])),
                    welcomed=True,
                ),
                "wrong subject": await _refused(
                    stack, "agent-wrong-subject", "k-e", _clouddriver(ca, wrong_subject_cert, good)
                ),
                "untrusted certificate": await _refused(
                    stack, "agent-untrusted", "k-f", _clouddriver(ca, untrusted_cert, good)
                ),
            }
            expected = {
                "no token": ("UNAUTHENTICATED", "no bearer token"),
                "bad token": ("UNAUTHENTICATED", "signature does not verify"),
                "expired token": ("UNAUTHENTICATED", "bearer token expired"),
                "other accounts": ("PERMISSION_DENIED", "does not allow account(s): k-d"),
                "wrong subject": ("PERMISSION_DENIED", "CN=intruder"),
            }
            for case, (status, words) in expected.items():
                assert status in reasons[case], (case, reasons[case])
                assert words in reasons[case], (case, reasons[case])
            # The server refuses the TLS session itself, so no gRPC status can say why; the
            # agent says what a connection closed before the Welcome means over TLS.
            untrusted = reasons["untrusted certificate"]
            assert "before the server answered Hello" in untrusted, untrusted
            assert "client certificate" in untrusted, untrusted

            # Nothing of the refused agents was registered: only k1, only agent-a.
            state = stack.server.state
            assert [a.name for a in state.accounts.list()] == ["k1"]
            assert [v.agent_id for v in state.sessions.agents()] == ["agent-a"]
            assert [r.agent_id for r in await state.store.list_agents()] == ["agent-a"]
            assert stack.agent.link.status.roles.get("k1") == "PRIMARY"
