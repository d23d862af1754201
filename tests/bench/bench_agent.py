"""The agent end to end: kubesim -> agent (its own process) -> a receiving gRPC server.

Run: ``.venv/bin/python -m tests.bench.bench_agent [--json] [--sync-pods N] [--burst N]``

kubesim (realistic ~4.4 KB pods, ``kubesim.load_pods``) and a counting receiver (wire.serve;
it decodes every batch and acks it) run in this process; the agent runs as
``python -m kubesvc agent -c FILE`` in a child process, so its CPU and RSS are its own. On the
2 shared cores of the build machine the three compete; the load average is printed with the
figures. Phases, in one run:

1. initial sync: 50,000 pods in namespace ``sync``; an agent watching Pods there starts; the
   rate is objects / (first record .. SYNC_END at the receiver). That agent then stops.
2. watch: a second agent watches namespace ``watch`` holding 1,000 pods; once synced and
   settled its RSS is taken (the 1,000-object baseline). Then 99,000 more pods are committed to
   kubesim at once, so the agent's open watch carries 99,000 ADDED events: watch events/s is
   events / (first .. last record of the burst at the receiver), and the agent's peak RSS
   (VmHWM) minus the baseline is the growth between watching 1,000 and 100,000 objects. The
   agent keeps no objects; what it holds is bounded by ``budget.bytes`` (8Mi here).
3. peer: the same watch (namespace ``watch`` from the resourceVersion before the burst, the
   same 99,000 events replayed from kubesim's history) consumed by kubernetes_asyncio's
   ``watch.Watch`` in a child process on plain asyncio, for ``--peer-events`` events.

kubesim serves https by default (``--no-tls`` for http): the agent's watches then go over its
own HTTP/2 connection, as against a real API server. Besides the rates, the agent's CPU time
per watch event is printed: unlike the rates it barely depends on what else the shared cores
are doing (DESIGN section 3 budgets ~35 us). ``BENCH_AGENT_PROFILE=FILE`` runs the watch
phase's agent under cProfile (CPU time) into FILE.

With ``--json`` the last line is one JSON object: sync_objects_per_s, watch_events_per_s,
peer_events_per_s, ratio, rss_growth_mb (plus the raw figures).

``--streaming-list`` (issue 17) runs another comparison instead: the initial sync of
``--list-pods`` pods (default 100,000, one namespace) by the streaming list (a watch with
``sendInitialEvents=true``, kubesim's WatchList on) against the paged list (kubesim's
WatchList off, ``SimConfig.watch_list``: the agent is refused with 422 and falls back, as
against an API server with that feature gate off), alternating ``--rounds`` times each
(stream, paged, paged, stream, ...) with a new agent every time. Per mode: objects/s from the
first record to SYNC_END at the receiver (the best round), the agent's peak RSS (VmHWM, the
highest round), and CPU microseconds per object of the agent and of this process (kubesim
and the counting receiver; the receiver's share is the same in both modes). kubesim's list
requests are counted to check that each mode listed the way it says. JSON keys:
stream_list_objs_per_s, paged_list_objs_per_s, stream_list_agent_peak_rss_mb,
paged_list_agent_peak_rss_mb (plus the CPU figures and load averages).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml

import kubesim
import wire
from wire import messages

from ._receiver import serve_as_primary

TARGET_EVENTS_PER_S = 20_000
TARGET_RATIO = 10.0
TARGET_RSS_GROWTH_MB = 20.0
BUDGET = "8Mi"


# --- the receiving server ----------------------------------------------------------------


class _RecordType(msgspec.Struct, array_like=True, gc=False):
    """A record's type and nothing else: the rest of each record (the object's bytes, a
    msgpack bin) is skipped by its length prefix, not copied. The receiver only counts, and it
    shares a core with kubesim: a full decode_events copied every 4.4 KB object again."""

    type: int


_RECORD_TYPES = msgspec.msgpack.Decoder(list[_RecordType])


@dataclass
class Counter:
    """Counts records per phase; acks every batch at once."""

    events: int = 0
    objects: int = 0
    first_at: float = 0.0
    last_at: float = 0.0
    sync_end_at: float = 0.0
    sync_ends: int = 0
    changed: trio.Event = field(default_factory=trio.Event)

    def reset(self) -> None:
        self.events = self.objects = self.sync_ends = 0
        self.first_at = self.last_at = self.sync_end_at = 0.0

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await serve_as_primary(stream, self._count)

    def _count(self, batch: messages.EventBatch) -> None:
        now = time.perf_counter()
        records = _RECORD_TYPES.decode(batch.records)
        assert len(records) == batch.count
        if not self.first_at:
            self.first_at = now
        self.last_at = now
        self.events += len(records)
        for record in records:
            if record.type <= wire.EventType.DELETED:
                self.objects += 1
            elif record.type == wire.EventType.SYNC_END:
                self.sync_ends += 1
                self.sync_end_at = now
        self.changed.set()
        self.changed = trio.Event()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self.changed.wait()


# --- the agent process -------------------------------------------------------------------


def rss_kib(pid: int, field_name: str = "VmRSS") -> int:
    """A /proc/<pid>/status memory figure in KiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field_name} for process {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_agent_config(path: Path, kubeconfig: Path, grpc_port: int, namespace: str) -> None:
    config = {
        "clouddriver": {
            "grpc": f"127.0.0.1:{grpc_port}",
            "insecure": True,
            "keepAliveHeartbeatSeconds": 30,
        },
        "kubernetes": {
            "accounts": [
                {
                    "name": "bench",
                    "kubeConfigFile": str(kubeconfig),
                    "kinds": ["Pod"],
                    "namespaces": [namespace],
                }
            ]
        },
        "budget": {"bytes": BUDGET},
        "server": {"host": "127.0.0.1", "port": 0},
        "prometheus": {"enabled": False},
        "logging": {"level": os.environ.get("BENCH_AGENT_LOG", "WARN")},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


_PROFILED = """
import cProfile, time
from kubesvc.cli import main
profiler = cProfile.Profile(time.process_time)
profiler.enable()
try:
    main(["agent", "-c", {config!r}])
finally:
    profiler.disable()
    profiler.dump_stats({out!r})
"""


async def start_agent(config: Path, log: Path, profile: str = "") -> trio.Process:
    """``python -m kubesvc agent -c config``; under cProfile into ``profile`` when given."""
    command = ["-m", "kubesvc", "agent", "-c", str(config)]
    if profile:  # CPU time, not wall time: the machine is shared
        command = ["-c", _PROFILED.format(config=str(config), out=profile)]
    with log.open("ab") as out:
        return await trio.lowlevel.open_process(
            [sys.executable, *command],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )


async def stop_agent(process: trio.Process) -> None:
    process.send_signal(signal.SIGINT)  # not SIGTERM: a profiled agent writes its profile
    with trio.move_on_after(20):
        await process.wait()
        return
    process.kill()
    await process.wait()


# --- the peer: kubernetes_asyncio on plain asyncio ---------------------------------------


def peer_main(kubeconfig: str, namespace: str, resource_version: str, events: int) -> None:
    """Child process: watch pods with kubernetes_asyncio's watch.Watch; print events/s."""
    import asyncio

    from kubernetes_asyncio import client, config, watch

    async def run() -> None:
        await config.load_kube_config(config_file=kubeconfig)
        async with client.ApiClient() as api:
            core = client.CoreV1Api(api)
            seen = 0
            started = 0.0
            async with watch.Watch() as w:
                async for _ in w.stream(
                    core.list_namespaced_pod,
                    namespace,
                    resource_version=resource_version,
                    timeout_seconds=120,
                ):
                    if not seen:
                        started = time.perf_counter()
                    seen += 1
                    if seen >= events:
                        break
            spent = time.perf_counter() - started
            # The first event starts the clock, so seen - 1 events took ``spent``.
            print(json.dumps({"events": seen, "events_per_s": (seen - 1) / spent}), flush=True)

    asyncio.run(run())


async def run_peer(kubeconfig: Path, namespace: str, resource_version: str, events: int) -> float:
    result = await trio.run_process(
        [
            sys.executable,
            "-m",
            "tests.bench.bench_agent",
            "--peer",
            str(kubeconfig),
            namespace,
            resource_version,
            str(events),
        ],
        capture_stdout=True,
    )
    return float(json.loads(result.stdout.decode().strip().splitlines()[-1])["events_per_s"])


# --- the run -----------------------------------------------------------------------------


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"load_average_start": load_average()}
    total = args.watch_base + args.burst
    sim = kubesim.Cluster(
        kubesim.SimConfig(watch_history=total + 1000, controllers=False, bookmark_interval=3600.0)
    )
    with tempfile.TemporaryDirectory(prefix="bench_agent") as tmp:
        tmp_path = Path(tmp)
        log = tmp_path / "agent.log"
        try:
            await _phases(args, sim, tmp_path, log, results)
        except BaseException:
            sys.stderr.write(log.read_text(errors="replace")[-4000:] if log.exists() else "")
            raise
    return results


async def _phases(
    args: argparse.Namespace,
    sim: kubesim.Cluster,
    tmp_path: Path,
    log: Path,
    results: dict[str, Any],
) -> None:
    counter = Counter()
    async with (
        wire.open_loop(),
        kubesim.open_server(sim, tls=args.tls) as kube,
        trio.open_nursery() as nursery,
    ):
        kubeconfig = tmp_path / "kubeconfig"
        kube.kubeconfig(kubeconfig, user="admin")
        grpc_port = await nursery.start(wire.serve, counter.handler, "127.0.0.1", 0)

        # 1. initial sync
        kubesim.load_pods(sim, args.sync_pods, namespaces=["sync"])
        config = tmp_path / "sync.yaml"
        write_agent_config(config, kubeconfig, grpc_port, "sync")
        counter.reset()
        spawned = time.perf_counter()
        agent = await start_agent(config, log)
        with trio.fail_after(120):
            await counter.wait_for(lambda: counter.sync_ends >= 1)
        results["sync_objects"] = counter.objects
        results["sync_objects_per_s"] = counter.objects / (counter.sync_end_at - counter.first_at)
        results["sync_seconds_from_spawn"] = counter.sync_end_at - spawned
        results["sync_peak_rss_mb"] = rss_kib(agent.pid, "VmHWM") / 1024
        results["load_average_sync"] = load_average()
        await stop_agent(agent)

        # 2. watch: baseline at 1,000 objects, then a burst through the open watch
        kubesim.load_pods(sim, args.watch_base, namespaces=["watch"])
        config = tmp_path / "watch.yaml"
        write_agent_config(config, kubeconfig, grpc_port, "watch")
        counter.reset()
        agent = await start_agent(config, log, os.environ.get("BENCH_AGENT_PROFILE", ""))
        with trio.fail_after(60):
            await counter.wait_for(lambda: counter.sync_ends >= 1)
        await trio.sleep(1.0)  # settle: the watch is open, nothing in flight
        baseline_kib = rss_kib(agent.pid)
        before_burst = str(sim.resource_version)
        counter.reset()
        kubesim.load_pods(sim, args.burst, namespaces=["watch"])
        agent_cpu, own_cpu, wall = cpu_seconds(agent.pid), time.process_time(), time.perf_counter()
        with trio.fail_after(180):
            await counter.wait_for(lambda: counter.objects >= args.burst)
        wall = time.perf_counter() - wall
        agent_cpu = cpu_seconds(agent.pid) - agent_cpu
        results["watch_agent_cpu_us_per_event"] = agent_cpu / args.burst * 1e6
        results["watch_agent_cpu_share"] = agent_cpu / wall
        own_cpu = time.process_time() - own_cpu
        results["watch_bench_cpu_share"] = own_cpu / wall
        results["watch_bench_cpu_us_per_event"] = own_cpu / args.burst * 1e6
        results["watch_events"] = counter.objects
        results["watch_events_per_s"] = (counter.objects - 1) / (counter.last_at - counter.first_at)
        results["load_average_watch"] = load_average()
        results["agent_rss_1k_mb"] = baseline_kib / 1024
        results["agent_peak_rss_mb"] = rss_kib(agent.pid, "VmHWM") / 1024
        results["agent_rss_after_mb"] = rss_kib(agent.pid) / 1024
        results["rss_growth_mb"] = results["agent_peak_rss_mb"] - results["agent_rss_1k_mb"]
        await stop_agent(agent)

        # 3. the peer, on the same watch (replayed from kubesim's history)
        peer_events = min(args.peer_events, args.burst)
        results["peer_events"] = peer_events
        results["peer_events_per_s"] = await run_peer(
            kubeconfig, "watch", before_burst, peer_events
        )
        results["load_average_peer"] = load_average()
        results["ratio"] = results["watch_events_per_s"] / results["peer_events_per_s"]
        nursery.cancel_scope.cancel()


# --- streaming list against paged list (--streaming-list) ---------------------------------


async def bench_lists(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--streaming-list`` comparison (see the module doc)."""
    results: dict[str, Any] = {"load_average_start": load_average(), "list_pods": args.list_pods}
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False, bookmark_interval=3600.0))
    kubesim.load_pods(sim, args.list_pods, namespaces=["sync"])
    rounds: dict[str, list[dict[str, float]]] = {"stream": [], "paged": []}
    with tempfile.TemporaryDirectory(prefix="bench_agent") as tmp:
        tmp_path = Path(tmp)
        log = tmp_path / "agent.log"
        try:
            counter = Counter()
            async with (
                wire.open_loop(),
                kubesim.open_server(sim, tls=args.tls) as kube,
                trio.open_nursery() as nursery,
            ):
                kubeconfig = tmp_path / "kubeconfig"
                kube.kubeconfig(kubeconfig, user="admin")
                grpc_port = await nursery.start(wire.serve, counter.handler, "127.0.0.1", 0)
                config = tmp_path / "sync.yaml"
                write_agent_config(config, kubeconfig, grpc_port, "sync")
                order = [("stream", "paged"), ("paged", "stream")]
                for index in range(args.rounds):
                    for mode in order[index % 2]:
                        sim.config = replace(sim.config, watch_list=mode == "stream")
                        lists = kube.requests.count("list", "pods")
                        figures = await _one_sync(counter, config, log, args.list_pods)
                        listed = kube.requests.count("list", "pods") - lists
                        if (listed == 0) != (mode == "stream"):
                            raise RuntimeError(f"{mode}: the agent made {listed} list requests")
                        rounds[mode].append(figures)
                nursery.cancel_scope.cancel()
        except BaseException:
            sys.stderr.write(log.read_text(errors="replace")[-4000:] if log.exists() else "")
            raise
    for mode, runs in rounds.items():
        best = max(runs, key=lambda r: r["objs_per_s"])
        results[f"{mode}_list_objs_per_s"] = best["objs_per_s"]
        results[f"{mode}_list_agent_peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        results[f"{mode}_list_agent_cpu_us_per_obj"] = min(r["agent_us"] for r in runs)
        results[f"{mode}_list_sim_cpu_us_per_obj"] = min(r["sim_us"] for r in runs)
        results[f"{mode}_list_rounds"] = [round(r["objs_per_s"]) for r in runs]
        results[f"{mode}_list_load_average"] = best["load"]
    return results


async def _one_sync(counter: Counter, config: Path, log: Path, pods: int) -> dict[str, Any]:
    """A new agent's initial sync of the pods: its rate, peak RSS and CPU per object."""
    counter.reset()
    agent = await start_agent(config, log)
    try:
        with trio.fail_after(300):
            await counter.wait_for(lambda: counter.events > 0)
            agent_cpu, own_cpu = cpu_seconds(agent.pid), time.process_time()
            await counter.wait_for(lambda: counter.sync_ends >= 1)
        agent_cpu = cpu_seconds(agent.pid) - agent_cpu
        own_cpu = time.process_time() - own_cpu
        if counter.objects != pods:
            raise RuntimeError(f"synced {counter.objects} objects, expected {pods}")
        return {
            "objs_per_s": counter.objects / (counter.sync_end_at - counter.first_at),
            "peak_rss_mb": rss_kib(agent.pid, "VmHWM") / 1024,
            "agent_us": agent_cpu / counter.objects * 1e6,
            "sim_us": own_cpu / counter.objects * 1e6,
            "load": load_average(),
        }
    finally:
        await stop_agent(agent)


def report_lists(results: dict[str, Any], as_json: bool) -> None:
    print(
        f"cores: {os.cpu_count()} (shared); load average at start {results['load_average_start']}"
    )
    for mode, title in (("stream", "streaming list"), ("paged", "paged list    ")):
        print(
            f"{title}: {results['list_pods']:,} pods {results[f'{mode}_list_objs_per_s']:>9,.0f} "
            f"objects/s (best of {results[f'{mode}_list_rounds']}), agent peak RSS "
            f"{results[f'{mode}_list_agent_peak_rss_mb']:.1f} MB, CPU a object: agent "
            f"{results[f'{mode}_list_agent_cpu_us_per_obj']:.1f} us, kubesim+receiver "
            f"{results[f'{mode}_list_sim_cpu_us_per_obj']:.1f} us "
            f"(load {results[f'{mode}_list_load_average']})"
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


def report(results: dict[str, Any], as_json: bool) -> None:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    print(
        f"cores: {os.cpu_count()} (shared); load average at start {results['load_average_start']}"
    )
    print(
        f"initial sync : {results['sync_objects']:>7} pods  "
        f"{results['sync_objects_per_s']:>9,.0f} objects/s  "
        f"({results['sync_seconds_from_spawn']:.1f} s from spawn, peak RSS "
        f"{results['sync_peak_rss_mb']:.1f} MB; load {results['load_average_sync']})"
    )
    ok = results["watch_events_per_s"] >= TARGET_EVENTS_PER_S
    print(
        f"watch        : {results['watch_events']:>7} events"
        f"{results['watch_events_per_s']:>9,.0f} events/s  (target {TARGET_EVENTS_PER_S:,}: "
        f"{mark(ok)}; load {results['load_average_watch']}; CPU share agent "
        f"{results['watch_agent_cpu_share']:.2f} "
        f"({results['watch_agent_cpu_us_per_event']:.0f} us/event), kubesim+receiver "
        f"{results['watch_bench_cpu_share']:.2f} "
        f"({results['watch_bench_cpu_us_per_event']:.0f} us/event))"
    )
    print(
        f"peer (kubernetes_asyncio watch.Watch): {results['peer_events']} events "
        f"{results['peer_events_per_s']:,.0f} events/s; ratio {results['ratio']:.1f}x "
        f"(target {TARGET_RATIO:.0f}x: {mark(results['ratio'] >= TARGET_RATIO)}; "
        f"load {results['load_average_peer']})"
    )
    ok = results["rss_growth_mb"] < TARGET_RSS_GROWTH_MB
    print(
        f"agent RSS    : {results['agent_rss_1k_mb']:.1f} MB watching 1,000 objects, peak "
        f"{results['agent_peak_rss_mb']:.1f} MB through 100,000 (growth "
        f"{results['rss_growth_mb']:.1f} MB, target < {TARGET_RSS_GROWTH_MB:.0f}: {mark(ok)}); "
        f"{results['agent_rss_after_mb']:.1f} MB after; budget.bytes {BUDGET}"
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
    if len(sys.argv) > 1 and sys.argv[1] == "--peer":
        peer_main(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sync-pods", type=int, default=50_000)
    parser.add_argument("--watch-base", type=int, default=1_000)
    parser.add_argument("--burst", type=int, default=99_000)
    parser.add_argument("--peer-events", type=int, default=3_000)
    parser.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="kubesim over https (HTTP/2 watches, as on a real cluster)",
    )
    parser.add_argument(
        "--streaming-list",
        action="store_true",
        help="compare the initial sync by streaming list and by paged list instead",
    )
    parser.add_argument("--list-pods", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2, help="--streaming-list: rounds each")
    args = parser.parse_args()
    if args.streaming_list:
        report_lists(trio.run(bench_lists, args), args.json)
        return
    report(trio.run(bench, args), args.json)


if __name__ == "__main__":
    main()
