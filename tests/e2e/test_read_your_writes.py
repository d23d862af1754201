"""Read-your-writes end to end (kubesim over TLS, REST as Orca calls it): with the agent's
watches held back (kubesim stalls every watch for a few seconds, so each operation's result
reaches the server before the watch events of its writes, which then arrive late and in a
burst, the oldest first), every GET /manifests after a deploy succeeded shows at least the
resourceVersion that deploy wrote, before, during and after the late events.

Without the watermarks this fails two ways (seen while writing it): the new agent's first
listing, taken before the deploy and closed after it, sweeps the just-deployed object out of
the cache (the read answers 404), and the late ADDED event puts the first version back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import trio

from .harness import Stack, open_stack, wait_until
from .ops_client import OrcaClient

STALL = 1.5  # seconds every watch of the new agent is held back
PATH = f"/manifests/k1/default/{quote('deployment web')}"


def deployment(image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": image}]},
            },
        },
    }


def written_version(task: dict[str, Any]) -> int:
    assert task["status"]["failed"] is False, task["resultObjects"]
    return int(task["resultObjects"][0]["manifests"][0]["metadata"]["resourceVersion"])


async def read(http: httpx.AsyncClient) -> tuple[int, str, httpx.Response]:
    answer = await http.get(PATH, params={"includeEvents": "false"})
    assert answer.status_code == 200, answer.text
    manifest = answer.json()["manifest"]
    image = manifest["spec"]["template"]["spec"]["containers"][0]["image"]
    return int(manifest["metadata"]["resourceVersion"]), image, answer


@asynccontextmanager
async def stalled_stack(tmp_path: Path) -> AsyncIterator[tuple[Stack, httpx.AsyncClient]]:
    """A stack whose serving agent is a new one with its watches held back by kubesim."""
    async with open_stack(tmp_path, kube_tls=True) as stack:
        base = f"http://127.0.0.1:{stack.server.api_port}"
        sessions = stack.server.state.sessions
        await wait_until(
            lambda: sessions.primary_session("k1") is not None, what="k1 has a PRIMARY"
        )
        # A new agent whose watches kubesim holds back (the LISTs are not held).
        assert stack.agent_task is not None
        await stack.agent_task.stop()
        await wait_until(lambda: sessions.primary_session("k1") is None, what="k1 released")
        # A loaded test machine may need more than the 3 s default for the held events.
        stack.server.state.feed.freshness.wait_seconds = 15.0
        stack.kube.faults.stall_watches(after_events=0, seconds=STALL, count=1000)
        await stack.start_agent("agent-b")
        await wait_until(
            lambda: sessions.primary_session("k1") is not None, what="agent-b serves k1"
        )
        async with httpx.AsyncClient(base_url=base) as http:
            yield stack, http


async def test_reads_after_a_write_never_go_back(tmp_path: Path) -> None:
    with trio.fail_after(90):
        async with stalled_stack(tmp_path) as (stack, http):
            orca = OrcaClient(http)
            context = {"account": "k1", "source": "text", "moniker": {"app": "shop"}}
            first = await orca.run(
                "deployManifest", {**context, "manifests": [deployment("nginx:1")]}
            )
            v1 = written_version(first)
            version, image, _ = await read(http)  # waits for the watch (a few seconds)
            assert version >= v1
            assert image == "nginx:1"

            second = await orca.run(
                "deployManifest",
                {**context, "manifests": [deployment("nginx:2")], "reason": "second"},
            )
            v2 = written_version(second)
            assert v2 > v1
            # The watch still holds ADDED(v1) and the controller's updates; they arrive
            # after this. No read may go back to them.
            caught_up = stack.sim.get("apps", "v1", "deployments", "default", "web")
            final = int(caught_up["metadata"]["resourceVersion"])
            with trio.move_on_after(STALL + 10):
                while True:
                    version, image, answer = await read(http)
                    assert version >= v2, (version, v2)
                    assert image == "nginx:2"
                    assert "x-kubesvc-stale" not in answer.headers
                    stored = await stack.store.get_object(
                        "k1", "apps", "Deployment", "default", "web"
                    )
                    if stored is not None and int(stored.resource_version) >= final:
                        break  # the watch delivered everything up to the last write
                    await trio.sleep(0.02)
            stored = await stack.store.get_object("k1", "apps", "Deployment", "default", "web")
            assert stored is not None
            assert int(stored.resource_version) >= final


def replica_set(version: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": "front", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "front"}},
            "template": {
                "metadata": {"labels": {"app": "front", "v": version}},
                "spec": {"containers": [{"name": "front", "image": image}]},
            },
        },
    }


async def test_cluster_listings_after_a_deploy_show_it(tmp_path: Path) -> None:
    """Orca's appended strategy stages and ResolveTargetManifestTask read the cluster and its
    dynamic targets right after a deploy task completed: they show the version it made."""
    cluster = f"/manifests/k1/default/replicaSet/cluster/shop/{quote('replicaSet front')}"
    with trio.fail_after(90):
        async with stalled_stack(tmp_path) as (_, http):
            orca = OrcaClient(http)
            context = {"account": "k1", "source": "text", "moniker": {"app": "shop"}}
            for n, image in enumerate(("nginx:1", "nginx:2")):
                task = await orca.run(
                    "deployManifest",
                    {**context, "manifests": [replica_set(str(n), image)], "reason": image},
                )
                assert task["status"]["failed"] is False, task["resultObjects"]
                made = task["resultObjects"][0]["manifests"][0]["metadata"]["name"]
                assert made == f"front-v00{n}"
                newest = await http.get(f"{cluster}/dynamic/newest")
                assert newest.status_code == 200, newest.text
                assert newest.json()["name"] == made
                assert "x-kubesvc-stale" not in newest.headers
                listing = await http.get(cluster)
                assert listing.status_code == 200, listing.text
                assert [m["name"] for m in listing.json()] == [
                    f"front-v00{i}" for i in range(n + 1)
                ]
                assert "x-kubesvc-stale" not in listing.headers


def migrate_job(outcome: str) -> dict[str, Any]:
    template: dict[str, Any] = {
        "metadata": {"annotations": {"kubesim.io/outcome": outcome}} if outcome else {},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "m:1"}]},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "migrate"},
        "spec": {"backoffLimit": 0, "template": template},
    }


async def test_a_job_run_again_is_never_answered_as_the_run_before(tmp_path: Path) -> None:
    """Run Job twice under one name (runJob recreates it) while the watches are held back:
    the watch delivers the first Job's events (ADDED, Succeeded, DELETED) after the second
    run's task completed. Orca's WaitOnJobCompletion polls the job route at once: it must
    see the second Job (Running), never the first one's Succeeded, nor a 404."""
    job_path = f"/applications/shop/jobs/k1/default/{quote('job migrate')}"
    with trio.fail_after(90):
        async with stalled_stack(tmp_path) as (stack, http):
            orca = OrcaClient(http)
            for run, outcome in ((1, ""), (2, "running")):
                task = await orca.run(
                    "runJob",
                    {"account": "k1", "credentials": "k1", "application": "shop",
                     "namespace": "default", "cloudProvider": "kubernetes",
                     "manifest": migrate_job(outcome), "executionId": f"run-{run}"},
                )  # fmt: skip
                assert task["status"]["failed"] is False, task["resultObjects"]
            live = stack.sim.get("batch", "v1", "jobs", "default", "migrate")["metadata"]
            with trio.move_on_after(STALL + 10):
                while True:
                    answer = await http.get(job_path)
                    assert answer.status_code == 200, answer.text
                    assert answer.json()["jobState"] == "Running", answer.json()
                    assert "x-kubesvc-stale" not in answer.headers
                    found = await stack.store.get_object("k1", "batch", "Job", "default", "migrate")
                    if found is not None and found.resource_version == live["resourceVersion"]:
                        break  # the watch delivered everything up to the second run
                    await trio.sleep(0.02)
            found = await stack.store.get_object("k1", "batch", "Job", "default", "migrate")
            assert found is not None
            assert found.uid == live["uid"]
