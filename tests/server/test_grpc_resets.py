"""The server outlives clients that reset the connection at every step of a call (issue #12,
point 1, the server's side of it): a TCP reset right after the connect, after the HTTP/2
preface, after the call's headers, in the middle of a message; and bytes that are not HTTP/2.
After all of them an agent still gets its Welcome."""

from __future__ import annotations

import socket
import struct

import h2.config
import h2.connection
import trio

import wire
from wire import messages as m
from wire._envelope import grpc_framed

from ..wire._loop import in_loop
from .test_grpc import account, bearer, hello, make_config, receive_kind, running, token


def _call_bytes(metadata: dict[str, str]) -> tuple[bytes, bytes]:
    """(the HTTP/2 preface, SETTINGS and a Connect call's HEADERS; half a Hello's DATA)."""
    connection = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    connection.initiate_connection()
    headers = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", m.CONNECT_METHOD),
        (":authority", "127.0.0.1"),
        ("te", "trailers"),
        ("content-type", "application/grpc"),
        *metadata.items(),
    ]
    connection.send_headers(1, headers)
    opening = connection.data_to_send()
    framed = grpc_framed(bytes(hello(account())))
    connection.send_data(1, framed)
    data = connection.data_to_send()
    return opening, data[: len(data) - len(framed) // 2]


async def _send_then_reset(port: int, payload: bytes) -> None:
    sock = trio.socket.socket()
    with sock:
        await sock.connect(("127.0.0.1", port))
        if payload:
            await sock.send(payload)
            # Best effort to let the server read it first (a reset may drop unread bytes);
            # whichever step the server sees, the assertion below holds for all of them.
            await trio.sleep(0.01)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


@in_loop
async def test_the_server_outlives_resets_at_every_step() -> None:
    meta = bearer(token(accounts=["prod"]))
    opening, half_message = _call_bytes(meta)
    steps = [
        b"",  # reset right after the connect
        opening[:24],  # the HTTP/2 preface only
        opening,  # preface, SETTINGS, the call's HEADERS
        opening + half_message,  # and half of the Hello
        b"\x00" * 9 + b"not HTTP/2",  # bytes h2 refuses
    ]
    with trio.fail_after(30):
        async with running(make_config()) as server:
            for _ in range(3):
                for payload in steps:
                    await _send_then_reset(server.grpc_port, payload)
            async with wire.open_connection("127.0.0.1", server.grpc_port, metadata=meta) as s:
                await s.send(hello(account()))
                welcome: m.Welcome = await receive_kind(s, "welcome")
                assert [a.role for a in welcome.accounts] == [m.Role.PRIMARY]
