"""A burst of pod events through a 1 MiB budget to a slow receiver (issue 4's budget point).

The agent runs as its own process (``python -m kubesvc agent -c FILE``) so that its RSS is
its own; kubesim and the recording receiver (tests/e2e/receiver.py, acking each batch after
a delay) run in the test's trio loop. While kubesim creates, updates and deletes pods, the
test scrapes the agent's budget gauges (``/metrics``: in use, high-water) and, afterwards,
checks that

* bytes in flight never exceeded ``budget.bytes`` (the high-water mark is at most the
  capacity; the single-oversize rule, where one event larger than the whole budget is
  admitted alone, cannot apply: every pod is ~4.4 KB);
* the agent's peak RSS (VmHWM) stayed within 25 MB of its RSS before the burst;
* the receiver holds the final state of every pod: same names, same resourceVersions, same
  uids as kubesim.

The default run makes a burst of 20,000 events (about 25 s on 2 shared cores). The full size
of the acceptance point, 100,000 events, is marked ``slow``:
``.venv/bin/python -m pytest -m slow tests/e2e/test_budget_burst.py`` (about 2 min).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
import yaml

import kubesim
import wire

from .._procs import kubesvc_command, open_process
from .._wait import Changes
from .harness import agent_config
from .receiver import Receiver

BUDGET_BYTES = 2**20
RSS_ALLOWANCE_KIB = 25 * 1024
NAMESPACE = "burst"
ACCOUNT = "k1"


class _Meta(msgspec.Struct):
    name: str
    uid: str
    resourceVersion: str


class _Obj(msgspec.Struct):
    metadata: _Meta


_OBJ = msgspec.json.Decoder(_Obj)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _proc_kib(pid: int, name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {name} in /proc/{pid}/status")


@dataclass
class BudgetSamples:
    """What the scraper saw of the agent's budget gauges."""

    capacity: int = 0
    in_use: int = 0
    max_in_use: int = 0
    high_water: int = 0
    samples: int = 0
    changed: Changes = field(default_factory=Changes)  # notified after every sample


def _gauges(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("kubesvc_budget_") and not line.startswith("#"):
            name, _, value = line.partition(" ")
            found[name] = int(float(value))
    return found


async def _scrape_budget(port: int, samples: BudgetSamples) -> None:
    """Sample the agent's budget gauges every 50 ms, as Prometheus would (a sampler, not a
    wait: the test waits on ``samples.changed``)."""
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=5) as client:
        while True:
            try:
                response = await client.get("/metrics")
            except httpx.TransportError:  # not listening yet: the agent is starting
                await trio.sleep(0.05)
                continue
            gauges = _gauges(response.text)
            samples.capacity = gauges["kubesvc_budget_capacity_bytes"]
            samples.in_use = gauges["kubesvc_budget_in_use_bytes"]
            samples.max_in_use = max(samples.max_in_use, samples.in_use)
            samples.high_water = gauges["kubesvc_budget_high_water_bytes"]
            samples.samples += 1
            samples.changed.notify()
            await trio.sleep(0.05)


async def _fail_if_it_exits(agent: trio.Process, log: Path) -> None:
    """The agent must outlive the test: if it exits, fail at once with its log."""
    await agent.wait()
    text = await trio.Path(log).read_text()
    raise AssertionError(f"the agent exited ({agent.returncode}):\n{text}")


def _kubesim_state(sim: kubesim.Cluster) -> dict[str, tuple[str, str]]:
    return {
        pod["metadata"]["name"]: (pod["metadata"]["uid"], pod["metadata"]["resourceVersion"])
        for pod in sim.list("", "v1", "pods", NAMESPACE)
    }


def _receiver_state(receiver: Receiver) -> dict[str, tuple[str, str]]:
    state: dict[str, tuple[str, str]] = {}
    for (account, _, kind, namespace, name), body in receiver.objects.items():
        if account == ACCOUNT and kind == "Pod" and namespace == NAMESPACE:
            meta = _OBJ.decode(body).metadata
            state[name] = (meta.uid, meta.resourceVersion)
    return state


def _converged(receiver: Receiver, expected: dict[str, tuple[str, str]]) -> bool:
    # Checked after every batch: counting is O(1) (only this namespace is watched); decoding
    # every body is done only once the counts agree.
    return len(receiver.objects) == len(expected) and _receiver_state(receiver) == expected


async def _burst(sim: kubesim.Cluster, events: int) -> None:
    """``events`` pod events: ~80 % creates, the rest updates and a few deletes, in steps
    that let kubesim serve the watch in between (the agent sees a stream, not one lump)."""
    deletes = min(100, events // 100)
    updates = events // 5 - deletes
    creates = events - updates - deletes
    names: list[str] = []
    step = 1000
    for start in range(0, creates, step):
        names += kubesim.load_pods(sim, min(step, creates - start), namespaces=[NAMESPACE])
        await trio.lowlevel.checkpoint()
    for index, name in enumerate(names[:updates]):
        pod = sim.get("", "v1", "pods", NAMESPACE, name)
        pod["metadata"]["labels"]["generation"] = "2"
        sim.update(pod)
        if index % step == 0:
            await trio.lowlevel.checkpoint()
    for name in names[-deletes:]:
        sim.delete("", "v1", "pods", NAMESPACE, name)
        await trio.lowlevel.checkpoint()


async def _run_burst(tmp_path: Path, events: int, *, limit: float) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=events + 5000, controllers=False))
    kubesim.load_pods(sim, 500, namespaces=[NAMESPACE])
    # Slow: each batch is acked 2 ms after it arrived, and the receiver reads nothing
    # meanwhile (so gRPC flow control pushes back too).
    receiver = Receiver(ack_delay=0.002, keep_payloads=False)
    samples = BudgetSamples()
    metrics_port = _free_port()
    with trio.fail_after(limit):
        async with (
            wire.open_loop(),
            kubesim.open_server(sim) as kube,
            trio.open_nursery() as nursery,
        ):
            kubeconfig = tmp_path / "kubeconfig"
            kube.kubeconfig(kubeconfig, user="admin")
            grpc_port = await nursery.start(wire.serve, receiver.handler, "127.0.0.1", 0)
            accounts: list[dict[str, Any]] = [
                {
                    "name": ACCOUNT,
                    "kubeConfigFile": str(kubeconfig),
                    "kinds": ["Pod"],
                    "namespaces": [NAMESPACE],
                }
            ]
            config = agent_config(
                grpc_port,
                accounts,
                budget={"bytes": "1Mi"},
                prometheus={"enabled": True, "port": metrics_port},
                logging={"level": "WARN"},
            )
            config_path = tmp_path / "kubesvc.yaml"
            config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
            log_path = tmp_path / "agent.log"
            with log_path.open("wb") as log:
                # The watcher and the scraper live in a nursery inside the process's block,
                # so they are gone before the agent is stopped (and the exit is not a failure).
                async with (
                    open_process(
                        kubesvc_command("agent", "-c", str(config_path)),
                        stdout=log,
                        stderr=log,
                        stop_signal=signal.SIGINT,
                    ) as agent,
                    trio.open_nursery() as watching,
                ):
                    watching.start_soon(_fail_if_it_exits, agent, log_path)
                    watching.start_soon(_scrape_budget, metrics_port, samples)
                    synced = (ACCOUNT, "v1", "Pod", NAMESPACE)
                    await receiver.changed.wait_for(
                        lambda: synced in receiver.resume, timeout=limit, what="initial sync"
                    )
                    # Settled: the initial list acknowledged, nothing held in the budget.
                    await samples.changed.wait_for(
                        lambda: samples.in_use == 0, timeout=limit, what="budget drained"
                    )
                    baseline_kib = _proc_kib(agent.pid, "VmRSS")

                    await _burst(sim, events)
                    expected = _kubesim_state(sim)
                    await receiver.changed.wait_for(
                        lambda: _converged(receiver, expected),
                        timeout=limit,
                        what="the receiver holds kubesim's pods",
                    )
                    peak_kib = _proc_kib(agent.pid, "VmHWM")
                    # One more scrape, after the last ack.
                    seen = samples.samples
                    await samples.changed.wait_for(
                        lambda: samples.samples > seen, timeout=limit, what="a last scrape"
                    )
                    watching.cancel_scope.cancel()
            nursery.cancel_scope.cancel()

    growth = peak_kib - baseline_kib
    # Shown with pytest -s: the figures behind the assertions.
    print(
        f"\nburst of {events} events: budget capacity {samples.capacity}, high-water "
        f"{samples.high_water}, max in use seen {samples.max_in_use} ({samples.samples} "
        f"samples); agent RSS {baseline_kib / 1024:.1f} MB before, peak "
        f"{peak_kib / 1024:.1f} MB (+{growth / 1024:.1f} MB); receiver got "
        f"{receiver.events} records in {receiver.batches} batches; load "
        f"{'/'.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    assert samples.capacity == BUDGET_BYTES
    assert samples.samples > 10
    assert samples.high_water <= samples.capacity, samples
    assert samples.max_in_use <= samples.capacity, samples
    assert samples.high_water > samples.capacity // 2, f"never under pressure: {samples}"
    assert growth <= RSS_ALLOWANCE_KIB, (
        f"agent RSS {baseline_kib} KiB before the burst, peak {peak_kib} KiB "
        f"(+{growth / 1024:.1f} MB, allowed 25 MB)"
    )
    assert len(expected) == 500 + events - events // 5 - min(100, events // 100)


async def test_burst_stays_inside_the_budget_and_arrives_whole(tmp_path: Path) -> None:
    await _run_burst(tmp_path, 20_000, limit=90)


@pytest.mark.slow
@pytest.mark.timeout(400)  # its own bound is 300 s
async def test_full_size_burst_of_100000_events(tmp_path: Path) -> None:
    await _run_burst(tmp_path, 100_000, limit=300)
