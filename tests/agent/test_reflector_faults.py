"""Reflectors against kubesim when the edges fail: credentials, a closed client, stalled or
oversize list pages. Nothing of that may end a reflector (or the agent): each is recorded in
``state.last_error`` and retried.
"""

from __future__ import annotations

import functools
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path

import pytest
import trio
import yaml

import kubesim
from agent import (
    AccountConfig,
    AccountWatchStatus,
    KindInfo,
    ListCaps,
    Reflector,
    WatchTarget,
    run_account,
)
from agent.kube._client import open_kube_client
from budget import ByteBudget, EventSender, open_event_channel

from .reflector_harness import Receiver
from .test_reflector import FAST, PODS, open_env, pod, run_env_account

pytestmark = pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")

# An exec credential plugin that fails while a "broken" file sits next to it, and otherwise
# prints kubesim's token already expired (so it runs again for every request).
PLUGIN = """#!{python}
import json, sys
from pathlib import Path
if Path(sys.argv[1]).exists():
    print("the identity provider is down", file=sys.stderr)
    sys.exit(1)
status = {{"token": {token!r}, "expirationTimestamp": "2000-01-01T00:00:00+00:00"}}
print(json.dumps({{"apiVersion": "client.authentication.k8s.io/v1",
                  "kind": "ExecCredential", "status": status}}))
"""


def exec_kubeconfig(tmp_path: Path, server: kubesim.Server, broken: Path) -> Path:
    script = tmp_path / "plugin"
    script.write_text(PLUGIN.format(python=sys.executable, token=server.users["admin"].token))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    exec_config = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": str(script),
        "args": [str(broken)],
        "interactiveMode": "Never",
    }
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "sim", "cluster": {"server": server.url}}],
        "users": [{"name": "u", "user": {"exec": exec_config}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "u"}}],
        "current-context": "sim",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


@asynccontextmanager
async def drained(
    capacity: int = 8 * 2**20, max_pending_entries: int = 1_000_000
) -> AsyncIterator[tuple[Receiver, EventSender, trio.Nursery]]:
    send, receive = open_event_channel(
        ByteBudget(capacity), max_pending_entries=max_pending_entries
    )
    receiver = Receiver()
    async with send, trio.open_nursery() as nursery:
        nursery.start_soon(receiver.drain, receive)
        yield receiver, send, nursery
        nursery.cancel_scope.cancel()


async def test_a_failing_exec_plugin_is_retried_not_fatal(tmp_path: Path) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(bookmark_interval=0.2, controllers=False))
    broken = tmp_path / "broken"
    with trio.fail_after(30):
        async with kubesim.open_server(sim) as server:
            kubeconfig = exec_kubeconfig(tmp_path, server, broken)
            account = AccountConfig(name="acc", kube_config_file=str(kubeconfig), kinds=("pod",))
            async with open_kube_client(account) as client, drained() as (receiver, send, nursery):
                sim.create(pod("a"))
                status: AccountWatchStatus = await nursery.start(
                    lambda task_status: run_account(
                        account,
                        client,
                        send,
                        caps=ListCaps(),
                        settings=FAST,
                        discovery_interval=0.3,
                        task_status=task_status,
                    )
                )
                (state,) = status.reflectors.values()
                await receiver.wait_for(lambda: state.synced)
                # The plugin starts failing; the watch is cut, so the next request needs it.
                broken.write_text("")
                server.faults.drop_watches(after_events=1)
                sim.create(pod("b"))
                await receiver.wait_for(lambda: "exec plugin" in state.last_error)
                await receiver.wait_for(lambda: "exec plugin" in status.discovery_error)
                broken.unlink()
                sim.create(pod("c"))
                await receiver.wait_for(lambda: receiver.names("Pod") == {"a", "b", "c"})
                await receiver.wait_for(lambda: status.discovery_error == "")


async def test_a_client_closed_under_a_running_reflector_does_not_crash(tmp_path: Path) -> None:
    config = kubesim.SimConfig(bookmark_interval=60.0, controllers=False)
    with trio.fail_after(20):
        async with open_env(tmp_path, config) as env:
            env.sim.create(pod("a"))
            # The first watch is cut after its first event (the one created below).
            env.server.faults.drop_watches(after_events=1)
            reflector = env.reflector(WatchTarget(PODS))
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            # A config reload closes the account's client while its reflectors still run;
            # the open watch then ends and the next request finds the client closed.
            await env.transport.aclose()
            env.sim.create(pod("b"))
            await env.receiver.wait_for(lambda: "is closed" in reflector.state.last_error)
            watches = reflector.state.watches
            # Still retrying (with backoff), not crashed: another attempt comes.
            await env.receiver.wait_for(
                lambda: reflector.state.watches > watches, what="another watch attempt"
            )
            assert "is closed" in reflector.state.last_error


async def test_run_account_survives_its_client_being_closed(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(pod("a"))
            account = AccountConfig(name="acc", kinds=("pod",))
            status: AccountWatchStatus = await env.nursery.start(
                functools.partial(run_env_account, env, account, discovery_interval=0.2)
            )
            await env.receiver.wait_for(lambda: all(s.synced for s in status.reflectors.values()))
            await env.transport.aclose()  # rediscovery meets the closed client first
            await env.receiver.wait_for(lambda: "is closed" in status.discovery_error)
            # An observation window, not a wait: rediscovery keeps failing and keeps running (a
            # crash would end the env's nursery and this test with it).
            await trio.sleep(0.5)
            assert "is closed" in status.discovery_error
            assert len(status.reflectors) == 1  # a failed rediscovery keeps the reflectors


CONFIGMAPS = KindInfo("", "v1", "ConfigMap", "configmaps", True)


async def test_a_stalled_list_page_times_out_and_frees_the_list_caps(tmp_path: Path) -> None:
    settings = replace(FAST, inactivity_seconds=0.5)
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(pod("a"))
            env.sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cm", "namespace": "default"},
                }
            )
            env.caps = ListCaps(total_budget=1)  # one list at a time: a stall would block all
            env.server.faults.stall_responses(count=1)  # the first page never comes
            pods = env.reflector(WatchTarget(PODS), settings=settings)
            maps = env.reflector(WatchTarget(CONFIGMAPS), settings=settings)
            await env.nursery.start(pods.run)
            await env.nursery.start(maps.run)
            await env.receiver.wait_for(lambda: pods.state.synced and maps.state.synced)
            assert "not read within 0.5 s" in pods.state.last_error
            assert pods.state.lists == 2
            assert env.receiver.names("Pod") == {"a"}
            assert env.receiver.names("ConfigMap") == {"cm"}


async def test_a_page_over_max_page_bytes_is_asked_for_again_with_a_smaller_limit(
    tmp_path: Path,
) -> None:
    # A page of these pods is ~250 bytes plus ~520 per pod: 1000 bytes hold only one.
    settings = replace(FAST, page_limit=4, max_page_bytes=1000)
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            for i in range(5):
                env.sim.create(pod(f"p{i}"))
            reflector = env.reflector(WatchTarget(PODS), settings=settings)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert env.receiver.names("Pod") == {f"p{i}" for i in range(5)}
            assert reflector.state.lists == 1
            # limit 4 and 2 overflow, then five pages of one object.
            assert env.server.requests.count("list", "pods") == 7


@pytest.mark.parametrize("capacity", [None, 3000])
async def test_groups_larger_than_the_budget_or_the_entry_cap_are_sent_split(
    tmp_path: Path, capacity: int | None
) -> None:
    # A record of these pods is ~600 bytes: a read of many events exceeds both the 3000-byte
    # budget and the 4-entry cap, so the group must go through send_many (which splits it).
    sim = kubesim.Cluster(kubesim.SimConfig(bookmark_interval=60.0, controllers=False))
    with trio.fail_after(20):
        async with kubesim.open_server(sim) as server:
            kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
            account = AccountConfig(name="acc", kube_config_file=str(kubeconfig))
            async with (
                open_kube_client(account) as client,
                drained(3000, max_pending_entries=4) as (receiver, send, nursery),
            ):
                reflector = Reflector(
                    account="acc",
                    target=WatchTarget(PODS),
                    transport=client,
                    send=send.clone(),
                    caps=ListCaps().for_account("acc"),
                    settings=FAST,
                    budget_capacity=capacity,
                )
                await nursery.start(reflector.run)
                await receiver.wait_for(lambda: reflector.state.synced)
                for i in range(20):
                    sim.create(pod(f"p{i}"))
                await receiver.wait_for(lambda: len(receiver.names("Pod")) == 20)
                assert reflector.state.last_error == ""
