"""Server benchmark: the store's ingest rate into a SQLite file.

    .venv/bin/python -m tests.bench.bench_server [--events N] [--batch 500] [--json]

Ingest: N events of ~4.4 KB Pod objects, in batches of 500, through ``wire.encode_events`` ->
``wire.decode_events`` -> ``store.apply_batch`` (one transaction each) into a fresh SQLite file
in a temporary directory: half first-time inserts, half updates of the same objects, as a relist
followed by churn would give. Target: >= 30,000 events/s.

The change-to-REST-visibility latency (``visible_p99_ms``) needs the real agent and the REST API
end to end; it is not measured yet and is reported as null.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import trio

import wire
from server.store import open_sqlite_store
from wire import EventRecord, EventType

OBJECT_BYTES = 4400


def _pod(i: int, rv: int) -> EventRecord:
    name = f"pod-{i:07d}"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": f"ns-{i % 50}",
            "uid": f"uid-{i}",
            "resourceVersion": str(rv),
            "labels": {"app": f"app-{i % 20}", "tier": "web"},
        },
        "spec": {"containers": [{"name": "main", "image": "registry/app:1"}]},
    }
    raw = json.dumps(body).encode()
    raw = raw[:-1] + b',"status":{"pad":"' + b"x" * max(0, OBJECT_BYTES - len(raw) - 20) + b'"}}'
    etype = EventType.ADDED if rv == i else EventType.MODIFIED
    return EventRecord(
        int(etype), "bench", "v1", "Pod", f"ns-{i % 50}", name, f"uid-{i}", str(rv), raw, ""
    )


async def measure_ingest(events: int, batch: int) -> float:
    """Events per second through decode + apply_batch into a new SQLite file."""
    distinct = events // 2
    payloads = []
    for start in range(0, events, batch):
        records = [
            _pod(n % distinct, n if n < distinct else n + distinct)
            for n in range(start, min(events, start + batch))
        ]
        payloads.append(wire.encode_events(records))
    with tempfile.TemporaryDirectory() as tmp:
        async with open_sqlite_store(str(Path(tmp) / "bench.db")) as store:
            began = time.perf_counter()
            for payload in payloads:
                await store.apply_batch("bench", wire.decode_events(payload))
            elapsed = time.perf_counter() - began
    return events / elapsed


async def main_async(args: argparse.Namespace) -> dict[str, object]:
    rate = await measure_ingest(args.events, args.batch)
    print(f"ingest: {args.events} events of ~4.4 KB, batches of {args.batch}: {rate:,.0f} events/s")
    print("visible_p99_ms: not measured yet (needs the agent and the REST API end to end)")
    return {"ingest_events_per_s": round(rate), "visible_p99_ms": None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--json", action="store_true", help="end with one JSON line of results")
    args = parser.parse_args()
    result = trio.run(main_async, args)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
