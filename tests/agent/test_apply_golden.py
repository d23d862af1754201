"""The agent's client-side apply leaves what real ``kubectl apply`` leaves.

Each file of ``golden/kubectl_apply/`` (recorded by ``golden/record_kubectl_apply.py`` with
kubectl 1.32 against kubesim) is replayed against a fresh kubesim over HTTPS: the apply steps
through the agent's apply (``apply_object``, what deployManifest runs for each manifest) with
the cluster's OpenAPI, the foreign edits as the exact requests kubectl sent. The agent must
send the same writes kubectl sent (same verb, path, content type and body: the same strategic
or JSON merge patch) and leave the same object. A Deployment's patch is also computed with a
real API server's schema (``golden.REAL_APPS_V1``) instead of kubesim's, and must be the same.
No kubectl is needed here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import trio

import kubesim
from agent import AccountConfig, KubeClient, open_kube_client
from agent.operations import parse_v3, three_way_strategic_merge_patch
from agent.operations._apply import _with_last_applied, apply_object
from agent.operations._context import OperationContext, OperationSettings
from agent.operations._deploy import DEPLOY
from agent.operations._description import Description
from agent.operations._kinds import KindResolver
from agent.operations._kube import Cluster
from agent.operations._manifests import LAST_APPLIED, Strategy
from agent.operations._openapi import PatchSchemas
from agent.operations._outcome import Outcome
from tests.agent.golden import REAL_APPS_V1, RESULTS, strip_volatile, write_record

RECORDED = sorted(RESULTS.glob("*.json"))
REAL = parse_v3(json.loads(REAL_APPS_V1.read_text()))
_METHODS = {"create": "POST", "update": "PUT", "patch": "PATCH", "delete": "DELETE"}


def _comparable(writes: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    """The writes less their query (kubectl names its field manager there, the agent its
    own); bodies as canonical JSON so a difference prints readably."""
    return [
        (w["verb"], w["path"], w["content_type"], json.dumps(w["body"], sort_keys=True))
        for w in writes
    ]


async def _send(client: KubeClient, write: dict[str, Any]) -> None:
    body = write["body"]
    content = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    reply = await client.request(
        _METHODS[write["verb"]],
        write["path"],
        params=write["query"],
        headers={"Content-Type": write["content_type"], "Accept": "application/json"},
        content=content if body is not None else None,
    )
    reply.raise_for_status()


def test_every_case_was_recorded() -> None:
    from tests.agent.golden.kubectl_cases import CASES

    assert {p.stem for p in RECORDED} == {c.name for c in CASES}
    assert len(RECORDED) >= 30


async def _check_with_the_real_schema(
    cluster: Cluster, manifest: dict[str, Any], kubectls: list[dict[str, Any]]
) -> None:
    """The patch kubectl sent for ``manifest`` is also ours with a real server's schema."""
    patches = [w for w in kubectls if w["verb"] == "patch"]
    if not patches:
        return
    res = await cluster.kinds.resolve("Deployment", api_version="apps/v1")
    live = await cluster.get(res, manifest["metadata"]["namespace"], manifest["metadata"]["name"])
    assert live is not None
    applied = live["metadata"].get("annotations", {}).get(LAST_APPLIED)
    original = json.loads(applied) if applied else None
    desired = _with_last_applied(copy.deepcopy(manifest))
    ours = three_way_strategic_merge_patch(
        original, desired, live, REAL, "io.k8s.api.apps.v1.Deployment"
    )
    assert ours == patches[0]["body"]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
async def test_agent_apply_leaves_what_kubectl_leaves(path: Path, tmp_path: Path) -> None:
    recorded = json.loads(path.read_bytes())  # noqa: ASYNC240 (a small file, before any I/O)
    sim = kubesim.Cluster()
    with trio.fail_after(30):
        async with kubesim.open_server(sim, tls=True) as server:
            account = AccountConfig("k1", kube_config_file=str(server.kubeconfig(tmp_path / "kc")))
            async with open_kube_client(account, environ={}) as client:
                cluster = Cluster("k1", client, KindResolver(client), PatchSchemas(client, "k1"))
                ctx = OperationContext(
                    cluster, Description("deployManifest", {}), Outcome(DEPLOY), OperationSettings()
                )
                for number, step in enumerate(recorded["steps"]):
                    server.writes.clear()
                    if "apply" not in step:
                        for write in step["writes"]:
                            await _send(client, write)
                        cluster.kinds.invalidate()  # the step may have created a CRD
                        continue
                    for manifest in step["apply"]:
                        res = await cluster.kinds.resolve(
                            manifest["kind"], api_version=manifest["apiVersion"]
                        )
                        if manifest["kind"] == "Deployment":
                            await _check_with_the_real_schema(cluster, manifest, step["writes"])
                        await apply_object(ctx, res, copy.deepcopy(manifest), Strategy())
                    ours = [write_record(w) for w in server.writes.recent()]
                    assert _comparable(ours) == _comparable(step["writes"]), f"step {number}"
                live = await client.request("GET", recorded["target"])
                live.raise_for_status()
    assert strip_volatile(live.json()) == recorded["result"]
