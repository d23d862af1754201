"""The client-side apply cases recorded from real kubectl (``record_kubectl_apply.py``).

Each case is steps run in order against a fresh kubesim: ``Apply`` applies manifests as
``kubectl apply -f`` does (and, at test time, as the agent's apply does), ``Kubectl`` runs a
kubectl command that edits the objects as someone else would (``set env``, ``patch``,
``label``, ``scale``, ``create``...; its requests are recorded and replayed as they were
sent). ``target`` is the object whose final state is recorded and compared.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from tests._widgets import widget_crd

__all__ = ["CASES", "Apply", "Case", "Kubectl"]

NS = "default"
DEPLOY = "deployment/web"


@dataclass(frozen=True)
class Apply:
    manifests: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class Kubectl:
    args: tuple[str, ...]
    manifest: dict[str, Any] | None = None  # given as the file of "-f" (create, replace)


@dataclass(frozen=True)
class Case:
    name: str
    about: str
    steps: tuple[Apply | Kubectl, ...]
    target: str  # the URL path of the object recorded at the end


def container(name: str = "web", image: str = "nginx:1", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def deployment(
    *containers: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    pod: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """Deployment ``web`` in ``default``: ``containers`` (one nginx:1 by default), ``pod``
    added to the pod spec, ``spec`` to the Deployment's spec."""
    metadata: dict[str, Any] = {"name": "web", "namespace": NS, "labels": labels or {"app": "web"}}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": list(containers or [container()]), **(pod or {})},
            },
            **spec,
        },
    }


def service(*ports: dict[str, Any], selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"selector": selector or {"app": "web"}, "ports": list(ports)},
    }


def config_map(data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "web", "namespace": NS, **metadata},
        "data": data,
    }


WIDGET_CRD = widget_crd()


def widget(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w", "namespace": NS},
        "spec": spec,
    }


def strategic(patch: dict[str, Any], target: str = DEPLOY) -> Kubectl:
    return Kubectl(("patch", target, "--type=strategic", "-p", json.dumps(patch)))


def json_patch(ops: list[dict[str, Any]], target: str = DEPLOY) -> Kubectl:
    return Kubectl(("patch", target, "--type=json", "-p", json.dumps(ops)))


def merge(patch: dict[str, Any], target: str) -> Kubectl:
    return Kubectl(("patch", target, "--type=merge", "-p", json.dumps(patch)))


def pod_spec_patch(**fields: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": fields}}}


DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/default/deployments/web"
SERVICE_PATH = "/api/v1/namespaces/default/services/web"
CONFIG_MAP_PATH = "/api/v1/namespaces/default/configmaps/web"
WIDGET_PATH = "/apis/example.com/v1/namespaces/default/widgets/w"

ENV_A = {"name": "A", "value": "1"}
ENV_B = {"name": "B", "value": "2"}
SIDECAR = container("istio-proxy", "istio/proxyv2:1.22", args=["proxy", "sidecar"])
TOLERATE_A = {"key": "a", "operator": "Exists", "effect": "NoSchedule"}
TOLERATE_B = {"key": "b", "operator": "Exists", "effect": "NoSchedule"}
TOLERATE_C = {"key": "c", "operator": "Equal", "value": "x", "effect": "NoExecute"}
CONFIG_VOLUME = {"name": "config", "configMap": {"name": "web-config"}}
SCRATCH_VOLUME = {"name": "scratch", "emptyDir": {}}
WEBHOOK_VOLUME = {"name": "certs", "secret": {"secretName": "webhook-certs"}}


def _case(name: str, about: str, *steps: Apply | Kubectl, target: str = DEPLOYMENT_PATH) -> Case:
    frozen = tuple(
        Apply(tuple(copy.deepcopy(m) for m in s.manifests)) if isinstance(s, Apply) else s
        for s in steps
    )
    return Case(name, about, frozen, target)


def _apply(*manifests: dict[str, Any]) -> Apply:
    return Apply(manifests)


CASES: tuple[Case, ...] = (
    _case(
        "set_env_entry_survives_image_change",
        "kubectl set env adds an entry; the next apply changes the image and keeps it",
        _apply(deployment(container(env=[ENV_A]))),
        Kubectl(("set", "env", DEPLOY, "FOREIGN=yes")),
        _apply(deployment(container(image="nginx:2", env=[ENV_A]))),
    ),
    _case(
        "set_env_changes_our_entry_apply_sets_it_back",
        "kubectl set env changes an entry the manifest owns; apply sets the manifest's value",
        _apply(deployment(container(env=[ENV_A]))),
        Kubectl(("set", "env", DEPLOY, "A=changed", "OTHER=x")),
        _apply(deployment(container(env=[ENV_A]))),
    ),
    _case(
        "env_entry_removed_from_manifest",
        "an env entry dropped from the manifest is deleted; a foreign one stays",
        _apply(deployment(container(env=[ENV_A, ENV_B]))),
        Kubectl(("set", "env", DEPLOY, "FOREIGN=yes")),
        _apply(deployment(container(env=[ENV_A]))),
    ),
    _case(
        "env_reordered",
        "the manifest reorders its env entries; the foreign one keeps its place",
        _apply(deployment(container(env=[ENV_A, ENV_B]))),
        Kubectl(("set", "env", DEPLOY, "FOREIGN=yes")),
        _apply(deployment(container(env=[ENV_B, ENV_A]))),
    ),
    _case(
        "env_value_becomes_value_from",
        "an env entry switches from value to valueFrom",
        _apply(deployment(container(env=[ENV_A]))),
        _apply(
            deployment(
                container(
                    env=[
                        {
                            "name": "A",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        }
                    ]
                )
            )
        ),
    ),
    _case(
        "injected_sidecar_survives_redeploy",
        "a mutating webhook's sidecar container stays when the image changes",
        _apply(deployment()),
        strategic(pod_spec_patch(containers=[SIDECAR])),
        _apply(deployment(container(image="nginx:2"))),
    ),
    _case(
        "second_container_added_beside_sidecar",
        "the manifest adds a container; the injected sidecar stays where it was",
        _apply(deployment()),
        strategic(pod_spec_patch(containers=[SIDECAR])),
        _apply(deployment(container(), container("log", "busybox:1"))),
    ),
    _case(
        "container_removed_from_manifest",
        "a container dropped from the manifest is deleted; the injected sidecar stays",
        _apply(deployment(container(), container("log", "busybox:1"))),
        strategic(pod_spec_patch(containers=[SIDECAR])),
        _apply(deployment(container())),
    ),
    _case(
        "webhook_added_volume_survives",
        "a volume and mount added by a webhook (JSON patch) stay when the image changes",
        _apply(deployment(pod={"volumes": [CONFIG_VOLUME]})),
        json_patch(
            [
                {"op": "add", "path": "/spec/template/spec/volumes/-", "value": WEBHOOK_VOLUME},
                {
                    "op": "add",
                    "path": "/spec/template/spec/containers/0/volumeMounts",
                    "value": [{"name": "certs", "mountPath": "/certs"}],
                },
            ]
        ),
        _apply(deployment(container(image="nginx:2"), pod={"volumes": [CONFIG_VOLUME]})),
    ),
    _case(
        "volume_source_switched",
        "a volume keeps its name and switches source: retainKeys drops the old source",
        _apply(deployment(pod={"volumes": [CONFIG_VOLUME]})),
        _apply(deployment(pod={"volumes": [{"name": "config", "emptyDir": {}}]})),
    ),
    _case(
        "volume_removed_from_manifest",
        "a volume dropped from the manifest is deleted; a webhook's stays",
        _apply(deployment(pod={"volumes": [CONFIG_VOLUME, SCRATCH_VOLUME]})),
        strategic(pod_spec_patch(volumes=[WEBHOOK_VOLUME])),
        _apply(deployment(pod={"volumes": [CONFIG_VOLUME]})),
    ),
    _case(
        "volume_mounts_merge_by_mount_path",
        "a foreign volumeMount stays; the manifest adds one and drops one",
        _apply(
            deployment(
                container(
                    volumeMounts=[
                        {"name": "config", "mountPath": "/etc/config"},
                        {"name": "scratch", "mountPath": "/scratch"},
                    ]
                ),
                pod={"volumes": [CONFIG_VOLUME, SCRATCH_VOLUME]},
            )
        ),
        strategic(
            pod_spec_patch(
                containers=[
                    {"name": "web", "volumeMounts": [{"name": "certs", "mountPath": "/certs"}]}
                ],
                volumes=[WEBHOOK_VOLUME],
            )
        ),
        _apply(
            deployment(
                container(
                    volumeMounts=[
                        {"name": "config", "mountPath": "/etc/config"},
                        {"name": "config", "mountPath": "/etc/config2", "subPath": "x"},
                    ]
                ),
                pod={"volumes": [CONFIG_VOLUME, SCRATCH_VOLUME]},
            )
        ),
    ),
    _case(
        "container_port_renamed",
        "a container port keeps its number and changes its name (merged by containerPort)",
        _apply(deployment(container(ports=[{"name": "http", "containerPort": 8080}]))),
        _apply(deployment(container(ports=[{"name": "web", "containerPort": 8080}]))),
    ),
    _case(
        "container_port_number_changed",
        "a container port changes number: the old one is deleted, a foreign one stays",
        _apply(deployment(container(ports=[{"name": "http", "containerPort": 8080}]))),
        strategic(
            pod_spec_patch(
                containers=[{"name": "web", "ports": [{"name": "metrics", "containerPort": 9102}]}]
            )
        ),
        _apply(deployment(container(ports=[{"name": "http", "containerPort": 9090}]))),
    ),
    _case(
        "init_containers",
        "an init container's image changes; a foreign init container stays",
        _apply(deployment(pod={"initContainers": [container("init", "busybox:1")]})),
        strategic(pod_spec_patch(initContainers=[container("istio-init", "istio/init:1")])),
        _apply(deployment(pod={"initContainers": [container("init", "busybox:2")]})),
    ),
    _case(
        "tolerations_replaced_whole",
        "tolerations have no merge key: a changed list replaces the live one, foreign included",
        _apply(deployment(pod={"tolerations": [TOLERATE_A]})),
        strategic(pod_spec_patch(tolerations=[TOLERATE_A, TOLERATE_B])),
        _apply(deployment(pod={"tolerations": [TOLERATE_A, TOLERATE_C]})),
    ),
    _case(
        "tolerations_unchanged_in_manifest_still_reset",
        "tolerations the manifest did not change are still reset to it (the list differs live)",
        _apply(deployment(pod={"tolerations": [TOLERATE_A]})),
        strategic(pod_spec_patch(tolerations=[TOLERATE_A, TOLERATE_B])),
        _apply(deployment(container(image="nginx:2"), pod={"tolerations": [TOLERATE_A]})),
    ),
    _case(
        "args_list_replaced",
        "a scalar list without a strategy (args) is replaced",
        _apply(deployment(container(args=["--a", "--b"]))),
        _apply(deployment(container(args=["--b", "--a", "--c"]))),
    ),
    _case(
        "image_pull_secrets_merge_by_name",
        "imagePullSecrets merge by name: a foreign one stays, a dropped one goes",
        _apply(deployment(pod={"imagePullSecrets": [{"name": "a"}, {"name": "b"}]})),
        strategic(pod_spec_patch(imagePullSecrets=[{"name": "foreign"}])),
        _apply(deployment(pod={"imagePullSecrets": [{"name": "a"}]})),
    ),
    _case(
        "probe_handler_switched",
        "a liveness probe switches from httpGet to tcpSocket (nested map deletions)",
        _apply(
            deployment(
                container(livenessProbe={"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5})
            )
        ),
        _apply(deployment(container(livenessProbe={"tcpSocket": {"port": 80}}))),
    ),
    _case(
        "resources_changed",
        "limits change and requests are dropped from the manifest",
        _apply(
            deployment(container(resources={"limits": {"cpu": "1"}, "requests": {"cpu": "500m"}}))
        ),
        _apply(deployment(container(resources={"limits": {"cpu": "2", "memory": "1Gi"}}))),
    ),
    _case(
        "strategy_switched_to_recreate",
        "a Deployment's strategy (retainKeys) switches to Recreate: rollingUpdate is dropped",
        _apply(
            deployment(
                strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2}},
            )
        ),
        _apply(deployment(strategy={"type": "Recreate"})),
    ),
    _case(
        "scaled_replicas_reset_by_manifest",
        "kubectl scale changes replicas; the manifest still says 1, so apply sets it back",
        _apply(deployment()),
        Kubectl(("scale", DEPLOY, "--replicas=3")),
        _apply(deployment(container(image="nginx:2"))),
    ),
    _case(
        "annotations_removed",
        "an annotation dropped from the manifest is removed; a foreign one stays",
        _apply(deployment(annotations={"team": "a", "owner": "b"})),
        Kubectl(("annotate", DEPLOY, "foreign=yes")),
        _apply(deployment(annotations={"team": "a"})),
    ),
    _case(
        "labels_changed",
        "labels change and one is dropped; a foreign label stays",
        _apply(deployment(labels={"app": "web", "tier": "front", "old": "x"})),
        Kubectl(("label", DEPLOY, "foreign=yes")),
        _apply(deployment(labels={"app": "web", "tier": "back"})),
    ),
    _case(
        "last_applied_missing",
        "an object created without apply: apply deletes nothing it never applied",
        Kubectl(("create", "-f", "-"), deployment(container(env=[ENV_A, ENV_B]))),
        Kubectl(("set", "env", DEPLOY, "FOREIGN=yes")),
        _apply(deployment(container(image="nginx:2", env=[ENV_A]))),
    ),
    _case(
        "finalizers_merge_as_a_set",
        "finalizers merge as a set: a dropped one goes ($deleteFromPrimitiveList), a foreign "
        "one stays",
        _apply(config_map({"a": "1"}, finalizers=["example.com/a", "example.com/b"])),
        merge({"metadata": {"finalizers": ["example.com/a", "example.com/b", "x/y"]}}, "cm/web"),
        _apply(config_map({"a": "1"}, finalizers=["example.com/a"])),
        target=CONFIG_MAP_PATH,
    ),
    _case(
        "config_map_data",
        "ConfigMap data: a key changes, one is dropped, a foreign one stays",
        _apply(config_map({"a": "1", "b": "2"})),
        merge({"data": {"foreign": "x"}}, "cm/web"),
        _apply(config_map({"a": "changed"})),
        target=CONFIG_MAP_PATH,
    ),
    _case(
        "service_ports_merge_by_port",
        "a Service port changes its target; a foreign port stays",
        _apply(service({"name": "http", "port": 80, "targetPort": 8080})),
        strategic({"spec": {"ports": [{"name": "https", "port": 443}]}}, "svc/web"),
        _apply(service({"name": "http", "port": 80, "targetPort": 9090})),
        target=SERVICE_PATH,
    ),
    _case(
        "service_port_removed",
        "a Service port dropped from the manifest is deleted",
        _apply(service({"name": "http", "port": 80}, {"name": "admin", "port": 81})),
        _apply(service({"name": "http", "port": 80})),
        target=SERVICE_PATH,
    ),
    _case(
        "service_selector_changed",
        "a Service's selector (a map) changes a key and drops another",
        _apply(service({"port": 80}, selector={"app": "web", "tier": "front"})),
        _apply(service({"port": 80}, selector={"app": "web2"})),
        target=SERVICE_PATH,
    ),
    _case(
        "custom_resource_list_replaced",
        "a custom resource takes a JSON merge patch: its list is replaced, a foreign field stays",
        Kubectl(("create", "-f", "-"), WIDGET_CRD),
        _apply(widget({"items": ["a", "b"], "size": 1})),
        merge({"spec": {"items": ["a", "b", "foreign"], "extra": "x"}}, "widget/w"),
        _apply(widget({"items": ["a"], "size": 2})),
        target=WIDGET_PATH,
    ),
    _case(
        "custom_resource_field_removed",
        "a field dropped from a custom resource's manifest is removed; a foreign one stays",
        Kubectl(("create", "-f", "-"), WIDGET_CRD),
        _apply(widget({"a": {"x": 1, "y": 2}, "b": True})),
        merge({"spec": {"a": {"z": 3}, "c": "foreign"}}, "widget/w"),
        _apply(widget({"a": {"x": 1}})),
        target=WIDGET_PATH,
    ),
)
