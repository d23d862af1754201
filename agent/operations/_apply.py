"""Putting one prepared object into the cluster: server-side apply, client-side apply,
replace or recreate, chosen by the ``strategy.spinnaker.io`` annotations and
``kubernetes.serverSideApply`` (per kind, then global).

Server-side apply modes (Armory's ``always|never|allowed``): ``never`` never uses it,
``always`` always does, ``allowed`` (the default) when the manifest's
``strategy.spinnaker.io/server-side-apply`` (or ``agent-k8s.armory.io/serverside-apply``)
annotation says ``true`` or ``force-conflicts``; ``force-conflicts`` takes fields over from
other managers. Otherwise client-side apply, like ``kubectl apply``: the object carries the
``kubectl.kubernetes.io/last-applied-configuration`` annotation and an update is a three-way
patch, chosen as kubectl chooses it: a strategic merge patch (``_smp_diff.py``) for a kind
whose PATCH accepts one in the cluster's OpenAPI (the built-in kinds), with the list merge
keys the OpenAPI gives, so entries others added to a list (``kubectl set env``, an injected
sidecar, a webhook's volume) stay; a JSON merge patch (``_threeway.py``, lists replaced
whole) for custom resources, and for every kind when the cluster publishes no OpenAPI.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import trio

from ._context import OperationContext
from ._errors import KubernetesRefusal, OperationTimeout
from ._kinds import Resource
from ._kube import APPLY_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from ._manifests import LAST_APPLIED, Strategy, annotations_of
from ._smp_diff import three_way_strategic_merge_patch
from ._threeway import three_way_merge_patch

__all__ = ["apply_object", "uses_server_side_apply"]

_DECODER = msgspec.json.Decoder()
#: Keys sorted as Go's encoding/json writes a map (kubectl's last-applied annotation).
_SORTED_ENCODER = msgspec.json.Encoder(order="sorted")


def uses_server_side_apply(ctx: OperationContext, res: Resource, strategy: Strategy) -> bool:
    config = ctx.settings.server_side_apply
    mode = config.enabled
    for entry in config.kinds:
        if entry.kind.lower() in (res.kind.lower(), f"{res.kind}.{res.group}".lower()):
            mode = entry.enabled or mode
    if mode == "never":
        return False
    if mode == "always":
        return True
    return strategy.server_side_apply in ("true", "force-conflicts")


# What Go's JSON encoder escapes that Python's leaves alone: kubectl's annotation is Go's.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)


def _with_last_applied(obj: dict[str, Any]) -> dict[str, Any]:
    """A new ``obj`` plus the last-applied annotation holding ``obj`` itself (without it).

    The annotation is written as kubectl writes it (``GetModifiedConfiguration``): the
    object with ``metadata.annotations`` present (``{}`` when it had none), keys sorted,
    Go's escaping, a final newline; so an object applied by kubectl and then by us (or the
    other way round) reads the same last configuration. (msgspec writes it, a tenth of the
    json module's time: the same text but for a float's exponent, ``1e21`` where Go and the
    json module write ``1e+21``; manifests carry quantities as strings.) The copy returned
    is the annotation decoded again: it must be encoded anyway, and decoding costs a third
    of ``copy.deepcopy``."""
    meta = obj["metadata"]
    notes = meta.get("annotations")
    rest = {k: v for k, v in notes.items() if k != LAST_APPLIED} if isinstance(notes, dict) else {}
    clean = {**obj, "metadata": {**meta, "annotations": rest}}
    applied = _SORTED_ENCODER.encode(clean).decode().translate(_GO_ESCAPES) + "\n"
    out: dict[str, Any] = _DECODER.decode(applied)
    out["metadata"]["annotations"][LAST_APPLIED] = applied
    return out


async def _wait_gone(ctx: OperationContext, res: Resource, namespace: str, name: str) -> None:
    with trio.move_on_after(ctx.settings.recreate_wait_seconds):
        while True:
            if await ctx.cluster.get(res, namespace, name) is None:
                return
            await trio.sleep(ctx.settings.recreate_poll_seconds)
    raise OperationTimeout(
        f"{res.kind} {name} in {namespace or 'the cluster'} was still there "
        f"{ctx.settings.recreate_wait_seconds:.0f} s after deleting it for a recreate"
    )


async def apply_object(
    ctx: OperationContext,
    res: Resource,
    obj: dict[str, Any],
    strategy: Strategy,
    *,
    expect_new: bool = False,
) -> dict[str, Any]:
    """Create or update ``obj`` (namespace and name already final, or a ``generateName`` and
    no name: then always a create); returns the object as the API server answered. Raises
    KubernetesRefusal / AgentUnavailable / OperationTimeout.

    ``expect_new``: the caller just listed the namespace and knows the name is free (a new
    ``-vNNN`` version), so client-side apply creates at once instead of reading first; if
    the name was taken meanwhile (409), it applies over it as kubectl would have."""
    meta = obj["metadata"]
    namespace = str(meta.get("namespace") or "") if res.namespaced else ""
    cluster = ctx.cluster
    if not meta.get("name") and meta.get("generateName"):
        # Nothing to look up by name: a create, and the API server picks the name.
        return await cluster.create(res, namespace, obj)
    name = str(meta["name"])
    if uses_server_side_apply(ctx, res, strategy):
        params = {"fieldManager": ctx.settings.field_manager}
        if strategy.server_side_apply == "force-conflicts":
            params["force"] = "true"
        ctx.outcome.say(f"Server-side applying {res.kind} {name}")
        return await cluster.patch(res, namespace, name, obj, APPLY_PATCH, params=params)
    desired = _with_last_applied(obj)
    if expect_new and not strategy.replace:
        try:
            return await cluster.create(res, namespace, desired)
        except KubernetesRefusal as exc:
            if exc.status_code != 409:
                raise
    live = await cluster.get(res, namespace, name)
    if live is not None and strategy.recreate:
        ctx.outcome.say(f"Recreating {res.kind} {name}: deleting the old one")
        await cluster.delete(res, namespace, name, {"propagationPolicy": "Foreground"})
        await _wait_gone(ctx, res, namespace, name)
        live = None
    if live is None:
        return await cluster.create(res, namespace, desired)
    if strategy.replace:
        desired["metadata"]["resourceVersion"] = live["metadata"].get("resourceVersion")
        return await cluster.replace(res, namespace, name, desired)
    original: dict[str, Any] | None = None
    raw = annotations_of(live).get(LAST_APPLIED)
    if raw:
        try:
            decoded = json.loads(raw)
            original = decoded if isinstance(decoded, dict) else None
        except ValueError:
            original = None  # a broken annotation: behave as if never applied
    found = await cluster.schemas.for_kind(res)
    if found is not None and found.kind.strategic:
        patch = three_way_strategic_merge_patch(
            original, desired, live, found.schema, found.kind.root
        )
        patch_type = STRATEGIC_PATCH
    else:
        patch = three_way_merge_patch(original, desired, live)
        patch_type = MERGE_PATCH
    if not patch:
        return live
    return await cluster.patch(res, namespace, name, patch, patch_type)
