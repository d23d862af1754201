"""Artifact binding, sans-I/O: every reference type of Clouddriver's replacers, the namespace
and account filter, and which artifact wins (agent/operations/_binding.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.operations import REPLACERS, bind
from agent.operations._binding import references, upstream_bound


def _artifact(kind: str, name: str, reference: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "name": name, "location": "default", "reference": reference, **extra}


def _deployment(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"template": {"metadata": {}, "spec": pod_spec}},
    }


def _hpa(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name}},
    }


# One manifest per replacer: (Clouddriver's replacer name, artifact type, manifest holding the
# name "x", path to that name).
_CASES: list[tuple[str, str, dict[str, Any], tuple[Any, ...]]] = [
    (
        "dockerImage",
        "docker/image",
        _deployment({"containers": [{"name": "a", "image": "x"}]}),
        ("spec", "template", "spec", "containers", 0, "image"),
    ),
    (
        "dockerImage",
        "docker/image",
        _deployment({"initContainers": [{"name": "i", "image": "x"}], "containers": []}),
        ("spec", "template", "spec", "initContainers", 0, "image"),
    ),
    (
        "configMapVolume",
        "kubernetes/configMap",
        _deployment({"volumes": [{"name": "v", "configMap": {"name": "x"}}]}),
        ("spec", "template", "spec", "volumes", 0, "configMap", "name"),
    ),
    (
        "secretVolume",
        "kubernetes/secret",
        _deployment({"volumes": [{"name": "v", "secret": {"secretName": "x"}}]}),
        ("spec", "template", "spec", "volumes", 0, "secret", "secretName"),
    ),
    (
        "configMapProjectedVolume",
        "kubernetes/configMap",
        _deployment(
            {"volumes": [{"name": "v", "projected": {"sources": [{"configMap": {"name": "x"}}]}}]}
        ),
        ("spec", "template", "spec", "volumes", 0, "projected", "sources", 0, "configMap", "name"),
    ),
    (
        "secretProjectedVolume",
        "kubernetes/secret",
        _deployment(
            {"volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "x"}}]}}]}
        ),
        ("spec", "template", "spec", "volumes", 0, "projected", "sources", 0, "secret", "name"),
    ),
    (
        "configMapEnv",
        "kubernetes/configMap",
        _deployment({"containers": [{"name": "a", "envFrom": [{"configMapRef": {"name": "x"}}]}]}),
        ("spec", "template", "spec", "containers", 0, "envFrom", 0, "configMapRef", "name"),
    ),
    (
        "secretEnv",
        "kubernetes/secret",
        _deployment({"initContainers": [{"name": "a", "envFrom": [{"secretRef": {"name": "x"}}]}]}),
        ("spec", "template", "spec", "initContainers", 0, "envFrom", 0, "secretRef", "name"),
    ),
    (
        "configMapKeyValue",
        "kubernetes/configMap",
        _deployment(
            {
                "containers": [
                    {
                        "name": "a",
                        "env": [
                            {
                                "name": "E",
                                "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}},
                            }
                        ],
                    }
                ]
            }
        ),
        (
            "spec",
            "template",
            "spec",
            "containers",
            0,
            "env",
            0,
            "valueFrom",
            "configMapKeyRef",
            "name",
        ),
    ),
    (
        "secretKeyValue",
        "kubernetes/secret",
        _deployment(
            {
                "containers": [
                    {
                        "name": "a",
                        "env": [
                            {"name": "E", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}
                        ],
                    }
                ]
            }
        ),
        (
            "spec",
            "template",
            "spec",
            "containers",
            0,
            "env",
            0,
            "valueFrom",
            "secretKeyRef",
            "name",
        ),
    ),
    (
        "hpaDeployment",
        "kubernetes/deployment",
        _hpa("Deployment", "x"),
        ("spec", "scaleTargetRef", "name"),
    ),
    (
        "hpaReplicaSet",
        "kubernetes/replicaSet",
        _hpa("ReplicaSet", "x"),
        ("spec", "scaleTargetRef", "name"),
    ),
]


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        obj = obj[step]
    return obj


def test_the_table_is_clouddrivers_replacers() -> None:
    assert [r.name for r in REPLACERS] == [
        "dockerImage",
        "configMapVolume",
        "secretVolume",
        "configMapProjectedVolume",
        "secretProjectedVolume",
        "configMapEnv",
        "secretEnv",
        "configMapKeyValue",
        "secretKeyValue",
        "hpaDeployment",
        "hpaReplicaSet",
    ]
    assert {name for name, *_ in _CASES} == {r.name for r in REPLACERS}


@pytest.mark.parametrize(
    ("replacer", "kind", "manifest", "path"), _CASES, ids=[c[0] for c in _CASES]
)
def test_each_reference_type_binds_and_reports_its_artifact(
    replacer: str, kind: str, manifest: dict[str, Any], path: tuple[Any, ...]
) -> None:
    obj = copy.deepcopy(manifest)
    wanted = _artifact(kind, "x", "x-v003")
    others = [
        _artifact(other, "x", f"{other}-ref")
        for other in {k for _, k, _, _ in _CASES}
        if other != kind
    ]
    assert references(obj) == {(kind, "x")}
    bound = bind(obj, [*others, wanted], namespace="default", account="k1")
    assert _at(obj, path) == "x-v003"
    assert bound == [wanted]  # the other types name "x" too, and bind nothing here


_KUBERNETES_CASES = [c for c in _CASES if c[1] != "docker/image"]  # images bind anywhere


@pytest.mark.parametrize(
    ("replacer", "kind", "manifest", "path"),
    _KUBERNETES_CASES,
    ids=[c[0] for c in _KUBERNETES_CASES],
)
def test_a_kubernetes_artifact_of_another_namespace_or_account_is_not_bound(
    replacer: str, kind: str, manifest: dict[str, Any], path: tuple[Any, ...]
) -> None:
    obj = copy.deepcopy(manifest)
    elsewhere = {**_artifact(kind, "x", "x-v001"), "location": "other"}
    foreign = _artifact(kind, "x", "x-v002", metadata={"account": "k2"})
    assert bind(obj, [elsewhere, foreign], namespace="default", account="k1") == []
    assert _at(obj, path) == "x"
    # No account named: assumed to mean this one (Clouddriver's ArtifactReplacer).
    mine = _artifact(kind, "x", "x-v004", metadata={})
    assert bind(obj, [mine], namespace="default", account="k1") == [mine]


def test_docker_images_bind_anywhere_by_name_tag_or_digest_first_artifact_winning() -> None:
    spec = {
        "containers": [
            {"name": "a", "image": "reg:5000/app:old"},
            {"name": "b", "image": "reg:5000/app@sha256:abc"},
            {"name": "c", "image": "reg:5000/app"},
            {"name": "d", "image": "reg:5000/application:1"},
        ]
    }
    obj = _deployment(spec)
    first = {"type": "docker/image", "name": "reg:5000/app", "reference": "reg:5000/app:2"}
    second = {**first, "reference": "reg:5000/app:3", "location": "elsewhere"}
    bound = bind(obj, [first, second], namespace="team", account="k1")
    images = [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]]
    assert images == ["reg:5000/app:2"] * 3 + ["reg:5000/application:1"]
    assert bound == [first]


def test_a_pod_cron_job_and_custom_template_bind_like_a_deployment() -> None:
    # Clouddriver binds only a Pod's container images; a Pod deployed with a versioned
    # ConfigMap would never start, so every pod spec binds every reference type here.
    env = [{"configMapRef": {"name": "cfg"}}]
    pod: dict[str, Any] = {
        "kind": "Pod",
        "spec": {"containers": [{"name": "a", "image": "app", "envFrom": env}]},
    }
    cron: dict[str, Any] = {
        "kind": "CronJob",
        "spec": {
            "jobTemplate": {
                "spec": {
                    "template": {
                        "spec": {"volumes": [{"name": "v", "secret": {"secretName": "s"}}]}
                    }
                }
            }
        },
    }
    artifacts = [
        _artifact("kubernetes/configMap", "cfg", "cfg-v001"),
        _artifact("kubernetes/secret", "s", "s-v002"),
        {"type": "docker/image", "name": "app", "reference": "app:7"},
    ]
    assert len(bind(pod, artifacts, namespace="default", account="k1")) == 2
    assert pod["spec"]["containers"][0] == {
        "name": "a",
        "image": "app:7",
        "envFrom": [{"configMapRef": {"name": "cfg-v001"}}],
    }
    bind(cron, artifacts, namespace="default", account="k1")
    volume = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "s-v002"


def test_an_hpa_binds_only_its_targets_kind_and_other_kinds_have_no_scale_target() -> None:
    deployment = _artifact("kubernetes/deployment", "web", "web-v001")
    replica_set = _artifact("kubernetes/replicaSet", "web", "web-v002")
    on_rs = _hpa("ReplicaSet", "web")
    assert bind(on_rs, [deployment, replica_set], namespace="default", account="k1") == [
        replica_set
    ]
    assert on_rs["spec"]["scaleTargetRef"]["name"] == "web-v002"
    on_sts = _hpa("StatefulSet", "web")
    assert bind(on_sts, [deployment, replica_set], namespace="default", account="k1") == []
    not_hpa = {**_hpa("Deployment", "web"), "kind": "VerticalPodAutoscaler"}
    assert bind(not_hpa, [deployment], namespace="default", account="k1") == []


def test_fields_that_are_not_names_or_not_there_are_left_alone() -> None:
    obj = _deployment(
        {
            "volumes": [{"name": "v", "configMap": {"name": None}}, "junk", {"name": "e"}],
            "containers": [{"name": "a", "envFrom": "junk", "env": [{"name": "E", "value": "x"}]}],
        }
    )
    before = copy.deepcopy(obj)
    artifacts = [_artifact("kubernetes/configMap", "x", "x-v1")]
    assert bind(obj, artifacts, namespace="default", account="k1") == []
    assert obj == before
    assert references({"kind": "Service", "spec": {"template": "no"}}) == set()


def test_upstream_bound_predicts_the_required_artifacts_a_deploy_binds() -> None:
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}
    workload = _deployment(
        {
            "containers": [
                {"name": "a", "image": "app", "envFrom": [{"configMapRef": {"name": "cfg"}}]}
            ]
        }
    )
    image = {"type": "docker/image", "name": "app", "reference": "app:2"}
    upstream_cfg = _artifact("kubernetes/configMap", "cfg", "cfg-v009")
    pool = {
        ("docker/image", "app", ""): image,
        ("kubernetes/configMap", "cfg", "default"): upstream_cfg,
    }
    bound = upstream_bound(
        [config, workload], pool, namespace_of=lambda obj: "default", account="k1"
    )
    # The deploy's own cfg replaces the upstream artifact of its key: only the image binds.
    assert bound == [image]
    assert workload["spec"]["template"]["spec"]["containers"][0]["image"] == "app"  # copies
    alone = upstream_bound([workload], pool, namespace_of=lambda obj: "default", account="k1")
    assert alone == [image, upstream_cfg]
