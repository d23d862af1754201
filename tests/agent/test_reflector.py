"""Reflectors against kubesim on loopback: sync, resume, relist, forbidden kinds, Secrets.

Every test drains the real budget channel with a Receiver that applies records the way the
server does, and asserts on what it converged to and on the records themselves. These tests
use real time (short intervals): the HTTP edge is a real socket, which a jumping virtual
clock would race.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import kubesim
from agent import (
    AccountConfig,
    AccountWatchStatus,
    KindInfo,
    ListCaps,
    Reflector,
    ReflectorSettings,
    WatchTarget,
    run_account,
)
from agent.kube._client import KubeClient, open_kube_client
from budget import ByteBudget, EventSender, open_event_channel
from wire import EventType

from .._widgets import widget_crd
from .reflector_harness import Receiver

# A watch is abandoned mid-body by design (410 in the stream, inactivity, cancellation); httpx's
# chain of async generators under the response is then collected unexhausted, which trio
# reports as a ResourceWarning even though the response and its connection were closed.
pytestmark = pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")

FAST = ReflectorSettings(
    streaming_list=False,  # these tests count list calls; the streaming list has its own test
    page_limit=3,
    watch_timeout_seconds=(30, 30),
    inactivity_seconds=10.0,
    backoff_base=0.05,
    backoff_max=0.2,
    unavailable_retry_seconds=0.5,
)
PODS = KindInfo("", "v1", "Pod", "pods", True)
SECRET_VALUE = "dG9wLXNlY3JldC12YWx1ZS0xMjM0NQ=="


@dataclass
class Env:
    sim: kubesim.Cluster
    server: Any
    transport: KubeClient
    receiver: Receiver
    send: EventSender
    nursery: trio.Nursery
    caps: ListCaps

    def reflector(
        self,
        target: WatchTarget,
        *,
        resume_from: str | None = None,
        settings: ReflectorSettings = FAST,
    ) -> Reflector:
        return Reflector(
            account="acc",
            target=target,
            transport=self.transport,
            send=self.send.clone(),
            caps=self.caps.for_account("acc"),
            settings=settings,
            resume_from=resume_from,
        )


@asynccontextmanager
async def open_env(
    tmp_path: Path,
    config: kubesim.SimConfig | None = None,
    grants: dict[str, Any] | None = None,
    *,
    tls: bool = False,
    clock: trio.testing.MockClock | None = None,
) -> AsyncIterator[Env]:
    """kubesim on loopback (over TLS, HTTP/2, if ``tls``), the agent's real Kubernetes
    client, a budget channel drained. With an autojump ``clock``, time jumps only once the
    client is open: opening it reads the kubeconfig in a worker thread, which trio cannot
    see, so a jump could skip it."""
    if clock is not None:
        clock.autojump_threshold = math.inf
    sim = kubesim.Cluster(config or kubesim.SimConfig(bookmark_interval=0.2, controllers=False))
    async with kubesim.open_server(sim, tls=tls) as server:
        user = "agent" if grants else "admin"
        if grants:
            server.add_user(user, grants)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig", user=user)
        account = AccountConfig(name="acc", kube_config_file=str(kubeconfig))
        async with open_kube_client(account) as client:
            if clock is not None:
                clock.autojump_threshold = 0
            send, receive = open_event_channel(ByteBudget(8 * 2**20))
            receiver = Receiver()
            async with send, trio.open_nursery() as nursery:
                nursery.start_soon(receiver.drain, receive)
                yield Env(sim, server, client, receiver, send, nursery, ListCaps())
                nursery.cancel_scope.cancel()


def pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


def live_names(sim: kubesim.Cluster, plural: str, group: str = "", version: str = "v1") -> set[str]:
    return {o["metadata"]["name"] for o in sim.list(group, version, plural)}


async def converge(env: Env, kind: str, expected: Callable[[], set[str]]) -> None:
    await env.receiver.wait_for(lambda: env.receiver.names(kind) == expected())


async def test_full_sync_of_several_kinds_then_changes_flow(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            for i in range(7):
                env.sim.create(pod(f"p{i}", "default" if i % 2 else "kube-system"))
            env.sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "cm", "namespace": "default"},
                    "data": {"a": "b"},
                }
            )
            account = AccountConfig(name="acc", kinds=("pod", "ConfigMap", "namespace"))
            status: AccountWatchStatus = await env.nursery.start(run_env_account, env, account)
            await env.receiver.wait_for(lambda: status.synced)
            assert {t.kind.kind for t in status.reflectors} == {"Pod", "ConfigMap", "Namespace"}
            assert env.receiver.names("Pod") == live_names(env.sim, "pods")
            assert env.receiver.names("ConfigMap") == {"cm"} | live_names(env.sim, "configmaps")
            assert env.receiver.names("Namespace") == live_names(env.sim, "namespaces")
            # Every full listing is bracketed; pods came in pages of 3 inside one bracket.
            assert env.receiver.count(EventType.SYNC_BEGIN, "Pod") == 1
            assert env.receiver.count(EventType.SYNC_END, "Pod") == 1
            body = json.loads(env.receiver.objects[("v1", "Pod", "default", "p1")].object)
            assert body["kind"] == "Pod"
            assert body["apiVersion"] == "v1"
            assert "managedFields" not in body["metadata"]

            env.sim.create(pod("late"))
            env.sim.delete("", "v1", "pods", "kube-system", "p0")
            await converge(env, "Pod", lambda: live_names(env.sim, "pods"))
            assert "late" in env.receiver.names("Pod")


async def run_env_account(
    env: Env,
    account: AccountConfig,
    *,
    discovery_interval: float = 0.5,
    task_status: trio.TaskStatus[AccountWatchStatus],
) -> None:
    """``run_account`` on the env's client and channel (for ``env.nursery.start``)."""
    await run_account(
        account,
        env.transport,
        env.send,
        caps=env.caps,
        settings=FAST,
        discovery_interval=discovery_interval,
        task_status=task_status,
    )


async def test_a_dropped_watch_resumes_without_a_list(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(pod("a"))
            # Faults apply to the next watch request: the reflector's first watch is cut
            # after one event.
            env.server.faults.drop_watches(after_events=1)
            reflector = env.reflector(WatchTarget(PODS))
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            for name in ("b", "c", "d"):
                env.sim.create(pod(name))
            await converge(env, "Pod", lambda: live_names(env.sim, "pods"))
            assert reflector.state.watches >= 2
            assert env.server.requests.count("watch", "pods") >= 2
            assert env.server.requests.count("list", "pods") == 1
            assert reflector.state.relists == 0


async def test_410_mid_watch_relists_and_converges_with_deletes_in_the_gap(tmp_path: Path) -> None:
    config = kubesim.SimConfig(bookmark_interval=0.2, controllers=False, watch_history=5)
    with trio.fail_after(30):
        async with open_env(tmp_path, config) as env:
            for i in range(4):
                env.sim.create(pod(f"old{i}"))
            settings = ReflectorSettings(
                streaming_list=False,
                page_limit=2,
                watch_timeout_seconds=(1, 1),
                inactivity_seconds=10,
                backoff_base=0.05,
                backoff_max=0.2,
            )
            reflector = env.reflector(WatchTarget(PODS), settings=settings)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            # The next watch stalls; meanwhile history moves on by more than the ring holds.
            watches = env.server.requests.count("watch", "pods")
            env.server.faults.stall_watches(after_events=0, seconds=1.5)
            # The current watch ends (its timeout is 1 s) and the next one, stalled, begins.
            await env.receiver.wait_for(
                lambda: env.server.requests.count("watch", "pods") > watches,
                what="the stalled watch began",
            )
            for i in range(4):
                env.sim.delete("", "v1", "pods", "default", f"old{i}")
            for i in range(8):
                env.sim.create(pod(f"new{i}"))
            await env.receiver.wait_for(lambda: reflector.state.relists >= 1)
            await converge(env, "Pod", lambda: live_names(env.sim, "pods"))
            assert not env.receiver.names("Pod") & {f"old{i}" for i in range(4)}
            assert env.receiver.count(EventType.SYNC_BEGIN, "Pod") >= 2
            assert env.server.requests.count("list", "pods") >= 2


async def test_a_resume_point_is_used_and_an_expired_one_relists(tmp_path: Path) -> None:
    config = kubesim.SimConfig(bookmark_interval=0.2, controllers=False, watch_history=3)
    with trio.fail_after(20):
        async with open_env(tmp_path, config) as env:
            env.sim.create(pod("a"))
            fresh = str(env.sim.resource_version)
            resumed = env.reflector(WatchTarget(PODS), resume_from=fresh)
            async with trio.open_nursery() as first:
                await first.start(resumed.run)
                env.sim.create(pod("b"))
                await env.receiver.wait_for(lambda: "b" in env.receiver.names("Pod"))
                assert env.server.requests.count("list", "pods") == 0
                first.cancel_scope.cancel()

            stale = "1"
            for i in range(6):
                env.sim.create(pod(f"c{i}"))
            expired = env.reflector(WatchTarget(PODS, "kube-system"), resume_from=stale)
            await env.nursery.start(expired.run)
            await env.receiver.wait_for(lambda: expired.state.synced)
            assert expired.state.relists == 1
            assert env.server.requests.count("list", "pods") == 1


async def test_a_resumed_watch_has_its_version_stored_again_at_once(tmp_path: Path) -> None:
    """The API server accepted the resume point: a BOOKMARK of it goes to the server before
    anything else, so the point's age counts from now, not from the last bookmark of an
    earlier session (sessions shorter than the bookmark interval aged every point past
    maxResumableResourceAgeMs and every account relisted; bench_agents, starved)."""
    config = kubesim.SimConfig(bookmark_interval=3600.0, controllers=False)
    with trio.fail_after(20):
        async with open_env(tmp_path, config) as env:
            env.sim.create(pod("a"))
            point = str(env.sim.resource_version)
            resumed = env.reflector(WatchTarget(PODS), resume_from=point)
            await env.nursery.start(resumed.run)
            await env.receiver.wait_for(lambda: env.receiver.count(EventType.BOOKMARK) >= 1)
            first = env.receiver.records[0]
            assert (first.type, first.kind, first.resource_version) == (
                EventType.BOOKMARK,
                "Pod",
                point,
            )
            assert env.server.requests.count("list", "pods") == 0


async def test_a_resume_point_from_the_future_relists(tmp_path: Path) -> None:
    # A cluster restored from a backup (or a restarted simulator) is behind the version the
    # server stored: the API server answers 504 "Too large resource version", and waiting
    # never helps, so the reflector lists again.
    config = kubesim.SimConfig(bookmark_interval=0.2, controllers=False)
    with trio.fail_after(20):
        async with open_env(tmp_path, config) as env:
            env.sim.create(pod("a"))
            future = str(env.sim.resource_version + 1_000_000)
            reflector = env.reflector(WatchTarget(PODS), resume_from=future)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert reflector.state.relists >= 1
            assert "a" in env.receiver.names("Pod")


async def test_a_forbidden_kind_is_reported_while_others_flow(tmp_path: Path) -> None:
    grants = {"*": kubesim.ALL_VERBS, "configmaps": ()}
    with trio.fail_after(20):
        async with open_env(tmp_path, grants=grants) as env:
            account = AccountConfig(name="acc", kinds=("pod", "configmap"))
            status: AccountWatchStatus = await env.nursery.start(run_env_account, env, account)
            await env.receiver.wait_for(lambda: status.synced)
            states = {t.kind.kind: s for t, s in status.reflectors.items()}
            assert not states["ConfigMap"].available
            assert states["ConfigMap"].reason.startswith("403")
            assert states["Pod"].available
            env.sim.create(pod("after"))
            await env.receiver.wait_for(lambda: "after" in env.receiver.names("Pod"))


async def test_secrets_never_carry_their_data(tmp_path: Path) -> None:
    applied = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db"},
        "data": {"password": SECRET_VALUE},
    }
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "db",
            "namespace": "default",
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": json.dumps(applied)
            },
        },
        "data": {"password": SECRET_VALUE},
        "stringData": {"token": "plain-text-secret"},
    }
    secrets = KindInfo("", "v1", "Secret", "secrets", True)
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(secret)
            reflector = env.reflector(WatchTarget(secrets))
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: "db" in env.receiver.names("Secret"))
            changed = dict(secret, metadata=dict(secret["metadata"], labels={"v": "2"}))
            env.sim.update(changed)
            await env.receiver.wait_for(lambda: env.receiver.count(EventType.MODIFIED) >= 1)
            records = [r for r in env.receiver.records if r.kind == "Secret" and r.object]
            assert len(records) >= 2
            for record in records:
                for value in (SECRET_VALUE.encode(), b"plain-text-secret", b"password"):
                    assert value not in record.object
                body = json.loads(record.object)
                assert (body["apiVersion"], body["kind"]) == ("v1", "Secret")


async def test_bookmarks_advance_the_resume_point(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(pod("a"))
            reflector = env.reflector(WatchTarget(PODS))
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            listed = reflector.resource_version
            env.sim.create(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "bump", "namespace": "default"},
                }
            )
            target_rv = str(env.sim.resource_version)
            # The tracker moves when the bookmark enters the channel; the receiver sees it a
            # moment later (on a loaded machine, visibly later): wait for both.
            await env.receiver.wait_for(
                lambda: (
                    reflector.resource_version == target_rv
                    and env.receiver.count(EventType.BOOKMARK, "Pod") >= 1
                )
            )
            assert listed != target_rv


async def test_the_inactivity_deadline_drops_a_stalled_watch(tmp_path: Path) -> None:
    settings = ReflectorSettings(
        streaming_list=False,
        watch_timeout_seconds=(30, 30),
        inactivity_seconds=0.5,
        backoff_base=0.05,
        backoff_max=0.2,
    )
    config = kubesim.SimConfig(bookmark_interval=60.0, controllers=False)
    with trio.fail_after(20):
        async with open_env(tmp_path, config) as env:
            env.sim.create(pod("a"))
            env.server.faults.stall_watches(after_events=0)
            reflector = env.reflector(WatchTarget(PODS), settings=settings)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            # The watch sends "b", then goes silent with its connection open.
            env.sim.create(pod("b"))
            await env.receiver.wait_for(lambda: "b" in env.receiver.names("Pod"))
            await env.receiver.wait_for(lambda: reflector.state.stalls >= 1)
            env.sim.create(pod("c"))
            await env.receiver.wait_for(lambda: "c" in env.receiver.names("Pod"))
            assert reflector.state.lists == 1
            assert env.server.requests.count("list", "pods") == 1


async def test_rediscovery_starts_new_crds_and_stops_removed_ones(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            account = AccountConfig(name="acc", kinds=("pod", "widget"))
            status: AccountWatchStatus = await env.nursery.start(run_env_account, env, account)
            assert {t.kind.kind for t in status.reflectors} == {"Pod"}
            env.sim.create(widget_crd())
            env.sim.create(
                {
                    "apiVersion": "example.com/v1",
                    "kind": "Widget",
                    "metadata": {"name": "w1", "namespace": "default"},
                }
            )
            await env.receiver.wait_for(lambda: "w1" in env.receiver.names("Widget"))
            env.sim.delete(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
                None,
                "widgets.example.com",
            )
            await env.receiver.wait_for(lambda: {t.kind.kind for t in status.reflectors} == {"Pod"})


async def test_streaming_list_brackets_its_initial_events(tmp_path: Path) -> None:
    settings = ReflectorSettings(
        streaming_list=True, watch_timeout_seconds=(30, 30), backoff_base=0.05, backoff_max=0.2
    )
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            for i in range(5):
                env.sim.create(pod(f"s{i}"))
            reflector = env.reflector(WatchTarget(PODS, "default"), settings=settings)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert reflector.state.streaming
            assert env.receiver.names("Pod") == live_names(env.sim, "pods")
            assert env.server.requests.count("list", "pods") == 0
            kinds = [r.type for r in env.receiver.records if r.kind == "Pod"]
            assert kinds[0] == EventType.SYNC_BEGIN
            assert kinds[1:6] == [EventType.ADDED] * 5
            assert kinds[6] == EventType.SYNC_END
            env.sim.create(pod("later"))
            await env.receiver.wait_for(lambda: "later" in env.receiver.names("Pod"))
            assert env.server.requests.count("list", "pods") == 0


async def test_a_refused_streaming_list_falls_back_to_a_paged_list(tmp_path: Path) -> None:
    settings = ReflectorSettings(
        streaming_list=True,
        page_limit=2,
        watch_timeout_seconds=(30, 30),
        backoff_base=0.05,
        backoff_max=0.2,
    )
    config = kubesim.SimConfig(bookmark_interval=0.2, controllers=False, watch_list=False)
    with trio.fail_after(20):
        async with open_env(tmp_path, config) as env:
            for i in range(5):
                env.sim.create(pod(f"p{i}"))
            reflector = env.reflector(WatchTarget(PODS, "default"), settings=settings)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert not reflector.state.streaming
            assert env.receiver.names("Pod") == live_names(env.sim, "pods")
            assert env.server.requests.count("list", "pods") == 3  # pages of 2
            kinds = [r.type for r in env.receiver.records if r.kind == "Pod"]
            assert kinds == [EventType.SYNC_BEGIN, *[EventType.ADDED] * 5, EventType.SYNC_END]
            env.sim.create(pod("later"))
            await env.receiver.wait_for(lambda: "later" in env.receiver.names("Pod"))
            assert env.server.requests.count("list", "pods") == 3  # watched, not listed again


async def test_throttling_backs_off_for_retry_after_then_lists(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(pod("a"))
            env.server.faults.fail_next(2, status=429, retry_after=1, verb="list")
            # Retry-After is honoured up to the backoff's cap (here 2 s, not FAST's 0.2 s).
            reflector = env.reflector(WatchTarget(PODS), settings=replace(FAST, backoff_max=2.0))
            started = trio.current_time()
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert trio.current_time() - started >= 2.0
            assert reflector.state.available
            assert env.receiver.names("Pod") == {"a"}
            assert "429" in reflector.state.last_error
