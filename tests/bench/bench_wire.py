"""Throughput of the wire bridge, one process to another over loopback.

Run: ``.venv/bin/python -m tests.bench.bench_wire [--json] [--seconds N]``

The parent process is the agent side (wire.open_connection), a child process the server side
(wire.serve), both trio with grpclib behind the bridge. Events are 4.4 KB pod-like JSON
objects. Two modes in the same run:

- framed: EventBatch messages of 200 records (wire.encode_events), one bridge crossing and one
  protobuf envelope per batch; the server decodes every batch and acks it. The client sends
  and reads acks as the agent does (``send_event_batch``, ``receive_ack_or_message``).
- per-message: one EventBatch of one record per event, so one protobuf message and one
  bridge crossing per event on each side, acked per message (the design DESIGN section 4
  avoids).

The sender keeps a bounded window of unacknowledged messages in flight, as the agent does.
With ``--json``, the last line is a JSON object with ``framed_events_per_s`` and
``per_message_events_per_s``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import betterproto
import msgspec
import trio

import wire
from wire import messages as m

BATCH = 200
FRAMED_WINDOW = 8  # batches in flight (8 x ~0.9 MB)
PER_MESSAGE_WINDOW = 256  # messages in flight


def pod_json(index: int, size: int = 4400) -> bytes:
    """A pod-like object padded to ``size`` bytes of JSON."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{index:06d}",
            "namespace": "default",
            "uid": f"0000-{index:08d}",
            "resourceVersion": str(100000 + index),
            "labels": {"app": "web", "tier": "frontend", "pod-template-hash": "7d4b9c8f6"},
            "annotations": {"kubesvc/padding": ""},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b"}
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": f"VAR_{i}", "value": f"value-{i}"} for i in range(20)],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                }
            ],
            "nodeName": "node-1",
        },
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }
    raw = msgspec.json.encode(pod)
    pod["metadata"]["annotations"]["kubesvc/padding"] = "x" * max(0, size - len(raw))  # type: ignore[index]
    return msgspec.json.encode(pod)


def make_records(count: int) -> list[wire.EventRecord]:
    return [
        wire.EventRecord(
            type=wire.EventType.MODIFIED,
            account="bench",
            api_version="v1",
            kind="Pod",
            namespace="default",
            name=f"web-{i:06d}",
            uid=f"0000-{i:08d}",
            resource_version=str(100000 + i),
            object=pod_json(i),
        )
        for i in range(count)
    ]


# ---- server process --------------------------------------------------------------------------


async def bench_handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
    """Decodes every batch (as the real server must) and acks it."""
    while True:
        try:
            message = await stream.receive()
        except wire.EndOfStream:
            return
        name, _ = betterproto.which_one_of(message, "message")
        if name == "heartbeat":
            # The client asks for our CPU time so far (used to report CPU per event).
            cpu_ms = int(time.process_time() * 1000)
            await stream.send(m.ServerMessage(heartbeat=m.Heartbeat(sent_at_ms=cpu_ms)))
            continue
        batch = message.event_batch
        records = wire.decode_events(batch.records)
        if len(records) != batch.count:
            raise wire.Refuse(wire.Status.INVALID_ARGUMENT, "count does not match the records")
        await stream.send(m.ServerMessage(ack=m.Ack(seq=batch.seq)))


async def run_server() -> None:
    async with wire.open_loop(), trio.open_nursery() as nursery:
        port = await nursery.start(wire.serve, bench_handler, "127.0.0.1", 0)
        print(port, flush=True)


# ---- client (parent process) -----------------------------------------------------------------


@dataclass
class Result:
    events: int
    payload_bytes: int
    seconds: float
    client_cpu: float
    server_cpu: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.payload_bytes / self.seconds / 1e6

    def cpu_us_per_event(self, cpu: float) -> float:
        return cpu / self.events * 1e6


async def pump(
    port: int, records: list[wire.EventRecord], per_message: int, window: int, seconds: float
) -> Result:
    """Send messages of ``per_message`` records for ``seconds``; count what the server acked.

    A Heartbeat before and after asks the server for its CPU time, answered in kind.
    """
    in_flight = trio.Semaphore(window)
    acked_events = 0
    acked_bytes = 0
    sizes: dict[int, tuple[int, int]] = {}
    cpu_send, cpu_receive = trio.open_memory_channel[int](1)

    async with wire.open_connection("127.0.0.1", port) as stream:

        async def receive() -> None:
            nonlocal acked_events, acked_bytes
            while True:
                received = await stream.receive_ack_or_message()
                if not isinstance(received, int):
                    await cpu_send.send(received.heartbeat.sent_at_ms)
                    continue
                events, size = sizes.pop(received)
                acked_events += events
                acked_bytes += size
                in_flight.release()

        async def server_cpu() -> float:
            await stream.send(m.AgentMessage(heartbeat=m.Heartbeat()))
            return await cpu_receive.receive() / 1000

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            server_start = await server_cpu()
            started, cpu_started = time.perf_counter(), time.process_time()
            deadline = trio.current_time() + seconds
            seq = 0
            position = 0
            while trio.current_time() < deadline:
                await in_flight.acquire()
                chunk = records[position : position + per_message]
                position = (position + per_message) % (len(records) - per_message)
                seq += 1
                data = wire.encode_events(chunk)
                sizes[seq] = (len(chunk), len(data))
                await stream.send_event_batch(seq, data, len(chunk))
            for _ in range(window):  # drain: every ack is in
                await in_flight.acquire()
            elapsed = time.perf_counter() - started
            client_cpu = time.process_time() - cpu_started
            server_used = await server_cpu() - server_start
            nursery.cancel_scope.cancel()
    return Result(acked_events, acked_bytes, elapsed, client_cpu, server_used)


async def run_client(seconds: float, as_json: bool) -> None:
    records = make_records(2000)
    event_size = len(records[0].object)
    server = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.bench.bench_wire", "--serve"],
        stdout=subprocess.PIPE,
    )
    try:
        assert server.stdout is not None
        line = b""
        with trio.fail_after(30):
            while not line.endswith(b"\n"):
                chunk = await server.stdout.receive_some(64)
                if not chunk:
                    raise RuntimeError("the server process exited before reporting its port")
                line += chunk
        port = int(line)
        async with wire.open_loop():
            framed = await pump(port, records, BATCH, FRAMED_WINDOW, seconds)
            single = await pump(port, records, 1, PER_MESSAGE_WINDOW, seconds / 2)
    finally:
        server.kill()
        await server.wait()

    cores = os.cpu_count()
    print(f"wire bridge over loopback, {event_size} B pod-like events, one client process and")
    print(f"one server process sharing {cores} cores (the server decodes every batch and acks it)")
    print(
        f"  framed, {BATCH} per EventBatch: {framed.events_per_s:10,.0f} events/s "
        f"{framed.mb_per_s:7.1f} MB/s  ({framed.events:,} events in {framed.seconds:.1f} s)"
    )
    print(
        f"  one message per event:      {single.events_per_s:10,.0f} events/s "
        f"{single.mb_per_s:7.1f} MB/s  ({single.events:,} events in {single.seconds:.1f} s)"
    )
    print(f"  framed / per-message: {framed.events_per_s / single.events_per_s:.1f}x")
    for label, result in (("framed", framed), ("per-message", single)):
        print(
            f"  CPU per event, {label}: client {result.cpu_us_per_event(result.client_cpu):.1f} us,"
            f" server {result.cpu_us_per_event(result.server_cpu):.1f} us"
        )
    load = os.getloadavg()[0]
    print(f"  load average during the run: {load:.1f} on {cores} cores (others share this machine)")
    if as_json:
        print(
            json.dumps(
                {
                    "framed_events_per_s": round(framed.events_per_s),
                    "framed_mb_per_s": round(framed.mb_per_s, 1),
                    "per_message_events_per_s": round(single.events_per_s),
                    "per_message_mb_per_s": round(single.mb_per_s, 1),
                    "event_bytes": event_size,
                    "batch": BATCH,
                    "cores": cores,
                    "framed_client_cpu_us_per_event": round(
                        framed.cpu_us_per_event(framed.client_cpu), 1
                    ),
                    "framed_server_cpu_us_per_event": round(
                        framed.cpu_us_per_event(framed.server_cpu), 1
                    ),
                    "load_average": round(load, 1),
                }
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print a JSON summary last")
    parser.add_argument("--seconds", type=float, default=8.0, help="framed phase length")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        trio.run(run_server)
    else:
        trio.run(run_client, args.seconds, args.json)


if __name__ == "__main__":
    main()
