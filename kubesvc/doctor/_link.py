"""The server-link checks' thin trio runner: for each server address the agent dials, TCP, then
TLS as the agent's link sets it up (``agent.client_ssl_context``), then a gRPC call through
wire's bridge with the agent's bearer token (``agent.TokenSource``) carrying the probe Hello
(kubesvc/doctor/_link_judge.py says why it registers nothing). Must run inside
``wire.open_loop()``."""

from __future__ import annotations

import ssl
from datetime import datetime
from pathlib import Path

import trio

import agent
import wire
from wire import messages

from ._findings import SERVER, Finding, Verdict
from ._judge import SOON, cert_facts, error_chain, expiry, jwt_claims, refused, ssl_failure, when
from ._link_judge import PROBE_VERSION, mint_hint, probe_refused, token_findings
from ._probe import handshake, tcp_connect

__all__ = ["check_server"]


async def check_server(config: agent.Config, *, now: datetime, seconds: float) -> list[Finding]:
    """Every check of the link to the server; never raises for what it checks."""
    clouddriver = config.clouddriver
    try:
        addresses = agent.server_addresses(clouddriver)
    except agent.ConfigError as exc:
        return [Finding(SERVER, "server-address", Verdict.FAIL, str(exc), "fix the address")]
    try:
        context = agent.client_ssl_context(clouddriver)
    except agent.ConfigError as exc:
        return [
            Finding(
                SERVER,
                "server-tls",
                Verdict.FAIL,
                str(exc),
                "fix the paths in clouddriver.tls (cacertFile, clientCertFile, clientKeyFile)",
            )
        ]
    findings: list[Finding] = []
    findings += _client_certificate(clouddriver, now)
    source = agent.TokenSource(clouddriver.auth)
    try:
        token = await source.token()
    except agent.ConfigError as exc:
        findings.append(
            Finding(
                SERVER,
                "server-token",
                Verdict.FAIL,
                str(exc),
                "run clouddriver.auth.tokenCommand by hand and fix what it says",
            )
        )
        token = None
    else:
        command = clouddriver.auth.token_command
        renews = command is not None and command.refresh_interval_seconds > 0
        names = [account.name for account in config.kubernetes.accounts]
        findings += token_findings(token, names, renews=renews, now=now)
    claims = jwt_claims(token) if token else None
    subject = claims.get("sub") if claims else None
    mint = mint_hint(
        subject if isinstance(subject, str) else None,
        [account.name for account in config.kubernetes.accounts],
    )
    for address in addresses:
        findings += await _check_address(
            address.host, address.port, clouddriver, context, token, mint, now, seconds
        )
    return findings


def _client_certificate(clouddriver: agent.ClouddriverConfig, now: datetime) -> list[Finding]:
    path = clouddriver.tls.client_cert_file
    if clouddriver.insecure or not path:
        return []
    try:
        certs = cert_facts(Path(path).read_bytes())
    except OSError:
        certs = []  # client_ssl_context loaded it a moment ago; a race is not our finding
    if not certs:
        return []
    leaf = certs[0]
    return [
        expiry(
            SERVER,
            "server-client-cert",
            f"the agent's client certificate {leaf.subject} ({path})",
            leaf.not_after,
            now,
            renews=False,
            fix=f"issue a new client certificate (`kubesvc certs`) into {path}",
        )
    ]


async def _check_address(
    host: str,
    port: int,
    clouddriver: agent.ClouddriverConfig,
    context: ssl.SSLContext | None,
    token: str | None,
    mint: str,
    now: datetime,
    seconds: float,
) -> list[Finding]:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    field = "clouddriver.grpcAddresses" if clouddriver.grpc_addresses else "clouddriver.grpc"
    reach = (
        f"check {field} ({address}) names the server's gRPC port, that `kubesvc server` runs "
        "there, and that this host reaches it (Service, NetworkPolicy, firewall)"
    )
    with trio.move_on_after(seconds) as waited:
        try:
            await tcp_connect(host, port)
        except OSError as exc:
            what = "nothing listens there" if refused(exc) else "cannot connect"
            return [
                Finding(SERVER, "server-reach", Verdict.FAIL, f"{address}: {what}: {exc}", reach)
            ]
    if waited.cancelled_caught:
        return [
            Finding(
                SERVER,
                "server-reach",
                Verdict.FAIL,
                f"{address}: no TCP connection within {seconds:g} s",
                reach,
            )
        ]
    found = [Finding(SERVER, "server-reach", Verdict.OK, f"{address} accepts TCP connections")]
    if context is not None:
        tls = await _check_tls(host, port, address, clouddriver, context, now, seconds)
        found += tls
        if any(f.verdict is Verdict.FAIL for f in tls):
            return found
    found.append(await _probe(host, port, address, clouddriver, context, token, mint, seconds))
    return found


async def _check_tls(
    host: str,
    port: int,
    address: str,
    clouddriver: agent.ClouddriverConfig,
    context: ssl.SSLContext,
    now: datetime,
    seconds: float,
) -> list[Finding]:
    tls = clouddriver.tls
    name = tls.server_name or host
    trust = (
        f"clouddriver.tls.cacertFile ({tls.cacert_file})" if tls.cacert_file else "the system's CAs"
    )
    try:
        with trio.fail_after(seconds):
            shake = await handshake(host, port, name, context, alpn=("h2",))
    except (OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
        verify = ssl_failure(exc)
        if verify is None:
            return [
                Finding(
                    SERVER,
                    "server-tls",
                    Verdict.FAIL,
                    f"{address}: no TLS handshake: {_causes(exc)}",
                    "the server's gRPC port may not speak TLS: set grpc.tls on the server, or "
                    "clouddriver.insecure: true (only on a trusted network)",
                )
            ]
        peer = None
        with trio.move_on_after(seconds):
            try:
                unverified = await handshake(host, port, name)
                facts = cert_facts(unverified.der or b"")
                peer = facts[0] if facts else None
            except (OSError, trio.BrokenResourceError):
                pass
        message = verify.verify_message or str(verify)
        presented = f"{peer.subject} issued by {peer.issuer}" if peer else "its certificate"
        if "mismatch" in message.lower():
            names = ", ".join(peer.names) if peer and peer.names else "other names"
            return [
                Finding(
                    SERVER,
                    "server-tls",
                    Verdict.FAIL,
                    f"{address} presents {presented} for {names}, not {name}: {message}",
                    "set clouddriver.tls.serverName to one of those names, or dial the server "
                    "by one of them",
                )
            ]
        issuer = peer.issuer if peer else "the CA that signed the server's grpc.tls.certFile"
        return [
            Finding(
                SERVER,
                "server-tls",
                Verdict.FAIL,
                f"{address} presents {presented}, which {trust} does not verify ({message})",
                f"set clouddriver.tls.cacertFile to the CA that issued the server's certificate "
                f"({issuer}): the CA of the server's grpc.tls.certFile",
            )
        ]
    facts = cert_facts(shake.der or b"")
    described = f"{facts[0].subject} issued by {facts[0].issuer}" if facts else "a certificate"
    verified = (
        "NOT verified (insecureSkipVerify)" if tls.insecure_skip_verify else f"verified by {trust}"
    )
    found = [
        Finding(
            SERVER,
            "server-tls",
            Verdict.WARN if tls.insecure_skip_verify else Verdict.OK,
            f"{address}: {shake.version}, ALPN {shake.alpn or 'none'}, {described}, {verified}",
            "set clouddriver.tls.cacertFile and drop insecureSkipVerify"
            if tls.insecure_skip_verify
            else "",
        )
    ]
    if facts and facts[0].not_after - now < SOON:
        found.append(
            Finding(
                SERVER,
                "server-tls",
                Verdict.FAIL if facts[0].not_after <= now else Verdict.WARN,
                f"the server's certificate ends {when(facts[0].not_after, now)}",
                "renew the server's grpc.tls.certFile",
            )
        )
    return found


async def _probe(
    host: str,
    port: int,
    address: str,
    clouddriver: agent.ClouddriverConfig,
    context: ssl.SSLContext | None,
    token: str | None,
    mint: str,
    seconds: float,
) -> Finding:
    metadata = {"authorization": f"Bearer {token}"} if token else {}
    hello = messages.Hello(protocol_version=PROBE_VERSION, agent_id="kubesvc-doctor")
    try:
        with trio.fail_after(seconds):
            async with wire.open_connection(
                host,
                port,
                ssl_context=context,
                server_hostname=clouddriver.tls.server_name,
                metadata=metadata,
            ) as stream:
                await stream.send(messages.AgentMessage(hello=hello))
                await stream.receive()
    except wire.RemoteRefused as exc:
        return probe_refused(
            address,
            exc.status,
            exc.message,
            has_token=token is not None,
            tls=context is not None,
            mint=mint,
        )
    except trio.TooSlowError:
        return Finding(
            SERVER,
            "server-auth",
            Verdict.FAIL,
            f"{address}: no gRPC answer within {seconds:g} s",
            "the address accepts TCP but does not answer gRPC: check it is the server's gRPC "
            "port (not its REST port) and that no proxy in between holds HTTP/2",
        )
    except wire.WireError as exc:
        return await _broken(host, port, address, context, exc, seconds)
    return Finding(
        SERVER, "server-auth", Verdict.OK, f"{address} answered the agent's Hello (protocol probe)"
    )


async def _broken(
    host: str,
    port: int,
    address: str,
    context: ssl.SSLContext | None,
    exc: wire.WireError,
    seconds: float,
) -> Finding:
    """The call broke before any gRPC status: say the most likely reason."""
    detail = f"{address}: the call broke before the server answered: {exc}"
    if context is None:
        speaks_tls = False
        with trio.move_on_after(seconds):
            try:
                await handshake(host, port, None)
                speaks_tls = True
            except (OSError, trio.BrokenResourceError):
                pass
        if speaks_tls:
            return Finding(
                SERVER,
                "server-auth",
                Verdict.FAIL,
                f"{address} speaks TLS, and clouddriver.insecure is true",
                "set clouddriver.insecure: false and clouddriver.tls.cacertFile to the server's CA",
            )
        return Finding(
            SERVER,
            "server-auth",
            Verdict.FAIL,
            detail,
            "check the address is the server's gRPC port (HTTP/2), not its REST port",
        )
    return Finding(
        SERVER,
        "server-auth",
        Verdict.FAIL,
        detail,
        "over TLS this is how a server refuses a client certificate it does not trust: check "
        "clouddriver.tls.clientCertFile against the server's grpc.tls.caFile",
    )


def _causes(exc: BaseException) -> str:
    return "; ".join(dict.fromkeys(str(e) for e in error_chain(exc) if str(e)))
