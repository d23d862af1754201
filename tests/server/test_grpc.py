"""The gRPC endpoint with the real wire bridge: a fake agent written with wire.open_connection."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import betterproto
import jwt
import pytest
import trio

import wire
from server import RunningServer, ServerConfig, parse_server_config, run_server
from server.store import AccountState
from wire import EventRecord, EventType
from wire import messages as m

from .._wait import wait_until
from ..wire._loop import in_loop

SECRET = "a-shared-secret-for-tests-only-0123456789"
AUDIENCE = "kubesvc"


def token(*, secret: str = SECRET, exp_in: float = 300, **claims: Any) -> str:
    payload = {"sub": "agent", "aud": AUDIENCE, "exp": int(time.time() + exp_in), **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


def bearer(value: str) -> dict[str, str]:
    return {"authorization": f"Bearer {value}"}


def make_config(store_path: str = ":memory:", **sections: Any) -> ServerConfig:
    data: dict[str, Any] = {
        "serverId": "test-server",
        "grpc": {
            "host": "127.0.0.1",
            "port": 0,
            "auth": {"jwt": {"enabled": True, "secret": SECRET, "audience": AUDIENCE}},
        },
        "store": {"path": store_path},
        # A short server heartbeat (docs/protocol.md §10), so the sessions of these tests are
        # never quiet for long.
        "sessions": {"helloTimeoutSeconds": 5, "heartbeatSeconds": 0.2},
    }
    data.update(sections)
    return parse_server_config(data)


@asynccontextmanager
async def running(config: ServerConfig) -> AsyncIterator[RunningServer]:
    async with trio.open_nursery() as nursery:
        server: RunningServer = await nursery.start(functools.partial(run_server, config))
        yield server
        nursery.cancel_scope.cancel()


def account(name: str = "prod", host: str = "10.0.0.1:6443", fp: str = "aa" * 32) -> m.AccountInfo:
    props = json.dumps({"kinds": ["pod"], "permissions": {"READ": ["dev"]}})
    return m.AccountInfo(
        name=name, kube_host=host, cert_fingerprint=fp, kube_version="v1.30", properties_json=props
    )


def hello(*accounts: m.AccountInfo, agent_id: str = "agent-1") -> m.AgentMessage:
    return m.AgentMessage(
        hello=m.Hello(
            protocol_version=wire.PROTOCOL_VERSION,
            agent_id=agent_id,
            instance_id="i-1",
            agent_version="0.1",
            accounts=list(accounts),
        )
    )


def pod(
    name: str, rv: str, *, account_name: str = "prod", etype: EventType = EventType.ADDED
) -> EventRecord:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"u-{name}",
            "resourceVersion": rv,
        },
    }
    return EventRecord(
        int(etype),
        account_name,
        "v1",
        "Pod",
        "default",
        name,
        f"u-{name}",
        rv,
        json.dumps(body).encode(),
        "",
    )


def marker(etype: EventType, rv: str = "") -> EventRecord:
    return EventRecord(int(etype), "prod", "v1", "Pod", "", "", "", rv, b"", "")


def batch(seq: int, records: Sequence[EventRecord]) -> m.AgentMessage:
    return m.AgentMessage(
        event_batch=m.EventBatch(seq=seq, records=wire.encode_events(records), count=len(records))
    )


def which(message: m.ServerMessage) -> tuple[str, Any]:
    return betterproto.which_one_of(message, "message")


async def receive_kind(stream: wire.ClientStream, kind: str) -> Any:
    """The next message of ``kind``, skipping heartbeats."""
    while True:
        name, value = which(await stream.receive())
        if name != "heartbeat" or kind == "heartbeat":
            assert name == kind, f"expected {kind}, got {name}: {value}"
            return value


@asynccontextmanager
async def welcomed(port: int, meta: dict[str, str]) -> AsyncIterator[wire.ClientStream]:
    """A call to the server on ``port`` (bearer ``meta``) past its greeting: Hello for
    ``account()`` sent, Welcome received; what most tests of a session start with."""
    async with wire.open_connection("127.0.0.1", port, metadata=meta) as s:
        await s.send(hello(account()))
        await receive_kind(s, "welcome")
        yield s


@in_loop
async def test_hello_welcome_batches_acks_and_store(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with running(make_config(str(tmp_path / "c.db"))) as server:
            meta = bearer(token(accounts=["prod"]))
            async with wire.open_connection("127.0.0.1", server.grpc_port, metadata=meta) as s:
                await s.send(hello(account()))
                welcome: m.Welcome = await receive_kind(s, "welcome")
                assert welcome.server_id == "test-server"
                assert len(welcome.session_token) >= 32
                assert welcome.limits.max_batch_events == 10_000
                (assigned,) = welcome.accounts
                assert (assigned.name, assigned.role, assigned.resume) == (
                    "prod",
                    m.Role.PRIMARY,
                    [],
                )
                await s.send(batch(1, [marker(EventType.SYNC_BEGIN), pod("a", "5"), pod("b", "6")]))
                assert (await receive_kind(s, "ack")).seq == 1
                await s.send(
                    batch(
                        2,
                        [marker(EventType.SYNC_END, "7"), pod("a", "8", etype=EventType.MODIFIED)],
                    )
                )
                assert (await receive_kind(s, "ack")).seq == 2
                await s.send(m.AgentMessage(heartbeat=m.Heartbeat(sent_at_ms=1)))
                await receive_kind(s, "heartbeat")
                store = server.state.store
                stored = await store.get_object("prod", "v1", "Pod", "default", "a")
                assert stored is not None
                assert stored.resource_version == "8"
                assert await store.count_objects("prod") == 2
                record = await store.get_account("prod")
                assert record is not None
                assert record.status is AccountState.ACTIVE
                assert record.permissions == {"READ": ["dev"]}
                (agent,) = server.state.sessions.agents()
                assert agent.agent_id == "agent-1"
                assert [a.agent_id for a in await store.list_agents()] == ["agent-1"]
            # the session ended: the account is orphaned, its agent row gone

            async def no_agent_rows() -> bool:
                return not await server.state.store.list_agents()

            await wait_until(no_agent_rows, timeout=5, what="the agent row is gone")
            record = await server.state.store.get_account("prod")
            assert record is not None
            assert record.status is AccountState.ORPHANED
            assert await server.state.store.list_agents() == []
            # a reconnect gets the resume point the sync bracket left
            async with wire.open_connection("127.0.0.1", server.grpc_port, metadata=meta) as s:
                await s.send(hello(account()))
                welcome = await receive_kind(s, "welcome")
                (assigned,) = welcome.accounts
                assert [(p.kind, p.resource_version) for p in assigned.resume] == [("Pod", "8")]


async def refused(port: int, message: m.AgentMessage | None, **kwargs: Any) -> wire.RemoteRefused:
    async with wire.open_connection("127.0.0.1", port, **kwargs) as s:
        if message is not None:
            await s.send(message)
        with pytest.raises(wire.RemoteRefused) as info:
            await drain(s)
    return info.value


async def drain(stream: wire.ClientStream) -> None:
    """Receive until the call ends (by the error it ends with)."""
    while True:
        await stream.receive()


@in_loop
async def test_auth_refusals_have_clear_statuses_and_register_nothing() -> None:
    with trio.fail_after(30):
        async with running(make_config()) as server:
            port, msg = server.grpc_port, hello(account())
            cases = [
                ({}, wire.Status.UNAUTHENTICATED, "no bearer token"),
                (bearer("not-a-jwt"), wire.Status.UNAUTHENTICATED, "bearer token"),
                (
                    bearer(token(secret="another-secret-of-the-same-length-0123")),
                    wire.Status.UNAUTHENTICATED,
                    "signature",
                ),
                (bearer(token(exp_in=-3600)), wire.Status.UNAUTHENTICATED, "expired"),
                (bearer(token(aud="someone-else")), wire.Status.UNAUTHENTICATED, "audience"),
                (bearer(token(accounts=["staging"])), wire.Status.PERMISSION_DENIED, "prod"),
                ({"authorization": "Basic abc"}, wire.Status.UNAUTHENTICATED, "Bearer"),
            ]
            for metadata, status, text in cases:
                err = await refused(port, msg, metadata=metadata)
                assert err.status is status, (metadata, err)
                assert text in err.message, (metadata, err)
            assert server.state.accounts.list() == []
            assert await server.state.store.list_accounts() == []
            assert await server.state.store.list_agents() == []


@in_loop
async def test_protocol_violations_end_the_call_and_keep_the_store_whole() -> None:
    with trio.fail_after(30):
        async with running(make_config()) as server:
            port, meta = server.grpc_port, bearer(token())
            err = await refused(port, batch(1, [pod("a", "1")]), metadata=meta)
            assert err.status is wire.Status.FAILED_PRECONDITION
            assert "expected Hello" in err.message
            old = m.AgentMessage(hello=m.Hello(protocol_version=99, agent_id="x"))
            err = await refused(port, old, metadata=meta)
            assert "protocol version 99" in err.message
            twice = hello(account(), account())
            err = await refused(port, twice, metadata=meta)
            assert err.status is wire.Status.INVALID_ARGUMENT
            assert "twice" in err.message

            async def after_welcome(*messages: m.AgentMessage) -> wire.RemoteRefused:
                async with welcomed(port, meta) as s:
                    for message in messages:
                        await s.send(message)
                    with pytest.raises(wire.RemoteRefused) as info:
                        await drain(s)
                return info.value

            err = await after_welcome(batch(1, [pod("x", "1", account_name="stranger")]))
            assert err.status is wire.Status.FAILED_PRECONDITION
            assert "'stranger'" in err.message
            garbage = m.AgentMessage(event_batch=m.EventBatch(seq=1, records=b"\x01\x02", count=1))
            err = await after_welcome(garbage)
            assert err.status is wire.Status.INVALID_ARGUMENT
            assert "batch seq 1" in err.message
            bad_json = EventRecord(1, "prod", "v1", "Pod", "default", "bad", "u", "1", b"{nope", "")
            err = await after_welcome(batch(1, [pod("ok", "1"), bad_json]))
            assert "not valid Kubernetes JSON" in err.message
            err = await after_welcome(batch(1, [pod("ok", "1")]), batch(1, [pod("ok", "2")]))
            assert err.status is wire.Status.ABORTED
            assert "does not follow" in err.message
            wrong_count = batch(1, [pod("ok", "1")])
            wrong_count.event_batch.count = 5
            err = await after_welcome(wrong_count)
            assert "says 5 records" in err.message
            # only the one good batch (the first seq 1 above) was stored, whole
            page = await server.state.store.query_objects()
            assert [(o.name, o.resource_version) for o in page.objects] == [("ok", "1")]


@in_loop
async def test_standby_is_promoted_when_the_primary_leaves() -> None:
    with trio.fail_after(30):
        async with running(make_config()) as server:
            port, meta = server.grpc_port, bearer(token())
            async with wire.open_connection("127.0.0.1", port, metadata=meta) as standby:
                async with wire.open_connection("127.0.0.1", port, metadata=meta) as primary:
                    await primary.send(hello(account(), agent_id="first"))
                    assert (await receive_kind(primary, "welcome")).accounts[
                        0
                    ].role == m.Role.PRIMARY
                    await primary.send(
                        batch(
                            1,
                            [
                                marker(EventType.SYNC_BEGIN),
                                pod("a", "1"),
                                marker(EventType.SYNC_END, "2"),
                            ],
                        )
                    )
                    await receive_kind(primary, "ack")
                    await standby.send(hello(account(), agent_id="second"))
                    welcome = await receive_kind(standby, "welcome")
                    assert welcome.accounts[0].role == m.Role.STANDBY
                    # a standby's records are acknowledged but not applied
                    await standby.send(batch(1, [pod("ghost", "3")]))
                    await receive_kind(standby, "ack")
                    assert (
                        await server.state.store.get_object("prod", "v1", "Pod", "default", "ghost")
                        is None
                    )
                    holders = server.state.accounts.holders("prod")
                    assert (holders.primary, holders.standbys) == ("first", ["second"])
                assignment: m.Assignment = await receive_kind(standby, "assignment")
                (change,) = assignment.accounts
                assert (change.name, change.role) == ("prod", m.Role.PRIMARY)
                assert [p.resource_version for p in change.resume] == ["2"]
                assert server.state.accounts.holders("prod").primary == "second"


@in_loop
async def test_another_cluster_claiming_the_name_is_rejected_with_the_reason() -> None:
    with trio.fail_after(20):
        async with running(make_config()) as server:
            port, meta = server.grpc_port, bearer(token())
            async with wire.open_connection("127.0.0.1", port, metadata=meta) as first:
                await first.send(hello(account()))
                await receive_kind(first, "welcome")
                async with wire.open_connection("127.0.0.1", port, metadata=meta) as second:
                    await second.send(hello(account(host="10.9.9.9:6443", fp="bb" * 32)))
                    (assigned,) = (await receive_kind(second, "welcome")).accounts
                    assert assigned.role == m.Role.REJECTED
                    assert "held by another cluster" in assigned.reason
                    assert "10.0.0.1:6443" in assigned.reason


@in_loop
async def test_accounts_changed_and_operator_disconnect() -> None:
    with trio.fail_after(20):
        async with running(make_config()) as server:
            port, meta = server.grpc_port, bearer(token())
            # ending a session while it waits for the agent resets the stream (wire: a
            # cancelled handler resets its call): the agent sees the connection lost
            async with wire.open_connection("127.0.0.1", port, metadata=meta) as s:
                await s.send(hello(agent_id="service-mode"))
                assert (await receive_kind(s, "welcome")).accounts == []
                added = m.AccountsChanged(accounts=[account("dyn")])
                await s.send(m.AgentMessage(accounts_changed=added))
                (assigned,) = (await receive_kind(s, "assignment")).accounts
                assert (assigned.name, assigned.role) == ("dyn", m.Role.PRIMARY)
                agent_id = await server.state.push_dynamic_account({"name": "more"})
                assert agent_id == "service-mode"
                op: m.Operation = await receive_kind(s, "operation")
                assert op.type == "dynamicAccount"
                assert json.loads(op.payload_json) == {"name": "more"}
                assert await server.state.disconnect_agent("service-mode") == 1
                with pytest.raises((wire.ConnectionLost, wire.RemoteRefused)) as info:
                    await drain(s)
            if isinstance(info.value, wire.RemoteRefused):
                assert info.value.status is wire.Status.UNAVAILABLE
            assert server.state.sessions.agents() == []


@in_loop
async def test_restart_on_the_same_file_resumes_with_the_stored_versions(tmp_path: Path) -> None:
    config = make_config(str(tmp_path / "cache.db"))
    meta = bearer(token())
    with trio.fail_after(30):
        async with (
            running(config) as server,
            wire.open_connection("127.0.0.1", server.grpc_port, metadata=meta) as s,
        ):
            await s.send(hello(account()))
            await receive_kind(s, "welcome")
            await s.send(
                batch(
                    1,
                    [
                        marker(EventType.SYNC_BEGIN),
                        pod("a", "4"),
                        marker(EventType.SYNC_END, "5"),
                    ],
                )
            )
            await receive_kind(s, "ack")
        async with running(config) as server:
            record = await server.state.store.get_account("prod")
            assert record is not None
            assert record.status is AccountState.ORPHANED  # nobody serves it yet
            async with wire.open_connection("127.0.0.1", server.grpc_port, metadata=meta) as s:
                await s.send(hello(account()))
                (assigned,) = (await receive_kind(s, "welcome")).accounts
                assert assigned.role == m.Role.PRIMARY
                assert [(p.kind, p.resource_version) for p in assigned.resume] == [("Pod", "5")]
                assert await server.state.store.count_objects("prod") == 1
                assert server.state.accounts.get("prod") is not None


@in_loop
async def test_close_listeners_see_each_session_that_closes() -> None:
    closed: list[tuple[str, bool]] = []  # (agent id, already gone from the manager)

    def broken(session: Any) -> None:
        raise RuntimeError("a listener bug")

    with trio.fail_after(30):
        async with running(make_config()) as server:
            sessions = server.state.sessions
            sessions.add_close_listener(broken)  # logged; the next listener still runs
            one_closed = trio.Event()

            def record(s: Any) -> None:
                closed.append((s.agent_id, sessions.get(s.session_id) is None))
                one_closed.set()

            sessions.add_close_listener(record)
            port, meta = server.grpc_port, bearer(token())
            async with wire.open_connection("127.0.0.1", port, metadata=meta) as agent:
                await agent.send(hello(account(), agent_id="leaving"))
                await receive_kind(agent, "welcome")
                assert closed == []
            await one_closed.wait()
            assert closed == [("leaving", True)]
            await wait_until(
                lambda: server.state.accounts.holders("prod").primary is None,
                what="prod has no PRIMARY",
            )
