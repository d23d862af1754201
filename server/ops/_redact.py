"""How operations are recorded and shown: Secret data out of payloads and results, and the
operation as ``/armory/agent/operations`` shows it. Pure (no I/O)."""

from __future__ import annotations

from typing import Any

import msgspec

from ..store import OperationEvent, OperationRecord, is_secret, scrub_secret_object

__all__ = ["dumps", "has_secret", "operation_json", "redacted_payload", "redacted_result_json"]


def dumps(value: Any) -> str:
    # msgspec: several times the stdlib's speed, and every record of a deploy is encoded.
    return msgspec.json.encode(value).decode()


def has_secret(payload: dict[str, Any]) -> bool:
    """Whether ``redacted_payload`` could change ``payload`` (else it is an equal copy)."""
    if payload.get("kind") == "Secret" and "patchBody" in payload:
        return True
    manifests = payload.get("manifests")
    candidates = list(manifests) if isinstance(manifests, list) else []
    if "manifest" in payload:
        candidates.append(payload["manifest"])
    return any(
        isinstance(m, dict) and is_secret(str(m.get("apiVersion", "v1")), m.get("kind"))
        for m in candidates
    )


def redacted_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as the server records and shows it: Secret manifests (``manifests``,
    ``manifest``) and a Secret's ``patchBody`` lose data, stringData and last-applied."""

    def clean(obj: Any) -> Any:
        if isinstance(obj, dict) and is_secret(str(obj.get("apiVersion", "v1")), obj.get("kind")):
            return scrub_secret_object(obj)
        return obj

    redacted = dict(payload)
    if isinstance(redacted.get("manifests"), list):
        redacted["manifests"] = [clean(m) for m in redacted["manifests"]]
    if "manifest" in redacted:
        redacted["manifest"] = clean(redacted["manifest"])
    if redacted.get("kind") == "Secret" and isinstance(redacted.get("patchBody"), dict):
        redacted["patchBody"] = scrub_secret_object(redacted["patchBody"])
    elif redacted.get("kind") == "Secret" and "patchBody" in redacted:
        redacted["patchBody"] = "(redacted: a patch of a Secret)"
    return redacted


def redacted_result_json(result_json: str) -> str:
    """An agent's result_json as recorded: Secret objects in "objects" and in the result's
    "manifests" without their data (the agent strips them; the server does not rely on it)."""
    if '"Secret"' not in result_json:
        return result_json
    try:
        data = msgspec.json.decode(result_json)
    except ValueError:
        return result_json
    if not isinstance(data, dict):
        return result_json
    data = redacted_payload(data)  # "manifests"/"manifest" at the top (harmless elsewhere)
    if isinstance(data.get("objects"), list):
        data["objects"] = redacted_payload({"manifests": data["objects"]})["manifests"]
    if isinstance(data.get("result"), dict):
        data["result"] = redacted_payload(data["result"])
    return dumps(data)


def operation_json(record: OperationRecord, history: list[OperationEvent]) -> dict[str, Any]:
    """An operation as /armory/agent/operations shows it."""
    ended = record.state in ("SUCCEEDED", "FAILED")
    result: Any = None
    if record.result_json:
        try:
            result = msgspec.json.decode(record.result_json)
        except ValueError:
            result = record.result_json
    return {
        "id": record.id,
        "account": record.account,
        "type": record.type,
        "state": record.state,
        "createdMs": record.created_ms,
        "updatedMs": record.updated_ms,
        "durationMs": (record.updated_ms - record.created_ms) if ended else None,
        "errorMessage": record.error_message,
        "errorCode": record.error_code,
        "payload": msgspec.json.decode(record.payload_json or "{}"),
        "result": result,
        "history": [{"atMs": e.at_ms, "state": e.state, "message": e.message} for e in history],
    }
