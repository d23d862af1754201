"""One agent, N clusters: kubesim serving N small clusters -> one agent -> a receiving server.

Run: ``.venv/bin/python -m tests.bench.bench_fleet [--json] [--clusters N] [--quiet-s S]``

kubesim serves N member clusters from one process, each under its own path prefix
(``https://127.0.0.1:PORT/clusters/{i}``, kubesim._member) with its own resourceVersions,
objects and token, about 12 kinds and a few objects per kind (Deployments, a StatefulSet and a
Job that the lite controllers turn into ReplicaSets and Pods). One agent process
(``python -m kubesvc agent``) gets one account per cluster, each with its own kubeconfig, and
streams to a counting receiver like bench_agent's (wire.serve; it decodes each record's type
and account and acks every batch). Three processes: kubesim (a child: ``--sim``; its garbage
collector frozen after the clusters are built), the agent (a child), and this one with the
receiver, so that kubesim's work never delays the receiver's acks and heartbeats (a link the
agent thinks dead restarts every account) and each process's CPU and RSS are its own. Phases,
in one run:

1. sync: from the agent's spawn until every (account, kind) has sent its SYNC_END:
   ``sync_all_s``.
2. quiet: after a settle, nothing changes for ``--quiet-s`` seconds (60 by default); the
   agent's CPU over that window is ``agent_idle_cpu_pct`` (% of one core; bookmarks and
   watch renewals still flow, as against a real API server), its RSS after it
   ``agent_rss_mb``. kubesim's own RSS and idle CPU are reported too.
3. churn: ConfigMaps of random clusters are updated at ``--churn-rate`` per second for
   ``--churn-s`` seconds; ``events_per_s`` is the MODIFIED events the receiver got over the
   time from the first to the last one (light churn: it is the rate asked for unless
   something falls behind), with the agent's CPU per event.

On the 2 shared cores of the build machine the processes compete with each other and with
other jobs: the load average is printed with every figure. ``BENCH_FLEET_PYSPY=FILE`` samples
the agent with py-spy (``pip install py-spy`` into the venv) over the quiet window into FILE
(raw collapsed stacks); ``BENCH_FLEET_PROFILE=FILE`` runs the agent under cProfile.

With ``--json`` the last line is one JSON object: clusters, watches, agent_rss_mb,
agent_idle_cpu_pct, sync_all_s, events_per_s (plus the raw figures).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml

import kubesim
import wire
from agent import parse_config
from tests._procs import open_process
from tests.bench.bench_agent import cpu_seconds, load_average, rss_kib, start_agent, stop_agent
from wire import messages

from ._handoff import read_json, write_json
from ._receiver import serve_as_primary

TARGET_RSS_MB = 400.0
TARGET_IDLE_CPU_PCT = 5.0
TARGET_SYNC_S = 120.0

#: The kinds each account watches (12), as the agent's ``kinds`` filter names them.
KINDS = (
    "Namespace",
    "Pod",
    "Service",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Deployment",
    "ReplicaSet",
    "StatefulSet",
    "Job",
    "Ingress",
    "HorizontalPodAutoscaler",
)
NAMESPACES = ("default", "apps")


# --- the clusters ------------------------------------------------------------------------


def _meta(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {"app": name, **labels}}


def _template(name: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "app", "image": f"registry.example/{name}:1.0"}]},
    }


def small_cluster_objects() -> list[dict[str, Any]]:
    """About 30 objects of the 12 kinds (the controllers add ReplicaSets and Pods)."""
    ns = "apps"
    objects: list[dict[str, Any]] = []
    for i in range(3):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _meta(f"config-{i}", ns),
                "data": {"setting": str(i), "mode": "fleet"},
            }
        )
        objects.append(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(f"sa-{i}", ns)}
        )
    for i in range(2):
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": _meta(f"secret-{i}", ns),
                "type": "Opaque",
                "data": {"password": "c2VjcmV0"},
            }
        )
        name = f"web-{i}"
        objects.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": _meta(name, ns),
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": name}},
                    "template": _template(name),
                },
            }
        )
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _meta(name, ns),
                "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]},
            }
        )
    objects.append(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": _meta("db", ns),
            "spec": {
                "replicas": 1,
                "serviceName": "db",
                "selector": {"matchLabels": {"app": "db"}},
                "template": _template("db"),
            },
        }
    )
    job = _template("migrate")
    job["spec"]["restartPolicy"] = "Never"
    objects.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": _meta("migrate", ns),
            "spec": {"template": job},
        }
    )
    objects.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": _meta("web", ns),
            "spec": {
                "rules": [
                    {
                        "host": "web.example",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {
                                        "service": {"name": "web-0", "port": {"number": 80}}
                                    },
                                }
                            ]
                        },
                    }
                ]
            },
        }
    )
    objects.append(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta("web-0", ns),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-0"},
                "minReplicas": 1,
                "maxReplicas": 3,
            },
        }
    )
    return objects


def make_cluster(bookmark_interval: float = 60.0) -> kubesim.Cluster:
    """One small cluster: 2 namespaces and the objects of ``small_cluster_objects``."""
    cluster = kubesim.Cluster(
        kubesim.SimConfig(
            namespaces=NAMESPACES,
            watch_history=1000,
            continue_ttl=600.0,
            bookmark_interval=bookmark_interval,
        )
    )
    for obj in small_cluster_objects():
        cluster.create(obj)
    return cluster


# --- the receiving server ----------------------------------------------------------------


class _RecordHead(msgspec.Struct, array_like=True, gc=False):
    """A record's type, account, apiVersion and kind; the rest (the object's bytes) is
    skipped by its length prefix, not copied."""

    type: int
    account: str
    api_version: str
    kind: str


_RECORD_HEADS = msgspec.msgpack.Decoder(list[_RecordHead])


@dataclass
class Receiver:
    """Counts records; knows which (account, kind) pairs have sent SYNC_END; acks at once."""

    synced: set[tuple[str, str]] = field(default_factory=set)
    events: int = 0
    modified: int = 0
    bookmarks: int = 0
    first_modified_at: float = 0.0
    last_modified_at: float = 0.0
    last_sync_at: float = 0.0
    changed: trio.Event = field(default_factory=trio.Event)

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await serve_as_primary(stream, self._batch)

    def _batch(self, batch: messages.EventBatch) -> None:
        self._count(_RECORD_HEADS.decode(batch.records))
        self.changed.set()
        self.changed = trio.Event()

    def _count(self, records: list[_RecordHead]) -> None:
        now = time.perf_counter()
        self.events += len(records)
        for record in records:
            if record.type == wire.EventType.MODIFIED:
                if not self.modified:
                    self.first_modified_at = now
                self.modified += 1
                self.last_modified_at = now
            elif record.type == wire.EventType.BOOKMARK:
                self.bookmarks += 1
            elif record.type == wire.EventType.SYNC_END:
                self.synced.add((record.account, record.kind))
                self.last_sync_at = now

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self.changed.wait()


# --- the agent ---------------------------------------------------------------------------


def write_agent_config(
    path: Path,
    kubeconfigs: list[Path],
    grpc_port: int,
    total_budget: int,
    idle_coalesce_ms: int | None = None,
) -> None:
    config = {
        "clouddriver": {
            "grpc": f"127.0.0.1:{grpc_port}",
            "insecure": True,
            "keepAliveHeartbeatSeconds": 30,
        },
        "kubernetes": {
            "accounts": [
                {"name": f"c{index}", "kubeConfigFile": str(kubeconfig), "kinds": list(KINDS)}
                for index, kubeconfig in enumerate(kubeconfigs)
            ]
        },
        # At most this many accounts connect, discover or list at once (agent/watch/_list_caps.py).
        "tasks": {"totalBudget": total_budget},
        "server": {"host": "127.0.0.1", "port": 0},
        "prometheus": {"enabled": False},
        "logging": {"level": os.environ.get("BENCH_AGENT_LOG", "WARN")},
    }
    if idle_coalesce_ms is not None:  # else the agent's default (agent/_pacing.py)
        config["idle"] = {"coalesceMs": idle_coalesce_ms}
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


# --- the run -----------------------------------------------------------------------------


async def churn(members: list[kubesim.Member], rate: float, seconds: float) -> int:
    """Update a ConfigMap of a random cluster ``rate`` times a second for ``seconds``."""
    rng = random.Random(17)
    start = trio.current_time()
    done = 0
    total = int(rate * seconds)
    while done < total:
        due = min(total, int((trio.current_time() - start) * rate) + 1)
        while done < due:
            member = rng.choice(members)
            member.cluster.patch(
                "", "v1", "configmaps", "apps", f"config-{rng.randrange(3)}",
                {"data": {"tick": str(done)}},
            )  # fmt: skip
            done += 1
        await trio.sleep(0.01)
    return done


async def serve_sim(
    clusters: int, folder: Path, churn_rate: float, churn_s: float, bookmark_interval: float
) -> None:
    """The kubesim process: build ``clusters`` clusters, serve them over TLS, write their
    kubeconfigs and ``sim.json`` (port, build time) into ``folder``; on SIGUSR1 churn, then
    write ``churn.json``. Runs until killed."""
    started = time.perf_counter()
    built = [make_cluster(bookmark_interval) for _ in range(clusters)]
    build_s = time.perf_counter() - started
    # What was built lives as long as the process: keep the collector from walking it.
    gc.freeze()
    root = kubesim.Cluster(kubesim.SimConfig(namespaces=()))
    async with kubesim.open_server(root, tls=True) as kube:
        members = [kube.add_cluster(str(i), cluster) for i, cluster in enumerate(built)]
        for member in members:
            member.kubeconfig(folder / f"kubeconfig-{member.name}")
        write_json(folder / "sim.json", {"port": kube.port, "build_s": build_s})
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                changes = await churn(members, churn_rate, churn_s)
                write_json(folder / "churn.json", {"changes": changes})


async def _py_spy(pid: int, seconds: float, out: str) -> None:
    """Sample ``pid`` with py-spy (installed in the venv) for ``seconds`` into ``out``."""
    spy = Path(sys.executable).with_name("py-spy")
    command = [str(spy), "record", "--pid", str(pid), "--duration", str(int(seconds))]
    command += ["--format", "raw", "--nonblocking", "-o", out]
    await trio.run_process(command, capture_stdout=True, capture_stderr=True)


async def _settled(receiver: Receiver, quiet: float = 3.0, limit: float = 120.0) -> None:
    """Wait until no MODIFIED event has come for ``quiet`` seconds (the churn drained)."""
    with trio.fail_after(limit):
        while True:
            seen = receiver.modified
            await trio.sleep(quiet)
            if receiver.modified == seen:
                return


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "clusters": args.clusters,
        "total_budget": args.total_budget,
        "idle_coalesce_ms": (
            parse_config("").idle.coalesce_ms  # the agent's default
            if args.idle_coalesce_ms is None
            else args.idle_coalesce_ms
        ),
        "load_average_start": load_average(),
    }
    with tempfile.TemporaryDirectory(prefix="bench_fleet") as tmp:
        tmp_path = Path(tmp)
        log = tmp_path / "agent.log"
        try:
            await _phases(args, tmp_path, log, results)
        except BaseException:
            sys.stderr.write(log.read_text(errors="replace")[-4000:] if log.exists() else "")
            raise
    return results


async def _phases(
    args: argparse.Namespace, tmp_path: Path, log: Path, results: dict[str, Any]
) -> None:
    receiver = Receiver()
    command = [sys.executable, "-m", "tests.bench.bench_fleet", "--sim", str(tmp_path)]
    command += ["--clusters", str(args.clusters), "--churn-rate", str(args.churn_rate)]
    command += ["--churn-s", str(args.churn_s), "--bookmark-interval", str(args.bookmark_interval)]
    # kubesim is killed and reaped on the way out, also when the bench fails or is interrupted
    with (tmp_path / "sim.log").open("ab") as sim_log:
        sim_process = open_process(
            command, stdout=sim_log, stderr=sim_log, stop_signal=signal.SIGKILL
        )
        async with sim_process as sim, wire.open_loop(), trio.open_nursery() as nursery:
            built = await read_json(tmp_path / "sim.json", 600, sim)
            results["sim_build_s"] = built["build_s"]
            results["sim_rss_mb_loaded"] = rss_kib(sim.pid) / 1024
            kubeconfigs = [tmp_path / f"kubeconfig-{index}" for index in range(args.clusters)]
            grpc_port = await nursery.start(wire.serve, receiver.handler, "127.0.0.1", 0)
            config = tmp_path / "agent.yaml"
            write_agent_config(
                config, kubeconfigs, grpc_port, args.total_budget, args.idle_coalesce_ms
            )
            await _run_agent(args, tmp_path, config, log, sim, receiver, results)
            nursery.cancel_scope.cancel()


async def _run_agent(
    args: argparse.Namespace,
    tmp_path: Path,
    config: Path,
    log: Path,
    sim: trio.Process,
    receiver: Receiver,
    results: dict[str, Any],
) -> None:
    pairs = args.clusters * len(KINDS)
    results["watches"] = pairs

    # 1. sync
    spawned = time.perf_counter()
    agent = await start_agent(config, log, os.environ.get("BENCH_FLEET_PROFILE", ""))
    try:
        with trio.fail_after(args.sync_limit_s):
            await receiver.wait_for(lambda: len(receiver.synced) >= pairs)
        results["sync_all_s"] = receiver.last_sync_at - spawned
        results["agent_sync_cpu_s"] = cpu_seconds(agent.pid)  # since its spawn
        results["load_average_sync"] = load_average()
        results["agent_rss_mb_synced"] = rss_kib(agent.pid) / 1024

        # 2. quiet
        await trio.sleep(args.settle_s)
        agent_cpu, sim_cpu = cpu_seconds(agent.pid), cpu_seconds(sim.pid)
        events, wall = receiver.events, time.perf_counter()
        spy = os.environ.get("BENCH_FLEET_PYSPY", "")
        if spy:  # what the agent does while nothing happens, sampled (raw, for flamegraphs)
            await _py_spy(agent.pid, args.quiet_s, spy)
        else:
            await trio.sleep(args.quiet_s)
        wall = time.perf_counter() - wall
        results["quiet_s"] = round(wall, 1)
        results["agent_idle_cpu_pct"] = (cpu_seconds(agent.pid) - agent_cpu) / wall * 100
        results["sim_idle_cpu_pct"] = (cpu_seconds(sim.pid) - sim_cpu) / wall * 100
        results["quiet_records_per_s"] = (receiver.events - events) / wall
        results["load_average_quiet"] = load_average()
        results["agent_rss_mb"] = rss_kib(agent.pid) / 1024
        results["sim_rss_mb"] = rss_kib(sim.pid) / 1024

        # 3. churn
        agent_cpu, wall = cpu_seconds(agent.pid), time.perf_counter()
        sim.send_signal(signal.SIGUSR1)
        changes = (await read_json(tmp_path / "churn.json", args.churn_s + 120, sim))["changes"]
        await _settled(receiver)
        span = receiver.last_modified_at - receiver.first_modified_at
        results["churn_changes"] = changes
        # Pending changes of one object coalesce in the agent's budget (the newest wins):
        # under churn the receiver may get fewer events than there were changes.
        results["churn_events"] = receiver.modified
        results["events_per_s"] = (receiver.modified - 1) / span if span > 0 else 0.0
        results["churn_agent_cpu_us_per_event"] = (
            (cpu_seconds(agent.pid) - agent_cpu) / max(receiver.modified, 1) * 1e6
        )
        results["load_average_churn"] = load_average()
        results["agent_peak_rss_mb"] = rss_kib(agent.pid, "VmHWM") / 1024
    finally:
        await stop_agent(agent)


def report(results: dict[str, Any], as_json: bool) -> None:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(
        f"cores: {os.cpu_count()} (shared); load average at start {results['load_average_start']}"
    )
    print(
        f"kubesim      : {results['clusters']} clusters built in {results['sim_build_s']:.1f} s, "
        f"RSS {results['sim_rss_mb_loaded']:.0f} MB loaded, {results['sim_rss_mb']:.0f} MB "
        f"serving {results['watches']} watches; idle CPU {results['sim_idle_cpu_pct']:.1f} %"
    )
    print(
        f"sync         : {results['watches']} watches synced in {results['sync_all_s']:.1f} s "
        f"from spawn (target < {TARGET_SYNC_S:.0f}: {mark(results['sync_all_s'] < TARGET_SYNC_S)};"
        f" load {results['load_average_sync']}); agent CPU {results['agent_sync_cpu_s']:.0f} s"
    )
    print(
        f"quiet        : agent CPU {results['agent_idle_cpu_pct']:.2f} % of a core over "
        f"{results['quiet_s']} s (target < {TARGET_IDLE_CPU_PCT:.0f}: "
        f"{mark(results['agent_idle_cpu_pct'] < TARGET_IDLE_CPU_PCT)}; "
        f"{results['quiet_records_per_s']:.0f} records/s; load {results['load_average_quiet']})"
    )
    print(
        f"agent RSS    : {results['agent_rss_mb']:.0f} MB (target < {TARGET_RSS_MB:.0f}: "
        f"{mark(results['agent_rss_mb'] < TARGET_RSS_MB)}); "
        f"peak {results['agent_peak_rss_mb']:.0f} MB"
    )
    print(
        f"churn        : {results['churn_changes']} changes, {results['churn_events']} events, "
        f"{results['events_per_s']:,.0f} "
        f"events/s at the receiver, agent {results['churn_agent_cpu_us_per_event']:.0f} us/event "
        f"(load {results['load_average_churn']})"
    )
    if as_json:
        print(
            json.dumps(
                {
                    key: (round(value, 2) if isinstance(value, float) else value)
                    for key, value in results.items()
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--clusters", type=int, default=1_000)
    parser.add_argument("--quiet-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--churn-rate", type=float, default=200.0)
    parser.add_argument("--churn-s", type=float, default=20.0)
    parser.add_argument("--sync-limit-s", type=float, default=600.0)
    parser.add_argument("--total-budget", type=int, default=50, help="tasks.totalBudget")
    parser.add_argument(
        "--bookmark-interval",
        type=float,
        default=60.0,
        help="kubesim's seconds between a watch's bookmarks (kube-apiserver's: ~60)",
    )
    parser.add_argument(
        "--idle-coalesce-ms",
        type=int,
        default=None,
        help="the agent's idle.coalesceMs (default: the agent's own; 0: no idle pacing)",
    )
    parser.add_argument("--sim", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sim:
        trio.run(
            serve_sim,
            args.clusters,
            Path(args.sim),
            args.churn_rate,
            args.churn_s,
            args.bookmark_interval,
        )
        return
    report(trio.run(bench, args), args.json)


if __name__ == "__main__":
    main()
