"""Notifications, dispatched operations and insert-if-absent tasks on both backends (the
``store_backend`` fixture): what operations across replicas are built on
(server/store/_notify.py, _dispatch.py, _pg_listen.py)."""

from __future__ import annotations

import pytest
import trio

from server.store import (
    MAX_PAYLOAD_BYTES,
    DispatchRecord,
    Notification,
    OperationRecord,
    PgStore,
    Store,
    channel_for,
)
from tests.server._stores import StoreBackend


def op(op_id: str, state: str = "RECEIVED") -> OperationRecord:
    return OperationRecord(op_id, "prod", "deployManifest", "{}", state, 1, 1)


def dispatch(op_id: str, target: str = "r2", deadline_ms: int = 10**13) -> DispatchRecord:
    return DispatchRecord(op_id, "prod", target, "r1", "deployManifest", '{"s":1}', deadline_ms, 5)


async def next_real(receive: trio.MemoryReceiveChannel[Notification]) -> Notification:
    while True:
        got = await receive.receive()
        if not got.resync:
            return got


async def test_notifications_reach_listeners_after_the_commit(store_backend: StoreBackend) -> None:
    channel = channel_for("ops", "r2")
    with trio.fail_after(20):
        async with store_backend.open() as store, trio.open_nursery() as nursery:
            send, receive = trio.open_memory_channel[Notification](16)
            await nursery.start(store.listen, [channel], send)
            assert (await receive.receive()).resync  # listening: poll once now
            await store.notify(channel, "d:op-1")
            assert await next_real(receive) == Notification(channel, "d:op-1")
            await store.record_operations([(op("op-2"), "x")], notices=[(channel, "r:op-2")])
            assert await next_real(receive) == Notification(channel, "r:op-2")
            await store.notify(channel_for("ops", "elsewhere"), "not for us")
            await store.record_operations(
                [], dispatches=[dispatch("op-3")], notices=[(channel, "d:op-3")]
            )
            assert await next_real(receive) == Notification(channel, "d:op-3")
            with pytest.raises(ValueError, match="an id, not the data"):
                await store.notify(channel, "x" * (MAX_PAYLOAD_BYTES + 1))
            nursery.cancel_scope.cancel()


def test_long_replica_ids_get_distinct_channels_within_postgresqls_limit() -> None:
    a, b = channel_for("ops", "r" * 80 + "a"), channel_for("ops", "r" * 80 + "b")
    assert a != b
    assert max(len(a), len(b)) <= 63
    assert channel_for("ops", "server-1") == "kubesvc_ops_server-1"


async def test_a_dispatch_is_claimed_once_and_its_payload_leaves_the_store(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            await store.record_operations(
                [(op("op-1", "DISPATCHED"), "dispatched to r2")], dispatches=[dispatch("op-1")]
            )
            await store.record_operations([], dispatches=[dispatch("op-2", target="r3")])
            record = await store.get_operation("op-1")
            assert record is not None
            assert record.state == "DISPATCHED"
            assert [e.message for e in await store.operation_history("op-1")] == [
                "dispatched to r2"
            ]
            (read,) = await store.get_operations(["op-1", "op-unknown"])
            assert read == record
            assert await store.claim_dispatched("r2", 10) == [dispatch("op-1")]
            assert await store.claim_dispatched("r2", 10) == []  # at most once
            assert not await store.withdraw_dispatched("op-1")  # claimed: too late
            payloads = store_backend.sql("SELECT payload_json FROM operation_dispatch")
            assert payloads == [('{"s":1}',)]  # op-2's, for r3; op-1's is gone
            assert await store.withdraw_dispatched("op-2")  # never seen by r3
            assert await store.claim_dispatched("r3", 10) == []


async def test_claims_take_the_oldest_first_and_expired_rows_are_removed(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            for i in (3, 1, 2):
                row = DispatchRecord(f"op-{i}", "prod", "r2", "r1", "t", "{}", 1000 * i, i)
                await store.record_operations([], dispatches=[row])
            assert [d.op_id for d in await store.claim_dispatched("r2", 2)] == ["op-1", "op-2"]
            await store.record_operations([], dispatches=[dispatch("op-4", deadline_ms=500)])
            assert await store.expire_dispatched(2000) == ["op-4"]
            assert [d.op_id for d in await store.claim_dispatched("r2", 5)] == ["op-3"]


async def test_creating_a_task_is_insert_if_absent(store_backend: StoreBackend) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store:
            first = [(op("t-1"), "received"), (op("t-1-0"), "received")]
            assert await store.create_operations([first, [(op("t-2"), "received")]]) == [
                True,
                True,
            ]
            again = [(op("t-1", "SUCCEEDED"), "again"), (op("t-1-0", "FAILED"), "again")]
            assert await store.create_operations([again]) == [False]
            record = await store.get_operation("t-1-0")
            assert record is not None
            assert record.state == "RECEIVED"  # the loser wrote nothing
            assert [e.message for e in await store.operation_history("t-1")] == ["received"]


async def test_two_replicas_creating_one_task_at_once_create_it_once(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as one, store_backend.open() as two:
            for round_ in range(10):
                results: list[bool] = []

                async def create(
                    store: Store, who: str, n: int = round_, results: list[bool] = results
                ) -> None:
                    group = [(op(f"t-{n}"), who), (op(f"t-{n}-0"), who)]
                    results.extend(await store.create_operations([group]))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(create, one, "r1")
                    nursery.start_soon(create, two, "r2")
                assert sorted(results) == [False, True]
                history = await one.operation_history(f"t-{round_}-0")
                assert len(history) == 1


async def test_postgresql_notifications_cross_replicas_and_survive_a_lost_connection(
    pg_backend: StoreBackend,
) -> None:
    channel = channel_for("ops", "r2")
    with trio.fail_after(30):
        async with (
            pg_backend.open() as sender,
            pg_backend.open() as listener,
            trio.open_nursery() as nursery,
        ):
            send, receive = trio.open_memory_channel[Notification](16)
            await nursery.start(listener.listen, [channel], send)
            assert (await receive.receive()).resync
            await sender.notify(channel, "d:op-1")
            assert await next_real(receive) == Notification(channel, "d:op-1")
            # The listening connection is killed (a failover, a network fault): the listener
            # connects again by itself and says so with a resync marker.
            pg_backend.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query LIKE 'LISTEN%%' OR query = 'SELECT 1'"
            )
            assert (await receive.receive()).resync
            await sender.notify(channel, "d:op-2")
            assert await next_real(receive) == Notification(channel, "d:op-2")
            nursery.cancel_scope.cancel()


async def test_closing_the_store_waits_for_its_listening_threads(pg_backend: StoreBackend) -> None:
    """A LISTEN thread still in libpq when the interpreter exits may crash it: the store's
    close waits (bounded) until the threads of its cancelled listeners have ended."""
    send, receive = trio.open_memory_channel[Notification](8)
    with trio.fail_after(30):
        async with pg_backend.open() as store:
            assert isinstance(store, PgStore)
            async with trio.open_nursery() as nursery:
                await nursery.start(store.listen, [channel_for("ops", "r1")], send)
                assert (await receive.receive()).resync  # listening in its thread
                threads = set(store._listening)
                assert len(threads) == 1
                nursery.cancel_scope.cancel()  # abandons the thread
        assert all(finished.is_set() for finished in threads)


def _listening_backends(pg_backend: StoreBackend) -> int:
    """Connections to the test's database whose last statement was a LISTEN."""
    rows = pg_backend.sql(
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
    )
    return int(rows[0][0])


async def test_a_stores_listeners_share_one_connection_and_outlive_its_leader(
    pg_backend: StoreBackend,
) -> None:
    """A replica's feed follower and operations service listen on one connection (a managed
    PostgreSQL counts connections). A listener that joins later is LISTENed for on it and
    told to poll; when the first listener (whose task runs the connection) leaves, the
    others go on, on a new connection, after a resync marker."""
    ops, feed = channel_for("ops", "r2"), channel_for("changes", "all")
    with trio.fail_after(30):
        async with (
            pg_backend.open() as sender,
            pg_backend.open() as store,
            trio.open_nursery() as nursery,
        ):
            first_send, first = trio.open_memory_channel[Notification](16)
            second_send, second = trio.open_memory_channel[Notification](16)
            third_send, third = trio.open_memory_channel[Notification](16)
            leader = trio.CancelScope()

            async def lead(task_status: trio.TaskStatus[None]) -> None:
                with leader:
                    await store.listen([ops], first_send, task_status=task_status)

            await nursery.start(lead)
            assert (await first.receive()).resync
            await nursery.start(store.listen, [feed], second_send)
            assert (await second.receive()).resync  # its channel LISTENed on the same one
            await nursery.start(store.listen, [ops], third_send)
            assert (await third.receive()).resync  # already listened on: poll at once
            assert _listening_backends(pg_backend) == 1

            await sender.notify(ops, "d:op-1")
            await sender.notify(feed, "c:1")
            assert await next_real(first) == Notification(ops, "d:op-1")
            assert await next_real(third) == Notification(ops, "d:op-1")
            assert await next_real(second) == Notification(feed, "c:1")

            leader.cancel()  # the leader leaves: the second listener leads now
            assert (await second.receive()).resync
            assert (await third.receive()).resync
            await sender.notify(feed, "c:2")
            await sender.notify(ops, "d:op-2")
            assert await next_real(second) == Notification(feed, "c:2")
            assert await next_real(third) == Notification(ops, "d:op-2")
            nursery.cancel_scope.cancel()
