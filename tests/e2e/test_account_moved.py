"""An agent re-pointed at another cluster under the same account name does not inherit the
first cluster's cache and resume points: the account stays bound, the claim is rejected."""

from __future__ import annotations

from pathlib import Path

import trio

import kubesim

from .harness import open_stack, stored_objects, wait_until


async def test_a_moved_account_is_rejected_and_the_cache_kept(tmp_path: Path) -> None:
    first = kubesim.Cluster()
    first.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "from-first", "namespace": "default"},
            "data": {},
        }
    )
    second = kubesim.Cluster()
    second.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "from-second", "namespace": "default"},
            "data": {},
        }
    )
    with trio.fail_after(60):
        async with (
            open_stack(tmp_path, sim=first) as stack,
            kubesim.open_server(second, host="127.0.0.1", port=0) as other,
        ):

            async def has_first() -> bool:
                objects = await stored_objects(stack, "k1")
                return ("v1", "ConfigMap", "default", "from-first") in objects

            await wait_until(has_first)
            other_kubeconfig = tmp_path / "other.kubeconfig"
            other.kubeconfig(other_kubeconfig, user="admin")
            stack.write_config([{"name": "k1", "kubeConfigFile": str(other_kubeconfig)}])

            async def rejected() -> bool:
                return stack.agent.link.status.roles.get("k1") == "REJECTED"

            await wait_until(rejected)
            assert "another cluster" in stack.agent.link.status.role_reasons.get("k1", "")
            objects = await stored_objects(stack, "k1")
            assert ("v1", "ConfigMap", "default", "from-first") in objects
            assert ("v1", "ConfigMap", "default", "from-second") not in objects
