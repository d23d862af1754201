"""Pure parts of the manifest reads: kind tokens, manifest names, artifacts, events, criteria."""

from __future__ import annotations

from typing import Any

import pytest

from server._kinds import KindRef, resolve_kind, spinnaker_kind_name
from server.api import BadRequest, NotFound
from server.api._manifest_view import (
    artifacts_of,
    events_about,
    parse_manifest_name,
    pick_by_criteria,
)


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("deployment", KindRef("Deployment", "apps", "deployment")),
        ("Deployment", KindRef("Deployment", "apps", "deployment")),
        ("deploy", KindRef("Deployment", "apps", "deployment")),
        ("rs", KindRef("ReplicaSet", "apps", "replicaSet")),
        ("svc", KindRef("Service", "", "service")),
        ("REPLICASET", KindRef("ReplicaSet", "apps", "replicaSet")),
        ("replicaSet.apps", KindRef("ReplicaSet", "apps", "replicaSet")),
        ("Widget.example.com", KindRef("Widget", "example.com", "Widget.example.com")),
        ("widget", KindRef("widget", None, "widget")),
    ],
)
def test_resolve_kind(token: str, expected: KindRef) -> None:
    assert resolve_kind(token) == expected


@pytest.mark.parametrize(
    ("kind", "token"),
    [
        ("ReplicaSet", "replicaSet"),
        ("APIService", "apiService"),
        ("HorizontalPodAutoscaler", "horizontalPodAutoscaler"),
        ("Pod", "pod"),
        ("CRD", "crd"),
        ("", ""),
    ],
)
def test_spinnaker_kind_name(kind: str, token: str) -> None:
    assert spinnaker_kind_name(kind) == token


def test_parse_manifest_name() -> None:
    assert parse_manifest_name("deployment my-app") == (resolve_kind("deployment"), "my-app")
    for bad in ("deployment", "deployment a b", "", "  "):
        with pytest.raises(NotFound, match="<kind> <name>"):
            parse_manifest_name(bad)


def test_artifacts_cover_pods_templates_and_cron_jobs() -> None:
    cron: dict[str, Any] = {
        "kind": "CronJob",
        "metadata": {"namespace": "ns"},
        "spec": {
            "jobTemplate": {
                "spec": {"template": {"spec": {"containers": [{"image": "job:2@sha256:ff"}]}}}
            }
        },
    }
    [artifact] = artifacts_of(cron, "acct")
    assert (artifact["name"], artifact["version"], artifact["reference"]) == (
        "job:2",
        "sha256:ff",
        "job:2@sha256:ff",
    )
    pod = {
        "kind": "Pod",
        "metadata": {"namespace": "ns"},
        "spec": {"containers": [{"image": "localhost:5000/app"}, {"name": "no-image"}, "junk"]},
    }
    assert [(a["name"], a["version"]) for a in artifacts_of(pod, "acct")] == [
        ("localhost:5000/app", "")
    ]
    assert artifacts_of({"kind": "ConfigMap", "data": {}}, "acct") == []


def test_events_about_match_both_event_apis_and_sort_oldest_first() -> None:
    subject = {"kind": "Deployment", "name": "web", "namespace": "prod"}
    c_time = {"lastTimestamp": "2024-01-03T00:00:00Z"}
    a_time = {"eventTime": "2024-01-01T00:00:00.000000Z"}
    b_meta = {"name": "b", "creationTimestamp": "2024-01-02T00:00:00Z"}
    events: list[dict[str, Any]] = [
        {"metadata": {"name": "c"}, "involvedObject": subject, **c_time},
        {"metadata": {"name": "a"}, "regarding": subject, **a_time},  # events.k8s.io/v1
        {"metadata": b_meta, "involvedObject": subject},
        {"metadata": {"name": "x"}, "involvedObject": {**subject, "namespace": "dev"}},
        {"metadata": {"name": "y"}, "involvedObject": {**subject, "kind": "ReplicaSet"}},
        {"metadata": {"name": "z"}},
        {"metadata": {"name": "c", "uid": "u-c"}, "involvedObject": subject, **c_time},
        {"metadata": {"name": "c", "uid": "u-c"}, "regarding": subject, **c_time},  # same event
    ]
    about = events_about(events, "deployment", "web", "prod")
    assert [e["metadata"]["name"] for e in about] == ["a", "b", "c", "c"]


def test_pick_by_criteria() -> None:
    def rs(name: str, created: str, replicas: Any) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "creationTimestamp": created},
            "spec": {"replicas": replicas},
        }

    objs = [rs("b", "2024-01-02", 3), rs("a", "2024-01-01", 3), rs("c", "2024-01-03", "9")]

    def name(obj: Any) -> str | None:
        return obj["metadata"]["name"] if obj else None

    assert name(pick_by_criteria(objs, "newest")) == "c"
    assert name(pick_by_criteria(objs, "second_newest")) == "b"
    assert name(pick_by_criteria(objs, "Second-Newest")) == "b"
    assert name(pick_by_criteria(objs, "oldest")) == "a"
    assert name(pick_by_criteria(objs, "largest")) == "b"  # ties go to the newer; "9" is no number
    assert name(pick_by_criteria(objs, "smallest")) == "c"
    assert pick_by_criteria(objs[:1], "second_newest") is None
    assert pick_by_criteria([], "newest") is None
    with pytest.raises(BadRequest, match="criteria 'biggest'"):
        pick_by_criteria(objs, "biggest")
