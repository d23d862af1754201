"""Readiness (``GET /health/ready``, server/_readiness.py): 503 with the reason while the store
does not answer or the server drains, 200 otherwise; pings cached so probes do not load the
database; liveness (``/health``) never asks the store.

The Readiness tests run on virtual time with a ping of their own (the store's edge); the
server tests run the real server on both backends, and one stops a PostgreSQL of its own.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace

import httpx
import pytest
import trio

import server
import server.api
from server import StoreError
from server._readiness import Readiness

from .._wait import wait_until
from ..wire._loop import in_loop
from ._postgres import TempPostgres, temp_postgres
from ._stores import StoreBackend


class _Database:
    """The store's edge for the Readiness tests: answers, fails, or hangs as told."""

    def __init__(self) -> None:
        self.failure = ""
        self.hang = False
        self.release = trio.Event()

    async def ping(self) -> None:
        if self.hang:
            await self.release.wait()
        if self.failure:
            raise StoreError(self.failure)


async def _probes(readiness: Readiness, count: int, every: float) -> list[str]:
    reasons = []
    for _ in range(count):
        answer = await readiness.check()
        reasons.append(answer.reason if not answer.ready else "ready")
        await trio.sleep(every)
    return reasons


async def test_probes_share_one_ping_a_second(autojump_clock: trio.abc.Clock) -> None:
    database = _Database()
    readiness = Readiness(database.ping)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(readiness.run)
            # 50 probes 0.1 s apart (5 s): about one ping per second, not one per probe.
            assert await _probes(readiness, 50, 0.1) == ["ready"] * 50
            assert 4 <= readiness.pings <= 6
            nursery.cancel_scope.cancel()


async def test_an_unreachable_store_is_not_ready_until_it_answers_again(
    autojump_clock: trio.abc.Clock,
) -> None:
    database = _Database()
    readiness = Readiness(database.ping)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(readiness.run)
            assert (await readiness.check()).ready
            database.failure = "connection refused"
            await trio.sleep(1.0)  # the cached answer expires
            answer = await readiness.check()
            assert not answer.ready
            assert answer.reason == "the store is unreachable: connection refused"
            database.failure = ""
            await trio.sleep(1.0)
            assert (await readiness.check()).ready
            nursery.cancel_scope.cancel()


async def test_a_hanging_store_is_answered_within_the_bound(
    autojump_clock: trio.abc.Clock,
) -> None:
    """A database that never answers: the first probe waits the bound (2 s) and hears "not
    ready"; the next ones hear it at once, and no second ping piles up behind the first."""
    database = _Database()
    readiness = Readiness(database.ping)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(readiness.run)
            database.hang = True
            start = trio.current_time()
            answer = await readiness.check()
            assert trio.current_time() - start == pytest.approx(2.0)
            assert answer.reason == "the store has not answered a ping for 2.0 s"
            await trio.sleep(3.0)
            start = trio.current_time()
            answer = await readiness.check()
            assert trio.current_time() == start
            assert answer.reason == "the store has not answered a ping for 5.0 s"
            assert readiness.pings == 1
            database.hang = False
            database.release.set()
            await trio.sleep(1.0)
            assert (await readiness.check()).ready
            nursery.cancel_scope.cancel()


async def test_draining_is_not_ready_at_once(autojump_clock: trio.abc.Clock) -> None:
    database = _Database()
    readiness = Readiness(database.ping)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(readiness.run)
            assert (await readiness.check()).ready
            readiness.drain()
            answer = await readiness.check()
            assert answer == replace(answer, ready=False)
            assert "draining" in answer.reason
            nursery.cancel_scope.cancel()


# -- the real server --------------------------------------------------------------------


@asynccontextmanager
async def _server(url: str) -> AsyncIterator[tuple[server.RunningServer, httpx.AsyncClient]]:
    base = server.ServerConfig()
    config = replace(
        base,
        grpc=replace(base.grpc, host="127.0.0.1", port=0),
        api=replace(base.api, host="127.0.0.1", port=0),
        store=replace(base.store, url=url),
    )
    async with trio.open_nursery() as nursery:
        running: server.RunningServer = await nursery.start(
            functools.partial(server.run_server, config, serve_api=server.api.serve_api)
        )
        api = f"http://127.0.0.1:{running.api_port}"
        async with httpx.AsyncClient(base_url=api, timeout=10) as client:
            yield running, client
        nursery.cancel_scope.cancel()


@in_loop
async def test_ready_on_both_backends_and_not_while_draining(
    store_backend: StoreBackend,
) -> None:
    with trio.fail_after(30):
        async with _server(store_backend.url) as (running, client):
            server_id = running.state.server_id
            r = await client.get("/health/ready")
            assert (r.status_code, r.json()) == (200, {"status": "UP", "serverId": server_id})
            assert running.state.readiness is not None
            running.state.readiness.drain()  # what SIGTERM's drain does first
            r = await client.get("/health/ready")
            assert r.status_code == 503
            assert r.json() == {
                "status": "DOWN",
                "reason": "the server is draining (shutting down)",
                "serverId": server_id,
            }
            assert (await client.get("/health")).status_code == 200  # liveness: still alive
            doc = (await client.get("/openapi.json")).json()
            assert set(doc["paths"]["/health/ready"]["get"]["responses"]) == {"200", "503"}


@pytest.fixture
def own_postgres(postgres_server: TempPostgres) -> Iterator[TempPostgres]:
    """A PostgreSQL of this test's own, to stop and start (``postgres_server`` first: where
    there is none, the test is skipped with the session's reason)."""
    with temp_postgres() as own:
        yield own


@in_loop
async def test_not_ready_while_postgresql_is_stopped(own_postgres: TempPostgres) -> None:
    database = own_postgres.create_database()

    def status(code: int) -> Callable[[], Awaitable[bool]]:
        async def reached() -> bool:
            return (await client.get("/health/ready")).status_code == code

        return reached

    with trio.fail_after(60):
        async with _server(own_postgres.url(database)) as (_, client):
            assert (await client.get("/health/ready")).status_code == 200
            await trio.to_thread.run_sync(own_postgres.pause)
            await wait_until(
                status(503), timeout=20, what="503 while PostgreSQL is stopped", interval=0.2
            )
            body = (await client.get("/health/ready")).json()
            assert body["status"] == "DOWN"
            assert body["reason"].startswith("the store is unreachable: "), body
            assert (await client.get("/health")).status_code == 200  # not a restart
            await trio.to_thread.run_sync(own_postgres.resume)
            await wait_until(
                status(200), timeout=20, what="200 once PostgreSQL is back", interval=0.2
            )
