"""Server benchmark: the store's ingest rate into a SQLite file, and change-to-REST visibility.

    .venv/bin/python -m tests.bench.bench_server [--events N] [--batch 500] [--rate 1000]
        [--seconds 10] [--configmaps 500] [--rest-samples 20] [--kube-plain-http] [--json]
    .venv/bin/python -m tests.bench.bench_server --store postgresql [--pg-url URL] [--json]
    .venv/bin/python -m tests.bench.bench_server --objects 1000000 [--compare-at 100000]
        [--page-limit 500] [--pages 0] [--gets 2000] [--json]

``--objects N`` is the large-store run (issue 17: ingest, REST reads and the server's RSS
with N objects in its SQLite file, and at ``--compare-at`` first): see ``_store_scale``.

``--store postgresql`` measures ingest only, into PostgreSQL and into SQLite in the same run
(alternating, ``--rounds`` each, the best of each kept), and prints the ratio: the server is
a throwaway one started from this machine's binaries (tests/server/_postgres.py) with its
durable defaults (fsync, synchronous_commit on: every batch's commit waits for its WAL
flush), on a unix socket; or the database at ``--pg-url``. Each store is measured in two
shapes: ``--sessions`` sessions at once (default 4: agents of their own accounts, as a server
that serves a fleet writes, through the store's default pool of 4 connections), and one
session alone (one agent's burst: PostgreSQL's statements and the session's Python then run
one after the other, so this shape shows its per-event cost). JSON keys, from the first
shape: ``pg_ingest_events_per_s``, ``sqlite_ingest_events_per_s``, ``pg_to_sqlite``; from the
second: ``pg_one_session_events_per_s``, ``sqlite_one_session_events_per_s``,
``pg_to_sqlite_one_session``. Goal (issue 13): >= 20,000 events/s and >= 0.6x SQLite.

Ingest: N events of ~4.4 KB Pod objects, in batches of 500 encoded with ``wire.encode_events``,
through what a gRPC session does with each batch (decode, Secret scrub, one store transaction)
into a fresh SQLite file in a temporary directory, with the store's upkeep (its WAL
checkpointer) running as in the server: half first-time inserts, half updates of the
same objects, as a relist followed by churn would give. Only the gRPC transport is left out
(bench_wire measures it). Target: >= 30,000 events/s.

Visibility (``visible_p99_ms``): kubesim runs in this process, over HTTPS with a CA and a token
(``--kube-plain-http`` for plain HTTP); the server and the agent run as
separate ``kubesvc server`` / ``kubesvc agent`` processes (on 2 cores that is the honest setup: no
process gets the others' idle time for free). ConfigMaps (~0.5 KB) are updated round robin at
``--rate`` changes/s (default 1,000) for ``--seconds``; ``--rest-samples`` times a second the
newest change is taken and its object fetched with ``GET /manifests/k1/bench/configmap <name>`` in
a tight loop until it shows that change: ``visible_p99_ms`` is the p99 of those delays (commit in
kubesim -> visible through REST, GET round trip included). Every change is also timed through the
``/v1/events`` WebSocket feed (a change counts as seen when its object or a newer version of it
arrives: the agent coalesces changes of one object that wait in its channel; a subscriber the
server drops for lagging resubscribes, and the changes pending then are counted, not timed). The
CPU seconds each process used are printed, to tell a saturated process from a loaded machine.
Target: p99 under 100 ms.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import resource
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import trio
import trio_websocket
import yaml

import kubesim
import wire
from server.store import Store, open_postgres_store, open_sqlite_store
from tests.server._postgres import TempPostgres

from ._pods import ACCOUNT, decoded, pod_record
from ._store_scale import run_scale

BENCH_NAMESPACE = "bench"
# Between two GETs of one sampled change: each GET costs the server a few ms of CPU, so a
# tighter loop measures the load it adds more than the pipeline (adds <= 5 ms of resolution).
POLL_SECONDS = 0.005


def _payloads(
    events: int, batch: int, *, mixed: bool = False, account: str = ACCOUNT
) -> list[bytes]:
    distinct = events // 2
    payloads = []
    for start in range(0, events, batch):
        records = [
            pod_record(
                n % distinct, n if n < distinct else n + distinct, mixed=mixed, account=account
            )
            for n in range(start, min(events, start + batch))
        ]
        payloads.append(wire.encode_events(records))
    return payloads


@contextlib.asynccontextmanager
async def _sqlite_file() -> AsyncIterator[Store]:
    with tempfile.TemporaryDirectory() as tmp:
        async with open_sqlite_store(str(Path(tmp) / "bench.db")) as store:
            yield store


async def measure_ingest(
    events: int,
    batch: int,
    open_store: Callable[[], AbstractAsyncContextManager[Store]] = _sqlite_file,
    *,
    mixed: bool = False,
    sessions: int = 1,
) -> float:
    """Events per second through a session's batch path (decode, scrub, one transaction per
    batch) into a new store (by default a new SQLite file). ``sessions`` > 1: as many
    sessions at once (agents of their own accounts), ``events`` split among them."""
    accounts = [ACCOUNT] if sessions == 1 else [f"{ACCOUNT}-{k}" for k in range(sessions)]
    work = [
        (account, _payloads(events // sessions, batch, mixed=mixed, account=account))
        for account in accounts
    ]

    async def session(account: str, payloads: list[bytes]) -> None:
        for payload in payloads:
            await store.apply_batch(account, decoded(payload))

    async with open_store() as store, trio.open_nursery() as nursery:
        await nursery.start(store.run_upkeep)  # as the server runs it
        began = time.perf_counter()
        async with trio.open_nursery() as sessions_:
            for account, payloads in work:
                sessions_.start_soon(session, account, payloads)
        elapsed = time.perf_counter() - began
        nursery.cancel_scope.cancel()
    return (events // sessions) * sessions / elapsed


@contextlib.contextmanager
def _postgres(url: str | None) -> Iterator[Callable[[], AbstractAsyncContextManager[Store]]]:
    """Opens a new, empty database per call: on the server at ``url`` (its database is
    emptied), or on a throwaway server with PostgreSQL's durable defaults."""
    if url:

        @contextlib.asynccontextmanager
        async def existing() -> AsyncIterator[Store]:
            async with open_postgres_store(url) as store:
                yield store
            with psycopg.connect(url, autocommit=True) as conn:
                for table in ("objects", "resource_versions", "sync_state"):
                    conn.execute(f"TRUNCATE {table}")  # the next round starts empty too

        yield existing
        return
    with TempPostgres({}) as server:

        @contextlib.asynccontextmanager
        async def fresh() -> AsyncIterator[Store]:
            name = server.create_database()
            try:
                async with open_postgres_store(server.url(name)) as store:
                    yield store
            finally:
                server.drop_database(name)

        yield fresh


async def compare_ingest(args: argparse.Namespace) -> dict[str, object]:
    """PostgreSQL against SQLite, alternating rounds in one run, the best of each: with
    ``--sessions`` sessions at once (the issue's keys) and with one."""
    mixed = args.bodies == "mixed"
    shapes = (args.sessions, 1) if args.sessions > 1 else (1,)
    rates: dict[tuple[str, int], list[float]] = {}
    with _postgres(args.pg_url) as open_pg:
        for _ in range(args.rounds):
            for sessions in shapes:
                for name, opener in (("sqlite", _sqlite_file), ("pg", open_pg)):
                    rate = await measure_ingest(
                        args.events, args.batch, opener, mixed=mixed, sessions=sessions
                    )
                    rates.setdefault((name, sessions), []).append(rate)
    best = {key: max(values) for key, values in rates.items()}
    print(
        f"ingest: {args.events} events of ~4.4 KB ({args.bodies} bodies), batches of "
        f"{args.batch}, best of {args.rounds} alternating rounds (2 cores shared by the bench, "
        "its store threads and PostgreSQL):"
    )
    for sessions in shapes:
        pg, sqlite = best[("pg", sessions)], best[("sqlite", sessions)]
        print(
            f"  {sessions} session{'s' if sessions > 1 else ''} at once"
            f"{' (agents of their own accounts)' if sessions > 1 else ''}:\n"
            f"    PostgreSQL {pg:,.0f} events/s (rounds: "
            f"{', '.join(f'{r:,.0f}' for r in rates[('pg', sessions)])})\n"
            f"    SQLite     {sqlite:,.0f} events/s (rounds: "
            f"{', '.join(f'{r:,.0f}' for r in rates[('sqlite', sessions)])})\n"
            f"    PostgreSQL / SQLite = {pg / sqlite:.2f}"
        )
    pg, sqlite = best[("pg", shapes[0])], best[("sqlite", shapes[0])]
    one_pg, one_sqlite = best[("pg", 1)], best[("sqlite", 1)]
    return {
        "pg_ingest_events_per_s": round(pg),
        "sqlite_ingest_events_per_s": round(sqlite),
        "pg_to_sqlite": round(pg / sqlite, 3),
        "sessions": shapes[0],
        "pg_one_session_events_per_s": round(one_pg),
        "sqlite_one_session_events_per_s": round(one_sqlite),
        "pg_to_sqlite_one_session": round(one_pg / one_sqlite, 3),
        "events": args.events,
        "batch": args.batch,
        "bodies": args.bodies,
        "pg": (args.pg_url and "given") or "throwaway, durable defaults",
    }


# ---- change -> REST visibility, with the real agent and server in their own processes ----------


@dataclass
class _Change:
    seq: int
    at: float  # perf_counter() right after kubesim committed it


@dataclass
class _Visibility:
    """What the visibility run saw: per change, the delay until REST or the feed showed it."""

    rest_ms: list[float] = field(default_factory=list)  # sampled GET polls
    feed_ms: list[float] = field(default_factory=list)  # every change, via /v1/events
    changes: int = 0
    seconds: float = 0.0
    pending: dict[str, list[_Change]] = field(default_factory=dict)  # object -> unseen changes
    feed_resyncs: int = 0  # times the server dropped the benchmark's feed subscriber
    feed_lost: int = 0  # changes not measured because of those drops
    cpu_seconds: dict[str, float] = field(default_factory=dict)  # per process, whole run
    latest: dict[str, _Change] = field(default_factory=dict)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a (Linux) process used so far; NaN when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _configmap(name: str, seq: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": BENCH_NAMESPACE},
        "data": {"seq": str(seq), "pad": "x" * 400},
    }


async def _spawn(args: list[str], log_path: Path, nursery: trio.Nursery) -> trio.Process:
    log = log_path.open("wb")
    process: trio.Process = await nursery.start(
        functools.partial(trio.run_process, args, stdout=log, stderr=log, check=False)
    )
    return process


async def _wait_http(client: httpx.AsyncClient, path: str, deadline: float) -> None:
    with trio.fail_after(deadline):
        while True:
            try:
                if (await client.get(path)).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await trio.sleep(0.1)


async def _change_at_rate(
    sim: kubesim.Cluster, seen: _Visibility, names: list[str], rate: float, seconds: float
) -> None:
    """Update ConfigMaps round robin at ``rate`` per second for ``seconds`` (catching up after a
    slow tick rather than drifting), recording when each change was committed."""
    began = trio.current_time()
    done = 0
    while (elapsed := trio.current_time() - began) < seconds:
        due = int(elapsed * rate) - done
        for _ in range(due):
            done += 1
            name = names[done % len(names)]
            sim.update(_configmap(name, done))
            change = _Change(done, time.perf_counter())
            seen.pending.setdefault(name, []).append(change)
            seen.latest[name] = change
        await trio.sleep(0.005)
    seen.changes = done
    seen.seconds = trio.current_time() - began


async def _read_feed(url: str, seen: _Visibility, *, task_status: trio.TaskStatus[None]) -> None:
    """Every change's delay until the feed announced it (or a newer version of the object: the
    agent coalesces changes of one object that are still waiting to be sent). A subscriber that
    falls behind is dropped by the server ("resync"): the changes still pending then are not
    measured (counted in ``feed_resyncs``/``unseen``) and the reader subscribes again."""
    started = False
    while True:
        async with trio_websocket.open_websocket_url(url) as ws:
            first = json.loads(await ws.get_message())
            if first.get("type") != "subscribed":
                raise RuntimeError(f"the feed answered {first}")
            if not started:
                task_status.started()
                started = True
            while True:
                try:
                    message = json.loads(await ws.get_message())
                except trio_websocket.ConnectionClosed:
                    break
                if message.get("type") == "resync":
                    seen.feed_resyncs += 1
                    seen.feed_lost += sum(len(p) for p in seen.pending.values())
                    seen.pending.clear()
                    break
                if message.get("type") != "MODIFIED" or not message.get("object"):
                    continue
                now = time.perf_counter()
                seq = int(message["object"]["data"]["seq"])
                pending = seen.pending.get(message["name"], [])
                while pending and pending[0].seq <= seq:
                    seen.feed_ms.append((now - pending.pop(0).at) * 1000)


async def _sample_rest(client: httpx.AsyncClient, seen: _Visibility, per_second: float) -> None:
    """Every 1/per_second s: take the newest change and GET its object until REST shows it."""
    while True:
        await trio.sleep(1 / per_second)
        if not seen.latest:
            continue
        name, change = max(seen.latest.items(), key=lambda item: item[1].seq)
        path = f"/manifests/k1/{BENCH_NAMESPACE}/configmap {name}"
        while True:
            response = await client.get(path, params={"includeEvents": "false"})
            if (
                response.status_code == 200
                and int(response.json()["manifest"]["data"]["seq"]) >= change.seq
            ):
                seen.rest_ms.append((time.perf_counter() - change.at) * 1000)
                break
            await trio.sleep(POLL_SECONDS)


async def measure_visibility(
    rate: float,
    seconds: float,
    objects: int,
    work: Path,
    rest_samples: float = 20.0,
    http_server: str = "kubesvc",
    kube_tls: bool = True,
) -> _Visibility:
    """kubesim here (over HTTPS with a CA and a token, as production's clusters are, unless
    ``kube_tls`` is off for a comparison); the server and the agent as ``kubesvc`` processes
    (one core each at most): change ConfigMaps at ``rate``/s and time how long until REST
    (sampled) and the feed show each change."""
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BENCH_NAMESPACE}})
    names = [f"cm-{i:04d}" for i in range(objects)]
    for name in names:
        sim.create(_configmap(name, 0))
    grpc_port, api_port = _free_port(), _free_port()
    (work / "server.yaml").write_text(
        yaml.safe_dump(
            {
                "grpc": {"host": "127.0.0.1", "port": grpc_port},
                "api": {"host": "127.0.0.1", "port": api_port, "httpServer": http_server},
                "store": {"path": str(work / "server.db")},
            }
        )
    )
    python = sys.executable
    seen = _Visibility()
    async with kubesim.open_server(sim, host="127.0.0.1", port=0, tls=kube_tls) as kube:
        kube.kubeconfig(work / "kubeconfig", user="admin")
        (work / "agent.yaml").write_text(
            yaml.safe_dump(
                {
                    "clouddriver": {"grpc": f"127.0.0.1:{grpc_port}", "insecure": True},
                    "kubernetes": {
                        "accounts": [{"name": "k1", "kubeConfigFile": str(work / "kubeconfig")}]
                    },
                    "server": {"host": "127.0.0.1", "port": 0},
                    "prometheus": {"enabled": False},
                }
            )
        )
        async with (
            trio.open_nursery() as nursery,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{api_port}", timeout=10) as client,
        ):
            processes = [
                await _spawn(
                    [
                        python,
                        "-m",
                        "kubesvc",
                        "server",
                        "-c",
                        str(work / "server.yaml"),
                        "--log-level",
                        "WARNING",
                    ],
                    work / "server.log",
                    nursery,
                ),
                await _spawn(
                    [python, "-m", "kubesvc", "agent", "-c", str(work / "agent.yaml")],
                    work / "agent.log",
                    nursery,
                ),
            ]
            try:
                last = f"/manifests/k1/{BENCH_NAMESPACE}/configmap {names[-1]}"
                await _wait_http(client, last, deadline=60)
                await trio.sleep(1.0)  # let the initial sync settle
                feed = f"ws://127.0.0.1:{api_port}/v1/events?account=k1&kind=ConfigMap"
                before = resource.getrusage(resource.RUSAGE_SELF)
                async with trio.open_nursery() as measuring:
                    await measuring.start(_read_feed, feed, seen)
                    if rest_samples > 0:
                        measuring.start_soon(_sample_rest, client, seen, rest_samples)
                    await _change_at_rate(sim, seen, names, rate, seconds)
                    with trio.move_on_after(5):  # the last changes arrive
                        while any(seen.pending.values()):
                            await trio.sleep(0.05)
                    measuring.cancel_scope.cancel()
                after = resource.getrusage(resource.RUSAGE_SELF)
                seen.cpu_seconds["kubesim+bench"] = (
                    after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                )
            except BaseException:
                for log_name in ("server.log", "agent.log"):
                    tail = (work / log_name).read_text(errors="replace").splitlines()[-15:]
                    print(f"--- last lines of {log_name}:", *tail, sep="\n", file=sys.stderr)
                raise
            finally:
                for process, name in zip(processes, ("server", "agent"), strict=True):
                    seen.cpu_seconds[name] = _cpu_seconds(process.pid)
                    process.terminate()
    return seen


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else math.nan


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    if args.store == "postgresql":
        return await compare_ingest(args)
    if args.objects:
        return await run_scale(args)
    rate = await measure_ingest(args.events, args.batch, mixed=args.bodies == "mixed")
    print(f"ingest: {args.events} events of ~4.4 KB, batches of {args.batch}: {rate:,.0f} events/s")
    with tempfile.TemporaryDirectory() as tmp:
        seen = await measure_visibility(
            args.rate,
            args.seconds,
            args.configmaps,
            Path(tmp),
            args.rest_samples,
            args.http_server,
            kube_tls=not args.kube_plain_http,
        )
    unseen = sum(len(p) for p in seen.pending.values())
    rest_p99 = _percentile(seen.rest_ms, 0.99)
    cpu = ", ".join(f"{name} {sec:.1f} s" for name, sec in seen.cpu_seconds.items())
    print(
        f"visibility: {seen.changes} changes in {seen.seconds:.1f} s "
        f"({seen.changes / seen.seconds:,.0f}/s) over {args.configmaps} ConfigMaps; kubesim "
        f"in this process, server and agent as separate `kubesvc` processes (CPU used in all: "
        f"{cpu})"
    )
    print(
        f"  through REST GET (sampled, {len(seen.rest_ms)} changes): "
        f"p50 {_percentile(seen.rest_ms, 0.5):.1f} ms, p99 {rest_p99:.1f} ms, "
        f"max {max(seen.rest_ms, default=math.nan):.1f} ms"
    )
    print(
        f"  through the /v1/events feed ({len(seen.feed_ms)} changes timed, {unseen} never seen, "
        f"{seen.feed_lost} lost to {seen.feed_resyncs} resyncs of this slow subscriber): "
        f"p50 {_percentile(seen.feed_ms, 0.5):.1f} ms, p99 {_percentile(seen.feed_ms, 0.99):.1f} "
        f"ms, max {max(seen.feed_ms, default=math.nan):.1f} ms"
    )
    return {
        "ingest_events_per_s": round(rate),
        "visible_p99_ms": None if math.isnan(rest_p99) else round(rest_p99, 1),
        "visible_p50_ms": round(_percentile(seen.rest_ms, 0.5), 1),
        "visible_samples": len(seen.rest_ms),
        "feed_p99_ms": round(_percentile(seen.feed_ms, 0.99), 1),
        "changes_per_s": round(seen.changes / seen.seconds),
        "unseen_changes": unseen,
        "feed_resyncs": seen.feed_resyncs,
        "processes": "separate",
        "http_server": args.http_server,
        "kube": "http" if args.kube_plain_http else "https",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rate", type=float, default=1000.0, help="kubesim changes per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="how long to change")
    parser.add_argument(
        "--configmaps", type=int, default=500, help="ConfigMaps changed round robin"
    )
    parser.add_argument(
        "--objects",
        type=int,
        default=0,
        help="the large-store run instead: the server with this many objects (issue 17)",
    )
    parser.add_argument(
        "--compare-at",
        type=int,
        default=100_000,
        help="--objects: also measure at this count first, to show growth (0: no)",
    )
    parser.add_argument(
        "--page-limit", type=int, default=500, help="--objects: /v1/objects page size"
    )
    parser.add_argument(
        "--pages", type=int, default=0, help="--objects: pages read (0: the whole set)"
    )
    parser.add_argument(
        "--gets", type=int, default=2000, help="--objects: /manifests GETs of random objects"
    )
    parser.add_argument(
        "--rest-samples",
        type=float,
        default=20.0,
        help="changes per second timed through REST GET polls (0: feed only)",
    )
    parser.add_argument(
        "--http-server",
        choices=("kubesvc", "hypercorn"),
        default="kubesvc",
        help="the server's api.httpServer (who speaks HTTP/1.1 for the REST API and the feed)",
    )
    parser.add_argument(
        "--kube-plain-http",
        action="store_true",
        help="kubesim over plain HTTP, to compare with the default HTTPS",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="postgresql: compare ingest into PostgreSQL with SQLite (no visibility run)",
    )
    parser.add_argument(
        "--bodies",
        choices=("padded", "mixed"),
        default="padded",
        help="ingest bodies: padded with 'x' (the reference) or half random (compress ~2x)",
    )
    parser.add_argument("--pg-url", default=None, help="an existing PostgreSQL database to use")
    parser.add_argument("--rounds", type=int, default=2, help="--store postgresql: rounds each")
    parser.add_argument(
        "--sessions",
        type=int,
        default=4,
        help="--store postgresql: sessions writing at once (agents of their own accounts), "
        "measured beside one session",
    )
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = parser.parse_args()
    result = trio.run(main_async, args)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
