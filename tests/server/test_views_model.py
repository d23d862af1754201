"""The views' model against clouddriver-views.md section 1 and its examples: Spinnaker kinds,
monikers (annotations, Frigga fallback, JSON-quoted values, ReplicaSet revisions), health,
``disabled``, relationships and the shapes (null fields omitted)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from server import views
from server._moniker import Moniker, moniker_of
from server.views import Resource, ServerGroupParts

ACCOUNT = "h4-account"
STAMP = "2025-03-05T12:10:00Z"
STAMP_MS = 1741176600000


def obj(
    kind: str,
    name: str,
    *,
    api: str = "v1",
    ns: str = "h4",
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    owner: tuple[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "uid": uid or f"uid-{name}",
        "creationTimestamp": STAMP,
    }
    if annotations:
        meta["annotations"] = annotations
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [
            {"kind": owner[0], "name": owner[1], "controller": True, "uid": "x"}
        ]
    body: dict[str, Any] = {"apiVersion": api, "kind": kind, "metadata": meta}
    if spec is not None:
        body["spec"] = spec
    if status is not None:
        body["status"] = status
    return body


def res(body: dict[str, Any]) -> Resource:
    return Resource(ACCOUNT, body)


def running(*ready: bool, phase: str = "Running") -> dict[str, Any]:
    return {
        "phase": phase,
        "containerStatuses": [{"name": f"c{i}", "ready": r} for i, r in enumerate(ready)],
    }


def replica_set(name: str, *, labels: dict[str, str], replicas: int = 1, **kw: Any) -> Resource:
    spec = {
        "replicas": replicas,
        "template": {
            "metadata": {"labels": labels},
            "spec": {
                "containers": [{"name": "app", "image": "h4/api:1"}],
                "initContainers": [{"name": "init", "image": "h4/init:1"}],
            },
        },
    }
    return res(obj("ReplicaSet", name, api="apps/v1", spec=spec, **kw))


def service(name: str, selector: dict[str, str] | None) -> Resource:
    return res(obj("Service", name, spec={"selector": selector} if selector else {}))


# -- kinds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("group", "kind", "role"),
    [
        ("apps", "ReplicaSet", "serverGroups"),
        ("apps", "StatefulSet", "serverGroups"),
        ("apps", "DaemonSet", "serverGroups"),
        ("batch", "Job", "serverGroups"),
        ("batch", "CronJob", "serverGroups"),
        ("apps", "Deployment", "serverGroupManagers"),
        ("", "Service", "loadBalancers"),
        ("networking.k8s.io", "Ingress", "loadBalancers"),
        ("networking.k8s.io", "NetworkPolicy", "securityGroups"),
        ("", "Pod", "instances"),
        ("", "ConfigMap", None),
        ("", "Secret", None),
        ("example.com", "Widget", None),
    ],
)
def test_spinnaker_kind_of_each_kubernetes_kind(group: str, kind: str, role: str | None) -> None:
    assert views.role_of(group, kind) == role


# -- monikers -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "app", "cluster", "sequence"),
    [
        ("h4-db-access", "h4", "h4-db-access", None),
        ("h4-api-v001", "h4", "h4-api", 1),
        ("system:coredns-v003", "system", "system:coredns", 3),
        ("system:coredns", "system", "system:coredns", None),
    ],
)
def test_frigga_fallback_of_the_reference(
    name: str, app: str, cluster: str, sequence: int | None
) -> None:
    moniker = moniker_of("Service", name, None)
    assert (moniker.app, moniker.cluster, moniker.sequence) == (app, cluster, sequence)


def test_annotations_win_and_json_quoted_values_are_decoded() -> None:
    notes = {
        "moniker.spinnaker.io/application": '"h4"',
        "moniker.spinnaker.io/cluster": '"replicaSet h4-api"',
        "moniker.spinnaker.io/sequence": '"4"',
        "moniker.spinnaker.io/stack": "prod",
    }
    assert moniker_of("ReplicaSet", "other-v009", notes) == Moniker(
        app="h4", cluster="replicaSet h4-api", stack="prod", sequence=4
    )


def test_replica_set_takes_its_sequence_from_the_revision() -> None:
    notes = {
        "moniker.spinnaker.io/application": "h4",
        "moniker.spinnaker.io/cluster": "deployment h4-web",
        "deployment.kubernetes.io/revision": "2",
    }
    moniker = moniker_of("ReplicaSet", "h4-web-7c9d8f6b5a", notes)
    assert moniker.to_json() == {"app": "h4", "cluster": "deployment h4-web", "sequence": 2}
    # Only a ReplicaSet: a Deployment's own revision is not its sequence.
    assert moniker_of("Deployment", "h4-web", notes).sequence is None


def test_index_entry_of_each_kind() -> None:
    pod = views.index_entry(
        ACCOUNT,
        "",
        "Pod",
        "h4",
        "h4-web-7c9d8f6b5a-x2m",
        {"moniker.spinnaker.io/application": "h4"},
        [{"kind": "ReplicaSet", "name": "h4-web-7c9d8f6b5a", "controller": True}],
    )
    assert pod == views.IndexEntry(
        role="instances",
        app="",  # pods belong to no application or cluster
        cluster="",
        owner_kind="replicaset",
        owner_name="h4-web-7c9d8f6b5a",
        search_key="kubernetes.v2:infrastructure:pod:h4-account:h4:h4-web-7c9d8f6b5a-x2m",
    )
    assert views.index_entry(ACCOUNT, "", "ConfigMap", "h4", "x", None, None) is None
    policy = views.index_entry(ACCOUNT, "networking.k8s.io", "NetworkPolicy", "h4", "h4-db-access",
                               None, None)  # fmt: skip
    assert policy is not None
    assert (policy.role, policy.app, policy.cluster) == ("securityGroups", "h4", "h4-db-access")
    assert views.cache_key("ReplicaSet", "a:b", "ns", "x") == (
        "kubernetes.v2:infrastructure:replicaSet:a;b:ns:x"
    )


def test_controller_owner_prefers_the_controller() -> None:
    refs = [{"kind": "Foo", "name": "a"}, {"kind": "ReplicaSet", "name": "b", "controller": True}]
    assert views.controller_owner(refs) == ("ReplicaSet", "b")
    assert views.controller_owner([{"kind": "Foo", "name": "a"}]) == ("Foo", "a")
    assert views.controller_owner(None) == ("", "")
    assert views.controller_owner("junk") == ("", "")


# -- health ---------------------------------------------------------------------------------


def test_pod_health_entries() -> None:
    pod = obj("Pod", "p", status=running(True, False))
    assert views.pod_health(pod) == [
        {"state": "Up", "source": "Pod", "type": "kubernetes/pod", "platform": "platform"},
        {"state": "Up", "source": "Container c0", "type": "kubernetes/container",
         "platform": "platform"},
        {"state": "Down", "source": "Container c1", "type": "kubernetes/container",
         "platform": "platform"},
    ]  # fmt: skip
    assert views.pod_health(obj("Pod", "p")) == []


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (running(True), "Up"),  # ready and running
        (running(True, False), "Down"),  # an unready container
        ({"phase": "Pending"}, "Down"),
        (running(False, phase="Succeeded"), "Down"),  # a finished job pod: terminated = unready
        ({"phase": "Succeeded"}, "Unknown"),
        ({"phase": "Failed"}, "Unknown"),
        (None, "Unknown"),  # no status at all
    ],
)
def test_health_state(status: dict[str, Any] | None, state: str) -> None:
    pod = obj("Pod", "p", status=status)
    assert views.health_state(views.pod_health(pod)) == state


def test_health_state_order() -> None:
    def entries(*states: str) -> list[dict[str, str]]:
        return [{"state": s} for s in states]

    assert views.health_state(entries("Up", "Unknown")) == "Up"
    assert views.health_state(entries("Succeeded", "Unknown")) == "Succeeded"
    assert views.health_state(entries("Up", "Starting", "Down")) == "Starting"
    assert views.health_state(entries("Up", "Failed", "Down")) == "Down"
    assert views.health_state(entries("Up", "Failed")) == "Failed"
    assert views.health_state(entries("Up", "OutOfService")) == "OutOfService"
    assert views.health_state([]) == "Unknown"


def test_instance_counts() -> None:
    assert views.instance_counts(["Up", "Up", "Down", "Unknown"]) == {
        "total": 4, "up": 2, "down": 1, "unknown": 1, "outOfService": 0, "starting": 0,
    }  # fmt: skip


# -- relationships and disabled ----------------------------------------------------------


def test_service_relates_to_a_replica_set_whose_template_has_its_selector() -> None:
    rs = replica_set("h4-api-v001", labels={"app": "h4-api", "version": "v001"})
    assert views.service_selects(service("h4-api", {"app": "h4-api"}), rs)
    assert not views.service_selects(service("h4-api", {"app": "h4-api", "x": "y"}), rs)
    assert not views.service_selects(service("h4-api", None), rs)  # empty selector: nothing
    other_ns = res(obj("Service", "h4-api", ns="other", spec={"selector": {"app": "h4-api"}}))
    assert not views.service_selects(other_ns, rs)


def test_statefulset_relates_to_its_service_and_daemonset_to_none() -> None:
    sts = res(obj("StatefulSet", "h4-db", api="apps/v1", spec={"serviceName": "h4-db"}))
    services = [service("h4-db", {"app": "db"}), service("h4-other", {"app": "db"})]
    assert [s.name for s in views.related_services(sts, services)] == ["h4-db"]
    ds = res(obj("DaemonSet", "h4-agent", api="apps/v1", spec={"template": {}}))
    assert views.related_services(ds, services) == []


def test_ingress_backends() -> None:
    ingress = res(
        obj(
            "Ingress",
            "h4-in",
            api="networking.k8s.io/v1",
            spec={
                "defaultBackend": {"service": {"name": "h4-web", "port": {"number": 80}}},
                "rules": [{"http": {"paths": [
                    {"path": "/api", "backend": {"service": {"name": "h4-api"}}},
                    {"path": "/old", "backend": {"serviceName": "h4-old"}},
                ]}}],
            },
        )
    )  # fmt: skip
    assert views.ingress_services(ingress) == ["h4-web", "h4-api", "h4-old"]


def test_disabled_needs_the_annotation_and_no_related_service() -> None:
    note = {"traffic.spinnaker.io/load-balancers": json.dumps(["Service h4-api"])}
    labels = {"app": "h4-api"}
    enabled = replica_set("h4-api-v001", labels=labels, annotations=note)
    cut = replica_set("h4-api-v000", labels={"version": "v000"}, annotations=note)
    plain = replica_set("h4-plain", labels={"version": "v000"})
    svc = service("h4-api", labels)
    assert views.traffic_load_balancers(enabled) == ["service h4-api"]
    assert not ServerGroupParts(enabled, (), views.related_services(enabled, [svc])).disabled
    assert ServerGroupParts(cut, (), views.related_services(cut, [svc])).disabled
    assert not ServerGroupParts(plain, (), ()).disabled  # without the annotation: never
    # loadBalancers = related + annotated
    assert ServerGroupParts(cut, (), ()).load_balancers == ["service h4-api"]


# -- shapes ---------------------------------------------------------------------------------


def reference_server_group() -> ServerGroupParts:
    """The reference's example: a disabled v000 with one ready pod."""
    notes = {
        "moniker.spinnaker.io/application": "h4",
        "moniker.spinnaker.io/cluster": "replicaSet h4-api",
        "moniker.spinnaker.io/sequence": "0",
        "traffic.spinnaker.io/load-balancers": '["service h4-api"]',
    }
    rs = replica_set("h4-api-v000", labels={"version": "v000"}, annotations=notes)
    pod = res(obj("Pod", "h4-api-v000-8xq2m", status=running(True), uid="pod-uid-1",
                  owner=("ReplicaSet", "h4-api-v000"), labels={"version": "v000"}))  # fmt: skip
    return ServerGroupParts(rs, [pod], [])


def test_full_server_group_of_the_reference() -> None:
    body = views.server_group_full(reference_server_group())
    expected = {
        "account": "h4-account",
        "name": "replicaSet h4-api-v000",
        "displayName": "h4-api-v000",
        "namespace": "h4",
        "region": "h4",
        "kind": "replicaSet",
        "apiVersion": "apps/v1",
        "moniker": {"app": "h4", "cluster": "replicaSet h4-api", "sequence": 0},
        "createdTime": STAMP_MS,
        "buildInfo": {"images": ["h4/api:1", "h4/init:1"]},
        "disabled": True,
        "loadBalancers": ["service h4-api"],
        "capacity": {"desired": 1, "pinned": False},
        "instanceCounts": {"total": 1, "up": 1, "down": 0, "unknown": 0, "outOfService": 0,
                           "starting": 0},
        "serverGroupManagers": [],
        "zones": [],
        "securityGroups": [],
        "launchConfig": {},
        "cloudProvider": "kubernetes",
        "type": "kubernetes",
    }  # fmt: skip
    assert {k: body[k] for k in expected} == expected
    assert body["labels"] == {}
    (instance,) = body["instances"]
    assert instance["name"] == "pod-uid-1"
    assert instance["humanReadableName"] == "pod h4-api-v000-8xq2m"
    assert instance["healthState"] == "Up"
    assert instance["zone"] == "h4"
    assert "region" not in instance
    assert instance["providerType"] == "kubernetes"


def test_summary_server_group() -> None:
    body = views.server_group_summary(reference_server_group())
    assert body["isDisabled"] is True
    assert "disabled" not in body
    assert body["cluster"] == "replicaSet h4-api"
    assert "application" not in body  # Frigga cannot parse a name with a space
    assert "labels" not in body  # only when there are some
    assert body["instances"] == [
        {
            "id": "pod-uid-1",
            "name": "pod h4-api-v000-8xq2m",
            "health": [
                {"type": "kubernetes/pod", "state": "Up"},
                {"type": "kubernetes/container", "state": "Up"},
            ],
            "healthState": "Up",
            "availabilityZone": "h4",
        }
    ]


def test_expanded_server_group_omits_null_moniker_parts() -> None:
    body = views.server_group_expanded(reference_server_group())
    assert (body["accountName"], body["account"]) == (ACCOUNT, ACCOUNT)
    assert (body["cluster"], body["application"]) == ("replicaSet h4-api", "h4")
    assert "stack" not in body
    assert "freeFormDetail" not in body


def test_manager_of_a_replica_set_is_its_deployments_bare_name() -> None:
    rs = replica_set("h4-web-7c9d", labels={"app": "h4-web"}, owner=("Deployment", "h4-web"))
    assert ServerGroupParts(rs).managers == [
        {"account": ACCOUNT, "location": "h4", "name": "h4-web"}
    ]
    deployment = res(obj("Deployment", "h4-web", api="apps/v1"))
    body = views.server_group_manager(deployment, [rs])
    assert body["name"] == "deployment h4-web"
    assert body["serverGroups"] == [
        {"name": "replicaSet h4-web-7c9d", "account": ACCOUNT, "namespace": "h4",
         "region": "h4", "moniker": {"app": "h4", "cluster": "h4-web-7c9d"}},
    ]  # fmt: skip


def test_load_balancer_instances_merge_their_health() -> None:
    pod = res(obj("Pod", "p1", status=running(True, False), uid="u1"))
    assert views.instance_lb(pod) == {
        "id": "u1",
        "name": "pod p1",
        "zone": "h4",
        "health": {"state": "Down", "source": "Container c1", "type": "kubernetes/container",
                   "platform": "platform"},
    }  # fmt: skip
    parts = ServerGroupParts(replica_set("rs", labels={}), [pod], [])
    lb = views.load_balancer(
        service("h4-api", {"a": "b"}), [views.lb_server_group(parts, disabled=False)]
    )
    assert lb["serverGroups"][0]["isDisabled"] is False
    assert lb["serverGroups"][0]["detachedInstances"] == []
    assert (lb["cloudProvider"], lb["type"], lb["kind"]) == ("kubernetes", "kubernetes", "service")


def test_security_group_rules() -> None:
    policy = res(
        obj(
            "NetworkPolicy",
            "h4-db-access",
            api="networking.k8s.io/v1",
            spec={
                "ingress": [{"ports": [{"protocol": "TCP", "port": 5432},
                                       {"protocol": "TCP", "port": 5432}]}],
                "egress": [{"ports": [{"protocol": "TCP", "port": "dns"}]}, {"to": []}],
            },
        )
    )  # fmt: skip
    body = views.security_group(policy)
    assert body["id"] == body["name"] == "networkPolicy h4-db-access"
    assert body["class"].endswith(".KubernetesSecurityGroup")
    assert body["application"] == "h4"
    assert body["summary"] == {
        "name": "networkPolicy h4-db-access",
        "id": "networkPolicy h4-db-access",
    }
    assert body["inboundRules"] == [
        {"class": body["class"] + "$PortRule", "protocol": "TCP",
         "portRanges": [{"startPort": 5432, "endPort": 5432}]}
    ]  # fmt: skip
    assert body["outboundRules"][0]["portRanges"] == [
        {"startPortName": "dns", "endPortName": "dns"}
    ]


def test_applications_and_clusters() -> None:
    triples = [("h4", "a2", "deployment h4-web"), ("h4", "a1", "replicaSet h4-api"),
               ("Zed", "a1", "z"), ("abc", "a1", "x")]  # fmt: skip
    listed = views.application_list(triples)
    assert [a["name"] for a in listed] == ["abc", "h4", "Zed"]
    assert listed[1] == {
        "name": "h4",
        "attributes": {"name": "h4"},
        "clusterNames": {"a1": ["replicaSet h4-api"], "a2": ["deployment h4-web"]},
    }
    app = views.application("h4", [t for t in triples if t[0] == "h4"])
    assert app["attributes"] == {"name": "h4", "cloudProviders": "kubernetes"}
    assert app["clusters"]["a1"] == [
        {"name": "replicaSet h4-api", "loadBalancers": [], "serverGroups": [],
         "provider": "kubernetes"}
    ]  # fmt: skip


def test_created_ms() -> None:
    assert views.created_ms(STAMP) == STAMP_MS
    assert views.created_ms("2025-03-05T12:10:00.250Z") == STAMP_MS + 250
    assert views.created_ms("junk") is None
    assert views.created_ms(None) is None


# -- search ---------------------------------------------------------------------------------


def test_search_plan_expands_spinnaker_kinds() -> None:
    plan = views.plan_search(["serverGroups"])
    assert plan.kinds == ("CronJob", "DaemonSet", "Job", "ReplicaSet", "StatefulSet")
    assert not plan.applications
    assert views.plan_search(["replicaSet", "applications"]).kinds == ("ReplicaSet",)
    assert views.plan_search(["applications"]).applications
    assert views.plan_search(["bogus"]).empty
    assert "Pod" in views.plan_search([]).kinds


def test_search_results_direct_then_related() -> None:
    plan = views.plan_search(["securityGroups"])
    row = ("NetworkPolicy", ACCOUNT, "h4", "h4-db-access", "securityGroups", "h4", "h4-db-access")
    hits = views.SearchHits(direct=[row], apps=["h4"], related=[row])
    direct, related = views.search_results(plan, hits)
    assert direct == {
        "provider": "kubernetes",
        "group": "networkPolicy",
        "kubernetesKind": "networkPolicy",
        "account": ACCOUNT,
        "namespace": "h4",
        "region": "h4",
        "name": "networkPolicy h4-db-access",
        "id": "networkPolicy h4-db-access",
        "type": "securityGroups",
    }
    assert related == {**direct, "application": "h4"}
    (page,) = views.result_set("h4", 1, 1, [direct, related])
    assert page["totalMatches"] == 1
    assert page["results"] == [direct]
    (second,) = views.result_set("h4", 2, 1, [direct, related])
    assert second["results"] == [related]
    assert second["pageNumber"] == 2
