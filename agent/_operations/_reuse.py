"""Version reuse and config references: what a versioned deploy binds to. Pure.

Reuse (Clouddriver's ``ResourceVersioner.findMatchingVersion``): a versioned manifest whose
content equals an existing version's is not written again; the deploy answers that version.
Content is the object less ``metadata`` (``KubernetesManifest.nonMetadataEquals``). The new
manifest is compared AS GIVEN (its artifacts and config references bound, nothing of
kubesvc's added: no moniker labels, template annotations, traffic labels or source capacity),
with what that version was applied from: its ``kubectl.kubernetes.io/last-applied-
configuration``, else (a server-side apply leaves none) the live object less ``metadata`` and
``status``. Kinds with a pod template never reuse: Clouddriver compares before it labels the
template, so its comparison never matches them, and their live state (disabled: traffic
labels patched away; scaled to 0) is not in what they were applied from, so a match would
answer a version that serves nothing. In effect reuse is for ConfigMaps, Secrets and other
template-less kinds. When several match, the newest wins (Clouddriver takes the first its
cache lists: no order is promised).

References (Clouddriver's ``Replacer``s): a ConfigMap or Secret this deploy wrote (or reused)
as ``<base>-vNNN`` replaces ``<base>`` where later manifests of the same namespace name it
(volumes, projected sources, ``envFrom``, ``env[].valueFrom``), and so does a
``kubernetes/configMap`` / ``kubernetes/secret`` artifact from upstream stages whose location
is that namespace and whose account is this one or unset (``ArtifactReplacer``'s filter). A
HorizontalPodAutoscaler's ``spec.scaleTargetRef`` is bound the same way to a versioned
ReplicaSet or Deployment (``HPA_REPLICA_SET`` / ``HPA_DEPLOYMENT``); HPAs deploy after
workloads (``WORKLOAD_ATTACHMENT_PRIORITY``), so the names are known by then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._manifests import LAST_APPLIED, annotations_of, pod_specs, version_of

__all__ = [
    "BINDABLE",
    "artifact_names",
    "bind_config_refs",
    "bind_scale_target",
    "config_refs",
    "content_of",
    "matching_version",
]

# Artifact types that bind by name, and the kind each stands for.
BINDABLE = {
    "kubernetes/configMap": "ConfigMap",
    "kubernetes/secret": "Secret",
    "kubernetes/replicaSet": "ReplicaSet",
    "kubernetes/deployment": "Deployment",
}


def content_of(existing: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``existing`` was applied from, less metadata; None when unreadable."""
    raw = annotations_of(existing).get(LAST_APPLIED)
    if raw:
        try:
            applied = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(applied, dict):
            return None
        return {k: v for k, v in applied.items() if k != "metadata"}
    return {k: v for k, v in existing.items() if k not in ("metadata", "status")}


def matching_version(
    given: Mapping[str, Any],
    versions: Iterable[Mapping[str, Any]],
    base: str,
) -> tuple[int, Mapping[str, Any]] | None:
    """The newest of ``versions`` whose content equals ``given`` (the manifest as given,
    before kubesvc's additions), with its number; None when none does or ``given`` has a pod
    template (see the module's docstring)."""
    if pod_specs(dict(given)):
        return None
    wanted = {k: v for k, v in given.items() if k != "metadata"}
    found: list[tuple[int, Mapping[str, Any]]] = []
    for existing in versions:
        number = version_of(existing, base)
        if number is None:
            continue
        if content_of(existing) == wanted:
            found.append((number, existing))
    return max(found, key=lambda f: f[0]) if found else None


# (kind, base name) -> the versioned name this deploy bound it to.
ConfigNames = Mapping[tuple[str, str], str]


def _config_slots(obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str, str]]:
    """Each (holder, key, kind) where ``obj``'s pod specs name a ConfigMap or Secret."""

    def slot(holder: Any, key: str, kind: str) -> Iterator[tuple[dict[str, Any], str, str]]:
        if isinstance(holder, dict) and isinstance(holder.get(key), str):
            yield holder, key, kind

    for spec in pod_specs(obj):
        for volume in spec.get("volumes") or ():
            if not isinstance(volume, dict):
                continue
            yield from slot(volume.get("configMap"), "name", "ConfigMap")
            yield from slot(volume.get("secret"), "secretName", "Secret")
            projected = volume.get("projected")
            sources = projected.get("sources") if isinstance(projected, dict) else None
            for source in sources or ():
                if isinstance(source, dict):
                    yield from slot(source.get("configMap"), "name", "ConfigMap")
                    yield from slot(source.get("secret"), "name", "Secret")
        for key in ("containers", "initContainers", "ephemeralContainers"):
            for container in spec.get(key) or ():
                if not isinstance(container, dict):
                    continue
                for source in container.get("envFrom") or ():
                    if isinstance(source, dict):
                        yield from slot(source.get("configMapRef"), "name", "ConfigMap")
                        yield from slot(source.get("secretRef"), "name", "Secret")
                for env in container.get("env") or ():
                    value_from = env.get("valueFrom") if isinstance(env, dict) else None
                    if isinstance(value_from, dict):
                        yield from slot(value_from.get("configMapKeyRef"), "name", "ConfigMap")
                        yield from slot(value_from.get("secretKeyRef"), "name", "Secret")


def bind_config_refs(obj: dict[str, Any], names: ConfigNames) -> None:
    """Point ``obj``'s pod specs at the versioned ConfigMaps/Secrets in ``names`` (in place)."""
    if not names:
        return
    for holder, key, kind in list(_config_slots(obj)):
        holder[key] = names.get((kind, holder[key]), holder[key])


def config_refs(obj: dict[str, Any]) -> set[tuple[str, str]]:
    """The (kind, name) of every ConfigMap and Secret ``obj``'s pod specs name."""
    return {(kind, holder[key]) for holder, key, kind in _config_slots(obj)}


def artifact_names(
    artifacts: Iterable[Mapping[str, Any]], *, namespace: str, account: str
) -> dict[tuple[str, str], Mapping[str, Any]]:
    """(kind, name) -> the upstream ``kubernetes/*`` artifact that binds it in ``namespace``."""
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for artifact in artifacts:
        kind = BINDABLE.get(str(artifact.get("type") or ""))
        name, reference = artifact.get("name"), artifact.get("reference")
        if kind is None or not isinstance(name, str) or not isinstance(reference, str):
            continue
        meta = artifact.get("metadata")
        owner = meta.get("account") if isinstance(meta, Mapping) else None
        if str(artifact.get("location") or "") != namespace or owner not in (None, "", account):
            continue
        found.setdefault((kind, name), artifact)
    return found


def bind_scale_target(obj: dict[str, Any], names: ConfigNames) -> tuple[str, str] | None:
    """Point an HPA's ``spec.scaleTargetRef`` at its versioned ReplicaSet/Deployment in
    ``names`` (in place); the (kind, base name) it bound, else None."""
    if str(obj.get("kind") or "") != "HorizontalPodAutoscaler":
        return None
    spec = obj.get("spec")
    target = spec.get("scaleTargetRef") if isinstance(spec, dict) else None
    if not isinstance(target, dict) or not isinstance(target.get("name"), str):
        return None
    kind = {"replicaset": "ReplicaSet", "deployment": "Deployment"}.get(
        str(target.get("kind") or "").lower()
    )
    key = (kind or "", target["name"])
    if kind is None or key not in names:
        return None
    target["name"] = names[key]
    return key
