"""Shards persisted, on both store backends: a restarted server knows a sharded account as
one account with its shards (each ORPHANED for its agents to come back); a shard's grace
period ending removes what it owns and nothing of the other shards'; deleting the account
removes every shard and every object."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import trio

from server import AccountService, Claim, RegistryStore
from server._shards import ShardSpec
from server.store import AccountState
from tests.server._stores import StoreBackend
from wire import EventRecord, EventType

GRACE_MS = 1000


def claim(name: str, **spec: Any) -> Claim:
    raw = {"name": name, **spec}
    return Claim(
        f"big/{name}",
        "10.0.0.1:6443",
        "aa" * 32,
        properties={"shard": raw},
        shard=ShardSpec.of(raw),
    )


def obj(kind: str, name: str) -> EventRecord:
    body = json.dumps({"metadata": {"name": name, "namespace": "d"}}).encode()
    return EventRecord(
        int(EventType.ADDED), "big", "v1", kind, "d", name, "u" + name, "1", body, ""
    )


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


async def test_a_sharded_account_outlives_a_restart_and_its_shards_expire_alone(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(30):
        async with store_backend.open(now_ms=clock) as store:
            service = await AccountService.load(store, now_ms=clock, orphan_grace_ms=GRACE_MS)
            for session in ("s1", "s2"):
                service.registry.open_session(session, f"agent-{session}")
            service.registry.register("s1", claim("pods", kinds=["Pod"]), clock())
            service.registry.register("s2", claim("rest", omit_kinds=["Pod"]), clock())
            await service.persist()
            await store.apply_events([obj("Pod", "p1"), obj("ConfigMap", "c1")])

        # The server restarts: one account, two shards, each ORPHANED until its agent is back.
        clock.ms += 10
        async with store_backend.open(now_ms=clock) as store:
            service = await AccountService.load(store, now_ms=clock, orphan_grace_ms=GRACE_MS)
            rest_api = RegistryStore(store, service)
            [account] = await rest_api.list_accounts()
            assert account.name == "big"
            assert account.status is AccountState.ORPHANED
            shards = {s["name"]: s["status"] for s in account.properties["shards"]}
            assert shards == {"pods": "ORPHANED", "rest": "ORPHANED"}
            # The rest's agent is back in time; the Pods' is not.
            service.registry.open_session("s3", "agent-s3")
            service.registry.register("s3", claim("rest", omit_kinds=["Pod"]), clock())
            await service.persist()
            clock.ms += GRACE_MS + 1
            assert service.registry.expire(clock()) == ["big/pods"]
            await service.persist()
            page = await store.query_objects(account="big")
            assert [(o.kind, o.name) for o in page.objects] == [("ConfigMap", "c1")]
            assert await store.get_account("big/pods") is None
            got = await rest_api.get_account("big")
            assert got is not None
            assert got.status is AccountState.ACTIVE
            assert [s["name"] for s in got.properties["shards"]] == ["rest"]

            # An operator deletes the account: every shard and every object goes.
            assert await rest_api.delete_account("big")
            assert await rest_api.list_accounts() == []
            assert await store.list_accounts() == []
            assert await store.count_objects("big") == 0


async def test_an_operator_sets_a_sharded_accounts_state_on_every_shard(
    store_backend: StoreBackend,
) -> None:
    clock = Clock()
    with trio.fail_after(30):
        async with store_backend.open(now_ms=clock) as store:
            service = await AccountService.load(store, now_ms=clock, orphan_grace_ms=GRACE_MS)
            rest_api = RegistryStore(store, service)
            for session in ("s1", "s2"):
                service.registry.open_session(session, f"agent-{session}")
            service.registry.register("s1", claim("pods", kinds=["Pod"]), clock())
            service.registry.register("s2", claim("rest", omit_kinds=["Pod"]), clock())
            await service.persist()
            told: list[tuple[str, str, str]] = []

            async def announce(changes: Any) -> None:
                told.extend((c.session_id, c.account, c.role.name) for c in changes)

            service.on_role_changes = announce
            account = await rest_api.get_account("big")
            assert account is not None
            # PATCH /armory/accounts writes the account it read back: every shard takes its
            # state, and keeps what it owns.
            await rest_api.upsert_account(replace(account, status=AccountState.INACTIVE))
            assert sorted(told) == [
                ("s1", "big/pods", "REJECTED"),
                ("s2", "big/rest", "REJECTED"),
            ]
            for unit in ("big/pods", "big/rest"):
                stored = await store.get_account(unit)
                assert stored is not None
                assert stored.status is AccountState.INACTIVE
                assert "shards" not in stored.properties
                assert "shard" in stored.properties
            got = await rest_api.get_account("big")
            assert got is not None
            assert got.status is AccountState.INACTIVE
