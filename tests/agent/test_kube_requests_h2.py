"""Short requests (operations, discovery) on the agent's own HTTP/2 connections, the ones the
watches use: methods and bodies, answers with Content-Length, credentials refreshed after a
401, and requests the server dropped at a GOAWAY sent again. Real HTTPS servers on loopback."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
import trio

import kubesim
from agent.kube._client import KubeClient
from agent.kube._kubeconfig import ClusterAccess, load_kubeconfig

from ._kube_edge import Pki, Reply, Seen, make_pki, serve_api, status_body


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@asynccontextmanager
async def _client(access: ClusterAccess) -> AsyncIterator[KubeClient]:
    async with trio.open_nursery() as nursery:
        async with KubeClient(access, nursery=nursery) as client:
            yield client
        nursery.cancel_scope.cancel()


async def test_requests_of_every_method_share_the_watch_connection(pki: Pki) -> None:
    async def echo(seen: Seen) -> Reply:
        answer = {"method": seen.method, "body": seen.body.decode(), "query": seen.query}
        return 200, {}, json.dumps(answer).encode()  # Hypercorn adds a Content-Length

    access = ClusterAccess(server="", ca_pem=pki.ca_pem, token="t0k")
    with trio.fail_after(20):
        async with (
            serve_api(echo, pki=pki) as server,
            _client(replace(access, server=server.url)) as client,
        ):
            async with trio.open_nursery() as nursery:
                for n in range(10):
                    nursery.start_soon(client.get_json, f"/api/{n}", {"limit": "5"})
            for method in ("POST", "PUT", "PATCH", "DELETE"):
                reply = await client.request(method, "/apis/x", content=b'{"a":1}')
                assert reply.json() == {"method": method, "body": '{"a":1}', "query": ""}
            big = b"x" * 200_000  # more than the windows open: it waits for WINDOW_UPDATEs
            assert (await client.request("POST", "/big", content=big)).status_code == 200
            assert client.watch_connections == 1
    small = [seen for seen in server.seen if seen.path != "/big"]
    assert len(small) == 14
    assert {seen.http_version for seen in small} == {"2"}
    assert len({seen.client_port for seen in small}) == 1
    assert small[0].query == "limit=5"
    assert small[0].headers["authorization"] == "Bearer t0k"
    assert small[-1].headers["content-length"] == "7"
    assert [seen.body for seen in server.seen if seen.path == "/big"] == [big]
    big_seen = next(seen for seen in server.seen if seen.path == "/big")
    assert (big_seen.http_version, big_seen.client_port) == ("2", small[0].client_port)


async def test_a_401_gets_a_fresh_token_file_credential(pki: Pki, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")

    async def only_new(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != "Bearer new":
            return 401, {}, status_body(401, "Unauthorized", "Unauthorized")
        return 200, {}, b'{"ok": 1}'

    access = ClusterAccess(server="", ca_pem=pki.ca_pem, token_file=str(token))
    with trio.fail_after(20):
        async with (
            serve_api(only_new, pki=pki) as server,
            _client(replace(access, server=server.url)) as client,
        ):
            reply = await client.request("POST", "/api", content=b"{}")
            assert reply.status_code == 401  # the file still holds the refused token
            token.write_text("new")
            assert (await client.request("POST", "/api", content=b"{}")).json() == {"ok": 1}
    # The first 401 found the same token in the file: no resend. The second request's 401
    # read the rotated file and was sent once more with it.
    assert [seen.headers["authorization"] for seen in server.seen] == [
        "Bearer old",
        "Bearer old",
        "Bearer new",
    ]
    assert {seen.http_version for seen in server.seen} == {"2"}


async def test_requests_above_a_goaways_last_stream_are_sent_again(pki: Pki) -> None:
    """The server answers one request per connection, then says GOAWAY naming that one as
    the last it took: the others were never processed and go out again, POST included."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        pki.write("s.crt", pki.server_cert_pem), pki.write("s.key", pki.server_key_pem)
    )
    context.set_alpn_protocols(["h2"])
    taken: list[tuple[str, bytes]] = []

    async def one_per_connection(stream: trio.SSLStream[trio.SocketStream]) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        conn = h2.connection.H2Connection(config)
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        answered = 0
        bodies: dict[int, bytes] = {}
        while data := await stream.receive_some(65536):
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.DataReceived) and event.stream_id:
                    bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                if not isinstance(event, h2.events.StreamEnded) or answered:
                    continue
                answered = event.stream_id
                taken.append((f"stream {event.stream_id}", bodies.get(event.stream_id, b"")))
                conn.send_headers(answered, [(b":status", b"200"), (b"content-length", b"2")])
                conn.send_data(answered, b"{}", end_stream=True)
                conn.close_connection(last_stream_id=answered)
            await stream.send_all(conn.data_to_send())
            if answered:
                await trio.sleep(0.2)  # the others' frames arrive; they are never processed
                return

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, one_per_connection, 0, context, host="127.0.0.1")
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            access = ClusterAccess(server=f"https://127.0.0.1:{port}", ca_pem=pki.ca_pem)
            async with _client(access) as client, trio.open_nursery() as requests:
                for n in range(4):
                    post = partial(client.request, "POST", f"/p/{n}", content=b"%d" % n)
                    requests.start_soon(post)
            nursery.cancel_scope.cancel()
    assert sorted(body for _, body in taken) == [b"0", b"1", b"2", b"3"]  # each once


async def test_more_requests_than_hypercorns_default_cap_on_one_kubesim_connection(
    tmp_path: Path,
) -> None:
    sim = kubesim.Cluster()
    with trio.fail_after(60):
        async with kubesim.open_server(sim, tls=True) as server:
            access = load_kubeconfig(server.kubeconfig(tmp_path / "kubeconfig"))
            async with _client(access) as client:
                for _ in range(1005):
                    reply = await client.request("GET", "/api/v1/namespaces/default")
                    assert reply.status_code == 200
                assert client.watch_connections == 1
