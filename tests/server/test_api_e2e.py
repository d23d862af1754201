"""The REST API and the feed inside the whole server (run_server with server.api.serve_api):
a fake agent on the real gRPC bridge registers an account and streams a batch; the REST API
and the WebSocket feed show what it sent, and the operator can disconnect it."""

from __future__ import annotations

import functools
import json
import time
from typing import Any

import betterproto
import httpx
import jwt
import trio
from trio_websocket import open_websocket_url

import wire
from server import RunningServer, ServerConfig, parse_server_config, run_server
from server.api import serve_api
from wire import EventRecord, EventType
from wire import messages as m

from .._wait import wait_until
from ..wire._loop import in_loop
from ._stores import StoreBackend

SECRET = "a-shared-secret-for-the-api-e2e-test-0123456789"


def config(store_url: str) -> ServerConfig:
    return parse_server_config(
        {
            "serverId": "e2e-server",
            "grpc": {
                "host": "127.0.0.1",
                "port": 0,
                "auth": {"jwt": {"enabled": True, "secret": SECRET, "audience": "kubesvc"}},
            },
            "api": {"host": "127.0.0.1", "port": 0},
            "store": {"url": store_url},
            "sessions": {"helloTimeoutSeconds": 5, "heartbeatSeconds": 0.2},
        }
    )


def bearer() -> dict[str, str]:
    claims = {"sub": "agent", "aud": "kubesvc", "exp": int(time.time() + 300), "accounts": ["prod"]}
    return {"authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


def hello() -> m.AgentMessage:
    props = {"kinds": ["deployment"], "namespaces": ["shop"], "permissions": {"READ": ["dev"]}}
    info = m.AccountInfo(
        name="prod", kube_host="10.0.0.1:6443", cert_fingerprint="ab" * 32,
        kube_version="v1.30", properties_json=json.dumps(props),
    )  # fmt: skip
    return m.AgentMessage(
        hello=m.Hello(
            protocol_version=wire.PROTOCOL_VERSION, agent_id="agent-1", instance_id="i-1",
            agent_version="0.1", accounts=[info],
        )
    )  # fmt: skip


def deployment() -> EventRecord:
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", "uid": "u-web", "resourceVersion": "5",
                     "generation": 1},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"image": "web:1"}]}}},
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                   "availableReplicas": 1, "readyReplicas": 1},
    }  # fmt: skip
    return EventRecord(
        int(EventType.ADDED), "prod", "apps/v1", "Deployment", "shop", "web", "u-web", "5",
        json.dumps(body).encode(), "shop",
    )  # fmt: skip


async def next_of(stream: wire.ClientStream, kind: str) -> Any:
    while True:
        name, value = betterproto.which_one_of(await stream.receive(), "message")
        if name == kind:
            return value


@in_loop
async def test_agent_stream_reaches_the_rest_api_and_the_feed(
    store_backend: StoreBackend,
) -> None:
    # On both stores: the whole server runs on PostgreSQL as it does on SQLite.
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            start = functools.partial(run_server, config(store_backend.url), serve_api=serve_api)
            server: RunningServer = await nursery.start(start)
            assert server.api_port is not None
            base = f"127.0.0.1:{server.api_port}"
            async with (
                httpx.AsyncClient(base_url=f"http://{base}") as client,
                open_websocket_url(f"ws://{base}/v1/events?kind=deployment") as feed,
                wire.open_connection("127.0.0.1", server.grpc_port, metadata=bearer()) as agent,
            ):
                assert json.loads(await feed.get_message())["type"] == "subscribed"
                await agent.send(hello())
                await next_of(agent, "welcome")
                records = [deployment()]
                await agent.send(
                    m.AgentMessage(
                        event_batch=m.EventBatch(
                            seq=1, records=wire.encode_events(records), count=1
                        )
                    )
                )
                assert (await next_of(agent, "ack")).seq == 1
                change = json.loads(await feed.get_message())
                assert (change["type"], change["account"], change["name"]) == (
                    "ADDED",
                    "prod",
                    "web",
                )

                creds = (await client.get("/credentials/prod")).json()
                assert creds["permissions"] == {"READ": ["dev"]}
                assert creds["namespaces"] == ["shop"]
                manifest = (await client.get("/manifests/prod/shop/deployment%20web")).json()
                assert manifest["status"]["stable"] == {"state": True}
                assert manifest["moniker"] == {"app": "web", "cluster": "web"}
                assert [a["reference"] for a in manifest["artifacts"]] == ["web:1"]
                account = (await client.get("/armory/accounts/prod")).json()
                assert account["status"] == "ACTIVE"
                assert account["kubeHost"] == "10.0.0.1:6443"
                agents = (await client.get("/armory/agents")).json()
                assert [(a["agentId"], a["accounts"], a["clouddriverId"]) for a in agents] == [
                    ("agent-1", ["prod"], "e2e-server")
                ]
                r = await client.post("/armory/agent/agent-1/disconnect")
                assert r.json() == {"agentId": "agent-1", "sessionsEnded": 1}

                async def no_agents() -> bool:
                    return not (await client.get("/armory/agents")).json()

                await wait_until(no_agents, what="/armory/agents is empty")
                assert (await client.get("/armory/accounts/prod")).json()["status"] == "ORPHANED"
            nursery.cancel_scope.cancel()
