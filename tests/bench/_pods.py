"""bench_server's objects: ~4.4 KB Pod event records, and what a session does to a batch.

Shared by bench_server's ingest and visibility runs and by its large-store run
(``_store_scale``).
"""

from __future__ import annotations

import base64
import json
import random

import wire
from server.store import scrub_secret_records
from wire import EventRecord, EventType

OBJECT_BYTES = 4400
ACCOUNT = "bench"

# --bodies mixed: half of each pad from a fixed random block, so a body compresses about 2x
# as real JSON does (the default "x" pad compresses ~50x, which flatters PostgreSQL's TOAST).
_MIXED_PAD = base64.b64encode(random.Random(7).randbytes(OBJECT_BYTES)).decode()


def pod_record(i: int, rv: int, *, mixed: bool = False, account: str = ACCOUNT) -> EventRecord:
    """Pod number ``i`` (``pod-{i:07d}`` in namespace ``ns-{i % 50}``) of ``account`` at
    version ``rv``: ADDED when ``rv == i``, MODIFIED otherwise."""
    name = f"pod-{i:07d}"
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": pod_namespace(i),
            "uid": f"uid-{i}",
            "resourceVersion": str(rv),
            "labels": {"app": f"app-{i % 20}", "tier": "web"},
        },
        "spec": {"containers": [{"name": "main", "image": "registry/app:1"}]},
    }
    raw = json.dumps(body).encode()
    size = max(0, OBJECT_BYTES - len(raw) - 20)
    pad = (_MIXED_PAD[: size // 2] + "x" * size)[:size] if mixed else "x" * size
    raw = raw[:-1] + b',"status":{"pad":"' + pad.encode() + b'"}}'
    etype = EventType.ADDED if rv == i else EventType.MODIFIED
    return EventRecord(
        int(etype), account, "v1", "Pod", pod_namespace(i), name, f"uid-{i}", str(rv), raw, ""
    )


def pod_namespace(i: int) -> str:
    return f"ns-{i % 50}"


def decoded(payload: bytes) -> list[EventRecord]:
    """What a session does with a batch's bytes before the store (bar the PRIMARY check)."""
    return scrub_secret_records(wire.decode_events(payload))
