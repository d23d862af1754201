"""The registry persisted through the store, and its orphan grace timer on virtual time."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import pytest
import trio
import trio.testing

from server import AccountService, Claim, RegistryStore, StoreError
from server.store import AccountRecord, AccountState, open_sqlite_store
from wire import EventRecord, EventType

from .._wait import wait_until

PROD = Claim("prod", "10.0.0.1:6443", "aa" * 32)
GRACE_MS = 600_000


def virtual_time(clock: trio.testing.MockClock) -> Callable[[], int]:
    """Milliseconds on the virtual clock, readable from the store's worker thread too.

    The clock jumps only after 50 ms of real idleness: an autojump at 0 would jump while a
    task waits for the store's worker thread (trio cannot see threads), straight to the
    test's fail_after deadline.
    """
    clock.autojump_threshold = 0.05
    return lambda: int(clock.current_time() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)


def pod(name: str) -> EventRecord:
    body = json.dumps({"metadata": {"name": name, "namespace": "d"}}).encode()
    return EventRecord(int(EventType.ADDED), "prod", "v1", "Pod", "d", name, "u", "1", body, "")


async def test_orphan_is_removed_with_its_objects_after_the_grace_period(
    mock_clock: trio.testing.MockClock,
) -> None:
    now_ms = virtual_time(mock_clock)
    with trio.fail_after(3600):
        async with open_sqlite_store(":memory:", now_ms=now_ms) as store:
            service = await AccountService.load(store, now_ms=now_ms, orphan_grace_ms=GRACE_MS)
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run_expiry)
                service.registry.open_session("s1", "agent")
                service.registry.register("s1", PROD, now_ms())
                await service.persist()
                await store.apply_batch("prod", [pod("a")])
                await service.changed(service.registry.close_session("s1", now_ms()))
                record = await store.get_account("prod")
                assert record is not None
                assert record.status is AccountState.ORPHANED
                await trio.sleep(GRACE_MS / 1000 - 1)
                assert await store.get_account("prod") is not None
                await trio.sleep(2)
                assert await store.get_account("prod") is None
                assert await store.count_objects("prod") == 0
                nursery.cancel_scope.cancel()


async def test_reconnect_within_the_grace_period_keeps_the_cache(
    mock_clock: trio.testing.MockClock,
) -> None:
    now_ms = virtual_time(mock_clock)
    with trio.fail_after(3600):
        async with open_sqlite_store(":memory:", now_ms=now_ms) as store:
            service = await AccountService.load(store, now_ms=now_ms, orphan_grace_ms=GRACE_MS)
            async with trio.open_nursery() as nursery:
                await nursery.start(service.run_expiry)
                service.registry.open_session("s1", "agent")
                service.registry.register("s1", PROD, now_ms())
                await store.apply_batch("prod", [pod("a")])
                await service.changed(service.registry.close_session("s1", now_ms()))
                await trio.sleep(300)
                service.registry.open_session("s2", "agent")
                service.registry.register("s2", PROD, now_ms())
                await service.persist()
                await trio.sleep(GRACE_MS / 1000 * 2)
                record = await store.get_account("prod")
                assert record is not None
                assert record.status is AccountState.ACTIVE
                assert await store.count_objects("prod") == 1
                nursery.cancel_scope.cancel()


async def test_restart_orphans_served_accounts_and_rest_writes_go_through_the_registry(
    mock_clock: trio.testing.MockClock,
) -> None:
    now_ms = virtual_time(mock_clock)
    with trio.fail_after(3600):
        async with open_sqlite_store(":memory:", now_ms=now_ms) as store:
            await store.upsert_account(AccountRecord("prod", "h", "f", status=AccountState.ACTIVE))
            service = await AccountService.load(store, now_ms=now_ms, orphan_grace_ms=GRACE_MS)
            record = await store.get_account("prod")
            assert record is not None
            assert record.status is AccountState.ORPHANED
            rest = RegistryStore(store, service)
            await rest.upsert_account(AccountRecord("spare", zone_id="z"))
            spare = service.get("spare")
            assert spare is not None
            assert spare.zone_id == "z"
            assert [a.name for a in await store.list_accounts()] == ["prod", "spare"]
            assert await rest.delete_account("spare")
            assert service.get("spare") is None
            assert not await rest.delete_account("spare")


async def test_a_store_failure_in_the_grace_timer_is_logged_and_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The expiry task must not die (taking the server with it) when the store is busy: it
    logs, keeps the removal pending and writes it once the store answers again."""
    path = str(tmp_path / "cache.db")
    with trio.fail_after(60):
        async with open_sqlite_store(path) as store:
            service = await AccountService.load(store, now_ms=wall_ms, orphan_grace_ms=0)
            service.registry.open_session("s1", "agent")
            service.registry.register("s1", PROD, wall_ms())
            await service.persist()
            # The store's own SQLite (APSW's): two SQLite libraries in one process do not see
            # each other's POSIX locks.
            blocker = apsw.Connection(path)
            try:
                blocker.execute("BEGIN EXCLUSIVE")  # every write now fails after busy_timeout
                async with trio.open_nursery() as nursery:
                    await nursery.start(functools.partial(service.run_expiry, retry_seconds=0.2))
                    with pytest.raises(StoreError, match="locked"):
                        await service.changed(service.registry.close_session("s1", wall_ms()))
                    await wait_until(
                        lambda: "could not persist the account registry" in caplog.text,
                        what="the failed write is logged",
                    )
                    assert service.get("prod") is None  # gone in memory, pending on disk
                    blocker.execute("ROLLBACK")

                    async def removed() -> bool:
                        return await store.get_account("prod") is None

                    await wait_until(removed, what="the removal is written once the store answers")
                    nursery.cancel_scope.cancel()
            finally:
                blocker.close()
