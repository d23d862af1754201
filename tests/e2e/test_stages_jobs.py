"""Run Job as Orca runs it, and the manifest status blocks stages wait on, end to end:
REST -> server -> agent -> kubesim (TLS) -> the agent's watches -> the server's cache -> REST.

Orca's WaitOnJobCompletion takes ``deployedNamesByLocation`` from the runJob task and polls
``GET /applications/{app}/jobs/{account}/{ns}/job <name>`` until ``jobState`` is Succeeded or
Failed; its deploy stages poll ``/manifests`` for ``status.stable`` / ``status.failed``. kubesim
plays the failures through the pod template annotation ``kubesim.io/outcome``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio

from ..agent.operations_harness import job as harness_job
from ..agent.operations_harness import workload
from .harness import open_orca
from .ops_client import OrcaClient

TERMINAL = ("Succeeded", "Failed")


def job(name: str, outcome: str = "") -> dict[str, Any]:
    return harness_job(name, container="migrate", image="m:1", outcome=outcome, backoffLimit=1)


def deployment(name: str, outcome: str = "") -> dict[str, Any]:
    return workload(
        "Deployment", name, replicas=2, container="web", namespace="default", outcome=outcome
    )


async def run_job_like_orca(
    orca: OrcaClient, manifest: dict[str, Any], *, run: int = 1
) -> dict[str, Any]:
    """The Run Job stage: runJob, monitor the task, then poll the job until it is terminal.

    A rerun of a Job of the same name is polled at once too (Orca's first poll comes 10 s
    later): the job route reads with read-your-writes, so the old Job's late watch events
    never answer for the new one."""
    task = await orca.run(
        "runJob",
        {"account": "k1", "credentials": "k1", "manifest": manifest, "application": "shop",
         "namespace": "default", "cloudProvider": "kubernetes",
         "executionId": f"run-{run}"},  # Orca's clientRequestId differs per execution
    )  # fmt: skip
    assert task["status"]["failed"] is False, task["resultObjects"]
    located = task["resultObjects"][0]["deployedNamesByLocation"]
    ((namespace, (name,)),) = located.items()
    path = f"/applications/shop/jobs/k1/{namespace}/{quote(name)}"
    while True:
        answer = await orca.http.get(path)
        if answer.status_code == 200:
            body: dict[str, Any] = answer.json()
            assert body["jobState"] in ("Running", *TERMINAL), body
            if body["jobState"] in TERMINAL:
                return body
        else:
            assert answer.status_code == 404, answer.text  # not in the cache yet
        await trio.sleep(orca.poll)


async def test_run_job_that_succeeds_and_one_that_fails_polled_like_orca(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path, kube_tls=True) as (stack, orca):
            good = await run_job_like_orca(orca, job("migrate"))
            bad = await run_job_like_orca(orca, job("migrate-bad", "fail"))
            again = await run_job_like_orca(orca, job("migrate"), run=2)  # recreated
            posted = await orca.http.post("/applications/shop/jobs/k1/default/job%20migrate")
            missing = await orca.http.get("/applications/shop/jobs/k1/default/job%20nope")
            live = stack.sim.get("batch", "v1", "jobs", "default", "migrate")
    assert good["name"] == "migrate"
    assert good["jobState"] == "Succeeded"
    assert (good["account"], good["location"], good["provider"]) == ("k1", "default", "kubernetes")
    assert good["completionDetails"] == {"exitCode": "", "signal": "", "message": "", "reason": ""}
    assert isinstance(good["createdTime"], int)
    assert [p["status"]["phase"] for p in good["pods"]] == ["Succeeded"]
    assert good["mostRecentPodName"] == good["pods"][0]["name"]
    assert "failureDetails" not in good
    assert bad["jobState"] == "Failed"
    assert bad["completionDetails"] == {
        "exitCode": "",
        "signal": "",
        "message": "Job has reached the specified backoff limit",
        "reason": "BackoffLimitExceeded",
    }
    assert bad["reason"] == "BackoffLimitExceeded"
    assert [p["status"]["phase"] for p in bad["pods"]] == ["Failed", "Failed"]  # backoffLimit 1
    first = bad["pods"][0]["name"]
    assert bad["failureDetails"] == (
        f"Pod: '{first}' had errors.\n Container: 'migrate' exited with code: 1.\n"
        " Status: Error.\n Logs: null"
    )
    # Orca's message for a failed Job, built from these fields:
    message = (
        f"Job: '{bad['name']}' failed. Reason: {bad['reason']}. Details: {bad['message']}. "
        f"Additional Details: {bad['failureDetails']}"
    )
    assert "BackoffLimitExceeded" in message
    assert again["jobState"] == "Succeeded"
    assert again["pods"][0]["name"] != good["pods"][0]["name"]  # a new run, a new pod
    assert posted.status_code == 200  # Gate's POST spelling
    assert posted.json()["name"] == "migrate"
    assert live["metadata"]["name"] == "migrate"
    assert missing.status_code == 404
    assert "Job not found (account: k1, location: default, id: job nope)" in missing.text


async def _status(orca: OrcaClient, name: str, want: Any) -> dict[str, Any]:
    """Poll /manifests (as Orca's WaitForManifestStableTask does) until ``want(body)``."""
    path = f"/manifests/k1/default/{quote('deployment ' + name)}"
    while True:
        answer = await orca.http.get(path)
        if answer.status_code == 200:
            body: dict[str, Any] = answer.json()
            if want(body):
                return body
        await trio.sleep(orca.poll)


async def test_manifest_status_blocks_for_unavailable_failed_and_paused_rollouts(
    tmp_path: Path,
) -> None:
    with trio.fail_after(60):
        async with open_orca(tmp_path, kube_tls=True) as (_stack, orca):
            for name, outcome in (("web", ""), ("hung", "unready"), ("late", "deadline-exceeded")):
                task = await orca.run(
                    "deployManifest",
                    {"account": "k1", "manifests": [deployment(name, outcome)],
                     "moniker": {"app": "shop"}},
                )  # fmt: skip
                assert task["status"]["failed"] is False, task["resultObjects"]
            web = await _status(orca, "web", lambda b: b["status"]["stable"]["state"])
            hung = await _status(
                orca, "hung", lambda b: not b["status"]["available"]["state"] and b["events"]
            )
            late = await _status(orca, "late", lambda b: b["status"]["failed"]["state"])
            paused_task = await orca.run(
                "pauseRolloutManifest",
                {"account": "k1", "manifestName": "deployment web", "location": "default"},
            )
            assert paused_task["status"]["failed"] is False, paused_task["resultObjects"]
            paused = await _status(orca, "web", lambda b: b["status"]["paused"]["state"])
    assert web["status"] == {
        "stable": {"state": True},
        "paused": {"state": False},
        "available": {"state": True},
        "failed": {"state": False},
    }
    assert any(e["reason"] == "ScalingReplicaSet" for e in web["events"])
    assert all(e["involvedObject"]["name"] == "web" for e in web["events"])
    assert hung["status"]["stable"]["state"] is False
    assert hung["status"]["available"] == {
        "state": False,
        "message": "Deployment does not have minimum availability.",
    }
    assert hung["status"]["failed"]["state"] is False
    assert late["status"]["failed"] == {
        "state": True,
        "message": "Deployment exceeded its progress deadline",
    }
    assert late["status"]["stable"]["state"] is False
    assert paused["status"]["paused"] == {"state": True, "message": "Deployment is paused"}
