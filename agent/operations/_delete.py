"""deleteManifest: one object by name, or every object of ``kinds`` matching
``labelSelectors`` in the location.

``options.cascading`` true -> Background, false -> Orphan, or a literal
``foreground``/``background``/``orphan``; ``options.orphanDependents`` "true" -> Orphan and
wins; ``options.gracePeriodSeconds``. An object already gone is not an error (Clouddriver
deletes with ``--ignore-not-found``).
"""

from __future__ import annotations

from typing import Any

from ._context import OperationContext
from ._description import Description
from ._errors import InvalidOperation
from ._outcome import DeployResult

__all__ = ["delete_manifest", "delete_options", "label_selector"]

PHASE = "DELETE_KUBERNETES_MANIFEST"
_POLICIES = {"foreground": "Foreground", "background": "Background", "orphan": "Orphan"}


def delete_options(options: Description) -> dict[str, Any]:
    """Clouddriver's delete options as Kubernetes DeleteOptions fields."""
    out: dict[str, Any] = {}
    cascading = options.fields.get("cascading")
    if isinstance(cascading, str) and cascading.strip().lower() in _POLICIES:
        out["propagationPolicy"] = _POLICIES[cascading.strip().lower()]
    elif cascading is not None:
        out["propagationPolicy"] = "Background" if options.flag("cascading") else "Orphan"
    if options.flag("orphanDependents"):
        out["propagationPolicy"] = "Orphan"
    grace = options.integer("gracePeriodSeconds")
    if grace is not None:
        if grace < 0:
            raise InvalidOperation(f"{options.operation}.gracePeriodSeconds: must be >= 0")
        out["gracePeriodSeconds"] = grace
    return out


def label_selector(value: Any, *, where: str) -> str:
    """``labelSelectors`` as a selector string: a string as is, or Clouddriver's object
    ``{"selectors": [{"kind": "EQUALS"|"NOT_EQUALS"|"CONTAINS"|"NOT_CONTAINS"|"EXISTS"|
    "NOT_EXISTS", "key", "values"}]}``."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        return value
    selectors = value.get("selectors") if isinstance(value, dict) else value
    if not isinstance(selectors, list):
        raise InvalidOperation(f"{where}: expected a selector string or {{selectors: [...]}}")
    parts = []
    for index, sel in enumerate(selectors):
        if not isinstance(sel, dict) or not sel.get("key"):
            raise InvalidOperation(f"{where}.selectors[{index}]: expected {{kind, key, values}}")
        key, kind = str(sel["key"]), str(sel.get("kind", "EQUALS")).upper()
        values = [str(v) for v in sel.get("values") or ()]
        if kind == "EQUALS" and len(values) == 1:
            parts.append(f"{key}={values[0]}")
        elif kind == "NOT_EQUALS" and len(values) == 1:
            parts.append(f"{key}!={values[0]}")
        elif kind in ("CONTAINS", "EQUALS"):
            parts.append(f"{key} in ({','.join(values)})")
        elif kind in ("NOT_CONTAINS", "NOT_EQUALS"):
            parts.append(f"{key} notin ({','.join(values)})")
        elif kind == "EXISTS":
            parts.append(key)
        elif kind == "NOT_EXISTS":
            parts.append(f"!{key}")
        else:
            raise InvalidOperation(f"{where}.selectors[{index}].kind: unknown {kind!r}")
    return ",".join(parts)


async def delete_manifest(ctx: OperationContext) -> None:
    d = ctx.description
    options = delete_options(d.sub("options"))
    result = DeployResult()  # Clouddriver's OperationResult: ``manifests`` is there, empty
    ctx.outcome.result = result
    namespace = d.namespace
    name = d.text("name")
    ctx.outcome.say(f"Beginning deletion of manifests in account {ctx.account}")
    targets: list[tuple[Any, str]] = []
    if name:
        res = await ctx.cluster.kinds.resolve(d.required_text("kind"))
        targets.append((res, name))
    else:
        kinds = d.texts("kinds") or ([d.text("kind")] if d.text("kind") else [])
        if not kinds:
            raise InvalidOperation("deleteManifest: give manifestName, or kinds + labelSelectors")
        selector = label_selector(
            d.fields.get("labelSelectors"), where="deleteManifest.labelSelectors"
        )
        if not selector:
            raise InvalidOperation(
                "deleteManifest.labelSelectors: required when deleting by kinds (without it "
                "every object of those kinds would go)"
            )
        for kind in kinds:
            res = await ctx.cluster.kinds.resolve(kind)
            for obj in await ctx.cluster.list(res, namespace, label_selector=selector):
                targets.append((res, str(obj["metadata"]["name"])))
    for res, target in targets:
        ns = namespace if res.namespaced else ""
        if res.namespaced and not ns:
            raise InvalidOperation(f"deleteManifest.location: required for {res.kind} {target}")
        ctx.outcome.say(f"Deleting {res.spinnaker_kind} {target}")
        gone = await ctx.cluster.delete(res, ns, target, options)
        if gone is not None:
            ctx.outcome.removed(res, ns, target, uid=gone.uid)
        else:
            ctx.outcome.say(f"{res.spinnaker_kind} {target} was already gone")
        result.add_name(ns, f"{res.spinnaker_kind} {target}")
    ctx.outcome.say("Delete manifest task completed successfully.")
