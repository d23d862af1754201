"""The account rules (namespaces/omitNamespaces/kinds/omitKinds) on descriptions, offline."""

from __future__ import annotations

from typing import Any

from server.ops import OPERATIONS, RULE_CONTEXTS, normalize, rule_errors

LIMITED = {"namespaces": ["apps", "web"]}
CTX = "deployKubernetesManifest"


def deploy(*manifests: dict[str, Any], override: str = "") -> Any:
    return normalize(
        "deployManifest",
        {"account": "k1", "manifests": list(manifests), "namespaceOverride": override},
    )


def cm(namespace: str | None = None, kind: str = "ConfigMap") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "x"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": kind, "metadata": meta}


def test_unrestricted_accounts_allow_everything() -> None:
    assert rule_errors(deploy(cm("kube-system"), cm()), {}) == []


def test_namespace_outside_the_list_is_wrong_namespace() -> None:
    assert rule_errors(deploy(cm("kube-system")), LIMITED) == [
        f"{CTX}.{CTX}.kube-system.wrongNamespace"
    ]
    assert rule_errors(deploy(cm("apps"), cm("web")), LIMITED) == []


def test_no_namespace_on_a_limited_account_is_omitted_namespace() -> None:
    assert rule_errors(deploy(cm()), LIMITED) == [f"{CTX}.{CTX}.namespace.omittedNamespace"]
    # namespaceOverride decides; cluster-scoped kinds need none.
    assert rule_errors(deploy(cm(), override="apps"), LIMITED) == []
    assert rule_errors(deploy(cm(kind="Namespace")), LIMITED) == []


def test_a_custom_kind_without_a_namespace_on_a_limited_account_is_omitted_namespace() -> None:
    """A cert-manager Certificate with no namespace: its scope is unknown here, and the agent
    would write a namespaced one into "default", outside the list (found in review)."""
    certificate = {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": {"name": "tls"},
    }
    assert rule_errors(deploy(certificate), LIMITED) == [f"{CTX}.{CTX}.namespace.omittedNamespace"]
    assert rule_errors(deploy(certificate, override="apps"), LIMITED) == []
    assert rule_errors(deploy(certificate), {"omit_namespaces": ["kube-system"]}) == []


def test_omit_namespaces_from_the_agent_or_the_armory_api() -> None:
    for props in ({"omit_namespaces": ["kube-system"]}, {"omitNamespaces": ["kube-system"]}):
        assert rule_errors(deploy(cm("kube-system")), props) == [
            f"{CTX}.{CTX}.kube-system.omittedNamespace"
        ]
        assert rule_errors(deploy(cm()), props) == []


def test_kinds_and_omit_kinds() -> None:
    assert rule_errors(deploy(cm("a", kind="Secret")), {"omit_kinds": ["secret"]}) == [
        f"{CTX}.{CTX}.secret.Kind [secret] included in 'omitKinds' of kubernetes account "
        "configuration"
    ]
    assert rule_errors(deploy(cm("a")), {"kinds": ["Deployment"]}) == [
        f"{CTX}.{CTX}.configMap.Kind [configMap] missing in 'kinds' of kubernetes account "
        "configuration"
    ]


def test_every_write_operation_is_checked() -> None:
    target = {"account": "k1", "manifestName": "deployment web", "location": "kube-system"}
    for op, extra in (
        ("scaleManifest", {"replicas": 1}),
        ("deleteManifest", {}),
        ("patchManifest", {"patchBody": {}}),
        ("undoRolloutManifest", {"numRevisionsBack": 1}),
        ("pauseRolloutManifest", {}),
        ("resumeRolloutManifest", {}),
        ("rollingRestartManifest", {}),
    ):
        errors = rule_errors(normalize(op, {**target, **extra}), LIMITED)
        assert len(errors) == 1, op
        assert errors[0].endswith(".kube-system.wrongNamespace"), op
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}
    run = normalize("runJob", {"account": "k1", "manifest": job})
    assert rule_errors(run, LIMITED) == [
        "runKubernetesJob.runKubernetesJob.namespace.omittedNamespace"
    ]
    by_kinds = normalize(
        "deleteManifest",
        {"account": "k1", "kinds": ["configMap"], "location": "apps", "labelSelectors": {}},
    )
    assert rule_errors(by_kinds, {"omit_kinds": ["configmap"]}) != []


def test_the_first_refused_target_is_the_one_error() -> None:
    errors = rule_errors(deploy(cm("apps"), cm("kube-system"), cm("other")), LIMITED)
    assert errors == [f"{CTX}.{CTX}.kube-system.wrongNamespace"]


def test_every_operation_type_has_a_rules_context() -> None:
    # rule_errors looks the context up strictly: an operation type added to OPERATIONS
    # without one here fails this test (and, unlisted, would raise rather than skip rules).
    assert set(RULE_CONTEXTS) == set(OPERATIONS)
    assert RULE_CONTEXTS["enableManifest"] == "enableKubernetesManifest"
    assert RULE_CONTEXTS["disableManifest"] == "disableKubernetesManifest"
    target = {"account": "k1", "manifestName": "replicaSet web-v000", "location": "kube-system"}
    for op in ("enableManifest", "disableManifest"):
        ctx = RULE_CONTEXTS[op]
        assert rule_errors(normalize(op, target), LIMITED) == [
            f"{ctx}.{ctx}.kube-system.wrongNamespace"
        ]
