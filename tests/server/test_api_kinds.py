"""What the agent may see, in the whole server (run_server with the REST API) on both stores:
a fake agent on the real gRPC bridge says a kind is forbidden, available again, or that it
watches fewer namespaces; the cache, the feed, the reads and /credentials follow
(docs/protocol.md §7.4, §7.5)."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

import wire
from server import RunningServer, run_server
from server.api import serve_api
from wire import EventRecord, EventType
from wire import messages as m

from ..wire._loop import in_loop
from ._stores import StoreBackend
from .test_api_e2e import bearer, config, deployment, hello, next_of

FORBIDDEN = (
    '403 Forbidden: deployments.apps is forbidden: User "agent" cannot watch resource '
    '"deployments" in API group "apps" at the cluster scope'
)


def config_map(name: str, namespace: str) -> EventRecord:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}"},
    }
    return EventRecord(
        int(EventType.ADDED), "prod", "v1", "ConfigMap", namespace, name, f"u-{name}", "7",
        json.dumps(body).encode(), namespace,
    )  # fmt: skip


def kind_state(kind: str, api_version: str, *, available: bool, account: str = "prod") -> Any:
    return m.KindState(
        account=account,
        api_version=api_version,
        kind=kind,
        scope="",
        available=available,
        code=0 if available else 403,
        reason="" if available else FORBIDDEN,
    )


class Agent:
    """A fake agent's stream, numbering its batches."""

    def __init__(self, stream: wire.ClientStream) -> None:
        self.stream = stream
        self.seq = 0

    async def batch(self, records: list[EventRecord]) -> None:
        """Send ``records`` as the next batch and wait for its Ack: the server handles one
        session's messages in order, so everything sent before is applied too."""
        self.seq += 1
        batch = m.EventBatch(seq=self.seq, records=wire.encode_events(records), count=len(records))
        await self.stream.send(m.AgentMessage(event_batch=batch))
        assert (await next_of(self.stream, "ack")).seq == self.seq

    async def send(self, message: m.AgentMessage) -> None:
        """Send ``message`` and wait until the server applied it."""
        await self.stream.send(message)
        await self.batch([])


async def feed_until(feed: WebSocketConnection, count: int) -> list[dict[str, Any]]:
    return [json.loads(await feed.get_message()) for _ in range(count)]


@in_loop
async def test_a_forbidden_kind_leaves_the_cache_and_reads_say_why(
    store_backend: StoreBackend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="server.kinds")
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            start = functools.partial(run_server, config(store_backend.url), serve_api=serve_api)
            server: RunningServer = await nursery.start(start)
            base = f"127.0.0.1:{server.api_port}"
            async with (
                httpx.AsyncClient(base_url=f"http://{base}") as client,
                open_websocket_url(f"ws://{base}/v1/events") as feed,
                wire.open_connection("127.0.0.1", server.grpc_port, metadata=bearer()) as stream,
            ):
                assert json.loads(await feed.get_message())["type"] == "subscribed"
                await stream.send(hello())
                await next_of(stream, "welcome")
                agent = Agent(stream)
                await agent.batch([deployment(), config_map("a", "shop"), config_map("b", "other")])
                await feed_until(feed, 3)

                status = m.KindStatus(kinds=[kind_state("Deployment", "apps/v1", available=False)])
                await agent.send(m.AgentMessage(kind_status=status))
                [gone] = await feed_until(feed, 1)
                assert (gone["type"], gone["kind"], gone["name"], gone["object"]) == (
                    "DELETED",
                    "Deployment",
                    "web",
                    None,
                )
                r = await client.get("/manifests/prod/shop/deployment%20web")
                assert r.status_code == 403
                assert FORBIDDEN in r.json()["message"]
                assert r.json()["unavailableKind"]["code"] == 403
                r = await client.get("/manifests/prod/shop/deployment/cluster/web/web")
                assert r.status_code == 403
                r = await client.get(
                    "/v1/objects", params={"account": "prod", "kind": "deployment"}
                )
                assert r.status_code == 403
                # Other kinds are served as before.
                r = await client.get("/manifests/prod/shop/configMap%20a")
                assert r.status_code == 200
                for path in ("/credentials/prod", "/armory/accounts/prod"):
                    [mark] = (await client.get(path)).json()["unavailableKinds"]
                    assert (mark["kind"], mark["apiVersion"], mark["scope"], mark["code"]) == (
                        "Deployment",
                        "apps/v1",
                        "",
                        403,
                    )
                    assert mark["reason"] == FORBIDDEN
                listed = {c["name"]: c for c in (await client.get("/credentials")).json()}
                assert [k["kind"] for k in listed["prod"]["unavailableKinds"]] == ["Deployment"]
                listed = {a["name"]: a for a in (await client.get("/armory/accounts")).json()}
                assert [k["kind"] for k in listed["prod"]["unavailableKinds"]] == ["Deployment"]
                warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
                assert len(warnings) == 1
                assert "prod" in warnings[0].message
                assert "Deployment" in warnings[0].message
                assert FORBIDDEN in warnings[0].message

                # The same state again (a new session meets the 403 too): no second warning.
                await agent.send(m.AgentMessage(kind_status=status))
                assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1

                back = m.KindStatus(kinds=[kind_state("Deployment", "apps/v1", available=True)])
                await agent.send(m.AgentMessage(kind_status=back))
                assert (await client.get("/credentials/prod")).json()["unavailableKinds"] == []
                r = await client.get("/manifests/prod/shop/deployment%20web")
                assert r.status_code == 404  # back, and not listed yet: plainly not there
                assert any("again" in r.message for r in caplog.records)

                # The agent now watches ConfigMaps in "shop" only.
                scope = m.WatchScope(
                    account="prod",
                    namespaces=["shop"],
                    kinds=[
                        m.WatchedKind(api_version="v1", kind="ConfigMap"),
                        m.WatchedKind(api_version="apps/v1", kind="Deployment"),
                    ],
                )
                await agent.send(m.AgentMessage(watch_scope=scope))
                [gone] = await feed_until(feed, 1)
                assert (gone["type"], gone["namespace"], gone["name"]) == ("DELETED", "other", "b")
                r = await client.get("/v1/objects", params={"account": "prod"})
                assert [(o["kind"], o["name"]) for o in r.json()["items"]] == [("ConfigMap", "a")]
            nursery.cancel_scope.cancel()


@in_loop
async def test_kind_status_of_an_undeclared_account_ends_the_call(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            start = functools.partial(run_server, config(store_backend.url), serve_api=serve_api)
            server: RunningServer = await nursery.start(start)
            async with wire.open_connection(
                "127.0.0.1", server.grpc_port, metadata=bearer()
            ) as agent:
                await agent.send(hello())
                await next_of(agent, "welcome")
                status = m.KindStatus(
                    kinds=[kind_state("Pod", "v1", available=False, account="someone-else")]
                )
                await agent.send(m.AgentMessage(kind_status=status))
                with pytest.raises(wire.RemoteRefused) as refused:
                    await next_of(agent, "ack")
                assert refused.value.status is wire.Status.FAILED_PRECONDITION
                assert "someone-else" in str(refused.value)
            nursery.cancel_scope.cancel()
