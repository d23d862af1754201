"""Shards in the registry, driven directly (server/_shards.py, docs/sharding.md): each shard
of an account has its own PRIMARY, STANDBYs and orphan state; overlapping shards, a shard
beside the account whole and a shard of another cluster are refused with the reason; the
account is seen once with its shards listed."""

from __future__ import annotations

from typing import Any

import pytest

from server._registry import Claim, Registry, Role, RoleChange
from server._sessions import claim_from_info
from server._shards import ShardSpec, fold
from server.store import AccountState
from wire import messages

HOST, FINGERPRINT = "10.0.0.1:6443", "aa" * 32


def shard(name: str, **spec: Any) -> Claim:
    raw = {"name": name, **spec}
    return Claim(
        f"big/{name}", HOST, FINGERPRINT, properties={"shard": raw}, shard=ShardSpec.of(raw)
    )


PODS = shard("pods", kinds=["Pod"])
REST = shard("rest", omit_kinds=["Pod"])


def registry() -> Registry:
    r = Registry(orphan_grace_ms=1000)
    for session in ("s1", "s2", "s3", "s4"):
        r.open_session(session, f"agent-{session}")
    return r


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ({"kinds": ["Pod"]}, {"omit_kinds": ["pod"]}, ""),
        ({"kinds": ["Pod"]}, {"kinds": ["Deployment"]}, ""),
        ({"kinds": ["Pod", "Job"]}, {"kinds": ["job"]}, "kinds job in every namespace"),
        ({"kinds": ["Pod"]}, {}, "kinds pod in every namespace"),
        ({"omit_kinds": ["Pod"]}, {"omit_kinds": ["Job"]}, "every kind neither omits in every"),
        ({"namespaces": ["a"]}, {"namespaces": ["b"]}, ""),
        ({"namespaces": ["a", "b"]}, {"namespaces": ["b"]}, "every kind neither omits in names"),
        ({"namespaces": ["a"]}, {"omit_kinds": ["Pod"]}, "every kind neither omits in names"),
        ({"kinds": ["Pod"], "namespaces": ["a"]}, {"omit_kinds": ["Pod"]}, ""),
        ({"kinds": ["Pod"], "namespaces": ["a"]}, {"kinds": ["Pod"], "namespaces": ["b"]}, ""),
    ],
)
def test_overlap(a: dict[str, Any], b: dict[str, Any], overlap: str) -> None:
    left, right = ShardSpec.of({"name": "a", **a}), ShardSpec.of({"name": "b", **b})
    assert left.overlap(right).startswith(overlap) if overlap else left.overlap(right) == ""
    assert bool(right.overlap(left)) == bool(overlap)


def test_ownership() -> None:
    team = ShardSpec.of({"name": "t", "namespaces": ["a"]})
    assert team.owns("Pod", "a")
    assert not team.owns("Pod", "b")
    assert not team.owns("Node", "")  # a namespace shard owns no cluster-scoped kind
    rest = ShardSpec.of({"name": "r", "omitKinds": ["Pod"]})
    assert rest.owns("Node", "")
    assert rest.owns("deployment", "b")
    assert not rest.owns("POD", "a")


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("pods", "an object with a name"),
        ({"name": "a/b"}, "without '/'"),
        ({"name": "x", "kinds": ["Pod"], "omitKinds": ["Job"]}, "exclusive"),
        ({"name": "x", "namespaces": "a"}, "list of names"),
    ],
)
def test_a_bad_spec_says_what_is_wrong(raw: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        ShardSpec.of(raw)


def test_a_claim_names_its_shard_and_a_slash_in_an_account_name_is_refused() -> None:
    info = messages.AccountInfo(
        name="big", properties_json='{"shard": {"name": "pods", "kinds": ["Pod"]}}'
    )
    claim = claim_from_info(info)
    assert (claim.name, claim.account, claim.shard) == ("big/pods", "big", PODS.shard)
    with pytest.raises(ValueError, match="must not contain '/'"):
        claim_from_info(messages.AccountInfo(name="big/pods"))


def test_each_shard_has_its_own_primary_and_standbys() -> None:
    r = registry()
    assert r.register("s1", PODS, 10) == RoleChange("s1", "big/pods", Role.PRIMARY)
    assert r.register("s2", REST, 10) == RoleChange("s2", "big/rest", Role.PRIMARY)
    assert r.register("s3", PODS, 11).role is Role.STANDBY
    assert r.register("s4", REST, 11).role is Role.STANDBY
    # The Pods' primary leaves: the Pods' standby takes over; the rest is untouched.
    assert r.close_session("s1", 20) == [
        RoleChange("s3", "big/pods", Role.PRIMARY, "promoted: the primary left")
    ]
    assert r.role("s2", "big/rest") is Role.PRIMARY
    # Both agents of the Pods' shard gone: that shard alone is ORPHANED.
    r.close_session("s3", 30)
    pods, rest = r.get("big/pods"), r.get("big/rest")
    assert pods is not None
    assert rest is not None
    assert (pods.status, rest.status) == (AccountState.ORPHANED, AccountState.ACTIVE)
    [whole] = fold(r.accounts())
    assert whole.name == "big"
    assert whole.status is AccountState.ACTIVE  # one shard served keeps it ACTIVE
    shards = {s["name"]: s for s in whole.properties["shards"]}
    assert shards["pods"]["status"] == "ORPHANED"
    assert shards["pods"]["primary"] is None
    assert shards["rest"]["primary"] == "agent-s2"
    assert shards["rest"]["owns"] == "every kind but pod in every namespace and the cluster scope"
    assert [(c["shard"], c["role"]) for c in whole.connections] == [
        ("rest", "PRIMARY"),
        ("rest", "STANDBY"),
    ]
    # The orphaned shard expires alone after its grace period.
    assert r.expire(1030) == ["big/pods"]
    assert [a.name for a in r.accounts()] == ["big/rest"]


def test_an_overlapping_shard_is_rejected_with_the_reason() -> None:
    r = registry()
    r.register("s1", PODS, 10)
    change = r.register("s2", shard("everything"), 11)
    assert change.role is Role.REJECTED
    assert "overlaps its shard 'pods' (agents: agent-s1, ACTIVE) on kinds pod" in change.reason
    # Still refused while the Pods' shard is orphaned: its objects are still there.
    r.close_session("s1", 20)
    assert r.register("s2", shard("everything"), 21).role is Role.REJECTED


def test_a_shard_beside_the_account_whole_is_rejected_both_ways() -> None:
    r = registry()
    whole = Claim("big", HOST, FINGERPRINT)
    r.register("s1", whole, 10)
    change = r.register("s2", PODS, 11)
    assert change.role is Role.REJECTED
    assert "registered whole (ACTIVE)" in change.reason
    r2 = registry()
    r2.register("s1", PODS, 10)
    change = r2.register("s2", whole, 11)
    assert change.role is Role.REJECTED
    assert "is served in shards (pods)" in change.reason


def test_a_shard_of_another_cluster_or_with_another_spec_is_rejected() -> None:
    r = registry()
    r.register("s1", PODS, 10)
    elsewhere = Claim(
        "big/rest", "10.9.9.9:6443", "bb" * 32, properties=REST.properties, shard=REST.shard
    )
    change = r.register("s2", elsewhere, 11)
    assert change.role is Role.REJECTED
    assert "held by another cluster" in change.reason
    assert "(its shard 'pods')" in change.reason
    wider = shard("pods", kinds=["Pod", "Job"])
    change = r.register("s3", wider, 12)
    assert change.role is Role.REJECTED
    assert "served with kinds pod" in change.reason
    # Its own agent changing the shard is judged afresh (sessions unregister it first).
    assert r.moved("s1", wider)


def test_the_account_shows_the_best_state_of_its_shards() -> None:
    r = registry()
    r.register("s1", PODS, 10)
    r.register("s2", REST, 10)
    r.set_state("big/pods", AccountState.DELETE_FAILED, 20)
    r.set_state("big/rest", AccountState.DELETING, 20)
    [whole] = fold(r.accounts())
    assert whole.status in (AccountState.DELETE_FAILED, AccountState.DELETING)
    r.set_state("big/rest", AccountState.FAILED, 21)
    assert fold(r.accounts())[0].status is AccountState.FAILED
