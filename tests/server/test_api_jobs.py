"""The job status body (server/api/_jobs.py), offline: Clouddriver's KubernetesJobStatus rules."""

from __future__ import annotations

from typing import Any

from server.api._jobs import job_state, job_status


def _job(status: dict[str, Any] | None, **spec: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "metadata": {"name": "m", "namespace": "ns", "creationTimestamp": "2025-03-05T12:10:00Z"},
        "spec": spec,
    }
    if status is not None:
        job["status"] = status
    return job


FAILED = {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "too slow"}


def test_job_state_follows_clouddrivers_rules() -> None:
    assert job_state(_job(None)) == "Running"
    assert job_state(_job({})) == "Running"
    assert job_state(_job({"succeeded": 1})) == "Succeeded"
    assert job_state(_job({"succeeded": 1}, completions=2)) == "Running"
    assert job_state(_job({"succeeded": 2, "conditions": [FAILED]}, completions=2)) == "Succeeded"
    assert job_state(_job({"conditions": [FAILED]})) == "Failed"
    assert job_state(_job({"conditions": [{**FAILED, "status": "False"}]})) == "Running"


def _pod(name: str, start: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"startTime": start, **status}}


def test_a_failed_job_names_the_first_broken_container_init_containers_first() -> None:
    waiting = {"name": "app", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no"}}}
    init = {"name": "setup", "state": {"terminated": {"exitCode": 3, "reason": "Error"}}}
    fine = {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    pods = [
        _pod("m-b", "2025-03-05T12:11:00Z", initContainerStatuses=[init], containerStatuses=[fine]),
        _pod("m-a", "2025-03-05T12:10:30Z", containerStatuses=[waiting]),
    ]
    body = job_status(_job({"conditions": [FAILED]}), pods, "acct")
    assert body["jobState"] == "Failed"
    assert body["createdTime"] == 1741176600000
    assert body["completionDetails"] == {
        "exitCode": "",
        "signal": "",
        "message": "too slow",
        "reason": "DeadlineExceeded",
    }
    assert [p["name"] for p in body["pods"]] == ["m-a", "m-b"]  # by start time
    assert body["mostRecentPodName"] == "m-b"
    # m-a (first by start time) has no non-zero exit but waits: that is the one named.
    assert body["failureDetails"] == (
        "Pod: 'm-a' had errors.\n Container: 'app' exited with code: .\n"
        " Status: ImagePullBackOff.\n Logs: no"
    )


def test_a_running_job_has_empty_completion_details_and_no_failure_keys() -> None:
    body = job_status(_job(None), [], "acct")
    assert body == {
        "name": "m",
        "account": "acct",
        "location": "ns",
        "provider": "kubernetes",
        "createdTime": 1741176600000,
        "jobState": "Running",
        "completionDetails": {"exitCode": "", "signal": "", "message": "", "reason": ""},
        "pods": [],
    }


def test_a_pending_pod_without_a_start_time_is_the_most_recent() -> None:
    def pod(name: str, status: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": name}, "status": status}

    pods = [
        pod("m-new", {"phase": "Pending"}),
        pod("m-old", {"phase": "Failed", "startTime": "2025-03-05T12:10:01Z"}),
    ]
    body = job_status(_job({"active": 1}), pods, "acct")
    assert body["mostRecentPodName"] == "m-new"
    assert [p["name"] for p in body["pods"]] == ["m-old", "m-new"]
