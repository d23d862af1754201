"""The agent's Kubernetes client alone: CPU per short request and watch-body throughput.

    .venv/bin/python -m tests.bench.bench_kube_client [--requests 3000] [--concurrency 50]
                                                      [--watch-mib 32] [--json]

kubesim runs as a ``kubesvc sim`` child process (its CPU is not this process's), over HTTPS
with a CA and a token as a real cluster, or over plain HTTP. This process runs the client
only, so ``time.process_time()`` per request is the client's own cost. Per transport:

- ``h2``: HTTPS, the agent's own HTTP/2 (what a real cluster gets);
- ``http1_tls``: HTTPS with HTTP/2 turned off (``http2=False``): HTTP/1.1 over TLS;
- ``http1_plain``: plain ``http://``: HTTP/1.1 keep-alive;
- ``httpx_http1_plain`` / ``httpx_http1_tls``: httpx's HTTP/1.1 pool doing the same requests
  (the peer the agent's own HTTP/1.1 pool is measured against).

Short requests: half GETs of one ConfigMap, half POSTs creating one (as an operation does),
``--concurrency`` at a time (kubesim's CPU per request is printed too: over TLS its
Hypercorn HTTP/2 is much of what a request costs on this machine). Watch: ``--watch-mib``
MiB of 4.4 KB pod events replayed from kubesim's history through ``stream()``, MiB/s and
client CPU per MiB. The machine's 2 cores are shared by kubesim and the client (and whatever
else runs): the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from itertools import count
from pathlib import Path
from typing import Any

import httpx
import trio

from agent import AccountConfig, KubeClient, open_kube_client
from agent.kube._kubeconfig import ClusterAccess, load_kubeconfig

_names = count()


async def _start_sim(work: Path, tls: bool, pods: int, nursery: trio.Nursery) -> trio.Process:
    kubeconfig = work / ("tls.kubeconfig" if tls else "plain.kubeconfig")
    command = [sys.executable, "-m", "kubesvc", "sim", "--port", "0", "--kubeconfig"]
    command += [str(kubeconfig), "--objects", str(pods), "--namespaces", "1"]
    command += ["--watch-history", str(pods + 10)]
    if tls:
        command.append("--tls")
    process: trio.Process = await nursery.start(
        partial(trio.run_process, command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    )
    with trio.fail_after(120):
        while not kubeconfig.exists() or not kubeconfig.read_text():
            await trio.sleep(0.1)
    access = load_kubeconfig(kubeconfig)
    url = access.server
    with trio.fail_after(120):
        while True:
            try:
                async with httpx.AsyncClient(verify=False) as probe:
                    await probe.get(url + "/version")
                break
            except httpx.HTTPError:
                await trio.sleep(0.2)
    return process


def _configmap() -> bytes:
    name = f"bench-{next(_names):07d}"
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default"},
            "data": {"key": "value"},
        }
    ).encode()


Call = Callable[[str, str, bytes | None], Awaitable[int]]
_SIM: dict[str, int] = {}  # "pid" of the kubesim child process serving now


def _sim_cpu() -> float:
    """CPU seconds of the kubesim child so far (0 when there is none)."""
    pid = _SIM.get("pid")
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drive(call: Call, requests: int, concurrency: int) -> dict[str, float]:
    """``requests`` calls, ``concurrency`` at a time; CPU us and wall per request."""
    path = "/api/v1/namespaces/default/configmaps"
    for _ in range(20):  # warm up (connections, discovery caches)
        await call("POST", path, _configmap())
    await call("POST", path, json.dumps({"metadata": {"name": "fixed"}}).encode())
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            if left % 2:
                status = await call("GET", f"{path}/fixed", None)
            else:
                status = await call("POST", path, _configmap())
            if status >= 300:
                raise RuntimeError(f"status {status}")

    cpu, wall, sim = time.process_time(), time.perf_counter(), _sim_cpu()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker)
    cpu, wall, sim = time.process_time() - cpu, time.perf_counter() - wall, _sim_cpu() - sim
    return {
        "cpu_us_per_request": cpu / requests * 1e6,
        "kubesim_cpu_us_per_request": sim / requests * 1e6,
        "requests_per_s": requests / wall,
    }


async def _own(access: ClusterAccess, *, http2: bool, args: argparse.Namespace) -> dict[str, float]:
    async with trio.open_nursery() as readers:
        async with KubeClient(access, http2=http2, nursery=readers) as client:

            async def call(method: str, path: str, body: bytes | None) -> int:
                headers = {"Content-Type": "application/json"} if body else None
                reply = await client.request(method, path, headers=headers, content=body)
                return reply.status_code

            figures = await _drive(call, args.requests, args.concurrency)
        readers.cancel_scope.cancel()
    return figures


async def _httpx(access: ClusterAccess, args: argparse.Namespace) -> dict[str, float]:
    verify: Any = False
    if access.ca_pem:
        import ssl

        verify = ssl.create_default_context(cadata=access.ca_pem.decode())
    headers = {"Authorization": f"Bearer {access.token}", "Accept": "application/json"}
    limits = httpx.Limits(max_connections=1024, max_keepalive_connections=1024)
    async with httpx.AsyncClient(
        base_url=access.server, verify=verify, headers=headers, limits=limits, http2=False
    ) as client:

        async def call(method: str, path: str, body: bytes | None) -> int:
            extra = {"Content-Type": "application/json"} if body else None
            response = await client.request(method, path, content=body, headers=extra)
            return response.status_code

        return await _drive(call, args.requests, args.concurrency)


async def _watch(kubeconfig: Path, *, http2: bool, mib: int) -> dict[str, float]:
    account = AccountConfig("bench", kube_config_file=str(kubeconfig))
    total = 0
    async with open_kube_client(account, environ={}, http2=http2) as client:
        params = {"watch": "1", "resourceVersion": "1", "timeoutSeconds": "600"}
        cpu, wall = time.process_time(), time.perf_counter()
        async with client.stream("GET", "/api/v1/pods", params=params) as response:
            while total < mib * 2**20 and (chunk := await response.receive_some()):
                total += len(chunk)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"mib_per_s": total / 2**20 / wall, "cpu_ms_per_mib": cpu * 1000 / (total / 2**20)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"load_average_start": os.getloadavg()[0]}
    pods = max(1, args.watch_mib * 2**20 // 4400 + 200)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for tls in (True, False):
            async with trio.open_nursery() as nursery:
                process = await _start_sim(work, tls, pods, nursery)
                _SIM["pid"] = process.pid
                kubeconfig = work / ("tls.kubeconfig" if tls else "plain.kubeconfig")
                access = load_kubeconfig(kubeconfig)
                suffix = "tls" if tls else "plain"
                if tls:
                    results["h2"] = await _own(access, http2=True, args=args)
                    results["h2_watch"] = await _watch(kubeconfig, http2=True, mib=args.watch_mib)
                results[f"http1_{suffix}"] = await _own(access, http2=False, args=args)
                results[f"http1_{suffix}_watch"] = await _watch(
                    kubeconfig, http2=False, mib=args.watch_mib
                )
                results[f"httpx_http1_{suffix}"] = await _httpx(access, args)
                process.terminate()
                nursery.cancel_scope.cancel()
    results["load_average_end"] = os.getloadavg()[0]
    results["note"] = "2 cores shared by kubesim, the client and everything else"
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--watch-mib", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = trio.run(run, args)
    for name, value in results.items():
        if isinstance(value, dict):
            figures = ", ".join(f"{k} {v:,.1f}" for k, v in value.items())
            print(f"{name:>22}: {figures}")
    print(
        f"load average {results['load_average_start']:.1f} -> {results['load_average_end']:.1f}; "
        f"{results['note']}"
    )
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
