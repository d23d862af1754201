"""Writes with the API server's rules: create, replace (also of status), patch (sans-I/O).

Every function takes the decoded request, checks it the way the API server does (names,
namespaces, resourceVersion preconditions), sets what the server sets (uid,
creationTimestamp, generation, managedFields) and commits through :meth:`Cluster.commit`.
Patch bodies are applied by B's pure functions (``_patch``, ``_apply``) and validated by
``_validate``. Deletion lives in ``_deletes``.
"""

from __future__ import annotations

import secrets
import string
from typing import TYPE_CHECKING, Any

import msgspec
import yaml

from kubesim import _status
from kubesim._apply import server_side_apply, update_managed_fields
from kubesim._errors import ApiError, InvalidObject, PatchError
from kubesim._meta import new_uid, now_rfc3339
from kubesim._patch import apply_json_patch, apply_merge_patch, apply_strategic_merge_patch
from kubesim._resources import ResourceType
from kubesim._store import Stored
from kubesim._validate import validate_object

if TYPE_CHECKING:
    from kubesim._cluster import Cluster

__all__ = [
    "PATCH_TYPES",
    "WriteOptions",
    "create",
    "patch",
    "replace",
]

PATCH_TYPES = (
    "application/merge-patch+json",
    "application/json-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
)
_ALNUM = string.ascii_lowercase + string.digits
_SUFFIX_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what the API server's generateName uses


class WriteOptions(msgspec.Struct, frozen=True):
    """Per-request knobs of a write."""

    manager: str = "kubesim"
    now: str = ""
    dry_run: bool = False
    force: bool = False
    # True when the body's managedFields are already right (an apply that creates).
    managed_fields_done: bool = False


DEFAULT_OPTIONS = WriteOptions()


def random_suffix(length: int = 5) -> str:
    return "".join(secrets.choice(_SUFFIX_CHARS) for _ in range(length))


def _now(options: WriteOptions) -> str:
    if options.now:
        return options.now
    return now_rfc3339()


def _check_body(
    rtype: ResourceType,
    body: Any,
    namespace: str | None,
    name: str | None,
    *,
    validate: bool = True,
) -> dict[str, Any]:
    """The request body as an object of ``rtype``; raises InvalidObject 400/422 saying why.

    ``validate=False`` for partial bodies (an applied configuration), checked after merging.
    """
    if validate:
        validate_object(body, kind_info=rtype, namespace=namespace, name=name)
    if not isinstance(body, dict):
        raise InvalidObject("the request body must be a JSON object", status_code=400)
    api_version, kind = body.get("apiVersion"), body.get("kind")
    if api_version not in (None, rtype.api_version) or kind not in (None, rtype.kind):
        raise InvalidObject(
            f"the API version in the data ({api_version}) or kind ({kind}) does not match the "
            f"expected API version ({rtype.api_version}) and kind ({rtype.kind})",
            status_code=400,
        )
    body["apiVersion"], body["kind"] = rtype.api_version, rtype.kind
    meta = body.get("metadata")
    if meta is None:
        meta = body["metadata"] = {}
    if not isinstance(meta, dict):
        raise InvalidObject("metadata: must be an object", status_code=400)
    if rtype.namespaced:
        given = meta.get("namespace")
        if given and namespace and given != namespace:
            raise InvalidObject(
                "the namespace of the provided object does not match the namespace sent on "
                "the request",
                status_code=400,
            )
        meta["namespace"] = given or namespace or "default"
    else:
        meta.pop("namespace", None)
    if name is not None:
        if meta.get("name") not in (None, name):
            raise InvalidObject(
                "the name of the object "
                f"({meta.get('name')}) does not match the name on the URL ({name})",
                status_code=400,
            )
        meta["name"] = name
    if not meta.get("name") and not meta.get("generateName"):
        raise InvalidObject(
            "metadata.name: Required value: name or generateName is required",
            causes=[
                {
                    "reason": "FieldValueRequired",
                    "message": "Required value",
                    "field": "metadata.name",
                }
            ],
            kind=rtype.kind,
            group=rtype.group,
        )
    return body


def _spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _uses_generation(rtype: ResourceType) -> bool:
    return (rtype.has_status and rtype.kind != "Namespace") or rtype.group not in _BUILTIN_GROUPS


_BUILTIN_GROUPS = frozenset(
    {"", "apps", "batch", "networking.k8s.io", "autoscaling", "rbac.authorization.k8s.io",
     "apiextensions.k8s.io"}
)  # fmt: skip


def _check_namespace(cluster: Cluster, rtype: ResourceType, namespace: str) -> None:
    if not rtype.namespaced:
        return
    ns_type = cluster.resolve("", "v1", "namespaces")
    found = cluster.store(ns_type).objects.get(("", namespace))
    if found is None:
        raise _status.not_found(ns_type, namespace)
    if b'"deletionTimestamp"' in found.raw:
        raise ApiError(
            403,
            "Forbidden",
            f"unable to create new content in namespace {namespace} because it is being terminated",
        )


def create(
    cluster: Cluster,
    rtype: ResourceType,
    namespace: str | None,
    body: Any,
    options: WriteOptions = DEFAULT_OPTIONS,
) -> Stored:
    """Create the object; raises ApiError 409 AlreadyExists, 404 (namespace), 400/422."""
    obj = _check_body(rtype, body, namespace, None)
    meta = obj["metadata"]
    if not meta.get("name"):
        meta["name"] = meta["generateName"] + random_suffix()
    ns = meta.get("namespace", "")
    _check_namespace(cluster, rtype, ns)
    if (ns, meta["name"]) in cluster.store(rtype).objects:
        raise _status.already_exists(rtype, meta["name"])
    for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
        meta.pop(field, None)
    meta["uid"] = new_uid()
    meta["creationTimestamp"] = _now(options)
    if _uses_generation(rtype):
        meta["generation"] = 1
    if rtype.has_status and rtype.kind not in ("Namespace",):
        obj.pop("status", None)
    if rtype.kind == "Service" and not rtype.group:
        _service_defaults(cluster, obj)
    if rtype.kind == "Job" and rtype.group == "batch":
        _job_defaults(obj)
    if rtype.kind == "Namespace":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
    if not options.managed_fields_done:
        meta["managedFields"] = update_managed_fields(
            None, obj, manager=options.manager, operation="Update", now=_now(options)
        )
    if options.dry_run:
        return Stored(
            ns, meta["name"], meta["uid"], 0, meta.get("labels") or {}, msgspec.json.encode(obj)
        )
    return cluster.commit(rtype, obj, added=True)


def _service_defaults(cluster: Cluster, obj: dict[str, Any]) -> None:
    """What the API server fills in on a new Service: type, a cluster IP, port defaults."""
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName" and not spec.get("clusterIP"):
        n = cluster.resource_version + 1
        spec["clusterIP"] = f"10.96.{(n >> 8) & 255}.{n & 255}"
    if spec.get("clusterIP") and spec["clusterIP"] != "None":
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    for port in spec.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))


JOB_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _job_defaults(obj: dict[str, Any]) -> None:
    """What the API server fills in on a new Job at admission (SetDefaults_Job, then the job
    strategy's generated selector): both completions and parallelism 1 only when neither is
    given (parallelism alone leaves completions unset: a work queue), backoffLimit 6, the
    object's labels from the template's when it has none, and, unless manualSelector, a
    selector on the controller uid with the job labels on the template."""
    meta = obj["metadata"]
    spec = obj.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
    labels = template_meta.setdefault("labels", {})
    if labels and not meta.get("labels"):
        meta["labels"] = dict(labels)
    if spec.get("manualSelector") is True:
        return
    spec["selector"] = {"matchLabels": {JOB_UID_LABEL: meta["uid"]}}
    for key, value in (
        (JOB_UID_LABEL, meta["uid"]),
        (JOB_NAME_LABEL, meta["name"]),
        ("controller-uid", meta["uid"]),
        ("job-name", meta["name"]),
    ):
        labels.setdefault(key, value)


def _check_rv(rtype: ResourceType, old: Stored, given: Any) -> None:
    if given not in (None, "") and str(given) != str(old.rv):
        raise _status.conflict(rtype, old.name)


def _finish_update(
    cluster: Cluster,
    rtype: ResourceType,
    old_obj: dict[str, Any],
    new: dict[str, Any],
    subresource: str | None,
    options: WriteOptions,
    *,
    operation: str = "Update",
) -> Stored:
    """Carry over what clients cannot change, bump generation, record managedFields, commit."""
    old_meta = old_obj["metadata"]
    meta = new.setdefault("metadata", {})
    for field in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds"):
        if field in old_meta:
            meta[field] = old_meta[field]
        else:
            meta.pop(field, None)
    meta["name"], new["apiVersion"], new["kind"] = old_meta["name"], rtype.api_version, rtype.kind
    if rtype.namespaced:
        meta["namespace"] = old_meta["namespace"]
    if subresource == "status":
        status = new.get("status")
        new = {**old_obj, "metadata": {**old_meta}}
        if status is not None:
            new["status"] = status
        else:
            new.pop("status", None)
        meta = new["metadata"]
    elif rtype.has_status and rtype.kind != "Namespace":
        if "status" in old_obj:
            new["status"] = old_obj["status"]
        else:
            new.pop("status", None)
    if "generation" in old_meta:
        meta["generation"] = old_meta["generation"]
        if subresource is None and _spec_of(new) != _spec_of(old_obj):
            meta["generation"] = old_meta["generation"] + 1
    if operation != "Apply":
        meta["managedFields"] = update_managed_fields(
            old_obj,
            new,
            manager=options.manager,
            operation="Update",
            now=_now(options),
            subresource=subresource or "",
        )
    if new == old_obj or (
        {**new, "metadata": {**meta, "resourceVersion": None}}
        == {**old_obj, "metadata": {**old_meta, "resourceVersion": None}}
    ):
        return cluster.get_stored(rtype, old_meta.get("namespace", ""), old_meta["name"])
    if options.dry_run:
        raw = msgspec.json.encode(new)
        return Stored(meta.get("namespace", ""), meta["name"], meta.get("uid", ""), 0, {}, raw)
    if meta.get("deletionTimestamp") and not meta.get("finalizers"):
        return cluster.commit_delete(rtype, new)
    return cluster.commit(rtype, new, added=False)


def replace(
    cluster: Cluster,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    body: Any,
    subresource: str | None = None,
    options: WriteOptions = DEFAULT_OPTIONS,
) -> Stored:
    """PUT: replace the object (or its status); raises 409 Conflict on a stale
    resourceVersion, 404 when absent, 400/422 for bad bodies."""
    obj = _check_body(rtype, body, namespace, name)
    old = cluster.get_stored(rtype, namespace or "", name)
    _check_rv(rtype, old, obj["metadata"].get("resourceVersion"))
    return _finish_update(cluster, rtype, old.decode(), obj, subresource, options)


def decode_patch(content_type: str, data: bytes) -> Any:
    """The patch document; raises PatchError 400 when it is not JSON/YAML, 415 for others."""
    base = content_type.split(";")[0].strip().lower()
    if base not in PATCH_TYPES:
        raise ApiError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types "
            f"include: {', '.join(PATCH_TYPES)}",
        )
    try:
        if base == "application/apply-patch+yaml":
            return yaml.safe_load(data)
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, yaml.YAMLError) as exc:
        raise PatchError(f"the patch body is not valid: {exc}", code=400) from exc


def patch(
    cluster: Cluster,
    rtype: ResourceType,
    namespace: str | None,
    name: str,
    content_type: str,
    data: bytes,
    subresource: str | None = None,
    options: WriteOptions = DEFAULT_OPTIONS,
) -> tuple[Stored, bool]:
    """PATCH in any of the four content types; returns (new version, created).

    Server-side apply creates the object when it is absent; the other types raise 404.
    Raises ApplyConflict 409, PatchError 400/415/422, Conflict 409 for a stale
    resourceVersion inside the patch.
    """
    document = decode_patch(content_type, data)
    base = content_type.split(";")[0].strip().lower()
    store = cluster.store(rtype)
    key = ((namespace or "") if rtype.namespaced else "", name)
    old = store.objects.get(key)
    if base == "application/apply-patch+yaml":
        applied = _check_body(rtype, document, namespace, name, validate=False)
        live = old.decode() if old is not None else None
        # The main resource of a kind with a status subresource neither writes nor owns
        # status (the API server's reset fields); the status endpoint writes only status.
        main_with_status = subresource is None and rtype.has_status and rtype.kind != "Namespace"
        result = server_side_apply(
            live,
            applied,
            manager=options.manager,
            force=options.force,
            now=_now(options),
            reset_fields=("status",) if main_with_status else (),
        )
        if subresource is None:
            validate_object(result, kind_info=rtype, namespace=namespace, name=name)
        if old is None:
            if subresource is not None:
                raise _status.not_found(rtype, name)
            result["metadata"].pop("resourceVersion", None)
            done = WriteOptions(
                manager=options.manager,
                now=options.now,
                dry_run=options.dry_run,
                managed_fields_done=True,
            )
            return create(cluster, rtype, namespace, result, done), True
        _check_rv(rtype, old, applied["metadata"].get("resourceVersion"))
        return (
            _finish_update(
                cluster, rtype, old.decode(), result, subresource, options, operation="Apply"
            ),
            False,
        )
    if old is None:
        raise _status.not_found(rtype, name)
    current = old.decode()
    new: dict[str, Any]
    if base == "application/merge-patch+json":
        new = apply_merge_patch(current, document)
    elif base == "application/json-patch+json":
        new = apply_json_patch(current, document)
    else:
        new = apply_strategic_merge_patch(current, document, rtype.kind)
    if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
        raise PatchError("the patch result is not an object with metadata")
    if subresource is None:
        validate_object(new, kind_info=rtype, namespace=namespace, name=name)
    _check_rv(rtype, old, new["metadata"].get("resourceVersion"))
    return _finish_update(cluster, rtype, current, new, subresource, options), False
