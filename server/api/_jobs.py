"""Clouddriver's job status, ``GET /applications/{app}/jobs/{account}/{location}/{id}``, which
Orca's WaitOnJobCompletion polls after a runJob (clouddriver-views.md 2.8).

Served from the cache (the Job and the pods its selector matches), shaped as Clouddriver's
KubernetesJobStatus: ``jobState`` Running / Succeeded / Failed, ``completionDetails`` with its
four keys, ``pods`` (name + status, by start time) and, for a failed Job, ``message``,
``reason`` and ``failureDetails``. The shaping (``job_status``) is pure; the handler reads.
The Job is read as ``GET /manifests`` reads it (``_fresh.read_fresh``): a Job that runJob ran
again under its name is never answered as the run before it (whose late watch events would
put it back in the cache for a moment, terminal: Orca would end the stage on it).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._kinds import resolve_kind
from ._context import collect_objects, context
from ._errors import BadRequest, NotFound
from ._fresh import read_fresh
from ._unavailable import check_available

__all__ = ["get_job", "job_state", "job_status"]

_decode = msgspec.json.decode
_JOB = resolve_kind("job")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _failed_condition(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in _mapping(job.get("status")).get("conditions") or ():
        c = _mapping(c)
        if (
            str(c.get("type", "")).lower() == "failed"
            and str(c.get("status", "")).lower() == "true"
        ):
            return c
    return None


def job_state(job: Mapping[str, Any]) -> str:
    """Clouddriver's rule: no status → Running; succeeded >= completions (default 1) →
    Succeeded; else a Failed=True condition → Failed; else Running."""
    status = job.get("status")
    if not isinstance(status, Mapping):
        return "Running"
    completions = _int(_mapping(job.get("spec")).get("completions"), 1)
    if _int(status.get("succeeded"), 0) >= completions:
        return "Succeeded"
    return "Failed" if _failed_condition(job) is not None else "Running"


def _epoch_ms(stamp: object) -> int | None:
    if not isinstance(stamp, str) or not stamp:
        return None
    try:
        parsed = time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return calendar.timegm(parsed) * 1000


def _container_details(pod: Mapping[str, Any]) -> list[dict[str, str | None]]:
    """Each container's (init containers first) state as Clouddriver's ContainerExecutionDetails."""
    status = _mapping(pod.get("status"))
    details: list[dict[str, str | None]] = []
    for field in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(field) or ():
            container = _mapping(container)
            state = _mapping(container.get("state"))
            if not state:
                continue
            name = str(container.get("name") or "")
            if "terminated" in state:
                t = _mapping(state["terminated"])
                code = t.get("exitCode")
                details.append(
                    {
                        "name": name,
                        "state": "terminated",
                        "logs": t.get("message"),
                        "status": t.get("reason"),
                        "exitCode": "" if code is None else str(code),
                    }
                )
            elif "waiting" in state:
                w = _mapping(state["waiting"])
                details.append(
                    {
                        "name": name,
                        "state": "waiting",
                        "logs": w.get("message"),
                        "status": w.get("reason"),
                        "exitCode": "",
                    }
                )
    return details


def _failure_details(pods: Sequence[Mapping[str, Any]]) -> str | None:
    """The first pod with a container that exited non-zero, else one stuck waiting."""
    for pod in pods:
        details = _container_details(pod)
        failed = next(
            (d for d in details if d["state"] == "terminated" and d["exitCode"] not in ("", "0")),
            None,
        ) or next((d for d in details if d["state"] == "waiting"), None)
        if failed is not None:
            name = _mapping(pod.get("metadata")).get("name")
            return (
                f"Pod: '{name}' had errors.\n Container: '{failed['name']}' exited with code: "
                f"{_java(failed['exitCode'])}.\n Status: {_java(failed['status'])}.\n "
                f"Logs: {_java(failed['logs'])}"
            )
    return None


def _java(value: object) -> str:
    """How Java's String.format prints a value (Clouddriver builds the text that way)."""
    return "null" if value is None else str(value)


def _start_time(pod: Mapping[str, Any]) -> tuple[bool, str]:
    """Sort key: by startTime, a pod without one (Pending) last, as Clouddriver takes it as
    now; so a Pending newest pod is the mostRecentPodName."""
    started = str(_mapping(pod.get("status")).get("startTime") or "")
    return (not started, started)


def job_status(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], account: str
) -> dict[str, Any]:
    """The body Clouddriver answers for ``job`` and its ``pods`` (null fields omitted, as
    Clouddriver's NON_NULL mapper does)."""
    meta = _mapping(job.get("metadata"))
    ordered = sorted(pods, key=_start_time)
    body: dict[str, Any] = {
        "name": meta.get("name"),
        "account": account,
        "location": meta.get("namespace"),
        "provider": "kubernetes",
    }
    created = _epoch_ms(meta.get("creationTimestamp"))
    if created is not None:
        body["createdTime"] = created
    state = job_state(job)
    message = reason = failure = None
    if state == "Failed":
        condition = _failed_condition(job) or {}
        message, reason = condition.get("message"), condition.get("reason")
        failure = _failure_details(ordered)
    body["jobState"] = state
    body["completionDetails"] = {
        "exitCode": "",
        "signal": "",
        "message": message or "",
        "reason": reason or "",
    }
    for key, value in (("message", message), ("reason", reason), ("failureDetails", failure)):
        if value is not None:
            body[key] = value
    body["pods"] = [
        {"name": _mapping(p.get("metadata")).get("name"), "status": p.get("status")}
        for p in ordered
    ]
    if ordered:
        body["mostRecentPodName"] = _mapping(ordered[-1].get("metadata")).get("name")
    return body


def _selects(selector: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """matchLabels and the In/NotIn/Exists/DoesNotExist expressions of a label selector."""
    match = _mapping(selector.get("matchLabels"))
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for expr in selector.get("matchExpressions") or ():
        expr = _mapping(expr)
        key, op = str(expr.get("key", "")), str(expr.get("operator", ""))
        values = expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(op, False)
        if not ok:
            return False
    return bool(match) or bool(selector.get("matchExpressions"))


async def get_job(request: Request) -> Response:
    """The job status; 404 ``Job not found (...)`` for an unknown account or Job, 400 when
    ``id`` is not ``"job <name>"`` (or a bare name)."""
    p = request.path_params
    account, location, raw = p["account"], p["location"], p["id"]
    tokens = raw.split()
    if len(tokens) == 2 and tokens[0].lower() == "job":
        name = tokens[1]
    elif len(tokens) == 1:
        name = tokens[0]  # Clouddriver accepts a bare name too (the kind defaults to job)
    else:
        raise BadRequest(f'job id {raw!r} must be "job <name>"')
    store = context(request).state.store
    missing = NotFound(f"Job not found (account: {account}, location: {location}, id: {raw})")
    if await store.get_account(account) is None:
        raise missing
    stored, headers = await read_fresh(
        context(request).state.feed.freshness,
        lambda: store.get_object(account, "batch", "Job", location, name),
        account,
        _JOB,
        location,
        name,
    )
    if stored is None:
        await check_available(store, account, "batch", "Job", location)
        raise missing
    job = _decode(stored.body)
    selector = _mapping(_mapping(job.get("spec")).get("selector"))
    # The group too: the store's index is (account, group, kind, ...), see _clouddriver._events.
    found = await collect_objects(store, account=account, kind="Pod", namespace=location, group="")
    pods = []
    for candidate in found:
        pod = _decode(candidate.body)
        if selector and _selects(selector, _mapping(_mapping(pod.get("metadata")).get("labels"))):
            pods.append(pod)
    return JSONResponse(job_status(job, pods, account), headers=headers)
