"""The demo once its parts run, in either layout (one in-process server on SQLite, or
several server processes on PostgreSQL): the initial sync's progress bar, the sample deploy
through ``POST /kubernetes/ops``, the live status line and the summary.

It reads the server's cache from the store itself (the one the server writes, or the
PostgreSQL every replica shares) and the agent from its in-process object; with several
replicas a ``ReplicaMonitor`` adds what the REST API says of them.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

import agent
import kubesim
from server.store import Store

from ._demo_monitor import ReplicaMonitor
from ._demo_view import DeployOutcome, Display, Snapshot, Summary, progress_line, status_line
from ._demo_workload import DEPLOY_NAME, DEPLOY_NAMESPACE, deploy_request, total_objects

__all__ = ["HOST", "DemoOptions", "Run", "show"]

HOST = "127.0.0.1"
_POLL = 0.25  # seconds between progress/status samples
_SYNC_PATIENCE = 120.0  # give up waiting for the initial sync after this long
_DEPLOY_PATIENCE = 30.0
_PRIMARY_PATIENCE = 15.0  # several replicas: wait this long for the PRIMARY to show
# The agent's own answer when it was built without an operations executor (agent/link/_link.py).
_NO_EXECUTOR = "UNSUPPORTED"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    duration: float | None = None  # None: until Ctrl-C
    data_dir: Path | None = None
    api_port: int = 7002
    grpc_port: int = 9091
    pods: int = 1000
    churn_rate: float = 20.0
    account: str = "demo"
    handle_sigint: bool = True  # SIGINT and SIGTERM end the run (the summary still prints)
    replicas: int = 1  # server replicas: 1 in this process, more as processes on PostgreSQL
    store_url: str = ""  # "" : SQLite in the folder (1 replica) or a PostgreSQL started here
    # With several replicas: their heartbeat and lease TTL (short, so a killed replica's
    # PRIMARY moves within seconds; production's defaults are 2 s and 10 s).
    heartbeat_ms: int = 1000
    lease_ttl_ms: int = 5000


@dataclass
class Run:
    """The running parts the monitor reads."""

    sim: kubesim.Cluster
    churn: kubesim.Churn | None
    agent: agent.Agent
    account: str
    started: float
    store: Store  # the server's cache
    accounts: Callable[[], Awaitable[Mapping[str, str]]]  # name -> the server's state of it
    api: str  # the REST API the sample deploy is posted to (replicas: the PRIMARY's)
    replicas: ReplicaMonitor | None = None


async def _cluster_snapshot(run: Run, rate: float) -> Snapshot:
    store = run.store
    by_kind: dict[str, int] = {}
    for rtype in {r.key: r for r in run.sim.registry}.values():
        if run.sim.count(rtype.group, rtype.plural):
            count = await store.count_objects(account=run.account, kind=rtype.kind)
            if count:
                by_kind[rtype.kind] = count
    budget = run.agent.budget.statistics()
    return Snapshot(
        elapsed=time.monotonic() - run.started,
        accounts=await run.accounts(),
        objects_by_kind=by_kind,
        stored=await store.count_objects(account=run.account),
        in_cluster=total_objects(run.sim),
        events_per_second=rate,
        budget_in_use=budget.in_use,
        budget_capacity=budget.capacity,
        reconnects=run.agent.link.status.disconnections,
        replicas=run.replicas.segment() if run.replicas is not None else "",
    )


def _agent_synced(run: Run) -> bool:
    state = run.agent.accounts.accounts.get(run.account)
    watch = state.watch if state is not None else None
    # Synced and nothing waiting for an ack: everything listed has reached the server.
    return (
        watch is not None
        and watch.synced
        and run.agent.link.status.connected
        and run.agent.budget.statistics().in_use == 0
    )


async def show(display: Display, run: Run, stop: trio.CancelScope) -> Summary:
    """The sync, the deploy and the live status until ``stop`` is cancelled; the summary."""
    sync_seconds: float | None = None
    deploy: DeployOutcome | None = None
    with stop:
        sync_seconds = await _initial_sync(display, run)
        if run.replicas is not None:
            with trio.move_on_after(_PRIMARY_PATIENCE):
                while True:  # the account's row shows its PRIMARY once the claim is stored
                    await run.replicas.refresh()
                    if run.replicas.primary is not None:
                        break
                    await trio.sleep(_POLL)
            display.lines(run.replicas.events())  # a replica that ended meanwhile
            display.lines(run.replicas.overview())
        if sync_seconds is not None:
            deploy = await _sample_deploy(display, run)
        display.line("live status (Ctrl-C to stop):")
        await _live(display, run)
    display.end_status()
    with trio.CancelScope(shield=True), trio.move_on_after(5):
        snapshot = await _cluster_snapshot(run, 0.0)
    link = run.agent.link.status
    churn = run.churn.statistics() if run.churn else None
    return Summary(
        synced=sync_seconds is not None,
        sync_seconds=sync_seconds,
        stored=snapshot.stored,
        in_cluster=snapshot.in_cluster,
        events_streamed=link.events_sent,
        bytes_streamed=link.bytes_sent,
        run_seconds=time.monotonic() - run.started,
        reconnects=link.disconnections,
        churn_operations=(churn.created + churn.updated + churn.deleted) if churn else 0,
        deploy=deploy,
        objects_by_kind=snapshot.objects_by_kind,
        replica_events=tuple(run.replicas.history) if run.replicas is not None else (),
    )


async def _initial_sync(display: Display, run: Run) -> float | None:
    """Show the progress bar until the agent has listed every kind and the server has it all."""
    started = time.monotonic()
    with trio.move_on_after(_SYNC_PATIENCE):
        while True:
            done = _agent_synced(run)
            stored = await run.store.count_objects(account=run.account)
            elapsed = time.monotonic() - started
            display.status(
                progress_line(stored, total_objects(run.sim), elapsed, done=done), force=done
            )
            if done:
                display.end_status()
                return elapsed
            await trio.sleep(_POLL)
    display.end_status()
    display.line(f"initial sync did not finish in {_SYNC_PATIENCE:.0f}s")
    return None


async def _live(display: Display, run: Run) -> None:
    link = run.agent.link.status
    last_events, last_at = link.events_sent, time.monotonic()
    rate = 0.0
    while True:
        await trio.sleep(1.0)
        if run.replicas is not None:
            await run.replicas.refresh()
            for event in run.replicas.events():
                display.line(event)
        now = time.monotonic()
        # An exponential average keeps the rate readable when batches arrive in bursts.
        instant = (link.events_sent - last_events) / max(now - last_at, 1e-6)
        rate = instant if rate == 0.0 else 0.7 * rate + 0.3 * instant
        last_events, last_at = link.events_sent, now
        display.status(status_line(await _cluster_snapshot(run, rate)))


async def _sample_deploy(display: Display, run: Run) -> DeployOutcome:
    """Deploy a two-replica nginx through the server's Clouddriver API and wait for the task."""
    api = run.api
    if run.replicas is not None and run.replicas.primary is not None:
        api = run.replicas.primary.api  # the replica the agent's stream is on
    display.line(
        f"sample deploy: POST {api}/kubernetes/ops  (deployManifest "
        f"{DEPLOY_NAMESPACE}/{DEPLOY_NAME})"
    )
    outcome = await _deploy(api, run)
    if outcome.task_id:
        display.line(f"  curl -s {api}/task/{outcome.task_id}")
    for line in outcome.history:
        display.line(f"  | {line}")
    display.line(f"  -> {outcome.status}: {outcome.message}")
    display.line("")
    return outcome


async def _deploy(api: str, run: Run) -> DeployOutcome:
    try:
        async with httpx.AsyncClient(base_url=api, timeout=10.0) as client:
            reply = await client.post("/kubernetes/ops", json=deploy_request(run.account))
            if reply.status_code == 503:
                return DeployOutcome("unavailable", f"the server runs no operations: {reply.text}")
            if reply.status_code != 200:
                return DeployOutcome("failed", f"HTTP {reply.status_code}: {reply.text[:300]}")
            task_id = str(reply.json()["id"])
            task: dict[str, Any] = {}
            with trio.move_on_after(_DEPLOY_PATIENCE):
                while not (task.get("status") or {}).get("completed"):
                    await trio.sleep(0.2)
                    task = (await client.get(f"/task/{task_id}")).json()
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        return DeployOutcome("failed", f"talking to the REST API failed: {exc!r}")
    history = tuple(str(h.get("status", "")) for h in task.get("history", []))
    status = task.get("status") or {}
    if not status.get("completed"):
        return DeployOutcome("failed", f"no result in {_DEPLOY_PATIENCE:.0f}s", task_id, history)
    if not status.get("failed"):
        try:
            run.sim.get("apps", "v1", "deployments", DEPLOY_NAMESPACE, DEPLOY_NAME)
            found = True
        except kubesim.ApiError:
            found = False
        where = "now in the cluster" if found else "reported deployed"
        return DeployOutcome(
            "succeeded", f"deployment {DEPLOY_NAMESPACE}/{DEPLOY_NAME} {where}", task_id, history
        )
    errors = [o for o in task.get("resultObjects", []) if o.get("type") == "EXCEPTION"]
    message = str(errors[0].get("message")) if errors else (history[-1] if history else "")
    if _NO_EXECUTOR in " ".join(history) or "does not run" in message:
        return DeployOutcome(
            "unavailable",
            f"operations are not available in this agent yet (it answered: {message})",
            task_id,
            history,
        )
    return DeployOutcome("failed", message, task_id, history)
