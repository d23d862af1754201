"""Forward compatibility, server side (issue #12, point 6): a message kind or field this
version does not know is skipped, counted in kubesvc_protocol_unknown_fields_total, logged once
per field number, and the call goes on. The frames are written by hand, as the next version's
agent would send them, and go through the real bridge to the real server."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest
import trio

import server.api
import wire
from server import RunningServer, ServerConfig, run_server
from wire import EventType
from wire import messages as m

from ..wire._loop import in_loop
from ..wire.protobuf_bytes import as_sent, bytes_field, varint_field
from .test_grpc import (
    account,
    batch,
    bearer,
    drain,
    hello,
    make_config,
    marker,
    pod,
    receive_kind,
    token,
    welcomed,
)

# AgentMessage field 30: a kind of message from the future, with a body of its own.
FUTURE_KIND = bytes_field(30, bytes_field(1, b"a message kind this server does not know"))


def _hello_with_unknown_fields() -> bytes:
    """Hello with field 20 unknown, its AccountInfo with field 15 unknown."""
    info = bytes(account()) + varint_field(15, 1)
    known = hello().hello
    return bytes_field(1, bytes(known) + bytes_field(5, info) + varint_field(20, 7))


def _batch_with_unknown_field(seq: int, records: list[wire.EventRecord]) -> bytes:
    """EventBatch with field 9 unknown (the hand-written fast path falls back)."""
    known = batch(seq, records).event_batch
    return bytes_field(2, bytes(known) + varint_field(9, 1))


@asynccontextmanager
async def _running_with_api(config: ServerConfig) -> AsyncIterator[RunningServer]:
    async with trio.open_nursery() as nursery:
        running: RunningServer = await nursery.start(
            functools.partial(run_server, config, serve_api=server.api.serve_api)
        )
        yield running
        nursery.cancel_scope.cancel()


@in_loop
async def test_unknown_kinds_and_fields_are_skipped_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="server.grpc")
    config = make_config(api={"host": "127.0.0.1", "port": 0})
    with trio.fail_after(30):
        async with _running_with_api(config) as running:
            meta = bearer(token(accounts=["prod"]))
            async with wire.open_connection("127.0.0.1", running.grpc_port, metadata=meta) as s:
                # Before the Hello, too: a newer agent may open with something new.
                await s.send(as_sent(m.AgentMessage, FUTURE_KIND))
                await s.send(as_sent(m.AgentMessage, _hello_with_unknown_fields()))
                welcome: m.Welcome = await receive_kind(s, "welcome")
                assert [a.role for a in welcome.accounts] == [m.Role.PRIMARY]
                await s.send(as_sent(m.AgentMessage, FUTURE_KIND))
                await s.send(batch(1, [marker(EventType.SYNC_BEGIN), pod("a", "1")]))
                assert (await receive_kind(s, "ack")).seq == 1
                await s.send(as_sent(m.AgentMessage, FUTURE_KIND))
                raw = _batch_with_unknown_field(2, [pod("b", "2")])
                await s.send(as_sent(m.AgentMessage, raw))
                assert (await receive_kind(s, "ack")).seq == 2
                await s.send(m.AgentMessage(heartbeat=m.Heartbeat(sent_at_ms=1)))
                await receive_kind(s, "heartbeat")
            store = running.state.store
            assert await store.get_object("prod", "v1", "Pod", "default", "b") is not None
            assert await store.count_objects("prod") == 2
            assert running.state.unknown_fields.counts == {
                ("AgentMessage", 30): 3,
                ("Hello", 20): 1,
                ("AccountInfo", 15): 1,
                ("EventBatch", 9): 1,
            }
            base = f"http://127.0.0.1:{running.api_port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                text = (await http.get("/metrics")).text
    family = "kubesvc_protocol_unknown_fields_total"
    assert f'{family}{{field="30",message="AgentMessage"}} 3.0' in text
    assert f'{family}{{field="9",message="EventBatch"}} 1.0' in text
    logged = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(logged) == 4, logged  # once per (message, field number), not per message
    assert any("field 30 of AgentMessage" in line for line in logged)


@in_loop
async def test_an_empty_message_and_a_wrong_wire_type_are_still_refused() -> None:
    with trio.fail_after(30):
        async with _running_with_api(make_config()) as running:
            port, meta = running.grpc_port, bearer(token(accounts=["prod"]))
            cases = [
                (m.AgentMessage(), "an empty AgentMessage"),
                # Field 3 (operation_result, a message) as a varint: malformed, not unknown.
                (as_sent(m.AgentMessage, varint_field(3, 5)), "where a message belongs"),
            ]
            for message, text in cases:
                async with welcomed(port, meta) as s:
                    await s.send(message)
                    with pytest.raises(wire.RemoteRefused) as info:
                        await drain(s)
                assert info.value.status is wire.Status.INVALID_ARGUMENT
                assert text in info.value.message
            assert running.state.unknown_fields.counts == {}
