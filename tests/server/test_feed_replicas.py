"""The feed is global (issue 13): two server replicas on one PostgreSQL, an agent (a real gRPC
client speaking the protocol) streaming to r1, a WebSocket subscriber on r2's /v1/events.
What r1 ingests reaches r2's subscriber, each object's changes in order, the objects a relist
swept as DELETED before its SYNC_END; housekeeping trims the change log."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

import wire
from server import ServerConfig
from wire import EventType
from wire import messages as m

from .._wait import wait_until
from ..wire._loop import in_loop
from ._stores import StoreBackend
from .test_grpc import (
    account,
    batch,
    bearer,
    hello,
    make_config,
    marker,
    pod,
    receive_kind,
    token,
)
from .test_replica_roles import Replica, replicas, role_account, start


def replica_config(replica: str, url: str) -> ServerConfig:
    return make_config(
        serverId=replica,
        store={"url": url},
        api={"host": "127.0.0.1", "port": 0},
        replicas={
            "heartbeatMs": 200,
            "leaseTtlMs": 10_000,
            "feedPollMs": 200,
            "changeLogKeepMs": 60_000,
        },
    )


async def receive_json(ws: WebSocketConnection) -> dict[str, Any]:
    message = await ws.get_message()
    assert isinstance(message, str)
    result: dict[str, Any] = json.loads(message)
    return result


def brief(message: dict[str, Any]) -> tuple[str, str, str]:
    return message["type"], message.get("name", ""), message.get("resourceVersion", "")


@asynccontextmanager
async def two_replicas(backend: StoreBackend) -> AsyncIterator[tuple[Replica, Replica]]:
    async with replicas() as nursery:
        r1 = await start(nursery, replica_config("r1", backend.url))
        r2 = await start(nursery, replica_config("r2", backend.url))
        yield r1, r2


@asynccontextmanager
async def agent_on(replica: Replica) -> AsyncIterator[wire.ClientStream]:
    """An agent for account "prod", PRIMARY, streaming to ``replica``."""
    meta = bearer(token())
    async with wire.open_connection("127.0.0.1", replica.server.grpc_port, metadata=meta) as s:
        await s.send(hello(account()))
        assert role_account(await receive_kind(s, "welcome")).role == m.Role.PRIMARY
        yield s


async def send_batch(stream: wire.ClientStream, seq: int, records: list[Any]) -> None:
    await stream.send(batch(seq, records))
    assert (await receive_kind(stream, "ack")).seq == seq


@in_loop
async def test_what_one_replica_ingests_reaches_a_subscriber_on_the_other(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(60):
        async with two_replicas(pg_backend) as (r1, r2):
            url = f"ws://127.0.0.1:{r2.server.api_port}/v1/events?account=prod"
            async with open_websocket_url(url) as ws, agent_on(r1) as agent:
                assert (await receive_json(ws))["type"] == "subscribed"
                await send_batch(agent, 1, [pod("p1", "1"), pod("p2", "2")])
                first = [await receive_json(ws) for _ in range(2)]
                assert [brief(x) for x in first] == [("ADDED", "p1", "1"), ("ADDED", "p2", "2")]
                assert first[0]["object"]["metadata"]["name"] == "p1"
                # a relist without p2: r1's store sweeps it at SYNC_END; r2's subscriber hears
                relist = [
                    marker(EventType.SYNC_BEGIN),
                    pod("p1", "3", etype=EventType.MODIFIED),
                    marker(EventType.SYNC_END, "3"),
                ]
                await send_batch(agent, 2, relist)
                got = [brief(await receive_json(ws)) for _ in range(3)]
                assert got == [("MODIFIED", "p1", "3"), ("DELETED", "p2", ""), ("SYNC_END", "", "")]
            # and queries on r2 read the same tables
            async with httpx.AsyncClient(base_url=r2.api) as client:
                items = (await client.get("/v1/objects", params={"account": "prod"})).json()
                assert [(i["name"], i["resourceVersion"]) for i in items["items"]] == [("p1", "3")]
                metrics = (await client.get("/metrics")).text
                assert "kubesvc_server_feed_follower_changes_total 2.0" in metrics
                assert "kubesvc_server_feed_follower_resyncs_total 0.0" in metrics


@in_loop
async def test_each_objects_changes_stay_in_order_under_churn_and_the_log_is_trimmed(
    pg_backend: StoreBackend,
) -> None:
    names = [f"p{i}" for i in range(5)]
    batches = 30
    with trio.fail_after(90):
        async with two_replicas(pg_backend) as (r1, r2):
            url = f"ws://127.0.0.1:{r2.server.api_port}/v1/events?account=prod&kind=pod"
            async with open_websocket_url(url) as ws, agent_on(r1) as agent:
                assert (await receive_json(ws))["type"] == "subscribed"
                seen: dict[str, list[int]] = {name: [] for name in names}
                final = {name: batches * 10 + i for i, name in enumerate(names)}

                async def collect() -> None:
                    while any(not v or v[-1] != final[k] for k, v in seen.items()):
                        message = await receive_json(ws)
                        assert message["type"] in ("ADDED", "MODIFIED"), message
                        seen[message["name"]].append(int(message["resourceVersion"]))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(collect)
                    for b in range(1, batches + 1):
                        etype = EventType.ADDED if b == 1 else EventType.MODIFIED
                        records = [
                            pod(n, str(b * 10 + i), etype=etype) for i, n in enumerate(names)
                        ]
                        await send_batch(agent, b, records)
                for name, versions in seen.items():
                    assert versions == sorted(set(versions)), (name, versions)  # never back

                # housekeeping (one replica's) trims rows past changeLogKeepMs: age them
                pg_backend.sql("UPDATE changes SET at_ms = at_ms - 3600000")

                def log_rows() -> int:
                    return int(pg_backend.sql("SELECT count(*) FROM changes")[0][0])

                await wait_until(lambda: log_rows() == 0, timeout=20, what="the log trimmed")
                # the followers were not behind what was trimmed: nobody is told to resync
                await send_batch(agent, batches + 1, [pod("p0", "9999", etype=EventType.MODIFIED)])
                assert brief(await receive_json(ws)) == ("MODIFIED", "p0", "9999")
