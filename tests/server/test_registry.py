"""The account registry's state machine, driven directly (no event loop, no clock)."""

from __future__ import annotations

import pytest

from server import AccountExists, UnknownAccount
from server._registry import Claim, Registry, Role, RoleChange
from server.store import AccountRecord, AccountState

PROD = Claim("prod", "10.0.0.1:6443", "aa" * 32, "v1.30", properties={"kinds": ["pod"]})
OTHER_CLUSTER = Claim("prod", "10.9.9.9:6443", "bb" * 32)


def registry(grace_ms: int = 1000) -> Registry:
    r = Registry(orphan_grace_ms=grace_ms)
    for session in ("s1", "s2", "s3"):
        r.open_session(session, f"agent-{session}")
    return r


def test_first_agent_is_primary_others_standby() -> None:
    r = registry()
    assert r.register("s1", PROD, 10) == RoleChange("s1", "prod", Role.PRIMARY)
    assert r.register("s2", PROD, 11) == RoleChange("s2", "prod", Role.STANDBY)
    record = r.get("prod")
    assert record is not None
    assert record.status is AccountState.ACTIVE
    assert record.kube_host == PROD.kube_host
    assert [c["role"] for c in record.connections] == ["PRIMARY", "STANDBY"]
    # registering again is idempotent
    assert r.register("s1", PROD, 12).role is Role.PRIMARY
    assert r.holders("prod") == ["s1", "s2"]


def test_a_name_held_by_another_cluster_is_rejected_with_the_reason() -> None:
    r = registry()
    r.register("s1", PROD, 10)
    change = r.register("s2", OTHER_CLUSTER, 11)
    assert change.role is Role.REJECTED
    assert "held by another cluster" in change.reason
    assert "10.0.0.1:6443" in change.reason
    assert r.holders("prod") == ["s1"]
    # still rejected when nobody serves it any more (ORPHANED keeps the identity)
    r.close_session("s1", 20)
    assert r.register("s2", OTHER_CLUSTER, 21).role is Role.REJECTED


def test_primary_leaving_promotes_the_next_standby() -> None:
    r = registry()
    for s in ("s1", "s2", "s3"):
        r.register(s, PROD, 10)
    assert r.close_session("s1", 20) == [
        RoleChange("s2", "prod", Role.PRIMARY, "promoted: the primary left")
    ]
    assert r.role("s2", "prod") is Role.PRIMARY
    # a standby leaving promotes nobody
    assert r.close_session("s3", 21) == []
    assert r.unregister("s2", "prod", 22) == []
    record = r.get("prod")
    assert record is not None
    assert record.status is AccountState.ORPHANED
    assert record.orphaned_at_ms == 22


def test_orphan_is_removed_after_the_grace_period() -> None:
    r = registry(grace_ms=1000)
    r.register("s1", PROD, 0)
    r.close_session("s1", 100)
    assert r.next_expiry_ms() == 1100
    assert r.expire(1099) == []
    assert r.expire(1100) == ["prod"]
    assert r.get("prod") is None
    assert r.next_expiry_ms() is None
    assert r.take_changes().deletes == ["prod"]


def test_reconnect_within_grace_restores_active() -> None:
    r = registry(grace_ms=1000)
    r.register("s1", PROD, 0)
    r.close_session("s1", 100)
    assert r.register("s2", PROD, 500).role is Role.PRIMARY
    record = r.get("prod")
    assert record is not None
    assert record.status is AccountState.ACTIVE
    assert record.orphaned_at_ms is None
    assert r.expire(5000) == []


def test_restart_turns_served_accounts_orphaned() -> None:
    active = AccountRecord("prod", "h", "f", status=AccountState.ACTIVE)
    inactive = AccountRecord("spare")
    r = Registry([active, inactive], now_ms=50, orphan_grace_ms=10)
    prod = r.get("prod")
    assert prod is not None
    assert prod.status is AccountState.ORPHANED
    assert r.get("spare") == inactive
    assert r.expire(60) == ["prod"]


def test_rest_added_account_is_inactive_until_an_agent_registers() -> None:
    r = registry()
    r.add([AccountRecord("prod", zone_id="z1")], 5)
    record = r.get("prod")
    assert record is not None
    assert record.status is AccountState.INACTIVE
    with pytest.raises(AccountExists) as info:
        r.add([AccountRecord("prod"), AccountRecord("new")], 6)
    assert info.value.names == ["prod"]
    assert r.get("new") is None  # all or none
    assert r.register("s1", PROD, 7).role is Role.PRIMARY
    record = r.get("prod")
    assert record is not None
    assert (record.status, record.zone_id) == (AccountState.ACTIVE, "z1")


def test_set_state_and_unservable_states() -> None:
    r = registry()
    r.add([AccountRecord("prod")], 1)
    assert r.set_state("prod", AccountState.DELETING, 2).status is AccountState.DELETING
    change = r.register("s1", PROD, 3)
    assert change.role is Role.REJECTED
    assert "DELETING" in change.reason
    with pytest.raises(UnknownAccount):
        r.set_state("nope", AccountState.ACTIVE, 4)


def test_delete_tells_the_serving_sessions() -> None:
    r = registry()
    r.register("s1", PROD, 1)
    r.register("s2", PROD, 1)
    changes = r.delete("prod")
    assert {(c.session_id, c.role) for c in changes} == {
        ("s1", Role.REJECTED),
        ("s2", Role.REJECTED),
    }
    assert r.session_accounts("s1") == []
    assert r.close_session("s1", 2) == []
    with pytest.raises(UnknownAccount):
        r.delete("prod")


def test_take_changes_reports_each_change_once() -> None:
    r = registry()
    r.register("s1", PROD, 1)
    first = r.take_changes()
    assert [a.name for a in first.upserts] == ["prod"]
    assert first.deletes == []
    assert r.take_changes() == type(first)([], [])


def test_sessions_must_be_open() -> None:
    r = registry()
    with pytest.raises(ValueError, match="not open"):
        r.register("nope", PROD, 1)
    with pytest.raises(ValueError, match="already open"):
        r.open_session("s1", "x")


def test_operator_put_keeps_identity_or_releases_sessions() -> None:
    r = registry()
    r.register("s1", PROD, 1)
    assert r.put(AccountRecord("prod", zone_id="z", status=AccountState.ACTIVE), 2) == []
    record = r.get("prod")
    assert record is not None
    assert (record.kube_host, record.zone_id) == (PROD.kube_host, "z")
    changes = r.put(AccountRecord("prod", status=AccountState.INACTIVE), 3)
    assert [(c.session_id, c.role) for c in changes] == [("s1", Role.REJECTED)]
    assert r.holders("prod") == []
    assert r.close_session("s1", 4) == []


def test_a_primary_whose_agent_moved_to_another_cluster_lets_go_and_is_rejected() -> None:
    # The same session announces the same name for a different cluster (its kubeconfig was
    # changed): the account stays bound to its cluster, a standby of it takes over, and the
    # moved claim is rejected with the reason instead of inheriting the old resume points.
    r = registry()
    r.register("s1", PROD, 10)
    r.register("s2", PROD, 11)
    assert r.moved("s1", OTHER_CLUSTER)
    assert not r.moved("s1", PROD)
    (promotion,) = r.unregister("s1", "prod", 12)
    assert (promotion.session_id, promotion.role) == ("s2", Role.PRIMARY)
    change = r.register("s1", OTHER_CLUSTER, 13)
    assert change.role is Role.REJECTED
    assert "another cluster" in change.reason


def test_a_store_row_read_before_a_local_write_does_not_undo_it() -> None:
    """Several replicas: the heartbeat's read of the accounts table may predate a local add or
    delete not yet persisted; taking that row in must not undo the write."""
    r = Registry([AccountRecord("gone")], use_leases=True, replica_id="r1")
    r.add([AccountRecord("new")], now_ms=5)
    assert r.take_in("new", None) == []  # read before the add's commit
    assert r.get("new") is not None
    r.delete("gone")
    assert r.take_in("gone", AccountRecord("gone")) == []  # read before the delete's commit
    assert r.get("gone") is None
    r.take_changes()  # persisted: now the store's rows are the truth again
    r.take_in("new", None)  # removed on another replica
    assert r.get("new") is None


def test_an_operator_change_on_another_replica_reaches_the_sessions_here() -> None:
    r = Registry(use_leases=True, replica_id="r1")
    r.open_session("s1", "agent-a")
    r.register("s1", Claim("prod", "10.0.0.1:6443", "aa"), now_ms=10)
    r.grant("prod", "s1")
    r.take_changes()
    local = r.get("prod")
    assert local is not None
    # deactivated through REST on another replica, after this one last wrote the row
    deactivated = AccountRecord(
        "prod", status=AccountState.TO_DEACTIVATE, last_updated_ms=local.last_updated_ms + 1
    )
    (change,) = r.take_in("prod", deactivated)
    assert change.role is Role.REJECTED
    assert r.holders("prod") == []
    # and removed on another replica
    r.open_session("s2", "agent-b")
    r.put(AccountRecord("prod", status=AccountState.ACTIVE), now_ms=20)
    r.register("s2", Claim("prod", "10.0.0.1:6443", "aa"), now_ms=21)
    r.take_changes()
    (change,) = r.take_in("prod", None)
    assert (change.session_id, change.role) == ("s2", Role.REJECTED)
    assert r.get("prod") is None
