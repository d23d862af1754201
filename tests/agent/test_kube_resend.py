"""Requests on connections the server closed (issue 15, defect 5): kubesim closes a pooled
connection (HTTP/2 over TLS, HTTP/1.1 over TLS, plain HTTP/1.1) just as a request goes out on
it, as after an API-server restart. A safe request (GET, discovery) is sent again on a new
connection and succeeds; a POST that may have been processed is not sent again."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

import kubesim
from agent import AccountConfig, KubeClient, KubeConnectionError, open_kube_client
from agent.watch._discovery import discover

TRANSPORTS = [
    pytest.param(True, True, id="h2-tls"),
    pytest.param(True, False, id="http1-tls"),
    pytest.param(False, False, id="http1-plain"),
]
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


@asynccontextmanager
async def _cluster(
    tmp_path: Path, tls: bool, http2: bool
) -> AsyncIterator[tuple[kubesim.Server, KubeClient]]:
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    async with kubesim.open_server(sim, tls=tls) as server:
        account = AccountConfig("acc", kube_config_file=str(server.kubeconfig(tmp_path / "kc")))
        async with open_kube_client(account, environ={}, http2=http2) as client:
            yield server, client


@pytest.mark.parametrize(("tls", "http2"), TRANSPORTS)
async def test_a_get_on_a_connection_the_server_closed_is_sent_again(
    tmp_path: Path, tls: bool, http2: bool
) -> None:
    with trio.fail_after(30):
        async with _cluster(tmp_path, tls, http2) as (server, client):
            await client.get_json("/api/v1/namespaces/default")  # a pooled connection now
            server.faults.drop_connections(1, method="GET")
            namespace = await client.get_json("/api/v1/namespaces/default")
            assert namespace["metadata"]["name"] == "default"
            assert server.faults.dropped == [("GET", "/api/v1/namespaces/default")]
            if http2:
                assert client.watch_connections == 1  # the closed one is gone, a new one up


@pytest.mark.parametrize(("tls", "http2"), TRANSPORTS)
async def test_discovery_after_the_server_closed_its_connection_succeeds(
    tmp_path: Path, tls: bool, http2: bool
) -> None:
    """Defect 5 as it was seen: the first operation after API-server restarts failed with
    ``discovery failed: GET /api: RemoteProtocolError: Server disconnected``."""
    with trio.fail_after(30):
        async with _cluster(tmp_path, tls, http2) as (server, client):
            await discover(client)
            server.faults.drop_connections(1, method="GET", path="/api")
            result = await discover(client)
            assert "ConfigMap" in {kind.kind for kind in result.kinds}
            assert server.faults.dropped == [("GET", "/api")]


@pytest.mark.parametrize(("tls", "http2"), TRANSPORTS)
async def test_after_the_server_cut_every_connection_the_next_request_succeeds(
    tmp_path: Path, tls: bool, http2: bool
) -> None:
    """Every connection closed at once and the request sent at once after, before the
    client has read the close: whichever of the two the client sees first, it succeeds."""
    with trio.fail_after(30):
        async with _cluster(tmp_path, tls, http2) as (server, client):
            for _ in range(3):
                await client.get_json("/api/v1/namespaces/default")
                server.cut()
                assert (await discover(client)).kinds


@pytest.mark.parametrize(("tls", "http2"), TRANSPORTS)
async def test_a_post_on_a_connection_closed_unanswered_is_not_sent_again(
    tmp_path: Path, tls: bool, http2: bool
) -> None:
    """The client cannot tell whether the server processed it: sending it again could
    create twice. The default retries policy does not resend it either."""
    body = b'{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "once"}}'
    with trio.fail_after(30):
        async with _cluster(tmp_path, tls, http2) as (server, client):
            await client.get_json("/api/v1/namespaces/default")
            server.faults.drop_connections(1, method="POST")
            with pytest.raises(KubeConnectionError, match=r"without answering|closed"):
                await client.request("POST", CONFIGMAPS, content=body)
            assert server.faults.dropped == [("POST", CONFIGMAPS)]
            assert server.requests.count("create") == 0
            reply = await client.request("POST", CONFIGMAPS, content=body)  # the client goes on
            assert reply.status_code == 201
