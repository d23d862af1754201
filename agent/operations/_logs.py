"""podLogs: a pod's container logs, read for the server's run-job log routes (no task).

Description: ``namespace``, ``name`` (the pod), optional ``container``, ``tailLines``,
``limitBytes``, ``sinceSeconds``. Result: ``{"logs": [{"container", "output"}]}``, every
container (init containers first) when none is named. The bytes are bounded: at most
``limitBytes`` (capped at MAX_LOG_BYTES) per container and MAX_LOG_BYTES in total.
"""

from __future__ import annotations

from typing import Any

from ._context import OperationContext
from ._errors import InvalidOperation, KubernetesRefusal

__all__ = ["MAX_LOG_BYTES", "pod_logs"]

MAX_LOG_BYTES = 1 * 2**20


async def pod_logs(ctx: OperationContext) -> None:
    d = ctx.description
    pods = await ctx.cluster.kinds.resolve("Pod")
    name = d.required_text("name")
    namespace = d.namespace or "default"
    pod = await ctx.cluster.get(pods, namespace, name)
    if pod is None:
        raise KubernetesRefusal(f'pods "{name}" not found', status_code=404, reason="NotFound")
    spec = pod.get("spec") or {}
    known = [
        str(c.get("name"))
        for key in ("initContainers", "containers")
        for c in spec.get(key) or ()
        if isinstance(c, dict)
    ]
    wanted = d.text("container")
    if wanted and wanted not in known:
        raise InvalidOperation(
            f"podLogs.container: pod {name} has no container {wanted!r} "
            f"(it has: {', '.join(known) or 'none'})"
        )
    params: dict[str, str] = {}
    for key in ("tailLines", "sinceSeconds"):
        value = d.integer(key)
        if value is not None:
            if value < 0:
                raise InvalidOperation(f"podLogs.{key}: must be >= 0")
            params[key] = str(value)
    per_container = min(d.integer("limitBytes") or MAX_LOG_BYTES, MAX_LOG_BYTES)
    if per_container <= 0:
        raise InvalidOperation("podLogs.limitBytes: must be > 0")
    budget = MAX_LOG_BYTES
    logs: list[dict[str, Any]] = []
    for container in [wanted] if wanted else known:
        limit = min(per_container, budget)
        if limit <= 0:
            break
        text, _ = await ctx.cluster.read_text(
            pods.object_path(namespace, name, "log"),
            params={**params, "container": container, "limitBytes": str(limit)},
            limit=limit,
        )
        budget -= len(text.encode())
        logs.append({"container": container, "output": text})
    ctx.outcome.result = {"logs": logs}
