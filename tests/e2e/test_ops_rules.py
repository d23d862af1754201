"""Namespace and kind rules on writes, end to end (kubesim over TLS): the agent's account
reports ``namespaces``/``omitKinds`` in its Hello, and the server refuses, as Clouddriver
does, with 400 "Validation Failed" before any task exists: nothing reaches kubesim."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import trio

import kubesim
from kubesim import ApiError

from .harness import open_stack, wait_until
from .ops_client import STAGE_NOISE, OrcaClient

CTX = "deployKubernetesManifest"


def config_map(namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "settings"}
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"a": "1"}}


async def post(http: httpx.AsyncClient, op: str, context: dict[str, Any]) -> httpx.Response:
    body = [{op: {**STAGE_NOISE, **context}}]
    request_id = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return await http.post(f"/kubernetes/ops?clientRequestId={request_id}", json=body)


async def test_limited_account_refuses_writes_outside_its_rules(tmp_path: Path) -> None:
    with trio.fail_after(60):
        account = {
            "name": "k1",
            "kubeConfigFile": str(tmp_path / "kubeconfig"),
            "namespaces": ["apps", "web"],
            "omitKinds": ["secret"],
        }
        sim = kubesim.Cluster()
        for name in ("apps", "web"):
            sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        async with open_stack(tmp_path, accounts=[account], sim=sim, kube_tls=True) as stack:
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                await wait_until(
                    lambda: stack.server.state.sessions.primary_session("k1") is not None,
                    what="k1 has a PRIMARY agent",
                )
                deploy = {"account": "k1", "source": "text", "moniker": {"app": "shop"}}
                answer = await post(
                    http, "deployManifest", {**deploy, "manifests": [config_map("kube-system")]}
                )
                assert answer.status_code == 400, answer.text
                body = answer.json()
                assert body["message"] == "Validation Failed"
                assert body["errors"] == [f"{CTX}.{CTX}.kube-system.wrongNamespace"]

                answer = await post(
                    http, "deployManifest", {**deploy, "manifests": [config_map(None)]}
                )
                assert answer.status_code == 400, answer.text
                assert answer.json()["errors"] == [f"{CTX}.{CTX}.namespace.omittedNamespace"]

                secret = {**config_map("apps"), "kind": "Secret"}
                answer = await post(http, "deployManifest", {**deploy, "manifests": [secret]})
                assert answer.status_code == 400, answer.text
                assert "included in 'omitKinds'" in answer.json()["errors"][0]

                scale = {"account": "k1", "manifestName": "deployment web", "replicas": "2"}
                answer = await post(http, "scaleManifest", {**scale, "location": "kube-system"})
                assert answer.status_code == 400, answer.text
                assert answer.json()["errors"] == [
                    "scaleKubernetesManifest.scaleKubernetesManifest.kube-system.wrongNamespace"
                ]

                # The strategies' disable stage and Deck's Enable/Disable actions are writes
                # too, refused under Clouddriver's enable/disable validator contexts.
                target = {"account": "k1", "manifestName": "replicaSet web-v000"}
                for op in ("disableManifest", "enableManifest"):
                    answer = await post(http, op, {**target, "location": "kube-system"})
                    assert answer.status_code == 400, answer.text
                    ctx = f"{op.removesuffix('Manifest')}KubernetesManifest"
                    assert answer.json()["errors"] == [f"{ctx}.{ctx}.kube-system.wrongNamespace"]

                # Nothing was applied, and no task was made.
                for namespace in ("kube-system", "default", "apps"):
                    for resource in ("configmaps", "secrets"):
                        try:
                            stack.sim.get("", "v1", resource, namespace, "settings")
                        except ApiError:
                            continue
                        raise AssertionError(f"{resource} settings in {namespace} was applied")
                assert (await http.get("/task")).json() == []

                # Inside the rules the same deploy runs as Orca runs it.
                task = await OrcaClient(http).run(
                    "deployManifest", {**deploy, "manifests": [config_map("apps")]}
                )
                assert task["status"]["failed"] is False, task["resultObjects"]
                names = task["resultObjects"][0]["manifestNamesByNamespace"]
                assert names == {"apps": ["configMap settings-v000"]}
