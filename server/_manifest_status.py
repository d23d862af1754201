"""The `status` block of a manifest read, computed the way Clouddriver's kind handlers do.

Theory of operation: Clouddriver answers `GET /manifests/...` with a status of four flags,
`stable`, `paused`, `available` and `failed`, each `{"state": bool, "message"?: str}`. Orca
waits on `stable` and `failed` after a deploy, so the rules and the messages must match the
Java handlers (KubernetesDeploymentHandler, ReplicaSetHandler, StatefulSetHandler,
DaemonSetHandler, PodHandler, JobHandler). Kinds without a rule are stable and available.

Pure functions over the decoded object (a dict); no I/O. A malformed field (a string where a
number belongs, a list where an object belongs) is read as absent rather than raised: the
object came from the Kubernetes API server, and a status read must never fail because of it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["Condition", "ManifestStatus", "compute_status"]

NO_STATUS = "No status reported yet"
NO_AVAILABILITY = "No availability reported"
OLD_GENERATION = "Waiting for status generation to match updated object generation"
UPDATED_REPLICAS = "Waiting for all replicas to be updated"
OLD_REPLICAS = "Waiting for old replicas to finish termination"
AVAILABLE_REPLICAS = "Waiting for all replicas to be available"
READY_REPLICAS = "Waiting for all replicas to be ready"
FULLY_LABELED_REPLICAS = "Waiting for all replicas to be fully-labeled"
PROGRESS_DEADLINE = "Deployment exceeded its progress deadline"


@dataclass(frozen=True, slots=True)
class Condition:
    """One flag of a status: its state and, when there is something to say, why."""

    state: bool
    message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """`{"state": ...}` plus `"message"` only when there is one (as Clouddriver renders it)."""
        body: dict[str, Any] = {"state": self.state}
        if self.message is not None:
            body["message"] = self.message
        return body


@dataclass(frozen=True, slots=True)
class ManifestStatus:
    """The four flags; the defaults are Clouddriver's `Status.defaultStatus()`."""

    stable: Condition = Condition(True)
    paused: Condition = Condition(False)
    available: Condition = Condition(True)
    failed: Condition = Condition(False)

    @classmethod
    def none_reported(cls) -> ManifestStatus:
        """The status of an object whose controller has not written `.status` yet."""
        return cls(stable=Condition(False, NO_STATUS), available=Condition(False, NO_AVAILABILITY))

    def unstable(self, message: str | None) -> ManifestStatus:
        return replace(self, stable=Condition(False, message))

    def unavailable(self, message: str | None) -> ManifestStatus:
        return replace(self, available=Condition(False, message))

    def with_failed(self, message: str | None) -> ManifestStatus:
        return replace(self, failed=Condition(True, message))

    def with_paused(self, message: str | None) -> ManifestStatus:
        return replace(self, paused=Condition(True, message))

    def with_stable(self, message: str | None) -> ManifestStatus:
        return replace(self, stable=Condition(True, message))

    def to_json(self) -> dict[str, Any]:
        return {
            "stable": self.stable.to_json(),
            "paused": self.paused.to_json(),
            "available": self.available.to_json(),
            "failed": self.failed.to_json(),
        }


def compute_status(obj: Mapping[str, Any]) -> ManifestStatus:
    """The status of `obj` (a decoded Kubernetes object), by its `kind`; never raises."""
    rule = _RULES.get(str(obj.get("kind", "")).lower())
    if rule is None:
        return ManifestStatus()
    return rule(obj)


# -- field access that tolerates anything -------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: object) -> int:
    """An integer field, 0 when absent or not a number (Clouddriver's defaultToZero)."""
    if isinstance(value, bool):
        return 0
    return value if isinstance(value, int) else 0


def _optional_int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _conditions(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = status.get("conditions")
    if not isinstance(raw, list):
        return []
    return [c for c in raw if isinstance(c, Mapping)]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _message(condition: Mapping[str, Any]) -> str | None:
    message = condition.get("message")
    return message if isinstance(message, str) else None


def _generation_matches(obj: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    observed = _optional_int(status.get("observedGeneration"))
    generation = _optional_int(_mapping(obj.get("metadata")).get("generation"))
    return observed is not None and observed == generation


def _status_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else None


# -- the rules, one per kind ----------------------------------------------------------------


def _deployment(obj: Mapping[str, Any]) -> ManifestStatus:
    status = _status_of(obj)
    if status is None:
        return ManifestStatus.none_reported()
    if not _generation_matches(obj, status):
        return ManifestStatus().unstable(OLD_GENERATION)
    result = ManifestStatus()
    conditions = _conditions(status)
    for c in conditions:
        if _text(c.get("reason")).lower() == "deploymentpaused":
            result = result.with_paused(_message(c))
            break
    for c in conditions:
        if (
            _text(c.get("type")).lower() == "available"
            and _text(c.get("status")).lower() == "false"
        ):
            result = result.unstable(_message(c)).unavailable(_message(c))
            break
    for c in conditions:
        if (
            _text(c.get("type")).lower() == "progressing"
            and _text(c.get("reason")).lower() == "progressdeadlineexceeded"
        ):
            result = result.with_failed(PROGRESS_DEADLINE)
            break
    reason = _deployment_replica_reason(obj, status)
    if reason is not None:
        result = result.unstable(reason)
    return result


def _deployment_replica_reason(obj: Mapping[str, Any], status: Mapping[str, Any]) -> str | None:
    desired = _int(_mapping(obj.get("spec")).get("replicas"))
    updated = _int(status.get("updatedReplicas"))
    if updated < desired:
        return UPDATED_REPLICAS
    if _int(status.get("replicas")) > updated:
        return OLD_REPLICAS
    if _int(status.get("availableReplicas")) < desired:
        return AVAILABLE_REPLICAS
    if _int(status.get("readyReplicas")) < desired:
        return READY_REPLICAS
    return None


def _replica_set(obj: Mapping[str, Any]) -> ManifestStatus:
    status = _status_of(obj)
    if status is None:
        return ManifestStatus.none_reported()
    desired = _int(_mapping(obj.get("spec")).get("replicas"))
    reason = None
    if desired > _int(status.get("fullyLabeledReplicas")):
        reason = FULLY_LABELED_REPLICAS
    elif desired > _int(status.get("readyReplicas")):
        reason = READY_REPLICAS
    elif desired > _int(status.get("availableReplicas")):
        reason = AVAILABLE_REPLICAS
    if reason is not None:
        return ManifestStatus().unstable(reason).unavailable(reason)
    if not _generation_matches(obj, status):
        return ManifestStatus().unstable("Waiting for replicaset spec update to be observed")
    return ManifestStatus()


def _stateful_set(obj: Mapping[str, Any]) -> ManifestStatus:
    spec = _mapping(obj.get("spec"))
    strategy = _mapping(spec.get("updateStrategy"))
    # The API server defaults updateStrategy.type to RollingUpdate.
    update_type = _text(strategy.get("type")).lower() or "rollingupdate"
    if update_type == "ondelete":
        return ManifestStatus()
    status = _status_of(obj)
    if status is None:
        return ManifestStatus.none_reported()
    if not _generation_matches(obj, status):
        return ManifestStatus().unstable(OLD_GENERATION)
    desired = _int(spec.get("replicas"))
    if desired > _int(status.get("replicas")):
        return ManifestStatus().unstable("Waiting for at least the desired replica count to be met")
    if desired > _int(status.get("readyReplicas")):
        return ManifestStatus().unstable("Waiting for all updated replicas to be ready")
    updated = _optional_int(status.get("updatedReplicas"))
    rolling = strategy.get("rollingUpdate")
    if update_type == "rollingupdate" and updated is not None and isinstance(rolling, Mapping):
        partition = _optional_int(rolling.get("partition"))
        replicas = _optional_int(status.get("replicas"))
        if replicas is not None and partition is not None and updated < replicas - partition:
            return ManifestStatus().unstable("Waiting for partitioned roll out to finish")
        return ManifestStatus().with_stable("Partitioned roll out complete")
    if desired > _int(status.get("currentReplicas")):
        return ManifestStatus().unstable("Waiting for all updated replicas to be scheduled")
    if status.get("currentRevision") != status.get("updateRevision"):
        return ManifestStatus().unstable(
            "Waiting for the updated revision to match the current revision"
        )
    return ManifestStatus()


def _daemon_set(obj: Mapping[str, Any]) -> ManifestStatus:
    status = _status_of(obj)
    if status is None:
        return ManifestStatus.none_reported()
    if not _generation_matches(obj, status):
        return ManifestStatus().unstable(OLD_GENERATION)
    strategy = _mapping(_mapping(obj.get("spec")).get("updateStrategy"))
    if (_text(strategy.get("type")).lower() or "rollingupdate") != "rollingupdate":
        return ManifestStatus()
    desired = _int(status.get("desiredNumberScheduled"))
    checks = (
        ("currentNumberScheduled", "Waiting for all replicas to be scheduled"),
        ("updatedNumberScheduled", "Waiting for all updated replicas to be scheduled"),
        ("numberAvailable", AVAILABLE_REPLICAS),
        ("numberReady", READY_REPLICAS),
    )
    for field, message in checks:
        if desired > _int(status.get(field)):
            return ManifestStatus().unstable(message)
    return ManifestStatus()


_POD_PHASES: dict[str, str | None] = {
    "Pending": "Pod is pending",
    "Running": None,
    "Succeeded": None,
    "Failed": "Pod has failed",
}


def _pod(obj: Mapping[str, Any]) -> ManifestStatus:
    status = _status_of(obj)
    if status is None:
        return ManifestStatus.none_reported()
    phase = _text(status.get("phase"))
    message = _POD_PHASES.get(phase, "Pod phase is unknown")
    if message is not None:
        return ManifestStatus().unstable(message).unavailable(message)
    return ManifestStatus()


def _job(obj: Mapping[str, Any]) -> ManifestStatus:
    status = _status_of(obj)
    if status is None:
        return ManifestStatus.none_reported()
    completions = _optional_int(_mapping(obj.get("spec")).get("completions"))
    if completions is None:
        completions = 1
    if _int(status.get("succeeded")) >= completions:
        return ManifestStatus()
    for c in _conditions(status):
        if _text(c.get("type")).lower() == "failed" and _text(c.get("status")).lower() == "true":
            return ManifestStatus().with_failed(_message(c))
    return ManifestStatus().unstable("Waiting for jobs to finish")


_RULES: dict[str, Callable[[Mapping[str, Any]], ManifestStatus]] = {
    "deployment": _deployment,
    "replicaset": _replica_set,
    "statefulset": _stateful_set,
    "daemonset": _daemon_set,
    "pod": _pod,
    "job": _job,
}
