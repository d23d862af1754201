"""Issue 5 acceptance, end to end: Clouddriver's reads over what the real agent cached from
kubesim: the agent-registered account in /credentials (permissions, namespaces), and a
Deployment kubesim's controllers rolled out shown stable by /manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

import kubesim

from .harness import open_stack, wait_until


def _deployment(name: str, namespace: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/name": "shop",
                "app.kubernetes.io/managed-by": "spinnaker",
            },
            "annotations": {
                "moniker.spinnaker.io/application": "shop",
                "moniker.spinnaker.io/cluster": "deployment web",
            },
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.27"}]},
            },
        },
    }


async def test_credentials_and_a_stable_deployment_through_rest(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
    sim.create(_deployment("web", "shop", replicas=3))
    accounts = [
        {
            "name": "k1",
            "kubeConfigFile": str(tmp_path / "kubeconfig"),
            "permissions": {"READ": ["dev", "ops"], "WRITE": ["ops"]},
        }
    ]
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim, accounts=accounts) as stack:
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base) as client:

                async def listed() -> bool:
                    response = await client.get("/credentials")
                    return any(c["name"] == "k1" for c in response.json())

                await wait_until(listed)
                brief = {c["name"]: c for c in (await client.get("/credentials")).json()}["k1"]
                assert brief["type"] == "kubernetes"
                assert brief["permissions"] == {"READ": ["dev", "ops"], "WRITE": ["ops"]}
                assert "namespaces" not in brief  # only with expand=true

                namespaces = sorted(o["metadata"]["name"] for o in sim.list("", "v1", "namespaces"))

                async def namespaces_cached() -> bool:
                    response = await client.get("/credentials/k1")
                    return bool(response.json().get("namespaces") == namespaces)

                await wait_until(namespaces_cached)
                expanded = (await client.get("/credentials", params={"expand": "true"})).json()
                assert {c["name"]: c for c in expanded}["k1"]["namespaces"] == namespaces
                assert "shop" in namespaces

                # kubesim's controllers roll the Deployment out (ReplicaSet, Pods, status).
                def rolled_out() -> bool:
                    status = sim.get("apps", "v1", "deployments", "shop", "web").get("status", {})
                    return bool(
                        status.get("availableReplicas") == 3 and status.get("updatedReplicas") == 3
                    )

                async def sim_ready() -> bool:
                    return rolled_out()

                await wait_until(sim_ready)
                manifest: dict[str, Any] = {}

                async def stable() -> bool:
                    nonlocal manifest
                    response = await client.get("/manifests/k1/shop/deployment web")
                    if response.status_code != 200:
                        return False
                    manifest = response.json()
                    return bool(manifest["status"]["stable"]["state"])

                await wait_until(stable)
                assert manifest["account"] == "k1"
                assert manifest["location"] == "shop"
                assert manifest["name"] == "deployment web"
                assert manifest["status"]["available"]["state"] is True
                assert manifest["status"]["failed"]["state"] is False
                assert manifest["status"]["paused"]["state"] is False
                live = sim.get("apps", "v1", "deployments", "shop", "web")
                assert manifest["manifest"]["status"] == live["status"]
                assert manifest["moniker"]["app"] == "shop"

                missing = await client.get("/manifests/k1/shop/deployment nowhere")
                assert missing.status_code == 404
                unknown = await client.get("/credentials/no-such-account")
                assert unknown.status_code == 404
