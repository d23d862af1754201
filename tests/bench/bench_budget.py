"""How fast the coalescing channel moves events, and how much a hot-key workload coalesces.

Three runs, all in one trio process on this machine (2 cores shared with other work, so the
figures move by +-20% between runs; compare within a run):

- peer: trio's own memory channel carrying the same groups (one ``send`` per group of 10,
  the consumer pulls group lists), no budget and no coalescing: the floor of a channel hop;
- throughput: 8 producers, each sending distinct keys in ``send_many`` groups of 10 (like
  the events of one network read), 1 consumer taking ``receive_batch(200, 512 KiB)`` and
  acknowledging at once, a 64 MiB budget and 4.4 KB entries (the budget never fills);
- hot keys: 8 producers updating 40 hot keys each (Zipf-like), a consumer that lingers up
  to 5 ms for 200 entries and spends 2 ms per batch on the "network" before acknowledging,
  with a 1 MiB budget, so producers feel backpressure and pending updates coalesce.
  coalescing_ratio = entries sent / entries delivered.

Entries are built before the clock starts: the figures are the channel's cost only.

Usage: .venv/bin/python -m tests.bench.bench_budget [--json]
"""

from __future__ import annotations

import argparse
import json
import random
import time

import trio

from budget import ByteBudget, Entry, EntryKind, EventSender, open_event_channel

PRODUCERS = 8
GROUP = 10
EVENT_BYTES = 4400
TARGET_EVENTS_PER_S = 200_000


def _distinct_groups(producer: int, events: int) -> list[list[Entry]]:
    entries = [
        Entry(
            ("acct", "v1", "Pod", "ns", f"p{producer}-{i}"),
            EntryKind.UPSERT_MODIFIED,
            EVENT_BYTES,
            i,
        )
        for i in range(events)
    ]
    return [entries[i : i + GROUP] for i in range(0, events, GROUP)]


def _hot_groups(producer: int, events: int, keys: int, seed: int) -> list[list[Entry]]:
    rng = random.Random(seed + producer)
    weights = [1 / (rank + 1) for rank in range(keys)]
    picks = rng.choices(range(keys), weights=weights, k=events)
    entries = [
        Entry(
            ("acct", "v1", "Pod", "ns", f"hot{producer}-{k}"),
            EntryKind.UPSERT_MODIFIED,
            EVENT_BYTES,
            i,
        )
        for i, k in enumerate(picks)
    ]
    return [entries[i : i + GROUP] for i in range(0, events, GROUP)]


async def _peer(events_per_producer: int) -> float:
    """trio memory channel: one send per group, the consumer unpacks groups."""
    groups = [_distinct_groups(p, events_per_producer) for p in range(PRODUCERS)]
    send, receive = trio.open_memory_channel[list[Entry]](PRODUCERS * 4)
    received = 0

    async def producer(mine: trio.MemorySendChannel[list[Entry]], own: list[list[Entry]]) -> None:
        async with mine:
            for group in own:
                await mine.send(group)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for own in groups:
            nursery.start_soon(producer, send.clone(), own)
        send.close()
        async for group in receive:
            received += len(group)
    elapsed = time.perf_counter() - start
    assert received == PRODUCERS * events_per_producer
    return received / elapsed


async def _produce(mine: EventSender, own: list[list[Entry]]) -> None:
    """One producer: sends its groups as a network read would, then closes its clone."""
    async with mine:
        for group in own:
            await mine.send_many(group)


async def _throughput(events_per_producer: int) -> tuple[float, int]:
    """8 producers, 1 consumer, distinct keys; returns (events/s, batches)."""
    groups = [_distinct_groups(p, events_per_producer) for p in range(PRODUCERS)]
    budget = ByteBudget(64 * 2**20)
    send, receive = open_event_channel(budget)
    received = 0
    batches = 0

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for own in groups:
            nursery.start_soon(_produce, send.clone(), own)
        send.close()
        while True:
            try:
                batch = await receive.receive_batch(200, 512 * 1024)
            except trio.EndOfChannel:
                break
            received += len(batch)
            batches += 1
            receive.acknowledge(batch)
    elapsed = time.perf_counter() - start
    assert received == PRODUCERS * events_per_producer
    assert budget.statistics().in_use == 0
    return received / elapsed, batches


async def _hot_keys(events_per_producer: int) -> tuple[float, int, int, int]:
    """Returns (events sent per second, sent, delivered, budget high-water bytes)."""
    groups = [_hot_groups(p, events_per_producer, keys=40, seed=7) for p in range(PRODUCERS)]
    budget = ByteBudget(2**20)
    send, receive = open_event_channel(budget)
    delivered = 0

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for own in groups:
            nursery.start_soon(_produce, send.clone(), own)
        send.close()
        while True:
            with trio.move_on_after(0.005):
                await receive.wait_pending(200, 512 * 1024)
            try:
                batch = await receive.receive_batch(200, 512 * 1024)
            except trio.EndOfChannel:
                break
            delivered += len(batch)
            await trio.sleep(0.002)  # the batch's trip to the server and back
            receive.acknowledge(batch)
    elapsed = time.perf_counter() - start
    stats = receive.statistics()
    sent = stats.sent
    assert sent == PRODUCERS * events_per_producer
    assert stats.taken == delivered
    return sent / elapsed, sent, delivered, budget.statistics().high_water


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object last")
    parser.add_argument("--events", type=int, default=25_000, help="events per producer")
    args = parser.parse_args()

    print("bench_budget: 8 producers -> 1 consumer, send_many groups of 10, 4.4 KB entries")
    print("  machine: 2 cores shared with other sessions; figures vary by +-20% between runs")
    peer = trio.run(_peer, args.events)
    print(f"  peer (trio memory channel, 1 send per group):  {peer:>10,.0f} events/s")
    runs = [trio.run(_throughput, args.events) for _ in range(3)]
    rate, batches = max(runs)
    verdict = "ok" if rate >= TARGET_EVENTS_PER_S else "BELOW TARGET"
    print(
        f"  coalescing channel (64 MiB budget, acks at once): {rate:>10,.0f} events/s "
        f"[target >= {TARGET_EVENTS_PER_S:,}: {verdict}] ({batches} batches in the best run)"
    )
    hot_rate, sent, delivered, high_water = trio.run(_hot_keys, args.events // 5)
    ratio = sent / delivered
    print(
        f"  hot keys (8 x 40 Zipf keys, 1 MiB budget, 5 ms linger, 2 ms per batch): "
        f"{sent:,} sent -> {delivered:,} delivered, coalescing ratio {ratio:.1f}, "
        f"{hot_rate:,.0f} events/s offered, budget high-water {high_water / 2**20:.2f} MiB"
    )
    if args.json:
        print(
            json.dumps(
                {
                    "events_per_s": round(rate),
                    "coalescing_ratio": round(ratio, 2),
                    "peer_memory_channel_events_per_s": round(peer),
                    "hot_key_events_per_s": round(hot_rate),
                    "target_events_per_s": TARGET_EVENTS_PER_S,
                }
            )
        )


if __name__ == "__main__":
    main()
