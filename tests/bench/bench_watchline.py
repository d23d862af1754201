"""The agent's per-event CPU on the watch path, without the network: decode + scrub + entries.

Feeds 64 KiB chunks of a watch body of kubesim's ~4.7 KB pods (with managedFields, stripped)
through WatchDecoder and the reflector's record building, and prints microseconds per event.
DESIGN section 3 budgets ~35 us per event for everything (HTTP read included).
Run: .venv/bin/python -m tests.bench.bench_watchline [--json]
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import kubesim
from agent import KindInfo, ListCaps, Reflector, WatchTarget
from agent.watch._lines import WatchDecoder
from budget import ByteBudget, open_event_channel


def _pod(i: int, *, managed: bool) -> dict[str, Any]:
    """kubesim's realistic pod (~4.7 KB with its two managedFields entries, as bench_agent
    streams them), with uid and resourceVersion last as kubesim writes them."""
    pod = kubesim.realistic_pod("default", i, now="2026-01-01T00:00:00Z")
    meta = pod["metadata"]
    if not managed:
        del meta["managedFields"]
    meta["uid"] = f"uid-{i:08d}"
    meta["resourceVersion"] = str(1000 + i)
    return pod


def run(events: int = 20_000, managed: bool = True) -> dict[str, float]:
    compact = (",", ":")  # as API servers write watch lines
    body = b"".join(
        json.dumps(
            {"type": "MODIFIED", "object": _pod(i, managed=managed)}, separators=compact
        ).encode()
        + b"\n"
        for i in range(events)
    )
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    send, _receive = open_event_channel(ByteBudget(2**30))
    reflector = Reflector(
        account="a",
        target=WatchTarget(KindInfo("", "v1", "Pod", "pods", True)),
        transport=None,  # type: ignore[arg-type]
        send=send,
        caps=ListCaps().for_account("a"),
    )
    decoder = WatchDecoder(strip_managed_fields=True)  # as the reflector runs it
    start = time.perf_counter()
    total = 0
    for chunk in chunks:
        decoded = decoder.feed(chunk)
        total += len(reflector._entries(decoded, None))  # the per-event hot path
    elapsed = time.perf_counter() - start
    return {
        "events": total,
        "bytes_per_event": len(body) / events,
        "us_per_event": elapsed / total * 1e6,
    }


def best(runs: int, *, managed: bool) -> dict[str, float]:
    """The fastest of ``runs`` runs: the cores are shared, and the slower runs measure the
    neighbours (the first also warms up)."""
    return min((run(managed=managed) for _ in range(runs)), key=lambda r: r["us_per_event"])


def main() -> None:
    stripped = best(5, managed=True)
    plain = best(5, managed=False)
    result = {
        "us_per_event_stripping": round(stripped["us_per_event"], 2),
        "us_per_event_plain": round(plain["us_per_event"], 2),
        "bytes_per_event": round(plain["bytes_per_event"]),
    }
    if "--json" in sys.argv:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
