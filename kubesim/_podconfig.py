"""The kubelet-lite's check of the ConfigMaps and Secrets a pod needs before it can start.

What a real kubelet does, and kubesim plays: it mounts the volumes first, so a configMap or
secret volume (or projected source) naming an object that does not exist, and not marked
``optional``, leaves the pod Pending with its containers waiting in ``ContainerCreating`` and
a ``FailedMount`` event. Then it builds each container's environment: a missing ConfigMap or
Secret named by ``envFrom`` or ``env[].valueFrom`` (or a missing key of a ``*KeyRef``), not
``optional``, leaves that container waiting with reason ``CreateContainerConfigError`` and a
``Failed`` event. (A real pod whose other containers start would be Running; kubesim holds
the whole pod Pending, which is what a deploy's stability check needs to see.)

The kubelet retries until the object appears; kubesim retries when a ConfigMap or Secret is
written in the pod's namespace (``Cluster`` marks the pods it holds back dirty again).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = ["ConfigProblem", "config_problem", "pending_status"]

_KINDS = {
    "configMap": ("ConfigMap", "configmaps", "configmap"),
    "secret": ("Secret", "secrets", "secret"),
}


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """Why a pod cannot start: the event to record, and per container (by name) the
    waiting reason and message its status shows."""

    event_reason: str  # FailedMount or Failed
    event_message: str
    init: bool  # the blocked container is an init container
    waiting: dict[str, tuple[str, str]]  # container name -> (reason, message)


def _optional(ref: Any) -> bool:
    return isinstance(ref, dict) and ref.get("optional") is True


def _keys(obj: dict[str, Any]) -> set[str]:
    keys: set[str] = set()
    for field in ("data", "binaryData", "stringData"):
        value = obj.get(field)
        if isinstance(value, dict):
            keys.update(value)
    return keys


def _volume_refs(spec: dict[str, Any]) -> Iterator[tuple[str, str, str, bool]]:
    """(volume name, "configMap" | "secret", object name, optional) per volume reference."""
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, dict):
            continue
        label = str(volume.get("name") or "")
        config, secret = volume.get("configMap"), volume.get("secret")
        if isinstance(config, dict) and config.get("name"):
            yield label, "configMap", str(config["name"]), _optional(config)
        if isinstance(secret, dict) and secret.get("secretName"):
            yield label, "secret", str(secret["secretName"]), _optional(secret)
        projected = volume.get("projected")
        for source in (projected.get("sources") if isinstance(projected, dict) else None) or ():
            if not isinstance(source, dict):
                continue
            for kind in ("configMap", "secret"):
                ref = source.get(kind)
                if isinstance(ref, dict) and ref.get("name"):
                    yield label, kind, str(ref["name"]), _optional(ref)


def _env_refs(container: dict[str, Any]) -> Iterator[tuple[str, str, str | None, bool]]:
    """("configMap" | "secret", object name, key or None, optional) per env reference."""
    for source in container.get("envFrom") or ():
        if not isinstance(source, dict):
            continue
        for kind, field in (("configMap", "configMapRef"), ("secret", "secretRef")):
            ref = source.get(field)
            if isinstance(ref, dict) and ref.get("name"):
                yield kind, str(ref["name"]), None, _optional(ref)
    for env in container.get("env") or ():
        value_from = env.get("valueFrom") if isinstance(env, dict) else None
        if not isinstance(value_from, dict):
            continue
        for kind, field in (("configMap", "configMapKeyRef"), ("secret", "secretKeyRef")):
            ref = value_from.get(field)
            if isinstance(ref, dict) and ref.get("name"):
                yield kind, str(ref["name"]), str(ref.get("key") or ""), _optional(ref)


class _Lookup:
    """The pod namespace's ConfigMaps and Secrets, each read at most once."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.found: dict[tuple[str, str], dict[str, Any] | None] = {}

    def __call__(self, kind: str, name: str) -> dict[str, Any] | None:
        key = (kind, name)
        if key not in self.found:
            rtype = self.cluster.resolve("", "v1", _KINDS[kind][1])
            stored = self.cluster.store(rtype).objects.get((self.namespace, name))
            self.found[key] = stored.decode() if stored is not None else None
        return self.found[key]


def config_problem(cluster: Cluster, namespace: str, spec: dict[str, Any]) -> ConfigProblem | None:
    """What keeps a pod of ``spec`` in ``namespace`` from starting, or None."""
    lookup = _Lookup(cluster, namespace)
    names = [
        str(c.get("name") or "app") for c in spec.get("containers") or () if isinstance(c, dict)
    ]
    for volume, kind, name, optional in _volume_refs(spec):
        if not optional and lookup(kind, name) is None:
            message = f'{_KINDS[kind][2]} "{name}" not found'
            return ConfigProblem(
                "FailedMount",
                f'MountVolume.SetUp failed for volume "{volume}" : {message}',
                False,
                {c: ("ContainerCreating", "") for c in names},
            )
    for init, key in ((True, "initContainers"), (False, "containers")):
        waiting: dict[str, tuple[str, str]] = {}
        first = ""
        for container in spec.get(key) or ():
            if not isinstance(container, dict):
                continue
            for kind, name, wanted, optional in _env_refs(container):
                obj = lookup(kind, name)
                if obj is None:
                    message = f'{_KINDS[kind][2]} "{name}" not found'
                elif wanted and wanted not in _keys(obj):
                    message = f"couldn't find key {wanted} in {_KINDS[kind][0]} {namespace}/{name}"
                else:
                    continue
                if optional:
                    continue
                waiting[str(container.get("name") or "app")] = (
                    "CreateContainerConfigError",
                    message,
                )
                first = first or message
                break
        if waiting:
            if init:  # the app containers wait for the init containers to finish
                waiting.update({c: ("PodInitializing", "") for c in names})
            else:
                waiting = {c: waiting.get(c, ("ContainerCreating", "")) for c in names} | waiting
            return ConfigProblem("Failed", f"Error: {first}", init, waiting)
    return None


def _container_status(container: dict[str, Any], waiting: tuple[str, str]) -> dict[str, Any]:
    reason, message = waiting
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {
        "name": container.get("name", "app"),
        "ready": False,
        "restartCount": 0,
        "started": False,
        "image": container.get("image", ""),
        "imageID": "",
        "state": {"waiting": state},
    }


def pending_status(
    spec: dict[str, Any], now: str, ip: str, problem: ConfigProblem
) -> dict[str, Any]:
    """A Pending pod status for ``spec`` held back by ``problem``, as a kubelet reports it
    (no pod IP while a volume cannot be mounted: the sandbox is not ready)."""
    mounted = problem.event_reason != "FailedMount"
    names = [str(c.get("name") or "app") for c in spec.get("containers") or ()]
    conditions: list[dict[str, Any]] = []
    for kind, ok in (
        ("PodReadyToStartContainers", mounted),
        ("Initialized", not problem.init),
        ("Ready", False),
        ("ContainersReady", False),
        ("PodScheduled", True),
    ):
        condition: dict[str, Any] = {
            "type": kind,
            "status": "True" if ok else "False",
            "lastProbeTime": None,
            "lastTransitionTime": now,
        }
        if kind in ("Ready", "ContainersReady"):
            condition["reason"] = "ContainersNotReady"
            condition["message"] = f"containers with unready status: [{' '.join(names)}]"
        elif kind == "Initialized" and not ok:
            condition["reason"] = "ContainersNotInitialized"
        conditions.append(condition)
    status: dict[str, Any] = {
        "phase": "Pending",
        "conditions": conditions,
        "hostIP": "10.0.0.10",
        "hostIPs": [{"ip": "10.0.0.10"}],
        "startTime": now,
        "containerStatuses": [
            _container_status(
                c, problem.waiting.get(str(c.get("name") or "app"), ("ContainerCreating", ""))
            )
            for c in spec.get("containers") or ()
        ],
        "qosClass": "BestEffort",
    }
    if mounted:
        status["podIP"] = ip
        status["podIPs"] = [{"ip": ip}]
    if spec.get("initContainers"):
        status["initContainerStatuses"] = [
            _container_status(
                c, problem.waiting.get(str(c.get("name") or "app"), ("PodInitializing", ""))
            )
            for c in spec["initContainers"]
        ]
    return status
