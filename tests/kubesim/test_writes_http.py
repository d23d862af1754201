"""Writes over HTTP: create, replace with resourceVersion conflicts, the status and scale
subresources, deletion with propagation and grace periods; plus the bulk loader and churn."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest
import trio

import kubesim

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"


def _deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": f"{name}:1"}]},
            },
        },
    }


async def test_create_get_replace_conflict(http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        cm = {"metadata": {"name": "c"}, "data": {"a": "1"}}
        created = await http.post("/api/v1/namespaces/default/configmaps", json=cm)
        assert created.status_code == 201
        body = created.json()
        assert list(body)[:2] == ["kind", "apiVersion"]
        again = await http.post("/api/v1/namespaces/default/configmaps", json=cm)
        assert again.status_code == 409
        assert again.json()["reason"] == "AlreadyExists"
        body["data"]["a"] = "2"
        replaced = await http.put("/api/v1/namespaces/default/configmaps/c", json=body)
        assert replaced.status_code == 200
        stale = await http.put("/api/v1/namespaces/default/configmaps/c", json=body)
        assert stale.status_code == 409
        assert stale.json()["reason"] == "Conflict"
        missing = await http.get("/api/v1/namespaces/default/configmaps/nope")
        assert missing.status_code == 404
        assert missing.json()["message"] == 'configmaps "nope" not found'
        no_ns = await http.post("/api/v1/namespaces/ghost/configmaps", json=cm)
        assert no_ns.status_code == 404


async def test_status_subresource_and_generation(http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        await http.post(DEPLOYMENTS, json=_deployment("web"))
        current = (await http.get(f"{DEPLOYMENTS}/web")).json()
        assert current["status"]["observedGeneration"] == 1
        current["status"]["replicas"] = 99
        current["spec"]["replicas"] = 5  # ignored by the status endpoint
        updated = (await http.put(f"{DEPLOYMENTS}/web/status", json=current)).json()
        assert updated["status"]["replicas"] == 99
        assert updated["spec"]["replicas"] == 1
        assert updated["metadata"]["generation"] == 1
        entries = updated["metadata"]["managedFields"]
        assert any(e.get("subresource") == "status" for e in entries)
        main = (await http.get(f"{DEPLOYMENTS}/web")).json()
        main["spec"]["replicas"] = 2
        main["status"] = {}  # ignored by the main endpoint
        replaced = (await http.put(f"{DEPLOYMENTS}/web", json=main)).json()
        assert replaced["metadata"]["generation"] == 2
        scale = (await http.get(f"{DEPLOYMENTS}/web/scale")).json()
        assert scale["kind"] == "Scale"
        assert scale["spec"]["replicas"] == 2
        assert scale["status"]["selector"] == "app=web"


async def test_delete_orphan_and_background(sim: kubesim.Cluster, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        await http.post(DEPLOYMENTS, json=_deployment("keep", replicas=2))
        await http.post(DEPLOYMENTS, json=_deployment("drop", replicas=2))
        orphaned = await http.delete(f"{DEPLOYMENTS}/keep", params={"propagationPolicy": "Orphan"})
        assert orphaned.status_code == 200
        sets = sim.list("apps", "v1", "replicasets", "default")
        kept = [rs for rs in sets if rs["metadata"]["name"].startswith("keep-")]
        assert len(kept) == 1
        assert "ownerReferences" not in kept[0]["metadata"]
        await http.request(
            "DELETE", f"{DEPLOYMENTS}/drop", json={"propagationPolicy": "Background"}
        )
        names = [p["metadata"]["name"] for p in sim.list("", "v1", "pods", "default")]
        assert len(names) == 2
        assert all(n.startswith("keep-") for n in names)
        bad = await http.delete(f"{DEPLOYMENTS}/keep-x", params={"propagationPolicy": "Sideways"})
        assert bad.status_code == 400


async def test_pod_deletion_is_marked_then_removed(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "image": "a"}]}}
        created = (await http.post("/api/v1/namespaces/default/pods", json=pod)).json()
        rv = created["metadata"]["resourceVersion"]
        running = sim.get("", "v1", "pods", "default", "p")
        assert running["status"]["phase"] == "Running"  # the kubelet-lite started it
        await http.delete("/api/v1/namespaces/default/pods/p", params={"gracePeriodSeconds": "5"})
        async with http.stream(
            "GET",
            "/api/v1/namespaces/default/pods",
            params={"watch": "1", "resourceVersion": rv, "timeoutSeconds": "1"},
        ) as resp:
            events = [msgspec.json.decode(line) async for line in resp.aiter_lines() if line]
        assert [e["type"] for e in events] == ["MODIFIED", "MODIFIED", "DELETED"]
        assert events[1]["object"]["metadata"]["deletionGracePeriodSeconds"] == 5


async def test_label_selector_watch_sees_objects_enter_and_leave(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "c", "namespace": "default"},
            }
        )
        rv = str(sim.resource_version)
        for value in ("yes", "no"):
            sim.patch(
                "", "v1", "configmaps", "default", "c", {"metadata": {"labels": {"pick": value}}}
            )
        params = {
            "watch": "1",
            "resourceVersion": rv,
            "labelSelector": "pick=yes",
            "timeoutSeconds": "1",
        }
        async with http.stream("GET", "/api/v1/configmaps", params=params) as resp:
            events = [msgspec.json.decode(line) async for line in resp.aiter_lines() if line]
        assert [e["type"] for e in events] == ["ADDED", "DELETED"]


def test_bulk_loader_makes_realistic_pods() -> None:
    sim = kubesim.Cluster()
    names = kubesim.load_pods(sim, 200, namespaces=3)
    assert len(names) == 200
    pods = sim.list("", "v1", "pods")
    assert len(pods) == 200
    sizes = [len(msgspec.json.encode(p)) for p in pods]
    assert 3500 < sum(sizes) / len(sizes) < 5500
    pod = pods[0]
    assert pod["status"]["phase"] == "Running"
    assert pod["metadata"]["managedFields"]
    assert {p["metadata"]["namespace"] for p in pods} == {"load-0", "load-1", "load-2"}


async def test_churn_creates_updates_and_deletes(autojump_clock: trio.abc.Clock) -> None:
    sim = kubesim.Cluster()
    kinds = ("configmaps", "secrets", "services", "pods", "deployments")
    churn = kubesim.Churn(sim, rate=200, kinds=kinds, population=10, seed=1)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(churn.run)
            await trio.sleep(2)
            nursery.cancel_scope.cancel()
    stats = churn.statistics()
    assert stats.created > 0
    assert stats.updated > 0
    assert stats.deleted > 0
    assert stats.failed == 0
    assert stats.created + stats.updated + stats.deleted >= 390
    assert {o["kind"] for o in sim.list("", "v1", "services", "churn")} == {"Service"}
    with pytest.raises(ValueError, match="churn kinds"):
        kubesim.Churn(sim, rate=1, kinds=("gadgets",))


async def test_pod_logs(http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        containers = [{"name": "app", "image": "a"}, {"name": "side", "image": "b"}]
        pod = {"metadata": {"name": "p"}, "spec": {"containers": containers}}
        await http.post("/api/v1/namespaces/default/pods", json=pod)
        path = "/api/v1/namespaces/default/pods/p/log"
        ambiguous = await http.get(path)
        assert ambiguous.status_code == 400
        assert "choose one of: [app side]" in ambiguous.json()["message"]
        assert (await http.get(path, params={"container": "nope"})).status_code == 400
        logs = await http.get(path, params={"container": "side", "tailLines": "2"})
        assert logs.headers["content-type"] == "text/plain"
        assert logs.text == "p side line 18\np side line 19\n"
        stamped = await http.get(
            path, params={"container": "app", "timestamps": "true", "limitBytes": "40"}
        )
        assert len(stamped.content) == 40
        assert stamped.text.startswith("20")
        discovery = (await http.get("/api/v1")).json()["resources"]
        assert next(r for r in discovery if r["name"] == "pods/log")["verbs"] == ["get"]


async def test_deletecollection_honours_the_label_selector(
    sim: kubesim.Cluster, http: httpx.AsyncClient
) -> None:
    with trio.fail_after(10):
        for name, tier in (("a", "web"), ("b", "web"), ("c", "db")):
            cm = {"metadata": {"name": name, "labels": {"tier": tier}}}
            await http.post("/api/v1/namespaces/default/configmaps", json=cm)
        answer = await http.delete(
            "/api/v1/namespaces/default/configmaps", params={"labelSelector": "tier=web"}
        )
        assert answer.status_code == 200
        assert [o["metadata"]["name"] for o in answer.json()["items"]] == ["a", "b"]
        left = sim.list("", "v1", "configmaps", "default")
        assert [o["metadata"]["name"] for o in left] == ["c"]
