"""The agent's per-event CPU on the watch path, without the network: decode + scrub + entries.

Feeds 64 KiB chunks of a watch body of ~4.4 KB pods (with managedFields, which are stripped)
through WatchDecoder and the reflector's record building, and prints microseconds per event.
DESIGN section 3 budgets ~35 us per event for everything (HTTP read included).
Run: .venv/bin/python -m tests.bench.bench_watchline [--json]
"""

from __future__ import annotations

import json
import sys
import time

from agent import KindInfo, ListCaps, Reflector, WatchTarget
from agent._watchline import WatchDecoder
from budget import ByteBudget, open_event_channel


def _pod(i: int, *, managed: bool) -> dict[str, object]:
    meta: dict[str, object] = {
        "name": f"pod-{i}", "namespace": "default", "uid": f"uid-{i:08d}",
        "resourceVersion": str(1000 + i), "labels": {"app": "web", "tier": "frontend"},
    }
    if managed:
        meta["managedFields"] = [{"manager": "kubectl", "operation": "Update",
                                  "fieldsV1": {"f:spec": {"f:containers": {}}}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"containers": [{"name": "c", "image": "nginx", "env": [
                {"name": f"VAR_{k}", "value": "x" * 60} for k in range(40)]}]},
            "status": {"phase": "Running"}}


def run(events: int = 20_000, managed: bool = True) -> dict[str, float]:
    compact = (",", ":")  # as API servers write watch lines
    body = b"".join(
        json.dumps({"type": "MODIFIED", "object": _pod(i, managed=managed)}, separators=compact)
        .encode() + b"\n"
        for i in range(events)
    )
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]
    send, _receive = open_event_channel(ByteBudget(2**30))
    reflector = Reflector(account="a", target=WatchTarget(KindInfo("", "v1", "Pod", "pods", True)),
                          transport=None, send=send,  # type: ignore[arg-type]
                          caps=ListCaps().for_account("a"))
    decoder = WatchDecoder(strip_managed_fields=True)  # as the reflector runs it
    start = time.perf_counter()
    total = 0
    for chunk in chunks:
        decoded = decoder.feed(chunk)
        total += len(reflector._entries(decoded, None))  # the per-event hot path
    elapsed = time.perf_counter() - start
    return {"events": total, "bytes_per_event": len(body) / events,
            "us_per_event": elapsed / total * 1e6}


def main() -> None:
    stripped = run(managed=True)
    plain = run(managed=False)
    result = {"us_per_event_stripping": round(stripped["us_per_event"], 2),
              "us_per_event_plain": round(plain["us_per_event"], 2),
              "bytes_per_event": round(plain["bytes_per_event"])}
    if "--json" in sys.argv:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
