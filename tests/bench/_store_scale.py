"""``bench_server --objects N``: the server with N objects in its SQLite file (issue 17).

One run, stage by stage (``--compare-at``, default 100,000, then N): the store is filled up
to the stage's count, then the real server (``kubesvc server``, its own process) is started
on that file and read through its REST API, then stopped; the next stage fills the same file
further. Each stage prints the same figures, so that growth with the object count shows.

- Ingest (``ingest_events_per_s``): distinct ~4.4 KB Pods (``_pods``), in batches of
  ``--batch`` encoded with ``wire.encode_events``, through what a gRPC session does with each
  (decode, Secret scrub, ``Store.apply_batch``: one transaction) into the SQLite file, with
  the store's upkeep (its WAL checkpointer) running as in the server. The batches are built
  between the timed calls (building is not the server's work). CPU microseconds an event
  (this process, building excluded) are printed beside the rate.
- ``objects_page_p99_ms``: ``GET /v1/objects?account=bench&kind=pod&limit=--page-limit`` page
  after page (keyset continue tokens) through the whole set, or the first ``--pages`` pages;
  each page's round trip, the answer read whole but not decoded (the client's JSON decoding
  is not the server's latency). Before, the first page of a few other shapes of query is
  timed once (printed).
- ``manifest_get_p99_ms``: ``GET /manifests/bench/{namespace}/pod {name}`` of ``--gets``
  objects drawn at random (with the object's events, as Deck asks), one at a time.
- ``credentials_p99_ms``: ``GET /credentials`` (the accounts; Spinnaker polls it).
- ``server_rss_mb``: the server's VmRSS after those reads, with its peak (VmHWM) and how much
  of it is file pages (SQLite's memory map of the database) rather than the heap.

Goals (issue 17): ingest >= 30,000 events/s, reads p99 < 50 ms, RSS < 500 MB and not growing
with the object count.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import socket
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml

import wire
from server.store import AccountRecord, open_sqlite_store
from tests._procs import open_process

from ._pods import ACCOUNT, decoded, pod_namespace, pod_record
from ._rest import Rest

GOAL_INGEST = 30_000
GOAL_READ_P99_MS = 50.0
GOAL_RSS_MB = 500.0


@dataclass
class Stage:
    objects: int
    ingest_events_per_s: float = 0.0
    ingest_cpu_us_per_event: float = 0.0
    batch_p99_ms: float = 0.0
    db_mb: float = 0.0
    server_start_s: float = 0.0
    page_ms: list[float] = field(default_factory=list)
    paged_objects: int = 0
    page_cpu_ms: float = 0.0
    first_pages: dict[str, float] = field(default_factory=dict)
    get_ms: list[float] = field(default_factory=list)
    get_cpu_ms: float = 0.0
    credentials_ms: list[float] = field(default_factory=list)
    rss: dict[str, float] = field(default_factory=dict)
    load: str = ""


def _load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _memory_kib(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM, RssAnon, RssFile of a process, in MB."""
    wanted = ("VmRSS", "VmHWM", "RssAnon", "RssFile")
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in wanted:
            found[name] = int(value.split()[0]) / 1024
    return found


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def ingest(db: Path, start: int, end: int, batch: int, stage: Stage) -> None:
    """Pods ``start`` .. ``end - 1`` into the store at ``db`` (see the module doc)."""
    async with open_sqlite_store(str(db)) as store, trio.open_nursery() as nursery:
        await nursery.start(store.run_upkeep)  # as the server runs it
        if start == 0:
            await store.upsert_account(AccountRecord(ACCOUNT))
        elapsed = 0.0
        building = 0.0
        batch_ms: list[float] = []
        cpu = _process_cpu()
        for first in range(start, end, batch):
            built = time.thread_time()
            payload = wire.encode_events(
                [pod_record(i, i) for i in range(first, min(end, first + batch))]
            )
            building += time.thread_time() - built
            began = time.perf_counter()
            await store.apply_batch(ACCOUNT, decoded(payload))
            took = time.perf_counter() - began
            elapsed += took
            batch_ms.append(took * 1000)
        cpu = _process_cpu() - cpu - building
        nursery.cancel_scope.cancel()
    events = end - start
    stage.ingest_events_per_s = events / elapsed
    stage.ingest_cpu_us_per_event = cpu / events * 1e6
    stage.batch_p99_ms = _percentile(batch_ms, 0.99)


def _file_mb(folder: Path, pattern: str) -> float:
    return sum(p.stat().st_size for p in folder.glob(pattern)) / 2**20


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _wait_ready(rest: Rest, deadline: float) -> None:
    with trio.fail_after(deadline):
        while True:
            try:
                status, _ = await rest.exchange("GET", "/health/ready")
                if status == 200:
                    return
            except (OSError, RuntimeError):
                pass
            await trio.sleep(0.1)


async def _timed(rest: Rest, path: str) -> tuple[float, bytes]:
    began = time.perf_counter()
    status, body = await rest.exchange("GET", path)
    took = (time.perf_counter() - began) * 1000
    if status != 200:
        raise RuntimeError(f"GET {path}: HTTP {status}: {body[:300]!r}")
    return took, body


class _PageShape(msgspec.Struct, rename={"continue_": "continue"}):
    items: list[msgspec.Raw]
    continue_: str | None = None


def _next_token(body: bytes) -> tuple[int, str | None]:
    """How many items a page holds and its continue token (the items are not decoded)."""
    page = msgspec.json.decode(body, type=_PageShape)
    return len(page.items), page.continue_


async def read(db: Path, work: Path, args: argparse.Namespace, stage: Stage) -> None:
    """Start the server on ``db``, time its reads, take its RSS, stop it."""
    api_port = _free_port()
    config = work / "server.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "grpc": {"host": "127.0.0.1", "port": _free_port()},
                "api": {"host": "127.0.0.1", "port": api_port},
                "store": {"path": str(db)},
            }
        )
    )
    command = [sys.executable, "-m", "kubesvc", "server", "-c", str(config)]
    rest = Rest(api_port)
    with (work / "server.log").open("ab") as log:
        began = time.perf_counter()
        async with open_process([*command, "--log-level", "WARNING"], stdout=log, stderr=log) as (
            server
        ):
            try:
                await _wait_ready(rest, 120)
                stage.server_start_s = time.perf_counter() - began
                await _page_through(rest, server.pid, args, stage)
                await _get_manifests(rest, server.pid, args, stage)
                for _ in range(200):
                    took, _ = await _timed(rest, "/credentials")
                    stage.credentials_ms.append(took)
                stage.rss = _memory_kib(server.pid)
                stage.load = _load_average()
            except BaseException:
                tail = (work / "server.log").read_text(errors="replace").splitlines()[-15:]
                print("--- last lines of server.log:", *tail, sep="\n", file=sys.stderr)
                raise
            finally:
                await rest.aclose()


# First pages of other shapes of query (one each, printed): every object; a namespace across
# the account's kinds; a kind the account has none of; a label selector (labels are not
# indexed: the walk reads rows until the page is full).
_FIRST_PAGES: tuple[dict[str, str], ...] = (
    {},
    {"namespace": "ns-7"},
    {"account": ACCOUNT, "kind": "deployment"},
    {"labelSelector": "app=app-3"},
)


async def _page_through(rest: Rest, pid: int, args: argparse.Namespace, stage: Stage) -> None:
    for shape in _FIRST_PAGES:
        path = "/v1/objects?" + urllib.parse.urlencode({**shape, "limit": str(args.page_limit)})
        took, _ = await _timed(rest, path)
        stage.first_pages[urllib.parse.urlencode(shape) or "(all)"] = took
    token: str | None = None
    cpu = _cpu_seconds(pid)
    pages = 0
    while True:
        # One kind of one account, as a client lists it.
        query = {"account": ACCOUNT, "kind": "pod", "limit": str(args.page_limit)}
        if token:
            query["continue"] = token
        took, body = await _timed(rest, "/v1/objects?" + urllib.parse.urlencode(query))
        stage.page_ms.append(took)
        count, token = _next_token(body)
        stage.paged_objects += count
        pages += 1
        if token is None or (args.pages and pages >= args.pages):
            break
    stage.page_cpu_ms = (_cpu_seconds(pid) - cpu) / pages * 1000
    if not args.pages and stage.paged_objects != stage.objects:
        raise RuntimeError(f"paged {stage.paged_objects} objects of {stage.objects}")


async def _get_manifests(rest: Rest, pid: int, args: argparse.Namespace, stage: Stage) -> None:
    draw = random.Random(17)
    cpu = _cpu_seconds(pid)
    for _ in range(args.gets):
        i = draw.randrange(stage.objects)
        name = urllib.parse.quote(f"pod pod-{i:07d}")
        took, _ = await _timed(rest, f"/manifests/{ACCOUNT}/{pod_namespace(i)}/{name}")
        stage.get_ms.append(took)
    stage.get_cpu_ms = (_cpu_seconds(pid) - cpu) / max(1, args.gets) * 1000


def _print(stage: Stage, args: argparse.Namespace) -> None:
    def mark(ok: bool) -> str:
        return "ok" if ok else "MISSED"

    page_p99 = _percentile(stage.page_ms, 0.99)
    get_p99 = _percentile(stage.get_ms, 0.99)
    rss = stage.rss
    print(
        f"--- {stage.objects:,} objects (~4.4 KB Pods), SQLite file {stage.db_mb:,.0f} MB; "
        f"load average {stage.load} on {os.cpu_count()} shared cores"
    )
    print(
        f"  ingest: {stage.ingest_events_per_s:,.0f} events/s "
        f"(goal >= {GOAL_INGEST:,}: {mark(stage.ingest_events_per_s >= GOAL_INGEST)}), "
        f"{stage.ingest_cpu_us_per_event:.1f} us CPU an event, batch of {args.batch} p99 "
        f"{stage.batch_p99_ms:.1f} ms"
    )
    print(f"  server ready in {stage.server_start_s:.1f} s")
    print(
        f"  /v1/objects?account={ACCOUNT}&kind=pod, limit {args.page_limit}: "
        f"{len(stage.page_ms)} pages, "
        f"{stage.paged_objects:,} objects: p50 {_percentile(stage.page_ms, 0.5):.1f} ms, "
        f"p99 {page_p99:.1f} ms (goal < {GOAL_READ_P99_MS:.0f}: "
        f"{mark(page_p99 < GOAL_READ_P99_MS)}), max {max(stage.page_ms):.1f} ms; "
        f"server CPU {stage.page_cpu_ms:.1f} ms a page"
    )
    firsts = ", ".join(f"{query} {ms:.1f} ms" for query, ms in stage.first_pages.items())
    print(f"  /v1/objects first pages: {firsts}")
    print(
        f"  /manifests (random pods, with events): {len(stage.get_ms)} GETs: p50 "
        f"{_percentile(stage.get_ms, 0.5):.1f} ms, p99 {get_p99:.1f} ms "
        f"({mark(get_p99 < GOAL_READ_P99_MS)}), max {max(stage.get_ms):.1f} ms; "
        f"server CPU {stage.get_cpu_ms:.2f} ms a GET"
    )
    print(
        f"  /credentials: p99 {_percentile(stage.credentials_ms, 0.99):.1f} ms "
        f"({len(stage.credentials_ms)} GETs)"
    )
    print(
        f"  server RSS {rss['VmRSS']:.0f} MB (goal < {GOAL_RSS_MB:.0f}: "
        f"{mark(rss['VmRSS'] < GOAL_RSS_MB)}; heap {rss.get('RssAnon', 0):.0f} MB, file pages "
        f"{rss.get('RssFile', 0):.0f} MB), peak {rss['VmHWM']:.0f} MB"
    )


def _summary(stage: Stage) -> dict[str, Any]:
    return {
        "objects": stage.objects,
        "ingest_events_per_s": round(stage.ingest_events_per_s),
        "ingest_cpu_us_per_event": round(stage.ingest_cpu_us_per_event, 1),
        "objects_page_p99_ms": round(_percentile(stage.page_ms, 0.99), 1),
        "objects_page_p50_ms": round(_percentile(stage.page_ms, 0.5), 1),
        "objects_pages": len(stage.page_ms),
        "page_server_cpu_ms": round(stage.page_cpu_ms, 2),
        "manifest_get_p99_ms": round(_percentile(stage.get_ms, 0.99), 1),
        "manifest_get_p50_ms": round(_percentile(stage.get_ms, 0.5), 1),
        "manifest_server_cpu_ms": round(stage.get_cpu_ms, 2),
        "credentials_p99_ms": round(_percentile(stage.credentials_ms, 0.99), 1),
        "server_rss_mb": round(stage.rss["VmRSS"]),
        "server_peak_rss_mb": round(stage.rss["VmHWM"]),
        "server_rss_file_mb": round(stage.rss.get("RssFile", 0)),
        "server_start_s": round(stage.server_start_s, 1),
        "db_mb": round(stage.db_mb),
        "load_average": stage.load,
    }


async def run_scale(args: argparse.Namespace) -> dict[str, Any]:
    """The stages of ``--objects``; the JSON of the largest, the others under ``at_<n>``."""
    targets = sorted({n for n in (args.compare_at, args.objects) if 0 < n <= args.objects})
    print(
        f"bench_server --objects {args.objects:,}: stages at {', '.join(f'{n:,}' for n in targets)}"
        f"; load average at start {_load_average()}"
    )
    stages: list[Stage] = []
    with tempfile.TemporaryDirectory(prefix="bench_server_scale") as tmp:
        work = Path(tmp)
        db = work / "server.db"
        done = 0
        for target in targets:
            stage = Stage(target)
            await ingest(db, done, target, args.batch, stage)
            done = target
            stage.db_mb = _file_mb(work, "server.db*")
            await read(db, work, args, stage)
            _print(stage, args)
            stages.append(stage)
    result = _summary(stages[-1])
    for stage in stages[:-1]:
        result[f"at_{stage.objects}"] = _summary(stage)
    return result
