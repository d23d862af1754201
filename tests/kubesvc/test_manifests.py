"""manifests/: every document validates against the Kubernetes schemas, the agent's RBAC
covers what it watches and what operations do, and each config passes its own validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

import agent
import server
from kubesvc._certs import write_bundle
from manifests import ROOT
from server._app import SHUTDOWN_SLACK_SECONDS

K8S_VERSION = "1.30"  # kubernetes-validate ships the schemas: no network needed
FILES = sorted(ROOT.rglob("*.yaml"))
MODES = ("service", "infrastructure", "agent")
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


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all(kind: str) -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in FILES for d in _documents(p) if d["kind"] == kind]


def test_every_mode_has_a_folder_and_the_image_has_a_containerfile() -> None:
    for mode in (*MODES, "server"):
        assert list((ROOT / mode).glob("*.yaml")), mode
    assert 'ENTRYPOINT ["kubesvc"]' in (ROOT / "Containerfile").read_text()


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_validates_against_the_kubernetes_schemas(path: Path) -> None:
    for document in _documents(path):
        # strict: unknown fields are errors too (a typo in a manifest must not pass)
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)


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
    accounts = {
        (d["metadata"]["namespace"], d["metadata"]["name"]) for _, d in _all("ServiceAccount")
    }
    for binding_kind, role_kind in (("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")):
        for path, binding in _all(binding_kind):
            assert binding["roleRef"]["kind"] == role_kind, path
            for subject in binding["subjects"]:
                assert (subject["namespace"], subject["name"]) in accounts, path


def _agent_configs() -> list[tuple[Path, str]]:
    return [
        (p, d["data"]["kubesvc.yaml"])
        for p, d in _all("ConfigMap")
        if "kubesvc.yaml" in d.get("data", {})
    ]


def test_each_agent_config_passes_the_agents_validation() -> None:
    configs = _agent_configs()
    assert len(configs) == 4  # agent, agent/namespaced, service, infrastructure
    for path, text in configs:
        config = agent.parse_config(text, source=str(path))
        assert config.ignored_options == (), (path, config.ignored_options)
        assert config.kubernetes.accounts, path
        assert config.server.host == "0.0.0.0", path  # the kubelet probes the pod IP
        assert not config.clouddriver.insecure, path
        namespaced = "namespaced" in path.parts
        for account in config.kubernetes.accounts:
            assert account.only_namespaced_resources == namespaced, path


def test_the_server_config_passes_the_servers_validation(tmp_path: Path) -> None:
    [(path, configmap)] = [(p, d) for p, d in _all("ConfigMap") if "server.yaml" in d["data"]]
    data = yaml.safe_load(configmap["data"]["server.yaml"])
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
    config = server.parse_server_config(data, file=str(path))
    assert config.grpc.port == 9091
    assert config.api.port == 7002
    assert config.grpc.tls is not None
    assert config.grpc.tls.client_auth == server.ClientAuth.REQUIRE
    assert config.store.path.startswith("/var/lib/kubesvc/")
    # The Deployment mounts the Secrets where the config looks for them.
    [(_, deployment)] = [(p, d) for p, d in _all("Deployment") if "server" in p.parts]
    mounts = {
        m["mountPath"]
        for m in deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    }
    for value in (
        configmap_value
        for configmap_value in yaml.safe_load(configmap["data"]["server.yaml"])["grpc"][
            "tls"
        ].values()
        if isinstance(configmap_value, str) and configmap_value.startswith("/")
    ):
        assert str(Path(value).parent) in mounts, value
    # Kubernetes kills the pod after terminationGracePeriodSeconds: the server's whole
    # shutdown (the drain, then what a drain cut short still does) must fit inside it.
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert config.shutdown.drain_seconds + SHUTDOWN_SLACK_SECONDS <= grace


def test_agent_deployments_are_one_container_with_probes_and_a_live_config() -> None:
    deployments = [(p, d) for p, d in _all("Deployment") if "agent" in d["metadata"]["name"]]
    assert {p.parent.name for p, _ in deployments} == set(MODES)
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


def test_the_server_exposes_grpc_and_rest_and_keeps_sqlite_on_a_volume() -> None:
    [(_, service)] = [(p, d) for p, d in _all("Service")]
    ports = {p["port"]: p for p in service["spec"]["ports"]}
    assert set(ports) == {9091, 7002}
    assert ports[9091]["appProtocol"] == "grpc"
    [(_, deployment)] = [(p, d) for p, d in _all("Deployment") if "server" in p.parts]
    pod = deployment["spec"]["template"]["spec"]
    claims = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert [c["persistentVolumeClaim"]["claimName"] for c in claims] == ["kubesvc-server-data"]
    assert [n for _, n in _all("PersistentVolumeClaim")]
