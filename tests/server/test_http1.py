"""The REST API's HTTP/1.1 server (server/api/_http1.py) over a real socket: keep-alive and
pipelining, request bodies (Content-Length, chunked, 100-continue), HEAD, streamed responses,
limits, malformed requests, an app that fails, and the WebSocket handover to Hypercorn."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
from hypercorn.config import Config
from prometheus_client import CollectorRegistry
from starlette.types import Message, Receive, Scope, Send

from server.api import serve_api
from server.api._http1 import MAX_HEAD, serve_http1

from .test_api_support import open_state


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Echoes the request; /stream answers in three body messages; /fail raises."""
    if scope["type"] == "websocket":
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        said = await receive()
        await send({"type": "websocket.send", "text": "echo " + said["text"]})
        await send({"type": "websocket.close", "code": 1000})
        return
    body = b""
    while True:
        message: Message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    if scope["path"] == "/fail":
        raise RuntimeError("boom")
    headers = [(b"content-type", b"text/plain")]
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    answer = f"{scope['method']} {scope['path']} {scope['query_string'].decode()} ".encode() + body
    headers.append((b"content-length", str(len(answer)).encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@asynccontextmanager
async def serving(max_body: int = 1000) -> AsyncIterator[int]:
    async with trio.open_nursery() as nursery:
        serve = functools.partial(serve_http1, max_body=max_body, config=Config())
        port: int = await nursery.start(serve, app, "127.0.0.1", 0)
        yield port
        nursery.cancel_scope.cancel()


async def exchange(port: int, raw: bytes) -> bytes:
    """Send ``raw``; everything received until the server closes (or 2 s pass)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(raw)
        received = b""
        with trio.move_on_after(2):
            while chunk := await stream.receive_some(65536):
                received += chunk
        return received


async def test_keep_alive_pipelining_and_bodies() -> None:
    with trio.fail_after(10):
        async with serving() as port:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                first = await http.post("/a?x=1", content=b"hello")
                second = await http.get("/b%20c")
                assert first.text == "POST /a x=1 hello"
                assert second.text == "GET /b c  "
                assert first.headers["content-length"] == "17"
                assert "date" in first.headers

                async def chunks() -> AsyncIterator[bytes]:
                    yield b"ab"
                    yield b"cd"

                chunked = await http.put("/c", content=chunks())
                assert chunked.text == "PUT /c  abcd"
                streamed = await http.get("/stream")
                assert streamed.text == "one two three"
                assert streamed.headers["transfer-encoding"] == "chunked"
            # Two requests in one write are answered in order on the one connection.
            raw = await exchange(
                port,
                b"GET /1 HTTP/1.1\r\nhost: t\r\n\r\n"
                b"GET /2 HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
            )
            assert raw.count(b"HTTP/1.1 200 OK") == 2
            assert raw.index(b"GET /1") < raw.index(b"GET /2")
            assert raw.endswith(b"GET /2  ")


async def test_continue_head_and_close() -> None:
    with trio.fail_after(10):
        async with serving() as port:
            raw = await exchange(
                port,
                b"POST /e HTTP/1.1\r\nhost: t\r\ncontent-length: 2\r\nexpect: 100-continue\r\n"
                b"connection: close\r\n\r\nhi",
            )
            assert raw.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n")
            assert b"connection: close" in raw
            assert raw.endswith(b"POST /e  hi")
            raw = await exchange(port, b"HEAD /h HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            head, _, body = raw.partition(b"\r\n\r\n")
            assert b"content-length: 9" in head  # "HEAD /h  "
            assert body == b""
            raw = await exchange(port, b"GET /old HTTP/1.0\r\n\r\n")  # 1.0: closes after one
            assert raw.startswith(b"HTTP/1.1 200 OK")
            assert raw.endswith(b"GET /old  ")


async def test_limits_malformed_requests_and_failures() -> None:
    with trio.fail_after(10):
        async with serving(max_body=10) as port:
            raw = await exchange(port, b"POST /big HTTP/1.1\r\ncontent-length: 11\r\n\r\n")
            assert raw.startswith(b"HTTP/1.1 413 ")
            raw = await exchange(
                port,
                b"POST /big HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nb\r\n01234567890\r\n",
            )
            assert raw.startswith(b"HTTP/1.1 413 ")
            raw = await exchange(port, b"GET / HTTP/1.1\r\nx: " + b"a" * MAX_HEAD)
            assert raw.startswith(b"HTTP/1.1 431 ")
            for bad in (
                b"GARBAGE\r\n\r\n",
                b"GET / HTTP/2.0\r\n\r\n",
                b"GET / HTTP/1.1\r\nno-colon\r\n\r\n",
                b"GET / HTTP/1.1\r\ncontent-length: x\r\n\r\n",
                b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                # int(_, 16) takes these; a negative size once returned buffered bytes.
                b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n-7\r\nabc\r\n0\r\n\r\n",
                b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0x3\r\nabc\r\n0\r\n\r\n",
                b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n+3\r\nabc\r\n0\r\n\r\n",
            ):
                assert (await exchange(port, bad)).startswith(b"HTTP/1.1 400 "), bad
            raw = await exchange(port, b"GET /fail HTTP/1.1\r\n\r\n")
            assert raw.startswith(b"HTTP/1.1 500 ")
            assert b"connection: close" in raw
            # The server still answers after all that.
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                assert (await http.get("/ok")).status_code == 200


async def test_websocket_upgrades_are_served_by_hypercorn() -> None:
    import trio_websocket

    with trio.fail_after(10):
        async with serving() as port:
            url = f"ws://127.0.0.1:{port}/ws"
            async with trio_websocket.open_websocket_url(url) as ws:
                await ws.send_message("hi")
                answer: Any = await ws.get_message()
                assert answer == "echo hi"


async def test_the_api_answers_alike_through_either_server(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with (
            open_state(tmp_path, standalone=False, feed=None) as state,
            trio.open_nursery() as nursery,
        ):
            answers = []
            for http_server in ("kubesvc", "hypercorn"):
                serve = functools.partial(
                    serve_api, registry=CollectorRegistry(), http_server=http_server
                )
                port: int = await nursery.start(serve, state, "127.0.0.1", 0)
                async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                    health = await http.get("/health")
                    missing = await http.get("/task/nope")
                    answers.append(
                        (
                            health.status_code,
                            health.json(),
                            health.headers["content-type"],
                            missing.status_code,
                            missing.json()["message"],
                        )
                    )
            assert answers[0] == answers[1]
            nursery.cancel_scope.cancel()


async def test_an_idle_connection_is_closed_and_a_timely_request_is_served(
    monkeypatch: Any,
) -> None:
    """The keep-alive limit (the server's reaper): a connection that sends nothing is closed
    after KEEP_ALIVE_SECONDS, and so is a head left half sent; requests that come in time are
    answered, however long the connection lives."""
    monkeypatch.setattr("server.api._http1.KEEP_ALIVE_SECONDS", 0.4)
    monkeypatch.setattr("server.api._http1._REAP_SECONDS", 0.05)
    with trio.fail_after(10):
        async with serving() as port:
            for opening in (b"", b"GET /half HTTP/1.1\r\nhost: x\r\n"):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                async with stream:
                    if opening:
                        await stream.send_all(opening)
                    started = trio.current_time()
                    assert await stream.receive_some(100) == b""  # closed by the server
                    assert 0.35 <= trio.current_time() - started < 2
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                for n in range(4):  # 4 x 0.25 s: longer than the limit, never idle that long
                    await trio.sleep(0.25)
                    await stream.send_all(b"GET /r%d HTTP/1.1\r\nhost: x\r\n\r\n" % n)
                    answer = b""
                    while not answer.endswith(b"GET /r%d  " % n):
                        answer += await stream.receive_some(65536)
                    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")


async def test_a_body_that_does_not_arrive_in_time_gets_408(monkeypatch: Any) -> None:
    """A client that announces a body and stalls cannot hold its connection forever."""
    monkeypatch.setattr("server.api._http1.BODY_SECONDS", 0.3)
    monkeypatch.setattr("server.api._http1._REAP_SECONDS", 0.05)
    with trio.fail_after(10):
        async with serving() as port:
            for raw in (
                b"POST /slow HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc",
                b"POST /slow HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nab",
            ):
                started = trio.current_time()
                answer = await exchange(port, raw)
                assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
                assert b"did not arrive in time" in answer
                assert trio.current_time() - started < 1.5
            # and a body that comes in time is read whole
            answer = await exchange(
                port,
                b"POST /ok HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\n"
                b"connection: close\r\n\r\nxyz",
            )
            assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
            assert answer.endswith(b"POST /ok  xyz")


async def test_poll_answers_a_get_without_the_app() -> None:
    """``poll``: a GET it answers gets its body as a JSON 200 on the kept connection; what it
    declines (None), and every other method, goes to the app."""
    polled: list[bytes] = []

    def poll(target: bytes) -> bytes | None:
        polled.append(target)
        return b'{"ok":true}' if target.startswith(b"/fast") else None

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            serve = functools.partial(serve_http1, max_body=1000, config=Config(), poll=poll)
            port: int = await nursery.start(serve, app, "127.0.0.1", 0)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                fast = await http.get("/fast?x=1")
                slow = await http.get("/slow")
                posted = await http.post("/fast", content=b"b")
            nursery.cancel_scope.cancel()
    assert fast.status_code == 200
    assert fast.json() == {"ok": True}
    assert fast.headers["content-type"] == "application/json"
    assert fast.headers["content-length"] == "11"
    assert slow.text == "GET /slow  "
    assert posted.text == "POST /fast  b"
    assert polled == [b"/fast?x=1", b"/slow"]
