"""The client against many clusters of one kubesim (each under /clusters/{name}), over TLS:
the server URL's path prefixes every request, the identity names the path, and clients of
the same CA share their TLS contexts without ever sharing a client certificate."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import yaml

import kubesim
from agent import AccountConfig, KubeUnauthorizedError, open_kube_client
from agent.kube import load_kubeconfig
from agent.kube._tls import shared_ssl_context


async def test_every_request_goes_under_the_servers_path(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with kubesim.open_server(kubesim.Cluster(), tls=True) as server:
            member = server.add_cluster("17", kubesim.Cluster(kubesim.SimConfig(namespaces=("x",))))
            path = member.kubeconfig(tmp_path / "kubeconfig")
            account = AccountConfig("c17", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                identity = await client.identity()
                namespaces = await client.get_json("/api/v1/namespaces")
                openapi = await client.get_json("/openapi/v3")
                async with client.stream(
                    "GET", "/api/v1/namespaces", params={"watch": "1", "timeoutSeconds": "1"}
                ) as response:
                    assert response.http_version == "HTTP/2"
                    body = await response.read(2**20)
    assert identity.host == member.url.removeprefix("https://")
    assert identity.host.endswith("/clusters/17")
    assert [item["metadata"]["name"] for item in namespaces["items"]] == ["x"]
    assert "api/v1" in openapi["paths"]
    assert b'"name":"x"' in body
    assert member.requests.count("list", "namespaces") == 1
    assert member.requests.count("watch", "namespaces") == 1
    assert server.requests.count("list", "namespaces") == 0


async def test_clients_of_one_ca_share_contexts_but_never_a_certificate(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with kubesim.open_server(kubesim.Cluster(), tls=True) as server:
            a = server.add_cluster("a", kubesim.Cluster())
            b = server.add_cluster("b", kubesim.Cluster())
            access_a = load_kubeconfig(str(a.kubeconfig(tmp_path / "a")))
            access_b = load_kubeconfig(str(b.kubeconfig(tmp_path / "b")))
            shared = shared_ssl_context(access_a, ["h2", "http/1.1"])
            assert shared is shared_ssl_context(access_b, ["h2", "http/1.1"])
            assert shared is not shared_ssl_context(access_b, ["http/1.1"])
            # A client presenting a certificate (user admin of the server's own cluster) ...
            cert = server.kubeconfig(tmp_path / "cert", auth="cert")
            # ... and one with no credentials at all, on the same CA.
            document = yaml.safe_load(cert.read_text())
            document["users"][0]["user"] = {}
            anonymous = tmp_path / "anonymous"
            anonymous.write_text(yaml.safe_dump(document))
            async with (
                open_kube_client(AccountConfig("cert", kube_config_file=str(cert))) as known,
                open_kube_client(AccountConfig("anon", kube_config_file=str(anonymous))) as anon,
            ):
                assert (await known.get_json("/api/v1/namespaces"))["items"]
                with pytest.raises(KubeUnauthorizedError):
                    await anon.get_json("/api/v1/namespaces")
