"""A graceful API-server shutdown over HTTP/2 is routine: the server says GOAWAY, finishes the
streams it took, and closes. The watch it covered reads to its end with no error, the next
request goes to a new connection, and the log has one DEBUG line naming the account (before,
the h2 library raised ProtocolError on the first frame after the GOAWAY, failing every watch
on the connection, and the agent logged it without the account)."""

from __future__ import annotations

import logging
import ssl
from functools import partial
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
import trio

from agent.kube._client import KubeClient
from agent.kube._kubeconfig import ClusterAccess

from ._kube_edge import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def _context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(
        pki.write("s.crt", pki.server_cert_pem), pki.write("s.key", pki.server_key_pem)
    )
    context.set_alpn_protocols(["h2"])
    return context


async def test_a_graceful_shutdown_ends_the_watch_cleanly_and_is_logged_at_debug(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    connections = 0

    async def shutting_down(stream: trio.SSLStream[trio.SocketStream]) -> None:
        """The first connection: a watch answered with one event, then GOAWAY naming it,
        the rest of the watch, its end, and the connection closed. Later ones: answers."""
        nonlocal connections
        connections += 1
        first = connections == 1
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        conn.initiate_connection()
        await stream.send_all(conn.data_to_send())
        try:
            await _serve(stream, conn, first)
        except trio.BrokenResourceError:
            pass  # the client closes its connection without a TLS close_notify

    async def _serve(
        stream: trio.SSLStream[trio.SocketStream], conn: h2.connection.H2Connection, first: bool
    ) -> None:
        while data := await stream.receive_some(65536):
            for event in conn.receive_data(data):
                if not isinstance(event, h2.events.RequestReceived) or not event.stream_id:
                    continue
                sid = event.stream_id
                conn.send_headers(sid, [(b":status", b"200")])
                if first:
                    conn.send_data(sid, b'{"type":"ADDED"}\n')
                    await stream.send_all(conn.data_to_send())
                    conn.close_connection(last_stream_id=sid)  # GOAWAY, NO_ERROR
                    await stream.send_all(conn.data_to_send())
                    # h2 refuses to send on a connection it closed: frame the rest by hand.
                    rest = b'{"type":"MODIFIED"}\n'
                    head = len(rest).to_bytes(3, "big") + b"\x00\x01" + sid.to_bytes(4, "big")
                    await stream.send_all(head + rest)
                    # Closed once the client has read it all and let the connection go (a
                    # close with its frames unread could reset what the client has not read).
                    while await stream.receive_some(65536):
                        pass
                    await stream.aclose()
                    return
                conn.send_data(sid, b'{"major": "1"}', end_stream=True)
            await stream.send_all(conn.data_to_send())

    caplog.set_level(logging.DEBUG, logger="agent.kube")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(
                partial(trio.serve_ssl_over_tcp, shutting_down, 0, _context(pki), host="127.0.0.1")
            )
            port = listeners[0].transport_listener.socket.getsockname()[1]
            access = ClusterAccess(server=f"https://127.0.0.1:{port}", ca_pem=pki.ca_pem)
            async with KubeClient(access, account="acc") as client:
                async with client.stream("GET", "/w", params={"watch": "1"}) as response:
                    body = await response.read()
                assert body == b'{"type":"ADDED"}\n{"type":"MODIFIED"}\n'
                assert (await client.get_json("/version")) == {"major": "1"}
                assert connections == 2
            nursery.cancel_scope.cancel()
    kube = [r for r in caplog.records if r.name == "agent.kube"]
    goaway = [r for r in kube if "GOAWAY" in r.getMessage()]
    assert len(goaway) == 1
    assert goaway[0].levelno == logging.DEBUG
    assert goaway[0].getMessage().startswith(f"account acc: 127.0.0.1:{port}: GOAWAY (NO_ERROR")
    assert [r.getMessage() for r in kube if r.levelno >= logging.INFO] == []
