"""The status page's summary (``GET /ui/summary.json``), shaped from what the store and the
change feed hold: sans-I/O, one function of plain records.

Theory of operation. The endpoint (``_status``) makes one store call per section (accounts,
unavailable kinds, objects per kind, agent sessions, recent operations) and reads the feed's
``Activity`` and this replica's live sessions, then ``summarize`` turns them into one JSON
document. What is broken comes first, as an SRE paged at night wants it: ``problems`` lists
accounts not ACTIVE, kinds the agent may not watch, agents gone quiet and failed operations,
worst first; ``accounts`` are ordered the same way (troubled ones first, then by name).

Every list has a bound (``Limits``): past it the document says how many were left out
(``truncated``) rather than growing with the fleet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .._activity import ActivitySnapshot
from .._sessions import AgentView
from ..ops import ENDED_STATES, outcome_label, outcome_of
from ..store import (
    AccountRecord,
    AccountState,
    AgentRecord,
    KindOverview,
    OperationRecord,
    UnavailableKind,
)

__all__ = ["BUDGET_NOTE", "Limits", "SummaryInput", "summarize"]

# Accounts in these states need someone now; the other states that are not ACTIVE are
# transitions (ACTIVATING, ...) or an operator's choice (INACTIVE): worth a look.
_CRITICAL_STATES = frozenset(
    {AccountState.ORPHANED, AccountState.FAILED, AccountState.DELETE_FAILED}
)
# Operation outcomes where kubesvc itself did not deliver (server/ops/_stats.py): ours to fix.
_NOT_DELIVERED = frozenset({"timeout", "no_agent", "agent_disconnected", "replica_stopped"})
_SEVERITY_ORDER = {"critical": 0, "warning": 1}

BUDGET_NOTE = (
    "Agents do not report their byte budget to the server (it is in each agent's /metrics: "
    "kubesvc_budget_in_use_bytes). Shown instead: the object bytes this server stored and "
    "acknowledged, which is what frees room in the agents' budgets."
)


@dataclass(frozen=True, slots=True)
class Limits:
    """The bounds of one summary (each list past its bound is cut and counted)."""

    accounts: int = 5_000
    agents: int = 1_000
    operations: int = 50
    problems: int = 200
    kinds_per_account: int = 500


@dataclass(frozen=True, slots=True)
class SummaryInput:
    """What the endpoint read for one summary. ``local_agents`` are this replica's open
    sessions (the store's rows carry no heartbeats); ``stale_agent_ms`` is how long one of
    them may stay silent before it shows as a problem."""

    now_ms: int
    server_id: str
    accounts: Sequence[AccountRecord]
    unavailable: Sequence[UnavailableKind]
    kinds: Sequence[KindOverview]
    agents: Sequence[AgentRecord]
    local_agents: Sequence[AgentView]
    operations: Sequence[OperationRecord]
    activity: ActivitySnapshot
    stale_agent_ms: int = 180_000
    #: the replicas heartbeating now, this one included (None: no replica rows, one server)
    live_replicas: frozenset[str] | None = None


def _problem(severity: str, what: str, subject: str, message: str) -> dict[str, str]:
    return {"severity": severity, "what": what, "subject": subject, "message": message}


def _primary(record: AccountRecord) -> tuple[str, str, int]:
    """(role, agent id, standbys) from the account's connections ("" when nobody leads)."""
    primary = next((c for c in record.connections if c.get("role") == "PRIMARY"), None)
    standbys = sum(1 for c in record.connections if c.get("role") == "STANDBY")
    if primary is not None:
        return "PRIMARY", str(primary.get("agentId", "")), standbys
    if standbys:
        return "STANDBY", str(record.connections[0].get("agentId", "")), standbys
    return "", "", 0


def _unavailable_json(mark: UnavailableKind) -> dict[str, Any]:
    return {
        "kind": mark.kind,
        "group": mark.group,
        "scope": mark.scope,
        "code": mark.code,
        "reason": mark.reason,
        "since": mark.since_ms or None,
        "forbidden": mark.forbidden,
    }


def _account_problems(
    record: AccountRecord, marks: Sequence[UnavailableKind], now_ms: int
) -> list[dict[str, str]]:
    found = []
    if record.status is not AccountState.ACTIVE:
        severity = "critical" if record.status in _CRITICAL_STATES else "warning"
        message = f"is {record.status}"
        if record.orphaned_at_ms:
            minutes = max(0, now_ms - record.orphaned_at_ms) // 60_000
            message += f" for {minutes} min: no agent serves it"
        if record.error_message:
            message += f": {record.error_message}"
        found.append(_problem(severity, "account", record.name, message))
    forbidden = [m for m in marks if m.forbidden]
    missing = [m for m in marks if not m.forbidden]
    for group, severity, verb in (
        (forbidden, "critical", "may not watch"),
        (missing, "warning", "cannot watch (not served)"),
    ):
        if not group:
            continue
        kinds = ", ".join(sorted({_kind_label(m) for m in group}))
        first = group[0]
        detail = f" ({first.code}: {first.reason})" if first.reason else ""
        found.append(_problem(severity, "kind", record.name, f"{verb} {kinds}{detail}"))
    return found


def _kind_label(mark: UnavailableKind) -> str:
    label = f"{mark.kind}.{mark.group}" if mark.group else mark.kind
    return f"{label} in {mark.scope}" if mark.scope else label


def _accounts(
    inp: SummaryInput, limits: Limits
) -> tuple[list[dict[str, Any]], list[dict[str, str]], dict[str, int]]:
    marks: dict[str, list[UnavailableKind]] = {}
    for mark in inp.unavailable:
        marks.setdefault(mark.account, []).append(mark)
    kinds: dict[str, list[KindOverview]] = {}
    for overview in inp.kinds:
        kinds.setdefault(overview.account, []).append(overview)
    rows: list[tuple[tuple[int, str], dict[str, Any]]] = []
    problems: list[dict[str, str]] = []
    by_state: dict[str, int] = {}
    for record in inp.accounts:
        by_state[str(record.status)] = by_state.get(str(record.status), 0) + 1
        own_marks = marks.get(record.name, [])
        own_problems = _account_problems(record, own_marks, inp.now_ms)
        problems.extend(own_problems)
        row = _account_json(record, own_marks, kinds.get(record.name, []), inp, limits)
        worst = min((_SEVERITY_ORDER[p["severity"]] for p in own_problems), default=2)
        rows.append(((worst, record.name), row))
    rows.sort(key=lambda item: item[0])
    return [row for _, row in rows], problems, by_state


def _account_json(
    record: AccountRecord,
    marks: Sequence[UnavailableKind],
    kinds: Sequence[KindOverview],
    inp: SummaryInput,
    limits: Limits,
) -> dict[str, Any]:
    role, agent, standbys = _primary(record)
    activity = inp.activity.accounts.get(record.name)
    progress = max((k.watch_updated_ms for k in kinds), default=0)
    return {
        "name": record.name,
        "state": str(record.status),
        "role": role,
        "agent": agent,
        "standbys": standbys,
        "kubeHost": record.kube_host,
        "certFingerprint": record.cert_fingerprint,
        "kubeVersion": record.kube_version,
        "error": record.error_message,
        "dynamic": record.dynamic,
        "objects": sum(k.objects for k in kinds),
        # [kind, group, objects, synced watches]; ordered by group and kind.
        "kinds": [[k.kind, k.group, k.objects, k.synced_watches] for k in kinds][
            : limits.kinds_per_account
        ],
        "kindsSynced": sum(1 for k in kinds if k.synced_watches),
        "unavailable": [_unavailable_json(m) for m in marks],
        "forbidden": sum(1 for m in marks if m.forbidden),
        # The feed's newest object event (since this process started); the newest watch
        # progress (an event or a bookmark, from the store) survives restarts.
        "newestEvent": activity.newest_event_ms if activity else None,
        "eventsLastMinute": activity.events_last_minute if activity else 0,
        "watchProgress": progress or None,
        "orphanedAt": record.orphaned_at_ms,
    }


def _agents(inp: SummaryInput) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    local = {v.session_id: v for v in inp.local_agents}
    rows: dict[str, dict[str, Any]] = {}
    for record in inp.agents:
        rows[record.session_id] = {
            "agentId": record.agent_id,
            "sessionId": record.session_id,
            "instanceId": record.instance_id,
            "version": record.agent_version,
            "replica": record.server_id or inp.server_id,
            "peer": record.peer,
            "accounts": len(record.accounts),
            "connectedAt": record.connected_at_ms,
            "lastHeartbeat": record.last_seen_ms,
        }
    for view in local.values():
        row = rows.setdefault(
            view.session_id,
            {
                "agentId": view.agent_id,
                "sessionId": view.session_id,
                "instanceId": view.instance_id,
                "version": view.agent_version,
                "replica": inp.server_id,
                "peer": view.peer,
                "connectedAt": view.connected_at_ms,
            },
        )
        row["accounts"] = len(view.accounts)
        row["lastHeartbeat"] = max(view.last_seen_ms, int(row.get("lastHeartbeat") or 0))
    problems = []
    for row in rows.values():
        if row["sessionId"] in local or row["replica"] == inp.server_id:
            # This replica's sessions: it sees their heartbeats (a row it does not hold is
            # one its previous run left).
            silent = inp.now_ms - int(row["lastHeartbeat"] or row["connectedAt"])
            if silent > inp.stale_agent_ms:
                message = f"session {row['sessionId']} silent for {silent // 1000} s"
                problems.append(_problem("critical", "agent", row["agentId"], message))
            continue
        # Another replica's: the store has no heartbeat of it, only that replica's own.
        row["lastHeartbeat"] = None
        if inp.live_replicas is not None and row["replica"] not in inp.live_replicas:
            message = (
                f"session {row['sessionId']} is on replica {row['replica']}, which stopped "
                "heartbeating (the agent should have reconnected elsewhere)"
            )
            problems.append(_problem("critical", "agent", row["agentId"], message))
    ordered = sorted(rows.values(), key=lambda r: (r["agentId"], r["connectedAt"]))
    return ordered, problems


def _operations(
    ops: Iterable[OperationRecord],
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    rows = []
    problems = []
    for record in ops:
        ended = record.state in ENDED_STATES
        outcome = outcome_label(outcome_of(record)) if ended else "running"
        rows.append(
            {
                "id": record.id,
                "account": record.account,
                "type": record.type,
                "state": record.state,
                "outcome": outcome,
                "created": record.created_ms,
                "updated": record.updated_ms,
                "error": record.error_message,
                "errorCode": record.error_code,
            }
        )
        if ended and outcome != "succeeded":
            severity = "critical" if outcome in _NOT_DELIVERED else "warning"
            detail = record.error_message or record.error_code or outcome
            problems.append(
                _problem(
                    severity, "operation", record.account, f"{record.type} {outcome}: {detail}"
                )
            )
    return rows, problems


def _cut(items: list[Any], bound: int, name: str, truncated: dict[str, int]) -> list[Any]:
    if len(items) > bound:
        truncated[name] = len(items) - bound
        return items[:bound]
    return items


def summarize(inp: SummaryInput, limits: Limits | None = None) -> dict[str, Any]:
    """The summary document (see the module's docstring); every list within ``limits``."""
    limits = limits or Limits()
    accounts, account_problems, by_state = _accounts(inp, limits)
    agents, agent_problems = _agents(inp)
    operations, operation_problems = _operations(inp.operations[: limits.operations])
    problems = account_problems + agent_problems + operation_problems
    if inp.accounts and not agents:
        problems.append(
            _problem("critical", "agent", "", "no agent is connected to any server replica")
        )
    problems.sort(key=lambda p: _SEVERITY_ORDER[p["severity"]])  # stable: the order above
    truncated: dict[str, int] = {}
    activity = inp.activity
    return {
        "serverId": inp.server_id,
        "generatedAt": inp.now_ms,
        "problems": _cut(problems, limits.problems, "problems", truncated),
        "totals": {
            "accounts": len(inp.accounts),
            "byState": dict(sorted(by_state.items())),
            "agents": len({a["agentId"] for a in agents}),
            "sessions": len(agents),
            "objects": sum(k.objects for k in inp.kinds),
            "forbiddenKinds": sum(1 for m in inp.unavailable if m.forbidden),
            "unavailableKinds": len(inp.unavailable),
            "failedOperations": sum(1 for o in operations if o["outcome"] not in _FINE),
            "eventsLastMinute": _last_minute(activity),
        },
        "agents": _cut(agents, limits.agents, "agents", truncated),
        "accounts": _cut(accounts, limits.accounts, "accounts", truncated),
        "operations": operations,
        "activity": {
            "bucketMs": activity.bucket_ms,
            "until": activity.now_ms,
            "events": activity.events,
            "bytes": activity.bytes,
        },
        "budget": {"reported": False, "note": BUDGET_NOTE},
        "truncated": truncated,
    }


_FINE = frozenset({"succeeded", "running"})


def _last_minute(activity: ActivitySnapshot) -> int:
    buckets = max(1, 60_000 // activity.bucket_ms)
    return sum(activity.events[-buckets:])
