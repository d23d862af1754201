"""``GET .../pods/{name}/log``: deterministic container logs, with the API server's parameters.

Each container of a pod "wrote" ``LINES`` lines, one per second from the pod's creation, so
tests can predict them: ``<pod> <container> line <i>``. Supported: ``container`` (required
when the pod has several), ``tailLines``, ``limitBytes``, ``sinceSeconds``, ``timestamps``.
"""

from __future__ import annotations

import calendar
import time

from kubesim import _status
from kubesim._cluster import Cluster
from kubesim._errors import ApiError
from kubesim._http import Request, Send, respond
from kubesim._store import Stored

__all__ = ["LINES", "serve_pod_log"]

LINES = 20


def _created(stored: Stored) -> float:
    text = stored.decode()["metadata"].get("creationTimestamp") or ""
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return time.time()


def pod_log_lines(stored: Stored, container: str | None) -> tuple[str, list[tuple[float, str]]]:
    """(container, [(unix time, line)]) for the pod; raises ApiError 400 like the API server
    for a missing or unknown container name."""
    pod = stored.decode()
    names = [c.get("name", "") for c in (pod.get("spec") or {}).get("containers") or []]
    if container is None:
        if len(names) != 1:
            raise ApiError(
                400,
                "BadRequest",
                f"a container name must be specified for pod {stored.name}, choose one of: "
                f"[{' '.join(names)}]",
            )
        container = names[0]
    elif container not in names:
        raise ApiError(
            400, "BadRequest", f"container {container} is not valid for pod {stored.name}"
        )
    start = _created(stored)
    return container, [(start + i, f"{stored.name} {container} line {i}") for i in range(LINES)]


async def serve_pod_log(
    cluster: Cluster, request: Request, send: Send, namespace: str, name: str
) -> None:
    rtype = cluster.resolve("", "v1", "pods")
    stored = cluster.get_stored(rtype, namespace, name)
    _, lines = pod_log_lines(stored, request.query.get("container") or None)
    since = request.int_param("sinceSeconds", 0)
    if since > 0:
        horizon = time.time() - since
        lines = [(t, text) for t, text in lines if t >= horizon]
    tail = request.int_param("tailLines", -1)
    if tail >= 0:
        lines = lines[len(lines) - tail :] if tail else []
    if request.flag("timestamps"):
        rendered = [
            time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z ", time.gmtime(t)) + text
            for t, text in lines
        ]
    else:
        rendered = [text for _, text in lines]
    body = "".join(line + "\n" for line in rendered).encode()
    limit = request.int_param("limitBytes", 0)
    if limit < 0:
        raise _status.bad_request(f"limitBytes: must be greater than 0, got {limit}")
    if limit:
        body = body[:limit]
    await respond(send, 200, body, "text/plain")
