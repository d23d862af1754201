"""kubesim's connections end with their clients: over HTTP/1.1 (Hypercorn, whose keep-alive task
must not hold the connection for its hour) and over HTTP/2 (kubesim/_h2_server.py)."""

from __future__ import annotations

import ssl

import httpx
import trio

import kubesim

from .._wait import wait_until


async def test_a_connection_ends_when_its_client_hangs_up() -> None:
    # The keep-alive timeout is an hour; the connection's idle task must end with the
    # connection, not hold it (and its bookkeeping) until then.
    with trio.fail_after(10):
        async with kubesim.open_server(kubesim.Cluster()) as server:
            token = server.users["admin"].token
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{server.port}",
                headers={"authorization": f"Bearer {token}"},
            ) as http:
                assert (await http.get("/version")).status_code == 200
                assert server.open_connections == 1
            await wait_until(
                lambda: server.open_connections == 0, what="the connection's bookkeeping ended"
            )


async def test_an_http2_connection_ends_when_its_client_hangs_up() -> None:
    with trio.fail_after(10):
        async with kubesim.open_server(kubesim.Cluster(), tls=True) as server:
            assert server.ca_pem is not None
            verify = ssl.create_default_context(cadata=server.ca_pem.decode())
            async with httpx.AsyncClient(
                base_url=server.url,
                verify=verify,
                http2=True,
                headers={"authorization": f"Bearer {server.users['admin'].token}"},
            ) as http:
                answer = await http.get("/version")
                assert answer.status_code == 200
                assert answer.http_version == "HTTP/2"
                created = await http.post(
                    "/api/v1/namespaces/default/configmaps",
                    json={"metadata": {"name": "c"}, "data": {"k": "v" * 100_000}},
                )
                assert created.status_code == 201
                assert server.open_connections == 1
            await wait_until(
                lambda: server.open_connections == 0, what="the connection's bookkeeping ended"
            )
