"""``kubesvc demo``: kubesim + the server + an agent over mTLS with a JWT, in one trio process.

``run_demo`` builds everything on the fly in a folder (temporary unless given): certificates,
a token, server.yaml and kubesvc.yaml written like an operator would, a kubesim cluster with a
realistic workload and churn, the server on a SQLite file, and the agent. It then shows the
initial sync, prints the REST URL with curl commands, runs a sample deploy through
``POST /kubernetes/ops`` and keeps a live status line until ``duration`` ends or the user
presses Ctrl-C (SIGINT ends the run, not the process: the summary still prints).
"""

from __future__ import annotations

import functools
import math
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import trio

import agent
import kubesim
import server
import server.api
import wire

from ._demo_setup import AGENT_ID, DemoFiles, free_port_or_any, write_agent_config, write_files
from ._demo_view import DeployOutcome, Display, Snapshot, Summary, progress_line, status_line
from ._demo_workload import (
    DEPLOY_NAME,
    DEPLOY_NAMESPACE,
    deploy_request,
    load_workload,
    total_objects,
)

__all__ = ["DemoOptions", "run_demo"]

HOST = "127.0.0.1"
_POLL = 0.25  # seconds between progress/status samples
_SYNC_PATIENCE = 120.0  # give up waiting for the initial sync after this long
_DEPLOY_PATIENCE = 30.0
# The agent's own answer when it was built without an operations executor (agent/_link.py).
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
    handle_sigint: bool = True


@dataclass
class _Run:
    """The running parts the monitor reads."""

    sim: kubesim.Cluster
    churn: kubesim.Churn | None
    running: server.RunningServer
    agent: agent.Agent
    account: str
    started: float


@asynccontextmanager
async def _folder(given: Path | None) -> AsyncIterator[Path]:
    if given is not None:
        await trio.Path(given).mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="kubesvc-demo-") as path:
        yield Path(path)


async def run_demo(options: DemoOptions, display: Display) -> Summary:
    """Run the demo until ``options.duration`` passes (or SIGINT); returns the summary.

    Raises what setting up fails with (a port, a file); later failures of a part end the run.
    """
    async with _folder(options.data_dir) as folder:
        api_port = free_port_or_any(HOST, options.api_port)
        grpc_port = free_port_or_any(HOST, options.grpc_port)
        files = write_files(
            folder, account=options.account, api_port=api_port, grpc_port=grpc_port, host=HOST
        )
        sim = kubesim.Cluster()
        workload = load_workload(sim, pods=options.pods)
        display.line(f"kubesvc demo: data in {folder}")
        for name, wanted, got in (
            ("REST", options.api_port, api_port),
            ("gRPC", options.grpc_port, grpc_port),
        ):
            if wanted and got != wanted:
                display.line(f"  port {wanted} ({name}) is taken: using a free one instead")
        display.line(
            f"  kubesim: {total_objects(sim):,} objects in {len(workload.namespaces)} app "
            f"namespaces + 4 batch namespaces ({workload.deployments} deployments, "
            f"{workload.pods_loaded:,} bulk pods, {workload.widgets} Widget custom objects)"
        )
        async with wire.open_loop(), kubesim.open_server(sim, host=HOST, port=0, tls=True) as kube:
            kube.kubeconfig(files.kubeconfig, user="admin")
            return await _run(options, display, files, sim, kube.url)


async def _run(
    options: DemoOptions, display: Display, files: DemoFiles, sim: kubesim.Cluster, kube_url: str
) -> Summary:
    config = server.load_server_config(files.server_config)
    async with trio.open_nursery() as nursery:
        running: server.RunningServer = await nursery.start(
            functools.partial(server.run_server, config, serve_api=server.api.serve_api)
        )
        write_agent_config(files, account=options.account, grpc_port=running.grpc_port, host=HOST)
        environ = {**os.environ, "POD_NAME": AGENT_ID}
        the_agent: agent.Agent = await nursery.start(
            functools.partial(agent.run_agent, str(files.agent_config), environ=environ)
        )
        churn = None
        if options.churn_rate > 0:
            churn = kubesim.Churn(sim, rate=options.churn_rate)
            await nursery.start(churn.run)
        run = _Run(sim, churn, running, the_agent, options.account, time.monotonic())
        _print_endpoints(display, files, run, kube_url)
        stop = trio.CancelScope(deadline=trio.current_time() + (options.duration or math.inf))
        if options.handle_sigint:
            nursery.start_soon(_stop_on_sigint, stop)
        summary = await _show(display, run, stop)
        nursery.cancel_scope.cancel()
    return summary


async def _stop_on_sigint(stop: trio.CancelScope) -> None:
    # While this receiver is open, Ctrl-C ends the run (and the summary prints) instead of
    # raising KeyboardInterrupt somewhere in the middle of the parts' shutdown.
    with trio.open_signal_receiver(signal.SIGINT) as signals:
        async for _ in signals:
            stop.cancel()
            return


def _print_endpoints(display: Display, files: DemoFiles, run: _Run, kube_url: str) -> None:
    api = f"http://{HOST}:{run.running.api_port}"
    display.lines(
        [
            f"  server:  REST {api}  gRPC {HOST}:{run.running.grpc_port} (mTLS, client cert "
            "required, JWT)  SQLite " + str(Path(run.running.state.config.store.path)),
            f"  agent:   {AGENT_ID}, health http://{HOST}:{run.agent.health_port}/ready, "
            f"config {files.agent_config}",
            f"  kubesim: {kube_url} (kubeconfig {files.kubeconfig})",
            "",
            "try (in another terminal):",
            f"  curl -s {api}/credentials",
            f"  curl -s {api}/armory/agents",
            f"  curl -s '{api}/v1/objects?kind=Pod&limit=5'",
            f"  curl -s {api}/manifests/{run.account}/shop/deployment%20storefront",
            f"  curl -s {api}/openapi.json",
            "",
        ]
    )


async def _cluster_snapshot(run: _Run, rate: float) -> Snapshot:
    store = run.running.state.store
    by_kind: dict[str, int] = {}
    for rtype in {r.key: r for r in run.sim.registry}.values():
        if run.sim.count(rtype.group, rtype.plural):
            count = await store.count_objects(account=run.account, kind=rtype.kind)
            if count:
                by_kind[rtype.kind] = count
    budget = run.agent.budget.statistics()
    return Snapshot(
        elapsed=time.monotonic() - run.started,
        accounts={a.name: str(a.status) for a in run.running.state.accounts.list()},
        objects_by_kind=by_kind,
        stored=await store.count_objects(account=run.account),
        in_cluster=total_objects(run.sim),
        events_per_second=rate,
        budget_in_use=budget.in_use,
        budget_capacity=budget.capacity,
        reconnects=run.agent.link.status.disconnections,
    )


def _agent_synced(run: _Run) -> bool:
    state = run.agent.accounts.accounts.get(run.account)
    watch = state.watch if state is not None else None
    # Synced and nothing waiting for an ack: everything listed has reached the server.
    return (
        watch is not None
        and watch.synced
        and run.agent.link.status.connected
        and run.agent.budget.statistics().in_use == 0
    )


async def _show(display: Display, run: _Run, stop: trio.CancelScope) -> Summary:
    sync_seconds: float | None = None
    deploy: DeployOutcome | None = None
    with stop:
        sync_seconds = await _initial_sync(display, run)
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
    )


async def _initial_sync(display: Display, run: _Run) -> float | None:
    """Show the progress bar until the agent has listed every kind and the server has it all."""
    started = time.monotonic()
    with trio.move_on_after(_SYNC_PATIENCE):
        while True:
            done = _agent_synced(run)
            stored = await run.running.state.store.count_objects(account=run.account)
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


async def _live(display: Display, run: _Run) -> None:
    link = run.agent.link.status
    last_events, last_at = link.events_sent, time.monotonic()
    rate = 0.0
    while True:
        await trio.sleep(1.0)
        now = time.monotonic()
        # An exponential average keeps the rate readable when batches arrive in bursts.
        instant = (link.events_sent - last_events) / max(now - last_at, 1e-6)
        rate = instant if rate == 0.0 else 0.7 * rate + 0.3 * instant
        last_events, last_at = link.events_sent, now
        display.status(status_line(await _cluster_snapshot(run, rate)))


async def _sample_deploy(display: Display, run: _Run) -> DeployOutcome:
    """Deploy a two-replica nginx through the server's Clouddriver API and wait for the task."""
    api = f"http://{HOST}:{run.running.api_port}"
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


async def _deploy(api: str, run: _Run) -> DeployOutcome:
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
