"""The official ``kubernetes`` client (which no one here wrote) against kubesim on loopback.

The client is synchronous, so every call runs in a worker thread (trio.to_thread).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import trio
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

import kubesim

T = TypeVar("T")
# The client's models are loosely typed (every field Optional); the tests treat them as Any.
_new_client: Any = k8s_config.new_client_from_config
_Watch: Any = k8s_watch.Watch
_Core: Any = k8s.CoreV1Api
_Apps: Any = k8s.AppsV1Api


async def _run(fn: Callable[[], T]) -> T:
    return await trio.to_thread.run_sync(fn, abandon_on_cancel=True)


def _api(server: kubesim.Server, tmp_path: Path, user: str = "admin", auth: str = "token") -> Any:
    path = server.kubeconfig(tmp_path / f"{user}-{auth}.yaml", user=user, auth=auth)
    return _new_client(config_file=str(path))


def _cm(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}


async def test_paged_list_and_watch(server: kubesim.Server, tmp_path: Path) -> None:
    with trio.fail_after(20):
        core = _Core(_api(server, tmp_path))
        for i in range(5):
            await _run(partial(core.create_namespaced_config_map, "default", _cm(f"cm-{i}")))
        first = await _run(lambda: core.list_namespaced_config_map("default", limit=2))
        assert [c.metadata.name for c in first.items] == ["cm-0", "cm-1"]
        rest = await _run(
            lambda: core.list_namespaced_config_map(
                "default", limit=10, _continue=first.metadata._continue
            )
        )
        assert [c.metadata.name for c in rest.items] == ["cm-2", "cm-3", "cm-4"]
        assert rest.metadata._continue is None
        rv = first.metadata.resource_version

        def watch_from_rv() -> list[tuple[str, str]]:
            stream = _Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=1
            )
            return [(e["type"], e["object"].metadata.name) for e in stream]

        await _run(
            lambda: core.patch_namespaced_config_map("cm-1", "default", {"data": {"a": "c"}})
        )
        await _run(lambda: core.delete_namespaced_config_map("cm-2", "default"))
        assert await _run(watch_from_rv) == [("MODIFIED", "cm-1"), ("DELETED", "cm-2")]


async def test_watch_from_a_compacted_version_is_410(
    sim: kubesim.Cluster, server: kubesim.Server, tmp_path: Path
) -> None:
    with trio.fail_after(20):
        core = _Core(_api(server, tmp_path))
        for i in range(60):  # the fixture keeps 50 events per resource
            sim.create({**_cm(f"cm-{i}"), "metadata": {"name": f"cm-{i}", "namespace": "default"}})

        def watch_old() -> None:
            for _ in _Watch().stream(
                core.list_namespaced_config_map, "default", resource_version="5", timeout_seconds=1
            ):
                pass

        with pytest.raises(ApiException) as caught:
            await _run(watch_old)
        assert caught.value.status == 410


async def test_scale_and_namespace_deletion(server: kubesim.Server, tmp_path: Path) -> None:
    with trio.fail_after(20):
        api = _api(server, tmp_path)
        core, apps = _Core(api), _Apps(api)
        await _run(lambda: core.create_namespace({"metadata": {"name": "shop"}}))
        labels = {"app": "web"}
        deployment = {
            "metadata": {"name": "web"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "web:1"}]},
                },
            },
        }
        await _run(lambda: apps.create_namespaced_deployment("shop", deployment))
        await _run(
            lambda: apps.patch_namespaced_deployment_scale("web", "shop", {"spec": {"replicas": 3}})
        )
        scale = await _run(lambda: apps.read_namespaced_deployment_scale("web", "shop"))
        assert scale.spec.replicas == 3
        assert scale.status.replicas == 3
        pods = await _run(lambda: core.list_namespaced_pod("shop"))
        assert len(pods.items) == 3
        assert all(p.status.phase == "Running" for p in pods.items)
        status = (await _run(lambda: apps.read_namespaced_deployment("web", "shop"))).status
        assert status.observed_generation == 2
        assert status.available_replicas == 3
        await _run(lambda: core.delete_namespace("shop"))
        with pytest.raises(ApiException) as gone:
            await _run(lambda: core.read_namespace("shop"))
        assert gone.value.status == 404
        everything = await _run(lambda: core.list_pod_for_all_namespaces())
        assert [p for p in everything.items if p.metadata.namespace == "shop"] == []


async def test_forbidden_kind_is_403(server: kubesim.Server, tmp_path: Path) -> None:
    with trio.fail_after(20):
        server.add_user("viewer", grants={"*": kubesim.READ_VERBS, "secrets": ()})
        core = _Core(_api(server, tmp_path, user="viewer"))
        assert (await _run(lambda: core.list_namespaced_config_map("default"))).items == []
        with pytest.raises(ApiException) as secrets:
            await _run(lambda: core.list_namespaced_secret("default"))
        assert secrets.value.status == 403
        with pytest.raises(ApiException) as write:
            await _run(lambda: core.create_namespaced_config_map("default", _cm("x")))
        assert write.value.status == 403


async def test_tls_with_token_and_with_client_certificate(
    sim: kubesim.Cluster, tmp_path: Path
) -> None:
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            assert server.url.startswith("https://")
            for auth in ("token", "cert"):
                core = _Core(_api(server, tmp_path, auth=auth))
                names = [n.metadata.name for n in (await _run(core.list_namespace)).items]
                assert "default" in names
            assert server.ca_pem is not None
            verify = ssl.create_default_context(cadata=server.ca_pem.decode())
            async with httpx.AsyncClient(
                base_url=server.url, verify=verify, http2=True
            ) as anonymous:
                refused = await anonymous.get("/api/v1/namespaces")
                assert refused.status_code == 401
                assert refused.json()["reason"] == "Unauthorized"
                token = {"authorization": f"Bearer {server.users['admin'].token}"}
                ok = await anonymous.get("/api/v1/namespaces", headers=token)
                assert ok.status_code == 200
                assert ok.http_version == "HTTP/2"
