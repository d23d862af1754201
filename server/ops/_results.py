"""An agent's OperationResult, read tolerantly, and the cache records it implies. Pure.

result_json (docs/protocol.md §11.2): {"result": ..., "phases": [{phase, status}], "objects": [...],
"deleted": [{apiVersion, kind, namespace, name}]}. The objects are what the API server
returned, so the cache can show a deployed object before its watch event arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

import wire

from ..store import is_secret, scrub_secret_object

__all__ = ["AgentResult", "cache_records", "error_name", "parse_result"]

_MAX_PHASES = 200


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What the server reads from one OperationResult."""

    ok: bool
    result: Any = None
    phases: list[dict[str, Any]] = field(default_factory=list)
    objects: list[dict[str, Any]] = field(default_factory=list)
    deleted: list[dict[str, Any]] = field(default_factory=list)
    error_message: str = ""
    error_code: str = ""
    problem: str = ""  # why result_json could not be read ("" when it could)


def parse_result(ok: bool, result_json: str, error_message: str, error_code: str) -> AgentResult:
    """Never raises: a malformed result_json is reported in ``problem`` and otherwise ignored."""
    data: Any = {}
    problem = ""
    if result_json:
        try:
            data = msgspec.json.decode(result_json)
        except ValueError as exc:
            problem = f"result_json is not JSON: {exc}"
    if not isinstance(data, Mapping):
        problem = problem or "result_json is not a JSON object"
        data = {}
    phases = [p for p in data.get("phases") or [] if isinstance(p, Mapping)][:_MAX_PHASES]
    objects = [o for o in data.get("objects") or [] if isinstance(o, Mapping)]
    deleted = [d for d in data.get("deleted") or [] if isinstance(d, Mapping)]
    return AgentResult(
        ok=ok,
        result=data.get("result"),
        phases=[dict(p) for p in phases],
        objects=[dict(o) for o in objects],
        deleted=[dict(d) for d in deleted],
        error_message=error_message,
        error_code=error_code,
        problem=problem,
    )


def error_name(code: str) -> str:
    """The class-like name a failure shows as ("KubernetesError 422" -> "KubernetesError")."""
    head = "".join(c if c.isalnum() else " " for c in code).split()
    return head[0] if head and not head[0].isdigit() else "OperationFailed"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _without_secret_data(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The agent strips Secret data already; the server does not rely on it."""
    return scrub_secret_object(obj) if is_secret(_str(obj.get("apiVersion")), kind) else obj


def cache_records(
    account: str, objects: list[dict[str, Any]], deleted: list[dict[str, Any]]
) -> list[wire.EventRecord]:
    """MODIFIED records for the objects and DELETED records for the deletions, with the
    objects' own resourceVersions. Entries without a kind and a name are skipped."""
    records: list[wire.EventRecord] = []
    for obj in objects:
        meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
        assert isinstance(meta, Mapping)
        kind, name = _str(obj.get("kind")), _str(meta.get("name"))
        if not kind or not name:
            continue
        records.append(
            wire.EventRecord(
                type=int(wire.EventType.MODIFIED),
                account=account,
                api_version=_str(obj.get("apiVersion")),
                kind=kind,
                namespace=_str(meta.get("namespace")),
                name=name,
                uid=_str(meta.get("uid")),
                resource_version=_str(meta.get("resourceVersion")),
                object=msgspec.json.encode(_without_secret_data(obj, kind)),
            )
        )
    for ref in deleted:
        kind, name = _str(ref.get("kind")), _str(ref.get("name"))
        if not kind or not name:
            continue
        records.append(
            wire.EventRecord(
                type=int(wire.EventType.DELETED),
                account=account,
                api_version=_str(ref.get("apiVersion")),
                kind=kind,
                namespace=_str(ref.get("namespace")),
                name=name,
                uid=_str(ref.get("uid")),  # which object of the name went ("" when unsaid)
                resource_version="",
                object=b"",
            )
        )
    return records
