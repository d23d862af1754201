"""The server-link checks' judgement (sans-I/O): the agent's bearer token read locally, and the
server's answer to the doctor's probe turned into a verdict and a hint.

What can be known without a new API. The server authenticates a call (TLS, client
certificate subject, bearer JWT) before it reads anything, then expects a Hello. The doctor's
probe sends a Hello with a protocol version no server speaks: a server that accepted the
credentials answers FAILED_PRECONDITION ("protocol version ... is not supported; this server
speaks N"), so the probe proves the credentials work and learns the server's protocol, and no
session is opened and no account registered (the server logs one refused call). A server that
does not accept them answers UNAUTHENTICATED or PERMISSION_DENIED with its reason. Which
accounts the token allows is read from the token itself (claim ``accounts``, the server's
default ``accountsClaim``), unverified: only registering would make the server say, and a
doctor must not register accounts. Whether an account name is already held by another
cluster (REJECTED) is likewise only known by registering: the server's REST API
(``/armory/accounts``) shows it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

import wire

from ._findings import SERVER, Finding, Verdict
from ._judge import expiry, jwt_claims, jwt_expiry

__all__ = ["PROBE_VERSION", "mint_hint", "probe_refused", "token_findings"]

#: A Hello.protocol_version no server speaks (uint32's largest): the probe's answer proves
#: the credentials passed, and nothing is registered.
PROBE_VERSION = 2**32 - 1
_SPEAKS = re.compile(r"this server speaks (\d+)")


def mint_hint(subject: str | None, accounts: Sequence[str]) -> str:
    """How to get a token the server accepts, for this agent and its accounts."""
    names = ",".join(accounts) or "<names>"
    return (
        "mint a token with the server's JWT secret or key: `kubesvc token --agent-id "
        f"{subject or '<id>'} --accounts {names} --expires-in 30d --secret-file <the server's "
        "grpc.auth.jwt secret>` (add --audience/--issuer as the server's grpc.auth.jwt sets "
        "them) and put it in clouddriver.auth.token (or have clouddriver.auth.tokenCommand "
        "print it)"
    )


def token_findings(
    token: str | None,
    accounts: Sequence[str],
    *,
    renews: bool,
    now: datetime,
) -> list[Finding]:
    """What the agent's bearer token says, read locally: when it ends, and the accounts it
    lets the agent register (one FAIL per configured account it leaves out)."""
    if token is None:
        return [
            Finding(
                SERVER,
                "server-token",
                Verdict.OK,
                "no bearer token configured (clouddriver.auth); the auth check shows whether "
                "the server needs one",
            )
        ]
    claims = jwt_claims(token)
    if claims is None:
        return [
            Finding(
                SERVER,
                "server-token",
                Verdict.OK,
                "bearer token (not a JWT: its expiry and accounts cannot be read here)",
            )
        ]
    subject = claims.get("sub")
    what = "the agent's JWT" + (f" (sub {subject})" if isinstance(subject, str) else "")
    mint = mint_hint(subject if isinstance(subject, str) else None, accounts)
    found = [expiry(SERVER, "server-token", what, jwt_expiry(claims), now, renews=renews, fix=mint)]
    allowed = claims.get("accounts")
    if isinstance(allowed, str):
        allowed = [a for a in allowed.replace(",", " ").split() if a]
    if allowed is None:
        found.append(
            Finding(
                SERVER,
                "server-accounts",
                Verdict.OK,
                "the token has no 'accounts' claim: it lets the agent register any account name",
            )
        )
        return found
    if not isinstance(allowed, list):
        found.append(
            Finding(
                SERVER,
                "server-accounts",
                Verdict.FAIL,
                "the token's 'accounts' claim is not a list of names: the server refuses it",
                mint,
            )
        )
        return found
    names = ", ".join(str(a) for a in allowed) or "none"
    missing = [a for a in accounts if a not in allowed]
    found.append(
        Finding(
            SERVER,
            "server-accounts",
            Verdict.FAIL if missing else Verdict.OK,
            f"the token allows the accounts {names} (claim 'accounts', read from the token)",
            "see the account lines" if missing else "",
        )
    )
    for name in missing:
        found.append(
            Finding(
                name,
                "server-token",
                Verdict.FAIL,
                f"the agent's token does not allow account {name}: the server refuses the "
                "agent's accounts (PERMISSION_DENIED) while it lists this one",
                f"mint a token whose accounts include {name} (`kubesvc token --accounts "
                f"{','.join([*map(str, allowed), name])} ...`), or remove the account",
            )
        )
    return found


def probe_refused(
    address: str, status: wire.Status, message: str, *, has_token: bool, tls: bool, mint: str
) -> Finding:
    """The server's answer to the probe (a gRPC status): what it says about the agent."""
    check = "server-auth"
    if status is wire.Status.FAILED_PRECONDITION and (speaks := _SPEAKS.search(message)):
        version = int(speaks.group(1))
        if version != wire.PROTOCOL_VERSION:
            return Finding(
                SERVER,
                check,
                Verdict.FAIL,
                f"{address} accepts the agent's credentials but speaks protocol {version}, "
                f"this agent {wire.PROTOCOL_VERSION}",
                "run agent and server versions that speak the same protocol (docs/protocol.md)",
            )
        what = ["TLS" if tls else "plain h2c", "the bearer token" if has_token else "no token"]
        return Finding(
            SERVER,
            check,
            Verdict.OK,
            f"{address} accepts the agent ({', '.join(what)}) and speaks protocol {version}",
        )
    detail = f"{address} refuses the agent: {status.name}: {message}"
    lowered = message.lower()
    if status is wire.Status.UNAUTHENTICATED:
        if "client certificate" in lowered:
            hint = (
                "the server requires a client certificate: set clouddriver.tls.clientCertFile "
                "and clientKeyFile (e.g. from `kubesvc certs`)"
            )
        elif "no bearer token" in lowered or "not 'bearer" in lowered:
            hint = "set clouddriver.auth.token (or tokenCommand): " + mint
        else:
            hint = mint
        return Finding(SERVER, check, Verdict.FAIL, detail, hint)
    if status is wire.Status.PERMISSION_DENIED:
        return Finding(
            SERVER,
            check,
            Verdict.FAIL,
            detail,
            "issue the agent a client certificate whose subject matches the server's "
            "grpc.auth.x509.subjectFilters (`kubesvc certs`), and set clouddriver.tls."
            "clientCertFile / clientKeyFile",
        )
    if status is wire.Status.UNAVAILABLE:
        return Finding(
            SERVER,
            check,
            Verdict.WARN,
            detail,
            "the server is shutting down or failing: run the doctor again; with several "
            "replicas the agent moves to another",
        )
    return Finding(SERVER, check, Verdict.FAIL, detail)
