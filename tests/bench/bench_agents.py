"""One server, M agents: registration, idle cost, and the reconnect storm after a restart.

Run: ``.venv/bin/python -m tests.bench.bench_agents [--json] [--agents M] [--hosts H]``

Processes: kubesim (a child, ``--sim``) serves M small clusters over HTTPS, each under its own
path prefix (``/clusters/{n}``, as bench_fleet builds them); one ``kubesvc server`` (a child)
on a SQLite file; H agent hosts (children, ``--host``; tests/bench/_agents_host.py) that run
M/H real agents each: agent n has its own config file, one account ``a{n}`` of
``--kinds`` kinds on cluster n, its own kube client and its own link (gRPC connection and
stream) to the server. Nothing is mocked: what the server sees is M agents. Phases:

1. sync: the agents start at ``--start-rate`` per second (a rollout; 0: all at once); from
   the hosts' spawn until every agent is ready (connected, its account synced) and the
   server lists every account ACTIVE: ``sync_all_s``.
2. quiet: after a settle, ``--quiet-s`` seconds in which nothing changes (heartbeats and
   bookmarks still flow): the server's CPU over that window is ``server_idle_cpu_pct`` (% of
   one core), its RSS after it ``server_rss_mb``; the hosts' CPU per agent too.
3. restart: the server is killed (SIGKILL, as a crash or an OOM kill; ``--stop-signal TERM``
   for a drain) and started again on the same ports and the same store file. Every agent's
   link reconnects on its own backoff: ``reconnect_all_s`` is from the kill until the server
   lists every account ACTIVE again, ``resumed_all_s`` until every agent is ready again.
   ``relists`` is how many full listings kubesim served after the kill (LISTs and streaming
   lists, kubesim's ``list`` and ``watchlist`` counters, over every cluster): 0 when every
   kind resumed from the resourceVersion the server had stored. The agents' own count of
   listings in the new sessions is ``agent_relists``. ``storm_server_cpu_s`` is the restarted
   server's CPU from its spawn until every account is ACTIVE (its start included).

On the 2 shared cores of the build machine the processes compete with each other and with
other jobs: the load average is printed with every figure, CPU per agent beside the rates.
``BENCH_AGENTS_FOLDER=DIR`` keeps the run's files (logs, configs, the store) in DIR.
``BENCH_AGENTS_PYSPY=PREFIX`` samples the server with py-spy (``$PYSPY``, else
/tmp/spy/bin/py-spy; raw collapsed stacks) over the quiet window into PREFIX-idle.txt and
from the restart until every account is ACTIVE into PREFIX-storm.txt.

With ``--json`` the last line is one JSON object: agents, server_rss_mb, server_idle_cpu_pct,
reconnect_all_s, relists, sync_all_s (plus the raw figures).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

import kubesim
from tests._procs import open_process, stop_process
from tests.bench._agents_host import HostStatus, agent_config_path, run_host
from tests.bench._handoff import read_json, write_json
from tests.bench.bench_agent import cpu_seconds, load_average, rss_kib
from tests.bench.bench_fleet import make_cluster

TARGET_RSS_MB = 1024.0
TARGET_RECONNECT_S = 60.0

#: What each agent's one account watches (a small account).
KINDS = ("Namespace", "ConfigMap", "Secret", "Service", "Deployment", "Pod")
POLL_SECONDS = 0.25
#: The server's account list costs it ~1 ms per 100 accounts: polled once a second, the
#: measure stays out of what it measures (to ±1 s).
ACCOUNTS_POLL_SECONDS = 1.0


# --- the clusters (the --sim process) ----------------------------------------------------


async def serve_sim(clusters: int, folder: Path) -> None:
    """Build ``clusters`` clusters, serve them over TLS, write their kubeconfigs and
    ``sim.json``; on SIGUSR1 write ``counts.json`` (requests served so far, summed over the
    clusters). Runs until killed."""
    started = time.perf_counter()
    built = [make_cluster() for _ in range(clusters)]
    build_s = time.perf_counter() - started
    gc.freeze()  # what was built lives as long as the process: keep the collector off it
    root = kubesim.Cluster(kubesim.SimConfig(namespaces=()))
    async with kubesim.open_server(root, tls=True) as kube:
        members = [kube.add_cluster(str(i), cluster) for i, cluster in enumerate(built)]
        for member in members:
            member.kubeconfig(folder / f"kubeconfig-{member.name}")
        write_json(folder / "sim.json", {"port": kube.port, "build_s": build_s})
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                counts = {
                    verb: sum(member.requests.count(verb) for member in members)
                    for verb in ("list", "watchlist", "watch", "get")
                }
                write_json(folder / "counts.json", counts)


async def sim_counts(folder: Path, sim: trio.Process) -> dict[str, int]:
    path = folder / "counts.json"
    path.unlink(missing_ok=True)
    sim.send_signal(signal.SIGUSR1)
    return await read_json(path, 60, sim)


# --- the server --------------------------------------------------------------------------


def free_port() -> int:
    """A port the OS has free now (the server binds it; a restart binds it again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def write_server_config(path: Path, grpc_port: int, api_port: int, store: Path) -> None:
    config = {
        "grpc": {"host": "127.0.0.1", "port": grpc_port},
        "api": {"host": "127.0.0.1", "port": api_port},
        "store": {"url": f"sqlite://{store}"},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


def write_agent_config(
    path: Path, n: int, kubeconfig: Path, grpc_port: int, kinds: tuple[str, ...]
) -> None:
    config = {
        "clouddriver": {"grpc": f"127.0.0.1:{grpc_port}", "insecure": True},
        "kubernetes": {
            "accounts": [{"name": f"a{n}", "kubeConfigFile": str(kubeconfig), "kinds": list(kinds)}]
        },
        "server": {"host": "127.0.0.1", "port": 0},
        "prometheus": {"enabled": False},
    }
    path.write_text(yaml.safe_dump(config), encoding="utf-8")


class Accounts:
    """The server's ``/armory/accounts``, polled: how many accounts are ACTIVE."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def active(self) -> int:
        """ACTIVE accounts; 0 while the server does not answer."""
        try:
            response = await self._client.get("/armory/accounts")
        except httpx.TransportError:
            return 0
        if response.status_code != 200:
            return 0
        return sum(1 for account in response.json() if account["status"] == "ACTIVE")

    async def wait_up(self) -> None:
        """Until the server answers (its API is served once its state is loaded)."""
        while True:
            try:
                if (await self._client.get("/health")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await trio.sleep(POLL_SECONDS / 5)

    async def wait_active(self, count: int, alive: Callable[[], None]) -> None:
        """Until ``count`` accounts are ACTIVE; ``alive()`` raises when a host has died."""
        while await self.active() < count:
            alive()
            await trio.sleep(ACCOUNTS_POLL_SECONDS)


# --- the agent hosts ---------------------------------------------------------------------


class Hosts:
    """The agent hosts' status files, summed."""

    def __init__(self, folder: Path, firsts: list[int]) -> None:
        self._paths = [folder / f"host-{first}.json" for first in firsts]
        self.processes: list[trio.Process] = []

    def status(self) -> HostStatus:
        total: dict[str, int] = {}
        for path in self._paths:
            try:
                one = json.loads(path.read_text())
            except FileNotFoundError:
                continue
            for key, value in one.items():
                total[key] = total.get(key, 0) + value
        return HostStatus(**total)

    async def wait(self, predicate: Callable[[HostStatus], bool]) -> HostStatus:
        while not predicate(status := self.status()):
            self.alive()
            await trio.sleep(POLL_SECONDS)
        return status

    def alive(self) -> None:
        """Raises RuntimeError when an agent host has ended (its agents with it)."""
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"an agent host ended ({process.returncode})")


def host_ranges(agents: int, hosts: int) -> list[tuple[int, int]]:
    """(first, count) per host: ``agents`` spread as evenly as can be over ``hosts``."""
    hosts = max(1, min(hosts, agents))
    size, extra = divmod(agents, hosts)
    ranges, first = [], 0
    for index in range(hosts):
        count = size + (index < extra)
        ranges.append((first, count))
        first += count
    return ranges


# --- profiling ---------------------------------------------------------------------------


class PySpy:
    """``py-spy record`` of one process into a raw collapsed-stacks file, until stopped."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._binary = os.environ.get("PYSPY", "/tmp/spy/bin/py-spy")

    async def start(self, pid: int, name: str, nursery: trio.Nursery) -> trio.Process | None:
        if not self._prefix:
            return None
        command = [self._binary, "record", "--pid", str(pid), "--format", "raw"]
        command += ["--nonblocking", "--rate", "50", "-o", f"{self._prefix}-{name}.txt"]
        process = await trio.lowlevel.open_process(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        nursery.start_soon(self._reaped, process)
        return process

    @classmethod
    async def _reaped(cls, process: trio.Process) -> None:
        """Wait for ``process``; ended and reaped also when the run fails or is cancelled."""
        try:
            await process.wait()
        finally:
            with trio.CancelScope(shield=True):
                await cls.stop(process)

    @staticmethod
    async def stop(process: trio.Process | None) -> None:
        if process is not None:
            # py-spy writes its file on SIGINT; stop_process kills it if it does not end.
            await stop_process(process, stop_signal=signal.SIGINT, grace=30)


# --- the run -----------------------------------------------------------------------------


class Run:
    """One run's processes and figures (``results``)."""

    def __init__(self, args: argparse.Namespace, folder: Path, nursery: trio.Nursery) -> None:
        self.args = args
        self.folder = folder
        self.nursery = nursery
        self.results: dict[str, Any] = {"agents": args.agents, "kinds": len(args.kinds)}
        self.grpc_port = free_port()
        self.api_port = free_port()
        self.server_config = folder / "server.yaml"
        self.spy = PySpy(os.environ.get("BENCH_AGENTS_PYSPY", ""))

    def python(self, *arguments: str) -> list[str]:
        return [sys.executable, *arguments]

    async def start_server(self) -> trio.Process:
        """Spawn ``kubesvc server`` (in the run's nursery, killed when it ends)."""
        command = self.python("-m", "kubesvc", "server", "-c", str(self.server_config))
        command += ["--log-level", os.environ.get("BENCH_SERVER_LOG", "WARNING")]
        process: trio.Process = await self.nursery.start(self._child, command, "server.log")
        return process

    async def _child(
        self, command: list[str], log_name: str, *, task_status: trio.TaskStatus[trio.Process]
    ) -> None:
        with (self.folder / log_name).open("ab") as log:
            async with open_process(
                command, stdout=log, stderr=log, stop_signal=signal.SIGKILL
            ) as process:
                task_status.started(process)
                await process.wait()

    def tail(self, log_name: str, lines: int = 15) -> str:
        path = self.folder / log_name
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    keep = os.environ.get("BENCH_AGENTS_FOLDER", "")  # to read the logs after the run
    with tempfile.TemporaryDirectory(prefix="bench_agents") as tmp:
        folder = Path(keep or tmp)
        os.makedirs(folder, exist_ok=True)
        async with trio.open_nursery() as nursery:
            run = Run(args, folder, nursery)
            try:
                await phases(run)
            except BaseException:
                for name in ("sim.log", "server.log", "hosts.log"):
                    print(f"--- last lines of {name}:\n{run.tail(name)}", file=sys.stderr)
                raise
            finally:
                nursery.cancel_scope.cancel()
        return run.results


async def phases(run: Run) -> None:
    args, folder, results = run.args, run.folder, run.results
    results["load_average_start"] = load_average()
    sim = await run.nursery.start(
        run._child, run.python("-m", "tests.bench.bench_agents", "--sim", str(folder),
                               "--agents", str(args.agents)), "sim.log",
    )  # fmt: skip
    built = await read_json(folder / "sim.json", 900, sim)
    results["sim_build_s"] = built["build_s"]
    store = folder / "kubesvc.db"
    write_server_config(run.server_config, run.grpc_port, run.api_port, store)
    server = await run.start_server()
    for n in range(args.agents):
        kubeconfig = folder / f"kubeconfig-{n}"
        write_agent_config(agent_config_path(folder, n), n, kubeconfig, run.grpc_port, args.kinds)

    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{run.api_port}", timeout=30) as http:
        accounts = Accounts(http)
        ranges = host_ranges(args.agents, args.hosts)
        hosts = Hosts(folder, [first for first, _ in ranges])
        results["hosts"] = len(ranges)

        # 1. sync
        spawned = time.perf_counter()
        host_processes = []
        for first, count in ranges:
            command = run.python("-m", "tests.bench.bench_agents", "--host", str(folder))
            command += ["--first", str(first), "--count", str(count)]
            command += ["--start-rate", str(args.start_rate / len(ranges))]
            host_processes.append(await run.nursery.start(run._child, command, "hosts.log"))
        hosts.processes = host_processes
        with trio.fail_after(args.sync_limit_s):
            await hosts.wait(lambda s: s.ready >= args.agents)
            await accounts.wait_active(args.agents, hosts.alive)
        results["sync_all_s"] = time.perf_counter() - spawned
        results["load_average_sync"] = load_average()
        results["server_sync_cpu_s"] = cpu_seconds(server.pid)

        # 2. quiet
        await trio.sleep(args.settle_s)
        pids = [process.pid for process in host_processes]
        server_cpu, hosts_cpu = cpu_seconds(server.pid), sum(map(cpu_seconds, pids))
        sim_cpu, wall = cpu_seconds(sim.pid), time.perf_counter()
        spy = await run.spy.start(server.pid, "idle", run.nursery)
        await trio.sleep(args.quiet_s)
        await run.spy.stop(spy)
        wall = time.perf_counter() - wall
        results["quiet_s"] = round(wall, 1)
        results["server_idle_cpu_pct"] = (cpu_seconds(server.pid) - server_cpu) / wall * 100
        hosts_idle = (sum(map(cpu_seconds, pids)) - hosts_cpu) / wall * 100
        results["agent_idle_cpu_pct_per_agent"] = hosts_idle / args.agents
        results["sim_idle_cpu_pct"] = (cpu_seconds(sim.pid) - sim_cpu) / wall * 100
        results["load_average_quiet"] = load_average()
        results["server_rss_mb"] = rss_kib(server.pid) / 1024
        results["hosts_rss_mb_per_agent"] = sum(rss_kib(pid) for pid in pids) / 1024 / args.agents
        results["sim_rss_mb"] = rss_kib(sim.pid) / 1024

        # 3. restart
        before = await sim_counts(folder, sim)
        sessions = hosts.status().sessions
        peak_before = rss_kib(server.pid, "VmHWM") / 1024
        killed = time.perf_counter()
        await stop_process(server, stop_signal=args.stop_signal, grace=30)
        results["server_stop_s"] = time.perf_counter() - killed
        server = await run.start_server()
        spy = await run.spy.start(server.pid, "storm", run.nursery)
        with trio.fail_after(args.reconnect_limit_s):
            await accounts.wait_up()
            results["server_up_s"] = time.perf_counter() - killed
            await accounts.wait_active(args.agents, hosts.alive)
            results["reconnect_all_s"] = time.perf_counter() - killed
            results["storm_server_cpu_s"] = cpu_seconds(server.pid)
            await run.spy.stop(spy)
            status = await hosts.wait(
                lambda s: s.ready >= args.agents and s.sessions >= sessions + args.agents
            )
            results["resumed_all_s"] = time.perf_counter() - killed
        results["load_average_storm"] = load_average()
        results["server_rss_mb_after_storm"] = rss_kib(server.pid) / 1024
        results["server_peak_rss_mb"] = max(peak_before, rss_kib(server.pid, "VmHWM") / 1024)
        # Listings start within a moment of a session's Welcome: give stragglers time to show.
        await trio.sleep(args.settle_s)
        after = await sim_counts(folder, sim)
        results["relists"] = (after["list"] - before["list"]) + (
            after["watchlist"] - before["watchlist"]
        )
        results["relist_lists"] = after["list"] - before["list"]
        results["relist_streaming"] = after["watchlist"] - before["watchlist"]
        results["resumed_watches"] = after["watch"] - before["watch"]
        results["agent_relists"] = hosts.status().listings
        results["watches"] = status.watches


def report(results: dict[str, Any], as_json: bool) -> None:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    agents = results["agents"]
    start = results["load_average_start"]
    print(f"cores: {os.cpu_count()} (shared); load average at start {start}")
    print(
        f"setup        : {agents} agents in {results['hosts']} host processes, one account "
        f"of {results['kinds']} kinds each ({results['watches']} watches) on its own kubesim "
        f"cluster (built in {results['sim_build_s']:.1f} s)"
    )
    print(
        f"sync         : every agent ready and every account ACTIVE {results['sync_all_s']:.1f} s "
        f"after the hosts' spawn (load {results['load_average_sync']}); server CPU "
        f"{results['server_sync_cpu_s']:.1f} s ({results['server_sync_cpu_s'] / agents * 1000:.1f}"
        f" ms per agent, its start included)"
    )
    print(
        f"quiet        : server CPU {results['server_idle_cpu_pct']:.2f} % of a core over "
        f"{results['quiet_s']} s, RSS {results['server_rss_mb']:.0f} MB (target < "
        f"{TARGET_RSS_MB:.0f}: {mark(results['server_rss_mb'] < TARGET_RSS_MB)}); agents "
        f"{results['agent_idle_cpu_pct_per_agent']:.3f} % and "
        f"{results['hosts_rss_mb_per_agent']:.1f} MB each; kubesim "
        f"{results['sim_idle_cpu_pct']:.1f} % (load {results['load_average_quiet']})"
    )
    reconnect = results["reconnect_all_s"]
    print(
        f"restart      : server stopped in {results['server_stop_s']:.1f} s, serving again "
        f"{results['server_up_s']:.1f} s after the stop; every account "
        f"ACTIVE {reconnect:.1f} s after the stop (target < {TARGET_RECONNECT_S:.0f}: "
        f"{mark(reconnect < TARGET_RECONNECT_S)}), every agent ready "
        f"{results['resumed_all_s']:.1f} s after; server CPU {results['storm_server_cpu_s']:.1f} s"
        f" ({results['storm_server_cpu_s'] / agents * 1000:.1f} ms per agent, its start "
        f"included), peak RSS {results['server_peak_rss_mb']:.0f} MB "
        f"(load {results['load_average_storm']})"
    )
    print(
        f"relists      : {results['relists']} (target 0: {mark(results['relists'] == 0)}; "
        f"{results['relist_lists']} lists, {results['relist_streaming']} streaming lists; "
        f"{results['resumed_watches']} watches resumed; the agents count "
        f"{results['agent_relists']})"
    )
    if as_json:
        rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in results.items()}
        print(json.dumps(rounded))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--agents", type=int, default=1_000)
    parser.add_argument("--hosts", type=int, default=4, help="agent host processes")
    parser.add_argument("--kinds", type=lambda text: tuple(text.split(",")), default=KINDS)
    parser.add_argument(
        "--start-rate",
        type=float,
        default=50.0,
        help="agents started per second over all hosts, as a rollout would (0: all at once)",
    )
    parser.add_argument("--quiet-s", type=float, default=60.0)
    parser.add_argument("--settle-s", type=float, default=10.0)
    parser.add_argument("--sync-limit-s", type=float, default=900.0)
    parser.add_argument("--reconnect-limit-s", type=float, default=600.0)
    parser.add_argument(
        "--stop-signal",
        type=lambda name: signal.Signals["SIG" + name.upper().removeprefix("SIG")],
        default=signal.SIGKILL,
        help="how the server is stopped for the restart: KILL (a crash) or TERM (a drain)",
    )
    parser.add_argument("--sim", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--host", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.sim:
        trio.run(serve_sim, args.agents, Path(args.sim))
    elif args.host:
        trio.run(run_host, Path(args.host), args.first, args.count, args.start_rate)
    else:
        report(trio.run(bench, args), args.json)


if __name__ == "__main__":
    main()
