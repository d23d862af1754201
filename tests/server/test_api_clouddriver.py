"""Clouddriver-compatible reads: /credentials and /manifests (clouddriver-api.md 4 and 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from .test_api_support import ACCOUNT, Harness, k8s, open_api

ANNOTATIONS = {
    "moniker.spinnaker.io/application": "shop",
    "moniker.spinnaker.io/cluster": "deployment web",
}


def web_deployment(**status: Any) -> dict[str, Any]:
    return k8s(
        "apps/v1", "Deployment", "web", "prod",
        metadata={"generation": 2, "annotations": ANNOTATIONS,
                  "creationTimestamp": "2024-01-01T00:00:00Z"},
        spec={
            "replicas": 2,
            "template": {"spec": {
                "initContainers": [{"name": "init", "image": "busybox"}],
                "containers": [
                    {"name": "app", "image": "registry.example:5000/shop/web:1.4"},
                    {"name": "side", "image": "envoy@sha256:abc"},
                    {"name": "dup", "image": "busybox"},
                ],
            }},
        },
        status={"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                "availableReplicas": 2, "readyReplicas": 2, **status},
    )  # fmt: skip


def event(name: str, subject: dict[str, str], when: str, namespace: str = "prod") -> dict[str, Any]:
    return k8s(
        "v1", "Event", name, namespace,
        involvedObject=subject, lastTimestamp=when, reason=name, message=f"{name} happened",
    )  # fmt: skip


async def fill(api: Harness) -> None:
    await api.account(ACCOUNT, permissions={"READ": ["devs"], "WRITE": []})
    web = {"kind": "Deployment", "name": "web", "namespace": "prod"}
    await api.add(
        web_deployment(),
        event("second", web, "2024-01-01T00:02:00Z"),
        event("first", web, "2024-01-01T00:01:00Z"),
        event("other", {**web, "name": "api"}, "2024-01-01T00:00:30Z"),
        event("other-kind", {**web, "kind": "Service"}, "2024-01-01T00:00:30Z"),
        k8s("v1", "Namespace", "prod"),
        k8s("apiextensions.k8s.io/v1", "CustomResourceDefinition", "widgets.example.com"),
        k8s("example.com/v1", "Widget", "w1", "prod", spec={"size": 3}),
    )


async def test_credentials(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await fill(api)
            await api.account("open", properties={"environment": "staging"})
            r = await api.client.get("/credentials")
            assert r.status_code == 200
            by_name = {c["name"]: c for c in r.json()}
            assert by_name[ACCOUNT] == {
                "name": ACCOUNT,
                "type": "kubernetes",
                "cloudProvider": "kubernetes",
                "environment": ACCOUNT,
                "accountType": ACCOUNT,
                "requiredGroupMembership": [],
                "permissions": {"READ": ["devs"]},
                "challengeDestructiveActions": False,
                "primaryAccount": False,
                "unavailableKinds": [],  # ours: the kinds the agent cannot watch (none here)
            }
            assert by_name["open"]["environment"] == "staging"
            assert "permissions" not in by_name["open"]  # only when restricted
            r = await api.client.get("/credentials", params={"expand": "true"})
            expanded = {c["name"]: c for c in r.json()}[ACCOUNT]
            assert expanded["namespaces"] == ["prod"]
            assert expanded["spinnakerKindMap"]["deployment"] == "serverGroupManagers"
            assert expanded["spinnakerKindMap"]["replicaSet"] == "serverGroups"
            assert expanded["spinnakerKindMap"]["configMap"] == "configs"
            assert expanded["dockerRegistries"] == []
            assert expanded["enabled"] is True
            assert "cacheThreads" in expanded
            r = await api.client.get(f"/credentials/{ACCOUNT}")
            assert r.json() == expanded
            r = await api.client.get("/credentials/ghost")
            assert r.status_code == 404
            assert r.json()["message"] == "Account does not exist (name: ghost)"
            r = await api.client.get("/credentials", params={"expand": "maybe"})
            assert r.status_code == 400
            assert "expand" in r.json()["message"]


async def test_a_manifest_shows_the_events_of_both_event_groups_once(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await fill(api)
            web = {"kind": "Deployment", "name": "web", "namespace": "prod"}
            second = event("second", web, "2024-01-01T00:02:00Z")
            await api.add(
                # The agent may watch events.k8s.io too: the same Event (uid) under that group,
                # and one only there, naming its object in ``regarding``.
                {**second, "apiVersion": "events.k8s.io/v1"},
                k8s(
                    "events.k8s.io/v1", "Event", "third", "prod",
                    regarding=web, eventTime="2024-01-01T00:03:00Z",
                ),
            )  # fmt: skip
            r = await api.client.get(f"/manifests/{ACCOUNT}/prod/deployment%20web")
            assert r.status_code == 200
            names = [e["metadata"]["name"] for e in r.json()["events"]]
            assert names == ["first", "second", "third"]


@pytest.mark.parametrize("standalone", [False, True], ids=["server-state", "standalone"])
async def test_manifest_read_is_shaped_like_clouddriver(tmp_path: Path, standalone: bool) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path, standalone=standalone) as api:
            await fill(api)
            r = await api.client.get(f"/manifests/{ACCOUNT}/prod/deployment%20web")
            assert r.status_code == 200
            body = r.json()
            assert set(body) == {
                "account", "name", "location", "moniker", "manifest", "status", "artifacts",
                "events", "warnings", "metrics",
            }  # fmt: skip
            assert body["account"] == ACCOUNT
            assert body["name"] == "deployment web"
            assert body["location"] == "prod"
            assert body["moniker"] == {"app": "shop", "cluster": "deployment web"}
            assert body["manifest"] == web_deployment()
            assert body["status"] == {
                "stable": {"state": True},
                "paused": {"state": False},
                "available": {"state": True},
                "failed": {"state": False},
            }
            assert [a["reference"] for a in body["artifacts"]] == [
                "busybox",
                "registry.example:5000/shop/web:1.4",
                "envoy@sha256:abc",
            ]
            assert body["artifacts"][1] == {
                "type": "docker/image",
                "customKind": False,
                "name": "registry.example:5000/shop/web",
                "version": "1.4",
                "location": "prod",
                "reference": "registry.example:5000/shop/web:1.4",
                "metadata": {"account": ACCOUNT},
            }
            assert [e["metadata"]["name"] for e in body["events"]] == ["first", "second"]
            assert body["warnings"] == []
            assert body["metrics"] == []
            r = await api.client.get(
                f"/manifests/{ACCOUNT}/prod/deploy%20web", params={"includeEvents": "false"}
            )
            assert r.status_code == 200
            assert r.json()["events"] == []
            assert r.json()["name"] == "deployment web"


async def test_manifest_status_follows_the_rules(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await api.account()
            failing = web_deployment(
                readyReplicas=1,
                conditions=[{"type": "Progressing", "status": "False",
                             "reason": "ProgressDeadlineExceeded"}],
            )  # fmt: skip
            await api.add(failing)
            status = (await api.client.get(f"/manifests/{ACCOUNT}/prod/deployment%20web")).json()
            assert status["status"]["stable"] == {
                "state": False,
                "message": "Waiting for all replicas to be ready",
            }
            assert status["status"]["failed"] == {
                "state": True,
                "message": "Deployment exceeded its progress deadline",
            }


async def test_cluster_scoped_and_custom_kinds(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await fill(api)
            for path in (
                f"/manifests/{ACCOUNT}/_/namespace%20prod",
                f"/manifests/{ACCOUNT}/namespace%20prod",
            ):
                r = await api.client.get(path)
                assert r.status_code == 200, path
                assert r.json()["location"] == ""
                assert r.json()["name"] == "namespace prod"
                assert r.json()["moniker"] == {"app": "prod", "cluster": "prod"}
            r = await api.client.get(
                f"/manifests/{ACCOUNT}/customResourceDefinition%20widgets.example.com"
            )
            assert r.status_code == 200
            r = await api.client.get(f"/manifests/{ACCOUNT}/prod/Widget.example.com%20w1")
            assert r.status_code == 200
            assert r.json()["manifest"]["spec"] == {"size": 3}
            r = await api.client.get(f"/manifests/{ACCOUNT}/prod/widget%20w1")  # no group: scan
            assert r.status_code == 200
            assert r.json()["artifacts"] == []


async def test_manifest_errors(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await fill(api)
            r = await api.client.get("/manifests/ghost/prod/deployment%20web")
            assert r.status_code == 404
            assert r.json()["message"] == "Account does not exist (name: ghost)"
            r = await api.client.get(f"/manifests/{ACCOUNT}/prod/deployment%20nope")
            assert r.status_code == 404
            assert "deployment nope" in r.json()["message"]
            r = await api.client.get(f"/manifests/{ACCOUNT}/other/deployment%20web")
            assert r.status_code == 404
            r = await api.client.get(f"/manifests/{ACCOUNT}/prod/deployment")
            assert r.status_code == 404  # Clouddriver: an unparsable name is no manifest
            assert "<kind> <name>" in r.json()["message"]
            r = await api.client.get(
                f"/manifests/{ACCOUNT}/prod/deployment%20web", params={"includeEvents": "x"}
            )
            assert r.status_code == 400
            assert "includeEvents" in r.json()["message"]


def replica_set(
    version: int, created: str, replicas: int, cluster: str = "replicaSet front"
) -> dict[str, Any]:
    return k8s(
        "apps/v1", "ReplicaSet", f"front-v{version:03d}", "prod",
        metadata={"creationTimestamp": created, "annotations": {
            "moniker.spinnaker.io/application": "shop",
            "moniker.spinnaker.io/cluster": cluster,
            "moniker.spinnaker.io/sequence": str(version),
        }},
        spec={"replicas": replicas},
    )  # fmt: skip


async def test_cluster_lookups(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await api.account()
            await api.add(
                replica_set(1, "2024-01-02T00:00:00Z", 5),
                replica_set(0, "2024-01-01T00:00:00Z", 1),
                replica_set(2, "2024-01-03T00:00:00Z", 3),
                replica_set(9, "2024-01-04T00:00:00Z", 9, cluster="replicaSet other"),
                # no annotations: app "shop", cluster "shop-canary", from the name
                k8s("apps/v1", "ReplicaSet", "shop-canary-v003", "prod",
                    metadata={"creationTimestamp": "2023-12-31T00:00:00Z"}, spec={"replicas": 0}),
            )  # fmt: skip
            base = f"/manifests/{ACCOUNT}/prod/replicaSet/cluster/shop/replicaSet%20front"
            r = await api.client.get(base)
            assert r.status_code == 200
            assert [m["name"] for m in r.json()] == ["front-v000", "front-v001", "front-v002"]
            assert r.json()[0] == {"kind": "replicaSet", "namespace": "prod", "name": "front-v000"}
            expected = {
                "newest": "front-v002",
                "second_newest": "front-v001",
                "second-newest": "front-v001",
                "oldest": "front-v000",
                "largest": "front-v001",
                "smallest": "front-v000",
            }
            for criteria, name in expected.items():
                r = await api.client.get(f"{base}/dynamic/{criteria}")
                assert r.status_code == 200, criteria
                assert r.json() == {"kind": "replicaSet", "namespace": "prod", "name": name}
            for spelling in ("shop-canary", "replicaSet%20shop-canary"):
                path = f"/manifests/{ACCOUNT}/prod/rs/cluster/shop/{spelling}/dynamic/newest"
                r = await api.client.get(path)
                assert r.json()["name"] == "shop-canary-v003", spelling
            r = await api.client.get(f"{base}/dynamic/tallest")
            assert r.status_code == 400
            assert "tallest" in r.json()["message"]
            empty = f"/manifests/{ACCOUNT}/prod/replicaSet/cluster/shop/replicaSet%20none"
            assert (await api.client.get(empty)).json() == []
            r = await api.client.get(f"{empty}/dynamic/newest")
            assert r.status_code == 404
            assert "0 found" in r.json()["message"]
            r = await api.client.get(
                "/manifests/ghost/prod/replicaSet/cluster/shop/x/dynamic/newest"
            )
            assert r.status_code == 404
