"""Operations across server replicas: two servers on one PostgreSQL, the account's agent
stream (a real gRPC peer answering Operations as the test says) on one of them. An operation
posted to the other runs on the stream and its task reads the same on both; a replica that
dies mid-operation fails it with a reason instead of leaving it to hang; one clientRequestId
posted to both at once runs once."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import trio

from server import RunningServer, ServerConfig, parse_server_config, run_server
from server.api import serve_api
from server.store import DispatchRecord, OperationRecord
from wire import messages as m

from .._wait import wait_until
from ..wire._loop import in_loop
from ._stores import StoreBackend
from .test_ops_api import Answer, ScriptedAgent, deployed

HEARTBEAT_MS = 200
# Where no replica dies, production's TTL: a heartbeat held up by a loaded machine (a full
# test run on 2 cores) must not make a replica look dead and fail its tasks.
LIVE_TTL_MS = 10_000
DEPLOY = {
    "account": "k1",
    "manifests": [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": 1},
        }
    ],
}


def config(replica: str, url: str, *, lease_ttl_ms: int, wait_ms: int) -> ServerConfig:
    return parse_server_config(
        {
            "serverId": replica,
            "grpc": {"host": "127.0.0.1", "port": 0},
            "api": {"host": "127.0.0.1", "port": 0},
            "store": {"url": url},
            "sessions": {"helloTimeoutSeconds": 5},
            "operations": {"waitMs": wait_ms},
            "replicas": {"heartbeatMs": HEARTBEAT_MS, "leaseTtlMs": lease_ttl_ms},
        }
    )


@dataclass
class Replica:
    server: RunningServer
    scope: trio.CancelScope
    http: httpx.AsyncClient

    async def post(self, body: Any, request_id: str = "") -> str:
        query = f"?clientRequestId={request_id}" if request_id else ""
        answer = await self.http.post(f"/kubernetes/ops{query}", json=body)
        assert answer.status_code == 200, answer.text
        task_id: str = answer.json()["id"]
        return task_id

    async def task(self, task_id: str) -> dict[str, Any]:
        answer = await self.http.get(f"/task/{task_id}")
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body

    async def ended(self, task_id: str) -> dict[str, Any]:
        body: dict[str, Any] = {}

        async def completed() -> bool:
            nonlocal body
            body = await self.task(task_id)
            return bool(body["status"]["completed"])

        await wait_until(completed, what=f"task {task_id} completed")
        return body


@dataclass
class Cluster:
    nursery: trio.Nursery
    clients: AsyncExitStack


@asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    async with AsyncExitStack() as clients, trio.open_nursery() as nursery:
        yield Cluster(nursery, clients)
        nursery.cancel_scope.cancel()


async def start(c: Cluster, cfg: ServerConfig) -> Replica:
    """A replica in the cluster; ``scope.cancel()`` stops it without a drain."""
    scope = trio.CancelScope()

    async def run(*, task_status: trio.TaskStatus[RunningServer]) -> None:
        with scope:
            await run_server(cfg, serve_api=serve_api, task_status=task_status)

    server: RunningServer = await c.nursery.start(functools.partial(run))
    http = await c.clients.enter_async_context(
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.api_port}", timeout=30)
    )
    return Replica(server, scope, http)


async def connect(c: Cluster, replica: Replica, answer: Answer) -> ScriptedAgent:
    """k1's agent on ``replica``, once it is k1's PRIMARY there."""
    agent = ScriptedAgent(answer)
    c.nursery.start_soon(agent.run, replica.server.grpc_port)
    await agent.welcomed.wait()
    await wait_until(
        lambda: replica.server.state.sessions.primary_session("k1") is not None,
        what="the agent is k1's PRIMARY",
    )
    return agent


@dataclass
class Mortal:
    """A replica's own database login: ``kill()`` takes it away and ends its connections,
    which is the replica dying as the database and the other replica see it (no lease
    released, no heartbeat any more), while its process is still the test's to stop."""

    backend: StoreBackend
    user: str

    @property
    def url(self) -> str:
        assert self.backend.server is not None
        return self.backend.server.url(self.backend.database, user=self.user)

    def kill(self) -> None:
        self.backend.sql(f'ALTER ROLE "{self.user}" NOLOGIN')
        self.backend.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename=%s",
            (self.user,),
        )


@contextmanager
def mortal(backend: StoreBackend, name: str) -> Iterator[Mortal]:
    user = f"{name}_{backend.database}"
    backend.sql(f'CREATE ROLE "{user}" LOGIN SUPERUSER')
    try:
        yield Mortal(backend, user)
    finally:
        with psycopg.connect(backend.url, autocommit=True) as pg:
            # It may have created the tables (the first replica to start migrates).
            pg.execute(f'REASSIGN OWNED BY "{user}" TO CURRENT_USER')
            pg.execute(f'DROP OWNED BY "{user}"')
            pg.execute(f'DROP ROLE IF EXISTS "{user}"')


def history(op: dict[str, Any]) -> list[str]:
    return [h["message"] for h in op["history"]]


@in_loop
async def test_an_operation_posted_where_the_stream_is_not_runs_where_it_is(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(
                c, config("r1", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )
            r2 = await start(
                c, config("r2", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )
            agent = await connect(c, r1, deployed)

            task_id = await r2.post([{"deployManifest": DEPLOY}])
            task = await r2.ended(task_id)
            assert task["status"]["failed"] is False, task
            assert task["ownerId"] == "r2"
            assert [h["status"] for h in task["history"]][-2:] == [
                "Deploying manifest",
                "Orchestration completed.",
            ]
            assert task["resultObjects"][0]["manifestNamesByNamespace"] == {
                "prod": ["deployment web"]
            }
            assert [op.id for op in agent.received] == [f"{task_id}-0"]
            assert await r1.task(task_id) == task  # the same task on the other replica
            # the object the agent returned is in the cache, whichever replica is asked
            for replica in (r1, r2):
                shown = await replica.http.get("/manifests/k1/prod/deployment%20web")
                assert shown.json()["manifest"]["metadata"]["uid"] == "uid-0"
            op = (await r1.http.get(f"/armory/agent/operations/{task_id}-0")).json()
            assert op["state"] == "SUCCEEDED"
            lines = history(op)
            assert lines[1] == "dispatched to replica r1, which holds the agent's stream"
            assert lines[2].startswith(
                "dispatched by replica r2; on replica r1: sent to agent agent-1 (session "
            )
            # nothing is left in the mailbox: the payload left the database at the claim
            assert pg_backend.sql("SELECT count(*) FROM operation_dispatch") == [(0,)]


@in_loop
async def test_a_task_shows_its_progress_and_end_on_the_replica_not_running_it(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(
                c, config("r1", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )
            r2 = await start(
                c, config("r2", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )
            held: list[m.Operation] = []

            def answer(op: m.Operation) -> m.OperationResult | None:
                if op.id.endswith("-1"):
                    held.append(op)  # the second operation waits for the test
                    return None
                return deployed(op)

            agent = await connect(c, r1, answer)
            # posted to the replica WITH the stream: the task runs there, r2 reads the store
            task_id = await r1.post([{"deployManifest": DEPLOY}, {"deployManifest": DEPLOY}])
            await agent.changed.wait_for(lambda: bool(held), what="the second operation sent")
            running = await r2.task(task_id)
            assert running["status"]["completed"] is False
            assert running["ownerId"] == "r1"
            assert "Deploying manifest" in [h["status"] for h in running["history"]]
            await agent.reply(deployed(held[0]))
            ended = await r2.ended(task_id)
            assert ended["status"]["failed"] is False
            assert ended == await r1.task(task_id)


@in_loop
async def test_a_dispatch_to_a_replica_that_dies_fails_with_the_reason(
    pg_backend: StoreBackend,
) -> None:
    ttl = 1000
    with mortal(pg_backend, "r1") as dying, trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(c, config("r1", dying.url, lease_ttl_ms=ttl, wait_ms=30_000))
            r2 = await start(c, config("r2", pg_backend.url, lease_ttl_ms=ttl, wait_ms=30_000))
            agent = await connect(c, r1, lambda op: None)  # never answers
            task_id = await r2.post([{"deployManifest": DEPLOY}])
            await agent.changed.wait_for(lambda: bool(agent.received), what="the operation sent")
            dying.kill()
            started = trio.current_time()
            task = await r2.ended(task_id)
            assert trio.current_time() - started < 10  # the TTL and a poll, not waitMs (30 s)
            exc = task["resultObjects"][-1]
            assert exc["cause"] == "ReplicaStopped"
            assert exc["message"].startswith(
                "replica r1 that holds the agent's stream stopped (no heartbeat for "
            )
            assert exc["message"].endswith(
                "before the operation ended; the operation may or may not have been applied"
            )
            r1.scope.cancel()


@in_loop
async def test_a_dispatch_the_dead_replica_never_took_says_nothing_was_sent(
    pg_backend: StoreBackend,
) -> None:
    ttl = 4000  # the dead replica's lease is still good when the operation is posted
    with mortal(pg_backend, "r1") as dying, trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(c, config("r1", dying.url, lease_ttl_ms=ttl, wait_ms=30_000))
            r2 = await start(c, config("r2", pg_backend.url, lease_ttl_ms=ttl, wait_ms=30_000))
            agent = await connect(c, r1, deployed)
            await r2.ended(await r2.post([{"deployManifest": DEPLOY}]))  # r2 knows k1 now
            dying.kill()
            task_id = await r2.post([{"deployManifest": DEPLOY}])
            task = await r2.ended(task_id)
            exc = task["resultObjects"][-1]
            assert exc["cause"] == "ReplicaStopped", exc
            assert exc["message"].endswith("it never claimed the operation: nothing was sent")
            assert len(agent.received) == 1  # the first deploy's, not this one's
            assert pg_backend.sql("SELECT count(*) FROM operation_dispatch") == [(0,)]
            r1.scope.cancel()


@in_loop
async def test_a_task_whose_replica_died_reads_back_failed_on_the_other(
    pg_backend: StoreBackend,
) -> None:
    ttl = 4000  # r2 must stay live (under load: a full test run) until it is killed
    with mortal(pg_backend, "r2") as dying, trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(c, config("r1", pg_backend.url, lease_ttl_ms=ttl, wait_ms=30_000))
            r2 = await start(c, config("r2", dying.url, lease_ttl_ms=ttl, wait_ms=30_000))
            agent = await connect(c, r1, lambda op: None)
            task_id = await r2.post([{"deployManifest": DEPLOY}])  # the task runs on r2
            await agent.changed.wait_for(lambda: bool(agent.received), what="the operation sent")
            assert (await r1.task(task_id))["status"]["completed"] is False  # r2 is live
            dying.kill()
            task = await r1.ended(task_id)
            exc = task["resultObjects"][-1]
            assert exc["cause"] == "ReplicaStopped"
            assert exc["message"].startswith("the replica r2 running this task stopped (")
            assert "may or may not have been applied" in exc["message"]
            r2.scope.cancel()


@in_loop
async def test_one_client_request_id_posted_to_both_replicas_at_once_runs_once(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(
                c, config("r1", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )
            r2 = await start(
                c, config("r2", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )
            agent = await connect(c, r1, deployed)
            # r2 learns of k1 from the store first (not what this test is about)
            await r2.ended(await r2.post([{"deployManifest": DEPLOY}]))
            for attempt in range(5):
                before = len(agent.received)
                ids: list[str] = []

                async def post(replica: Replica, ids: list[str] = ids, n: int = attempt) -> None:
                    ids.append(await replica.post([{"deployManifest": DEPLOY}], f"same-{n}"))

                async with trio.open_nursery() as posting:
                    posting.start_soon(post, r1)
                    posting.start_soon(post, r2)
                assert ids[0] == ids[1]
                for replica in (r1, r2):
                    ended = await replica.ended(ids[0])
                    assert ended["status"]["failed"] is False, ended["resultObjects"]
                assert len(agent.received) - before == 1, "ran once"


@in_loop
async def test_a_replica_that_lost_the_stream_fails_what_was_dispatched_to_it_unsent(
    pg_backend: StoreBackend,
) -> None:
    with trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(
                c, config("r1", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=20_000)
            )  # no agent: it holds no stream
            store = r1.server.state.store
            now = int(time.time() * 1000)
            record = OperationRecord("t-0", "k1", "deployManifest", "{}", "DISPATCHED", now, now)
            row = DispatchRecord("t-0", "k1", "r1", "r2", "deployManifest", "{}", now + 20_000, now)
            await store.record_operations([(record, "dispatched to replica r1")], dispatches=[row])

            async def failed() -> bool:
                stored = await store.get_operation("t-0")
                return stored is not None and stored.state == "FAILED"

            await wait_until(failed, what="r1 failed the operation")
            op = (await r1.http.get("/armory/agent/operations/t-0")).json()
            assert op["errorCode"] == "NoAgent"
            assert op["errorMessage"] == (
                "dispatched by replica r2; on replica r1: this replica no longer holds the "
                "account's primary agent stream (it moved, or its agent disconnected); nothing "
                "was sent"
            )


@in_loop
async def test_a_dispatched_secret_reaches_the_agent_whole_and_the_store_only_redacted(
    pg_backend: StoreBackend,
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "prod"},
        "stringData": {"token": "hunter2"},
    }
    with trio.fail_after(60):
        async with cluster() as c:
            r1 = await start(
                c, config("r1", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=5000)
            )
            r2 = await start(
                c, config("r2", pg_backend.url, lease_ttl_ms=LIVE_TTL_MS, wait_ms=5000)
            )
            agent = await connect(c, r1, deployed)
            body = [{"deployManifest": {**DEPLOY, "manifests": [secret]}}]
            task_id = await r2.post(body)
            assert (await r2.ended(task_id))["status"]["failed"] is False
            (sent,) = agent.received
            assert json.loads(sent.payload_json)["manifests"][0]["stringData"] == {
                "token": "hunter2"
            }
            assert 0 < sent.deadline_ms <= 5000  # what is left of r2's wait, not a new one
            shown = (await r1.http.get(f"/armory/agent/operations/{task_id}-0")).text
            assert '"creds"' in shown
            assert "hunter2" not in shown
            # nowhere in the database any more: the mailbox row left with the claim
            dumped = pg_backend.sql(
                "SELECT count(*) FROM operations o, operation_history h"
                " WHERE o.payload_json LIKE '%%hunter2%%' OR o.result_json LIKE '%%hunter2%%'"
                " OR h.message LIKE '%%hunter2%%'"
            )
            assert dumped == [(0,)]
            assert pg_backend.sql("SELECT count(*) FROM operation_dispatch") == [(0,)]
