"""The operations' metrics source: outcome labels from a fixed set, every account's outcomes
from 0, a histogram per operation type from the start."""

from __future__ import annotations

from server.ops import OPERATIONS, OUTCOMES, AgentResult, OperationOutcome, OperationStatistics


def _failed(error: str) -> OperationOutcome:
    return OperationOutcome(False, AgentResult(ok=False), error, "why")


def test_outcomes_tell_kubesvc_failures_from_refusals_and_never_take_the_agents_codes() -> None:
    stats = OperationStatistics()
    stats.note("prod", "deployManifest", OperationOutcome(True, AgentResult(ok=True)), 0.2)
    stats.note("prod", "deployManifest", _failed("NoAgent"), 0.001)
    stats.note("prod", "scaleManifest", _failed("OperationTimeout"), 30.0)
    stats.note("prod", "patchManifest", _failed("AgentDisconnected"), 1.0)
    stats.note("prod", "patchManifest", _failed("ReplicaStopped"), 1.0)
    stats.note("prod", "patchManifest", _failed("KubernetesError"), 0.1)  # the agent's code
    stats.note("prod", "patchManifest", _failed("SomethingNew"), 0.1)
    assert stats.counts == {
        ("prod", "succeeded"): 1,
        ("prod", "no_agent"): 1,
        ("prod", "timeout"): 1,
        ("prod", "agent_disconnected"): 1,
        ("prod", "replica_stopped"): 1,
        ("prod", "failed"): 2,
    }
    assert {outcome for _, outcome in stats.counts} == set(OUTCOMES)
    assert stats.durations["patchManifest"].count == 4
    assert stats.durations["scaleManifest"].cumulative()[-2:] == [("120.0", 1), ("+Inf", 1)]


def test_every_series_exists_before_its_first_operation() -> None:
    # Prometheus' increase() cannot see the first increment of a series born with it.
    stats = OperationStatistics()
    assert set(OPERATIONS) <= set(stats.durations)
    assert all(h.count == 0 for h in stats.durations.values())
    stats.note("gone", "deployManifest", _failed("NoAgent"), 0.1)  # an account since removed
    rows = dict(stats.counts_for(["a", "b"]))
    assert rows == {
        **{(account, outcome): 0 for account in ("a", "b") for outcome in OUTCOMES},
        ("gone", "no_agent"): 1,
    }
