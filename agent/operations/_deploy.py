"""deployManifest, runJob and cleanupArtifacts: prepare (``_manifests.py``), then apply.

Versioning reads the cluster: the next ``-vNNN`` is one past the highest version of the
same base name and kind in the namespace (listed live, so two deploys of different content
give ``-v000`` then ``-v001``); a version whose content equals the new manifest's is reused
instead (``_reuse.py``). Binding (``_binding.py``): every manifest, versioned or not, once
deployed is an artifact of its kind that later manifests of the deploy bind (a Deployment
naming ConfigMap ``web-config`` gets ``web-config-v000``), with the stage's required and
optional artifacts; a required artifact that cannot bind fails the stage before anything is
applied. ``use-source-capacity`` copies ``spec.replicas`` from the newest
existing version (or the live object of an unversioned kind). Traffic: each
``traffic.spinnaker.io/load-balancers`` entry ("service name") adds that Service's selector
to the pod template's labels when ``enableTraffic`` (default true).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ._apply import apply_object
from ._binding import (
    ARTIFACT_KINDS,
    ArtifactKey,
    artifact_key,
    bind,
    references,
    required_key,
    upstream_bound,
)
from ._context import OperationContext
from ._errors import InvalidOperation
from ._kinds import Resource, lower_camel
from ._manifests import (
    ARTIFACT,
    LOAD_BALANCERS,
    RECREATE,
    Strategy,
    annotations_of,
    deploy_order,
    flatten,
    is_versioned,
    json_copy,
    label_moniker,
    next_version,
    pod_template_metadata,
    set_artifact_annotations,
    version_of,
)
from ._outcome import DeployResult
from ._reuse import matching_version

__all__ = ["cleanup_artifacts", "deploy_manifest", "run_job"]

DEPLOY = "DEPLOY_KUBERNETES_MANIFEST"
RUN_JOB = "RUN_KUBERNETES_JOB"
CLEANUP = "CLEANUP_KUBERNETES_ARTIFACTS"
RUN_JOB_REFUSAL = "Only kind of Job is accepted for the Run Job operation."


Pool = dict[ArtifactKey, Mapping[str, Any]]


def _artifacts(ctx: OperationContext) -> tuple[list[Mapping[str, Any]], Pool]:
    """The required artifacts, and the pool binding starts from: required then optional,
    the first of a key kept (Clouddriver's initializeArtifacts). With
    ``enableArtifactBinding: false`` neither binds nor is checked; the deploy's own
    manifests still bind into each other."""
    d = ctx.description
    if not d.flag("enableArtifactBinding", True):
        return [], {}
    required = [a for a in d.items("requiredArtifacts") if isinstance(a, Mapping)]
    optional = [a for a in d.items("optionalArtifacts") if isinstance(a, Mapping)]
    pool: Pool = {}
    for artifact in required + optional:
        pool.setdefault(artifact_key(artifact), artifact)
    return required, pool


def _check_required(
    required: Sequence[Mapping[str, Any]], bound: Sequence[Mapping[str, Any]]
) -> None:
    done = {required_key(a) for a in bound}
    unbound = [a for a in required if required_key(a) not in done]
    if unbound:
        names = ", ".join(str(a.get("reference") or a.get("name")) for a in unbound)
        raise InvalidOperation(
            f"The following required artifacts could not be bound: '[{names}]'. Check that "
            "the Docker image name above matches the name used in the image field of your "
            "manifest. Failing the stage as this is likely a configuration error."
        )


async def _traffic(
    ctx: OperationContext, obj: dict[str, Any], strategy: Strategy, namespace: str
) -> None:
    if not strategy.load_balancers or not ctx.description.flag("enableTraffic", True):
        return
    template = pod_template_metadata(obj, create=True)
    if template is None:
        return
    service = await ctx.cluster.kinds.resolve("Service")
    labels = template.setdefault("labels", {})
    for entry in strategy.load_balancers:
        kind, _, name = entry.partition(" ")
        if kind.lower() != "service" or not name:
            raise InvalidOperation(
                f'{LOAD_BALANCERS}: {entry!r} is not a "service <name>" load balancer'
            )
        live = await ctx.cluster.get(service, namespace, name)
        if live is None:
            raise InvalidOperation(
                f"load balancer service {name} does not exist in namespace {namespace}"
            )
        selector = (live.get("spec") or {}).get("selector") or {}
        # Clouddriver's KubernetesServiceHandler#attach refuses both.
        if not selector:
            raise InvalidOperation(
                f"Service {name} must have a non-empty selector in order to be attached to a "
                f"workload ({_name_of(obj)})"
            )
        shared = sorted(set(labels) & set(selector))
        if shared:
            raise InvalidOperation(
                f"Service {name}'s selector must have no label keys in common with the target "
                f"workload ({_name_of(obj)} already has {', '.join(shared)}): disabling it would "
                "remove labels it owns"
            )
        labels.update(selector)


def _name_of(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"


def _replicas(obj: Mapping[str, Any]) -> int | None:
    spec = obj.get("spec")
    value = spec.get("replicas") if isinstance(spec, Mapping) else None
    return value if isinstance(value, int) else None


async def _deploy_one(
    ctx: OperationContext,
    obj: dict[str, Any],
    result: DeployResult,
    pool: Pool,
    *,
    namespace_override: str,
    moniker: Mapping[str, Any],
    versioned: bool | None,
) -> None:
    meta = obj.setdefault("metadata", {})
    res: Resource = await ctx.cluster.kinds.resolve(
        str(obj["kind"]), api_version=str(obj.get("apiVersion") or "")
    )
    # generateName without a name: created, never applied, and named by the API server
    # (Clouddriver's CanDeploy#deploy does the same with kubectl create).
    generated = not meta.get("name") and bool(meta.get("generateName"))
    base = str(meta.get("name") or meta.get("generateName") or "")
    if not base:
        raise InvalidOperation(f"{res.kind}: metadata.name is required")
    if res.namespaced:
        namespace = _namespace_of(ctx, obj, namespace_override)
        meta["namespace"] = namespace
    else:
        namespace = ""
        meta.pop("namespace", None)
    strategy = Strategy.of(obj)
    # Bound before versioning and before kubesvc's additions, as Clouddriver binds.
    for artifact in bind(obj, pool.values(), namespace=namespace, account=ctx.account):
        if artifact not in result.bound_artifacts:
            result.bound_artifacts.append(dict(artifact))
    given = json_copy(obj)  # what reuse compares: before kubesvc's additions below
    sequence: int | None = None
    name = base
    source: Mapping[str, Any] | None = None
    expect_new = False
    versions: list[dict[str, Any]] = []
    if not generated and is_versioned(res.kind, strategy, versioned):
        existing = await ctx.cluster.list(res, namespace)
        sequence = next_version(existing, base)
        name = f"{base}-v{sequence:03d}"
        # A list's items may lack apiVersion/kind (the API server leaves them out).
        versions = [
            {"apiVersion": res.api_version, "kind": res.kind, **o}
            for o in existing
            if version_of(o, base) is not None
        ]
        source = max(versions, key=lambda o: version_of(o, base) or 0) if versions else None
        expect_new = True  # one past every listed version: no need to read it first
    elif not generated and strategy.use_source_capacity:
        source = await ctx.cluster.get(res, namespace, base)
    if not generated:
        meta["name"] = name
    if strategy.use_source_capacity and source is not None:
        replicas = _replicas(source)
        if replicas is not None:
            obj.setdefault("spec", {})["replicas"] = replicas
    await _traffic(ctx, obj, strategy, namespace)
    full_moniker = dict(moniker)
    full_moniker.setdefault("cluster", f"{res.spinnaker_kind} {base}")
    artifact_type = f"kubernetes/{res.spinnaker_kind}"
    skip_template_labels = bool(ctx.description.flag("skipSpecTemplateLabels", False))

    def as_version(target: dict[str, Any], number: int | None) -> None:
        label_moniker(
            target, full_moniker, sequence=number, skip_template_labels=skip_template_labels
        )
        set_artifact_annotations(
            target,
            artifact_type=artifact_type,
            base=base,
            namespace=namespace,
            version=f"v{number:03d}" if number is not None else "",
        )

    reused = matching_version(given, versions, base) if versions else None
    if reused is not None:
        sequence, applied = reused[0], dict(reused[1])
        name = f"{base}-v{sequence:03d}"
        ctx.outcome.say(
            f"Reusing {res.spinnaker_kind} {name}: its content equals the new manifest's"
        )
    else:
        as_version(obj, sequence)
        if not generated:
            meta["name"] = name
        ctx.outcome.say(f"Deploying manifest {res.spinnaker_kind} {name}")
        applied = await apply_object(ctx, res, obj, strategy, expect_new=expect_new)
        name = str(applied["metadata"]["name"])  # the API server's, for a generateName
    version = f"v{sequence:03d}" if sequence is not None else ""
    if res.kind == "CustomResourceDefinition":
        ctx.cluster.kinds.invalidate()  # its custom resources may follow in this deploy
    # ``applied`` was decoded from the API server's answer for this call alone: no copy.
    result.manifests.append(ctx.outcome.wrote(applied, owned=True))
    result.add_name(namespace, f"{res.spinnaker_kind} {name}")
    artifact = {
        "type": artifact_type,
        "customKind": res.spinnaker_kind != lower_camel(res.kind),
        "name": base,
        "version": version,
        "location": namespace,
        "reference": name,
        "metadata": {"account": ctx.account},
    }
    result.created_artifacts.append(artifact)
    if not generated:  # nothing can name what the API server named
        # It replaces an upstream artifact of its key (Clouddriver's allArtifacts.put).
        pool[artifact_key(artifact)] = artifact


def _namespace_of(ctx: OperationContext, obj: Mapping[str, Any], override: str) -> str:
    """Where a namespaced manifest goes: the override, its own, the description's, default."""
    meta = obj.get("metadata")
    own = meta.get("namespace") if isinstance(meta, Mapping) else None
    return override or str(own or "") or ctx.description.namespace or "default"


async def _deploy(
    ctx: OperationContext,
    manifests: list[dict[str, Any]],
    *,
    namespace_override: str,
    moniker: Mapping[str, Any],
    versioned: bool | None,
) -> DeployResult:
    required, pool = _artifacts(ctx)
    result = DeployResult()
    ctx.outcome.result = result
    ordered = deploy_order(manifests)
    if required:
        _check_required(
            required,
            upstream_bound(
                ordered,
                pool,
                namespace_of=lambda obj: _namespace_of(ctx, obj, namespace_override),
                account=ctx.account,
            ),
        )
    for obj in ordered:
        await _deploy_one(
            ctx,
            obj,
            result,
            pool,
            namespace_override=namespace_override,
            moniker=moniker,
            versioned=versioned,
        )
    _check_required(required, result.bound_artifacts)
    return result


def _moniker(ctx: OperationContext) -> dict[str, Any]:
    moniker = {k: v for k, v in ctx.description.mapping("moniker").items() if v is not None}
    if not moniker.get("app") and ctx.description.text("application"):
        moniker["app"] = ctx.description.text("application")
    return moniker


# The kinds whose Clouddriver handler is CanReceiveTraffic (server groups, their managers,
# pods): only they get the stage's services as their load-balancers annotation.
_RECEIVES_TRAFFIC = frozenset(
    ("pod", "replicaset", "statefulset", "daemonset", "job", "cronjob", "deployment")
)


def _set_traffic(obj: dict[str, Any], services: list[str]) -> None:
    """Annotate ``obj`` with ``services``; an annotation naming other load balancers is an
    InvalidOperation (Clouddriver's KubernetesManifestAnnotater.setTraffic)."""
    notes = obj.setdefault("metadata", {}).setdefault("annotations", {})
    if LOAD_BALANCERS in notes:
        current = Strategy.of(obj).load_balancers
        if list(current) != services:
            raise InvalidOperation(
                f"Manifest already has {LOAD_BALANCERS} annotation set to {list(current)}. "
                f"Failed attempting to set it to {services}."
            )
        return
    notes[LOAD_BALANCERS] = json.dumps(services)


async def deploy_manifest(ctx: OperationContext) -> None:
    d = ctx.description
    manifests = flatten(d.items("manifests"), where="deployManifest.manifests")
    if not manifests and d.has("manifest"):
        manifests = flatten([d.mapping("manifest")], where="deployManifest.manifest")
    if not manifests:
        raise InvalidOperation("deployManifest.manifests: no manifests to deploy")
    ctx.outcome.say(f"Beginning deployment of manifests in account {ctx.account}")
    services = d.texts("services")
    if services:  # red/black and blue/green: the new server group fronts these services
        for obj in manifests:
            if str(obj.get("kind") or "").lower() in _RECEIVES_TRAFFIC:
                _set_traffic(obj, services)
    await _deploy(
        ctx,
        manifests,
        namespace_override=d.text("namespaceOverride"),
        moniker=_moniker(ctx),
        versioned=d.flag("versioned"),
    )
    ctx.outcome.say("Deploy manifest task completed successfully.")


async def run_job(ctx: OperationContext) -> None:
    d = ctx.description
    manifest = dict(d.mapping("manifest"))
    if manifest.get("kind") != "Job":
        raise InvalidOperation(RUN_JOB_REFUSAL)
    job = flatten([manifest], where="runJob.manifest")[0]
    meta = job.setdefault("metadata", {})
    # Always a new Job, as Clouddriver does: the name as given with the recreate strategy
    # (a Job is immutable: an apply would not run it again), or, when the manifest has a
    # generateName and no name, a create that lets the API server pick the name.
    meta.setdefault("annotations", {})[RECREATE] = "true"
    ctx.outcome.say("Running Kubernetes job...")
    result = await _deploy(
        ctx, [job], namespace_override=d.namespace, moniker=_moniker(ctx), versioned=False
    )
    result.extra["deployedNamesByLocation"] = {
        ns: list(names) for ns, names in result.names_by_namespace.items()
    }
    ctx.outcome.say("Run job completed successfully.")


async def cleanup_artifacts(ctx: OperationContext) -> None:
    d = ctx.description
    manifests = flatten(d.items("manifests"), where="cleanupArtifacts.manifests")
    result = DeployResult(include_manifests=False)
    ctx.outcome.result = result
    ctx.outcome.say(f"Beginning cleanup of artifacts in account {ctx.account}")
    # What the deploy answered (Orca passes its manifests): those versions, and what they
    # reference (the ConfigMaps/Secrets their pods mount, an HPA's target), stay whatever
    # their number (a reused version is
    # the oldest; deleting it would take the config from under the new pods).
    kept: set[tuple[str, str, str]] = set()
    for obj in manifests:
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or d.namespace or "default")
        kept.add((ns, str(obj.get("kind") or ""), str(meta.get("name") or "")))
        kept.update(
            (ns, ARTIFACT_KINDS[kind], name)
            for kind, name in references(obj)
            if kind in ARTIFACT_KINDS
        )
    for obj in manifests:
        strategy = Strategy.of(obj)
        if strategy.max_version_history is None:
            continue
        meta = obj.get("metadata") or {}
        res = await ctx.cluster.kinds.resolve(
            str(obj["kind"]), api_version=str(obj.get("apiVersion") or "")
        )
        namespace = str(meta.get("namespace") or d.namespace or "default") if res.namespaced else ""
        notes = annotations_of(obj)
        base = notes.get(ARTIFACT + "name") or str(meta.get("name") or "")
        versions = sorted(
            (
                (n, o)
                for o in await ctx.cluster.list(res, namespace)
                if (n := version_of(o, base)) is not None
            ),
            key=lambda pair: pair[0],
        )
        keep = max(strategy.max_version_history, 0)
        doomed = [
            (n, o)
            for n, o in versions
            if (namespace or d.namespace or "default", res.kind, o["metadata"]["name"]) not in kept
        ][: max(len(versions) - keep, 0)]
        for _, old in doomed:
            name = str(old["metadata"]["name"])
            ctx.outcome.say(f"Deleting {res.spinnaker_kind} {name} (max-version-history {keep})")
            if await ctx.cluster.delete(res, namespace, name, {"propagationPolicy": "Background"}):
                ctx.outcome.removed(res, namespace, name)
                result.add_name(namespace, f"{res.spinnaker_kind} {name}")
    ctx.outcome.say("Cleanup of artifacts completed.")
