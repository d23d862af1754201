"""Operation requests and descriptions: tolerant parsing into the normalized payload. Pure.

What Orca posts is a stage context, not a schema: unknown keys are ignored, numbers and
booleans may be strings ("3", "true"), explicit nulls mean "not given", ``credentials`` is an
alias of ``account`` (and wins), ``manifestName`` is "<kind> <name>". This module turns one
description into the payload the agent receives (docs/protocol.md §11.4):
``account``, ``namespace``, ``kind``, ``name`` plus the operation's own fields in camelCase as
Clouddriver names them. Anything it cannot make sense of raises InvalidDescription naming the
field (``deployManifest.manifests[1]``); nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .._kinds import kubernetes_kind
from ._errors import InvalidDescription, UnknownOperation

__all__ = [
    "OPERATIONS",
    "Description",
    "OperationSpec",
    "normalize",
    "operation_spec",
    "parse_request",
]


@dataclass(frozen=True, slots=True)
class OperationSpec:
    """What the server knows of one operation type: its Clouddriver class name (history and
    EXCEPTION objects name it) and its phase."""

    name: str
    class_name: str
    phase: str


OPERATIONS: dict[str, OperationSpec] = {
    spec.name: spec
    for spec in (
        OperationSpec(
            "deployManifest", "KubernetesDeployManifestOperation", "DEPLOY_KUBERNETES_MANIFEST"
        ),
        OperationSpec(
            "deleteManifest", "KubernetesDeleteManifestOperation", "DELETE_KUBERNETES_MANIFEST"
        ),
        OperationSpec(
            "scaleManifest", "KubernetesScaleManifestOperation", "SCALE_KUBERNETES_MANIFEST"
        ),
        OperationSpec(
            "patchManifest", "KubernetesPatchManifestOperation", "PATCH_KUBERNETES_MANIFEST"
        ),
        OperationSpec(
            "undoRolloutManifest",
            "KubernetesUndoRolloutManifestOperation",
            "UNDO_ROLLOUT_KUBERNETES_MANIFEST",
        ),
        OperationSpec(
            "pauseRolloutManifest",
            "KubernetesPauseRolloutManifestOperation",
            "PAUSE_ROLLOUT_KUBERNETES_MANIFEST",
        ),
        OperationSpec(
            "resumeRolloutManifest",
            "KubernetesResumeRolloutManifestOperation",
            "RESUME_ROLLOUT_KUBERNETES_MANIFEST",
        ),
        OperationSpec(
            "rollingRestartManifest",
            "KubernetesRollingRestartManifestOperation",
            "ROLLING_RESTART_KUBERNETES_MANIFEST",
        ),
        OperationSpec("runJob", "KubernetesRunJobOperation", "RUN_KUBERNETES_JOB"),
        OperationSpec("disableManifest", "KubernetesDisableManifestOperation", "DISABLE_MANIFEST"),
        OperationSpec("enableManifest", "KubernetesEnableManifestOperation", "ENABLE_MANIFEST"),
        OperationSpec(
            "cleanupArtifacts",
            "KubernetesCleanupArtifactsOperation",
            "CLEANUP_KUBERNETES_ARTIFACTS",
        ),
    )
}
_BY_LOWER = {name.lower(): spec for name, spec in OPERATIONS.items()}

# Reads through the agent that are not Clouddriver operations (no task): see server/api/_ops.py.
POD_LOGS = OperationSpec("podLogs", "KubernetesPodLogsOperation", "READ_KUBERNETES_POD_LOGS")


def operation_spec(name: str) -> OperationSpec:
    """The spec of an operation name (case-insensitive); UnknownOperation otherwise."""
    spec = _BY_LOWER.get(name.strip().lower()) if isinstance(name, str) else None
    if spec is None:
        raise UnknownOperation(str(name), sorted(OPERATIONS))
    return spec


@dataclass(frozen=True, slots=True)
class Description:
    """One normalized operation: its spec, account and the payload sent to the agent."""

    spec: OperationSpec
    account: str
    payload: dict[str, Any]


def parse_request(body: Any) -> list[tuple[str, Any]]:
    """``POST /kubernetes/ops``'s body -> [(operation name, raw description)], in order.

    The body is a list of one-key objects; a single object of that shape is accepted too.
    Raises InvalidDescription for any other shape.
    """
    if isinstance(body, Mapping):
        body = [body]
    if not isinstance(body, list) or not body:
        raise InvalidDescription(
            "body", 'expected a non-empty JSON list of {"<operationName>": {description}}'
        )
    found: list[tuple[str, Any]] = []
    for i, item in enumerate(body):
        if not isinstance(item, Mapping) or len(item) != 1:
            raise InvalidDescription(
                f"body[{i}]", 'expected an object with exactly one key, {"<operationName>": {...}}'
            )
        ((name, description),) = item.items()
        found.append((name, description))
    return found


# -- tolerant field readers ----------------------------------------------------------------

_TRUE = frozenset({"true", "yes", "1"})
_FALSE = frozenset({"false", "no", "0"})


class _Fields:
    """Reads one description's fields tolerantly; errors name ``<where>.<field>``."""

    def __init__(self, raw: Mapping[str, Any], where: str) -> None:
        self.raw = raw
        self.where = where

    def _bad(self, key: str, expected: str) -> InvalidDescription:
        return InvalidDescription(
            f"{self.where}.{key}", f"expected {expected}, got {self.raw.get(key)!r}"
        )

    def string(self, key: str, default: str = "") -> str:
        value = self.raw.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise self._bad(key, "a string")
        return str(value).strip()

    def boolean(self, key: str, default: bool | None = None) -> bool | None:
        value = self.raw.get(key)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise self._bad(key, 'a boolean (true/false or "true"/"false")')

    def integer(self, key: str, default: int | None = None, *, low: int = 0) -> int | None:
        value = self.raw.get(key)
        if value is None or value == "":
            return default
        number: int | None = None
        if isinstance(value, bool):
            number = None
        elif isinstance(value, int):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                try:
                    as_float = float(value.strip())
                except ValueError:
                    as_float = 0.5
                number = int(as_float) if as_float.is_integer() else None
        if number is None or number < low:
            raise self._bad(key, f"an integer >= {low}")
        return number

    def mapping(self, key: str) -> dict[str, Any] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self._bad(key, "an object")
        return {k: v for k, v in value.items() if v is not None}

    def objects(self, key: str) -> list[dict[str, Any]]:
        """A list of objects; nulls inside are skipped (Orca leaves holes)."""
        value = self.raw.get(key)
        if value is None:
            return []
        if isinstance(value, Mapping):
            value = [value]
        if not isinstance(value, list):
            raise self._bad(key, "a list of objects")
        out: list[dict[str, Any]] = []
        for i, item in enumerate(value):
            if item is None:
                continue
            if not isinstance(item, Mapping):
                raise InvalidDescription(
                    f"{self.where}.{key}[{i}]", f"expected an object, got {item!r}"
                )
            out.append(dict(item))
        return out

    def strings(self, key: str) -> list[str]:
        value = self.raw.get(key)
        if value is None:
            return []
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list) or not all(
            isinstance(v, str) for v in value if v is not None
        ):
            raise self._bad(key, "a list of strings")
        return [v.strip() for v in value if v is not None]


def _account(f: _Fields) -> str:
    # ``credentials`` is Clouddriver's historical name and wins when both are given.
    account = f.string("credentials") or f.string("account")
    if not account:
        raise InvalidDescription(f"{f.where}.account", "required (the account to act on)")
    return account


def _target(f: _Fields, payload: dict[str, Any], *, required: bool = True) -> None:
    """``manifestName`` "<kind> <name>" + ``location`` -> kind, name, namespace."""
    manifest_name = f.string("manifestName")
    payload["namespace"] = f.string("location") or f.string("namespace")
    if not manifest_name:
        if required:
            raise InvalidDescription(
                f"{f.where}.manifestName", 'required: "<kind> <name>", e.g. "deployment my-app"'
            )
        return
    tokens = manifest_name.split()
    if len(tokens) != 2:
        raise InvalidDescription(
            f"{f.where}.manifestName",
            f'expected "<kind> <name>" (two words), got {manifest_name!r}',
        )
    payload["kind"] = kubernetes_kind(tokens[0])
    payload["name"] = tokens[1]
    payload["manifestName"] = f"{tokens[0]} {tokens[1]}"


def _flatten_manifests(f: _Fields, key: str) -> list[dict[str, Any]]:
    """Manifests with ``kind: List`` entries flattened; each must be an object with a kind."""
    out: list[dict[str, Any]] = []
    for i, manifest in enumerate(f.objects(key)):
        items = manifest.get("items") if manifest.get("kind") == "List" else None
        for j, item in enumerate(items if isinstance(items, list) else [manifest]):
            where = f"{f.where}.{key}[{i}]" + (f".items[{j}]" if items is not None else "")
            if item is None:
                continue
            if not isinstance(item, Mapping):
                raise InvalidDescription(where, f"expected a Kubernetes object, got {item!r}")
            if not isinstance(item.get("kind"), str) or not item.get("kind"):
                raise InvalidDescription(f"{where}.kind", "required: the object's kind")
            out.append(dict(item))
    return out


def _artifacts(f: _Fields, payload: dict[str, Any], *keys: str) -> None:
    for key in keys:
        found = f.objects(key)
        if found:
            payload[key] = found


def _moniker(f: _Fields, payload: dict[str, Any]) -> None:
    raw = f.mapping("moniker")
    if raw is None:
        return
    m = _Fields(raw, f"{f.where}.moniker")
    moniker: dict[str, Any] = {
        key: m.string(key) for key in ("app", "cluster", "stack", "detail") if m.string(key)
    }
    sequence = m.integer("sequence")
    if sequence is not None:
        moniker["sequence"] = sequence
    payload["moniker"] = moniker


def _deploy(f: _Fields, payload: dict[str, Any]) -> None:
    manifests = _flatten_manifests(f, "manifests")
    if not manifests:
        single = f.mapping("manifest")
        if single is not None:
            manifests = _flatten_manifests(_Fields({"manifest": single}, f.where), "manifest")
    if not manifests:
        raise InvalidDescription(
            f"{f.where}.manifests", "required: at least one manifest (manifests or manifest)"
        )
    payload["manifests"] = manifests
    _moniker(f, payload)
    payload["namespaceOverride"] = f.string("namespaceOverride")
    payload["namespace"] = payload["namespaceOverride"]
    _artifacts(f, payload, "requiredArtifacts", "optionalArtifacts")
    payload["enableArtifactBinding"] = f.boolean("enableArtifactBinding", True)
    versioned = f.boolean("versioned")
    if versioned is not None:
        payload["versioned"] = versioned
    payload["source"] = f.string("source", "text")
    # Orca nests traffic settings under trafficManagement.options and sends them (flat) only
    # when trafficManagement.enabled is true; Clouddriver reads only the flat keys. So the
    # options count only when enabled (a turned-off block's services must not route traffic);
    # flat keys always, and they win.
    traffic = _Fields(f.mapping("trafficManagement") or {}, f"{f.where}.trafficManagement")
    enabled = traffic.boolean("enabled", False)
    options = _Fields(
        (traffic.mapping("options") or {}) if enabled else {}, f"{traffic.where}.options"
    )
    payload["enableTraffic"] = f.boolean("enableTraffic", options.boolean("enableTraffic", True))
    payload["services"] = f.strings("services") or options.strings("services")
    if f.string("strategy"):
        payload["strategy"] = _strategy(f, "strategy")
    else:
        payload["strategy"] = _strategy(options, "strategy")
    selectors = f.mapping("labelSelectors")
    if selectors:
        payload["labelSelectors"] = selectors
    payload["skipSpecTemplateLabels"] = f.boolean("skipSpecTemplateLabels", False)


# Orca sends the enum's name (RED_BLACK) flat and its JSON value (redblack) under
# trafficManagement.options; Deck and hand-written pipelines use either, in any case.
_STRATEGIES = {
    "redblack": "RED_BLACK",
    "bluegreen": "BLUE_GREEN",
    "highlander": "HIGHLANDER",
    "none": "NONE",
}


def _strategy(f: _Fields, key: str) -> str:
    raw = f.string(key) or "none"
    found = _STRATEGIES.get(raw.lower().replace("_", "").replace("-", ""))
    if found is None:
        raise InvalidDescription(
            f"{f.where}.{key}",
            f"expected redblack, bluegreen, highlander or none (or RED_BLACK, BLUE_GREEN, "
            f"HIGHLANDER, NONE), got {raw!r}",
        )
    return found


_CASCADING = frozenset({"foreground", "background", "orphan"})


def _delete(f: _Fields, payload: dict[str, Any]) -> None:
    _target(f, payload, required=False)
    if "name" not in payload:
        kinds = [kubernetes_kind(k) for k in f.strings("kinds")]
        if not kinds:
            raise InvalidDescription(
                f"{f.where}.manifestName", "required, or kinds with labelSelectors"
            )
        payload["kinds"] = kinds
        payload["labelSelectors"] = f.mapping("labelSelectors") or {}
    raw = f.mapping("options") or {}
    o = _Fields(raw, f"{f.where}.options")
    options: dict[str, Any] = {}
    cascading = raw.get("cascading")
    if isinstance(cascading, str) and cascading.strip().lower() in _CASCADING:
        options["cascading"] = cascading.strip().lower()
    else:
        value = o.boolean("cascading")
        if value is not None:
            options["cascading"] = value
    orphan = o.boolean("orphanDependents")
    if orphan is not None:
        options["orphanDependents"] = orphan
    grace = o.integer("gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    payload["options"] = options


def _scale(f: _Fields, payload: dict[str, Any]) -> None:
    _target(f, payload)
    payload["replicas"] = f.integer("replicas", 0)  # missing means 0, as in Clouddriver


_MERGE_STRATEGIES = frozenset({"strategic", "merge", "json"})


def _patch(f: _Fields, payload: dict[str, Any]) -> None:
    _target(f, payload)
    o = _Fields(f.mapping("options") or {}, f"{f.where}.options")
    strategy = o.string("mergeStrategy", "strategic").lower()
    if strategy not in _MERGE_STRATEGIES:
        raise InvalidDescription(
            f"{o.where}.mergeStrategy", f"expected strategic, merge or json, got {strategy!r}"
        )
    body = f.raw.get("patchBody")
    if strategy == "json":
        if not isinstance(body, list):
            raise InvalidDescription(
                f"{f.where}.patchBody", "a json patch needs a list of RFC 6902 operations"
            )
    elif not isinstance(body, Mapping):
        raise InvalidDescription(
            f"{f.where}.patchBody", f"a {strategy} patch needs an object, got {body!r}"
        )
    payload["patchBody"] = body
    payload["options"] = {"mergeStrategy": strategy, "record": o.boolean("record", True)}
    _artifacts(f, payload, "requiredArtifacts", "allArtifacts")


def _undo(f: _Fields, payload: dict[str, Any]) -> None:
    _target(f, payload)
    back = f.integer("numRevisionsBack", low=1)
    revision = f.integer("revision", low=0)
    if back is None and revision is None:
        raise InvalidDescription(f"{f.where}.revision", "required: revision or numRevisionsBack")
    if back is not None:
        payload["numRevisionsBack"] = back  # wins over revision
    elif revision is not None:
        payload["revision"] = revision


def _rollout(f: _Fields, payload: dict[str, Any]) -> None:
    _target(f, payload)


def _traffic(f: _Fields, payload: dict[str, Any]) -> None:
    _target(f, payload)
    balancers = f.strings("loadBalancers")
    if balancers:
        payload["loadBalancers"] = balancers
    # targetPercentage is accepted and ignored, as in Clouddriver's Kubernetes provider.


def _run_job(f: _Fields, payload: dict[str, Any]) -> None:
    manifest = f.mapping("manifest")
    if manifest is None:
        manifests = f.objects("manifests")
        manifest = manifests[0] if manifests else None
    if manifest is None:
        raise InvalidDescription(f"{f.where}.manifest", "required: the Job to run")
    payload["manifest"] = manifest
    payload["application"] = f.string("application")
    namespace = f.string("namespace")
    payload["namespace"] = namespace
    _artifacts(f, payload, "requiredArtifacts", "optionalArtifacts")


def _cleanup(f: _Fields, payload: dict[str, Any]) -> None:
    payload["manifests"] = _flatten_manifests(f, "manifests")
    payload["namespace"] = ""
    _moniker(f, payload)


_NORMALIZERS: dict[str, Callable[[_Fields, dict[str, Any]], None]] = {
    "deployManifest": _deploy,
    "deleteManifest": _delete,
    "scaleManifest": _scale,
    "patchManifest": _patch,
    "undoRolloutManifest": _undo,
    "pauseRolloutManifest": _rollout,
    "resumeRolloutManifest": _rollout,
    "rollingRestartManifest": _rollout,
    "runJob": _run_job,
    "disableManifest": _traffic,
    "enableManifest": _traffic,
    "cleanupArtifacts": _cleanup,
}


def normalize(
    name: str,
    raw: Any,
    *,
    where: str | None = None,
    check_account: Callable[[str], None] | None = None,
) -> Description:
    """One description -> its normalized payload.

    Raises UnknownOperation for a name this server does not run and InvalidDescription (with
    the field's path) for a malformed description. Unknown keys are dropped. Like
    Clouddriver, the account is resolved (``check_account`` may raise) before the rest of
    the description is validated.
    """
    spec = operation_spec(name)
    where = where or spec.name
    if not isinstance(raw, Mapping):
        raise InvalidDescription(where, f"expected a description object, got {raw!r}")
    f = _Fields(raw, where)
    payload: dict[str, Any] = {"account": _account(f)}
    if check_account is not None:
        check_account(payload["account"])
    _NORMALIZERS[spec.name](f, payload)
    return Description(spec, payload["account"], payload)
