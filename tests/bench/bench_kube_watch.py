"""Watch-body throughput of the agent's Kubernetes client over HTTP/2, on loopback.

A lean HTTP/2 server (the h2 library on trio, TLS, nothing else) answers every GET with a
body of --mib MiB as fast as flow control allows; the client reads it through
``KubeClient.stream()``. It compares the agent's own HTTP/2 watch connections with httpx's
HTTP/2 (``watch_http2=True``), for one watch and for --watches concurrent watches sharing the
connection. Server and client share one process (and core), so the figures are a floor.

    .venv/bin/python -m tests.bench.bench_kube_watch [--mib 64] [--watches 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import ssl
import tempfile
import time
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings
import trio

from agent._kube_client import KubeClient
from agent._kubeconfig import ClusterAccess
from tests.agent._kube_edge import make_pki


async def _serve_h2(context: ssl.SSLContext, total: int, task_status: trio.TaskStatus[int]) -> None:
    async def handle(stream: trio.SSLStream[trio.SocketStream]) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        conn = h2.connection.H2Connection(config)
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        left: dict[int, int] = {}
        payload = b"x" * (1 << 20)
        try:
            while data := await stream.receive_some(65536):
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived) and event.stream_id:
                        conn.send_headers(event.stream_id, [(b":status", b"200")])
                        left[event.stream_id] = total
                    elif isinstance(event, h2.events.StreamReset) and event.stream_id:
                        left.pop(event.stream_id, None)
                progressed = True
                while progressed:  # send what the windows allow, round robin
                    progressed = False
                    for stream_id, remaining in list(left.items()):
                        room = min(
                            conn.local_flow_control_window(stream_id),
                            conn.max_outbound_frame_size,
                            remaining,
                        )
                        if room > 0:
                            conn.send_data(stream_id, payload[:room], end_stream=room == remaining)
                            progressed = True
                            if room == remaining:
                                del left[stream_id]
                            else:
                                left[stream_id] = remaining - room
                if out := conn.data_to_send():
                    await stream.send_all(out)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    listeners = await trio.open_ssl_over_tcp_listeners(0, context, host="127.0.0.1")
    transport = listeners[0].transport_listener
    assert isinstance(transport, trio.SocketListener)
    task_status.started(transport.socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def _measure(url: str, ca: bytes, *, own: bool, watches: int) -> tuple[float, int]:
    """MiB/s over all watches, and the TCP connections the client used for them."""
    total = 0

    async def watch(client: KubeClient, n: int) -> None:
        nonlocal total
        async with client.stream("GET", f"/w/{n}", params={"watch": "1"}) as response:
            while data := await response.receive_some():
                total += len(data)

    async with trio.open_nursery() as readers:
        access = ClusterAccess(server=url, ca_pem=ca)
        client = KubeClient(access, nursery=readers if own else None, watch_http2=not own)
        async with client:
            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for n in range(watches):
                    nursery.start_soon(watch, client, n)
            elapsed = time.perf_counter() - started
            connections = client.watch_connections if own else client.connection_pools
        readers.cancel_scope.cancel()
    return total / elapsed / 2**20, connections


async def main(mib: int, watches: int) -> dict[str, float]:
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        pki = make_pki(Path(folder))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(
            pki.write("s.crt", pki.server_cert_pem), pki.write("s.key", pki.server_key_pem)
        )
        context.set_alpn_protocols(["h2"])
        async with trio.open_nursery() as nursery:
            port = await nursery.start(_serve_h2, context, mib * 2**20)
            url = f"https://127.0.0.1:{port}"
            for label, own in (("own_h2", True), ("httpx_h2", False)):
                for count in (1, watches):
                    rate, connections = await _measure(url, pki.ca_pem, own=own, watches=count)
                    key = f"{label}_{count}_watches_mib_per_s"
                    results[key] = round(rate, 1)
                    results[f"{label}_{count}_watches_connections"] = connections
            nursery.cancel_scope.cancel()
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32, help="MiB sent on each watch")
    parser.add_argument("--watches", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = trio.run(main, args.mib, args.watches)
    for name, value in figures.items():
        print(f"{name}: {value}")
    if args.json:
        print(json.dumps(figures))
