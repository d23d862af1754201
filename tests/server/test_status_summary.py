"""The status page's summary (server/api/_status_summary.py, sans-I/O) and how often it is
computed (server/api/_status.py's SummaryCache)."""

from __future__ import annotations

import gzip
from dataclasses import replace
from typing import Any

import trio
import trio.lowlevel

from server._activity import AccountActivity, ActivitySnapshot
from server._registry import Role
from server._sessions import AgentView
from server.api._status import SummaryCache, refresh_due
from server.api._status_summary import Limits, SummaryInput, summarize
from server.store import (
    AccountRecord,
    AccountState,
    AgentRecord,
    KindOverview,
    OperationRecord,
    UnavailableKind,
)

NOW = 1_700_000_000_000


def activity(**accounts: AccountActivity) -> ActivitySnapshot:
    return ActivitySnapshot(NOW, 5000, [0] * 11 + [10], [0] * 11 + [2048], dict(accounts))


def account(name: str, state: AccountState = AccountState.ACTIVE, **kw: Any) -> AccountRecord:
    primary = [{"agentId": "agent-a", "sessionId": "s1", "role": "PRIMARY"}]
    connections = kw.pop("connections", primary if state is AccountState.ACTIVE else [])
    return AccountRecord(
        name, "10.0.0.1:6443", "ab" * 32, "v1.30.0", state, connections=connections, **kw
    )


def summary_input(**kw: Any) -> SummaryInput:
    base: dict[str, Any] = {
        "now_ms": NOW,
        "server_id": "srv-1",
        "accounts": [],
        "unavailable": [],
        "kinds": [],
        "agents": [
            AgentRecord("s1", "agent-a", "i1", "1.2.3", "srv-1", "peer", ["prod"], NOW, NOW)
        ],
        "local_agents": [],
        "operations": [],
        "activity": activity(),
    }
    base.update(kw)
    return SummaryInput(**base)


def test_what_is_broken_comes_first() -> None:
    forbidden = UnavailableKind("prod", "v1", "Secret", "", 403, "secrets is forbidden", NOW - 1)
    missing = UnavailableKind("dev", "x.io/v1", "Widget", "", 404, "not found", NOW - 1)
    inp = summary_input(
        accounts=[
            account("aaa"),
            account("dev"),
            account("lost", AccountState.ORPHANED, orphaned_at_ms=NOW - 5 * 60_000),
            account("new", AccountState.INACTIVE),
            account("prod"),
        ],
        unavailable=[missing, forbidden],
        operations=[
            OperationRecord("o1", "prod", "deployManifest", state="SUCCEEDED", created_ms=NOW),
            OperationRecord(
                "o2", "prod", "deleteManifest", state="FAILED", error_message="422 invalid"
            ),
            OperationRecord(
                "o3",
                "dev",
                "scaleManifest",
                state="FAILED",
                error_code="OperationTimeout",
                error_message="no result in 30 s",
            ),
            OperationRecord("o4", "dev", "patchManifest", state="RECEIVED"),
        ],
    )
    out = summarize(inp)
    problems = [(p["severity"], p["what"], p["subject"]) for p in out["problems"]]
    assert problems == [
        ("critical", "account", "lost"),
        ("critical", "kind", "prod"),
        ("critical", "operation", "dev"),
        ("warning", "kind", "dev"),
        ("warning", "account", "new"),
        ("warning", "operation", "prod"),
    ]
    assert "for 5 min: no agent serves it" in out["problems"][0]["message"]
    assert out["problems"][1]["message"] == "may not watch Secret (403: secrets is forbidden)"
    # Accounts: critical ones first, then warnings, then the healthy, each by name.
    assert [a["name"] for a in out["accounts"]] == ["lost", "prod", "dev", "new", "aaa"]
    assert [o["outcome"] for o in out["operations"]] == [
        "succeeded",
        "failed",
        "timeout",
        "running",
    ]
    totals = out["totals"]
    assert totals["byState"] == {"ACTIVE": 3, "INACTIVE": 1, "ORPHANED": 1}
    assert (totals["forbiddenKinds"], totals["unavailableKinds"]) == (1, 2)
    assert totals["failedOperations"] == 2


def test_an_accounts_kinds_role_and_activity() -> None:
    inp = summary_input(
        accounts=[
            account(
                "prod",
                connections=[
                    {"agentId": "agent-b", "sessionId": "s2", "role": "STANDBY"},
                    {"agentId": "agent-a", "sessionId": "s1", "role": "PRIMARY"},
                ],
            )
        ],
        kinds=[
            KindOverview("prod", "", "ConfigMap", 0, 1, NOW - 3000),
            KindOverview("prod", "", "Pod", 40, 2, NOW - 1000),
            KindOverview("prod", "apps", "Deployment", 3, 0, 0),
            KindOverview("other", "", "Pod", 7, 1, NOW),
        ],
        activity=activity(prod=AccountActivity(NOW - 2000, 12, 500)),
    )
    out = summarize(inp)
    (prod,) = out["accounts"]
    assert (prod["role"], prod["agent"], prod["standbys"]) == ("PRIMARY", "agent-a", 1)
    assert prod["kinds"] == [
        ["ConfigMap", "", 0, 1],
        ["Pod", "", 40, 2],
        ["Deployment", "apps", 3, 0],
    ]
    assert (prod["objects"], prod["kindsSynced"]) == (43, 2)
    assert (prod["newestEvent"], prod["eventsLastMinute"]) == (NOW - 2000, 12)
    assert prod["watchProgress"] == NOW - 1000
    assert (prod["kubeHost"], prod["kubeVersion"]) == ("10.0.0.1:6443", "v1.30.0")
    assert out["totals"]["objects"] == 50  # every account's, "other" too
    assert out["totals"]["eventsLastMinute"] == 10
    assert out["activity"]["events"][-1] == 10
    assert out["budget"]["reported"] is False


def test_agents_merge_the_store_and_this_replicas_sessions() -> None:
    fresh = AgentView("agent-a", "s1", "i1", "1.2.3", "peer", {"prod": Role.PRIMARY}, NOW, NOW - 5)
    agents = [
        AgentRecord("s1", "agent-a", "i1", "1.2.3", "", "peer", ["prod"], NOW - 9000, 0),
        # Another replica's session: the store has no heartbeat of it.
        AgentRecord("s8", "agent-b", "i8", "1.2.3", "srv-2", "p8", [], NOW - 10**6, NOW - 10**6),
        # One this replica's previous run left: silent for ten minutes.
        AgentRecord("s9", "agent-z", "i9", "1.0.0", "srv-1", "p9", [], NOW - 10**6, NOW - 600_000),
    ]
    inp = summary_input(accounts=[account("prod")], agents=agents, local_agents=[fresh])
    out = summarize(inp)
    a, b, z = out["agents"]
    assert (a["agentId"], a["replica"], a["lastHeartbeat"], a["accounts"]) == (
        "agent-a",
        "srv-1",
        NOW - 5,
        1,
    )
    assert (b["replica"], b["lastHeartbeat"]) == ("srv-2", None)
    assert z["lastHeartbeat"] == NOW - 600_000
    (problem,) = out["problems"]
    assert (problem["what"], problem["subject"]) == ("agent", "agent-z")
    assert "silent for 600 s" in problem["message"]
    assert (out["totals"]["agents"], out["totals"]["sessions"]) == (3, 3)
    # srv-2 stopped heartbeating: its sessions are a problem too.
    out = summarize(replace(inp, live_replicas=frozenset({"srv-1"})))
    assert [p["subject"] for p in out["problems"]] == ["agent-b", "agent-z"]
    assert "replica srv-2, which stopped heartbeating" in out["problems"][0]["message"]


def test_accounts_and_no_agent_at_all_is_a_problem() -> None:
    out = summarize(summary_input(accounts=[account("prod")], agents=[]))
    assert [p["message"] for p in out["problems"]] == [
        "no agent is connected to any server replica"
    ]
    assert summarize(summary_input(agents=[]))["problems"] == []


def test_lists_past_their_bounds_are_cut_and_counted() -> None:
    accounts = [account(f"a{i:03}", AccountState.INACTIVE) for i in range(30)]
    out = summarize(summary_input(accounts=accounts), Limits(accounts=10, problems=5))
    assert len(out["accounts"]) == 10
    assert len(out["problems"]) == 5
    assert out["truncated"] == {"accounts": 20, "problems": 25}
    assert out["totals"]["accounts"] == 30


def test_a_summary_is_due_after_a_second_or_ten_times_its_cost() -> None:
    assert not refresh_due(10.5, 10.0, 0.01)
    assert refresh_due(11.0, 10.0, 0.01)
    assert not refresh_due(14.0, 10.0, 0.5)  # it took 0.5 s: every 5 s at most
    assert refresh_due(15.0, 10.0, 0.5)
    assert refresh_due(40.0, 10.0, 60.0)  # never staler than 30 s


async def test_pages_polling_together_share_one_computation() -> None:
    now = [100.0]
    cache = SummaryCache(clock=lambda: now[0])
    computed = 0

    async def compute() -> bytes:
        nonlocal computed
        computed += 1
        await trio.lowlevel.checkpoint()  # the others queue meanwhile
        return b'{"n": %d}' % computed

    with trio.fail_after(10):
        answers: list[tuple[bytes, bytes]] = []

        async def poll() -> None:
            answers.append(await cache.get(compute))

        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(poll)
        assert computed == 1
        assert {a for a, _ in answers} == {b'{"n": 1}'}
        assert gzip.decompress(answers[0][1]) == b'{"n": 1}'
        now[0] += 0.5
        assert (await cache.get(compute))[0] == b'{"n": 1}'
        now[0] += 0.5
        assert (await cache.get(compute))[0] == b'{"n": 2}'
