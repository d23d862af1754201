"""The dispatcher's polls on both backends (the ``store_backend`` fixture): a notification is
only a wake-up, so a dispatch whose notification never came is still claimed, and an origin
that never hears of its operation's end still finds it (server/ops/_dispatch.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import trio

from server.ops._dispatch import Dispatcher
from server.ops._journal import OperationJournal
from server.ops._outcome import Ending
from server.store import DispatchRecord, OperationRecord, ReplicaRecord, Store
from server.store._sqlite_core import wall_clock_ms
from tests.server._stores import StoreBackend

TTL = 600
POLL = 0.1
RESULT = {"result": {"deployed": True}, "phases": [{"phase": "DEPLOY", "status": "done"}]}


def received(op_id: str) -> OperationRecord:
    now = wall_clock_ms()
    return OperationRecord(op_id, "prod", "deployManifest", "{}", "RECEIVED", now, now)


class Target:
    """What the service's ``serve`` does with a claimed row, minus the agent: the end is
    written as the agent's success (and nobody is notified of it)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.served: list[str] = []
        self.changed = trio.Event()

    async def __call__(self, row: DispatchRecord, deadline: float) -> None:
        assert deadline > trio.current_time()
        self.served.append(row.op_id)
        done = replace(received(row.op_id), state="SUCCEEDED", result_json=json.dumps(RESULT))
        await self.store.record_operations([(done, "served")])
        self.changed.set()


def dispatcher(
    store: Store,
    replica: str,
    target: Target | None = None,
    journal: OperationJournal | None = None,
) -> Dispatcher:
    async def refuse(row: DispatchRecord, deadline: float) -> None:
        raise AssertionError(f"{replica} was not to serve {row.op_id}")

    return Dispatcher(
        store,
        journal or OperationJournal(store),
        replica_id=replica,
        lease_ttl_ms=TTL,
        now_ms=wall_clock_ms,
        serve=target or refuse,
        poll_seconds=POLL,
    )


async def hold_the_stream(store: Store, replica: str) -> None:
    """``replica`` beats once and holds prod's lease (for TTL ms, unless it beats again)."""
    await store.heartbeat_replica(ReplicaRecord(replica, "", 1, wall_clock_ms()), TTL)
    out = await store.acquire_lease("prod", replica, "s1", "agent-1", "h", "f", TTL)
    assert out.granted


async def test_a_dispatch_whose_notification_was_missed_is_claimed_by_the_poll(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store, trio.open_nursery() as nursery:
            target = Target(store)
            b = dispatcher(store, "b", target)
            await nursery.start(b.run)
            row = DispatchRecord("op-1", "prod", "b", "a", "deployManifest", "{}", 10**13, 1)
            await store.record_operations([], dispatches=[row])  # no notification: a poll
            await target.changed.wait()
            assert target.served == ["op-1"]
            record = await store.get_operation("op-1")
            assert record is not None
            assert record.state == "SUCCEEDED"
            nursery.cancel_scope.cancel()


async def test_an_origin_that_hears_nothing_finds_the_end_by_polling(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store, trio.open_nursery() as nursery:
            journal = OperationJournal(store)
            await nursery.start(journal.run)
            target = Target(store)
            await nursery.start(dispatcher(store, "b", target).run)
            await hold_the_stream(store, "b")
            a = dispatcher(store, "a", journal=journal)  # not run: it hears nothing at all
            record = received("op-2")
            await store.record_operations([(record, "received")])
            ending = Ending(record, journal=journal, now_ms=wall_clock_ms, update_cache=_no_cache)
            outcome = await a.remote(ending, '{"x": 1}', trio.current_time() + 10)
            assert outcome is not None
            assert outcome.ok
            assert outcome.agent.result == {"deployed": True}
            assert outcome.agent.phases == [{"phase": "DEPLOY", "status": "done"}]
            assert target.served == ["op-2"]
            nursery.cancel_scope.cancel()


async def test_a_target_that_stops_before_claiming_fails_the_operation_unsent(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store, trio.open_nursery() as nursery:
            journal = OperationJournal(store)
            await nursery.start(journal.run)
            await hold_the_stream(store, "b")  # b beats once, then is silent: it died
            a = dispatcher(store, "a", journal=journal)
            await nursery.start(a.run)
            record = received("op-3")
            await store.record_operations([(record, "received")])
            ending = Ending(record, journal=journal, now_ms=wall_clock_ms, update_cache=_no_cache)
            started = trio.current_time()
            outcome = await a.remote(ending, "{}", trio.current_time() + 10)
            assert outcome is not None
            assert trio.current_time() - started < 5  # the TTL and a poll, not the deadline
            assert (outcome.ok, outcome.error) == (False, "ReplicaStopped")
            assert outcome.message.startswith(
                "replica b that holds the agent's stream stopped (no heartbeat for "
            )
            assert outcome.message.endswith("it never claimed the operation: nothing was sent")
            assert await store.claim_dispatched("b", 10) == []  # withdrawn: the payload too
            stored = await store.get_operation("op-3")
            assert stored is not None
            assert stored.state == "FAILED"
            nursery.cancel_scope.cancel()


async def test_no_live_holder_means_nothing_is_dispatched(store_backend: StoreBackend) -> None:
    with trio.fail_after(20):
        async with store_backend.open() as store, trio.open_nursery() as nursery:
            journal = OperationJournal(store)
            await nursery.start(journal.run)
            a = dispatcher(store, "a", journal=journal)
            record = received("op-4")
            ending = Ending(record, journal=journal, now_ms=wall_clock_ms, update_cache=_no_cache)
            assert await a.remote(ending, "{}", trio.current_time() + 10) is None  # no lease
            await hold_the_stream(store, "a")  # its own: not another replica's stream
            assert await a.remote(ending, "{}", trio.current_time() + 10) is None
            assert await store.claim_dispatched("a", 10) == []
            nursery.cancel_scope.cancel()


async def _no_cache(records: object) -> None:
    raise AssertionError("the origin writes no objects: the target did")
