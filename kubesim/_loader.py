"""Bulk loading: many realistic pods (about 4 KB of JSON each) straight into the store.

The pods look like what a Deployment's ReplicaSet makes on a real cluster: labels,
annotations, an owner reference, two containers with env, ports, probes and resources,
managedFields from the controller and the kubelet, and a Running status. They are committed
directly (one resourceVersion each, one ADDED event each), skipping the per-request checks,
so 100,000 of them load in seconds.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from kubesim._cluster import Cluster
from kubesim._controllers import pod_status
from kubesim._meta import new_uid, now_rfc3339

__all__ = ["load_pods", "realistic_pod"]

_APPS = ("checkout", "cart", "catalog", "payments", "search", "profile", "gateway", "ledger")


def _fields_spec() -> dict[str, Any]:
    container: dict[str, Any] = {
        "f:env": {'k:{"name":"LOG_LEVEL"}': {".": {}, "f:name": {}, "f:value": {}}},
        "f:image": {},
        "f:imagePullPolicy": {},
        "f:name": {},
        "f:ports": {'k:{"containerPort":8080,"protocol":"TCP"}': {".": {}, "f:containerPort": {}}},
        "f:resources": {"f:limits": {"f:memory": {}}, "f:requests": {"f:cpu": {}, "f:memory": {}}},
    }
    return {
        "f:metadata": {
            "f:generateName": {},
            "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}, "f:version": {}},
            "f:ownerReferences": {".": {}, 'k:{"uid":"x"}': {}},
        },
        "f:spec": {
            "f:containers": {
                'k:{"name":"app"}': container,
                'k:{"name":"sidecar"}': {"f:image": {}},
            },
            "f:dnsPolicy": {},
            "f:restartPolicy": {},
            "f:schedulerName": {},
        },
    }


_FIELDS_SPEC = _fields_spec()
_FIELDS_STATUS: dict[str, Any] = {
    "f:status": {
        "f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}, "f:type": {}}},
        "f:containerStatuses": {},
        "f:hostIP": {},
        "f:phase": {},
        "f:podIP": {},
        "f:startTime": {},
    }
}


def _container(name: str, image: str, index: int) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
        "env": [
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "POD_INDEX", "value": str(index)},
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
        ],
        "resources": {
            "limits": {"memory": "512Mi"},
            "requests": {"cpu": "100m", "memory": "256Mi"},
        },
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
            "periodSeconds": 10,
            "timeoutSeconds": 1,
            "successThreshold": 1,
            "failureThreshold": 3,
        },
        "volumeMounts": [
            {
                "name": "kube-api-access",
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "readOnly": True,
            },
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if name != "app":
        for field in ("readinessProbe", "volumeMounts", "env", "ports"):
            del container[field]
    return container


def realistic_pod(namespace: str, index: int, *, now: str | None = None) -> dict[str, Any]:
    """A Running pod of about 4 KB, named ``{app}-{hash}-{suffix}`` (no uid/rv yet)."""
    now = now or now_rfc3339()
    app = _APPS[index % len(_APPS)]
    rs_hash = f"{(index // 50) % 100000:05d}abcde"[:10]
    rs_name = f"{app}-{rs_hash}"
    name = f"{rs_name}-{index:07d}"
    spec: dict[str, Any] = {
        "containers": [
            _container("app", f"registry.example.com/{app}:1.{index % 7}.0", index),
            _container("sidecar", "registry.example.com/envoy:1.29.1", index),
        ],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "nodeName": f"node-{index % 20:02d}",
        "schedulerName": "default-scheduler",
        "volumes": [{"name": "kube-api-access", "projected": {"defaultMode": 420}}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "generateName": f"{rs_name}-",
            "namespace": namespace,
            "creationTimestamp": now,
            "labels": {
                "app": app,
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/part-of": "shop",
                "pod-template-hash": rs_hash,
                "version": f"1.{index % 7}.0",
                "team": "team-" + app[:3],
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "9090",
                "kubectl.kubernetes.io/restartedAt": "2024-05-01T10:00:00Z",
                "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": rs_name,
                    "uid": "00000000-0000-0000-0000-" + rs_hash.rjust(12, "0"),
                    "controller": True,
                    "blockOwnerDeletion": True,
                },
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": now,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _FIELDS_SPEC,
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": now,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": _FIELDS_STATUS,
                    "subresource": "status",
                },
            ],
        },
        "spec": spec,
        "status": pod_status(spec, now, f"10.{index >> 16 & 255}.{index >> 8 & 255}.{index & 255}"),
    }


def load_pods(
    cluster: Cluster, count: int, namespaces: Sequence[str] | int = ("default",)
) -> list[str]:
    """Add ``count`` realistic pods spread over ``namespaces`` (names, or how many
    ``load-N`` namespaces to make); missing namespaces are created. Returns the pod names.

    Bypasses the controllers (the pods' owner ReplicaSets are not created).
    """
    if isinstance(namespaces, int):
        namespaces = [f"load-{i}" for i in range(max(1, namespaces))]
    ns_type = cluster.resolve("", "v1", "namespaces")
    for namespace in namespaces:
        if ("", namespace) not in cluster.store(ns_type).objects:
            cluster.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
    pods = cluster.resolve("", "v1", "pods")
    start = cluster.count("", "pods")
    now = now_rfc3339()
    names: list[str] = []
    for offset in range(count):
        index = start + offset
        pod = realistic_pod(namespaces[index % len(namespaces)], index, now=now)
        pod["metadata"]["uid"] = new_uid()
        # A unique suffix keeps repeated loads from colliding on names.
        pod["metadata"]["name"] += "-" + secrets.token_hex(2)
        cluster.commit(pods, pod, added=True, controlled=False)
        names.append(pod["metadata"]["name"])
    return names
