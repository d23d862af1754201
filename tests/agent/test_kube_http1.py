"""The agent's own HTTP/1.1 pool for short requests: the response parser with no network,
then the pool against raw TCP servers on loopback (reuse, stale connections, framing)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

import pytest
import trio

from agent import KubeConnectionError, KubeError
from agent.config._schema import RetriesConfig
from agent.kube._client import KubeClient
from agent.kube._http1_parse import BodyTooLarge, Http1Error, ResponseReader
from agent.kube._kubeconfig import ClusterAccess

NO_RETRIES = RetriesConfig(enabled=False)


def _read(*pieces: bytes, max_body: int = 1000, eof: bool = False) -> ResponseReader:
    reader = ResponseReader(max_body=max_body)
    for piece in pieces:
        reader.feed(piece)
    if eof:
        reader.feed_eof()
    return reader


def test_a_content_length_answer_fed_byte_by_byte() -> None:
    answer = (
        b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n"
        b'{"a":1}'
    )
    reader = ResponseReader(max_body=100)
    for index in range(len(answer) - 1):
        reader.feed(answer[index : index + 1])
        assert reader.body() is None
    reader.feed(answer[-1:])
    assert reader.body() == b'{"a":1}'
    head = reader.head()
    assert head is not None
    assert head.status_code == 201
    assert head.headers["content-type"] == "application/json"
    assert reader.keep_alive
    assert not reader.extra


def test_a_chunked_answer_with_extensions_and_trailers() -> None:
    reader = _read(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;x=y\r\nab",
        b"cd\r\n3\r\nefg\r\n0\r\nX-Trailer: 1\r\n",
    )
    assert reader.body() is None
    reader.feed(b"\r\n")
    assert reader.body() == b"abcdefg"
    assert reader.keep_alive


def test_interim_answers_are_skipped_and_repeated_headers_joined() -> None:
    reader = _read(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nWarning: a\r\nwarning: b\r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    assert reader.body() == b""
    head = reader.head()
    assert head is not None
    assert head.headers["warning"] == "a, b"


def test_no_length_means_until_the_peer_closes_and_no_reuse() -> None:
    reader = _read(b"HTTP/1.1 200 OK\r\n\r\nsome", b" body")
    assert reader.body() is None
    reader.feed_eof()
    assert reader.body() == b"some body"
    assert not reader.keep_alive


def test_connection_close_and_http10_are_not_kept() -> None:
    closing = _read(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    assert closing.body() == b""
    assert not closing.keep_alive
    old = _read(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert old.body() == b""
    assert not old.keep_alive


def test_no_body_for_204_and_head() -> None:
    assert _read(b"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n").body() == b""
    head = ResponseReader(head_request=True, max_body=10)
    head.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n")
    assert head.body() == b""


def test_bytes_past_the_answer_forbid_reuse() -> None:
    reader = _read(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
    assert reader.body() == b"ok"
    assert reader.extra


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + b"x" * 2000,
        b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 2000,
    ],
)
def test_a_body_past_the_cap_is_refused_whatever_its_framing(answer: bytes) -> None:
    with pytest.raises(BodyTooLarge):
        _read(answer, max_body=1000).body()


@pytest.mark.parametrize(
    ("answer", "eof", "message"),
    [
        (b"SPDY/3 200 OK\r\n\r\n", False, "status line"),
        (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", False, "header line"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", False, "Content-Length"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", False, "chunk size"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", True, "mid-body"),
        (b"HTTP/1.1 200 O", True, "mid-head"),
        (b"HTTP/1.1 200 OK\r\n" + b"x: y\r\n" * 20000, False, "too large"),
    ],
)
def test_malformed_answers_are_protocol_errors(answer: bytes, eof: bool, message: str) -> None:
    with pytest.raises(Http1Error, match=message):
        _read(answer, eof=eof).body()


# -- the pool through KubeClient, against raw servers ---------------------------------------

Handler = Callable[[trio.SocketStream], Awaitable[None]]


async def _read_request(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            want = int(line.split(b":")[1])
            while len(rest) < want:
                rest += await stream.receive_some(65536)
    return head


async def _with_server(
    handler: Handler, body: Callable[[KubeClient], Awaitable[None]], *, max_connections: int = 64
) -> None:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
            port = listeners[0].socket.getsockname()[1]
            access = ClusterAccess(server=f"http://127.0.0.1:{port}", token="t0k")
            client = KubeClient(access, retries=NO_RETRIES, max_connections=max_connections)
            async with client:
                await body(client)
            nursery.cancel_scope.cancel()


async def test_keep_alive_reuses_one_connection_and_sends_the_credential() -> None:
    heads: list[bytes] = []
    connections = 0

    async def answer(stream: trio.SocketStream) -> None:
        nonlocal connections
        connections += 1
        while head := await _read_request(stream):
            heads.append(head)
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async def use(client: KubeClient) -> None:
        for _ in range(3):
            assert (await client.request("GET", "/api", params={"a": "b c"})).json() == {}
        reply = await client.request("POST", "/api/v1/x", content=b'{"k":1}')
        assert reply.status_code == 200

    await _with_server(answer, use)
    assert connections == 1
    assert heads[0].startswith(b"GET /api?a=b+c HTTP/1.1\r\n")
    assert b"authorization: Bearer t0k" in heads[0]
    assert b"content-length: 7" in heads[3]


async def test_a_kept_connection_the_server_dropped_is_not_reused() -> None:
    async def one_answer_then_close(stream: trio.SocketStream) -> None:
        await _read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await stream.aclose()  # keep-alive was promised, but the server times it out

    async def use(client: KubeClient) -> None:
        for _ in range(3):
            # The close reaches us first, so the reuse check sees EOF. Loopback delivers the
            # server's close within a scheduler pass; 50 ms is two orders of magnitude more.
            await trio.sleep(0.05)
            assert (await client.request("POST", "/x", content=b"{}")).status_code == 200

    await _with_server(one_answer_then_close, use)


async def test_a_get_on_a_connection_closed_unanswered_is_sent_again_a_post_is_not() -> None:
    served = 0

    async def drop_every_second_request(stream: trio.SocketStream) -> None:
        nonlocal served
        while await _read_request(stream):
            served += 1
            if served % 2 == 0:
                await stream.aclose()  # read the request, close without answering
                return
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async def use(client: KubeClient) -> None:
        assert (await client.request("GET", "/a")).status_code == 200
        assert (await client.request("GET", "/b")).status_code == 200  # sent twice
        assert served == 3
        with pytest.raises(KubeConnectionError, match="without answering"):
            await client.request("POST", "/c", content=b"{}")
        assert served == 4

    await _with_server(drop_every_second_request, use)


async def test_an_answer_larger_than_the_cap_is_an_error_and_the_client_goes_on() -> None:
    async def big(stream: trio.SocketStream) -> None:
        while await _read_request(stream):
            await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")

    async def use(client: KubeClient) -> None:
        with pytest.raises(KubeError, match="larger than 5 bytes"):
            await client.request("GET", "/a", max_bytes=5)
        assert (await client.request("GET", "/a")).content == b"0123456789"

    await _with_server(big, use)


async def test_a_garbled_answer_is_a_connection_error() -> None:
    async def garble(stream: trio.SocketStream) -> None:
        await _read_request(stream)
        await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")

    async def use(client: KubeClient) -> None:
        with pytest.raises(KubeConnectionError, match="status line"):
            await client.request("GET", "/a")

    await _with_server(garble, use)


async def test_requests_past_max_connections_wait_for_a_free_one() -> None:
    open_now = most = 0

    async def slow(stream: trio.SocketStream) -> None:
        nonlocal open_now, most
        open_now += 1
        most = max(most, open_now)
        try:
            while await _read_request(stream):
                await trio.sleep(0.05)
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        finally:
            open_now -= 1

    async def use(client: KubeClient) -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(6):
                nursery.start_soon(client.request, "GET", "/a")

    await _with_server(slow, use, max_connections=2)
    assert most == 2
