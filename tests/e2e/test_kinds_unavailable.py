"""What the server shows is what the agent may see (issue 15, docs/protocol.md §7.4, §7.5), with
the real agent and server against kubesim over TLS with a token, as a real cluster is:

* RBAC revoked for one kind: its objects leave the server's cache, a read of it answers 403
  with the API server's reason, /credentials and /armory/accounts list it unavailable, and
  the agent logs one WARNING naming the account, the kind and the reason;
* RBAC restored: the kind is back within its retry backoff (10 s at first), with one INFO;
* the account's namespaces narrowed by a config reload: the objects outside leave the cache.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import kubesim

from .harness import Stack, open_stack, stored_objects, wait_until

#: The agent reads as the kubeconfig's user, "admin" (a token, over TLS).
USER = "admin"
EVERYTHING = {"*": kubesim.ALL_VERBS}
NO_CONFIGMAPS = {"*": kubesim.ALL_VERBS, "configmaps": ()}


def _configmap(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }


def _pod(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


async def _cached(stack: Stack, kind: str) -> set[tuple[str, str]]:
    return {(k[2], k[3]) for k in await stored_objects(stack, "k1") if k[1] == kind}


def _agent_lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("agent") and r.levelno == level and text in r.getMessage()
    ]


async def test_revoked_rbac_then_restored_then_a_narrower_scope(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    for namespace in ("a", "b", "c"):
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        sim.create(_configmap(f"cm-{namespace}", namespace))
        sim.create(_pod(f"pod-{namespace}", namespace))
    account = {
        "name": "k1",
        "kubeConfigFile": str(tmp_path / "kubeconfig"),  # where open_stack writes it
        "kinds": ["configMap", "pod"],
    }
    with trio.fail_after(120):
        async with open_stack(tmp_path, sim=sim, kube_tls=True, accounts=[account]) as stack:
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:
                all_three = {("a", "cm-a"), ("b", "cm-b"), ("c", "cm-c")}

                async def configmaps_cached() -> bool:
                    return all_three <= await _cached(stack, "ConfigMap")

                await wait_until(configmaps_cached, what="the ConfigMaps in the server")

                # RBAC revoked. Open watches go on (as on a real API server) until they end:
                # the link to the API server is cut, as a watch timeout or restart would.
                stack.kube.set_grants(USER, NO_CONFIGMAPS)
                stack.kube.cut(0.0)

                async def configmaps_gone() -> bool:
                    return not await _cached(stack, "ConfigMap")

                await wait_until(configmaps_gone, what="the ConfigMaps gone from the server")
                revoked = await http.get("/manifests/k1/a/configMap%20cm-a")
                assert revoked.status_code == 403, revoked.text
                reason = revoked.json()["unavailableKind"]["reason"]
                assert reason.startswith("403 Forbidden: configmaps is forbidden")
                assert reason in revoked.json()["message"]
                assert (await http.get("/manifests/k1/a/pod%20pod-a")).status_code == 200
                for path in ("/credentials/k1", "/armory/accounts/k1"):
                    [mark] = (await http.get(path)).json()["unavailableKinds"]
                    assert (mark["kind"], mark["scope"], mark["code"]) == ("ConfigMap", "", 403)
                listed = {c["name"]: c for c in (await http.get("/credentials")).json()}
                assert [k["kind"] for k in listed["k1"]["unavailableKinds"]] == ["ConfigMap"]
                [warning] = _agent_lines(caplog, logging.WARNING, "is unavailable")
                assert warning.startswith("account k1: ConfigMap is unavailable to the agent: 403")
                assert f'User "{USER}" cannot' in warning

                # RBAC back: at the kind's next retry (10 s, ±20 %, after the refusal).
                stack.sim.create(_configmap("cm-while-forbidden", "a"))
                stack.kube.set_grants(USER, EVERYTHING)
                restored = trio.current_time()
                every = {*all_three, ("a", "cm-while-forbidden")}

                async def configmaps_back() -> bool:
                    return every <= await _cached(stack, "ConfigMap")

                await wait_until(configmaps_back, what="the ConfigMaps back in the server")
                back_after = trio.current_time() - restored
                print(f"\nConfigMaps back {back_after:.1f} s after RBAC was restored")
                assert back_after < 12.0 + 5.0  # the first retry, and a loaded machine's slack
                assert (await http.get("/credentials/k1")).json()["unavailableKinds"] == []
                assert (await http.get("/manifests/k1/a/configMap%20cm-a")).status_code == 200
                assert len(_agent_lines(caplog, logging.WARNING, "is unavailable")) == 1
                assert _agent_lines(caplog, logging.INFO, "ConfigMap is available again")

                # The account narrowed to namespace a: what is outside leaves the cache.
                stack.write_config([{**account, "namespaces": ["a"]}])

                async def narrowed() -> bool:
                    cached = await _cached(stack, "ConfigMap") | await _cached(stack, "Pod")
                    return {namespace for namespace, _ in cached} == {"a"}

                await wait_until(narrowed, what="only namespace a in the server")
                assert await _cached(stack, "Pod") == {("a", "pod-a")}
                stack.sim.create(_configmap("cm-late", "b"))
                stack.sim.create(_configmap("cm-late", "a"))

                async def late() -> bool:
                    return ("a", "cm-late") in await _cached(stack, "ConfigMap")

                await wait_until(late, what="a new ConfigMap in namespace a")
                assert ("b", "cm-late") not in await _cached(stack, "ConfigMap")


async def test_a_kind_forbidden_in_one_namespace_leaves_only_that_namespace(
    tmp_path: Path,
) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    for namespace in ("a", "b"):
        sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        sim.create(_configmap(f"cm-{namespace}", namespace))
    account = {
        "name": "k1",
        "kubeConfigFile": str(tmp_path / "kubeconfig"),
        "kinds": ["configMap"],
        "namespaces": ["a", "b"],  # one watch per namespace
    }
    with trio.fail_after(120):
        async with open_stack(tmp_path, sim=sim, kube_tls=True, accounts=[account]) as stack:
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base, timeout=10) as http:

                async def both() -> bool:
                    return await _cached(stack, "ConfigMap") == {("a", "cm-a"), ("b", "cm-b")}

                await wait_until(both, what="both ConfigMaps in the server")
                # A RoleBinding removed in namespace b only.
                stack.kube.set_grants(USER, {**EVERYTHING, "b/configmaps": ()})
                stack.kube.cut(0.0)

                async def only_a() -> bool:
                    return await _cached(stack, "ConfigMap") == {("a", "cm-a")}

                await wait_until(only_a, what="namespace b's ConfigMap gone")
                assert (await http.get("/manifests/k1/b/configMap%20cm-b")).status_code == 403
                assert (await http.get("/manifests/k1/a/configMap%20cm-a")).status_code == 200
                [mark] = (await http.get("/credentials/k1")).json()["unavailableKinds"]
                assert (mark["kind"], mark["scope"], mark["code"]) == ("ConfigMap", "b", 403)
                assert 'in the namespace "b"' in mark["reason"]
