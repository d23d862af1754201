"""kubesim's drop_connections fault: the next matching request's connection is closed unanswered
(what a client sees of a server that closed a kept-alive connection as it reused it)."""

from __future__ import annotations

import trio

import kubesim


async def _ask(port: int, token: str, path: str) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = f"GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {token}\r\n\r\n"
        await stream.send_all(head.encode())
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := await stream.receive_some(65536)):
            answer += chunk
        return answer


async def test_the_next_matching_request_is_closed_unanswered() -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    with trio.fail_after(20):
        async with kubesim.open_server(sim) as server:
            token = server.users["admin"].token
            server.faults.drop_connections(1, method="GET", path="/api/v1/namespaces")
            assert await _ask(server.port, token, "/version") != b""  # not matched
            assert await _ask(server.port, token, "/api/v1/namespaces") == b""  # dropped
            assert (await _ask(server.port, token, "/api/v1/namespaces")).startswith(
                b"HTTP/1.1 200"
            )
    assert server.faults.dropped == [("GET", "/api/v1/namespaces")]
    assert server.requests.count("list", "namespaces") == 1  # the dropped one never ran
