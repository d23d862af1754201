"""Writes over HTTP: decode the body, call kubesim._writes, run the controllers, answer.

Also the ``scale`` subresource, which is a view (autoscaling/v1 Scale) on ``spec.replicas``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kubesim import _status
from kubesim._cluster import Cluster
from kubesim._deletes import delete
from kubesim._errors import InvalidObject
from kubesim._h_read import ReadTarget
from kubesim._http import JSON, Request, Send, respond, respond_json
from kubesim._patch import apply_json_patch, apply_merge_patch
from kubesim._selectors import Selector
from kubesim._writes import WriteOptions, create, decode_patch, patch, replace

__all__ = ["serve_write"]


def _options(request: Request) -> WriteOptions:
    manager = request.query.get("fieldManager")
    if not manager:
        # The API server names an unnamed manager after the client's user agent.
        manager = request.headers.get("user-agent", "unknown").split("/")[0] or "unknown"
    return WriteOptions(
        manager=manager,
        dry_run=request.query.get("dryRun") == "All",
        force=request.flag("force"),
    )


async def _json_body(request: Request) -> Any:
    data = await request.body()
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InvalidObject(f"the request body is not valid JSON: {exc}", status_code=400) from exc


async def serve_write(
    cluster: Cluster, target: ReadTarget, sub: str | None, request: Request, send: Send
) -> None:
    rtype, namespace, name = target.rtype, target.namespace, target.name
    verb = request.verb
    if sub == "scale":
        await _serve_scale(cluster, target, request, send)
        return
    if sub == "status" and verb == "get":
        assert name is not None
        await respond(send, 200, cluster.get_stored(rtype, namespace or "", name).raw, JSON)
        return
    options = _options(request)
    if verb == "create":
        stored = create(cluster, rtype, namespace, await _json_body(request), options)
        cluster.reconcile()
        await respond(send, 201, stored.raw, JSON)
    elif verb == "update":
        assert name is not None
        stored = replace(cluster, rtype, namespace, name, await _json_body(request), sub, options)
        cluster.reconcile()
        await respond(send, 200, stored.raw, JSON)
    elif verb == "patch":
        assert name is not None
        content_type = request.headers.get("content-type", "")
        stored, created = patch(
            cluster, rtype, namespace, name, content_type, await request.body(), sub, options
        )
        cluster.reconcile()
        await respond(send, 201 if created else 200, stored.raw, JSON)
    elif verb == "delete":
        assert name is not None
        body = await request.body()
        delete_options: dict[str, Any] = {}
        if body.strip():
            try:
                delete_options = msgspec.json.decode(body)
            except msgspec.DecodeError as exc:
                raise _status.bad_request(f"DeleteOptions is not valid JSON: {exc}") from exc
        grace = delete_options.get("gracePeriodSeconds")
        if "gracePeriodSeconds" in request.query:
            grace = request.int_param("gracePeriodSeconds")
        final = delete(
            cluster,
            rtype,
            namespace,
            name,
            propagation=request.query.get("propagationPolicy")
            or delete_options.get("propagationPolicy"),
            grace_period=grace,
            preconditions=delete_options.get("preconditions"),
        )
        cluster.reconcile()
        if rtype.has_status:  # like the API server: workloads answer with the object,
            await respond(send, 200, final.raw, JSON)  # plain kinds with a Status
        else:
            await respond_json(
                send,
                200,
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {
                        "name": name,
                        "group": rtype.group,
                        "kind": rtype.plural,
                        "uid": final.uid,
                    },
                },
            )
    else:  # deletecollection: every object the selectors match, each deleted as by DELETE
        selector = Selector.parse(
            request.query.get("labelSelector"), request.query.get("fieldSelector")
        )
        page = cluster.list_page(rtype, namespace=namespace, selector=selector)
        deleted = []
        for stored in page.items:
            if stored.key in cluster.store(rtype).objects:
                final = delete(cluster, rtype, stored.namespace or None, stored.name)
                deleted.append(final.decode())
        cluster.reconcile()
        await respond_json(
            send,
            200,
            {
                "kind": rtype.list_kind,
                "apiVersion": rtype.api_version,
                "metadata": {"resourceVersion": str(cluster.resource_version)},
                "items": deleted,
            },
        )


def scale_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The autoscaling/v1 Scale view of a Deployment, ReplicaSet or StatefulSet."""
    meta = obj["metadata"]
    selector = (obj.get("spec") or {}).get("selector") or {}
    labels = selector.get("matchLabels") or {}
    status = obj.get("status") or {}
    scale_status: dict[str, Any] = {"replicas": status.get("replicas", 0)}
    if labels:
        scale_status["selector"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 1)},
        "status": scale_status,
    }


async def _serve_scale(cluster: Cluster, target: ReadTarget, request: Request, send: Send) -> None:
    rtype, namespace, name = target.rtype, target.namespace or "", target.name
    assert name is not None
    old = cluster.get_stored(rtype, namespace, name)
    obj = old.decode()
    if request.verb == "get":
        await respond_json(send, 200, scale_of(obj))
        return
    if request.verb == "update":
        scale = await _json_body(request)
    elif request.verb == "patch":
        content_type = request.headers.get("content-type", "")
        document = decode_patch(content_type, await request.body())
        if content_type.startswith("application/json-patch+json"):
            scale = apply_json_patch(scale_of(obj), document)
        else:
            scale = apply_merge_patch(scale_of(obj), document)
    else:
        raise _status.method_not_allowed(request.method)
    if not isinstance(scale, dict):
        raise InvalidObject("a Scale must be a JSON object", status_code=400)
    replicas = (scale.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or replicas < 0:
        raise InvalidObject(
            "spec.replicas: Invalid value: must be a non-negative integer",
            causes=[
                {"reason": "FieldValueInvalid", "message": "must be >= 0", "field": "spec.replicas"}
            ],
            kind="Scale",
            group="autoscaling",
            name=name,
        )
    given_rv = (scale.get("metadata") or {}).get("resourceVersion")
    if given_rv not in (None, "") and str(given_rv) != str(old.rv):
        raise _status.conflict(rtype, name)
    obj.setdefault("spec", {})["replicas"] = replicas
    options = _options(request)
    stored = replace(cluster, rtype, target.namespace, name, obj, None, options)
    cluster.reconcile()
    if not options.dry_run:
        stored = cluster.get_stored(rtype, namespace, name)  # with the controllers' status
    await respond_json(send, 200, scale_of(stored.decode()))
