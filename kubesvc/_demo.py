"""``kubesvc demo``: kubesim + the server + an agent over mTLS with a JWT.

``run_demo`` builds everything on the fly in a folder (temporary unless given): certificates,
a token, the servers' and the agent's config files written like an operator would, a kubesim
cluster with a realistic workload and churn, the server(s) and the agent. It then shows the
initial sync, prints the REST URL with curl commands, runs a sample deploy through
``POST /kubernetes/ops`` and keeps a live status line until ``duration`` ends or the user
presses Ctrl-C or sends SIGTERM (the signal ends the run, not the process: the summary still
prints).

One replica (the default) runs everything in one trio process, the server on a SQLite file
(or ``--store``). Several (``_demo_multi``) run the servers as processes on PostgreSQL.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import trio

import agent
import kubesim
import server
import server.api
import wire
from server.store import open_store

from ._cmd_server import with_store_url
from ._demo_multi import forget_earlier_demo, run_replicas_demo
from ._demo_run import HOST, DemoOptions, Run, show
from ._demo_setup import (
    AGENT_ID,
    DemoFiles,
    free_port_or_any,
    write_agent_config,
    write_files,
    write_trust,
)
from ._demo_view import Display, Summary
from ._demo_workload import load_workload, total_objects

__all__ = ["DemoOptions", "run_demo"]


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
        if options.replicas > 1:
            display.line(f"kubesvc demo: data in {folder}")
            files = write_trust(folder, account=options.account, host=HOST)
            return await run_replicas_demo(options, display, folder, files)
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
    if options.store_url:
        config = with_store_url(config, options.store_url)
    async with open_store(config.store) as store:
        # SQLite in the demo's folder is the demo's alone; PostgreSQL may be shared.
        shared = config.store.location.backend == "postgresql"
        note = await forget_earlier_demo(store, options.account, shared=shared)
    if note:
        display.line(note)
    async with trio.open_nursery() as nursery:
        running: server.RunningServer = await nursery.start(
            functools.partial(server.run_server, config, serve_api=server.api.serve_api)
        )
        write_agent_config(
            files, account=options.account, addresses=[f"{HOST}:{running.grpc_port}"]
        )
        environ = {**os.environ, "POD_NAME": AGENT_ID}
        the_agent: agent.Agent = await nursery.start(
            functools.partial(agent.run_agent, str(files.agent_config), environ=environ)
        )
        churn = None
        if options.churn_rate > 0:
            churn = kubesim.Churn(sim, rate=options.churn_rate)
            await nursery.start(churn.run)

        async def accounts() -> Mapping[str, str]:
            return {a.name: str(a.status) for a in running.state.accounts.list()}

        run = Run(
            sim,
            churn,
            the_agent,
            options.account,
            time.monotonic(),
            running.state.store,
            accounts,
            f"http://{HOST}:{running.api_port}",
        )
        _print_endpoints(display, files, run, running, kube_url)
        stop = trio.CancelScope(deadline=trio.current_time() + (options.duration or math.inf))
        if options.handle_sigint:
            nursery.start_soon(_stop_on_signal, stop)
        summary = await show(display, run, stop)
        nursery.cancel_scope.cancel()
    return summary


async def _stop_on_signal(stop: trio.CancelScope) -> None:
    # While this receiver is open, Ctrl-C (or SIGTERM) ends the run (and the summary prints)
    # instead of raising KeyboardInterrupt somewhere in the middle of the parts' shutdown.
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            stop.cancel()
            return


def _print_endpoints(
    display: Display, files: DemoFiles, run: Run, running: server.RunningServer, kube_url: str
) -> None:
    api = run.api
    location = running.state.config.store.location
    store = (
        f"SQLite {Path(location.path)}"
        if location.backend == "sqlite"
        else f"PostgreSQL {location.redacted()}"
    )
    display.lines(
        [
            f"  server:  REST {api}  gRPC {HOST}:{running.grpc_port} (mTLS, client cert "
            f"required, JWT)  {store}",
            f"  agent:   {AGENT_ID}, health http://{HOST}:{run.agent.health_port}/ready, "
            f"config {files.agent_config}",
            f"  kubesim: {kube_url} (kubeconfig {files.kubeconfig})",
            f"  status page: {api}/ui (in a browser)",
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
