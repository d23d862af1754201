"""Replicas, account leases and duties: the tables that decide roles across server replicas,
written once for both backends.

Theory of operation. Each replica upserts its ``replicas`` row at every heartbeat, and the
same transaction pushes the expiry of every lease it holds to now + TTL. An account's
PRIMARY is the session named by its ``leases`` row: ``acquire_lease`` grants the row when
there is none, when it has expired, or when the asking replica already holds it (the session
may change: a local standby taking over). The cluster checks (the account's row bound to
another cluster, or a live lease held for another one) are made in the same transaction, so
two replicas deciding together cannot both grant, nor grant two clusters. The grant itself
is one ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (expired, or ours): on PostgreSQL a
concurrent writer waits for the row and the WHERE is judged on the committed version, so
exactly one of two racing replicas gets a row back. A ``duties`` row (e.g. "housekeeping")
is claimed the same way. Times are the store's clock (``now``).

The SQL here uses ``?`` placeholders; ``Exec`` runs one statement inside the caller's
transaction (PostgreSQL's core rewrites the marks) and returns its rows ([] for none).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._records import LeaseOutcome, LeaseRecord, ReplicaRecord

Exec = Callable[[str, Sequence[Any]], list[tuple[Any, ...]]]

_LEASE_COLUMNS = "account, replica_id, session_id, agent_id, expires_ms"


def cluster_refusal(
    name: str, bound_host: str, bound_fingerprint: str, host: str, fingerprint: str
) -> str:
    """Why ``name``, bound to (bound_host, bound_fingerprint), cannot be served for the cluster
    (host, fingerprint); "" when it can (unbound, or the same cluster)."""
    bound = bound_host or bound_fingerprint
    if not bound or (bound_host, bound_fingerprint) == (host, fingerprint):
        return ""
    return (
        f"account {name!r} is held by another cluster (API host "
        f"{bound_host or '?'}, certificate {bound_fingerprint[:16] or '?'}); "
        f"this agent's cluster is {host or '?'} ({fingerprint[:16] or '?'})"
    )


def heartbeat_replica(x: Exec, r: ReplicaRecord, ttl_ms: int, now: int) -> None:
    x("UPDATE leases SET expires_ms=? WHERE replica_id=?", (now + ttl_ms, r.replica_id))
    rows = x("SELECT count(*) FROM leases WHERE replica_id=?", (r.replica_id,))
    primaries = int(rows[0][0]) if rows else 0
    x(
        "INSERT INTO replicas(replica_id, address, started_ms, heartbeat_ms, sessions,"
        " primaries) VALUES (?,?,?,?,?,?) ON CONFLICT(replica_id) DO UPDATE SET"
        " address=excluded.address, started_ms=excluded.started_ms,"
        " heartbeat_ms=excluded.heartbeat_ms, sessions=excluded.sessions,"
        " primaries=excluded.primaries",
        (r.replica_id, r.address, r.started_ms, r.heartbeat_ms or now, r.sessions, primaries),
    )


def list_replicas(x: Exec) -> list[ReplicaRecord]:
    rows = x(
        "SELECT replica_id, address, started_ms, heartbeat_ms, sessions, primaries"
        " FROM replicas ORDER BY replica_id",
        (),
    )
    return [ReplicaRecord(*row) for row in rows]


def delete_replica(x: Exec, replica_id: str) -> None:
    x("DELETE FROM leases WHERE replica_id=?", (replica_id,))
    x("DELETE FROM duties WHERE replica_id=?", (replica_id,))
    x("DELETE FROM replicas WHERE replica_id=?", (replica_id,))


def _lease(x: Exec, account: str) -> tuple[LeaseRecord, str, str] | None:
    rows = x(
        f"SELECT {_LEASE_COLUMNS}, kube_host, cert_fingerprint FROM leases WHERE account=?",
        (account,),
    )
    if not rows:
        return None
    row = rows[0]
    return LeaseRecord(*row[:5]), row[5], row[6]


def acquire_lease(
    x: Exec,
    account: str,
    replica_id: str,
    session_id: str,
    agent_id: str,
    kube_host: str,
    cert_fingerprint: str,
    ttl_ms: int,
    now: int,
) -> LeaseOutcome:
    rows = x("SELECT kube_host, cert_fingerprint FROM accounts WHERE name=?", (account,))
    if rows:
        refusal = cluster_refusal(account, rows[0][0], rows[0][1], kube_host, cert_fingerprint)
        if refusal:
            return LeaseOutcome(False, None, refusal)
    current = _lease(x, account)
    if current is not None:
        lease, host, fingerprint = current
        if lease.expires_ms > now and lease.replica_id != replica_id:
            refusal = cluster_refusal(account, host, fingerprint, kube_host, cert_fingerprint)
            return LeaseOutcome(False, lease, refusal)
    granted = x(
        f"INSERT INTO leases({_LEASE_COLUMNS}, kube_host, cert_fingerprint)"
        " VALUES (?,?,?,?,?,?,?) ON CONFLICT(account) DO UPDATE SET"
        " replica_id=excluded.replica_id, session_id=excluded.session_id,"
        " agent_id=excluded.agent_id, expires_ms=excluded.expires_ms,"
        " kube_host=excluded.kube_host, cert_fingerprint=excluded.cert_fingerprint"
        " WHERE leases.expires_ms <= ? OR leases.replica_id = excluded.replica_id"
        f" RETURNING {_LEASE_COLUMNS}",
        (
            account,
            replica_id,
            session_id,
            agent_id,
            now + ttl_ms,
            kube_host,
            cert_fingerprint,
            now,
        ),
    )
    if granted:
        return LeaseOutcome(True, LeaseRecord(*granted[0]))
    # Another replica's grant committed between our read and our write (PostgreSQL).
    current = _lease(x, account)
    if current is None:  # pragma: no cover - deleted meanwhile; the next attempt decides
        return LeaseOutcome(False, None)
    lease, host, fingerprint = current
    return LeaseOutcome(
        False, lease, cluster_refusal(account, host, fingerprint, kube_host, cert_fingerprint)
    )


def release_lease(x: Exec, account: str, session_id: str) -> bool:
    gone = x(
        "DELETE FROM leases WHERE account=? AND session_id=? RETURNING account",
        (account, session_id),
    )
    return bool(gone)


def get_lease(x: Exec, account: str) -> LeaseRecord | None:
    current = _lease(x, account)
    return current[0] if current else None


def list_leases(x: Exec) -> list[LeaseRecord]:
    rows = x(f"SELECT {_LEASE_COLUMNS} FROM leases ORDER BY account", ())
    return [LeaseRecord(*row) for row in rows]


def expire_leases(x: Exec, now: int, grace_ms: int) -> list[LeaseRecord]:
    rows = x(
        f"DELETE FROM leases WHERE expires_ms <= ? RETURNING {_LEASE_COLUMNS}", (now - grace_ms,)
    )
    return sorted((LeaseRecord(*row) for row in rows), key=lambda r: r.account)


def claim_duty(x: Exec, name: str, replica_id: str, ttl_ms: int, now: int) -> bool:
    rows = x(
        "INSERT INTO duties(name, replica_id, expires_ms) VALUES (?,?,?)"
        " ON CONFLICT(name) DO UPDATE SET replica_id=excluded.replica_id,"
        " expires_ms=excluded.expires_ms"
        " WHERE duties.expires_ms <= ? OR duties.replica_id = excluded.replica_id"
        " RETURNING name",
        (name, replica_id, now + ttl_ms, now),
    )
    return bool(rows)
