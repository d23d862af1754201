"""Roles across server replicas: two servers on one PostgreSQL, agents (real gRPC clients
speaking the protocol) for one account on both. One PRIMARY; a crashed replica's primary is
taken over once its lease lapses; a drained one's at once; another cluster is REJECTED on
either replica; /armory/clouddrivers and /metrics show both replicas."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import psycopg
import pytest
import trio

import wire
from server import RunningServer, ServerConfig, run_server
from server.api import serve_api
from server.store import AccountRecord, AccountState, AgentRecord, ReplicaRecord
from wire import EventRecord, EventType
from wire import messages as m

from .._wait import wait_until
from ..wire._loop import in_loop
from ._stores import StoreBackend
from .test_grpc import account, bearer, hello, make_config, receive_kind, token

HEARTBEAT_MS = 200


def config(replica: str, url: str, lease_ttl_ms: int) -> ServerConfig:
    return make_config(
        serverId=replica,
        store={"url": url},
        api={"host": "127.0.0.1", "port": 0},
        replicas={"heartbeatMs": HEARTBEAT_MS, "leaseTtlMs": lease_ttl_ms},
    )


@dataclass
class Replica:
    server: RunningServer
    scope: trio.CancelScope
    stop: trio.Event

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.server.api_port}"


@asynccontextmanager
async def replicas() -> AsyncIterator[trio.Nursery]:
    async with trio.open_nursery() as nursery:
        yield nursery
        nursery.cancel_scope.cancel()


async def start(nursery: trio.Nursery, cfg: ServerConfig) -> Replica:
    """A replica in ``nursery``: ``scope.cancel()`` stops it without a drain, ``stop.set()``
    drains it."""
    scope, stop = trio.CancelScope(), trio.Event()

    async def run(*, task_status: trio.TaskStatus[RunningServer]) -> None:
        with scope:
            await run_server(cfg, serve_api=serve_api, stop=stop, task_status=task_status)

    server: RunningServer = await nursery.start(functools.partial(run))
    return Replica(server, scope, stop)


async def read_to_the_end(stream: wire.ClientStream) -> None:
    while True:
        await stream.receive()


def role_account(welcome: m.Welcome) -> m.AccountAssignment:
    (assigned,) = welcome.accounts
    return assigned


@in_loop
async def test_one_primary_across_replicas_and_failover_when_a_replica_dies(
    pg_backend: StoreBackend,
) -> None:
    # r1 reaches the database as a role of its own: taking the role's login away and ending
    # its connections is r1 dying, as the database and the other replica see it (no lease
    # released, no heartbeat any more), while its process is still ours to stop.
    assert pg_backend.server is not None
    user = f"r1_{pg_backend.database}"
    pg_backend.sql(f'CREATE ROLE "{user}" LOGIN SUPERUSER')
    ttl = 2000  # a heartbeat held up by a loaded machine must not look like a death
    meta = bearer(token())
    try:
        with trio.fail_after(60):
            async with replicas() as nursery:
                r2 = await start(nursery, config("r2", pg_backend.url, ttl))
                r1_url = pg_backend.server.url(pg_backend.database, user=user)
                r1 = await start(nursery, config("r1", r1_url, ttl))
                async with (
                    wire.open_connection("127.0.0.1", r1.server.grpc_port, metadata=meta) as a,
                    wire.open_connection("127.0.0.1", r2.server.grpc_port, metadata=meta) as b,
                ):
                    await a.send(hello(account(), agent_id="agent-a"))
                    assert role_account(await receive_kind(a, "welcome")).role == m.Role.PRIMARY
                    await b.send(hello(account(), agent_id="agent-b"))
                    standby = role_account(await receive_kind(b, "welcome"))
                    assert standby.role == m.Role.STANDBY
                    assert "replica r1" in standby.reason

                    # another cluster under the same name: rejected on the other replica too
                    async with wire.open_connection(
                        "127.0.0.1", r2.server.grpc_port, metadata=meta
                    ) as c:
                        await c.send(hello(account(host="10.9.9.9:6443", fp="bb" * 32)))
                        rejected = role_account(await receive_kind(c, "welcome"))
                        assert rejected.role == m.Role.REJECTED
                        assert "held by another cluster" in rejected.reason

                    async with httpx.AsyncClient(base_url=r2.api) as client:

                        async def both_listed() -> bool:
                            drivers = (await client.get("/armory/clouddrivers")).json()
                            by_id = {d["id"]: d for d in drivers}
                            return (
                                set(by_id) == {"r1", "r2"}
                                and by_id["r1"].get("primaries") == 1
                                and by_id["r2"].get("primaries") == 0
                                and by_id["r2"]["local"]
                                and by_id["r1"]["agents"] == ["agent-a"]
                            )

                        await wait_until(both_listed, timeout=10, what="both replicas listed")
                        r1_view = (await client.get("/armory/clouddrivers/r1")).json()
                        assert {"address", "started", "lastHeartbeat", "sessions"} <= set(r1_view)
                        assert f":{r1.server.grpc_port}" in r1_view["address"]

                        async def metrics_show_r1() -> bool:
                            text = (await client.get("/metrics")).text
                            return 'kubesvc_replica_primaries{replica="r1"} 1.0' in text

                        await wait_until(metrics_show_r1, timeout=10, what="per-replica gauges")

                    # r1 dies: its lease lapses and b is promoted within the TTL + a heartbeat
                    pg_backend.sql(f'ALTER ROLE "{user}" NOLOGIN')
                    pg_backend.sql(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename=%s",
                        (user,),
                    )
                    with trio.fail_after((ttl + 2 * HEARTBEAT_MS) / 1000 + 2):  # + slack: load
                        assignment = await receive_kind(b, "assignment")
                    (promoted,) = assignment.accounts
                    assert promoted.role == m.Role.PRIMARY
                    assert "lapsed" in promoted.reason
                    assert "r1" in promoted.reason
                    assert r2.server.state.sessions.primary_session("prod") is not None
                    r1.scope.cancel()
    finally:
        with psycopg.connect(pg_backend.url, autocommit=True) as pg:
            pg.execute(f'DROP ROLE IF EXISTS "{user}"')


@in_loop
async def test_a_drained_replica_hands_its_accounts_over_at_once(
    pg_backend: StoreBackend,
) -> None:
    ttl = 30_000  # a promotion well before it can only come from the drain's release
    meta = bearer(token())
    with trio.fail_after(30):
        async with replicas() as nursery:
            r1 = await start(nursery, config("r1", pg_backend.url, ttl))
            r2 = await start(nursery, config("r2", pg_backend.url, ttl))
            async with wire.open_connection("127.0.0.1", r2.server.grpc_port, metadata=meta) as b:
                async with wire.open_connection(
                    "127.0.0.1", r1.server.grpc_port, metadata=meta
                ) as a:
                    await a.send(hello(account(), agent_id="agent-a"))
                    assert role_account(await receive_kind(a, "welcome")).role == m.Role.PRIMARY
                    await b.send(hello(account(), agent_id="agent-b"))
                    assert role_account(await receive_kind(b, "welcome")).role == m.Role.STANDBY
                    r1.stop.set()
                    with pytest.raises((wire.RemoteRefused, wire.ConnectionLost)):
                        await read_to_the_end(a)
                with trio.fail_after(10):
                    (promoted,) = (await receive_kind(b, "assignment")).accounts
                assert promoted.role == m.Role.PRIMARY
                assert [r.replica_id for r in await r2.server.state.store.list_replicas()] == ["r2"]


@in_loop
async def test_every_replica_knows_the_accounts_of_the_others(pg_backend: StoreBackend) -> None:
    """An account an agent registered on r1, or that REST added or removed on one replica, is
    known on the other within heartbeats (credentials, the operations' account checks); the
    agent rows a crashed replica left are removed once it is forgotten."""
    meta = bearer(token())
    with trio.fail_after(45):
        async with replicas() as nursery:
            r1 = await start(nursery, config("r1", pg_backend.url, 10_000))
            r2 = await start(nursery, config("r2", pg_backend.url, 10_000))
            store = r2.server.state.store
            # A replica that crashed long ago, with the row of an agent session it held.
            old = int(time.time() * 1000) - 3_600_000
            await store.heartbeat_replica(ReplicaRecord("ghost", "", old, old), 1000)
            await store.upsert_agent(
                AgentRecord("ghost-session", "agent-z", server_id="ghost", connected_at_ms=old)
            )
            async with (
                wire.open_connection("127.0.0.1", r1.server.grpc_port, metadata=meta) as a,
                httpx.AsyncClient(base_url=r1.api) as on_r1,
                httpx.AsyncClient(base_url=r2.api) as on_r2,
            ):
                await a.send(hello(account(), agent_id="agent-a"))
                assert role_account(await receive_kind(a, "welcome")).role == m.Role.PRIMARY

                async def r2_knows_prod() -> bool:
                    return (await on_r2.get("/credentials/prod")).status_code == 200

                await wait_until(r2_knows_prod, timeout=10, what="r2 knows r1's account")
                assert r2.server.state.accounts.get("prod") is not None

                added = await on_r2.post("/armory/accounts", json=[{"name": "added"}])
                assert added.status_code == 202, added.text

                async def r1_knows_added() -> bool:
                    return (await on_r1.get("/armory/accounts/added")).status_code == 200

                await wait_until(r1_knows_added, timeout=10, what="r1 knows r2's new account")
                assert (await on_r1.delete("/armory/accounts/added")).status_code in (200, 204)

                async def r2_forgot_added() -> bool:
                    return (await on_r2.get("/armory/accounts/added")).status_code == 404

                await wait_until(r2_forgot_added, timeout=10, what="r2 forgets the removed one")

                async def ghost_rows_gone() -> bool:
                    agents = await store.list_agents()
                    return not any(agent.server_id == "ghost" for agent in agents)

                await wait_until(ghost_rows_gone, timeout=10, what="the dead replica's rows gone")

                # An account row still naming the dead replica's connection (it crashed while
                # serving it): no replica takes that connection in.
                ghost_connection = {"clouddriverId": "ghost", "agentId": "agent-z"}
                await store.upsert_account(
                    AccountRecord(
                        "haunted", status=AccountState.ACTIVE, connections=[ghost_connection]
                    )
                )

                async def haunted_seen_clean() -> bool:
                    seen = r1.server.state.accounts.get("haunted")
                    return seen is not None and seen.connections == []

                await wait_until(haunted_seen_clean, timeout=10, what="no dead connection taken")
                assert "ghost" not in {r.replica_id for r in await store.list_replicas()}
                # The live replica's agent row stays.
                assert "agent-a" in {agent.agent_id for agent in await store.list_agents()}


@in_loop
async def test_an_account_deleted_on_the_other_replica_is_taken_from_its_agent(
    pg_backend: StoreBackend,
) -> None:
    """REST may reach any replica: deleting an account on r2 while its agent streams to r1
    tells that agent REJECTED at r1's next heartbeat, and the row stays deleted."""
    meta = bearer(token())
    with trio.fail_after(30):
        async with replicas() as nursery:
            r1 = await start(nursery, config("r1", pg_backend.url, 10_000))
            r2 = await start(nursery, config("r2", pg_backend.url, 10_000))
            async with (
                wire.open_connection("127.0.0.1", r1.server.grpc_port, metadata=meta) as a,
                httpx.AsyncClient(base_url=r2.api) as on_r2,
            ):
                await a.send(hello(account(), agent_id="agent-a"))
                assert role_account(await receive_kind(a, "welcome")).role == m.Role.PRIMARY

                async def r2_knows_prod() -> bool:
                    return (await on_r2.get("/armory/accounts/prod")).status_code == 200

                await wait_until(r2_knows_prod, timeout=10, what="r2 knows r1's account")
                deleted = await on_r2.delete("/armory/accounts/prod")
                assert deleted.status_code in (200, 204), deleted.text
                with trio.fail_after(5):
                    (rejected,) = (await receive_kind(a, "assignment")).accounts
                assert rejected.role == m.Role.REJECTED
                assert "deleted" in rejected.reason
                heartbeat = r1.server.state.replicas
                assert heartbeat is not None
                await heartbeat.beats.wait()  # a whole beat after the one that rejected it
                assert await r1.server.state.store.get_account("prod") is None
                assert r1.server.state.accounts.get("prod") is None


@in_loop
async def test_a_replica_leaving_gets_the_objects_it_left_unindexed_indexed(
    pg_backend: StoreBackend,
) -> None:
    """A replica of a version from before the view index (a rolling upgrade) stores objects
    without their view rows; when it leaves, housekeeping indexes them, so Deck shows them."""
    with trio.fail_after(30):
        async with replicas() as nursery:
            r1 = await start(nursery, config("r1", pg_backend.url, 1000))
            await start(nursery, config("r2", pg_backend.url, 1000))
            await r1.server.state.store.apply_batch("prod", [shop_pod("web-1"), shop_pod("web-2")])
            # As the old replica wrote it: the object, no view row.
            pg_backend.sql("DELETE FROM view_index WHERE name = 'web-2'")
            r1.stop.set()

            async def indexed() -> bool:
                return bool(pg_backend.sql("SELECT 1 FROM view_index WHERE name = 'web-2'"))

            await wait_until(indexed, timeout=10, what="the unindexed pod indexed")


def shop_pod(name: str) -> EventRecord:
    body = {"apiVersion": "v1", "kind": "Pod", "spec": {},
            "metadata": {"name": name, "namespace": "shop", "uid": f"uid-{name}",
                         "resourceVersion": "1"}}  # fmt: skip
    return EventRecord(int(EventType.ADDED), "prod", "v1", "Pod", "shop", name, f"uid-{name}",
                       "1", json.dumps(body).encode())  # fmt: skip
