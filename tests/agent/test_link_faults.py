"""An address that accepts connections but is no server is a broken link, never the end of the
agent: the link logs one line per attempt, backs off, and connects as soon as the real server
answers on that address (issue #12, point 1).

Each test points the real link at a listener that fails in one way (tests/agent/
fault_listeners.py), waits for several attempts, then closes the listener and starts the real
server on the same port, as a Service does when the server behind it is back.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import ssl
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
import trio

import server
import wire
from agent import Backoff
from agent.link._link import Link, LinkSettings
from agent.link._rotation import ServerAddress
from budget import ByteBudget, EventSender
from wire import messages

from .._wait import wait_until
from ..wire._certs import CertificateAuthority, client_context, server_context
from ..wire._loop import in_loop
from .fault_listeners import (
    BINARY_GARBAGE,
    HTTP1_ANSWER,
    Behaviour,
    FaultListener,
    reset_at_once,
    send_garbage,
    stay_silent,
    tls_with,
)

ATTEMPTS = 3  # connections the bad listener takes before the real server replaces it
# How the link words each failure (one of them, depending on when the bytes arrived).
RESET_BEFORE = "the server reset it"  # before the call's stream existed
RESET_CONNECTING = f"[Errno {errno.ECONNRESET}]"  # while the TCP connect was still completing
NOT_HTTP2_BEFORE = "its first bytes were not HTTP/2"
BROKEN = "the server or the network broke the stream"  # after
GRPCLIB_LOST = "Connection lost"  # grpclib's words when the connection went while it waited
GRPCLIB_PROTOCOL_ERROR = "Protocol error"  # and when h2 refused the peer's bytes
# OpenSSL's words for a TLS record that is plain text, by version.
NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG")
NO_WELCOME = "the server did not answer Hello in time"


def _account() -> messages.AccountInfo:
    properties = json.dumps({"kinds": ["pod"]})
    return messages.AccountInfo(
        name="k1",
        kube_host="10.0.0.1:6443",
        cert_fingerprint="aa" * 32,
        kube_version="v1.30",
        properties_json=properties,
    )


class _Agent:
    """The real Link with one account; ``connected`` is set when the server made it PRIMARY
    (the Welcome arrived and the account runner started)."""

    def __init__(
        self,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        backoff: Backoff | None = None,
        also: tuple[int, ...] = (),
    ) -> None:
        self.connected = trio.Event()
        settings = LinkSettings(
            host="127.0.0.1",
            port=port,
            # ``also``: more addresses (ports on loopback) after ``port``, dialled in turn.
            addresses=tuple(ServerAddress("127.0.0.1", p) for p in (port, *also)) if also else (),
            agent_id="agent-faults",
            instance_id="i-1",
            agent_version="0.1",
            ssl_context=ssl_context,
            heartbeat_seconds=0,
            welcome_timeout_seconds=0.5,
            backoff=backoff or Backoff(base=0.02, multiplier=1.5, jitter=0, max_delay=0.1),
        )
        self.link = Link(
            settings,
            ByteBudget(1 << 20),
            hello_accounts=self._accounts,
            runner=self._runner,
            max_resume_age_ms=lambda name: 0,
        )

    async def _accounts(self) -> list[messages.AccountInfo]:
        return [_account()]

    async def _runner(
        self,
        name: str,
        resume: Mapping[tuple[str, str, str], str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        self.connected.set()
        task_status.started()
        await trio.sleep_forever()


def _server_config(port: int, tls: server.TlsSettings | None = None) -> server.ServerConfig:
    base = server.ServerConfig()
    return replace(
        base,
        grpc=replace(base.grpc, host="127.0.0.1", port=port, tls=tls),
        store=replace(base.store, url="sqlite://:memory:"),
    )


async def _survives_then_connects(
    behaviour: Behaviour,
    caplog: pytest.LogCaptureFixture,
    reasons: tuple[str, ...],
    *,
    client_ssl: ssl.SSLContext | None = None,
    tls: server.TlsSettings | None = None,
) -> None:
    listener = FaultListener(behaviour)
    async with trio.open_nursery() as nursery:
        bad: trio.CancelScope = await nursery.start(listener.serve)
        agent = _Agent(listener.port, client_ssl)
        await nursery.start(agent.link.run)
        # The link has failed ATTEMPTS - 1 times and is trying again: it is alive.
        await listener.wait_connections(ATTEMPTS)
        assert not agent.connected.is_set()
        bad.cancel()  # the scope's exit closes the listener and every connection it holds
        await trio.lowlevel.checkpoint()
        config = _server_config(listener.port, tls)
        await nursery.start(functools.partial(server.run_server, config))
        await agent.connected.wait()
        nursery.cancel_scope.cancel()
    status = agent.link.status
    assert status.sessions == 1
    assert status.last_error  # what the last failed attempt hit, for /ready and the admin view
    lost = [r for r in caplog.records if r.name == "agent.link" and "lost" in r.getMessage()]
    assert len(lost) >= ATTEMPTS - 1, [r.getMessage() for r in lost]
    for record in lost:  # one line each: a reason and the delay, no traceback
        assert record.levelno == logging.WARNING
        assert record.exc_info is None
        assert f"127.0.0.1:{listener.port} lost: " in record.getMessage()
        assert "; reconnecting in " in record.getMessage()
    # The attempts the bad listener took (the first ones) failed for a reason it gives.
    for record in lost[: ATTEMPTS - 1]:
        assert any(text in record.getMessage() for text in reasons), record.getMessage()


@in_loop
async def test_an_address_that_accepts_and_resets_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The defect: grpclib created its stream on the reset connection and the AttributeError
    # ended the agent process. Reset connections must read as a lost link, every time.
    with trio.fail_after(30):
        await _survives_then_connects(
            reset_at_once, caplog, (RESET_CONNECTING, RESET_BEFORE, BROKEN, GRPCLIB_LOST)
        )


@in_loop
async def test_an_address_that_accepts_and_stays_silent(caplog: pytest.LogCaptureFixture) -> None:
    with trio.fail_after(30):
        await _survives_then_connects(stay_silent, caplog, (NO_WELCOME,))


@pytest.mark.parametrize(
    ("answer", "reasons"),
    [
        (BINARY_GARBAGE, (NOT_HTTP2_BEFORE, GRPCLIB_PROTOCOL_ERROR)),
        (HTTP1_ANSWER, (NO_WELCOME,)),  # h2 waits for the "frame" it announced to end
    ],
    ids=["binary", "http1"],
)
@in_loop
async def test_an_address_that_answers_garbage(
    answer: bytes, reasons: tuple[str, ...], caplog: pytest.LogCaptureFixture
) -> None:
    with trio.fail_after(30):
        await _survives_then_connects(send_garbage(answer), caplog, reasons)


def _tls_server(tmp_path: Path) -> tuple[CertificateAuthority, server.TlsSettings]:
    """A CA the agent trusts, and the real server's TLS settings with a certificate of it."""
    trusted = CertificateAuthority(tmp_path, "trusted CA")
    real = trusted.issue("server", server=True)
    return trusted, server.TlsSettings(str(real.cert), str(real.key))


@in_loop
async def test_a_tls_handshake_that_fails(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trusted, tls = _tls_server(tmp_path)
    stranger = CertificateAuthority(tmp_path, "stranger CA")
    impostor = stranger.issue("impostor", server=True)
    with trio.fail_after(30):
        await _survives_then_connects(
            tls_with(server_context(stranger, impostor, require_client=False)),
            caplog,
            ("CERTIFICATE_VERIFY_FAILED",),
            client_ssl=client_context(trusted),
            tls=tls,
        )


@in_loop
async def test_a_tls_address_that_answers_in_plain_http(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trusted, tls = _tls_server(tmp_path)
    with trio.fail_after(30):
        await _survives_then_connects(
            send_garbage(HTTP1_ANSWER),
            caplog,
            NOT_TLS,
            client_ssl=client_context(trusted),
            tls=tls,
        )


@in_loop
async def test_a_tls_address_that_stays_silent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The TLS handshake never ends: without a deadline of the link's own, asyncio would wait
    # 60 s for it on every attempt.
    trusted, tls = _tls_server(tmp_path)
    with trio.fail_after(30):
        await _survives_then_connects(
            stay_silent,
            caplog,
            ("could not connect within 0.5 s",),
            client_ssl=client_context(trusted),
            tls=tls,
        )


class _DrainingReplica:
    """A replica shutting down, seen through a proxy that keeps sending the agent to it: it
    welcomes the first session and then ends it as a drain does; every later Hello gets the
    same draining status before any Welcome."""

    def __init__(self) -> None:
        self.hellos = 0
        self.second_hello = trio.Event()

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        self.hellos += 1
        await stream.receive()
        draining = wire.Refuse(wire.Status.UNAVAILABLE, f"{wire.DRAINING}: s-1 is shutting down")
        if self.hellos > 1:
            self.second_hello.set()
            raise draining
        primary = messages.AccountAssignment(name="k1", role=messages.Role.PRIMARY)
        welcome = messages.Welcome(session_token="t" * 32, server_id="s-1", accounts=[primary])
        await stream.send(messages.ServerMessage(welcome=welcome))
        raise draining


@in_loop
async def test_a_drain_moves_a_session_at_once_but_a_refused_hello_backs_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The drain status ending a session we had reconnects at once (within the spread), not
    after the backoff; the same status refusing a Hello is backed off like any refusal, so a
    proxy that keeps the agent on the draining pod costs no tight loop (found in review)."""
    caplog.set_level(logging.INFO, logger="agent.link")
    replica = _DrainingReplica()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, replica.handler, "127.0.0.1", 0)
            agent = _Agent(port, backoff=Backoff(base=60.0, jitter=0, max_delay=60.0))
            await nursery.start(agent.link.run)
            # Far sooner than the 60 s backoff: the drain's reconnect is at once.
            with trio.fail_after(10):
                await replica.second_hello.wait()

            def backed_off() -> bool:
                return any("reconnecting in 60.00 s" in r.getMessage() for r in caplog.records)

            await wait_until(backed_off, timeout=10, what="the refused Hello backed off 60 s")
            assert replica.hellos == 2
            nursery.cancel_scope.cancel()
    assert agent.link.status.sessions == 1
    moved = [r.getMessage() for r in caplog.records if "the server is draining" in r.getMessage()]
    assert len(moved) == 1, moved
