"""Spinnaker monikers of Kubernetes objects: the annotations, else derived from the name.

A moniker is Spinnaker's naming of an object: application, cluster, stack, detail and
sequence. Clouddriver reads the `moniker.spinnaker.io/*` annotations; app, cluster and
sequence fall back to parsing the object's name the way Netflix's Frigga does (stack and
detail do not: only their annotations give them):

    <app>[-<stack>[-<detail>]][-v<NNN>]      e.g. "shop-prod-canary-v002"

The cluster is the name without its version suffix; `sequence` is the NNN (3 to 6 digits).
A name starting with ``system:`` (Kubernetes' own objects, e.g. ``system:coredns-v003``) is
read as Clouddriver's KubernetesResourceAwareNames reads it: app ``system``, cluster the
name without its version suffix. An annotation value written JSON-quoted (``"\"shop\""``,
how old Clouddriver versions wrote them) is read without its quotes. Pure functions, no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ANNOTATION_PREFIX", "Moniker", "moniker_for", "moniker_of", "parse_name"]

ANNOTATION_PREFIX = "moniker.spinnaker.io/"
_REVISION = "deployment.kubernetes.io/revision"

_NAME_CHARS = "a-zA-Z0-9._"
_NAME_HYPHEN_CHARS = _NAME_CHARS + "-"
# Frigga's push pattern: "<cluster>-v<sequence>".
_PUSH = re.compile(rf"^([{_NAME_HYPHEN_CHARS}]*)-v([0-9]{{3,6}})$")
# Frigga's name pattern: app, then an optional stack, then an optional detail (may hold '-').
_NAME = re.compile(rf"^([{_NAME_CHARS}]+)(?:-([{_NAME_CHARS}]*)(?:-([{_NAME_HYPHEN_CHARS}]*?))?)?$")
_SYSTEM = "system:"
_SYSTEM_PUSH = re.compile(r"^(system:.*)-v([0-9]{3,6})$")


@dataclass(frozen=True, slots=True)
class Moniker:
    """A Spinnaker moniker; absent fields are None."""

    app: str | None = None
    cluster: str | None = None
    stack: str | None = None
    detail: str | None = None
    sequence: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object Clouddriver returns: the fields that are set."""
        fields = {
            "app": self.app,
            "cluster": self.cluster,
            "stack": self.stack,
            "detail": self.detail,
            "sequence": self.sequence,
        }
        return {key: value for key, value in fields.items() if value is not None}


def parse_name(name: str) -> Moniker:
    """Frigga's reading of a name: `app-stack-detail` with an optional `-vNNN` sequence.

    A name the pattern does not fit (odd characters) still yields its cluster (the name) but
    no app, stack or detail, as Frigga does.
    """
    if name.startswith(_SYSTEM):
        system = _SYSTEM_PUSH.match(name)
        if system is None:
            return Moniker(app="system", cluster=name)
        return Moniker(app="system", cluster=system.group(1), sequence=int(system.group(2)))
    cluster = name
    sequence: int | None = None
    push = _PUSH.match(name)
    if push is not None:
        cluster = push.group(1)
        sequence = int(push.group(2))
    parts = _NAME.match(cluster)
    if parts is None:
        return Moniker(cluster=cluster or None, sequence=sequence)
    return Moniker(
        app=parts.group(1),
        cluster=cluster,
        stack=parts.group(2) or None,
        detail=parts.group(3) or None,
        sequence=sequence,
    )


def _unquoted(value: str) -> str:
    """An annotation value without the JSON quotes old Clouddriver versions wrote around it
    (KubernetesManifestAnnotater.looksLikeSerializedString); other values as they are."""
    if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, str) else value
    return value


def moniker_of(kind: str, name: str, annotations: Mapping[str, Any] | None) -> Moniker:
    """The moniker of an object of ``kind`` named ``name`` with these annotations: each
    annotation wins over the parsed name; stack and detail come from their annotations alone.

    A `moniker.spinnaker.io/sequence` annotation that is not an integer is ignored (the
    parsed sequence stands) rather than failing the read.
    """
    parsed = parse_name(name)
    notes: Mapping[str, Any] = annotations if isinstance(annotations, Mapping) else {}

    def annotation(key: str) -> str | None:
        value = notes.get(key if "/" in key else ANNOTATION_PREFIX + key)
        if not isinstance(value, str) or not value:
            return None
        return _unquoted(value) or None

    sequence = parsed.sequence
    # A ReplicaSet without the annotation takes its Deployment's revision (Clouddriver's
    # KubernetesManifestAnnotater.getMoniker).
    keys = ["sequence"]
    if kind == "ReplicaSet":
        keys.append(_REVISION)
    for key in keys:
        raw_sequence = annotation(key)
        if raw_sequence is not None and raw_sequence.strip().isdigit():
            sequence = int(raw_sequence)
            break
    # Stack and detail come only from their annotations: Clouddriver never parses them out
    # of the name (a name "web-api" is not stack "api").
    return Moniker(
        app=annotation("application") or parsed.app,
        cluster=annotation("cluster") or parsed.cluster,
        stack=annotation("stack"),
        detail=annotation("detail"),
        sequence=sequence,
    )


def moniker_for(obj: Mapping[str, Any]) -> Moniker:
    """The moniker of a decoded Kubernetes object (``moniker_of`` its kind, name and
    annotations)."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name")
    kind = obj.get("kind")
    return moniker_of(
        kind if isinstance(kind, str) else "",
        name if isinstance(name, str) else "",
        metadata.get("annotations"),
    )
