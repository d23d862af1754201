"""Spinnaker monikers of Kubernetes objects: the annotations, else derived from the name.

A moniker is Spinnaker's naming of an object: application, cluster, stack, detail and
sequence. Clouddriver reads the `moniker.spinnaker.io/*` annotations; app, cluster and
sequence fall back to parsing the object's name the way Netflix's Frigga does (stack and
detail do not: only their annotations give them):

    <app>[-<stack>[-<detail>]][-v<NNN>]      e.g. "shop-prod-canary-v002"

The cluster is the name without its version suffix; `sequence` is the NNN (3 to 6 digits).
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ANNOTATION_PREFIX", "Moniker", "moniker_for", "parse_name"]

ANNOTATION_PREFIX = "moniker.spinnaker.io/"
_REVISION = "deployment.kubernetes.io/revision"

_NAME_CHARS = "a-zA-Z0-9._"
_NAME_HYPHEN_CHARS = _NAME_CHARS + "-"
# Frigga's push pattern: "<cluster>-v<sequence>".
_PUSH = re.compile(rf"^([{_NAME_HYPHEN_CHARS}]*)-v([0-9]{{3,6}})$")
# Frigga's name pattern: app, then an optional stack, then an optional detail (may hold '-').
_NAME = re.compile(rf"^([{_NAME_CHARS}]+)(?:-([{_NAME_CHARS}]*)(?:-([{_NAME_HYPHEN_CHARS}]*?))?)?$")


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


def moniker_for(obj: Mapping[str, Any]) -> Moniker:
    """The moniker of a decoded Kubernetes object: each annotation wins over the parsed name;
    stack and detail come from their annotations alone.

    A `moniker.spinnaker.io/sequence` annotation that is not an integer is ignored (the
    parsed sequence stands) rather than failing the read.
    """
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    name = metadata.get("name")
    parsed = parse_name(name if isinstance(name, str) else "")
    annotations = metadata.get("annotations")
    annotations = annotations if isinstance(annotations, Mapping) else {}

    def annotation(key: str) -> str | None:
        value = annotations.get(key if "/" in key else ANNOTATION_PREFIX + key)
        return value if isinstance(value, str) and value else None

    sequence = parsed.sequence
    # A ReplicaSet without the annotation takes its Deployment's revision (Clouddriver's
    # KubernetesManifestAnnotater.getMoniker).
    keys = ["sequence"]
    if obj.get("kind") == "ReplicaSet":
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
