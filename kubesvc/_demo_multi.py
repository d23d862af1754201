"""``kubesvc demo --replicas N`` (N >= 2): the demo with N server replicas on PostgreSQL.

What runs: PostgreSQL (started here, or ``--store``), N ``kubesvc server`` processes on it
(``_demo_replicas``), kubesim over TLS, the churn and the agent in this process, the agent
given every replica's gRPC address (``clouddriver.grpcAddresses``), so it moves to another
when the one it is on dies. The demo prints where each replica answers and its pid, writes
them to ``<folder>/demo.json`` for scripts, and after the initial sync lists the replicas
(``/armory/clouddrivers``), the PRIMARY's holder and the ``kill -9`` to try.

Order of the end (SIGINT/SIGTERM, or ``--duration``): the summary's numbers are read, the
agent and the churn stop, the replicas get SIGTERM (SIGKILL after a bound), then PostgreSQL
stops and its folder is removed. A signal during the set-up ends it the same way.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import httpx
import trio

import agent
import kubesim
import wire
from server.store import Store, StoreConfig, open_store, parse_store_url

from ._demo_monitor import ReplicaMonitor
from ._demo_replicas import (
    DemoError,
    DemoPostgres,
    Replica,
    open_demo_postgres,
    open_replicas,
    postgres_binaries,
)
from ._demo_run import HOST, DemoOptions, Run, show
from ._demo_setup import (
    AGENT_ID,
    DemoFiles,
    free_port_or_any,
    replica_id,
    write_agent_config,
    write_replica_config,
)
from ._demo_view import Display, Summary
from ._demo_workload import load_workload, total_objects

__all__ = ["forget_earlier_demo", "run_replicas_demo"]

_PROBE = "/manifests/{account}/shop/deployment%20storefront"


@functools.cache
def _not_run() -> Summary:
    return Summary(
        synced=False,
        sync_seconds=None,
        stored=0,
        in_cluster=0,
        events_streamed=0,
        bytes_streamed=0,
        run_seconds=0.0,
        reconnects=0,
        churn_operations=0,
    )


async def forget_earlier_demo(store: Store, account: str, *, shared: bool) -> str:
    """Drop ``account`` left in the store by an earlier demo, and say so ("" when there was
    none). An account is bound to the cluster that first served it, and every demo starts a
    new kubesim: the earlier binding would refuse this run's agent. ``shared``: a store
    other processes may use (PostgreSQL), where a live lease means a demo runs on it now;
    raises DemoError then rather than take its account away."""
    if await store.get_account(account) is None:
        return ""
    if shared:
        lease = await store.get_lease(account)
        if lease is not None and lease.expires_ms > time.time() * 1000:
            raise DemoError(
                f"account {account!r} in this store is being served now (its PRIMARY is on "
                f"{lease.replica_id}): is another demo running on it? Stop it, or give "
                "--store another database"
            )
    await store.delete_account(account)
    return f"  store:   forgot account {account!r} left by an earlier demo (and its objects)"


class _Interrupt:
    """SIGINT/SIGTERM cancel the phase in progress: the set-up, then the run (whose end
    prints the summary). The teardown after it is bounded and not interrupted."""

    def __init__(self) -> None:
        self.received = False
        self._scope: trio.CancelScope | None = None

    def guard(self, scope: trio.CancelScope) -> None:
        self._scope = scope
        if self.received:
            scope.cancel()

    async def watch(self, signals: AsyncIterator[int]) -> None:
        async for _ in signals:
            self.received = True
            if self._scope is not None:
                self._scope.cancel()


async def run_replicas_demo(
    options: DemoOptions, display: Display, folder: Path, files: DemoFiles
) -> Summary:
    """The demo with ``options.replicas`` server processes (see the module docstring).

    Raises DemoError when PostgreSQL cannot be had or a replica does not start; a signal
    (with ``options.handle_sigint``) ends it with the summary of what ran."""
    interrupt = _Interrupt()
    with contextlib.ExitStack() as stack:
        async with trio.open_nursery() as guard:
            if options.handle_sigint:
                signals = stack.enter_context(
                    trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM)
                )
                guard.start_soon(interrupt.watch, signals)
            summary = await _run(options, display, folder, files, interrupt)
            guard.cancel_scope.cancel()
    return summary


async def _run(
    options: DemoOptions,
    display: Display,
    folder: Path,
    files: DemoFiles,
    interrupt: _Interrupt,
) -> Summary:
    if not options.store_url:
        postgres_binaries()  # before anything else: no binaries is a clear error at once
    sim = kubesim.Cluster()
    workload = load_workload(sim, pods=options.pods)
    replicas = _plan(options, display, folder)
    display.line(
        f"  kubesim: {total_objects(sim):,} objects in {len(workload.namespaces)} app "
        f"namespaces + 4 batch namespaces ({workload.deployments} deployments, "
        f"{workload.pods_loaded:,} bulk pods, {workload.widgets} Widget custom objects)"
    )
    summary = _not_run()
    started_here = ""  # the folder of a PostgreSQL this demo started
    setup = trio.CancelScope()
    interrupt.guard(setup)
    with setup:
        async with open_demo_postgres(options.store_url) as pg:
            display.line(_postgres_line(pg))
            started_here = pg.server.socket_dir if pg.server is not None else ""
            async with open_store(StoreConfig(pg.url, max_connections=2)) as store:
                note = await forget_earlier_demo(store, options.account, shared=True)
                if note:
                    display.line(note)
                for replica, (api_port, grpc_port) in replicas.items():
                    write_replica_config(
                        files,
                        index=replica.index,
                        api_port=api_port,
                        grpc_port=grpc_port,
                        store_url=pg.url,
                        heartbeat_ms=options.heartbeat_ms,
                        lease_ttl_ms=options.lease_ttl_ms,
                        host=HOST,
                    )
                summary = await _serve(
                    options, display, files, sim, pg, store, list(replicas), interrupt
                )
            if started_here:
                display.line(f"stopping PostgreSQL (pg_ctl stop) and removing {started_here}")
    if started_here:
        display.line("PostgreSQL stopped")
    return summary


def _plan(options: DemoOptions, display: Display, folder: Path) -> dict[Replica, tuple[int, int]]:
    """The replicas and the ports each asks for (the base ports + its index - 1, else any
    free port)."""
    planned: dict[Replica, tuple[int, int]] = {}
    for index in range(1, options.replicas + 1):
        ports = []
        for name, base in (("REST", options.api_port), ("gRPC", options.grpc_port)):
            wanted = base + index - 1 if base else 0
            got = free_port_or_any(HOST, wanted)
            if wanted and got != wanted:
                display.line(
                    f"  port {wanted} ({name} of replica {index}) is taken: using a free one"
                )
            ports.append(got)
        replica = Replica(
            index,
            replica_id(index),
            folder / f"server-{index}.yaml",
            folder / f"replica-{index}.log",
            HOST,
        )
        planned[replica] = (ports[0], ports[1])
    return planned


def _postgres_line(pg: DemoPostgres) -> str:
    if pg.server is None:
        return f"  postgres: {parse_store_url(pg.url).redacted()} (--store; left as it is)"
    return (
        f"  postgres: started for the demo from {pg.binaries}, unix socket in "
        f"{pg.server.socket_dir} (pid {pg.server.pid}; stopped and removed at the end)"
    )


async def _serve(
    options: DemoOptions,
    display: Display,
    files: DemoFiles,
    sim: kubesim.Cluster,
    pg: DemoPostgres,
    store: Store,
    replicas: list[Replica],
    interrupt: _Interrupt,
) -> Summary:
    async with (
        wire.open_loop(),
        kubesim.open_server(sim, host=HOST, port=0, tls=True) as kube,
        trio.open_nursery() as processes,
    ):
        kube.kubeconfig(files.kubeconfig, user="admin")
        async with open_replicas(processes, replicas, cwd=files.folder):
            write_agent_config(files, account=options.account, addresses=[r.grpc for r in replicas])
            async with httpx.AsyncClient() as client, trio.open_nursery() as nursery:
                environ = {**os.environ, "POD_NAME": AGENT_ID}
                the_agent: agent.Agent = await nursery.start(
                    functools.partial(agent.run_agent, str(files.agent_config), environ=environ)
                )
                churn = None
                if options.churn_rate > 0:
                    churn = kubesim.Churn(sim, rate=options.churn_rate)
                    await nursery.start(churn.run)
                status = the_agent.link.status
                monitor = ReplicaMonitor(
                    replicas,
                    options.account,
                    client,
                    agent_server=lambda: status.server_id if status.connected else "",
                    probe=_PROBE.format(account=options.account),
                    lease_ttl_ms=options.lease_ttl_ms,
                )

                async def accounts() -> Mapping[str, str]:
                    return {a.name: str(a.status) for a in await store.list_accounts()}

                run = Run(
                    sim,
                    churn,
                    the_agent,
                    options.account,
                    time.monotonic(),
                    store,
                    accounts,
                    replicas[0].api,
                    monitor,
                )
                _write_state(files, pg, replicas, the_agent, kube.url, options.account)
                _print_endpoints(display, files, run, replicas, options, kube.url)
                stop = trio.CancelScope(
                    deadline=trio.current_time() + (options.duration or math.inf)
                )
                interrupt.guard(stop)
                summary = await show(display, run, stop)
                nursery.cancel_scope.cancel()
            display.line("stopping the replicas (SIGTERM: they drain)")
        display.line(
            "replicas stopped: " + ", ".join(f"replica {r.index} {r.exit_text()}" for r in replicas)
        )
    return summary


def _write_state(
    files: DemoFiles,
    pg: DemoPostgres,
    replicas: list[Replica],
    the_agent: agent.Agent,
    kube_url: str,
    account: str,
) -> None:
    """<folder>/demo.json: where everything runs, for scripts (and the tests)."""
    state = {
        "account": account,
        "postgres": {
            "url": parse_store_url(pg.url).redacted(),
            "startedByDemo": pg.server is not None,
            "folder": pg.server.socket_dir if pg.server is not None else None,
            "pid": pg.server.pid if pg.server is not None else None,
        },
        "replicas": [
            {
                "index": r.index,
                "serverId": r.server_id,
                "pid": r.pid,
                "rest": r.api,
                "grpc": r.grpc,
                "config": str(r.config),
                "log": str(r.log_path),
            }
            for r in replicas
        ],
        "agent": {
            "id": AGENT_ID,
            "config": str(files.agent_config),
            "health": f"http://{HOST}:{the_agent.health_port}/ready",
        },
        "kubesim": kube_url,
    }
    path = files.folder / "demo.json"
    path.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")


def _print_endpoints(
    display: Display,
    files: DemoFiles,
    run: Run,
    replicas: list[Replica],
    options: DemoOptions,
    kube_url: str,
) -> None:
    lines = [
        f"  replica {r.index}: pid {r.pid}  REST {r.api}  gRPC {r.grpc}  "
        f"({r.server_id}, log {r.log_path})"
        for r in replicas
    ]
    first, last = replicas[0].api, replicas[-1].api
    lines += [
        f"  replicas: heartbeat {options.heartbeat_ms / 1000:g} s, lease TTL "
        f"{options.lease_ttl_ms / 1000:g} s (short for the demo; the defaults are 2 s and "
        "10 s): a dead replica's PRIMARY moves after at most the TTL",
        f"  agent:   {AGENT_ID}, grpcAddresses {', '.join(r.grpc for r in replicas)} "
        f"(mTLS, JWT; dialled in turn), health http://{HOST}:{run.agent.health_port}/ready",
        f"  kubesim: {kube_url} (kubeconfig {files.kubeconfig})",
        f"  state:   {files.folder / 'demo.json'} (pids, ports)",
        f"  status page: {first}/ui (any replica's; in a browser)",
        "",
        "try (in another terminal):",
        f"  curl -s {last}/armory/clouddrivers",
        f"  curl -s {first}/armory/accounts/{run.account}",
        f"  curl -s {first}/manifests/{run.account}/shop/deployment%20storefront",
        f"  curl -s '{first}/v1/objects?kind=Pod&limit=5'",
        "",
    ]
    display.lines(lines)
