"""The client against kubesim (a simulated API server at a real loopback URL): kubeconfigs it
writes (token and client certificate), HTTP/2 over TLS, identity, RBAC refusals, watches."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import kubesim
from agent import (
    AccountConfig,
    KubeClient,
    KubeForbiddenError,
    KubeNotFoundError,
    open_kube_client,
)


@pytest.mark.parametrize("auth", ["token", "cert"])
async def test_a_kubesim_kubeconfig_works_over_tls_and_http2(tmp_path: Path, auth: str) -> None:
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            path = server.kubeconfig(tmp_path / "kubeconfig", user="admin", auth=auth)
            account = AccountConfig("sim", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                identity = await client.identity()
                namespaces = await client.get_json("/api/v1/namespaces")
                async with client.stream("GET", "/version") as response:
                    assert response.http_version == "HTTP/2"
    assert identity.host == server.url.removeprefix("https://")
    assert len(identity.cert_fingerprint) == 64
    assert identity.version.get("gitVersion")
    assert "default" in {item["metadata"]["name"] for item in namespaces["items"]}


async def test_rbac_refusals_keep_the_kubernetes_message(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            server.add_user("viewer", grants={"*": kubesim.READ_VERBS, "secrets": ()})
            path = server.kubeconfig(tmp_path / "kubeconfig", user="viewer")
            account = AccountConfig("sim", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                with pytest.raises(KubeForbiddenError) as forbidden:
                    await client.get_json("/api/v1/namespaces/default/secrets")
                with pytest.raises(KubeNotFoundError):
                    await client.get_json("/api/v1/namespaces/default/pods/nope")
    assert forbidden.value.code == 403
    assert forbidden.value.reason == "Forbidden"
    assert "secrets" in forbidden.value.message


async def test_a_watch_streams_events_as_they_happen(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            path = server.kubeconfig(tmp_path / "kubeconfig")
            account = AccountConfig("sim", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                listed = await client.get_json("/api/v1/namespaces/default/pods")
                params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"]}
                async with client.stream(
                    "GET", "/api/v1/namespaces/default/pods", params=params
                ) as response:
                    assert response.status_code == 200
                    sim.create(pod)
                    body = b""
                    while b"\n" not in body:
                        body += await response.receive_some()
    assert b'"ADDED"' in body
    assert b'"web"' in body


async def test_many_watches_share_one_tls_connection_to_kubesim(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    namespaces = [f"team-{n}" for n in range(30)]
    for namespace in namespaces:
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    seen: dict[str, bytes] = {}

    async def watch(client: KubeClient, namespace: str, rv: str, ready: trio.Event) -> None:
        params = {"watch": "1", "resourceVersion": rv}
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        async with client.stream("GET", path, params=params) as response:
            ready.set()
            body = b""
            while b"\n" not in body:
                body += await response.receive_some()
            seen[namespace] = body

    with trio.fail_after(60):
        async with kubesim.open_server(sim, tls=True) as server:
            path = server.kubeconfig(tmp_path / "kubeconfig")
            account = AccountConfig("sim", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                rv = (await client.get_json("/api/v1/configmaps"))["metadata"]["resourceVersion"]
                async with trio.open_nursery() as nursery:
                    for namespace in namespaces:
                        ready = trio.Event()
                        nursery.start_soon(watch, client, namespace, rv, ready)
                        await ready.wait()
                    assert client.watch_connections == 1
                    for namespace in namespaces:
                        sim.create(
                            {
                                "apiVersion": "v1",
                                "kind": "ConfigMap",
                                "metadata": {"name": "settings", "namespace": namespace},
                                "data": {"team": namespace},
                            }
                        )
    assert sorted(seen) == sorted(namespaces)
    assert all(b'"ADDED"' in body for body in seen.values())


async def test_a_watch_refused_with_a_status_leaves_the_shared_connection_up(
    tmp_path: Path,
) -> None:
    """A 503 (or 429, 410) answer to one watch is a short body with a Content-Length; read
    to its end, it failed h2's length check (the fast path had taken the bytes past h2),
    and with it the connection every other watch of the cluster shares."""
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            path = server.kubeconfig(tmp_path / "kubeconfig")
            account = AccountConfig("sim", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                rv = (await client.get_json("/api/v1/pods"))["metadata"]["resourceVersion"]
                params = {"watch": "1", "resourceVersion": rv}
                async with client.stream("GET", "/api/v1/configmaps", params=params) as other:
                    assert other.status_code == 200
                    server.faults.fail_next(1, status=503, retry_after=None, verb="watch")
                    async with client.stream("GET", "/api/v1/pods", params=params) as refused:
                        body = b""
                        while chunk := await refused.receive_some():
                            body += chunk
                    assert refused.status_code == 503
                    assert b'"ServiceUnavailable"' in body
                    sim.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})
                    line = b""
                    while b"\n" not in line:
                        line += await other.receive_some()
                    assert b'"ADDED"' in line
                assert client.watch_connections == 1


async def test_open_kube_client_lets_the_blocks_own_error_through(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            path = server.kubeconfig(tmp_path / "kubeconfig")
            account = AccountConfig("sim", kube_config_file=str(path))
            with pytest.raises(KubeNotFoundError):  # not an ExceptionGroup
                async with open_kube_client(account, environ={}) as client:
                    await client.get_json("/api/v1/namespaces/default/pods/nope")
