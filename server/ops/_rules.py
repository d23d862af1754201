"""An account's namespace and kind rules, checked on every write before any task exists. Pure.

Clouddriver's KubernetesValidationUtil refuses a description whose targets fall outside the
account's ``namespaces`` (``wrongNamespace``), inside its ``omitNamespaces``
(``omittedNamespace``), outside its ``kinds`` or inside its ``omitKinds`` (the
KubernetesKindStatus sentences). Each refusal is one string of Clouddriver's layout,
``<context>.<context>.<attribute>.<error>`` (it joins the context twice: ``reject`` builds the
field from the context, then the error from the context and the field), and the HTTP answer
is 400 "Validation Failed" with those strings in ``errors``.

Where Clouddriver lets a namespaced object without a namespace through (it validates only a
non-empty namespace, then the agent puts it into ``default``), kubesvc follows issue #14: an
account limited to ``namespaces`` refuses it with ``omittedNamespace`` (attribute
``namespace``), since ``default`` is outside the list unless listed, and the refusal says so
before anything is applied.

The account's lists come from its registry properties: what the agent's Hello reported
(snake_case: ``omit_namespaces``) or what the Armory account API stored (camelCase).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._kinds import resolve_kind
from ._describe import Description

__all__ = ["RULE_CONTEXTS", "AccountRules", "rule_errors", "targets"]

# Clouddriver's validator contexts (the first word of every error it returns). Clouddriver
# has no validator for runJob and an empty one for cleanupArtifacts; issue #14 asks for the
# rules on every write, so those two are checked too, under names of the same pattern. Every
# operation of OPERATIONS has an entry (tests/server/test_ops_rules.py checks it): a new
# operation type cannot reach the rules under a made-up context.
RULE_CONTEXTS: Mapping[str, str] = {
    "deployManifest": "deployKubernetesManifest",
    "deleteManifest": "deleteKubernetesManifest",
    "scaleManifest": "scaleKubernetesManifest",
    "patchManifest": "patchKubernetesManifest",
    "undoRolloutManifest": "undoRolloutKubernetesManifest",
    "pauseRolloutManifest": "pauseRolloutKubernetesManifest",
    "resumeRolloutManifest": "resumeRolloutKubernetesManifest",
    "rollingRestartManifest": "rollingRestartKubernetesManifest",
    "runJob": "runKubernetesJob",
    "cleanupArtifacts": "cleanupArtifactsKubernetesManifest",
    # KubernetesEnableManifestValidator / KubernetesDisableManifestValidator.
    "enableManifest": "enableKubernetesManifest",
    "disableManifest": "disableKubernetesManifest",
}

# Kinds that live outside namespaces (the rest, and unknown kinds named with a namespace, are
# namespaced; an unknown kind without one is let through, unless the account is limited to
# namespaces: see AccountRules.check).
_CLUSTER_SCOPED = frozenset(
    {
        "apiservice",
        "clusterrole",
        "clusterrolebinding",
        "customresourcedefinition",
        "mutatingwebhookconfiguration",
        "namespace",
        "persistentvolume",
        "priorityclass",
        "storageclass",
        "validatingwebhookconfiguration",
    }
)


def _strings(properties: Mapping[str, Any], *keys: str) -> frozenset[str]:
    for key in keys:
        value = properties.get(key)
        if isinstance(value, list | tuple) and value:
            return frozenset(str(v) for v in value)
    return frozenset()


@dataclass(frozen=True, slots=True)
class AccountRules:
    """One account's lists; empty means "no restriction"."""

    namespaces: frozenset[str] = frozenset()
    omit_namespaces: frozenset[str] = frozenset()
    kinds: frozenset[str] = frozenset()  # lower-cased, as the agent's KindFilter compares
    omit_kinds: frozenset[str] = frozenset()

    @classmethod
    def of(cls, properties: Mapping[str, Any]) -> AccountRules:
        return cls(
            namespaces=_strings(properties, "namespaces"),
            omit_namespaces=_strings(properties, "omit_namespaces", "omitNamespaces"),
            kinds=frozenset(k.lower() for k in _strings(properties, "kinds")),
            omit_kinds=frozenset(
                k.lower() for k in _strings(properties, "omit_kinds", "omitKinds")
            ),
        )

    @property
    def unrestricted(self) -> bool:
        return not (self.namespaces or self.omit_namespaces or self.kinds or self.omit_kinds)

    def check(self, context: str, kind: str, namespace: str) -> str | None:
        """The refusal of one (kind, namespace) target, or None when allowed."""
        ref = resolve_kind(kind.split(".", 1)[0] if "." in kind else kind)
        lower = ref.kind.lower()
        token = ref.token if "." not in kind else kind
        # A kind we do not know (a custom resource) is taken as namespaced when it names a
        # namespace, or when the account is limited to namespaces: the agent would put a
        # namespaced one without a namespace into "default", and nothing here can tell its
        # scope, so a limited account asks for the namespace rather than let it through.
        namespaced = lower not in _CLUSTER_SCOPED and (
            ref.group is not None or bool(namespace) or bool(self.namespaces)
        )
        if namespaced and namespace:
            if self.namespaces and namespace not in self.namespaces:
                return _reject(context, namespace, "wrongNamespace")
            if namespace in self.omit_namespaces:
                return _reject(context, namespace, "omittedNamespace")
        elif namespaced and self.namespaces:
            return _reject(context, "namespace", "omittedNamespace")
        names = {lower, kind.lower()}
        if names & self.omit_kinds:
            return _reject(
                context,
                token,
                f"Kind [{token}] included in 'omitKinds' of kubernetes account configuration",
            )
        if self.kinds and not names & self.kinds:
            return _reject(
                context,
                token,
                f"Kind [{token}] missing in 'kinds' of kubernetes account configuration",
            )
        return None


def _reject(context: str, attribute: str, error: str) -> str:
    # KubernetesValidationUtil.reject: field = context.attribute; error = context.field.error.
    return f"{context}.{context}.{attribute}.{error}"


def _targets(d: Description) -> Iterable[tuple[str, str]]:
    """(kind, namespace) of every object the operation writes, as the agent will resolve it."""
    return targets(d.spec.name, d.payload)


def targets(operation: str, p: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """(kind, namespace) of every object an operation of type ``operation`` and normalized
    payload ``p`` writes, as the agent will resolve it."""
    if operation == "deployManifest":
        override = str(p.get("namespaceOverride") or "")
        for m in p.get("manifests", []):
            kind = str(m.get("kind", ""))
            own = str((m.get("metadata") or {}).get("namespace") or "")
            cluster = kind.lower() in _CLUSTER_SCOPED
            yield kind, "" if cluster else (override or own)
    elif operation == "runJob":
        manifest = p.get("manifest") or {}
        own = str((manifest.get("metadata") or {}).get("namespace") or "")
        yield str(manifest.get("kind") or "Job"), str(p.get("namespace") or own)
    elif operation == "cleanupArtifacts":
        for m in p.get("manifests", []):
            yield str(m.get("kind", "")), str((m.get("metadata") or {}).get("namespace") or "")
    elif p.get("kind"):
        yield str(p["kind"]), str(p.get("namespace") or "")
    else:  # delete by kinds + labelSelectors
        for kind in p.get("kinds", []):
            yield str(kind), str(p.get("namespace") or "")


def rule_errors(d: Description, properties: Mapping[str, Any]) -> list[str]:
    """The refusal of ``d`` under the account's ``properties`` (empty: allowed). Like
    Clouddriver's validators, the first target refused ends the check: one error."""
    rules = AccountRules.of(properties)
    if rules.unrestricted:
        return []
    context = RULE_CONTEXTS[d.spec.name]
    for kind, namespace in _targets(d):
        error = rules.check(context, kind, namespace)
        if error is not None:
            return [error]
    return []
