"""The agent keeps the receiver's view right through receiver restarts, config reloads and
forbidden kinds (issue 4's acceptance points that need the whole agent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

import kubesim

from .harness import open_receiver_stack, wait_until
from .receiver import Receiver, object_states


def _configmap(name: str, namespace: str = "default", value: str = "v") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"value": value},
    }


def _sim_configmaps(sim: kubesim.Cluster) -> dict[str, str]:
    items = sim.list("", "v1", "configmaps", "default")
    return {item["metadata"]["name"]: item["data"]["value"] for item in items}


def _received_configmaps(receiver: Receiver, account: str = "k1") -> dict[str, str]:
    return {
        key[3]: json.loads(raw)["data"]["value"]
        for key, raw in object_states(receiver, account).items()
        if key[1] == "ConfigMap" and key[2] == "default"
    }


async def test_receiver_restart_mid_stream_loses_nothing(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    for index in range(50):
        sim.create(_configmap(f"cm-{index}"))
    receiver = Receiver()
    with trio.fail_after(60):
        async with open_receiver_stack(tmp_path, receiver, sim=sim) as stack:

            async def caught_up() -> bool:
                return _received_configmaps(receiver) == _sim_configmaps(sim)

            await wait_until(caught_up)
            stack.stop_receiver()
            await wait_until(
                lambda: not stack.agent.link.status.connected, what="the agent saw the cut"
            )
            # Changes while nobody listens: the agent must deliver them after reconnecting.
            for index in range(50, 80):
                sim.create(_configmap(f"cm-{index}"))
            for index in range(10):
                sim.delete("", "v1", "configmaps", "default", f"cm-{index}")
            cm = sim.get("", "v1", "configmaps", "default", "cm-20")
            cm["data"] = {"value": "changed"}
            sim.update(cm)
            sessions_before = receiver.sessions
            await stack.start_receiver()
            await wait_until(caught_up)
            assert receiver.sessions > sessions_before
            assert stack.agent.link.status.disconnections >= 1


async def test_live_reload_adds_changes_and_removes_accounts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sim = kubesim.Cluster()
    sim.create(_configmap("one"))
    receiver = Receiver()
    with trio.fail_after(60):
        async with open_receiver_stack(tmp_path, receiver, sim=sim) as stack:
            kubeconfig = str(stack.kubeconfig)

            async def has(account: str) -> bool:
                return "one" in _received_configmaps(receiver, account)

            await wait_until(lambda: has("k1"))

            # Add k2: it starts and registers without touching k1.
            stack.write_config(
                [
                    {"name": "k1", "kubeConfigFile": kubeconfig},
                    {"name": "k2", "kubeConfigFile": kubeconfig},
                ]
            )
            await wait_until(lambda: has("k2"))

            # An invalid file: reported, and the running config (k1 + k2) keeps going.
            stack.config_path.write_text("kubernetes:\n  accounts: {not: a list}\n")
            await wait_until(
                lambda: "is invalid, keeping the running config" in caplog.text,
                what="the invalid config is reported",
            )
            sim.create(_configmap("two"))

            async def both_have_two() -> bool:
                return all("two" in _received_configmaps(receiver, name) for name in ("k1", "k2"))

            await wait_until(both_have_two)
            assert set(stack.agent.accounts.accounts) == {"k1", "k2"}

            # Change k2 (now only watches secrets), remove k1.
            stack.write_config([{"name": "k2", "kubeConfigFile": kubeconfig, "kinds": ["secret"]}])

            async def reloaded() -> bool:
                accounts = stack.agent.accounts.accounts
                return set(accounts) == {"k2"} and accounts["k2"].config.kinds == ("secret",)

            await wait_until(reloaded)
            assert "k1" not in stack.agent.link.status.roles


async def test_a_forbidden_kind_is_reported_and_the_others_flow(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    sim.create(_configmap("visible"))
    receiver = Receiver()
    with trio.fail_after(60):
        async with open_receiver_stack(tmp_path, receiver, sim=sim) as stack:
            # A second account whose user may not touch ConfigMaps at all.
            stack.kube.add_user("limited", grants={"*": kubesim.READ_VERBS, "configmaps": ()})
            limited = tmp_path / "limited.kubeconfig"
            stack.kube.kubeconfig(limited, user="limited")
            stack.write_config(
                [
                    {"name": "k1", "kubeConfigFile": str(stack.kubeconfig)},
                    {
                        "name": "limited",
                        "kubeConfigFile": str(limited),
                        "kinds": ["configmap", "secret", "namespace"],
                    },
                ]
            )

            async def limited_unavailable() -> bool:
                state = stack.agent.accounts.accounts.get("limited")
                if state is None or state.watch is None:
                    return False
                return any(
                    target.kind.kind == "ConfigMap" and not reflector.available
                    for target, reflector in state.watch.reflectors.items()
                )

            await wait_until(limited_unavailable)
            sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "late"}})

            async def namespaces_flow() -> bool:
                names = {
                    key[3] for key in object_states(receiver, "limited") if key[1] == "Namespace"
                }
                return "late" in names

            await wait_until(namespaces_flow)
            assert not _received_configmaps(receiver, "limited")
