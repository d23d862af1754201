"""The agent's own HTTP/2 watch connections: many quiet watches on one TCP connection, no
starvation, per-stream backpressure, more connections past the server's stream limit,
fallback to HTTP/1.1, and errors. Against a real Hypercorn HTTPS server on loopback."""

from __future__ import annotations

import json
import ssl
import stat
import sys
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
import trio.testing

from agent import KubeClosedError, KubeConnectionError, KubeStream, KubeTimeoutError
from agent.config._schema import RetriesConfig
from agent.kube._client import KubeClient
from agent.kube._kubeconfig import ClusterAccess, ExecConfig

from ._kube_edge import Pki, Reply, Seen, make_pki, serve_api

WATCH = {"watch": "1"}
EXEC_V1 = "client.authentication.k8s.io/v1"


async def _drain(response: KubeStream) -> None:
    while await response.receive_some():
        pass


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@asynccontextmanager
async def _client(url: str, pki: Pki, **changes: object) -> AsyncIterator[KubeClient]:
    access = replace(ClusterAccess(server=url, ca_pem=pki.ca_pem, token="t0k"), **changes)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        async with KubeClient(access, nursery=nursery) as client:
            yield client
        nursery.cancel_scope.cancel()


async def test_quiet_watches_share_one_connection_and_never_block_a_request(pki: Pki) -> None:
    release = trio.Event()

    async def hold(seen: Seen) -> Reply:
        if seen.path == "/version":
            return 200, {}, b'{"major": "1"}'
        await release.wait()
        return 200, {}, b'{"type": "ADDED"}\n'

    bodies: list[bytes] = []

    async def watch(client: KubeClient, n: int) -> None:
        async with client.stream("GET", f"/api/v1/pods/{n}", params=WATCH) as response:
            assert response.http_version == "HTTP/2"
            bodies.append(await response.read())

    with trio.fail_after(30):
        async with serve_api(hold, pki=pki) as server, _client(server.url, pki) as client:
            async with trio.open_nursery() as nursery:
                for n in range(20):
                    nursery.start_soon(watch, client, n)
                await server.wait_seen(20)
                with trio.fail_after(5):
                    assert (await client.get_json("/version"))["major"] == "1"
                release.set()
            assert client.watch_connections == 1
    assert bodies == [b'{"type": "ADDED"}\n'] * 20
    watches = [seen for seen in server.seen if seen.path != "/version"]
    assert {seen.http_version for seen in watches} == {"2"}
    assert len({seen.client_port for seen in watches}) == 1
    assert watches[0].query == "watch=1"
    assert watches[0].headers["authorization"] == "Bearer t0k"


async def test_a_full_stream_does_not_hold_back_the_others(pki: Pki) -> None:
    big = [b"x" * 16384] * 64  # 1 MiB: far more than one stream's window

    async def answer(seen: Seen) -> Reply:
        if seen.path.endswith("/big"):
            return 200, {}, big
        return 200, {}, b"small\n"

    with trio.fail_after(30):
        async with serve_api(answer, pki=pki) as server, _client(server.url, pki) as client:
            async with client.stream("GET", "/api/v1/big", params=WATCH) as stalled:
                assert await stalled.receive_some()  # then stop reading it
                async with client.stream("GET", "/api/v1/small", params=WATCH) as other:
                    assert await other.read() == b"small\n"
                rest = await stalled.read()
            assert len(rest) + 16384 <= sum(map(len, big))
            assert client.watch_connections == 1
    assert len({seen.client_port for seen in server.seen}) == 1


async def test_past_the_servers_stream_limit_another_connection_opens(pki: Pki) -> None:
    release = trio.Event()

    async def hold(seen: Seen) -> Reply:
        await release.wait()
        return 200, {}, b""

    async def watch(client: KubeClient, n: int) -> None:
        async with client.stream("GET", f"/w/{n}", params=WATCH) as response:
            await response.read()

    with trio.fail_after(30):
        async with (
            serve_api(hold, pki=pki) as server,
            _client(server.url, pki) as client,
            trio.open_nursery() as nursery,
        ):
            for n in range(150):  # Hypercorn allows 100 streams per connection
                nursery.start_soon(watch, client, n)
            await server.wait_seen(150)
            assert client.watch_connections == 2
            release.set()
    assert len({seen.client_port for seen in server.seen}) == 2


async def test_leaving_a_watch_early_resets_only_that_stream(pki: Pki) -> None:
    async def endless(seen: Seen) -> Reply:
        if seen.path == "/version":
            return 200, {}, b'{"major": "1"}'
        return 200, {}, [b"y" * 16384] * 256

    with trio.fail_after(30):
        async with serve_api(endless, pki=pki) as server, _client(server.url, pki) as client:
            for _ in range(5):
                async with client.stream("GET", "/api/v1/pods", params=WATCH) as response:
                    assert await response.receive_some()
            with trio.move_on_after(0.1):
                async with client.stream("GET", "/api/v1/pods", params=WATCH):
                    await trio.sleep_forever()
            async with client.stream("GET", "/api/v1/pods", params=WATCH) as response:
                assert await response.receive_some()
            assert client.watch_connections == 1
    assert len({seen.client_port for seen in server.seen if seen.path != "/version"}) == 1


async def test_a_server_without_h2_gets_http1_watches(pki: Pki) -> None:
    with trio.fail_after(30):
        async with (
            serve_api(pki=pki, http2=False) as server,
            _client(server.url, pki) as client,
        ):
            async with client.stream("GET", "/version", params=WATCH) as response:
                assert response.http_version == "HTTP/1.1"
                assert b"major" in await response.read()
            assert client.watch_connections == 0


async def test_a_watch_keeps_the_server_urls_path(pki: Pki) -> None:
    # A cluster behind a proxy (https://proxy/k8s/clusters/c1): watches, like requests, go
    # under the server URL's path.
    async def answer(seen: Seen) -> Reply:
        return 200, {}, json.dumps({"type": "ADDED", "path": seen.path}).encode() + b"\n"

    with trio.fail_after(30):
        async with (
            serve_api(answer, pki=pki) as server,
            _client(f"{server.url}/k8s/clusters/c1", pki) as client,
        ):
            async with client.stream("GET", "/api/v1/pods", params=WATCH) as response:
                assert response.http_version == "HTTP/2"
                body = json.loads(await response.read())
            assert body["path"] == "/k8s/clusters/c1/api/v1/pods"


async def test_a_rotated_token_is_used_after_a_401_on_a_watch(pki: Pki, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("old")

    async def only_new(seen: Seen) -> Reply:
        if seen.headers.get("authorization") != "Bearer new":
            return 401, {}, b'{"kind": "Status", "code": 401, "reason": "Unauthorized"}'
        return 200, {}, b"ok"

    with trio.fail_after(30):
        async with (
            serve_api(only_new, pki=pki) as server,
            _client(server.url, pki, token=None, token_file=str(token)) as client,
        ):
            async with client.stream("GET", "/w", params=WATCH) as response:
                assert response.status_code == 401
            token.write_text("new")
            async with client.stream("GET", "/w", params=WATCH) as response:
                assert response.status_code == 200
                assert await response.read() == b"ok"
    # As for every request (one 401 refresh for all): the first 401 found the same token in
    # the file, so the watch was not sent again; the second read the rotated file.
    assert [seen.headers["authorization"] for seen in server.seen] == [
        "Bearer old",
        "Bearer old",
        "Bearer new",
    ]


async def test_a_server_going_away_breaks_the_watch(pki: Pki) -> None:
    async def first_then_silence() -> AsyncIterator[bytes]:
        yield b"first\n"
        await trio.sleep_forever()

    async def answer(seen: Seen) -> Reply:
        return 200, {}, first_then_silence()

    stop = trio.Event()

    async def run_server(task_status: trio.TaskStatus[str]) -> None:
        async with serve_api(answer, pki=pki) as server:
            task_status.started(server.url)
            await stop.wait()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(run_server)
            async with (
                _client(url, pki) as client,
                client.stream("GET", "/w", params=WATCH) as response,
            ):
                assert await response.receive_some() == b"first\n"
                stop.set()
                with pytest.raises(KubeConnectionError):
                    await _drain(response)


async def test_an_exec_plugin_client_certificate_is_presented(pki: Pki, tmp_path: Path) -> None:
    script = tmp_path / "plugin"
    status = {
        "clientCertificateData": pki.client_cert_pem.decode(),
        "clientKeyData": pki.client_key_pem.decode(),
    }
    document = {"apiVersion": EXEC_V1, "kind": "ExecCredential", "status": status}
    script.write_text(f"#!{sys.executable}\nprint({json.dumps(json.dumps(document))})\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    plugin = ExecConfig(EXEC_V1, str(script))
    with trio.fail_after(30):
        async with (
            serve_api(pki=pki, require_client_cert=True) as server,
            _client(server.url, pki, token=None, exec=plugin) as client,
        ):
            async with client.stream("GET", "/version", params=WATCH) as response:
                assert response.http_version == "HTTP/2"
                assert b"major" in await response.read()
            assert (await client.get_json("/version"))["major"] == "1"
    assert all("authorization" not in seen.headers for seen in server.seen)


async def test_connection_failures_on_the_watch_path_are_connection_errors(
    pki: Pki, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    stranger = make_pki(tmp_path / "other")
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    closed_port = listener.getsockname()[1]
    listener.close()
    with trio.fail_after(30):
        async with _client(f"https://127.0.0.1:{closed_port}", pki) as client:
            with pytest.raises(KubeConnectionError, match="cannot connect"):
                async with client.stream("GET", "/w", params=WATCH):
                    pass
        async with serve_api(pki=pki) as server, _client(server.url, stranger) as client:
            with pytest.raises(KubeConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
                async with client.stream("GET", "/w", params=WATCH):
                    pass


async def test_closing_the_client_ends_open_watches_with_closed_errors(pki: Pki) -> None:
    async def silent() -> AsyncIterator[bytes]:
        yield b"hello\n"
        await trio.sleep_forever()

    async def answer(seen: Seen) -> Reply:
        return 200, {}, silent()

    with trio.fail_after(30):
        async with (
            serve_api(answer, pki=pki) as server,
            _client(server.url, pki) as client,
            client.stream("GET", "/w", params=WATCH) as response,
        ):
            assert await response.receive_some() == b"hello\n"
            await client.aclose()
            with pytest.raises(KubeClosedError):
                await response.receive_some()


async def test_a_silent_dead_connection_is_found_by_ping(
    pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    """The peer answers the watch's headers, then never reads or writes again (a vanished
    host behind a silent network): the PING health check closes the connection."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        pki.write("s.crt", pki.server_cert_pem), pki.write("s.key", pki.server_key_pem)
    )
    context.set_alpn_protocols(["h2"])

    async def goes_silent(stream: trio.SSLStream[trio.SocketStream]) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        conn = h2.connection.H2Connection(config)
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        while True:
            events = conn.receive_data(await stream.receive_some(65536))
            for event in events:
                if isinstance(event, h2.events.RequestReceived) and event.stream_id:
                    conn.send_headers(event.stream_id, [(b":status", b"200")])
                    await stream.send_all(conn.data_to_send())
                    await trio.sleep_forever()  # silence from now on
            await stream.send_all(conn.data_to_send())

    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, goes_silent, 0, context, host="127.0.0.1")
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            async with (
                _client(f"https://127.0.0.1:{port}", pki) as client,
                client.stream("GET", "/w", params=WATCH) as response,
            ):
                assert response.status_code == 200
                started = trio.current_time()
                with pytest.raises(KubeConnectionError, match="no answer to an HTTP/2 PING"):
                    await response.receive_some()
                assert 45 <= trio.current_time() - started <= 50
            nursery.cancel_scope.cancel()


async def test_a_server_that_never_sends_its_settings_times_out_connecting(
    pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    """TLS and ALPN h2 complete, then silence: the client must not wait for the server's
    SETTINGS for ever (every request of the cluster would queue behind that connect)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        pki.write("s.crt", pki.server_cert_pem), pki.write("s.key", pki.server_key_pem)
    )
    context.set_alpn_protocols(["h2"])

    async def mute(stream: trio.SSLStream[trio.SocketStream]) -> None:
        await stream.do_handshake()
        await trio.sleep_forever()

    with trio.fail_after(600):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, mute, 0, context, host="127.0.0.1")
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            access = ClusterAccess(server=f"https://127.0.0.1:{port}", ca_pem=pki.ca_pem)
            async with KubeClient(access, retries=RetriesConfig(enabled=False)) as client:
                started = trio.current_time()
                with pytest.raises(KubeTimeoutError, match="no HTTP/2 SETTINGS"):
                    await client.request("GET", "/version")
                assert 30 <= trio.current_time() - started <= 31
            nursery.cancel_scope.cancel()
