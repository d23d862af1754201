"""The small shapes Deck and Orca read, end to end (kubesim over TLS, REST as Orca calls it):
pod templates carry the moniker and artifact annotations, a delete's result has
``manifests: []``, ``moniker.stack`` comes only from its annotation, an unparsable manifest
name is 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import trio

from .harness import open_stack, wait_until
from .ops_client import OrcaClient


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "shop-web", "namespace": "default"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "shop-web"}},
            "template": {
                "metadata": {"labels": {"app": "shop-web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]},
            },
        },
    }


async def test_shapes_deck_and_orca_read(tmp_path: Path) -> None:
    with trio.fail_after(60):
        async with open_stack(tmp_path, kube_tls=True) as stack:
            base = f"http://127.0.0.1:{stack.server.api_port}"
            async with httpx.AsyncClient(base_url=base) as http:
                await wait_until(
                    lambda: stack.server.state.sessions.primary_session("k1") is not None,
                    what="k1 has a PRIMARY agent",
                )
                orca = OrcaClient(http)
                task = await orca.run(
                    "deployManifest",
                    {
                        "account": "k1",
                        "source": "text",
                        "manifests": [deployment()],
                        "moniker": {"app": "shop"},
                    },
                )
                assert task["status"]["failed"] is False, task["resultObjects"]
                live = stack.sim.get("apps", "v1", "deployments", "default", "shop-web")
                notes = live["spec"]["template"]["metadata"]["annotations"]
                assert notes["moniker.spinnaker.io/application"] == "shop"
                assert notes["moniker.spinnaker.io/cluster"] == "deployment shop-web"
                assert notes["artifact.spinnaker.io/type"] == "kubernetes/deployment"
                assert notes["artifact.spinnaker.io/name"] == "shop-web"
                assert notes["artifact.spinnaker.io/location"] == "default"

                view = await orca.wait_stable("k1", "default", "deployment shop-web")
                # "shop-web" parses as app "shop", stack "web": Clouddriver takes no stack
                # from the name.
                assert view["moniker"] == {"app": "shop", "cluster": "deployment shop-web"}

                answer = await http.get(f"/manifests/k1/default/{quote('deployment')}")
                assert answer.status_code == 404, answer.text

                target = {"account": "k1", "manifestName": "deployment shop-web"}
                task = await orca.run(
                    "deleteManifest",
                    {**target, "location": "default", "options": {"cascading": "true"}},
                )
                assert task["status"]["failed"] is False, task["resultObjects"]
                result = task["resultObjects"][0]
                assert result["manifests"] == []
                assert result["manifestNamesByNamespace"] == {"default": ["deployment shop-web"]}
