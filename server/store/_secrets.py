"""Secret bodies without their secrets: what the server keeps, shows and broadcasts.

The agent already strips Secret data; the server does it again wherever a Secret enters
(the session's batches, operation results, deploy payloads), so no path depends on the agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from wire import EventRecord

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def is_secret(api_version: str, kind: object) -> bool:
    """A core v1 Secret (a CRD named Secret in another group is not one)."""
    return kind == "Secret" and api_version in ("v1", "")


def scrub_secret_object(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` (a Secret manifest) without data, stringData and the last-applied annotation
    (which holds both). Returns a new dict; ``obj`` is not changed."""
    clean = {k: v for k, v in obj.items() if k not in ("data", "stringData")}
    metadata = clean.get("metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get("annotations"), dict):
        annotations = {k: v for k, v in metadata["annotations"].items() if k != LAST_APPLIED}
        clean["metadata"] = {**metadata, "annotations": annotations}
    return clean


def scrub_secret_body(record: EventRecord) -> bytes:
    """A Secret record's object JSON scrubbed; an undecodable body becomes a minimal
    metadata-only object (the secret must not get through as unparsed bytes)."""
    try:
        obj = msgspec.json.decode(record.object)
        if not isinstance(obj, dict):
            raise TypeError("not an object")
        return msgspec.json.encode(scrub_secret_object(obj))
    except (msgspec.DecodeError, TypeError, AttributeError):
        minimal = {
            "apiVersion": record.api_version,
            "kind": record.kind,
            "metadata": {
                "name": record.name,
                "namespace": record.namespace,
                "uid": record.uid,
                "resourceVersion": record.resource_version,
            },
        }
        return msgspec.json.encode(minimal)


def scrub_secret_records(records: Sequence[EventRecord]) -> list[EventRecord]:
    """``records`` with every Secret's object scrubbed (others are the same objects)."""
    return [
        msgspec.structs.replace(r, object=scrub_secret_body(r))
        if r.object and is_secret(r.api_version, r.kind)
        else r
        for r in records
    ]
