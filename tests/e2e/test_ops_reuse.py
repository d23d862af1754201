"""Version reuse end to end (kubesim over TLS, through the REST API as Orca calls it): an
identical redeploy of a versioned ConfigMap/Secret answers the existing version, writes
nothing, and binds the Deployment's references to it; changed content makes the next one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

import kubesim

from .harness import open_stack, wait_until
from .ops_client import OrcaClient


def config_map(value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default"},
        "data": {"level": value},
    }


def secret() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "type": "Opaque",
        "stringData": {"token": "t0"},
    }


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": "nginx:1",
                            "envFrom": [{"secretRef": {"name": "creds"}}],
                        }
                    ],
                    "volumes": [{"name": "cfg", "configMap": {"name": "settings"}}],
                },
            },
        },
    }


def stage(value: str) -> dict[str, Any]:
    return {
        "account": "k1",
        "source": "text",
        "manifests": [deployment(), config_map(value), secret()],
        "moniker": {"app": "shop"},
    }


def names(sim: kubesim.Cluster, plural: str) -> list[str]:
    return sorted(o["metadata"]["name"] for o in sim.list("", "v1", plural, "default"))


def refs(sim: kubesim.Cluster) -> tuple[str, str]:
    spec = sim.get("apps", "v1", "deployments", "default", "web")["spec"]["template"]["spec"]
    return (
        spec["volumes"][0]["configMap"]["name"],
        spec["containers"][0]["envFrom"][0]["secretRef"]["name"],
    )


async def test_identical_redeploys_reuse_versions(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_stack(tmp_path, kube_tls=True) as stack:
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                await wait_until(
                    lambda: stack.server.state.sessions.primary_session("k1") is not None,
                    what="k1 has a PRIMARY agent",
                )
                orca = OrcaClient(http)
                sim = stack.sim
                first = await orca.run("deployManifest", stage("info"))
                assert first["status"]["failed"] is False, first["resultObjects"]
                assert refs(sim) == ("settings-v000", "creds-v000")
                cm_version = sim.get("", "v1", "configmaps", "default", "settings-v000")[
                    "metadata"
                ]["resourceVersion"]

                again = await orca.run("deployManifest", {**stage("info"), "reason": "rerun"})
                assert again["status"]["failed"] is False, again["resultObjects"]
                result = again["resultObjects"][0]
                assert sorted(result["manifestNamesByNamespace"]["default"]) == [
                    "configMap settings-v000",
                    "deployment web",
                    "secret creds-v000",
                ]
                created = {a["name"]: a for a in result["createdArtifacts"]}
                assert created["settings"]["reference"] == "settings-v000"
                assert created["settings"]["version"] == "v000"
                assert created["creds"]["reference"] == "creds-v000"
                reused = [m for m in result["manifests"] if m["kind"] == "ConfigMap"]
                assert reused[0]["metadata"]["name"] == "settings-v000"
                assert any(
                    "Reusing configMap settings-v000" in h["status"] for h in again["history"]
                )
                # No write: the same objects, untouched.
                assert names(sim, "configmaps") == ["settings-v000"]
                assert names(sim, "secrets") == ["creds-v000"]
                live = sim.get("", "v1", "configmaps", "default", "settings-v000")
                assert live["metadata"]["resourceVersion"] == cm_version
                assert refs(sim) == ("settings-v000", "creds-v000")

                changed = await orca.run("deployManifest", stage("debug"))
                assert changed["status"]["failed"] is False, changed["resultObjects"]
                assert names(sim, "configmaps") == ["settings-v000", "settings-v001"]
                assert names(sim, "secrets") == ["creds-v000"]
                assert refs(sim) == ("settings-v001", "creds-v000")

                # (another pipeline run: another clientRequestId)
                back = await orca.run("deployManifest", {**stage("info"), "reason": "back"})
                assert back["status"]["failed"] is False, back["resultObjects"]
                assert names(sim, "configmaps") == ["settings-v000", "settings-v001"]
                assert refs(sim) == ("settings-v000", "creds-v000")
