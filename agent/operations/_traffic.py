"""disableManifest and enableManifest: take a server group out of its Services, or put it back.

Clouddriver's semantics (``AbstractKubernetesEnableDisableManifestOperation`` and
``KubernetesServiceHandler#attachPatch/#detachPatch``):

1. The target is read live; absent -> "Could not find kubernetes manifest: ...".
2. The load balancers are the description's ``loadBalancers`` when it names any, else the
   target's ``traffic.spinnaker.io/load-balancers`` annotation; none -> success, nothing done.
   Each is ``"service <name>"`` of a Service in the target's namespace.
3. Per load balancer, in order: one JSON patch of the target's pod-template labels
   (``/spec/template/metadata/labels``; an object without a template gets its own
   ``/metadata/labels``), then -- for a ReplicaSet only -- the same patch of each live pod it
   owns (listed by its selector, kept when an ownerReference names it), because a
   ReplicaSet does not roll its pods when its template changes. Disable removes each
   selector key the labels have; enable replaces (present) or adds each selector key with the
   selector's value. Any other workload (a Deployment, a StatefulSet) gets the template patch
   alone, which rolls it: its new pods carry the new labels.

A ReplicaSet a Deployment owns is patched like a bare one (Clouddriver does not tell them
apart; Deck only offers Enable/Disable on ReplicaSets without a manager). The history says so,
because the Deployment's controller will treat the patched template as drift.

The result object is ``null`` (Clouddriver returns none); every patched object is reported so
the server's cache shows the new labels before the watch event arrives.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._context import OperationContext
from ._errors import InvalidOperation, KubernetesRefusal
from ._kinds import Resource
from ._kube import JSON_PATCH
from ._manifests import Strategy

__all__ = [
    "DISABLE",
    "ENABLE",
    "attach_patch",
    "detach_patch",
    "disable_manifest",
    "enable_manifest",
    "selector_string",
]

DISABLE = "DISABLE_MANIFEST"
ENABLE = "ENABLE_MANIFEST"
TEMPLATE_LABELS = "/spec/template/metadata/labels"
OWN_LABELS = "/metadata/labels"


def _escape(key: str) -> str:
    """An RFC 6901 reference token: ``~`` -> ``~0`` then ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


def _labels_at(obj: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    """(the labels' JSON pointer, the labels there or None when the map is absent)."""
    spec = obj.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    if isinstance(template, Mapping):
        meta = template.get("metadata")
        labels = meta.get("labels") if isinstance(meta, Mapping) else None
        return TEMPLATE_LABELS, labels if isinstance(labels, Mapping) else None
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    return OWN_LABELS, labels if isinstance(labels, Mapping) else None


def detach_patch(selector: Mapping[str, str], obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 operations removing each selector key ``obj``'s labels have."""
    path, labels = _labels_at(obj)
    present = labels or {}
    return [{"op": "remove", "path": f"{path}/{_escape(k)}"} for k in selector if k in present]


def attach_patch(selector: Mapping[str, str], obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The RFC 6902 operations setting each selector key to the selector's value."""
    path, labels = _labels_at(obj)
    if not selector:
        return []
    if labels is None:
        # Clouddriver's patch would fail on the missing map; create it first instead.
        parent = path.rsplit("/", 1)[0]
        ops: list[dict[str, Any]] = []
        if path == TEMPLATE_LABELS and not isinstance(
            ((obj.get("spec") or {}).get("template") or {}).get("metadata"), Mapping
        ):
            ops.append({"op": "add", "path": parent, "value": {}})
        ops.append({"op": "add", "path": path, "value": dict(selector)})
        return ops
    return [
        {"op": "replace" if k in labels else "add", "path": f"{path}/{_escape(k)}", "value": v}
        for k, v in selector.items()
    ]


def selector_string(selector: Any) -> str:
    """A LabelSelector object (``matchLabels`` + ``matchExpressions``) as a query string."""
    if not isinstance(selector, Mapping):
        return ""
    terms = [f"{k}={v}" for k, v in (selector.get("matchLabels") or {}).items()]
    for expr in selector.get("matchExpressions") or ():
        if not isinstance(expr, Mapping) or not expr.get("key"):
            continue
        key, operator = str(expr["key"]), str(expr.get("operator", ""))
        values = ",".join(str(v) for v in expr.get("values") or ())
        if operator == "In":
            terms.append(f"{key} in ({values})")
        elif operator == "NotIn":
            terms.append(f"{key} notin ({values})")
        elif operator == "Exists":
            terms.append(key)
        elif operator == "DoesNotExist":
            terms.append(f"!{key}")
    return ",".join(terms)


def _coordinates(kind: str, namespace: str, name: str) -> str:
    # Clouddriver's KubernetesCoordinates.toString(), which its messages quote.
    return f"KubernetesCoordinates(kind={kind}, namespace={namespace}, name={name})"


async def _service(
    ctx: OperationContext, services: Resource, entry: str, namespace: str
) -> dict[str, str]:
    """The selector of the load balancer ``entry`` ("service <name>") in ``namespace``."""
    tokens = entry.split()
    if len(tokens) != 2:
        raise InvalidOperation(
            f"Failed to perform operation with load balancer '{entry}'. Load balancers must be "
            "specified in the form '{kind} {name}', e.g. 'service my-service'"
        )
    kind, name = tokens
    if kind.lower() != "service":
        raise InvalidOperation(
            f"No support for load balancing via {kind}: only a Service can be a load balancer "
            f"(in '{entry}')"
        )
    live = await ctx.cluster.get(services, namespace, name)
    if live is None:
        raise KubernetesRefusal(
            f"Could not find load balancer: {_coordinates('service', namespace, name)}.",
            status_code=404,
            reason="NotFound",
        )
    selector = (live.get("spec") or {}).get("selector") or {}
    return {str(k): str(v) for k, v in selector.items()}


async def _pods_of(
    ctx: OperationContext, pods: Resource, replica_set: Mapping[str, Any], namespace: str
) -> list[dict[str, Any]]:
    meta = replica_set.get("metadata") or {}
    name = meta.get("name")
    selector = selector_string((replica_set.get("spec") or {}).get("selector"))
    found = await ctx.cluster.list(pods, namespace, label_selector=selector)
    return [
        pod
        for pod in found
        if any(
            ref.get("name") == name and ref.get("kind") == "ReplicaSet"
            for ref in (pod.get("metadata") or {}).get("ownerReferences") or ()
        )
    ]


async def _switch(ctx: OperationContext, verb: str, attach: bool) -> None:
    d = ctx.description
    res = await ctx.cluster.kinds.resolve(d.required_text("kind"))
    name = d.required_text("name")
    namespace = d.namespace if res.namespaced else ""
    if res.namespaced and not namespace:
        raise InvalidOperation(f"{verb}Manifest.location: required for {res.kind} {name}")
    ctx.outcome.say(f"Starting {verb} operation in account {ctx.account}...")
    coords = _coordinates(res.spinnaker_kind, namespace, name)
    target = await ctx.cluster.get(res, namespace, name)
    if target is None:
        raise KubernetesRefusal(
            f"Could not find kubernetes manifest: {coords}", status_code=404, reason="NotFound"
        )
    ctx.outcome.say(f"Getting load balancer list to {verb}...")
    supplied = d.texts("loadBalancers")
    if supplied:
        balancers = list(supplied)
        ctx.outcome.say(f"Using supplied list [{', '.join(balancers)}]")
    else:
        balancers = list(Strategy.of(target).load_balancers)
        ctx.outcome.say(f"Using annotated list [{', '.join(balancers)}]")
    if balancers and res.kind == "ReplicaSet":
        managers = [
            f"{ref.get('kind')} {ref.get('name')}"
            for ref in (target.get("metadata") or {}).get("ownerReferences") or ()
            if ref.get("controller")
        ]
        if managers:
            ctx.outcome.say(
                f"replicaSet {name} is managed by {', '.join(managers)}: its controller may "
                "treat the patched template as drift"
            )
    if balancers:
        await _patch_all(ctx, res, namespace, target, balancers, attach=attach)
    ctx.outcome.say(f"{verb.capitalize()} operation for {coords} succeeded")


async def _patch_all(
    ctx: OperationContext,
    res: Resource,
    namespace: str,
    target: dict[str, Any],
    balancers: list[str],
    *,
    attach: bool,
) -> None:
    name = str(target["metadata"]["name"])
    services = await ctx.cluster.kinds.resolve("Service")
    pods = await ctx.cluster.kinds.resolve("Pod")
    patch = attach_patch if attach else detach_patch
    for entry in balancers:
        selector = await _service(ctx, services, entry, namespace)
        ctx.outcome.say(f"Patching target for '{entry}'")
        ops = patch(selector, target)
        if ops:
            # The patched object carries the labels the next load balancer's patch starts
            # from (Clouddriver reuses the first read, so two Services sharing a key fail).
            target = await ctx.cluster.patch(res, namespace, name, ops, JSON_PATCH)
            ctx.outcome.wrote(target)
        if res.kind != "ReplicaSet":
            continue
        ctx.outcome.say(f"Patching pods for '{entry}'")
        for pod in await _pods_of(ctx, pods, target, namespace):
            pod_ops = patch(selector, pod)
            if not pod_ops:
                continue
            pod_name = str(pod["metadata"]["name"])
            try:
                patched = await ctx.cluster.patch(pods, namespace, pod_name, pod_ops, JSON_PATCH)
            except KubernetesRefusal as exc:
                if exc.status_code != 404:
                    raise
                continue  # the pod went away since the list: nothing left to patch
            ctx.outcome.wrote(patched)


async def disable_manifest(ctx: OperationContext) -> None:
    """Remove the load balancers' selector labels from the target (and a ReplicaSet's pods)."""
    await _switch(ctx, "disable", attach=False)


async def enable_manifest(ctx: OperationContext) -> None:
    """Add the load balancers' selector labels to the target (and a ReplicaSet's pods)."""
    await _switch(ctx, "enable", attach=True)
