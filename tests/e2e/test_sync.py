"""Agent -> server over the real gRPC stream, against kubesim: sync, changes, deletes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

import kubesim

from .harness import open_stack, stored_objects, wait_until


def _configmap(name: str, namespace: str = "default", **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": dict(data),
    }


async def test_initial_sync_then_changes_arrive(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    for index in range(20):
        sim.create(_configmap(f"cm-{index}", value=str(index)))
    with trio.fail_after(20):
        async with open_stack(tmp_path, sim=sim) as stack:

            async def synced() -> bool:
                objects = await stored_objects(stack, "k1")
                return (
                    sum(1 for key in objects if key[1] == "ConfigMap" and key[3].startswith("cm-"))
                    == 20
                )

            await wait_until(synced)

            sim.create(_configmap("late", value="x"))
            cm = sim.get("", "v1", "configmaps", "default", "cm-3")
            cm["data"] = {"value": "changed"}
            sim.update(cm)
            sim.delete("", "v1", "configmaps", "default", "cm-4")

            async def changed() -> bool:
                objects = await stored_objects(stack, "k1")
                three = objects.get(("v1", "ConfigMap", "default", "cm-3"))
                return (
                    ("v1", "ConfigMap", "default", "late") in objects
                    and ("v1", "ConfigMap", "default", "cm-4") not in objects
                    and three is not None
                    and three["data"] == {"value": "changed"}
                )

            await wait_until(changed)
