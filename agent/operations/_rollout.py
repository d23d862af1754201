"""scaleManifest, patchManifest and the rollout operations (undo, pause, resume, restart).

Undo is done the way ``kubectl rollout undo`` does it for a Deployment: the ReplicaSets the
Deployment owns carry ``deployment.kubernetes.io/revision``; the chosen revision's pod
template (minus the ``pod-template-hash`` label) is written back with a JSON patch replacing
``/spec/template``. StatefulSets and DaemonSets keep their history in ControllerRevisions
(``revision`` and ``data.spec.template``), read and written back the same way.
"""

from __future__ import annotations

import copy
import datetime
from typing import Any

from ._binding import bind
from ._context import OperationContext
from ._errors import InvalidOperation, KubernetesRefusal, UnsupportedOperation
from ._kinds import Resource
from ._kube import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from ._manifests import annotations_of
from ._outcome import DeployResult

__all__ = [
    "patch_manifest",
    "pause_rollout",
    "resume_rollout",
    "rolling_restart",
    "scale_manifest",
    "undo_rollout",
]

REVISION = "deployment.kubernetes.io/revision"
HASH_LABEL = "pod-template-hash"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
SCALABLE = frozenset({"Deployment", "ReplicaSet", "StatefulSet"})
ROLLABLE = frozenset({"Deployment", "StatefulSet", "DaemonSet"})
PATCH_TYPES = {"strategic": STRATEGIC_PATCH, "merge": MERGE_PATCH, "json": JSON_PATCH}


async def _target(
    ctx: OperationContext, operation: str, kinds: frozenset[str] | None
) -> tuple[Resource, str, str, dict[str, Any]]:
    """The (resource, namespace, name, live object) an operation acts on; refuses a kind
    outside ``kinds`` naming the kind and the operation, and a missing object (404)."""
    d = ctx.description
    res = await ctx.cluster.kinds.resolve(d.required_text("kind"))
    name = d.required_text("name")
    if kinds is not None and res.kind not in kinds:
        raise UnsupportedOperation(
            f"{operation} is not supported for kind {res.kind} (supported: "
            f"{', '.join(sorted(kinds))})"
        )
    namespace = d.namespace if res.namespaced else ""
    if res.namespaced and not namespace:
        raise InvalidOperation(f"{operation}.location: required for {res.kind} {name}")
    live = await ctx.cluster.get(res, namespace, name)
    if live is None:
        raise KubernetesRefusal(
            f'{res.plural}{"." + res.group if res.group else ""} "{name}" not found',
            status_code=404,
            reason="NotFound",
        )
    return res, namespace, name, live


async def scale_manifest(ctx: OperationContext) -> None:
    replicas = ctx.description.integer("replicas") or 0  # missing means 0 (Clouddriver)
    if replicas < 0:
        raise InvalidOperation(f"scaleManifest.replicas: must be >= 0, got {replicas}")
    res, namespace, name, _ = await _target(ctx, "scaleManifest", SCALABLE)
    ctx.outcome.say(f"Scaling {res.spinnaker_kind} {name} in {namespace} to {replicas} replicas")
    await ctx.cluster.patch(
        res, namespace, name, {"spec": {"replicas": replicas}}, MERGE_PATCH, subresource="scale"
    )
    fresh = await ctx.cluster.get(res, namespace, name)
    if fresh is not None:
        ctx.outcome.wrote(fresh)
    ctx.outcome.say("Scale manifest task completed successfully.")


async def patch_manifest(ctx: OperationContext) -> None:
    d = ctx.description
    res, namespace, name, _ = await _target(ctx, "patchManifest", None)
    options = d.sub("options")
    strategy = options.text("mergeStrategy", "strategic").lower()
    if strategy not in PATCH_TYPES:
        raise InvalidOperation(
            f"patchManifest.options.mergeStrategy: expected strategic, merge or json, got "
            f"{strategy!r}"
        )
    body = d.fields.get("patchBody")
    if strategy == "json":
        if not isinstance(body, list):
            raise InvalidOperation("patchManifest.patchBody: a json patch is a list of operations")
    elif not isinstance(body, dict):
        raise InvalidOperation(f"patchManifest.patchBody: a {strategy} patch is an object")
    result = DeployResult()
    ctx.outcome.result = result
    if isinstance(body, dict):
        artifacts = [
            a
            for a in d.items("allArtifacts") or d.items("requiredArtifacts")
            if isinstance(a, dict)
        ]
        shaped = {**copy.deepcopy(body), "kind": res.kind}
        bound = bind(shaped, artifacts, namespace=namespace, account=ctx.account)
        result.bound_artifacts.extend(dict(a) for a in bound)
        shaped.pop("kind")
        body = shaped
    ctx.outcome.say(f"Patching {res.spinnaker_kind} {name} in {namespace} ({strategy})")
    patched = await ctx.cluster.patch(res, namespace, name, body, PATCH_TYPES[strategy])
    ctx.outcome.wrote(patched)
    result.add_name(namespace, f"{res.spinnaker_kind} {name}")
    result.manifests.append({"kind": res.kind, "metadata": {"name": name, "namespace": namespace}})
    ctx.outcome.say("Patch manifest task completed successfully.")


def _revision(obj: dict[str, Any]) -> int | None:
    try:
        return int(annotations_of(obj).get(REVISION, ""))
    except ValueError:
        return None


async def _history(
    ctx: OperationContext, res: Resource, namespace: str, live: dict[str, Any]
) -> dict[int, dict[str, Any]]:
    """Revision number -> pod template: a Deployment's from the ReplicaSets it owns (their
    revision annotation), a StatefulSet's or DaemonSet's from its ControllerRevisions (their
    ``data.spec.template``, as ``kubectl rollout undo`` reads them)."""
    uid = live["metadata"].get("uid")
    source = "ReplicaSet" if res.kind == "Deployment" else "ControllerRevision"
    history: dict[int, dict[str, Any]] = {}
    for item in await ctx.cluster.list(await ctx.cluster.kinds.resolve(source), namespace):
        owners = item.get("metadata", {}).get("ownerReferences") or ()
        if not any(o.get("uid") == uid and o.get("controller") for o in owners):
            continue
        if source == "ReplicaSet":
            revision = _revision(item)
            template = (item.get("spec") or {}).get("template") or {}
        else:
            number = item.get("revision")
            revision = number if isinstance(number, int) else None
            template = ((item.get("data") or {}).get("spec") or {}).get("template") or {}
        if revision is not None:
            template = copy.deepcopy(template)
            template.pop("$patch", None)
            labels = (template.get("metadata") or {}).get("labels")
            if isinstance(labels, dict):
                labels.pop(HASH_LABEL, None)
            history[revision] = template
    return history


async def undo_rollout(ctx: OperationContext) -> None:
    d = ctx.description
    res, namespace, name, live = await _target(ctx, "undoRolloutManifest", ROLLABLE)
    kind = res.spinnaker_kind
    if (live.get("spec") or {}).get("paused"):
        raise InvalidOperation(
            f"you cannot rollback a paused deployment; resume it first with "
            f"resumeRolloutManifest (deployment {name}) and try again"
        )
    history = await _history(ctx, res, namespace, live)
    revisions = sorted(history)
    back = d.integer("numRevisionsBack")
    wanted = d.integer("revision")
    if back is not None:
        if back < 0 or back >= len(revisions):
            raise InvalidOperation(
                f"cannot undo {kind} {name} {back} revisions back: only {len(revisions)} "
                f"revisions exist"
            )
        target = revisions[len(revisions) - 1 - back]
    elif wanted:
        if wanted not in history:
            raise InvalidOperation(
                f"unable to find specified revision {wanted} in history of {kind} {name} "
                f"(revisions: {', '.join(map(str, revisions)) or 'none'})"
            )
        target = wanted
    else:
        if len(revisions) < 2:
            raise InvalidOperation(f'no rollout history found for {kind} "{name}"')
        target = revisions[-2]
    template = history[target]
    ctx.outcome.say(f"Rolling back {kind} {name} in {namespace} to revision {target}")
    if template == (live.get("spec") or {}).get("template"):
        ctx.outcome.say(f"skipped rollback (current template already matches revision {target})")
        ctx.outcome.wrote(live)
        return
    patched = await ctx.cluster.patch(
        res,
        namespace,
        name,
        [{"op": "replace", "path": "/spec/template", "value": template}],
        JSON_PATCH,
    )
    ctx.outcome.wrote(patched)
    ctx.outcome.say("Undo rollout manifest task completed successfully.")


async def _set_paused(ctx: OperationContext, operation: str, paused: bool) -> None:
    res, namespace, name, _ = await _target(ctx, operation, ROLLABLE)
    if res.kind != "Deployment":
        raise UnsupportedOperation(
            f"{operation} is not supported for kind {res.kind} (only a Deployment has spec.paused)"
        )
    verb = "Pausing" if paused else "Resuming"
    ctx.outcome.say(f"{verb} rollout of deployment {name} in {namespace}")
    patched = await ctx.cluster.patch(
        res, namespace, name, {"spec": {"paused": paused}}, MERGE_PATCH
    )
    ctx.outcome.wrote(patched)


async def pause_rollout(ctx: OperationContext) -> None:
    await _set_paused(ctx, "pauseRolloutManifest", True)


async def resume_rollout(ctx: OperationContext) -> None:
    await _set_paused(ctx, "resumeRolloutManifest", False)


async def rolling_restart(ctx: OperationContext) -> None:
    res, namespace, name, live = await _target(ctx, "rollingRestartManifest", ROLLABLE)
    if res.kind == "Deployment" and (live.get("spec") or {}).get("paused"):
        raise InvalidOperation(
            f"can't restart paused deployment {name} (resume it first with resumeRolloutManifest)"
        )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ctx.outcome.say(f"Restarting {res.spinnaker_kind} {name} in {namespace}")
    body = {"spec": {"template": {"metadata": {"annotations": {RESTARTED_AT: now}}}}}
    patched = await ctx.cluster.patch(res, namespace, name, body, MERGE_PATCH)
    ctx.outcome.wrote(patched)
