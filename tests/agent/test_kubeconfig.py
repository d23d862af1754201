"""Kubeconfig and service-account resolution: every credential type, files and data, errors."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from agent import AccountConfig, KubeconfigError
from agent.kube._client import access_for_account
from agent.kube._kubeconfig import load_kubeconfig, parse_kubeconfig, service_account_access

from ._kube_edge import make_pki


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _kubeconfig(
    users: list[dict[str, object]],
    *,
    clusters: list[dict[str, object]] | None = None,
    contexts: list[dict[str, object]] | None = None,
    current: str | None = "main",
) -> str:
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": clusters or [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443/"}}],
        "users": users,
        "contexts": contexts
        or [{"name": "main", "context": {"cluster": "c", "user": users[0]["name"]}}],
    }
    if current:
        document["current-context"] = current
    return yaml.safe_dump(document)


def test_certificates_as_base64_data(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    text = _kubeconfig(
        [
            {
                "name": "admin",
                "user": {
                    "client-certificate-data": _b64(pki.client_cert_pem),
                    "client-key-data": _b64(pki.client_key_pem),
                },
            }
        ],
        clusters=[
            {
                "name": "c",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": _b64(pki.ca_pem),
                    "tls-server-name": "kubernetes",
                },
            }
        ],
    )
    access = parse_kubeconfig(text, source="kc")
    assert access.server == "https://127.0.0.1:6443"
    assert access.ca_pem == pki.ca_pem
    assert access.client_cert_pem == pki.client_cert_pem
    assert access.client_key_pem == pki.client_key_pem
    assert access.tls_server_name == "kubernetes"
    assert access.token is None


def test_certificates_as_files_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(pki.ca_pem)
    (tmp_path / "certs" / "admin.crt").write_bytes(pki.client_cert_pem)
    (tmp_path / "certs" / "admin.key").write_bytes(pki.client_key_pem)
    path = tmp_path / "config"
    path.write_text(
        _kubeconfig(
            [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": "certs/admin.crt",
                        "client-key": str(tmp_path / "certs" / "admin.key"),
                    },
                }
            ],
            clusters=[
                {
                    "name": "c",
                    "cluster": {"server": "https://h:1", "certificate-authority": "certs/ca.crt"},
                }
            ],
        )
    )
    access = load_kubeconfig(path)
    assert access.ca_pem == pki.ca_pem
    assert access.client_cert_pem == pki.client_cert_pem
    assert access.client_key_pem == pki.client_key_pem
    assert access.source == str(path)


def test_token_token_file_basic_auth_and_insecure(tmp_path: Path) -> None:
    text = _kubeconfig(
        [
            {"name": "t", "user": {"token": "secret-token"}},
            {"name": "f", "user": {"tokenFile": "token"}},
            {"name": "b", "user": {"username": "u", "password": "p"}},
        ],
        clusters=[
            {
                "name": "c",
                "cluster": {"server": "https://h:1", "insecure-skip-tls-verify": True},
            }
        ],
        contexts=[
            {"name": "main", "context": {"cluster": "c", "user": "t", "namespace": "web"}},
            {"name": "file", "context": {"cluster": "c", "user": "f"}},
            {"name": "basic", "context": {"cluster": "c", "user": "b"}},
        ],
    )
    main = parse_kubeconfig(text, source="kc", base_dir=tmp_path)
    assert main.token == "secret-token"
    assert main.insecure_skip_tls_verify
    assert main.namespace == "web"
    assert "secret-token" not in repr(main)
    from_file = parse_kubeconfig(text, source="kc", base_dir=tmp_path, context="file")
    assert from_file.token_file == str(tmp_path / "token")
    basic = parse_kubeconfig(text, source="kc", base_dir=tmp_path, context="basic")
    assert (basic.username, basic.password) == ("u", "p")


def test_exec_plugins_v1_and_v1beta1(tmp_path: Path) -> None:
    text = _kubeconfig(
        [
            {
                "name": "v1",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "bin/get-token",
                        "args": ["--cluster", "prod"],
                        "env": [{"name": "AWS_PROFILE", "value": "prod"}],
                        "provideClusterInfo": True,
                        "interactiveMode": "Never",
                    }
                },
            },
            {
                "name": "beta",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": "aws",
                    }
                },
            },
        ],
        contexts=[
            {"name": "main", "context": {"cluster": "c", "user": "v1"}},
            {"name": "beta", "context": {"cluster": "c", "user": "beta"}},
        ],
    )
    v1 = parse_kubeconfig(text, source="kc", base_dir=tmp_path).exec
    assert v1 is not None
    assert v1.command == str(tmp_path / "bin" / "get-token")  # relative to the kubeconfig
    assert v1.args == ("--cluster", "prod")
    assert v1.env == (("AWS_PROFILE", "prod"),)
    assert v1.provide_cluster_info
    beta = parse_kubeconfig(text, source="kc", base_dir=tmp_path, context="beta").exec
    assert beta is not None
    assert beta.command == "aws"  # looked up on PATH
    assert beta.api_version.endswith("v1beta1")


def test_kubeconfig_list_merges_first_wins(tmp_path: Path) -> None:
    first = tmp_path / "a"
    second = tmp_path / "b"
    first.write_text(
        _kubeconfig(
            [{"name": "u", "user": {"token": "from-a"}}],
            clusters=[{"name": "c", "cluster": {"server": "https://a:1"}}],
            contexts=[{"name": "ctx-a", "context": {"cluster": "c", "user": "u"}}],
            current=None,
        )
    )
    second.write_text(
        _kubeconfig(
            [{"name": "u", "user": {"token": "from-b"}}],
            clusters=[{"name": "c", "cluster": {"server": "https://b:1"}}],
            contexts=[{"name": "ctx-b", "context": {"cluster": "c", "user": "u"}}],
            current="ctx-b",
        )
    )
    environ = {"KUBECONFIG": f"{first}:{tmp_path / 'missing'}:{second}"}
    access = load_kubeconfig(None, environ=environ)
    # current-context from b, but the cluster and user named in it were defined first in a.
    assert access.server == "https://a:1"
    assert access.token == "from-a"


def test_default_kubeconfig_is_home_kube_config(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(_kubeconfig([{"name": "u", "user": {}}]))
    assert load_kubeconfig(None, environ={"HOME": str(tmp_path)}).server == "https://127.0.0.1:6443"


@pytest.mark.parametrize(
    ("text", "context", "expected"),
    [
        (_kubeconfig([{"name": "u", "user": {}}], current=None), None, "no current-context"),
        (_kubeconfig([{"name": "u", "user": {}}]), "other", "no context 'other' (contexts: main)"),
        (
            _kubeconfig(
                [{"name": "u", "user": {}}],
                contexts=[{"name": "main", "context": {"cluster": "nope", "user": "u"}}],
            ),
            None,
            "contexts[0].context.cluster: no cluster 'nope'",
        ),
        (
            _kubeconfig([{"name": "u", "user": {"client-certificate-data": "!!notbase64"}}]),
            None,
            "users[0].user.client-certificate-data: expected base64 data",
        ),
        (
            _kubeconfig([{"name": "u", "user": {"client-certificate-data": _b64(b"x")}}]),
            None,
            "users[0].user.client-key: a client certificate and its key go together",
        ),
        (
            _kubeconfig([{"name": "u", "user": {"client-certificate": "absent.crt"}}]),
            None,
            "users[0].user.client-certificate: cannot read",
        ),
        (
            _kubeconfig([{"name": "u", "user": {"exec": {"apiVersion": "v2", "command": "x"}}}]),
            None,
            "users[0].user.exec.apiVersion: expected one of client.authentication.k8s.io/v1",
        ),
        (
            _kubeconfig([{"name": "u", "user": {"auth-provider": {"name": "gcp"}}}]),
            None,
            "auth-provider plugins were removed",
        ),
        (
            _kubeconfig(
                [{"name": "u", "user": {}}], clusters=[{"name": "c", "cluster": {"server": "h"}}]
            ),
            None,
            "clusters[0].cluster.server: expected an http(s):// URL",
        ),
        ("clusters: [1\n", None, "invalid YAML"),
    ],
)
def test_bad_kubeconfigs_say_what_and_where(
    tmp_path: Path, text: str, context: str | None, expected: str
) -> None:
    with pytest.raises(KubeconfigError) as info:
        parse_kubeconfig(text, source="my-kubeconfig", base_dir=tmp_path, context=context)
    assert str(info.value).startswith("my-kubeconfig")
    assert expected in str(info.value)


def test_a_missing_kubeconfig_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="does not exist"):
        load_kubeconfig(tmp_path / "nope")


def test_service_account(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA PEM")
    (tmp_path / "token").write_text("tok")
    (tmp_path / "namespace").write_text("agents\n")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "6443"}
    access = service_account_access(tmp_path, environ)
    assert access.server == "https://10.0.0.1:6443"
    assert access.ca_pem == b"CA PEM"
    assert access.token_file == str(tmp_path / "token")
    assert access.namespace == "agents"
    v6 = service_account_access(tmp_path, {"KUBERNETES_SERVICE_HOST": "fd00::1"})
    assert v6.server == "https://[fd00::1]:443"
    with pytest.raises(KubeconfigError, match="KUBERNETES_SERVICE_HOST"):
        service_account_access(tmp_path, {})


def test_access_for_an_account(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_bytes(b"CA PEM")
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    in_pod = AccountConfig("a", service_account=True)
    assert (
        access_for_account(in_pod, environ=environ, service_account_dir=tmp_path).server
        == "https://10.0.0.1:443"
    )
    text = _kubeconfig([{"name": "u", "user": {"token": "t"}}])
    dynamic = AccountConfig("d", kubeconfig_contents=text, insecure=True)
    access = access_for_account(dynamic, environ={})
    assert access.token == "t"
    assert access.insecure_skip_tls_verify  # the account's insecure: true
    path = tmp_path / "kc"
    path.write_text(text)
    assert (
        access_for_account(
            AccountConfig("f", kube_config_file=str(path), context="main"), environ={}
        ).token
        == "t"
    )
