"""The chaos run: kubesim -> proxy -> agent -> proxy -> server, under churn, faults in between.

kubesim (over TLS) and the churn generator run in the test's trio loop; the agent and the
server are real ``kubesvc`` subprocesses with config files in ``tmp_path`` (the server on a
SQLite file, so a restart keeps its cache). Two :class:`ChaosProxy` sit on the agent's two
links. For each fault of the schedule:

1. crashed processes are looked for (a process that ended without being told to is a
   finding: it is started again, and the run fails at the end);
2. the fault is inflicted and lasts its duration (a cut or silent link, or a process that
   stays down); it ends when the link is restored or the new process has been spawned;
3. recovery: a probe ConfigMap is changed in kubesim, and the server's REST API is polled
   until it holds that resourceVersion. The agent and the server are separate processes,
   so there is no event to wait on: polling every 50 ms with a deadline (tests/_wait.py's
   ``wait_until``) is the measurement.

A SIGTERM is what Kubernetes sends before it stops a pod: the process must drain and exit 0
within the pod's 30 s grace; any other end (a signal's exit code, still running, killed) is
a finding. It is sent once the process logged that it runs (its handler is set by then).

At checkpoints the churn pauses and the server's objects (REST ``/v1/objects``) are compared
with kubesim's, kind by kind: missing, extra, stale (another resourceVersion or uid) and
bodies that differ at the same resourceVersion; the comparison is repeated until equal or a
bound runs out (the cache is eventually consistent: the agent may still be catching up).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import trio
import yaml

import kubesim

from .._procs import Role, kubesvc_command
from .._wait import wait_until
from .cache_check import expected_objects
from .chaos_proxy import ChaosProxy
from .chaos_schedule import (
    Checkpoint,
    FaultKind,
    Outcome,
    Report,
    ScheduledFault,
    compare_objects,
    schedule,
)
from .harness import ObjectKey, Task, agent_config, start_task

__all__ = ["ChaosSettings", "run_chaos"]

ACCOUNT = "k1"
# The kinds the agent watches (and the checkpoints compare): everything the churn touches,
# plus what kubesim's controllers make of its Deployments.
KINDS = {
    ("v1", "ConfigMap"),
    ("v1", "Secret"),
    ("v1", "Service"),
    ("v1", "Pod"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "ReplicaSet"),
}
PROBE = ("default", "chaos-probe")  # the ConfigMap whose changes measure recovery
POLL = 0.05
CHECK_POLL = 0.25  # a checkpoint's comparison lists every object: not every 50 ms
TERM_GRACE = 30.0  # Kubernetes' default grace period: a pod still running then is killed
# What each role logs once it runs (its SIGTERM handler is set): a SIGTERM before that would
# find Python's default handler (exit -15) in a process that has not started yet.
SERVER_READY = r"gRPC on \S+, REST on "
AGENT_READY = r"connected to server"


@dataclass(frozen=True)
class ChaosSettings:
    seed: int
    faults: int
    durations: tuple[float, float]  # of each fault, seconds
    churn_rate: float = 20.0  # kubesim writes per second
    checkpoint_every: int = 5
    p90_bound: float = 5.0
    max_bound: float = 15.0
    recovery_patience: float = 30.0  # a probe not visible by then counts as never recovered
    converge_patience: float = 30.0  # a checkpoint not equal by then counts its differences


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class _Run:
    settings: ChaosSettings
    sim: kubesim.Cluster
    http: httpx.AsyncClient
    agent: Role
    server: Role
    kube_link: ChaosProxy
    server_link: ChaosProxy
    nursery: trio.Nursery
    churn: kubesim.Churn
    report: Report
    churn_task: Task | None = None
    probes: int = 0
    down: set[str] = field(default_factory=set)  # roles stopped on purpose right now

    # --- the churn ---------------------------------------------------------------------

    async def resume_churn(self) -> None:
        async def run(*, task_status: Any) -> None:
            await self.churn.run(task_status=task_status)

        _, self.churn_task = await start_task(self.nursery, run)

    async def pause_churn(self) -> None:
        if self.churn_task is not None:
            await self.churn_task.stop()
            self.churn_task = None

    # --- crashes -------------------------------------------------------------------------

    async def restart_crashed(self, findings: list[str]) -> None:
        """A process that ended without being told to is a finding; it is started again so
        the run can go on (and show whatever else is wrong)."""
        for role in (self.server, self.agent):
            code = role.exited()
            if role.name in self.down or code is None:
                continue
            findings.append(f"the {role.name} exited by itself (exit {code}): {role.log_tail(1)}")
            await role.start()

    # --- faults --------------------------------------------------------------------------

    async def inflict(self, fault: ScheduledFault, outcome: Outcome) -> None:
        """Start the fault, let it last, end it (returns when it has ended)."""
        kind = fault.kind
        link = self.kube_link if "kube" in kind.value else self.server_link
        if kind in (FaultKind.CUT_KUBE, FaultKind.CUT_SERVER):
            link.cut()
            await trio.sleep(fault.duration)
            link.restore()
        elif kind in (FaultKind.SILENT_KUBE_RESUME, FaultKind.SILENT_SERVER_RESUME):
            link.silence()
            await trio.sleep(fault.duration)
            link.restore()
        elif kind in (FaultKind.SILENT_KUBE_CUT, FaultKind.SILENT_SERVER_CUT):
            link.silence()
            await trio.sleep(fault.duration)
            link.cut()
            link.restore()
        else:
            role = self.agent if "agent" in kind.value else self.server
            self.down.add(role.name)
            if kind in (FaultKind.KILL_AGENT, FaultKind.KILL_SERVER):
                code = await role.kill()
                outcome.notes.append(f"exit {code}")
            else:
                term, took, ready = await role.terminate(TERM_GRACE)
                if not ready:
                    outcome.findings.append(
                        f"not running {TERM_GRACE} s after its start (no {role.ready!r} "
                        f"logged), SIGTERMed anyway: {role.log_tail(1)}"
                    )
                if term is None:
                    outcome.findings.append(f"still running {TERM_GRACE} s after SIGTERM")
                else:
                    outcome.notes.append(f"exit {term} in {took:.1f} s")
                    if term != 0:  # a graceful drain exits 0; -15 is no drain at all
                        outcome.findings.append(
                            f"SIGTERM ended it with exit {term}, not 0: {role.log_tail(1)}"
                        )
            await trio.sleep(fault.duration)
            await role.start()
            self.down.discard(role.name)

    async def measure_recovery(self, outcome: Outcome) -> float | None:
        """Seconds from now (the fault's end) until a probe change made now is visible
        through the server's REST API; None if not within the patience."""
        ended = trio.current_time()
        self.probes += 1
        namespace, name = PROBE
        changed = self.sim.patch(
            "", "v1", "configmaps", namespace, name, {"data": {"probe": str(self.probes)}}
        )
        want = int(changed["metadata"]["resourceVersion"])

        async def visible() -> bool:
            await self.restart_crashed(outcome.findings)
            held = await self.probe_version()
            return held is not None and held >= want

        try:
            await wait_until(
                visible, timeout=self.settings.recovery_patience, interval=POLL, what="probe"
            )
        except AssertionError:
            return None  # the table and the failures say "never"
        return trio.current_time() - ended

    async def probe_version(self) -> int | None:
        namespace, name = PROBE
        try:
            response = await self.http.get(
                "/v1/objects",
                params={"account": ACCOUNT, "kind": "ConfigMap", "namespace": namespace},
            )
        except httpx.TransportError:
            return None  # the server is not listening (yet)
        if response.status_code != 200:
            return None
        for item in response.json()["items"]:
            if item["name"] == name:
                return int(item["resourceVersion"])
        return None

    # --- checkpoints ---------------------------------------------------------------------

    async def server_objects(self) -> dict[ObjectKey, dict[str, Any]] | None:
        found: dict[ObjectKey, dict[str, Any]] = {}
        token: str | None = None
        while True:
            params = {"account": ACCOUNT, "limit": "10000"}
            if token:
                params["continue"] = token
            try:
                response = await self.http.get("/v1/objects", params=params)
            except httpx.TransportError:
                return None
            if response.status_code != 200:
                return None
            page = response.json()
            for item in page["items"]:
                key = (item["apiVersion"], item["kind"], item["namespace"], item["name"])
                found[key] = item["object"]
            token = page["continue"]
            if not token:
                return found

    async def compare(self, after: int, waited: float) -> Checkpoint:
        want = expected_objects(self.sim, KINDS)
        have = await self.server_objects()
        if have is None:
            return Checkpoint(after, len(want), len(want), 0, 0, 0, waited, ("REST unreachable",))
        return compare_objects(after, want, have, waited)

    async def checkpoint(self, after: int) -> None:
        """Pause the churn, wait (bounded) until the server equals kubesim, record it."""
        await self.pause_churn()
        started = trio.current_time()
        result: Checkpoint | None = None

        async def converged() -> bool:
            nonlocal result
            await self.restart_crashed(self.report.findings)
            result = await self.compare(after, trio.current_time() - started)
            return result.equal

        try:
            await wait_until(
                converged,
                timeout=self.settings.converge_patience,
                interval=CHECK_POLL,
                what="the server holds kubesim's objects",
            )
        except AssertionError:
            pass  # the differences are recorded below, and fail the run
        if result is None or not result.equal:
            result = await self.compare(after, trio.current_time() - started)
        self.report.checkpoints.append(result)
        await self.resume_churn()


async def _wait_healthy(http: httpx.AsyncClient, server: Role, patience: float) -> None:
    async def healthy() -> bool:
        code = server.exited()
        assert code is None, f"the server exited (exit {code}): {server.log_tail(20)}"
        try:
            return (await http.get("/health")).status_code == 200
        except httpx.TransportError:
            return False  # not listening yet

    await wait_until(healthy, timeout=patience, interval=POLL, what="the server's /health")


def _write_configs(
    tmp_path: Path, kube: Any, kube_port: int, server_port: int, grpc_port: int, api_port: int
) -> tuple[Path, Path]:
    kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig")
    document = yaml.safe_load(kubeconfig.read_text())
    document["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{kube_port}"
    kubeconfig.write_text(yaml.safe_dump(document))
    server_yaml = tmp_path / "server.yaml"
    server_yaml.write_text(
        yaml.safe_dump(
            {
                "grpc": {"host": "127.0.0.1", "port": grpc_port},
                "api": {"host": "127.0.0.1", "port": api_port},
                "store": {"type": "sqlite", "path": str(tmp_path / "server.db")},
            }
        )
    )
    account = {
        "name": ACCOUNT,
        "kubeConfigFile": str(kubeconfig),
        "kinds": sorted(kind for _, kind in KINDS),
    }
    agent_yaml = tmp_path / "agent.yaml"
    agent_yaml.write_text(
        yaml.safe_dump(agent_config(server_port, [account], logging={"level": "INFO"}))
    )
    return server_yaml, agent_yaml


async def run_chaos(tmp_path: Path, settings: ChaosSettings, report: Report) -> None:
    """Run the schedule of ``settings`` against a fresh stack, recording into ``report`` as
    it goes (so a run cut short still shows what it saw); every process it started has ended
    and been reaped when this returns or raises."""
    plan = schedule(settings.seed, settings.faults, settings.durations)
    sim = kubesim.Cluster()
    kubesim.load_pods(sim, 30, namespaces=["team-a"])
    namespace, name = PROBE
    sim.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"probe": "0"},
        }
    )
    grpc_port, api_port = _free_port(), _free_port()
    server_link = ChaosProxy(("127.0.0.1", grpc_port), "server link")
    async with (
        kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=5.0) as http,
        trio.open_nursery() as nursery,
    ):
        kube_link = ChaosProxy(("127.0.0.1", kube.port), "kube link")
        await nursery.start(kube_link.serve)
        await nursery.start(server_link.serve)
        server_yaml, agent_yaml = _write_configs(
            tmp_path, kube, kube_link.port, server_link.port, grpc_port, api_port
        )
        server, agent = (
            Role(nursery, role, kubesvc_command(role, "-c", str(config)), log, ready=ready)
            for role, config, log, ready in (
                ("server", server_yaml, tmp_path / "server.log", SERVER_READY),
                ("agent", agent_yaml, tmp_path / "agent.log", AGENT_READY),
            )
        )
        churn = kubesim.Churn(
            sim,
            rate=settings.churn_rate,
            seed=settings.seed,
            kinds=("configmaps", "secrets", "services", "pods", "deployments"),
            population=30,
        )
        run = _Run(
            settings, sim, http, agent, server, kube_link, server_link, nursery, churn, report
        )
        try:
            await server.start()
            await _wait_healthy(http, server, 30)
            await agent.start()
            await run.checkpoint(0)  # the initial sync; starts the churn
            for fault in plan:
                outcome = Outcome(fault)
                report.outcomes.append(outcome)  # shown even if the run is cut short in it
                await run.restart_crashed(outcome.findings)
                await run.inflict(fault, outcome)
                outcome.recovery = await run.measure_recovery(outcome)
                if fault.index % settings.checkpoint_every == 0 or fault.index == len(plan):
                    await run.checkpoint(fault.index)
            await run.pause_churn()
            stats = churn.statistics()
            print(
                f"\nchurn: {stats.created} created, {stats.updated} updated, {stats.deleted} "
                f"deleted; kube link {kube_link.statistics}; server link "
                f"{server_link.statistics}; agent started {agent.starts}x, server "
                f"{server.starts}x"
            )
        finally:
            await agent.aclose()
            await server.aclose()
            nursery.cancel_scope.cancel()
