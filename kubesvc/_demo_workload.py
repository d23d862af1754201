"""The demo's cluster contents: a few applications over a few namespaces, a CRD and its
objects, and a thousand pods, loaded straight into a kubesim Cluster (no I/O).

Also the sample deploy the demo sends through ``POST /kubernetes/ops``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kubesim

__all__ = [
    "CRD_GROUP",
    "CRD_KIND",
    "DEPLOY_NAME",
    "DEPLOY_NAMESPACE",
    "Workload",
    "deploy_request",
    "load_workload",
    "total_objects",
]

CRD_GROUP = "demo.kubesvc.io"
CRD_KIND = "Widget"
DEPLOY_NAMESPACE = "demo-apps"
DEPLOY_NAME = "hello-kubesvc"
# namespace -> the applications running there (each: Deployment + Service + ConfigMap + Secret)
APPS: dict[str, tuple[str, ...]] = {
    "shop": ("storefront", "cart", "catalog"),
    "payments": ("ledger", "payments-api"),
    "platform": ("gateway", "auth"),
}


@dataclass(frozen=True, slots=True)
class Workload:
    namespaces: tuple[str, ...]
    deployments: int
    pods_loaded: int
    widgets: int


def _labels(app: str) -> dict[str, str]:
    return {"app": app, "app.kubernetes.io/managed-by": "spinnaker"}


def _deployment(namespace: str, app: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": app,
            "namespace": namespace,
            "labels": _labels(app),
            "annotations": {"moniker.spinnaker.io/application": app},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "containers": [
                        {
                            "name": app,
                            "image": f"registry.example.com/{app}:1.4.2",
                            "ports": [{"containerPort": 8080}],
                            "envFrom": [{"configMapRef": {"name": f"{app}-config"}}],
                        }
                    ]
                },
            },
        },
    }


def _service(namespace: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app, "namespace": namespace, "labels": _labels(app)},
        "spec": {
            "selector": {"app": app},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
        },
    }


def _configmap(namespace: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{app}-config", "namespace": namespace, "labels": _labels(app)},
        "data": {"LOG_LEVEL": "info", "FEATURE_FLAGS": "fast-checkout,new-search"},
    }


def _secret(namespace: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": f"{app}-credentials", "namespace": namespace, "labels": _labels(app)},
        # base64 of "not-a-real-password": the agent strips Secret data before sending anyway
        "data": {"password": "bm90LWEtcmVhbC1wYXNzd29yZA=="},
    }


def _crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{CRD_GROUP}"},
        "spec": {
            "group": CRD_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": CRD_KIND,
                "listKind": f"{CRD_KIND}List",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def _widget(namespace: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{CRD_GROUP}/v1",
        "kind": CRD_KIND,
        "metadata": {"name": f"widget-{index}", "namespace": namespace},
        "spec": {"size": index % 5 + 1, "color": ("red", "green", "blue")[index % 3]},
    }


def load_workload(sim: kubesim.Cluster, *, pods: int = 1000, widgets: int = 24) -> Workload:
    """Fill ``sim``: applications, a CRD with ``widgets`` objects, and ``pods`` bulk pods."""
    namespaces = (*APPS, DEPLOY_NAMESPACE)
    for namespace in namespaces:
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    deployments = 0
    for namespace, apps in APPS.items():
        for app in apps:
            for obj in (
                _configmap(namespace, app),
                _secret(namespace, app),
                _service(namespace, app),
                _deployment(namespace, app, replicas=2),
            ):
                sim.create(obj)
            deployments += 1
    sim.reconcile()  # the lite controllers make the ReplicaSets and pods of the Deployments
    sim.create(_crd())
    app_namespaces = list(APPS)
    for index in range(widgets):
        sim.create(_widget(app_namespaces[index % len(app_namespaces)], index))
    kubesim.load_pods(sim, pods, namespaces=[f"batch-{i}" for i in range(4)])
    return Workload(namespaces, deployments, pods, widgets)


def total_objects(sim: kubesim.Cluster) -> int:
    """How many objects kubesim holds, over every kind (CRD versions share one store)."""
    seen: set[tuple[str, str]] = set()
    total = 0
    for rtype in sim.registry:
        if rtype.key not in seen:
            seen.add(rtype.key)
            total += sim.count(rtype.group, rtype.plural)
    return total


def deploy_request(account: str) -> list[dict[str, Any]]:
    """The body of ``POST /kubernetes/ops`` for the sample deploy, as Orca sends it."""
    manifest = _deployment(DEPLOY_NAMESPACE, DEPLOY_NAME, replicas=2)
    manifest["spec"]["template"]["spec"]["containers"][0]["image"] = "nginx:1.27"
    del manifest["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    return [
        {
            "deployManifest": {
                "cloudProvider": "kubernetes",
                "account": account,
                "credentials": account,
                "source": "text",
                "manifests": [manifest],
                "moniker": {"app": DEPLOY_NAME},
                "namespaceOverride": DEPLOY_NAMESPACE,
                "enableTraffic": True,
                "skipExpressionEvaluation": True,
            }
        }
    ]
