"""What an operation reports back: Clouddriver's result object, history lines, objects.

An :class:`Outcome` collects, while an operation runs, the history lines (``phase`` +
``status``), every object the API server returned for a create/update (Secret data and the
last-applied annotation removed; managedFields too with ``strip_managed_fields``, like the
watches' ``kubernetes.stripManagedFields``, so the server caches the same shape either way),
and every object deleted; ``result`` is the Clouddriver result object (None for
scale/undo/pause/resume/restart). ``to_json()`` is the ``result_json`` of the contract; an
operation that fails half way still reports what it did.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._kinds import Resource
from ._manifests import LAST_APPLIED

__all__ = ["DeployResult", "Outcome", "scrubbed"]


def scrubbed(
    obj: Mapping[str, Any], *, strip_managed_fields: bool = False, owned: bool = False
) -> dict[str, Any]:
    """A copy fit to report: Secret ``data``/``stringData`` and the last-applied annotation
    (which holds the same data) removed; ``metadata.managedFields`` too when asked.
    ``owned``: ``obj`` is a dict nobody else holds (just decoded from an answer), so it is
    scrubbed in place and returned instead of copied."""
    out = dict(obj)
    meta = out.get("metadata")
    if strip_managed_fields and isinstance(meta, dict) and "managedFields" in meta:
        # Dropped before the copy: it is often the bulk of a small object.
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    if not owned:
        out = copy.deepcopy(out)
    if out.get("kind") == "Secret":
        out.pop("data", None)
        out.pop("stringData", None)
        meta = out.get("metadata")
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(notes, dict):
            notes.pop(LAST_APPLIED, None)
    return out


@dataclass(slots=True)
class DeployResult:
    """Clouddriver's result object for deploy, delete, patch, cleanup and run job."""

    names_by_namespace: dict[str, list[str]] = field(default_factory=dict)
    manifests: list[dict[str, Any]] = field(default_factory=list)
    created_artifacts: list[dict[str, Any]] = field(default_factory=list)
    bound_artifacts: list[dict[str, Any]] = field(default_factory=list)
    include_manifests: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def add_name(self, namespace: str, kind_and_name: str) -> None:
        names = self.names_by_namespace.setdefault(namespace, [])
        if kind_and_name not in names:
            names.append(kind_and_name)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"manifestNamesByNamespace": self.names_by_namespace}
        if self.include_manifests:
            out["manifests"] = self.manifests
        out["createdArtifacts"] = self.created_artifacts
        out["boundArtifacts"] = self.bound_artifacts
        out.update(self.extra)
        return out


@dataclass(slots=True)
class Outcome:
    """Everything one operation has to say, success or not."""

    phase: str
    result: DeployResult | dict[str, Any] | None = None
    strip_managed_fields: bool = False
    phases: list[dict[str, str]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, str]] = field(default_factory=list)

    def say(self, status: str, *, phase: str | None = None) -> None:
        self.phases.append({"phase": phase or self.phase, "status": status})

    def wrote(self, obj: Mapping[str, Any], *, owned: bool = False) -> dict[str, Any]:
        """Record an object the API server returned; gives back the scrubbed copy (``obj``
        itself, scrubbed, when ``owned``: see :func:`scrubbed`)."""
        clean = scrubbed(obj, strip_managed_fields=self.strip_managed_fields, owned=owned)
        self.objects.append(clean)
        return clean

    def removed(self, res: Resource, namespace: str, name: str, *, uid: str = "") -> None:
        entry = {
            "apiVersion": res.api_version,
            "kind": res.kind,
            "namespace": namespace if res.namespaced else "",
            "name": name,
        }
        if uid:  # which object of the name went (docs/protocol.md §11.2)
            entry["uid"] = uid
        self.deleted.append(entry)

    def to_json(self) -> dict[str, Any]:
        return {
            "result": self.result.to_json()
            if isinstance(self.result, DeployResult)
            else self.result,
            "phases": self.phases,
            "objects": self.objects,
            "deleted": self.deleted,
        }
