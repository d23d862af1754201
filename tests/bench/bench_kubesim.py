"""How fast kubesim serves 4 KB pods: watch events/s and list objects/s to a raw httpx reader.

The server runs in a child process (so the reader's CPU is not the server's) with N realistic
pods loaded. Three figures:
- watch (initial): ``watch=true`` with no resourceVersion, N synthetic ADDED events;
- watch (history): ``watch=true&resourceVersion=<before the load>``, the same N events
  replayed from the event ring (the path live events take);
- list: pages of ``limit=500`` over all N pods.
The reader only splits lines / counts items, as a real agent's raw reader does.

Usage: .venv/bin/python -m tests.bench.bench_kubesim [--json] [--pods N] [--tls [--http2]]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time

import httpx
import msgspec
import trio

TARGET_EVENTS_PER_S = 50_000


class _Page(msgspec.Struct):
    metadata: dict[str, object]
    items: list[msgspec.Raw]


def serve(pods: int, tls: bool) -> None:
    """Child process: load pods, print 'url token rv_before ca_file', serve until stdin closes."""
    import kubesim

    async def main() -> None:
        sim = kubesim.Cluster(kubesim.SimConfig(watch_history=pods + 100, controllers=False))
        before = sim.resource_version
        async with kubesim.open_server(sim, tls=tls) as server:
            kubesim.load_pods(sim, pods, namespaces=4)
            ca_file = "-"
            if server.ca_pem is not None:
                with tempfile.NamedTemporaryFile("wb", suffix=".pem", delete=False) as ca:
                    ca.write(server.ca_pem)
                    ca_file = ca.name
            print(server.url, server.users["admin"].token, before, ca_file, flush=True)
            await trio.to_thread.run_sync(sys.stdin.read)

    trio.run(main)


async def _watch(client: httpx.AsyncClient, params: dict[str, str], expected: int) -> float:
    start = time.perf_counter()
    count = 0
    async with client.stream("GET", "/api/v1/pods", params={"watch": "true", **params}) as resp:
        resp.raise_for_status()
        async for chunk in resp.aiter_raw():
            count += chunk.count(b"\n")
            if count >= expected:
                break
    return expected / (time.perf_counter() - start)


async def _list(client: httpx.AsyncClient, expected: int) -> float:
    start = time.perf_counter()
    count = 0
    token = ""
    while True:
        params = {"limit": "500"}
        if token:
            params["continue"] = token
        resp = await client.get("/api/v1/pods", params=params)
        resp.raise_for_status()
        page = msgspec.json.decode(resp.content, type=_Page)
        count += len(page.items)
        token = str(page.metadata.get("continue") or "")
        if not token:
            break
    assert count == expected, f"listed {count} pods, expected {expected}"
    return count / (time.perf_counter() - start)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    import os

    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(
    url: str, token: str, before: int, pods: int, pid: int, ca_file: str, http2: bool
) -> dict[str, float]:
    """Each rate by the wall clock, and per CPU-second of the server process (the machine
    may be shared: the per-CPU figure says what kubesim costs, whatever the load)."""
    headers = {"authorization": f"Bearer {token}"}
    figures: dict[str, float] = {"pods": pods}
    verify: ssl.SSLContext | bool = True
    if ca_file != "-":
        verify = ssl.create_default_context(cafile=ca_file)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=60, verify=verify, http2=http2
    ) as client:
        for name in ("watch_initial", "watch_history", "list"):
            cpu = _cpu_seconds(pid)
            if name == "watch_initial":
                rate = await _watch(client, {}, pods)
            elif name == "watch_history":
                rate = await _watch(client, {"resourceVersion": str(before)}, pods)
            else:
                rate = await _list(client, pods)
            cpu = max(_cpu_seconds(pid) - cpu, 0.01)
            unit = "objects" if name == "list" else "events"
            figures[f"{name}_{unit}_per_s"] = round(rate)
            figures[f"{name}_{unit}_per_server_cpu_s"] = round(pods / cpu)
    figures["watch_events_per_s"] = min(
        figures["watch_initial_events_per_s"], figures["watch_history_events_per_s"]
    )
    figures["list_objects_per_s"] = figures["list_objects_per_s"]
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--pods", type=int, default=30_000)
    parser.add_argument("--tls", action="store_true", help="HTTPS (default: plain HTTP)")
    parser.add_argument("--http2", action="store_true", help="HTTP/2 (needs --tls: ALPN)")
    parser.add_argument("--serve", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve, args.tls)
        return 0
    if args.http2 and not args.tls:
        parser.error("--http2 needs --tls (httpx negotiates HTTP/2 with ALPN)")
    tls = ["--tls"] if args.tls else []
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.bench.bench_kubesim", "--serve", str(args.pods), *tls],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        url, token, before, ca_file = child.stdout.readline().split()
        figures = trio.run(
            measure, url, token, int(before), args.pods, child.pid, ca_file, args.http2
        )
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
    protocol = ("HTTP/2" if args.http2 else "HTTP/1.1") + (" over TLS" if args.tls else "")
    print(f"kubesim, {args.pods} pods of ~4.6 KB, raw httpx reader ({protocol}, loopback):")
    f = {k: int(v) for k, v in figures.items()}
    print("                          wall clock       per server CPU-second")
    print(
        f"  watch, initial events : {f['watch_initial_events_per_s']:>10,} /s   "
        f"{f['watch_initial_events_per_server_cpu_s']:>10,} events"
    )
    print(
        f"  watch, from history   : {f['watch_history_events_per_s']:>10,} /s   "
        f"{f['watch_history_events_per_server_cpu_s']:>10,} events"
    )
    print(
        f"  list, limit=500 pages : {f['list_objects_per_s']:>10,} /s   "
        f"{f['list_objects_per_server_cpu_s']:>10,} objects"
    )
    print(f"  (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    verdict = "meets" if f["watch_events_per_s"] >= TARGET_EVENTS_PER_S else "MISSES"
    print(f"  {verdict} the target of {TARGET_EVENTS_PER_S:,} watch events/s")
    if args.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
