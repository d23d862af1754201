"""What the operations this replica ran came to, for the metrics: counts by account and outcome
(kubesvc_server_operations_total) and durations by type
(kubesvc_server_operation_duration_seconds), read at scrape time.

The outcome is a small fixed set, so that an alert can tell an operator's problem from the
user's: ``succeeded``; ``failed`` (the agent or Kubernetes refused or failed it: a bad
manifest, RBAC, an admission webhook); and the ones where kubesvc itself did not deliver:
``timeout`` (no result within operations.waitMs), ``no_agent`` (no agent serves the account),
``agent_disconnected`` (its session ended before the result), ``replica_stopped`` (the
replica holding the agent's stream went away). The agent's own error codes never become label
values: the agent chooses them.

Every series starts at 0 before its first operation (``counts_for`` gives every outcome of
every account asked for; every type has its histogram from the start): Prometheus'
``increase()`` cannot see the first increment of a series that appears with it, so an alert on
the first operation that failed to reach an agent would miss it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import wire

from ._describe import OPERATIONS, POD_LOGS
from ._outcome import OperationOutcome

__all__ = ["OUTCOMES", "OperationStatistics", "outcome_label"]

_NOT_DELIVERED = {
    "OperationTimeout": "timeout",
    "NoAgent": "no_agent",
    "AgentDisconnected": "agent_disconnected",
    "ReplicaStopped": "replica_stopped",
}
OUTCOMES = ("succeeded", "failed", *_NOT_DELIVERED.values())


def outcome_label(outcome: OperationOutcome) -> str:
    """The ``outcome`` label of one ended operation (one of OUTCOMES)."""
    if outcome.ok:
        return "succeeded"
    return _NOT_DELIVERED.get(outcome.error, "failed")


def _histograms() -> dict[str, wire.LatencyHistogram]:
    types = [*OPERATIONS, POD_LOGS.name]
    return {name: wire.LatencyHistogram(wire.OPERATION_BUCKETS) for name in types}


@dataclass(slots=True)
class OperationStatistics:
    """Counters of the operations this replica ran (an operation dispatched to another
    replica counts here, where it was asked for, not on the replica that relayed it)."""

    counts: dict[tuple[str, str], int] = field(default_factory=dict)  # (account, outcome)
    durations: dict[str, wire.LatencyHistogram] = field(default_factory=_histograms)

    def note(self, account: str, type: str, outcome: OperationOutcome, seconds: float) -> None:
        key = (account, outcome_label(outcome))
        self.counts[key] = self.counts.get(key, 0) + 1
        histogram = self.durations.get(type)
        if histogram is None:
            histogram = self.durations[type] = wire.LatencyHistogram(wire.OPERATION_BUCKETS)
        histogram.observe(seconds)

    def counts_for(self, accounts: Iterable[str]) -> list[tuple[tuple[str, str], int]]:
        """``((account, outcome), count)`` sorted: every outcome of ``accounts`` (0 when none
        ended so), and whatever else was counted (an account since removed)."""
        rows = dict.fromkeys(((a, o) for a in accounts for o in OUTCOMES), 0)
        rows.update(self.counts)
        return sorted(rows.items())
