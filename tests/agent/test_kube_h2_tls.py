"""The HTTP/2 connections' own TLS layer (agent.kube._tls.TlsStream) against trio's TLS server
on loopback: one read hands over every whole TLS record already received (trio.SSLStream gives
one record per read, a scheduler pass each), writes reach the server, and the end of the
connection reads as b""."""

from __future__ import annotations

import select
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from agent.kube._tls import TlsStream as _TlsStream

from .._wait import wait_until
from ._kube_edge import Pki, make_pki

RECORDS = 20
RECORD = 1000


def _fin_received(sock: trio.socket.SocketType) -> bool:
    """The peer's FIN is in ``sock``'s receive queue (POLLRDHUP), behind all its data."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLRDHUP)
    return any(events & select.POLLRDHUP for _, events in poller.poll(0))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@asynccontextmanager
async def _connected(
    serve: Callable[[trio.SocketStream], Awaitable[object]], client_context: ssl.SSLContext
) -> AsyncIterator[_TlsStream]:
    """A TlsStream (no handshake yet) over TCP to a trio server on loopback that runs
    ``serve`` per connection; the server stops at the end."""
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, serve, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        yield _TlsStream(tcp, client_context, "localhost")
        nursery.cancel_scope.cancel()


def _contexts(pki: Pki) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(
        pki.write("server.pem", pki.server_cert_pem), pki.write("server.key", pki.server_key_pem)
    )
    client = ssl.create_default_context(cadata=pki.ca_pem.decode())
    return server, client


@pytest.mark.parametrize("into", [False, True], ids=["receive_some", "receive_into"])
async def test_one_read_takes_every_record_received_and_eof_reads_empty(
    pki: Pki, into: bool
) -> None:
    server_context, client_context = _contexts(pki)
    closed = trio.Event()
    heard: list[bytes] = []

    async def serve(tcp: trio.SocketStream) -> None:
        stream = trio.SSLStream(tcp, server_context, server_side=True)
        heard.append(bytes(await stream.receive_some(100)))
        for index in range(RECORDS):  # one TLS record per send_all
            await stream.send_all(bytes([index]) * RECORD)
        await stream.aclose()
        closed.set()

    with trio.fail_after(30):
        async with _connected(serve, client_context) as stream:
            await stream.do_handshake()
            await stream.send_all(b"hello")
            await closed.wait()
            # The server's close is not yet the client's: loopback delivers in the kernel's own
            # time (softirq). TCP delivers in order, so once the FIN is here so is every record.
            tcp = stream.transport
            assert isinstance(tcp, trio.SocketStream)
            await wait_until(lambda: _fin_received(tcp.socket), what="the server's FIN arrived")
            if into:  # appends to what the buffer held; 0 at EOF
                buffer = bytearray(b"held")
                assert await stream.receive_into(buffer, 256 * 1024) == len(buffer) - 4
                first = bytes(buffer[4:])
                while await stream.receive_into(buffer, 256 * 1024):
                    pass
                assert buffer.startswith(b"held" + first)
                rest = bytes(buffer[4 + len(first) :])
            else:
                first = await stream.receive_some(256 * 1024)
                rest = b""
                while chunk := await stream.receive_some(256 * 1024):
                    rest += chunk
            await stream.aclose()
    assert heard == [b"hello"]
    assert first + rest == b"".join(bytes([i]) * RECORD for i in range(RECORDS))
    assert len(first) == RECORDS * RECORD


async def test_a_server_of_another_ca_fails_the_handshake(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    stranger = make_pki(tmp_path / "other")
    server_context, _ = _contexts(pki)
    _, client_context = _contexts(stranger)

    async def serve(tcp: trio.SocketStream) -> None:
        stream = trio.SSLStream(tcp, server_context, server_side=True)
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(stream)

    with trio.fail_after(30):
        async with _connected(serve, client_context) as stream:
            with pytest.raises(trio.BrokenResourceError, match="CERTIFICATE_VERIFY_FAILED"):
                await stream.do_handshake()
            await stream.aclose()


async def test_the_peer_certificate_outlives_a_connection_that_failed(pki: Pki) -> None:
    # ssl raises ValueError ("handshake not done yet") for getpeercert once a connection has
    # failed after its handshake (a server that gave up on it mid-way sends garbage or an
    # alert); the account's identity asks for it then, and the error crashed the agent.
    server_context, client_context = _contexts(pki)
    done = trio.Event()

    async def serve(tcp: trio.SocketStream) -> None:
        stream = trio.SSLStream(tcp, server_context, server_side=True)
        await stream.do_handshake()
        await tcp.send_all(b"\x15\x03\x03\x00\x02\x02\x28")  # not a record of this session
        await done.wait()
        await tcp.aclose()

    with trio.fail_after(30):
        async with _connected(serve, client_context) as stream:
            await stream.do_handshake()
            certificate = stream.getpeercert()
            assert certificate is not None
            with pytest.raises(trio.BrokenResourceError):
                await stream.receive_some(1000)
            assert stream.getpeercert() == certificate
            done.set()
            await stream.aclose()


async def test_a_read_waiting_when_the_connection_is_closed_ends_with_closed(pki: Pki) -> None:
    """The reader waits on the socket itself (no read first): a close by another task, as
    the HTTP/2 health check does to a dead connection, must end that wait, and a read after
    it must say the connection is closed rather than read a reused descriptor."""
    server_context, client_context = _contexts(pki)

    async def serve(tcp: trio.SocketStream) -> None:
        stream = trio.SSLStream(tcp, server_context, server_side=True)
        await stream.do_handshake()
        await trio.sleep_forever()  # silent: the client's read waits

    with trio.fail_after(30):
        async with _connected(serve, client_context) as stream:
            await stream.do_handshake()
            ended: list[type[BaseException]] = []

            async def read() -> None:
                try:
                    await stream.receive_some(1024)
                except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
                    ended.append(type(exc))

            async with trio.open_nursery() as readers:
                readers.start_soon(read)
                await trio.testing.wait_all_tasks_blocked()
                await trio.aclose_forcefully(stream)
            assert ended == [trio.ClosedResourceError]
            with pytest.raises(trio.ClosedResourceError):
                await stream.receive_some(1024)
