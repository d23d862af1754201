"""Deck's Kubernetes screens end to end (issue 16): a small application deployed into kubesim
(over TLS), watched by the real agent, cached by the real server, and every view Deck and
Orca read asserted field by field against clouddriver-views.md section 2: the name-parsing
fallback, ``disabled``, health counts, search paging, firewalls, jobs, and read-your-writes
after a deploy (the deployed server group is in the next answer, no polling).

The application (``deck_app``): Deployment h4-web with two ReplicaSets (the new one's pods:
one never scheduled, one ready), versioned ReplicaSets h4-api-v000 (disabled: the Service no
longer selects it) and h4-api-v001 (one pod unready), Services h4-api, h4-web and h4-cache
(not annotated), Ingress h4-in, Jobs h4-migrate (succeeds) and h4-migrate-bad (fails), a
NetworkPolicy and a StatefulSet without annotations (their app and cluster from their names).
"""

from __future__ import annotations

import calendar
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import trio

from . import deck_app
from .deck_app import NS, pods_of, web_replica_sets
from .harness import open_orca, wait_until

ACCOUNT = "k1"
CLUSTERS = ["deployment h4-web", "h4-cache", "job h4-migrate", "job h4-migrate-bad",
            "replicaSet h4-api"]  # fmt: skip
STALE = "X-Kubesvc-Stale"


async def get(http: httpx.AsyncClient, path: str, status: int = 200, **params: Any) -> Any:
    answer = await http.get(path, params=params)
    assert answer.status_code == status, (path, answer.status_code, answer.text)
    assert STALE not in answer.headers, answer.headers
    return answer.json()


def created_ms(obj: dict[str, Any]) -> int:
    stamp = obj["metadata"]["creationTimestamp"]
    return calendar.timegm(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) * 1000


async def ingested(http: httpx.AsyncClient) -> bool:
    """Whether the server shows the whole application, pinned states included."""
    groups = (await http.get("/applications/h4/serverGroups")).json()
    lbs = (await http.get("/applications/h4/loadBalancers")).json()
    counts = sorted(g["instanceCounts"]["down"] for g in groups)
    return len(groups) == 7 and len(lbs) == 4 and counts == [0, 0, 0, 1, 1, 1, 2]


async def test_deck_reads_every_view_of_a_small_application(tmp_path: Path) -> None:
    with trio.fail_after(120):
        async with open_orca(tmp_path, kube_tls=True) as (stack, orca):
            sim, http = stack.sim, orca.http
            deck_app.deploy(sim)
            await wait_until(lambda: ingested(http), what="the application in the views")
            await check_applications_and_clusters(http)
            await check_server_groups(http, sim)
            await check_managers_load_balancers_instances(http, sim)
            await check_firewalls_and_search(http, sim)
            await check_jobs_manifests_console(http, sim)
            await check_read_your_writes(orca, sim)


async def check_applications_and_clusters(http: httpx.AsyncClient) -> None:
    apps = await get(http, "/applications", restricted="false", expand="true")
    assert apps == [{"name": "h4", "attributes": {"name": "h4"},
                     "clusterNames": {ACCOUNT: CLUSTERS}}]  # fmt: skip
    app = await get(http, "/applications/h4")
    assert app == {
        "name": "h4",
        "attributes": {"name": "h4", "cloudProviders": "kubernetes"},
        "clusters": {ACCOUNT: [{"name": c, "loadBalancers": [], "serverGroups": [],
                                "provider": "kubernetes"} for c in CLUSTERS]},
    }  # fmt: skip
    assert (await get(http, "/applications/nope", 404))["message"] == (
        "Application does not exist (name: nope)"
    )
    assert await get(http, "/applications/h4/clusters") == {ACCOUNT: CLUSTERS}
    of_account = {c["name"]: c for c in await get(http, f"/applications/h4/clusters/{ACCOUNT}")}
    assert sorted(of_account) == CLUSTERS
    cache = of_account["h4-cache"]
    assert cache == {"name": "h4-cache", "account": ACCOUNT,
                     "moniker": {"app": "h4", "cluster": "h4-cache"},
                     "loadBalancers": ["service h4-cache"],
                     "serverGroups": ["statefulSet h4-cache-v002"]}  # fmt: skip
    api = of_account["replicaSet h4-api"]
    assert api["serverGroups"] == ["replicaSet h4-api-v000", "replicaSet h4-api-v001"]
    assert api["loadBalancers"] == ["service h4-api"]  # related: v001's
    path = f"/applications/h4/clusters/{ACCOUNT}/{quote('replicaSet h4-api')}"
    (listed,) = await get(http, path)
    orca_view = await get(http, f"{path}/kubernetes")
    assert listed == orca_view
    assert {k: orca_view[k] for k in ("name", "moniker", "type", "accountName", "application")} == {
        "name": "replicaSet h4-api", "moniker": {"cluster": "replicaSet h4-api", "app": "h4"},
        "type": "kubernetes", "accountName": ACCOUNT, "application": "h4",
    }  # fmt: skip
    assert [g["name"] for g in orca_view["serverGroups"]] == [
        "replicaSet h4-api-v000", "replicaSet h4-api-v001",
    ]  # fmt: skip
    (lb,) = orca_view["loadBalancers"]
    assert (lb["name"], [g["name"] for g in lb["serverGroups"]]) == (
        "service h4-api", ["replicaSet h4-api-v001"],
    )  # fmt: skip
    minimal = await get(http, f"{path}/kubernetes", expand="false")
    assert (minimal["serverGroups"], minimal["loadBalancers"]) == ([], [])
    await get(http, f"{path}/kubernetes/serverGroups/{quote('replicaSet h4-api-v001')}", 404)
    await get(http, f"{path}/kubernetes/{NS}/serverGroups/target/current_asg_dynamic", 404)


async def check_server_groups(http: httpx.AsyncClient, sim: Any) -> None:
    old, new = web_replica_sets(sim)
    summaries = {g["name"]: g for g in await get(http, "/applications/h4/serverGroups")}
    assert sorted(summaries) == sorted([
        f"replicaSet {old}", f"replicaSet {new}", "replicaSet h4-api-v000",
        "replicaSet h4-api-v001", "statefulSet h4-cache-v002", "job h4-migrate",
        "job h4-migrate-bad",
    ])  # fmt: skip
    web = summaries[f"replicaSet {new}"]
    rs = sim.get("apps", "v1", "replicasets", NS, new)
    pending, ready = pods_of(sim, new)
    assert web == {
        "name": f"replicaSet {new}", "account": ACCOUNT, "region": NS,
        "cluster": "deployment h4-web", "type": "kubernetes", "cloudProvider": "kubernetes",
        "isDisabled": False,
        "moniker": {"app": "h4", "cluster": "deployment h4-web", "sequence": 2},
        "buildInfo": {"images": ["h4/web:2"]}, "createdTime": created_ms(rs),
        "capacity": {"desired": 2, "pinned": False},
        "instances": [
            {"id": pending["metadata"]["uid"], "name": f"pod {pending['metadata']['name']}",
             "health": [{"type": "kubernetes/pod", "state": "Down"}],
             "healthState": "Down", "availabilityZone": NS},
            {"id": ready["metadata"]["uid"], "name": f"pod {ready['metadata']['name']}",
             "health": [{"type": "kubernetes/pod", "state": "Up"},
                        {"type": "kubernetes/container", "state": "Up"}],
             "healthState": "Up", "availabilityZone": NS},
        ],
        "loadBalancers": ["service h4-web"], "securityGroups": [],
        "instanceCounts": {"total": 2, "up": 1, "down": 1, "unknown": 0, "outOfService": 0,
                           "starting": 0},
        "serverGroupManagers": [{"account": ACCOUNT, "location": NS, "name": "h4-web"}],
        "labels": rs["metadata"]["labels"],
    }  # fmt: skip
    assert summaries[f"replicaSet {old}"]["moniker"]["sequence"] == 1
    assert summaries[f"replicaSet {old}"]["instances"] == []
    v000, v001 = summaries["replicaSet h4-api-v000"], summaries["replicaSet h4-api-v001"]
    assert (v000["isDisabled"], v000["loadBalancers"]) == (True, ["service h4-api"])
    assert (v001["isDisabled"], v001["loadBalancers"]) == (False, ["service h4-api"])
    assert v001["instanceCounts"]["up"] == v001["instanceCounts"]["down"] == 1
    assert v000["moniker"] == {"app": "h4", "cluster": "replicaSet h4-api", "sequence": 0}
    cache = summaries["statefulSet h4-cache-v002"]
    assert cache["moniker"] == {"app": "h4", "cluster": "h4-cache", "sequence": 2}
    assert (cache["cluster"], cache["loadBalancers"]) == ("h4-cache", ["service h4-cache"])
    migrate, bad = summaries["job h4-migrate"], summaries["job h4-migrate-bad"]
    assert migrate["instanceCounts"] == {"total": 1, "up": 0, "down": 1, "unknown": 0,
                                         "outOfService": 0, "starting": 0}  # fmt: skip
    assert bad["instanceCounts"]["down"] == 2
    assert migrate["capacity"] == {"desired": 0, "pinned": False}
    # Full: by account/region/name, and the expanded list.
    full = await get(http, f"/serverGroups/{ACCOUNT}/{NS}/{quote('replicaSet h4-api-v000')}")
    same = await get(http, f"/applications/h4/serverGroups/{ACCOUNT}/{NS}/"
                           f"{quote('replicaSet h4-api-v000')}")  # fmt: skip
    assert full == same
    assert {k: full[k] for k in ("account", "name", "displayName", "region", "namespace", "kind",
                                 "apiVersion", "disabled", "loadBalancers", "zones",
                                 "securityGroups", "launchConfig", "type", "cloudProvider")} == {
        "account": ACCOUNT, "name": "replicaSet h4-api-v000", "displayName": "h4-api-v000",
        "region": NS, "namespace": NS, "kind": "replicaSet", "apiVersion": "apps/v1",
        "disabled": True, "loadBalancers": ["service h4-api"], "zones": [],
        "securityGroups": [], "launchConfig": {}, "type": "kubernetes",
        "cloudProvider": "kubernetes",
    }  # fmt: skip
    (pod,) = full["instances"]
    assert pod["humanReadableName"] == f"pod {pods_of(sim, 'h4-api-v000')[0]['metadata']['name']}"
    assert "isDisabled" not in full
    expanded = await get(http, "/applications/h4/serverGroups", expand="true")
    assert {e["name"]: (e["accountName"], e["cluster"], e["application"]) for e in expanded} == {
        name: (ACCOUNT, s["cluster"], "h4") for name, s in summaries.items()
    }
    subset = await get(http, "/applications/h4/serverGroups",
                       clusters=f"{ACCOUNT}:replicaSet h4-api")  # fmt: skip
    assert sorted(s["name"] for s in subset) == ["replicaSet h4-api-v000", "replicaSet h4-api-v001"]
    by_ids = await get(http, "/serverGroups", ids=f"{ACCOUNT}:{NS}:replicaSet h4-api-v001")
    assert [s["name"] for s in by_ids] == ["replicaSet h4-api-v001"]
    missing = await get(http, f"/serverGroups/{ACCOUNT}/{NS}/replicaSet%20nope", 404)
    assert missing["message"] == (
        f"Server group not found (account: {ACCOUNT}, region: {NS}, name: replicaSet nope)"
    )


async def check_managers_load_balancers_instances(http: httpx.AsyncClient, sim: Any) -> None:
    old, new = web_replica_sets(sim)
    (manager,) = await get(http, "/applications/h4/serverGroupManagers")
    deployment = sim.get("apps", "v1", "deployments", NS, "h4-web")
    assert {k: manager[k] for k in ("name", "displayName", "account", "namespace", "region",
                                    "kind", "apiVersion", "moniker", "createdTime",
                                    "cloudProvider")} == {
        "name": "deployment h4-web", "displayName": "h4-web", "account": ACCOUNT,
        "namespace": NS, "region": NS, "kind": "deployment", "apiVersion": "apps/v1",
        "moniker": {"app": "h4", "cluster": "deployment h4-web"},
        "createdTime": created_ms(deployment), "cloudProvider": "kubernetes",
    }  # fmt: skip
    assert [(g["name"], g["moniker"]["sequence"]) for g in manager["serverGroups"]] == sorted(
        [(f"replicaSet {old}", 1), (f"replicaSet {new}", 2)]
    )
    lbs = await get(http, "/applications/h4/loadBalancers")
    assert [lb["name"] for lb in lbs] == [
        "ingress h4-in", "service h4-api", "service h4-cache", "service h4-web",
    ]  # fmt: skip
    ingress, api, cache, web = lbs
    assert ingress["serverGroups"] == []
    assert (ingress["kind"], ingress["apiVersion"]) == ("ingress", "networking.k8s.io/v1")
    (group,) = api["serverGroups"]
    assert (group["name"], group["isDisabled"], group["region"], group["detachedInstances"]) == (
        "replicaSet h4-api-v001", False, NS, [],
    )  # fmt: skip
    states = sorted(i["health"]["state"] for i in group["instances"])
    assert states == ["Down", "Up"]  # Deck counts instance.health.state per load balancer
    assert cache["moniker"] == {"app": "h4", "cluster": "h4-cache"}
    assert [g["name"] for g in cache["serverGroups"]] == ["statefulSet h4-cache-v002"]
    assert [g["name"] for g in web["serverGroups"]] == sorted([f"replicaSet {old}",
                                                               f"replicaSet {new}"])  # fmt: skip
    assert await get(http, f"/kubernetes/loadBalancers/{ACCOUNT}/{NS}/service%20h4-api") == [api]
    assert await get(http, f"/kubernetes/loadBalancers/{ACCOUNT}/{NS}/service%20nope") == []
    assert await get(http, "/kubernetes/loadBalancers") == []
    pending = pods_of(sim, new)[0]
    name = pending["metadata"]["name"]
    instance = await get(http, f"/instances/{ACCOUNT}/{NS}/{quote('pod ' + name)}")
    assert instance == {
        "account": ACCOUNT, "name": pending["metadata"]["uid"], "humanReadableName": f"pod {name}",
        "displayName": name, "namespace": NS, "zone": NS, "kind": "pod", "apiVersion": "v1",
        "labels": pending["metadata"]["labels"], "moniker": {"app": "h4", "cluster": name},
        "createdTime": created_ms(pending),
        "health": [{"state": "Down", "source": "Pod", "type": "kubernetes/pod",
                    "platform": "platform"}],
        "healthState": "Down", "cloudProvider": "kubernetes", "providerType": "kubernetes",
    }  # fmt: skip
    assert (await get(http, f"/instances/{ACCOUNT}/{NS}/pod%20nope", 404))["message"] == (
        "Instance not found (id: pod nope)"
    )


async def check_firewalls_and_search(http: httpx.AsyncClient, sim: Any) -> None:
    summary = {"name": "networkPolicy h4-db-access", "id": "networkPolicy h4-db-access"}
    assert await get(http, "/securityGroups") == {ACCOUNT: {"kubernetes": {NS: [summary]}}}
    assert await get(http, f"/securityGroups/{ACCOUNT}") == {"kubernetes": {NS: [summary]}}
    assert await get(http, f"/securityGroups/{ACCOUNT}/kubernetes") == {NS: [summary]}
    details = await get(http, f"/securityGroups/{ACCOUNT}/kubernetes/{NS}/"
                              f"{quote('networkPolicy h4-db-access')}")  # fmt: skip
    rule = "com.netflix.spinnaker.clouddriver.kubernetes.caching.view.model.KubernetesSecurityGroup"
    assert {k: details[k] for k in ("class", "id", "name", "displayName", "account",
                                    "accountName", "region", "namespace", "kind", "moniker",
                                    "application", "summary", "inboundRules", "outboundRules",
                                    "cloudProvider", "type")} == {
        "class": rule, "id": summary["id"], "name": summary["id"], "displayName": "h4-db-access",
        "account": ACCOUNT, "accountName": ACCOUNT, "region": NS, "namespace": NS,
        "kind": "networkPolicy", "moniker": {"app": "h4", "cluster": "h4-db-access"},
        "application": "h4", "summary": summary,
        "inboundRules": [{"class": rule + "$PortRule", "protocol": "TCP",
                          "portRanges": [{"startPort": 5432, "endPort": 5432}]}],
        "outboundRules": [], "cloudProvider": "kubernetes", "type": "kubernetes",
    }  # fmt: skip
    # Deck's Firewalls tab: search, keep application == h4, resolve by account/region/id.
    (page,) = await get(http, "/search", q="h4", type="securityGroups", pageSize="500")
    mine = [r for r in page["results"] if r.get("application") == "h4"]
    assert mine == [{
        "provider": "kubernetes", "group": "networkPolicy", "kubernetesKind": "networkPolicy",
        "account": ACCOUNT, "namespace": NS, "region": NS, "name": summary["id"],
        "id": summary["id"], "type": "securityGroups", "application": "h4",
    }]  # fmt: skip
    # Paging: nine pods, three a page.
    pods = sorted(p["metadata"]["name"] for p in sim.list("", "v1", "pods", NS))
    assert len(pods) == 9
    seen = []
    for number in (1, 2, 3, 4):
        (page,) = await get(http, "/search", q="h4", type="instances", pageSize="3",
                            page=str(number), platform="kubernetes")  # fmt: skip
        assert (page["pageNumber"], page["pageSize"], page["platform"], page["query"]) == (
            number, 3, "kubernetes", "h4",
        )  # fmt: skip
        assert page["totalMatches"] == len(page["results"]) == (3 if number < 4 else 0)
        seen += [r["instanceId"] for r in page["results"]]
    assert seen == [f"pod {p}" for p in pods]
    (groups,) = await get(http, "/search", q="h4-api-v", type="serverGroups", pageSize="500")
    assert [r["serverGroup"] for r in groups["results"]] == [
        "replicaSet h4-api-v000", "replicaSet h4-api-v001",
    ]  # fmt: skip
    (apps,) = await get(http, "/search", q="h4", type="applications", pageSize="500")
    assert apps["results"][0] == {"provider": "kubernetes", "group": "applications",
                                  "logicalKind": "applications", "name": "h4",
                                  "application": "h4", "type": "applications"}  # fmt: skip
    (services,) = await get(http, "/search", q=NS, type="service")  # the traffic picker's
    assert {(r["name"], r["namespace"], r["account"], r["kubernetesKind"])
            for r in services["results"]} == {
        (f"service {n}", NS, ACCOUNT, "service") for n in ("h4-api", "h4-cache", "h4-web")
    }  # fmt: skip


async def check_jobs_manifests_console(http: httpx.AsyncClient, sim: Any) -> None:
    bad = await get(http, f"/applications/h4/jobs/{ACCOUNT}/{NS}/{quote('job h4-migrate-bad')}")
    assert (bad["jobState"], bad["reason"]) == ("Failed", "BackoffLimitExceeded")
    good = await get(http, f"/applications/h4/jobs/{ACCOUNT}/{NS}/{quote('job h4-migrate')}")
    assert good["jobState"] == "Succeeded"
    newest = await get(http, f"/manifests/{ACCOUNT}/{NS}/replicaSet/cluster/h4/"
                             f"{quote('replicaSet h4-api')}/dynamic/newest")  # fmt: skip
    assert newest == {"kind": "replicaSet", "namespace": NS, "name": "h4-api-v001"}
    assert {"name": "deployManifest", "enabled": True} in await get(http, "/features/stages")
    assert await get(http, "/projects/h4/clusters") == []
    refresh = await http.post("/cache/kubernetes/manifest", json={})
    assert refresh.json() == {"cachedIdentifiersByType": {}}
    pod = pods_of(sim, "h4-api-v000")[0]["metadata"]["name"]
    path = f"/instances/{ACCOUNT}/{NS}/{quote('pod ' + pod)}/console"
    console = await get(http, path, provider="kubernetes")
    (output,) = console["output"]
    assert output["name"] == "app"
    assert output["output"].startswith(f"{pod} app line 0\n")
    sim.delete("", "v1", "pods", NS, pod, grace_period_seconds=0)
    gone = await get(http, path, provider="kubernetes")
    message = "Failed to retrieve pod data; pod may have been deleted."
    assert gone == {"output": [{"name": "Error", "output": message}]}


async def check_read_your_writes(orca: Any, sim: Any) -> None:
    """A deploy shows in the very next read once its task completed."""
    manifest = deck_app.versioned(2, {"tier": "api", "app": "h4-api"}, 1)
    manifest["metadata"]["name"] = "h4-api"
    del manifest["metadata"]["annotations"]
    task = await orca.run("deployManifest", {
        "account": ACCOUNT, "cloudProvider": "kubernetes", "manifests": [manifest],
        "moniker": {"app": "h4", "cluster": "replicaSet h4-api"}, "source": "text",
    })  # fmt: skip
    assert task["status"]["failed"] is False, task["resultObjects"]
    clusters = await get(orca.http, f"/applications/h4/clusters/{ACCOUNT}")
    api = next(c for c in clusters if c["name"] == "replicaSet h4-api")
    assert api["serverGroups"] == [
        "replicaSet h4-api-v000", "replicaSet h4-api-v001", "replicaSet h4-api-v002",
    ]  # fmt: skip
    full = await get(orca.http, f"/serverGroups/{ACCOUNT}/{NS}/replicaSet%20h4-api-v002")
    assert full["moniker"] == {"app": "h4", "cluster": "replicaSet h4-api", "sequence": 2}
    assert sim.get("apps", "v1", "replicasets", NS, "h4-api-v002")["metadata"]["name"]
