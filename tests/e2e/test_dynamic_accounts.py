"""A dynamic account posted to the server's Armory API reaches the agent, which watches it."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

import kubesim

from .harness import open_stack, stored_objects, wait_until


async def test_a_dynamic_account_is_pushed_to_the_agent_and_synced(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dyn-visible", "namespace": "default"},
            "data": {},
        }
    )
    with trio.fail_after(60):
        async with open_stack(tmp_path, sim=sim) as stack:
            api = f"http://127.0.0.1:{stack.server.api_port}"

            async def k1_registered() -> bool:
                return bool(stack.agent.link.status.roles.get("k1") == "PRIMARY")

            await wait_until(k1_registered)
            definition = {
                "name": "dyn1",
                "kubeconfigContents": stack.kubeconfig.read_text(),
                "kinds": ["configmap"],
            }
            async with httpx.AsyncClient(base_url=api) as client:
                answer = await client.post("/armory/accounts/dynamic", json=definition)
                assert answer.status_code in (200, 201, 202), answer.text

            async def synced() -> bool:
                objects = await stored_objects(stack, "dyn1")
                return ("v1", "ConfigMap", "default", "dyn-visible") in objects

            await wait_until(synced)
            assert "dyn1" in stack.agent.accounts.accounts
            # The agent holds the kubeconfig; the server must not have kept the credentials.
            record = stack.server.state.accounts.get("dyn1")
            assert record is not None
            assert "kubeconfigContents" not in record.properties
