"""Clouddriver's status rules, one test per rule and message (clouddriver-api.md section 4)."""

from __future__ import annotations

from typing import Any

import pytest

from server._manifest_status import Condition, ManifestStatus, compute_status


def deployment(
    status: dict[str, Any] | None = None, *, replicas: int = 3, generation: int = 2
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns", "generation": generation},
        "spec": {"replicas": replicas},
    }
    if status is not None:
        obj["status"] = status
    return obj


def healthy(**overrides: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "observedGeneration": 2,
        "replicas": 3,
        "updatedReplicas": 3,
        "availableReplicas": 3,
        "readyReplicas": 3,
        "conditions": [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
            {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
        ],
    }
    status.update(overrides)
    return status


def test_default_status_json_omits_missing_messages() -> None:
    assert ManifestStatus().to_json() == {
        "stable": {"state": True},
        "paused": {"state": False},
        "available": {"state": True},
        "failed": {"state": False},
    }


def test_unknown_kind_is_stable_and_available() -> None:
    assert compute_status({"kind": "ConfigMap", "metadata": {"name": "x"}}) == ManifestStatus()


def test_deployment_without_status_is_not_stable() -> None:
    result = compute_status(deployment(None))
    assert result.stable == Condition(False, "No status reported yet")
    assert result.available == Condition(False, "No availability reported")


def test_deployment_generation_behind_is_not_stable() -> None:
    result = compute_status(deployment(healthy(observedGeneration=1)))
    assert result.stable == Condition(
        False, "Waiting for status generation to match updated object generation"
    )
    assert result.failed.state is False


def test_deployment_without_observed_generation_is_not_stable() -> None:
    status = healthy()
    del status["observedGeneration"]
    assert compute_status(deployment(status)).stable.state is False


def test_healthy_deployment_is_stable() -> None:
    assert compute_status(deployment(healthy())) == ManifestStatus()


def test_paused_deployment() -> None:
    conditions = [
        {
            "type": "Progressing",
            "status": "Unknown",
            "reason": "DeploymentPaused",
            "message": "Deployment is paused",
        }
    ]
    result = compute_status(deployment(healthy(conditions=conditions)))
    assert result.paused == Condition(True, "Deployment is paused")
    assert result.stable.state is True


def test_unavailable_condition_makes_it_unstable_and_unavailable() -> None:
    conditions = [
        {
            "type": "Available",
            "status": "False",
            "reason": "MinimumReplicasUnavailable",
            "message": "Deployment does not have minimum availability.",
        }
    ]
    result = compute_status(deployment(healthy(conditions=conditions)))
    assert result.available == Condition(False, "Deployment does not have minimum availability.")
    assert result.stable == Condition(False, "Deployment does not have minimum availability.")


def test_progress_deadline_exceeded_is_failed() -> None:
    conditions = [
        {
            "type": "Progressing",
            "status": "False",
            "reason": "ProgressDeadlineExceeded",
            "message": "ReplicaSet has timed out progressing.",
        }
    ]
    result = compute_status(deployment(healthy(conditions=conditions)))
    assert result.failed == Condition(True, "Deployment exceeded its progress deadline")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"updatedReplicas": 2}, "Waiting for all replicas to be updated"),
        ({"replicas": 4}, "Waiting for old replicas to finish termination"),
        ({"availableReplicas": 2}, "Waiting for all replicas to be available"),
        ({"readyReplicas": 1}, "Waiting for all replicas to be ready"),
        ({"updatedReplicas": None, "replicas": None}, "Waiting for all replicas to be updated"),
    ],
)
def test_deployment_replica_counts(overrides: dict[str, Any], message: str) -> None:
    status = {k: v for k, v in healthy(**overrides).items() if v is not None}
    result = compute_status(deployment(status))
    assert result.stable == Condition(False, message)
    assert result.available.state is True


def test_replica_count_message_wins_over_unavailable_condition_message() -> None:
    conditions = [{"type": "Available", "status": "False", "message": "min availability"}]
    result = compute_status(deployment(healthy(conditions=conditions, readyReplicas=0)))
    assert result.stable == Condition(False, "Waiting for all replicas to be ready")
    assert result.available == Condition(False, "min availability")


def test_malformed_fields_are_read_as_absent() -> None:
    obj = deployment(healthy(updatedReplicas="3", conditions="nope"))
    assert compute_status(obj).stable == Condition(False, "Waiting for all replicas to be updated")
    assert compute_status({"kind": "Deployment", "status": []}).stable.state is False


def replica_set(status: dict[str, Any] | None, replicas: int = 2) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "ReplicaSet",
        "metadata": {"name": "rs", "generation": 1},
        "spec": {"replicas": replicas},
    }
    if status is not None:
        obj["status"] = status
    return obj


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (
            {"fullyLabeledReplicas": 1, "readyReplicas": 2, "availableReplicas": 2},
            "Waiting for all replicas to be fully-labeled",
        ),
        (
            {"fullyLabeledReplicas": 2, "readyReplicas": 1, "availableReplicas": 2},
            "Waiting for all replicas to be ready",
        ),
        (
            {"fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 0},
            "Waiting for all replicas to be available",
        ),
    ],
)
def test_replica_set_counts(status: dict[str, Any], message: str) -> None:
    result = compute_status(replica_set({"observedGeneration": 1, **status}))
    assert result.stable == Condition(False, message)
    assert result.available == Condition(False, message)


def test_replica_set_generation_and_healthy() -> None:
    counts = {"fullyLabeledReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}
    assert compute_status(replica_set({"observedGeneration": 0, **counts})).stable == Condition(
        False, "Waiting for replicaset spec update to be observed"
    )
    assert compute_status(replica_set({"observedGeneration": 1, **counts})) == ManifestStatus()
    assert compute_status(replica_set(None)) == ManifestStatus.none_reported()


def stateful_set(status: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "StatefulSet",
        "metadata": {"name": "db", "generation": 3},
        "spec": {"replicas": 2, "updateStrategy": {"type": "RollingUpdate"}, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_stateful_set_rules() -> None:
    good = {
        "observedGeneration": 3,
        "replicas": 2,
        "readyReplicas": 2,
        "currentReplicas": 2,
        "currentRevision": "a",
        "updateRevision": "a",
    }
    assert compute_status(stateful_set(good)) == ManifestStatus()
    assert (
        compute_status(stateful_set(None, updateStrategy={"type": "OnDelete"})) == ManifestStatus()
    )
    assert compute_status(stateful_set(None)) == ManifestStatus.none_reported()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"replicas": 1}, "Waiting for at least the desired replica count to be met"),
        ({"readyReplicas": 1}, "Waiting for all updated replicas to be ready"),
        ({"currentReplicas": 1}, "Waiting for all updated replicas to be scheduled"),
        ({"updateRevision": "b"}, "Waiting for the updated revision to match the current revision"),
        (
            {"observedGeneration": 2},
            "Waiting for status generation to match updated object generation",
        ),
    ]
    for override, message in cases:
        assert compute_status(stateful_set({**good, **override})).stable == Condition(
            False, message
        )


def test_stateful_set_partitioned_rollout() -> None:
    spec = {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}
    status = {"observedGeneration": 3, "replicas": 2, "readyReplicas": 2, "updatedReplicas": 0}
    assert compute_status(stateful_set(status, **spec)).stable == Condition(
        False, "Waiting for partitioned roll out to finish"
    )
    assert compute_status(
        stateful_set({**status, "updatedReplicas": 1}, **spec)
    ).stable == Condition(True, "Partitioned roll out complete")


def test_daemon_set_rules() -> None:
    good = {
        "observedGeneration": 1,
        "desiredNumberScheduled": 3,
        "currentNumberScheduled": 3,
        "updatedNumberScheduled": 3,
        "numberAvailable": 3,
        "numberReady": 3,
    }

    def ds(status: dict[str, Any] | None, strategy: str = "RollingUpdate") -> dict[str, Any]:
        obj: dict[str, Any] = {
            "kind": "DaemonSet",
            "metadata": {"name": "d", "generation": 1},
            "spec": {"updateStrategy": {"type": strategy}},
        }
        if status is not None:
            obj["status"] = status
        return obj

    assert compute_status(ds(good)) == ManifestStatus()
    assert compute_status(ds(None)) == ManifestStatus.none_reported()
    assert compute_status(ds({**good, "numberReady": 0}, "OnDelete")) == ManifestStatus()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"currentNumberScheduled": 2}, "Waiting for all replicas to be scheduled"),
        ({"updatedNumberScheduled": 2}, "Waiting for all updated replicas to be scheduled"),
        ({"numberAvailable": 2}, "Waiting for all replicas to be available"),
        ({"numberReady": 2}, "Waiting for all replicas to be ready"),
        (
            {"observedGeneration": 0},
            "Waiting for status generation to match updated object generation",
        ),
    ]
    for override, message in cases:
        assert compute_status(ds({**good, **override})).stable == Condition(False, message)


@pytest.mark.parametrize(
    ("phase", "message"),
    [
        ("Pending", "Pod is pending"),
        ("Failed", "Pod has failed"),
        ("Weird", "Pod phase is unknown"),
        (None, "Pod phase is unknown"),
    ],
)
def test_unstable_pod_phases(phase: str | None, message: str) -> None:
    status = {} if phase is None else {"phase": phase}
    result = compute_status({"kind": "Pod", "status": status})
    assert result.stable == Condition(False, message)
    assert result.available == Condition(False, message)


@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
def test_stable_pod_phases(phase: str) -> None:
    assert compute_status({"kind": "Pod", "status": {"phase": phase}}) == ManifestStatus()


def test_job_rules() -> None:
    def job(status: dict[str, Any] | None, completions: int | None = None) -> dict[str, Any]:
        spec = {} if completions is None else {"completions": completions}
        obj: dict[str, Any] = {"kind": "Job", "metadata": {"name": "j"}, "spec": spec}
        if status is not None:
            obj["status"] = status
        return obj

    assert compute_status(job(None)) == ManifestStatus.none_reported()
    assert compute_status(job({"succeeded": 1})) == ManifestStatus()
    assert compute_status(job({"succeeded": 1}, completions=2)).stable == Condition(
        False, "Waiting for jobs to finish"
    )
    failed = {
        "conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]
    }
    result = compute_status(job(failed))
    assert result.failed == Condition(True, "BackoffLimitExceeded")
    assert result.stable.state is True
