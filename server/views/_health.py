"""Instance health as Clouddriver's Kubernetes provider derives it from a pod's status
(``KubernetesHealth``, ``KubernetesModelUtil.getHealthState``). Pure.

One entry for the pod (phase Pending -> Down, Running -> Up, anything else -> Unknown) and
one per ``status.containerStatuses[]`` (ready -> Up, else Down); a pod with no status has
none. Each entry carries ``"platform": "platform"`` (a quirk of Clouddriver's ``toMap()``
that go-clouddriver copies). Load balancers play no part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["HEALTH_STATES", "health_state", "instance_counts", "pod_health"]

UP, DOWN, UNKNOWN = "Up", "Down", "Unknown"
STARTING, SUCCEEDED, FAILED, OUT_OF_SERVICE = "Starting", "Succeeded", "Failed", "OutOfService"
HEALTH_STATES = (UP, DOWN, UNKNOWN, STARTING, SUCCEEDED, FAILED, OUT_OF_SERVICE)


def _entry(state: str, source: str, kind: str) -> dict[str, Any]:
    return {"state": state, "source": source, "type": kind, "platform": "platform"}


def pod_health(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The health entries of a decoded pod, the pod's first."""
    status = pod.get("status")
    if not isinstance(status, Mapping):
        return []
    phase = str(status.get("phase") or "").lower()
    state = DOWN if phase == "pending" else UP if phase == "running" else UNKNOWN
    health = [_entry(state, "Pod", "kubernetes/pod")]
    for container in status.get("containerStatuses") or ():
        if not isinstance(container, Mapping):
            continue
        ready = container.get("ready") is True
        name = container.get("name")
        health.append(_entry(UP if ready else DOWN, f"Container {name}", "kubernetes/container"))
    return health


def health_state(health: Sequence[Mapping[str, Any]]) -> str:
    """Up when every entry that is not Unknown is Up (and there is one), else Succeeded
    likewise, else Starting, Down, Failed, OutOfService if any entry is (in that order),
    else Unknown."""
    known = [h.get("state") for h in health if h.get("state") != UNKNOWN]
    if known and all(s == UP for s in known):
        return UP
    if known and all(s == SUCCEEDED for s in known):
        return SUCCEEDED
    for state in (STARTING, DOWN, FAILED, OUT_OF_SERVICE):
        if state in known:
            return state
    return UNKNOWN


def instance_counts(states: Iterable[str]) -> dict[str, int]:
    """A server group's ``instanceCounts`` from its instances' health states."""
    found = list(states)
    return {
        "total": len(found),
        "up": found.count(UP),
        "down": found.count(DOWN),
        "unknown": found.count(UNKNOWN),
        "outOfService": found.count(OUT_OF_SERVICE),
        "starting": found.count(STARTING),
    }
