"""Deck's views over the REST API, in process, on a store filled as the ingest path fills it:
every endpoint of clouddriver-views.md section 2 with the small application the issue
describes (the end-to-end test drives the same through kubesim and the agent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import trio

from wire import EventType

from .test_api_support import ACCOUNT, Harness, k8s, open_api, record

STAMP = "2025-03-05T12:10:00Z"
STAMP_MS = 1741176600000


def notes(cluster: str, **extra: str) -> dict[str, str]:
    return {"moniker.spinnaker.io/application": "h4", "moniker.spinnaker.io/cluster": cluster,
            **extra}  # fmt: skip


def meta(annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
         owner: tuple[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    m: dict[str, Any] = {"creationTimestamp": STAMP}
    if annotations:
        m["annotations"] = annotations
    if labels:
        m["labels"] = labels
    if owner:
        m["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                 "uid": f"uid-{owner[1]}", "controller": True}]  # fmt: skip
    return m


def rs(name: str, labels: dict[str, str], replicas: int, annotations: dict[str, str],
       owner: str | None = None) -> dict[str, Any]:  # fmt: skip
    return k8s(
        "apps/v1", "ReplicaSet", name, "h4",
        metadata=meta(annotations, labels, ("Deployment", owner) if owner else None),
        spec={"replicas": replicas, "selector": {"matchLabels": labels},
              "template": {"metadata": {"labels": labels},
                           "spec": {"containers": [{"name": "app", "image": f"h4/{name}:1"}]}}},
    )  # fmt: skip


def pod(name: str, owner: tuple[str, str], phase: str, *ready: bool) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if ready:
        status["containerStatuses"] = [{"name": f"c{i}", "ready": r} for i, r in enumerate(ready)]
    return k8s("v1", "Pod", name, "h4", metadata=meta(owner=owner), status=status)


def application() -> list[dict[str, Any]]:
    web = notes("deployment h4-web")
    traffic = '["service h4-api"]'
    return [
        k8s("apps/v1", "Deployment", "h4-web", "h4", metadata=meta(web),
            spec={"replicas": 2, "template": {"metadata": {"labels": {"app": "h4-web"}}}}),
        rs("h4-web-aaa", {"app": "h4-web", "pod-template-hash": "aaa"}, 0,
           {**web, "deployment.kubernetes.io/revision": "1"}, "h4-web"),
        rs("h4-web-bbb", {"app": "h4-web", "pod-template-hash": "bbb"}, 2,
           {**web, "deployment.kubernetes.io/revision": "2"}, "h4-web"),
        pod("h4-web-bbb-1", ("ReplicaSet", "h4-web-bbb"), "Running", True),
        pod("h4-web-bbb-2", ("ReplicaSet", "h4-web-bbb"), "Running", False),
        pod("h4-web-bbb-3", ("ReplicaSet", "h4-web-bbb"), "Pending"),
        rs("h4-api-v000", {"version": "v000"}, 1,
           notes("replicaSet h4-api", **{"moniker.spinnaker.io/sequence": "0",
                                         "traffic.spinnaker.io/load-balancers": traffic})),
        rs("h4-api-v001", {"app": "h4-api", "version": "v001"}, 1,
           notes("replicaSet h4-api", **{"moniker.spinnaker.io/sequence": "1",
                                         "traffic.spinnaker.io/load-balancers": traffic})),
        pod("h4-api-v000-x", ("ReplicaSet", "h4-api-v000"), "Running", True),
        pod("h4-api-v001-y", ("ReplicaSet", "h4-api-v001"), "Running", True, True),
        k8s("v1", "Service", "h4-api", "h4", metadata=meta(notes("service h4-api")),
            spec={"selector": {"app": "h4-api"}}),
        k8s("v1", "Service", "h4-web", "h4", metadata=meta(notes("service h4-web")),
            spec={"selector": {"app": "h4-web"}}),
        k8s("networking.k8s.io/v1", "Ingress", "h4-in", "h4",
            metadata=meta(notes("ingress h4-in")),
            spec={"defaultBackend": {"service": {"name": "h4-web"}}}),
        k8s("networking.k8s.io/v1", "NetworkPolicy", "h4-db-access", "h4", metadata=meta(),
            spec={"ingress": [{"ports": [{"protocol": "TCP", "port": 5432}]}]}),
        k8s("batch/v1", "Job", "h4-migrate", "h4", metadata=meta(notes("job h4-migrate")),
            spec={"template": {"spec": {"containers": [{"name": "m", "image": "h4/m:1"}]}}},
            status={"succeeded": 1}),
        k8s("v1", "Service", "zz-lonely", "zz", metadata=meta()),  # app zz: no cluster
        k8s("v1", "ConfigMap", "h4-config", "h4", metadata=meta()),
    ]  # fmt: skip


async def filled(api: Harness) -> Harness:
    await api.account(ACCOUNT)
    await api.add(*application())
    return api


async def get(api: Harness, path: str, status: int = 200, **params: Any) -> Any:
    r = await api.client.get(path, params=params)
    assert r.status_code == status, (path, r.status_code, r.text)
    return r.json()


async def test_applications_and_clusters(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path) as api:
            await filled(api)
            apps = await get(api, "/applications", expand="true", restricted="false")
            one = await get(api, "/applications/h4")
            missing = await get(api, "/applications/zz", 404)
            clusters = await get(api, "/applications/h4/clusters")
            none = await get(api, "/applications/zz/clusters")
            of_account = await get(api, f"/applications/h4/clusters/{ACCOUNT}")
            no_account = await get(api, "/applications/h4/clusters/other", 404)
            cluster = await get(api, f"/applications/h4/clusters/{ACCOUNT}/replicaSet h4-api")
            orca = await get(
                api, f"/applications/h4/clusters/{ACCOUNT}/replicaSet h4-api/kubernetes"
            )
            minimal = await get(api, f"/applications/h4/clusters/{ACCOUNT}/replicaSet h4-api/"
                                     "kubernetes", expand="false")  # fmt: skip
            sg_404 = await get(
                api,
                f"/applications/h4/clusters/{ACCOUNT}/replicaSet h4-api/"
                "kubernetes/serverGroups/replicaSet h4-api-v001",
                404,
            )
            target_404 = await get(api, f"/applications/h4/clusters/{ACCOUNT}/replicaSet h4-api/"
                                        "kubernetes/h4/serverGroups/target/current_asg_dynamic",
                                   404)  # fmt: skip
            unknown = await get(api, f"/applications/h4/clusters/{ACCOUNT}/nope", 404)
    cluster_names = {ACCOUNT: ["deployment h4-web", "job h4-migrate",
                               "replicaSet h4-api"]}  # fmt: skip
    assert apps == [{"name": "h4", "attributes": {"name": "h4"}, "clusterNames": cluster_names}]
    assert one == {
        "name": "h4",
        "attributes": {"name": "h4", "cloudProviders": "kubernetes"},
        "clusters": {ACCOUNT: [
            {"name": n, "loadBalancers": [], "serverGroups": [], "provider": "kubernetes"}
            for n in cluster_names[ACCOUNT]
        ]},
    }  # fmt: skip
    assert missing["message"] == "Application does not exist (name: zz)"
    assert missing["status"] == 404
    assert clusters == cluster_names
    assert none == {}
    assert {c["name"]: (c["serverGroups"], c["loadBalancers"]) for c in of_account} == {
        "deployment h4-web": (["replicaSet h4-web-aaa", "replicaSet h4-web-bbb"],
                              ["service h4-web"]),
        "job h4-migrate": (["job h4-migrate"], []),
        "replicaSet h4-api": (["replicaSet h4-api-v000", "replicaSet h4-api-v001"],
                              ["service h4-api"]),
    }  # fmt: skip
    assert of_account[0]["moniker"] == {"app": "h4", "cluster": "deployment h4-web"}
    assert of_account[0]["account"] == ACCOUNT
    assert "No clusters found" in no_account["message"]
    assert cluster == [orca]
    assert (orca["name"], orca["type"], orca["accountName"], orca["application"]) == (
        "replicaSet h4-api", "kubernetes", ACCOUNT, "h4",
    )  # fmt: skip
    assert orca["moniker"] == {"app": "h4", "cluster": "replicaSet h4-api"}
    assert [g["name"] for g in orca["serverGroups"]] == [
        "replicaSet h4-api-v000", "replicaSet h4-api-v001",
    ]  # fmt: skip
    (lb,) = orca["loadBalancers"]
    assert lb["name"] == "service h4-api"
    assert [g["name"] for g in lb["serverGroups"]] == ["replicaSet h4-api-v001"]
    assert (minimal["serverGroups"], minimal["loadBalancers"]) == ([], [])
    assert sg_404["message"].startswith("Server group not found")
    assert target_404["message"] == (
        f"No server groups found (account: {ACCOUNT}, location: h4, cluster: replicaSet h4-api,"
        " type: KUBERNETES)"
    )
    assert unknown["message"].startswith("Cluster not found")


async def test_server_groups(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path) as api:
            await filled(api)
            summaries = await get(api, "/applications/h4/serverGroups")
            expanded = await get(api, "/applications/h4/serverGroups", expand="true")
            subset = await get(api, "/applications/h4/serverGroups",
                               clusters=f"{ACCOUNT}:replicaSet h4-api")  # fmt: skip
            other = await get(api, "/applications/h4/serverGroups", cloudProvider="aws")
            full = await get(api, f"/serverGroups/{ACCOUNT}/h4/{quote('replicaSet h4-web-bbb')}")
            same = await get(api, f"/applications/h4/serverGroups/{ACCOUNT}/h4/"
                                  "replicaSet h4-web-bbb", includeDetails="false")  # fmt: skip
            missing = await get(api, f"/serverGroups/{ACCOUNT}/h4/replicaSet nope", 404)
            by_ids = await get(
                api, "/serverGroups", ids=f"{ACCOUNT}:h4:replicaSet h4-api-v000,{ACCOUNT}:h4:job x"
            )
            by_apps = await get(api, "/serverGroups", applications="h4")
            bad = await get(api, "/serverGroups", 400, ids="nope")
            neither = await get(api, "/serverGroups", 400)
    by_name = {s["name"]: s for s in summaries}
    assert sorted(by_name) == [
        "job h4-migrate", "replicaSet h4-api-v000", "replicaSet h4-api-v001",
        "replicaSet h4-web-aaa", "replicaSet h4-web-bbb",
    ]  # fmt: skip
    v000, v001, bbb = (by_name[f"replicaSet {n}"] for n in ("h4-api-v000", "h4-api-v001",
                                                            "h4-web-bbb"))  # fmt: skip
    assert (v000["isDisabled"], v001["isDisabled"], bbb["isDisabled"]) == (True, False, False)
    assert v000["loadBalancers"] == v001["loadBalancers"] == ["service h4-api"]
    assert bbb["loadBalancers"] == ["service h4-web"]
    assert v000["moniker"] == {"app": "h4", "cluster": "replicaSet h4-api", "sequence": 0}
    assert bbb["moniker"] == {"app": "h4", "cluster": "deployment h4-web", "sequence": 2}
    assert bbb["serverGroupManagers"] == [{"account": ACCOUNT, "location": "h4", "name": "h4-web"}]
    assert bbb["instanceCounts"] == {"total": 3, "up": 1, "down": 2, "unknown": 0,
                                     "outOfService": 0, "starting": 0}  # fmt: skip
    assert [i["healthState"] for i in bbb["instances"]] == ["Up", "Down", "Down"]
    assert bbb["instances"][0] == {
        "id": "uid-Pod-h4-web-bbb-1", "name": "pod h4-web-bbb-1",
        "health": [{"type": "kubernetes/pod", "state": "Up"},
                   {"type": "kubernetes/container", "state": "Up"}],
        "healthState": "Up", "availabilityZone": "h4",
    }  # fmt: skip
    assert (bbb["region"], bbb["account"], bbb["cluster"]) == ("h4", ACCOUNT, "deployment h4-web")
    assert (bbb["type"], bbb["cloudProvider"], bbb["createdTime"]) == (
        "kubernetes", "kubernetes", STAMP_MS,
    )  # fmt: skip
    assert bbb["capacity"] == {"desired": 2, "pinned": False}
    assert bbb["buildInfo"] == {"images": ["h4/h4-web-bbb:1"]}
    assert bbb["labels"] == {"app": "h4-web", "pod-template-hash": "bbb"}
    assert "application" not in bbb
    job = by_name["job h4-migrate"]
    assert (job["capacity"], job["instances"]) == ({"desired": 0, "pinned": False}, [])
    assert {e["name"]: e["accountName"] for e in expanded} == {n: ACCOUNT for n in by_name}
    assert all("disabled" in e and "isDisabled" not in e for e in expanded)
    assert sorted(s["name"] for s in subset) == ["replicaSet h4-api-v000", "replicaSet h4-api-v001"]
    assert other == []
    assert full == same
    assert full["disabled"] is False
    assert [i["humanReadableName"] for i in full["instances"]] == [
        "pod h4-web-bbb-1", "pod h4-web-bbb-2", "pod h4-web-bbb-3",
    ]  # fmt: skip
    assert missing["message"] == (
        f"Server group not found (account: {ACCOUNT}, region: h4, name: replicaSet nope)"
    )
    assert [s["name"] for s in by_ids] == ["replicaSet h4-api-v000"]
    assert len(by_apps) == 5
    assert "invalid ids: nope" in bad["message"]
    assert "either" in neither["message"]


async def test_managers_load_balancers_instances(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path) as api:
            await filled(api)
            managers = await get(api, "/applications/h4/serverGroupManagers")
            no_managers = await get(api, "/applications/nope/serverGroupManagers")
            lbs = await get(api, "/applications/h4/loadBalancers")
            zz = await get(api, "/applications/zz/loadBalancers")
            one = await get(api, f"/kubernetes/loadBalancers/{ACCOUNT}/h4/service h4-api")
            unknown = await get(api, f"/kubernetes/loadBalancers/{ACCOUNT}/h4/service nope")
            everything = await get(api, "/kubernetes/loadBalancers")
            instance = await get(api, f"/instances/{ACCOUNT}/h4/pod h4-web-bbb-2")
            no_instance = await get(api, f"/instances/{ACCOUNT}/h4/pod nope", 404)
    (manager,) = managers
    assert (manager["name"], manager["displayName"], manager["kind"]) == (
        "deployment h4-web", "h4-web", "deployment",
    )  # fmt: skip
    assert (manager["region"], manager["namespace"], manager["cloudProvider"]) == (
        "h4", "h4", "kubernetes",
    )  # fmt: skip
    assert [s["name"] for s in manager["serverGroups"]] == [
        "replicaSet h4-web-aaa", "replicaSet h4-web-bbb",
    ]  # fmt: skip
    assert manager["serverGroups"][1] == {
        "name": "replicaSet h4-web-bbb", "account": ACCOUNT, "namespace": "h4", "region": "h4",
        "moniker": {"app": "h4", "cluster": "deployment h4-web", "sequence": 2},
    }  # fmt: skip
    assert no_managers == []
    assert [lb["name"] for lb in lbs] == ["ingress h4-in", "service h4-api", "service h4-web"]
    ingress, api_lb, web_lb = lbs
    assert ingress["serverGroups"] == []
    (sg,) = api_lb["serverGroups"]
    assert sg == {
        "name": "replicaSet h4-api-v001", "account": ACCOUNT, "region": "h4", "isDisabled": False,
        "detachedInstances": [], "cloudProvider": "kubernetes",
        "instances": [{"id": "uid-Pod-h4-api-v001-y", "name": "pod h4-api-v001-y", "zone": "h4",
                       "health": {"state": "Up", "source": "Container c1",
                                  "type": "kubernetes/container", "platform": "platform"}}],
    }  # fmt: skip
    assert [g["name"] for g in web_lb["serverGroups"]] == [
        "replicaSet h4-web-aaa", "replicaSet h4-web-bbb",
    ]  # fmt: skip
    for key in ("account", "displayName", "namespace", "region", "kind", "apiVersion",
                "labels", "moniker", "createdTime", "cloudProvider", "type"):  # fmt: skip
        assert key in api_lb, key
    assert [lb["name"] for lb in zz] == ["service zz-lonely"]
    assert one == [api_lb]
    assert unknown == []
    assert everything == []
    assert instance["name"] == "uid-Pod-h4-web-bbb-2"
    assert instance["humanReadableName"] == "pod h4-web-bbb-2"
    assert (instance["healthState"], instance["zone"], instance["kind"]) == ("Down", "h4", "pod")
    assert instance["health"][1]["state"] == "Down"
    assert (instance["cloudProvider"], instance["providerType"]) == ("kubernetes", "kubernetes")
    assert no_instance["message"] == "Instance not found (id: pod nope)"


async def test_firewalls_search_and_the_rest(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path) as api:
            await filled(api)
            all_fw = await get(api, "/securityGroups")
            of_account = await get(api, f"/securityGroups/{ACCOUNT}")
            of_region = await get(api, f"/securityGroups/{ACCOUNT}", region="h4")
            of_provider = await get(api, f"/securityGroups/{ACCOUNT}/kubernetes")
            named = await get(
                api, f"/securityGroups/{ACCOUNT}/kubernetes/networkPolicy h4-db-access"
            )
            details = await get(api, f"/securityGroups/{ACCOUNT}/kubernetes/h4/"
                                     "networkPolicy h4-db-access")  # fmt: skip
            missing = await get(
                api, f"/securityGroups/{ACCOUNT}/kubernetes/h4/networkPolicy x", 404
            )
            firewalls = await get(api, "/search", q="h4", type="securityGroups", pageSize="500")
            groups = await get(api, "/search", q="h4-api", type="serverGroups", pageSize="500")
            paged = await get(api, "/search", q="h4", type="instances", pageSize="2", page="2")
            apps = await get(api, "/search", q="h4", type="applications")
            by_ns = await get(api, "/search", q="h4", type="service")
            aws = await get(api, "/search", q="h4", type="serverGroups", platform="aws")
            no_type = await get(api, "/search", 400, q="h4")
            stages = await get(api, "/features/stages")
            projects = await get(api, "/projects/p/clusters")
            raw = await get(api, "/applications/h4/rawResources")
            cache = await api.client.post("/cache/kubernetes/manifest", json={})
    summary = {"name": "networkPolicy h4-db-access", "id": "networkPolicy h4-db-access"}
    assert all_fw == {ACCOUNT: {"kubernetes": {"h4": [summary]}}}
    assert of_account == {"kubernetes": {"h4": [summary]}}
    assert of_region == {"kubernetes": [summary]}
    assert of_provider == {"h4": [summary]}
    assert named == {"h4": [summary]}
    assert details["class"].endswith("KubernetesSecurityGroup")
    assert (details["id"], details["accountName"], details["region"], details["application"]) == (
        "networkPolicy h4-db-access", ACCOUNT, "h4", "h4",
    )  # fmt: skip
    assert details["inboundRules"][0]["portRanges"] == [{"startPort": 5432, "endPort": 5432}]
    assert missing["message"] == "Security group 'networkPolicy x' does not exist"
    # Deck's firewall tab: the results with application == app, resolved by account/region/id.
    (page,) = firewalls
    mine = [r for r in page["results"] if r.get("application") == "h4"]
    assert [(r["id"], r["account"], r["region"]) for r in mine] == [
        ("networkPolicy h4-db-access", ACCOUNT, "h4"),
    ]
    assert page["platform"] == "kubernetes"
    assert page["totalMatches"] == len(page["results"]) == 2  # direct and related
    names = [(r["name"], r.get("cluster"), r.get("application")) for r in groups[0]["results"]]
    assert names[:2] == [("replicaSet h4-api-v000", None, None),
                         ("replicaSet h4-api-v001", None, None)]  # fmt: skip
    assert ("replicaSet h4-api-v000", "replicaSet h4-api", None) in names
    assert groups[0]["results"][0]["serverGroup"] == "replicaSet h4-api-v000"
    assert (paged[0]["pageNumber"], paged[0]["pageSize"], paged[0]["totalMatches"]) == (2, 2, 2)
    assert [r["instanceId"] for r in paged[0]["results"]] == [
        "pod h4-web-bbb-1", "pod h4-web-bbb-2",
    ]  # fmt: skip
    assert [(r["name"], r["type"]) for r in apps[0]["results"]][:1] == [("h4", "applications")]
    assert {r["name"] for r in by_ns[0]["results"]} == {"service h4-api", "service h4-web"}
    assert aws == [{"totalMatches": 0, "pageNumber": 1, "pageSize": 10000, "platform": "aws",
                    "query": "h4", "results": []}]  # fmt: skip
    assert "type" in no_type["message"]
    assert {"name": "runJob", "enabled": True} in stages
    assert "upsertEntityTags" not in json.dumps(stages)
    assert projects == []
    assert {r["name"] for r in raw} >= {"deployment h4-web", "networkPolicy h4-db-access"}
    assert cache.status_code == 200
    assert cache.json() == {"cachedIdentifiersByType": {}}


async def test_the_application_list_follows_clusters_that_come_and_go(tmp_path: Path) -> None:
    new = rs("zz-api-v000", {"app": "zz"}, 1,
             {"moniker.spinnaker.io/application": "zz",
              "moniker.spinnaker.io/cluster": "replicaSet zz-api"})  # fmt: skip
    with trio.fail_after(20):
        async with open_api(tmp_path) as api:
            await filled(api)
            before = await get(api, "/applications")
            again = await get(api, "/applications", expand="true")
            await api.add(new)
            added = await get(api, "/applications")
            await api.add(rs("h4-extra", {"app": "x"}, 1, notes("deployment h4-web")))
            same_clusters = await get(api, "/applications")
            await api.store.apply_batch(ACCOUNT, [record(new, type_=EventType.DELETED)])
            removed = await get(api, "/applications")
    assert [a["name"] for a in before] == ["h4"]
    assert again == before
    assert [a["name"] for a in added] == ["h4", "zz"]
    assert added[1]["clusterNames"] == {ACCOUNT: ["replicaSet zz-api"]}
    assert same_clusters == added  # a server group more in a cluster that was there
    assert removed == before
