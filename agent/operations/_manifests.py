"""Deploy preparation, sans-I/O: what Clouddriver does to manifests before it applies them.

``flatten`` (``kind: List`` entries flattened, nulls skipped), ``deploy_order`` (namespaces and
CRDs first, then config, services, workloads), :class:`Strategy` (the ``strategy.spinnaker.io``
and ``traffic.spinnaker.io`` annotations and the Armory server-side-apply ones), moniker
annotations and labels, versioning (``<name>-vNNN``) and the ``artifact.spinnaker.io/*``
annotations (binding is ``_binding.py``). Every function takes and returns plain dicts; the
deploy step (``_deploy.py``) does the I/O around them.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._errors import InvalidOperation

__all__ = [
    "Strategy",
    "annotations_of",
    "deploy_order",
    "flatten",
    "is_versioned",
    "json_copy",
    "label_moniker",
    "next_version",
    "pod_specs",
    "pod_template_metadata",
    "set_artifact_annotations",
    "version_of",
]

STRATEGY = "strategy.spinnaker.io/"
VERSIONED = STRATEGY + "versioned"
MAX_VERSION_HISTORY = STRATEGY + "max-version-history"
RECREATE = STRATEGY + "recreate"
REPLACE = STRATEGY + "replace"
USE_SOURCE_CAPACITY = STRATEGY + "use-source-capacity"
SERVER_SIDE_APPLY = STRATEGY + "server-side-apply"
ARMORY_SSA = "agent-k8s.armory.io/serverside-apply"
LOAD_BALANCERS = "traffic.spinnaker.io/load-balancers"
MONIKER = "moniker.spinnaker.io/"
ARTIFACT = "artifact.spinnaker.io/"
NAME_LABEL = "app.kubernetes.io/name"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
SEQUENCE_LABEL = MONIKER + "sequence"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

VERSIONED_BY_DEFAULT = frozenset({"replicaset", "configmap", "secret", "pod"})
_FIRST = ("namespace", "customresourcedefinition")
_CONFIG = (
    "configmap",
    "secret",
    "serviceaccount",
    "role",
    "clusterrole",
    "rolebinding",
    "clusterrolebinding",
    "persistentvolumeclaim",
    "persistentvolume",
    "storageclass",
)
_SERVICES = ("service", "ingress", "networkpolicy")
_WORKLOADS = (
    "pod",
    "replicaset",
    "deployment",
    "statefulset",
    "daemonset",
    "job",
    "cronjob",
    "poddisruptionbudget",
)
_ATTACHMENTS = ("horizontalpodautoscaler",)  # Clouddriver's WORKLOAD_ATTACHMENT_PRIORITY
_VERSION_RE = re.compile(r"^(?P<base>.+)-v(?P<n>\d{3,})$")
_TEMPLATE_KINDS = frozenset({"deployment", "replicaset", "statefulset", "daemonset", "job"})


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    meta = obj.get("metadata")
    found = meta.get("annotations") if isinstance(meta, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else {}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise InvalidOperation(f"{obj.get('kind')}: metadata must be an object")
    return meta


def _map(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


_ATOMS = frozenset((str, int, float, bool, type(None)))


def json_copy(value: Any) -> Any:
    """A deep copy of a decoded JSON value (dicts, lists, strings, numbers, booleans, null);
    anything else inside is copied by ``copy.deepcopy``. Why: a manifest is copied twice per
    deploy, and ``deepcopy``'s memo and dispatch cost 3-4x this walk (55 against 15 us for a
    small ConfigMap, 98 against 33 for a Deployment); about 2 % of the agent's CPU per deploy."""
    kind = type(value)
    if kind is dict:
        return {k: json_copy(v) for k, v in value.items()}
    if kind is list:
        return [json_copy(v) for v in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def flatten(manifests: Iterable[Any], *, where: str = "manifests") -> list[dict[str, Any]]:
    """Manifests as a flat list of objects: ``kind: List`` items inlined, nulls skipped.
    Raises InvalidOperation naming the index of an entry that is not an object with a kind."""
    flat: list[dict[str, Any]] = []
    for index, entry in enumerate(manifests):
        if entry is None:
            continue
        if not isinstance(entry, Mapping) or not entry.get("kind"):
            raise InvalidOperation(f"{where}[{index}]: expected a Kubernetes object with a kind")
        if entry.get("kind") == "List":
            flat.extend(flatten(entry.get("items") or (), where=f"{where}[{index}].items"))
        else:
            flat.append(json_copy(dict(entry)))
    return flat


def _rank(kind: str) -> int:
    kind = kind.lower()
    for rank, group in enumerate((_FIRST, _CONFIG, _SERVICES)):
        if kind in group:
            return rank
    if kind in _ATTACHMENTS:
        return 5
    return 4 if kind in _WORKLOADS else 3  # custom kinds before workloads, after services


def deploy_order(manifests: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stable sort: namespaces and CRDs, config, services, other kinds, workloads, then what
    attaches to workloads (HPAs: their target's versioned name is known by then)."""
    return sorted(manifests, key=lambda obj: _rank(str(obj.get("kind", ""))))


def _flag(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() == "true"


@dataclass(frozen=True, slots=True)
class Strategy:
    """What a manifest's annotations ask of the deploy."""

    versioned: bool | None = None
    max_version_history: int | None = None
    recreate: bool = False
    replace: bool = False
    use_source_capacity: bool = False
    server_side_apply: str = ""  # "", "true", "false", "force-conflicts"
    load_balancers: tuple[str, ...] = ()

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Strategy:
        """Parse the annotations; raises InvalidOperation naming a malformed one."""
        notes = annotations_of(obj)
        name = (obj.get("metadata") or {}).get("name", "")
        history = notes.get(MAX_VERSION_HISTORY)
        max_history: int | None = None
        if history is not None:
            try:
                max_history = int(history)
            except ValueError:
                raise InvalidOperation(
                    f"{obj.get('kind')} {name}: annotation {MAX_VERSION_HISTORY} must be an "
                    f"integer, got {history!r}"
                ) from None
        balancers: tuple[str, ...] = ()
        raw = notes.get(LOAD_BALANCERS)
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if not isinstance(parsed, list) or not all(isinstance(x, str) for x in parsed):
                raise InvalidOperation(
                    f"{obj.get('kind')} {name}: annotation {LOAD_BALANCERS} must be a JSON list "
                    f'of "service name" strings, got {raw!r}'
                )
            balancers = tuple(parsed)
        ssa = notes.get(SERVER_SIDE_APPLY) or notes.get(ARMORY_SSA) or ""
        return cls(
            versioned=_flag(notes.get(VERSIONED)),
            max_version_history=max_history,
            recreate=bool(_flag(notes.get(RECREATE))),
            replace=bool(_flag(notes.get(REPLACE))),
            use_source_capacity=bool(_flag(notes.get(USE_SOURCE_CAPACITY))),
            server_side_apply=ssa.strip().lower(),
            load_balancers=balancers,
        )


def is_versioned(kind: str, strategy: Strategy, description_versioned: bool | None) -> bool:
    """The annotation decides, then the description's ``versioned``, then the kind."""
    if strategy.versioned is not None:
        return strategy.versioned
    if description_versioned is not None:
        return description_versioned
    return kind.lower() in VERSIONED_BY_DEFAULT


def version_of(obj: Mapping[str, Any], base: str) -> int | None:
    """The version number of ``obj`` as a version of ``base``, or None."""
    notes = annotations_of(obj)
    name = str((obj.get("metadata") or {}).get("name", ""))
    if notes.get(ARTIFACT + "name") not in (None, base):
        return None
    match = _VERSION_RE.match(name)
    if not match or match.group("base") != base:
        return None
    return int(match.group("n"))


def next_version(existing: Iterable[Mapping[str, Any]], base: str) -> int:
    """The next free version number for ``base`` among ``existing`` objects of its kind."""
    numbers = [n for obj in existing if (n := version_of(obj, base)) is not None]
    return max(numbers) + 1 if numbers else 0


def pod_template_metadata(obj: dict[str, Any], *, create: bool) -> dict[str, Any] | None:
    """``spec.template.metadata`` (``spec.jobTemplate.spec.template.metadata`` for a CronJob)."""
    kind = str(obj.get("kind", "")).lower()
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    if kind == "cronjob":
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, dict) else None
        if not isinstance(spec, dict):
            return None
    elif kind not in _TEMPLATE_KINDS:
        return None
    template = spec.get("template")
    if not isinstance(template, dict):
        return None
    if create:
        return _map(template, "metadata")
    meta = template.get("metadata")
    return meta if isinstance(meta, dict) else None


def pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs inside ``obj`` (its own for a Pod, the template's for workloads)."""
    kind = str(obj.get("kind", "")).lower()
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return []
    if kind == "pod":
        return [spec]
    if kind == "cronjob":
        job = spec.get("jobTemplate")
        spec = job.get("spec") if isinstance(job, dict) else None
        if not isinstance(spec, dict):
            return []
    template = spec.get("template")
    inner = template.get("spec") if isinstance(template, dict) else None
    return [inner] if isinstance(inner, dict) else []


def label_moniker(
    obj: dict[str, Any],
    moniker: Mapping[str, Any],
    *,
    sequence: int | None,
    skip_template_labels: bool,
) -> None:
    """Write the moniker annotations where absent, and Spinnaker's labels (in place)."""
    meta = _meta(obj)
    notes = _map(meta, "annotations")
    fields = dict(moniker)
    if sequence is not None:
        fields["sequence"] = sequence
    # Clouddriver annotates the pod template too (KubernetesManifestAnnotater), whatever
    # skipSpecTemplateLabels says: Deck reads the moniker of pods from there.
    template_meta = pod_template_metadata(obj, create=True)
    for target in (notes, _map(template_meta, "annotations") if template_meta else None):
        if target is None:
            continue
        for field in ("application", "cluster", "stack", "detail", "sequence"):
            value = fields.get("app" if field == "application" else field)
            if value not in (None, "") and MONIKER + field not in target:
                target[MONIKER + field] = str(value)
    app = fields.get("app")
    targets = [_map(meta, "labels")]
    template = None if skip_template_labels else pod_template_metadata(obj, create=True)
    if template is not None:
        targets.append(_map(template, "labels"))
    for labels in targets:
        if app and NAME_LABEL not in labels:
            labels[NAME_LABEL] = str(app)
        labels[MANAGED_BY_LABEL] = "spinnaker"
        if sequence is not None:
            labels[SEQUENCE_LABEL] = str(sequence)


def set_artifact_annotations(
    obj: dict[str, Any], *, artifact_type: str, base: str, namespace: str, version: str
) -> None:
    notes = _map(_meta(obj), "annotations")
    notes[ARTIFACT + "type"] = artifact_type
    notes[ARTIFACT + "name"] = base
    notes[ARTIFACT + "location"] = namespace
    notes[ARTIFACT + "version"] = version
    template = pod_template_metadata(obj, create=True)
    if template is not None:  # where absent, as Clouddriver's storeAnnotation writes them
        inner = _map(template, "annotations")
        for key, value in (
            ("type", artifact_type),
            ("name", base),
            ("location", namespace),
            ("version", version),
        ):
            inner.setdefault(ARTIFACT + key, value)
