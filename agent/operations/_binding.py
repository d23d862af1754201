"""Artifact binding, sans-I/O: Clouddriver's ``Replacer``s as a table of reference paths.

Theory of operation. A deploy binds artifacts into each manifest just before it is versioned
and applied (Clouddriver's ``KubernetesDeployManifestOperation``). The artifacts it binds are
a pool keyed by (type, name, location): the stage's required, then optional artifacts (the
first of a key wins), and, as each manifest is deployed, that manifest as an artifact of its
kind (``kubernetes/configMap`` named ``web-config``, reference ``web-config-v000``), which
replaces an upstream artifact of the same key. Manifests deploy in :func:`deploy_order`, so a
ConfigMap or Secret is in the pool before the workloads that name it, and a workload before
the HorizontalPodAutoscaler that scales it.

A :class:`Replacer` is one kind of reference: an artifact type and the path of the fields
that hold a name. A field binds when the name it holds is the artifact's ``name`` (a docker
image also with a tag or digest); it is then set to the artifact's ``reference``. Kubernetes
artifacts bind only into manifests of their own namespace (``location``) and of their account
(``metadata.account``, or none), docker images anywhere (``ArtifactReplacer.filterArtifacts``).

The table is Clouddriver's (``Replacer.java``), with one deliberate widening: Clouddriver's
pod-spec paths start at ``..spec.template.spec``, so a bare Pod binds only the images of its
``containers``, and only an exact ``name``; here every pod spec (a Pod's own, a template's, a
CronJob's job template's) binds every pod-spec reference the same way, because a Pod deployed
with a versioned ConfigMap would otherwise never start. Clouddriver binds no other paths:
``imagePullSecrets``, ``serviceAccountName`` and PersistentVolumeClaim names are left alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ._manifests import pod_specs

__all__ = [
    "ARTIFACT_KINDS",
    "REPLACERS",
    "ArtifactKey",
    "Replacer",
    "artifact_key",
    "bind",
    "own_artifact_key",
    "references",
    "required_key",
    "upstream_bound",
]

DOCKER_IMAGE = "docker/image"
CONFIG_MAP = "kubernetes/configMap"
SECRET = "kubernetes/secret"
DEPLOYMENT = "kubernetes/deployment"
REPLICA_SET = "kubernetes/replicaSet"
# Clouddriver's KubernetesArtifactType less docker: the kind each type stands for.
ARTIFACT_KINDS = {
    CONFIG_MAP: "ConfigMap",
    SECRET: "Secret",
    DEPLOYMENT: "Deployment",
    REPLICA_SET: "ReplicaSet",
}

# A path step: a key, a tuple of keys (each of them), or "*" (every item of a list).
Step = str | tuple[str, ...]
_CONTAINERS = ("containers", "initContainers")


@dataclass(frozen=True, slots=True)
class Replacer:
    """One kind of reference: fields at ``path`` (from each pod spec of a manifest, or from
    the manifest itself) name an artifact of ``artifact_type``. ``kinds`` limits an
    ``object`` replacer to manifests of those kinds; ``guard`` is a (path, values) the
    manifest must hold (an HPA's target kind)."""

    name: str  # Clouddriver's, e.g. configMapVolume
    artifact_type: str
    root: Literal["pod-spec", "object"]
    path: tuple[Step, ...]
    kinds: frozenset[str] = frozenset()
    guard: tuple[tuple[str, ...], frozenset[str]] | None = None

    def slots(self, obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
        """Each (holder, key) in ``obj`` where this replacer finds a name (a string)."""
        if self.root == "pod-spec":
            for spec in pod_specs(obj):
                yield from _walk(spec, self.path)
            return
        if str(obj.get("kind") or "") not in self.kinds:
            return
        if self.guard is not None:
            path, values = self.guard
            found = [holder[key] for holder, key in _walk(obj, path)]
            if not found or found[0] not in values:
                return
        yield from _walk(obj, self.path)

    def matches(self, value: str, name: str) -> bool:
        if self.artifact_type == DOCKER_IMAGE:
            return value == name or _image_name(value) == name
        return value == name


def _walk(node: Any, path: Sequence[Step]) -> Iterator[tuple[dict[str, Any], str]]:
    head, rest = path[0], path[1:]
    if head == "*":
        if isinstance(node, list):
            for item in node:
                yield from _walk(item, rest)
        return
    if not isinstance(node, dict):
        return
    for key in head if isinstance(head, tuple) else (head,):
        if not rest:
            if isinstance(node.get(key), str):
                yield node, key
        elif key in node:
            yield from _walk(node[key], rest)


def _hpa(name: str, artifact_type: str, *target_kinds: str) -> Replacer:
    return Replacer(
        name,
        artifact_type,
        "object",
        ("spec", "scaleTargetRef", "name"),
        kinds=frozenset({"HorizontalPodAutoscaler"}),
        guard=(("spec", "scaleTargetRef", "kind"), frozenset(target_kinds)),
    )


# In Clouddriver's order (Replacer.java; the handlers list them so).
REPLACERS: tuple[Replacer, ...] = (
    Replacer("dockerImage", DOCKER_IMAGE, "pod-spec", (_CONTAINERS, "*", "image")),
    Replacer("configMapVolume", CONFIG_MAP, "pod-spec", ("volumes", "*", "configMap", "name")),
    Replacer("secretVolume", SECRET, "pod-spec", ("volumes", "*", "secret", "secretName")),
    Replacer(
        "configMapProjectedVolume",
        CONFIG_MAP,
        "pod-spec",
        ("volumes", "*", "projected", "sources", "*", "configMap", "name"),
    ),
    Replacer(
        "secretProjectedVolume",
        SECRET,
        "pod-spec",
        ("volumes", "*", "projected", "sources", "*", "secret", "name"),
    ),
    Replacer(
        "configMapEnv",
        CONFIG_MAP,
        "pod-spec",
        (_CONTAINERS, "*", "envFrom", "*", "configMapRef", "name"),
    ),
    Replacer(
        "secretEnv", SECRET, "pod-spec", (_CONTAINERS, "*", "envFrom", "*", "secretRef", "name")
    ),
    Replacer(
        "configMapKeyValue",
        CONFIG_MAP,
        "pod-spec",
        (_CONTAINERS, "*", "env", "*", "valueFrom", "configMapKeyRef", "name"),
    ),
    Replacer(
        "secretKeyValue",
        SECRET,
        "pod-spec",
        (_CONTAINERS, "*", "env", "*", "valueFrom", "secretKeyRef", "name"),
    ),
    _hpa("hpaDeployment", DEPLOYMENT, "Deployment", "deployment"),
    _hpa("hpaReplicaSet", REPLICA_SET, "ReplicaSet", "replicaSet"),
)


def _image_name(image: str) -> str:
    """``gcr.io/app:1.2`` / ``gcr.io/app@sha256:..`` -> ``gcr.io/app`` (a port is kept:
    Clouddriver cuts at the last colon, so it never binds ``host:5000/app`` without a tag)."""
    image = image.split("@", 1)[0]
    slash = image.rfind("/")
    colon = image.rfind(":")
    return image[:colon] if colon > slash else image


ArtifactKey = tuple[str, str, str]


def artifact_key(artifact: Mapping[str, Any]) -> ArtifactKey:
    """The pool key: (type, name, location), as Clouddriver's ``getArtifactKey``."""
    return (
        str(artifact.get("type") or ""),
        str(artifact.get("name") or ""),
        str(artifact.get("location") or ""),
    )


def required_key(artifact: Mapping[str, Any]) -> tuple[str, ...]:
    """What makes a required artifact bound (Clouddriver's ``ArtifactKey``): type, name,
    version, location and reference equal (metadata, uuid and the like may differ)."""
    return tuple(
        str(artifact.get(field) or "")
        for field in ("type", "name", "version", "location", "reference")
    )


def _applies(artifact: Mapping[str, Any], namespace: str, account: str) -> bool:
    kind = artifact.get("type")
    if not isinstance(kind, str) or not kind or not isinstance(artifact.get("name"), str):
        return False
    if not kind.startswith("kubernetes/"):
        return True
    meta = artifact.get("metadata")
    owner = meta.get("account") if isinstance(meta, Mapping) else None
    # An artifact that names no account is assumed to mean this one (ArtifactReplacer).
    return str(artifact.get("location") or "") == namespace and owner in (None, "", account)


def bind(
    obj: dict[str, Any],
    artifacts: Iterable[Mapping[str, Any]],
    *,
    namespace: str,
    account: str,
) -> list[Mapping[str, Any]]:
    """Point ``obj``'s references at ``artifacts`` (in place): each field a replacer finds
    takes the reference of the first artifact, in the order given, whose name it holds.
    ``namespace`` is ``obj``'s, ``account`` the deploy's. Returns the artifacts that bound,
    each once, in the order given."""
    usable = [a for a in artifacts if _applies(a, namespace, account)]
    bound: dict[int, Mapping[str, Any]] = {}
    for replacer in REPLACERS:
        candidates = [
            (index, a) for index, a in enumerate(usable) if a["type"] == replacer.artifact_type
        ]
        if not candidates:
            continue
        for holder, key in list(replacer.slots(obj)):
            for index, artifact in candidates:
                if replacer.matches(holder[key], artifact["name"]):
                    reference = artifact.get("reference")
                    if isinstance(reference, str) and reference:  # else it stays (not a null)
                        holder[key] = reference
                    bound[index] = artifact
                    break
    return [bound[index] for index in sorted(bound)]


def references(obj: dict[str, Any]) -> set[tuple[str, str]]:
    """The (artifact type, name) of every reference the replacers find in ``obj``
    (Clouddriver's ``findAll``)."""
    return {
        (replacer.artifact_type, holder[key])
        for replacer in REPLACERS
        for holder, key in replacer.slots(obj)
    }


def own_artifact_key(obj: Mapping[str, Any], namespace: str) -> ArtifactKey | None:
    """The pool key ``obj`` takes once deployed, when its type is one a replacer binds
    (a built-in ConfigMap, Secret, Deployment or ReplicaSet); None otherwise."""
    kind = str(obj.get("kind") or "")
    group = str(obj.get("apiVersion") or "").rpartition("/")[0]
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if group not in ("", "apps", "extensions") or not isinstance(name, str) or not name:
        return None
    for artifact_type, artifact_kind in ARTIFACT_KINDS.items():
        if kind == artifact_kind:
            return (artifact_type, name, namespace)
    return None


def upstream_bound(
    manifests: Sequence[dict[str, Any]],
    pool: Mapping[ArtifactKey, Mapping[str, Any]],
    *,
    namespace_of: Callable[[Mapping[str, Any]], str],
    account: str,
) -> list[Mapping[str, Any]]:
    """The artifacts of ``pool`` that a deploy of ``manifests`` (in deploy order) will bind,
    known before anything is applied, so a required artifact that cannot bind fails the stage
    with nothing deployed (as Clouddriver binds every manifest before it deploys any).

    It binds copies, each manifest then entering the pool under its own name. The versions
    the deploy will give are unknown here (they need a list of the cluster) and do not
    matter: a manifest's artifact binds only fields that hold its own name, and replaces any
    artifact of ``pool`` with its key whatever its reference."""
    pool = dict(pool)
    given = {id(a) for a in pool.values()}
    bound: list[Mapping[str, Any]] = []
    for obj in manifests:
        namespace = namespace_of(obj)
        for artifact in bind(
            copy.deepcopy(obj), pool.values(), namespace=namespace, account=account
        ):
            if id(artifact) in given and all(artifact is not b for b in bound):
                bound.append(artifact)
        key = own_artifact_key(obj, namespace)
        if key is not None:
            pool[key] = {"type": key[0], "name": key[1], "location": key[2], "reference": key[1]}
    return bound
