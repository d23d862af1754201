"""Replicas, account leases and duties on both backends (the ``store_backend`` fixture): the
tables that decide PRIMARY across server replicas (server/store/_leases.py)."""

from __future__ import annotations

import trio

from server import AccountService, Claim
from server.store import AccountRecord, AccountState, LeaseRecord, ReplicaRecord, Store
from tests.server._stores import StoreBackend

TTL = 10_000
HOST, FP = "10.0.0.1:6443", "aa" * 32


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


async def acquire(
    store: Store,
    replica: str,
    session: str,
    *,
    host: str = HOST,
    fp: str = FP,
    account: str = "prod",
) -> tuple[bool, LeaseRecord | None, str]:
    out = await store.acquire_lease(account, replica, session, f"agent-{session}", host, fp, TTL)
    return out.granted, out.holder, out.refusal


async def test_a_lease_is_granted_held_taken_over_after_expiry_and_released(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(20):
        async with store_backend.open(now_ms=clock) as store:
            assert await store.get_lease("prod") is None
            granted, holder, refusal = await acquire(store, "r1", "s1")
            assert (granted, refusal) == (True, "")
            assert holder == LeaseRecord("prod", "r1", "s1", "agent-s1", clock.ms + TTL)
            assert await store.get_lease("prod") == holder
            # held: another replica is told who holds it
            granted, holder, refusal = await acquire(store, "r2", "s2")
            assert (granted, refusal) == (False, "")
            assert holder is not None
            assert (holder.replica_id, holder.session_id) == ("r1", "s1")
            # the holding replica may hand it to another of its sessions
            granted, holder, _ = await acquire(store, "r1", "s3")
            assert granted
            assert holder is not None
            assert holder.session_id == "s3"
            # lapsed: taken over
            clock.ms += TTL
            granted, holder, _ = await acquire(store, "r2", "s2")
            assert granted
            assert holder is not None
            assert holder.replica_id == "r2"
            assert [lease.account for lease in await store.list_leases()] == ["prod"]
            # released only by the session that holds it
            assert not await store.release_lease("prod", "s3")
            assert await store.release_lease("prod", "s2")
            assert await store.get_lease("prod") is None
            assert await store.list_leases() == []


async def test_heartbeats_renew_a_replicas_leases_and_count_them(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(20):
        async with store_backend.open(now_ms=clock) as store:
            started = clock.ms
            await store.heartbeat_replica(ReplicaRecord("r1", "h1:9091", started, clock.ms), TTL)
            await acquire(store, "r1", "s1")
            await acquire(store, "r1", "s1", account="dev")
            for _ in range(3):
                clock.ms += TTL - 1  # each heartbeat within the TTL keeps the leases
                await store.heartbeat_replica(
                    ReplicaRecord("r1", "h1:9091", started, clock.ms, sessions=1), TTL
                )
                granted, holder, _ = await acquire(store, "r2", "s2")
                assert not granted
                assert holder is not None
                assert holder.replica_id == "r1"
            (replica,) = await store.list_replicas()
            assert replica == ReplicaRecord("r1", "h1:9091", started, clock.ms, 1, 2)
            assert {lease.expires_ms for lease in await store.list_leases()} == {clock.ms + TTL}
            # without heartbeats they lapse; housekeeping deletes the expired rows
            clock.ms += TTL
            # ... once lapsed for the grace asked for (another TTL: every replica saw whose)
            assert await store.expire_leases(grace_ms=TTL) == []
            clock.ms += TTL
            assert [lease.account for lease in await store.expire_leases(TTL)] == ["dev", "prod"]
            assert await store.list_leases() == []


async def test_another_cluster_is_refused_in_the_same_transaction(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(20):
        async with store_backend.open(now_ms=clock) as store:
            # a live lease for one cluster refuses another, even with no account row yet
            assert (await acquire(store, "r1", "s1"))[0]
            granted, holder, refusal = await acquire(store, "r2", "s2", host="10.9.9.9:6443")
            assert not granted
            assert holder is not None
            assert "held by another cluster" in refusal
            assert HOST in refusal
            # the account row's binding refuses it too, whoever holds the lease
            await store.upsert_account(
                AccountRecord(
                    "prod", kube_host=HOST, cert_fingerprint=FP, status=AccountState.ACTIVE
                )
            )
            clock.ms += TTL
            granted, holder, refusal = await acquire(store, "r2", "s2", fp="bb" * 32)
            assert (granted, holder) == (False, None)
            assert "held by another cluster" in refusal
            assert (await acquire(store, "r2", "s2"))[0]  # the same cluster: granted


async def test_two_replicas_racing_for_one_lease_get_one_grant(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with store_backend.open() as one, store_backend.open() as two:
            for round_ in range(10):
                account = f"acct-{round_}"
                results: dict[str, bool] = {}

                async def race(
                    store: Store,
                    replica: str,
                    account: str = account,
                    results: dict[str, bool] = results,
                ) -> None:
                    out = await store.acquire_lease(
                        account, replica, f"s-{replica}", "agent", HOST, FP, TTL
                    )
                    results[replica] = out.granted

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(race, one, "r1")
                    nursery.start_soon(race, two, "r2")
                assert sorted(results.values()) == [False, True], results
                lease = await one.get_lease(account)
                assert lease is not None
                assert results[lease.replica_id]


async def test_a_duty_is_held_by_one_replica_until_its_claim_lapses(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(20):
        async with store_backend.open(now_ms=clock) as store:
            assert await store.claim_duty("housekeeping", "r1", TTL)
            assert not await store.claim_duty("housekeeping", "r2", TTL)
            assert await store.claim_duty("other", "r2", TTL)  # duties are independent
            clock.ms += TTL - 1
            assert await store.claim_duty("housekeeping", "r1", TTL)  # renewed
            clock.ms += TTL - 1
            assert not await store.claim_duty("housekeeping", "r2", TTL)
            clock.ms += 1
            assert await store.claim_duty("housekeeping", "r2", TTL)
            assert not await store.claim_duty("housekeeping", "r1", TTL)


async def test_deleting_a_replica_releases_its_leases_and_duties(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(20):
        async with store_backend.open(now_ms=clock) as store:
            for replica in ("r1", "r2"):
                await store.heartbeat_replica(ReplicaRecord(replica, "", clock.ms, clock.ms), TTL)
            await acquire(store, "r1", "s1")
            await acquire(store, "r2", "s2", account="dev")
            assert await store.claim_duty("housekeeping", "r1", TTL)
            await store.delete_replica("r1")
            assert [r.replica_id for r in await store.list_replicas()] == ["r2"]
            assert [lease.account for lease in await store.list_leases()] == ["dev"]
            # at once, no waiting for the TTL
            assert (await acquire(store, "r2", "s2"))[0]
            assert await store.claim_duty("housekeeping", "r2", TTL)


async def test_a_primary_whose_lease_another_replica_took_and_let_lapse_takes_it_again(
    store_backend: StoreBackend,
) -> None:
    """r1's heartbeats stalled past its TTL, r2's standby took the lease, then r2 died too:
    at r1's next reconcile its still-PRIMARY session takes the lease again (before, the
    lapsed row of r2 stayed, and other replicas saw no live holder)."""
    clock = Clock()
    with trio.fail_after(20):
        async with store_backend.open(now_ms=clock) as store:
            accounts = await AccountService.load(
                store, now_ms=clock, orphan_grace_ms=600_000, replica_id="r1", lease_ttl_ms=TTL
            )
            accounts.registry.open_session("s1", "agent-a")
            accounts.registry.register("s1", Claim("prod", HOST, FP), clock.ms)
            await accounts.changed([])
            lease = await store.get_lease("prod")
            assert lease is not None
            assert lease.replica_id == "r1"
            clock.ms += TTL  # r1 stalls; r2 takes the lapsed lease, then stalls for good
            granted, _, _ = await acquire(store, "r2", "s9")
            assert granted
            clock.ms += TTL
            await accounts.reconcile(await store.list_leases())
            lease = await store.get_lease("prod")
            assert lease is not None
            assert (lease.replica_id, lease.session_id) == ("r1", "s1")
            assert lease.expires_ms > clock.ms
            assert accounts.registry.held_leases() == {"prod": "s1"}
