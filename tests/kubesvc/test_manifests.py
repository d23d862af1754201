"""manifests/: every overlay renders (kustomize) to a complete install whose every document
validates against the Kubernetes schemas, the agent's RBAC covers what it watches and what
operations do, and each config passes its own validation."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

import agent
import server
from kubesvc._certs import write_bundle
from kubesvc._cmd_server import with_store_url
from manifests import ROOT
from server._app import SHUTDOWN_SLACK_SECONDS

from ._crds import CUSTOM_KINDS, check_custom_resource
from ._kustomize import kubectl_render, render, rendered_files

K8S_VERSION = "1.30"  # kubernetes-validate ships the schemas: no network needed
OVERLAYS = ROOT / "overlays"
AGENT_OVERLAYS = ("agent-mode", "agent-namespaced", "infrastructure-mode", "service-mode")
KUBECONFIG_OVERLAYS = ("infrastructure-mode", "service-mode")
# The server's two layouts: replicas on PostgreSQL (the default), one replica on SQLite.
SERVER_OVERLAYS = {"postgresql": "server", "sqlite": "server-sqlite"}
# Prometheus operator resources and the Grafana dashboard (docs/monitoring.md).
MONITORING_OVERLAY = "monitoring"
ALL_OVERLAYS = (*AGENT_OVERLAYS, *SERVER_OVERLAYS.values(), MONITORING_OVERLAY)
# The kinds the server caches by default (armory-compat.md) -> (API group, resource).
CACHED_KINDS = {
    "ReplicaSet": ("apps", "replicasets"),
    "Service": ("", "services"),
    "Ingress": ("networking.k8s.io", "ingresses"),
    "DaemonSet": ("apps", "daemonsets"),
    "Deployment": ("apps", "deployments"),
    "Pod": ("", "pods"),
    "StatefulSet": ("apps", "statefulsets"),
    "Job": ("batch", "jobs"),
    "CronJob": ("batch", "cronjobs"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
    "Namespace": ("", "namespaces"),
    "CustomResourceDefinition": ("apiextensions.k8s.io", "customresourcedefinitions"),
}
CLUSTER_SCOPED = {"Namespace", "CustomResourceDefinition"}
WRITE_VERBS = ("get", "create", "update", "patch", "delete")
# What operations change: deploy/delete/patch (the common kinds), scale, rollbacks, run jobs.
OPERATED = [
    ("apps", "deployments"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "daemonsets"),
    ("", "services"),
    ("", "configmaps"),
    ("", "secrets"),
    ("", "pods"),
    ("batch", "jobs"),
    ("batch", "cronjobs"),
    ("networking.k8s.io", "ingresses"),
    ("apps", "deployments/scale"),
    ("apps", "statefulsets/scale"),
]


@functools.cache
def _rendered(overlay: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(OVERLAYS / overlay))


def _all(kind: str) -> list[tuple[str, dict[str, Any]]]:
    """Every rendered object of ``kind``, with the overlay it came from."""
    return [(o, d) for o in ALL_OVERLAYS for d in _rendered(o) if d["kind"] == kind]


def _key(document: dict[str, Any]) -> tuple[str, str, str]:
    meta = document["metadata"]
    return document["kind"], meta.get("namespace", ""), meta["name"]


def test_every_mode_has_an_overlay_and_the_image_has_a_containerfile() -> None:
    assert sorted(p.parent.name for p in OVERLAYS.glob("*/kustomization.yaml")) == sorted(
        ALL_OVERLAYS
    )
    assert 'ENTRYPOINT ["kubesvc"]' in (ROOT / "Containerfile").read_text()


def test_every_yaml_and_json_file_is_part_of_an_overlay() -> None:
    used = set().union(*(rendered_files(OVERLAYS / o) for o in ALL_OVERLAYS))
    shipped = {*ROOT.rglob("*.yaml"), *ROOT.rglob("*.json")}
    assert sorted(shipped - used) == []


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_kubectl_kustomize_renders_what_the_projects_reader_does(overlay: str) -> None:
    # The other tests read the overlays with tests/kubesvc/_kustomize.py, which needs no
    # kubectl; here the real kustomize (kubectl 1.32) must build the same objects.
    real = kubectl_render(OVERLAYS / overlay)
    if real is None:
        pytest.skip("kubectl is not installed: the overlays were read by the project's reader")
    ours = _rendered(overlay)

    def canonical(documents: Any) -> list[str]:
        return sorted(json.dumps(d, sort_keys=True) for d in documents)

    assert sorted(map(_key, real)) == sorted(map(_key, ours))
    assert canonical(real) == canonical(ours)


@pytest.mark.parametrize("overlay", ALL_OVERLAYS)
def test_validates_against_the_kubernetes_schemas(overlay: str) -> None:
    documents = _rendered(overlay)
    assert len(set(map(_key, documents))) == len(documents)  # nothing twice
    for document in documents:
        try:
            # strict: unknown fields are errors too (a typo in a manifest must not pass)
            kubernetes_validate.validate(document, K8S_VERSION, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            # A custom resource (the Prometheus operator's): no schema ships for it, so it is
            # checked field by field, and a custom kind without a check fails there.
            check_custom_resource(document, f"{overlay}: {'/'.join(_key(document))}")


def test_the_custom_resources_shipped_are_the_ones_with_their_own_checks() -> None:
    custom = {
        (d["apiVersion"], d["kind"])
        for o in ALL_OVERLAYS
        for d in _rendered(o)
        if d["apiVersion"].split("/")[0].endswith(".coreos.com")
    }
    assert custom == set(CUSTOM_KINDS)
    for api_version, kind in custom:  # each would be refused unchecked by kubernetes_validate
        with pytest.raises(kubernetes_validate.SchemaNotFoundError):
            kubernetes_validate.validate({"apiVersion": api_version, "kind": kind}, K8S_VERSION)


def _allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        (group in rule["apiGroups"] or "*" in rule["apiGroups"])
        and (resource in rule["resources"] or "*" in rule["resources"])
        and (verb in rule["verbs"] or "*" in rule["verbs"])
        for rule in rules
    )


@pytest.mark.parametrize("kind", ["ClusterRole", "Role"])
def test_rbac_covers_the_cached_kinds_and_the_operations(kind: str) -> None:
    roles = _all(kind)
    assert roles, f"no {kind} in manifests/"
    for path, role in roles:
        rules = role["rules"]
        for cached, (group, resource) in CACHED_KINDS.items():
            if kind == "Role" and cached in CLUSTER_SCOPED:
                continue  # a Role cannot grant them; the namespaced config skips them
            for verb in ("list", "watch"):
                assert _allowed(rules, group, resource, verb), (path, cached, verb)
        for group, resource in OPERATED:
            for verb in WRITE_VERBS:
                assert _allowed(rules, group, resource, verb), (path, resource, verb)
        assert _allowed(rules, "", "pods/log", "get"), path  # run-job logs, podLogs


def test_every_role_is_bound_to_the_agents_service_account() -> None:
    for overlay in ALL_OVERLAYS:
        documents = _rendered(overlay)
        accounts = {
            (d["metadata"]["namespace"], d["metadata"]["name"])
            for d in documents
            if d["kind"] == "ServiceAccount"
        }
        for binding_kind, role_kind in (
            ("ClusterRoleBinding", "ClusterRole"),
            ("RoleBinding", "Role"),
        ):
            for binding in (d for d in documents if d["kind"] == binding_kind):
                assert binding["roleRef"]["kind"] == role_kind, overlay
                for subject in binding["subjects"]:
                    assert (subject["namespace"], subject["name"]) in accounts, overlay


def _agent_configs() -> list[tuple[str, str]]:
    return [
        (overlay, d["data"]["kubesvc.yaml"])
        for overlay, d in _all("ConfigMap")
        if "kubesvc.yaml" in d.get("data", {})
    ]


def test_each_agent_config_passes_the_agents_validation() -> None:
    configs = _agent_configs()
    assert sorted(overlay for overlay, _ in configs) == sorted(AGENT_OVERLAYS)
    for overlay, text in configs:
        config = agent.parse_config(text, source=f"overlays/{overlay}/config.yaml")
        assert config.ignored_options == (), (overlay, config.ignored_options)
        assert config.kubernetes.accounts, overlay
        assert config.server.host == "0.0.0.0", overlay  # the kubelet probes the pod IP
        assert not config.clouddriver.insecure, overlay
        namespaced = overlay == "agent-namespaced"
        for account in config.kubernetes.accounts:
            assert account.only_namespaced_resources == namespaced, overlay
            # An account reaches its cluster the way its overlay mounts for it.
            assert bool(account.kube_config_file) == (overlay in KUBECONFIG_OVERLAYS), overlay


# What the kubesvc-server-store Secret's url looks like (docs/postgresql.md).
STORE_URL = (
    "postgresql://kubesvc@db.example:5432/kubesvc?sslmode=verify-full"
    "&sslrootcert=/etc/kubesvc-store/ca.crt&passwordFile=/etc/kubesvc-store/password"
)


def _server_documents(layout: str, kind: str) -> list[dict[str, Any]]:
    """The documents of ``kind`` the layout's overlay renders."""
    return [d for d in _rendered(SERVER_OVERLAYS[layout]) if d["kind"] == kind]


def _server_config(layout: str, tmp_path: Path) -> tuple[dict[str, Any], server.ServerConfig]:
    """The layout's server.yaml as the server reads it in its pod (with the Deployment's
    --store, if any), the mounted files replaced by stand-ins of the same names."""
    [configmap] = _server_documents(layout, "ConfigMap")
    text = configmap["data"]["server.yaml"]
    assert "password" not in text.lower()  # it comes from a mounted Secret
    data = yaml.safe_load(text)
    # The files live in mounted Secrets; the server checks they exist, so point at stand-ins
    # of the same names (made by `kubesvc certs init`).
    write_bundle(tmp_path, agents=["a"])
    (tmp_path / "secret").write_text("x" * 40)
    tls, jwt = data["grpc"]["tls"], data["grpc"]["auth"]["jwt"]
    stand_ins = {
        "tls.crt": "server.crt",
        "tls.key": "server.key",
        "ca.crt": "ca.crt",
        "secret": "secret",
    }
    for section, key in ((tls, "certFile"), (tls, "keyFile"), (tls, "caFile"), (jwt, "secretFile")):
        section[key] = str(tmp_path / stand_ins[Path(section[key]).name])
    config = server.parse_server_config(data, file=f"{layout}/server.yaml")
    [deployment] = _server_documents(layout, "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    if "--store" in args:
        assert args[args.index("--store") + 1] == "$(KUBESVC_STORE_URL)"
        config = with_store_url(config, STORE_URL)
    return yaml.safe_load(text), config  # as written (data holds the stand-ins)


@pytest.mark.parametrize("layout", SERVER_OVERLAYS)
def test_the_server_config_passes_the_servers_validation(layout: str, tmp_path: Path) -> None:
    data, config = _server_config(layout, tmp_path)
    assert config.grpc.port == 9091
    assert config.api.port == 7002
    assert config.grpc.tls is not None
    assert config.grpc.tls.client_auth == server.ClientAuth.REQUIRE
    # The Deployment mounts the Secrets where the config looks for them.
    [deployment] = _server_documents(layout, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    for value in data["grpc"]["tls"].values():
        if isinstance(value, str) and value.startswith("/"):
            assert str(Path(value).parent) in mounts, value
    # Kubernetes kills the pod after terminationGracePeriodSeconds: the server's whole
    # shutdown (the drain, then what a drain cut short still does) must fit inside it.
    grace = pod["terminationGracePeriodSeconds"]
    assert config.shutdown.drain_seconds + SHUTDOWN_SLACK_SECONDS <= grace
    # Readiness follows the store and the drain; liveness asks nothing of the store.
    [container] = pod["containers"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": 7002}
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": 7002}


def test_the_postgresql_layout_runs_two_replicas_with_the_store_from_a_secret(
    tmp_path: Path,
) -> None:
    _, config = _server_config("postgresql", tmp_path)
    assert config.store.location.backend == "postgresql"
    assert config.store.max_connections == 8  # the file's, under --store
    [deployment] = _server_documents("postgresql", "Deployment")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    [env] = [e for e in container["env"] if e["name"] == "KUBESVC_STORE_URL"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "kubesvc-server-store", "key": "url"}
    # The URL's passwordFile is a file of the same Secret, mounted where the URL says.
    volumes = {v["name"]: v for v in pod["volumes"]}
    [store_mount] = [m for m in container["volumeMounts"] if m["name"] == "store"]
    assert volumes["store"]["secret"]["secretName"] == "kubesvc-server-store"
    assert config.store.location.password_file == f"{store_mount['mountPath']}/password"
    # A disruption (a node drain) leaves one replica serving.
    [budget] = _server_documents("postgresql", "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == 1
    labels = spec["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert not _server_documents("postgresql", "PersistentVolumeClaim")


@pytest.mark.parametrize("layout", SERVER_OVERLAYS)
def test_the_server_exposes_grpc_and_rest_to_its_pods(layout: str) -> None:
    [service] = _server_documents(layout, "Service")
    ports = {p["port"]: p for p in service["spec"]["ports"]}
    assert set(ports) == {9091, 7002}
    assert ports[9091]["appProtocol"] == "grpc"
    [deployment] = _server_documents(layout, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_the_sqlite_layout_is_one_replica_on_a_volume(tmp_path: Path) -> None:
    _, config = _server_config("sqlite", tmp_path)
    assert config.store.path.startswith("/var/lib/kubesvc/")
    [deployment] = _server_documents("sqlite", "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"  # ReadWriteOnce
    pod = deployment["spec"]["template"]["spec"]
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert [c["persistentVolumeClaim"]["claimName"] for c in claims] == ["kubesvc-server-data"]
    assert [d["metadata"]["name"] for d in _server_documents("sqlite", "PersistentVolumeClaim")]


def test_agent_deployments_are_one_container_with_probes_and_a_live_config() -> None:
    deployments = [(o, d) for o, d in _all("Deployment") if "agent" in d["metadata"]["name"]]
    assert sorted(o for o, _ in deployments) == sorted(AGENT_OVERLAYS)
    for path, deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        [container] = pod["containers"]  # one container, no sidecars
        assert "initContainers" not in pod, path
        assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": 8082}
        assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": 8082}
        assert container["resources"]["limits"]["memory"], path
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert "subPath" not in mounts["config"], path  # a subPath mount never sees updates
        assert container["args"][-1].startswith(mounts["config"]["mountPath"] + "/"), path
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["tls"]["secret"]["secretName"] == "kubesvc-agent-tls", path
        assert volumes["token"]["secret"]["secretName"] == "kubesvc-agent-token", path
        assert pod["serviceAccountName"] == "kubesvc-agent", path
        # Kubeconfig modes mount the kubeconfigs and need no token of their own ServiceAccount;
        # the others reach their cluster with it.
        [account] = [d for d in _rendered(path) if d["kind"] == "ServiceAccount"]
        if path in KUBECONFIG_OVERLAYS:
            assert volumes["kubeconfigs"]["secret"]["secretName"] == "kubesvc-agent-kubeconfigs"
            assert mounts["kubeconfigs"]["mountPath"] == "/etc/kubesvc-kubeconfigs"
            assert account["automountServiceAccountToken"] is False, path
        else:
            assert "kubeconfigs" not in volumes, path
            assert account.get("automountServiceAccountToken", True), path
