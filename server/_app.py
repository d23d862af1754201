"""The server's composition: store, registry, sessions, gRPC endpoint and (optionally) REST.

Shutdown. ``run_server(..., stop=event)`` drains once ``stop`` is set, within
``shutdown.drainSeconds``: both listeners close (new connections are refused), every agent's
call ends with UNAVAILABLE and a ``wire.DRAINING`` message after the Acks it is owed (the
agent connects again at once, to another replica behind the same address), live-feed
WebSockets close with 1001, the REST requests in flight are answered (``connection:
close``); then the tasks are cancelled and the store closes (its WAL checkpointed into the
database file). Past the bound, what is left is cancelled: sessions still closing get
CLOSE_AFTER_DRAIN_SECONDS (2 s) more, the store's own cleanup at most 2 s, so the process
ends by drainSeconds + ~5 s (SHUTDOWN_SLACK_SECONDS), inside the pod's grace period.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal, Protocol

import trio

import wire

from ._accounts import AccountService, RegistryStore
from ._auth import Authenticator, server_ssl_context
from ._config import ServerConfig
from ._errors import ServerError
from ._feed import ChangeFeed
from ._feed_follower import ChangeFollower
from ._grpc import ConnectHandler
from ._log_context import replica_logs
from ._readiness import Readiness
from ._replica import ReplicaService, advertised_address, take_store_alone
from ._sessions import SessionManager
from ._state import OperationsHook, ServerState
from .ops import OperationService
from .store import open_store
from .store._sqlite_core import wall_clock_ms

log = logging.getLogger("server")
#: How long the server may still run past ``shutdown.drainSeconds`` after SIGTERM: sessions
#: still closing (CLOSE_AFTER_DRAIN_SECONDS, 2 s), the store's cleanup (2 s) and the exit.
#: A pod's terminationGracePeriodSeconds must be at least drainSeconds plus this.
SHUTDOWN_SLACK_SECONDS = 5.0
_LEAVE_SECONDS = 1.0  # to delete the replica's row at a drain (inside the slack above)


class ServeApi(Protocol):
    """The REST API's entry point: serve until cancelled, ``task_status.started(port)``."""

    async def __call__(
        self,
        state: ServerState,
        host: str,
        port: int,
        *,
        http_server: Literal["kubesvc", "hypercorn"],
        drain: trio.Event | None = None,
        task_status: trio.TaskStatus[int],
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class RunningServer:
    """What run_server reports once listening: its state and the bound ports (useful with
    port 0); ``api_port`` is None when no REST API runs."""

    state: ServerState
    grpc_port: int
    api_port: int | None


@asynccontextmanager
async def open_server_state(
    config: ServerConfig,
    *,
    now_ms: Callable[[], int] = wall_clock_ms,
    operations: OperationsHook | None = None,
) -> AsyncIterator[ServerState]:
    """Open the store and build the registry and the session manager; closes them on exit.

    Raises StoreError/SchemaError when the store cannot be opened.
    """
    server_id = config.server_id or f"kubesvc-server-{secrets.token_hex(4)}"
    # The caller's task and the tasks it starts from here on log as this replica.
    with replica_logs(server_id):
        async with _opened_state(config, server_id, now_ms, operations) as state:
            yield state


@asynccontextmanager
async def _opened_state(
    config: ServerConfig,
    server_id: str,
    now_ms: Callable[[], int],
    operations: OperationsHook | None,
) -> AsyncIterator[ServerState]:
    async with open_store(config.store, now_ms=now_ms, replica_id=server_id) as store:
        alone = config.store.location.backend == "sqlite"
        if alone:
            # One process owns a SQLite file: what earlier ones left holds no lease.
            await take_store_alone(store, server_id)
        accounts = await AccountService.load(
            store,
            now_ms=now_ms,
            orphan_grace_ms=int(config.accounts.orphan_grace_seconds * 1000),
            replica_id=server_id,
            lease_ttl_ms=config.replicas.lease_ttl_ms,
        )
        accounts.shared_store = not alone
        sessions = SessionManager(
            accounts,
            store,
            server_id=server_id,
            now_ms=now_ms,
            max_resumable_age_ms=config.accounts.max_resumable_resource_age_ms,
            outbound_queue=config.sessions.outbound_queue,
        )
        feed = ChangeFeed()
        follower: ChangeFollower | None = None
        if not alone:
            # Several replicas may share it: their changes reach this replica's feed too.
            follower = ChangeFollower(
                store,
                feed,
                listen=True,
                writer=store.writer,
                poll_seconds=config.replicas.feed_poll_ms / 1000,
            )
        if operations is None:
            # Issue 6: the real operations service (server/ops) replaces LogOperations.
            operations = OperationService(
                store=store,
                sessions=sessions,
                accounts=accounts,
                feed=feed,
                owner_id=server_id,
                wait_ms=config.operations.wait_ms,
                now_ms=now_ms,
                # The session's outbound queue is bounded and a full one ends the session:
                # keep unanswered operations well under it.
                max_in_flight=max(1, config.sessions.outbound_queue // 2),
                # Replicas sharing the store: operations reach the stream on any of them.
                lease_ttl_ms=0 if alone else config.replicas.lease_ttl_ms,
            )
        started_ms = now_ms()
        replicas = ReplicaService(
            store,
            accounts,
            sessions,
            replica_id=server_id,
            started_ms=started_ms,
            heartbeat_ms=config.replicas.heartbeat_ms,
            lease_ttl_ms=config.replicas.lease_ttl_ms,
            now_ms=now_ms,
            address=config.replicas.address,
            change_log_keep_ms=config.replicas.change_log_keep_ms,
            change_log_max_rows=config.replicas.change_log_max_rows,
        )
        try:
            yield ServerState(
                config=config,
                server_id=server_id,
                started_at_ms=started_ms,
                store=RegistryStore(store, accounts),
                feed=feed,
                accounts=accounts,
                sessions=sessions,
                operations=operations,
                replicas=replicas,
                readiness=Readiness(store.ping),
                follower=follower,
            )
        finally:
            feed.close()


async def run_server(
    config: ServerConfig,
    *,
    serve_api: ServeApi | None = None,
    now_ms: Callable[[], int] = wall_clock_ms,
    operations: OperationsHook | None = None,
    stop: trio.Event | None = None,
    task_status: trio.TaskStatus[RunningServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run the server until cancelled: the store, the orphan timer, gRPC and the REST API;
    when ``stop`` is set, drain (see the module docstring) and return.

    Must run inside ``wire.open_loop()`` (the gRPC bridge needs it). Reports the bound ports
    with ``task_status.started(RunningServer(...))``. Raises StoreError when the store cannot be
    opened and OSError/ssl.SSLError when the TLS files cannot be loaded or a port is taken.
    """
    ssl_context = server_ssl_context(config.grpc.tls) if config.grpc.tls else None
    authenticator = Authenticator(config.grpc.auth)
    async with (
        open_server_state(config, now_ms=now_ms, operations=operations) as state,
        trio.open_nursery() as nursery,
    ):
        await nursery.start(state.store.run_upkeep)
        if state.follower is not None:
            # Before the REST API listens: a feed subscriber must find the follower's cursor
            # already taken, or another replica's change could slip between the two.
            await nursery.start(state.follower.run)
        if state.readiness is not None:
            await nursery.start(state.readiness.run)
        if isinstance(state.operations, OperationService):
            await nursery.start(state.operations.run)  # issue 6: task runners
        handler = ConnectHandler(state, authenticator)
        draining = trio.Event()
        serve = functools.partial(
            wire.serve,
            handler,
            config.grpc.host,
            config.grpc.port,
            ssl_context=ssl_context,
            max_message_size=config.grpc.max_message_size,
            stop_listening=draining,
        )
        grpc_port: int = await nursery.start(serve)
        api_port: int | None = None
        api_done = trio.Event()
        if serve_api is not None:
            api = functools.partial(
                serve_api,
                state,
                config.api.host,
                config.api.port,
                http_server="hypercorn" if config.api.http_server == "hypercorn" else "kubesvc",
                drain=draining,
            )
            api_port = await nursery.start(_setting_when_done, api, api_done)
        else:
            api_done.set()
        log.info(
            "server %s: gRPC on %s:%d, REST on %s",
            state.server_id,
            config.grpc.host,
            grpc_port,
            f"{config.api.host}:{api_port}" if api_port else "(none)",
        )
        replicas = state.replicas
        if replicas is not None:
            if not replicas.address:
                replicas.address = advertised_address(
                    config.grpc.host, grpc_port, config.api.host, api_port
                )
            # First: the orphan expiry asks the heartbeat whether housekeeping is ours.
            await nursery.start(replicas.run)
        await nursery.start(state.accounts.run_expiry)
        task_status.started(RunningServer(state, grpc_port, api_port))
        if stop is not None:
            await stop.wait()
            await _drain(state, handler, draining, api_done)
            nursery.cancel_scope.cancel()


async def _drain(
    state: ServerState, handler: ConnectHandler, draining: trio.Event, api_done: trio.Event
) -> None:
    bound = state.config.shutdown.drain_seconds
    log.info("shutdown: draining (at most %g s)", bound)
    start = trio.current_time()
    if state.readiness is not None:
        state.readiness.drain()  # probes on connections still open answer 503 from now on
    with trio.move_on_after(bound) as scope:
        draining.set()  # both listeners close; idle REST connections too
        state.feed.close()
        handler.drain(
            f"{wire.DRAINING}: server {state.server_id} is shutting down; connect again",
            deadline=scope.deadline,
        )
        await handler.wait_closed()
        log.info("shutdown: every agent stream is closed")
        await api_done.wait()
    if state.replicas is not None:
        # The agents are gone: release what this replica still holds now, not at the TTL.
        with trio.move_on_after(_LEAVE_SECONDS, shield=True):
            try:
                await state.replicas.leave()
            except ServerError as exc:
                log.error("shutdown: could not remove this replica's row: %s", exc)
    if scope.cancelled_caught:
        log.warning("shutdown: the drain did not finish within %g s: stopping now", bound)
    else:
        log.info("shutdown: drained in %.1f s; closing the store", trio.current_time() - start)


async def _setting_when_done(
    serve: functools.partial[Awaitable[None]],
    done: trio.Event,
    *,
    task_status: trio.TaskStatus[int],
) -> None:
    """``serve`` (the REST API), setting ``done`` when it returns (it has drained)."""
    try:
        await serve(task_status=task_status)
    finally:
        done.set()
