"""The gRPC endpoint's failure paths found by review: a store failure outside a batch ends the
call (not the server) and leaks no session; dynamic-account credentials only go to an agent
allowed to serve the account; a session ends when its bearer token expires."""

from __future__ import annotations

import json
import time
from typing import cast

import pytest
import trio

import wire
from server.store import SqliteStore
from wire import messages as m

from .._wait import wait_until
from ..wire._loop import in_loop
from .test_grpc import (
    account,
    batch,
    bearer,
    drain,
    hello,
    make_config,
    receive_kind,
    running,
    token,
    welcomed,
)


@in_loop
async def test_a_store_failure_at_connect_refuses_the_call_and_keeps_the_server() -> None:
    with trio.fail_after(20):
        async with running(make_config()) as server:
            # The store failing for good (closed under the server): writing the session's
            # agent row at connect raises StoreClosed.
            await cast(SqliteStore, server.state.sessions._store).aclose()
            meta = bearer(token(accounts=["prod"]))
            for _ in range(2):  # the server is still serving after the first failure
                async with wire.open_connection("127.0.0.1", server.grpc_port, metadata=meta) as s:
                    await s.send(hello(account()))
                    with pytest.raises(wire.RemoteRefused) as info:
                        await drain(s)
                assert info.value.status is wire.Status.UNAVAILABLE
                assert "store failed" in info.value.message
                # Nothing of the session is left behind (it was never handed to a closer).
                assert server.state.sessions.agents() == []
                assert server.state.accounts.registry.holders("prod") == []


@in_loop
async def test_dynamic_account_credentials_only_go_to_an_agent_allowed_the_name() -> None:
    with trio.fail_after(20):
        async with running(make_config()) as server:
            port = server.grpc_port
            # "narrow" serves nothing (the least loaded) but its token does not allow "more".
            narrow_meta = bearer(token(accounts=["other"]))
            wide_meta = bearer(token(accounts=["prod", "more"]))
            async with (
                wire.open_connection("127.0.0.1", port, metadata=narrow_meta) as narrow,
                wire.open_connection("127.0.0.1", port, metadata=wide_meta) as wide,
            ):
                await narrow.send(hello(agent_id="narrow"))
                await receive_kind(narrow, "welcome")
                await wide.send(hello(account(), agent_id="wide"))
                await receive_kind(wide, "welcome")
                assert await server.state.push_dynamic_account({"name": "more"}) == "wide"
                op: m.Operation = await receive_kind(wide, "operation")
                assert (op.type, json.loads(op.payload_json)) == (
                    "dynamicAccount",
                    {"name": "more"},
                )
                assert await server.state.push_dynamic_account({"name": "secret-x"}) is None


@in_loop
async def test_a_session_ends_when_its_bearer_token_expires() -> None:
    jwt_cfg = {
        "enabled": True,
        "secret": "a-shared-secret-for-tests-only-0123456789",
        "audience": "kubesvc",
        "leewaySeconds": 0,
    }
    config = make_config(grpc={"host": "127.0.0.1", "port": 0, "auth": {"jwt": jwt_cfg}})
    with trio.fail_after(20):
        async with running(config) as server:
            meta = bearer(token(exp_in=2, accounts=["prod"]))
            started = time.monotonic()
            async with welcomed(server.grpc_port, meta) as s:
                # The call may end by a reset as well as by a status (docs/protocol.md §12);
                # either way the call ends and the session is gone.
                with pytest.raises((wire.ConnectionLost, wire.RemoteRefused)) as info:
                    await drain(s)
            if isinstance(info.value, wire.RemoteRefused):
                assert info.value.status is wire.Status.UNAVAILABLE
                assert "token expired" in info.value.message
            assert 0.5 < time.monotonic() - started < 10
            await wait_until(
                lambda: not server.state.sessions.agents(), timeout=5, what="the session ended"
            )


@in_loop
async def test_secret_data_is_scrubbed_before_the_live_feed_and_the_store() -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "creds",
            "namespace": "default",
            "uid": "u-s",
            "resourceVersion": "3",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{hunter2}"},
        },
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"password": "hunter2"},
    }
    secret = wire.EventRecord(
        1, "prod", "v1", "Secret", "default", "creds", "u-s", "3", json.dumps(body).encode(), ""
    )
    with trio.fail_after(20):
        async with running(make_config()) as server:
            meta = bearer(token(accounts=["prod"]))
            with server.state.feed.subscribe() as subscription:
                async with welcomed(server.grpc_port, meta) as s:
                    await s.send(batch(1, [secret]))
                    await receive_kind(s, "ack")
                message = await subscription.receive()
            assert '"creds"' in message
            for leaked in ("hunter2", "aHVudGVyMg==", "stringData", "last-applied"):
                assert leaked not in message
            stored = await server.state.store.get_object("prod", "v1", "Secret", "default", "creds")
            assert stored is not None
            assert b"hunter2" not in stored.body
            assert b"aHVudGVyMg==" not in stored.body
