"""The server's Prometheus metrics, in a registry per server, and the middleware that counts
REST requests by route template.

Besides the REST API's own, the collectors read the running server at scrape time: accounts
by state (``kubesvc_server_account_state``, one series per account: its state now), the
agents connected to this replica (``kubesvc_server_agent_sessions``), the operations it ran
(``kubesvc_server_operations_total`` by account and outcome, and
``kubesvc_server_operation_duration_seconds`` by type), the change feed, the replicas and the
process. docs/monitoring.md lists them all, and the dashboard and alerts built on them."""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import wire

from .._feed import ChangeFeed
from .._feed_follower import ChangeFollower
from .._sessions import AgentView
from ..ops import OperationStatistics
from ..store import AccountRecord, ReplicaRecord

__all__ = ["ApiMetrics", "MetricsMiddleware"]


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class _FeedCollector(Collector):
    """The feed's counters, read at scrape time (the feed itself stays free of metrics)."""

    def __init__(self, feed: ChangeFeed) -> None:
        self._feed = feed

    def collect(self) -> Any:
        stats = self._feed.statistics()
        yield GaugeMetricFamily(
            "kubesvc_server_feed_subscribers",
            "Connected change-feed subscribers",
            stats.subscribers,
        )
        yield CounterMetricFamily(
            "kubesvc_server_feed_published_records",
            "Records offered to the change feed",
            stats.published_records,
        )
        yield CounterMetricFamily(
            "kubesvc_server_feed_lagged_subscribers",
            "Subscribers disconnected because they fell behind",
            stats.lagged_subscribers,
        )


class _FollowerCollector(Collector):
    """The change-feed follower's counters (PostgreSQL: the other replicas' changes)."""

    def __init__(self, follower: ChangeFollower) -> None:
        self._follower = follower

    def collect(self) -> Any:
        stats = self._follower.statistics()
        for name, text, value in (
            ("changes", "Other replicas' writes published to this replica's feed", stats.changes),
            (
                "superseded",
                "Their records left out: a later write of the object was already stored",
                stats.superseded,
            ),
            ("resyncs", "Times the change log was trimmed past unread changes", stats.resyncs),
            ("errors", "Store errors while reading the change log (each retried)", stats.errors),
        ):
            yield CounterMetricFamily(f"kubesvc_server_feed_follower_{name}", text, value)


class _ProtocolCollector(Collector):
    """What agents sent that this version does not know (skipped), read at scrape time."""

    def __init__(self, unknown: wire.UnknownFieldCounter) -> None:
        self._unknown = unknown

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "kubesvc_protocol_unknown_fields",
            "Fields and oneof members of agent messages this server does not know, skipped",
            labels=["message", "field"],
        )
        for message, label, count in self._unknown.metric_rows():
            family.add_metric([message, label], count)
        yield family


@runtime_checkable
class ReplicaView(Protocol):
    """What the metrics read of the replicas (ReplicaService): the live ones, as the last
    heartbeat saw them."""

    def live(self) -> Sequence[ReplicaRecord]: ...


class _ReplicaCollector(Collector):
    """Sessions and primaries per live replica, as the store last showed them."""

    def __init__(self, replicas: ReplicaView) -> None:
        self._replicas = replicas

    def collect(self) -> Any:
        sessions = GaugeMetricFamily(
            "kubesvc_replica_sessions",
            "Agent sessions open on a server replica",
            labels=["replica"],
        )
        primaries = GaugeMetricFamily(
            "kubesvc_replica_primaries",
            "Account leases (PRIMARY roles) a server replica holds",
            labels=["replica"],
        )
        for record in self._replicas.live():
            sessions.add_metric([record.replica_id], record.sessions)
            primaries.add_metric([record.replica_id], record.primaries)
        yield sessions
        yield primaries


@runtime_checkable
class AccountsView(Protocol):
    """What the metrics read of the accounts (AccountService): every account as this
    replica's registry holds it."""

    def list(self) -> builtins.list[AccountRecord]: ...


@runtime_checkable
class AgentsView(Protocol):
    """What the metrics read of the agents (SessionManager): the sessions open here."""

    def agents(self) -> list[AgentView]: ...


class _ServerCollector(Collector):
    """Accounts by state, the agents connected here and the operations run here."""

    def __init__(
        self,
        accounts: AccountsView | None,
        agents: AgentsView | None,
        operations: OperationStatistics | None,
    ) -> None:
        self._accounts = accounts
        self._agents = agents
        self._operations = operations

    def collect(self) -> Any:
        accounts = self._accounts.list() if self._accounts is not None else []
        if self._accounts is not None:
            # One series per account (its state now), not one per state: the alert on an
            # ORPHANED account names it; "accounts by state" is a count by state of these.
            states = GaugeMetricFamily(
                "kubesvc_server_account_state",
                "1 for each account, labelled with its state (ACTIVE, ORPHANED, ...)",
                labels=["account", "state"],
            )
            for record in accounts:
                states.add_metric([record.name, str(record.status)], 1)
            yield states
        if self._agents is not None:
            sessions = GaugeMetricFamily(
                "kubesvc_server_agent_sessions",
                "Agent sessions open on this replica, by agent id and version",
                labels=["agent_id", "version"],
            )
            counts: dict[tuple[str, str], int] = {}
            for view in self._agents.agents():
                key = (view.agent_id, view.agent_version)
                counts[key] = counts.get(key, 0) + 1
            for key, count in sorted(counts.items()):
                sessions.add_metric(list(key), count)
            yield sessions
        if self._operations is not None:
            yield from _operation_metrics(self._operations, [r.name for r in accounts])


def _operation_metrics(stats: OperationStatistics, accounts: list[str]) -> Any:
    ended = CounterMetricFamily(
        "kubesvc_server_operations",
        "Operations this replica ran, by account and outcome (succeeded; failed: the agent "
        "or Kubernetes said no; timeout, no_agent, agent_disconnected, replica_stopped: "
        "kubesvc did not deliver it)",
        labels=["account", "outcome"],
    )
    for key, count in stats.counts_for(accounts):
        ended.add_metric(list(key), count)
    yield ended
    durations = HistogramMetricFamily(
        "kubesvc_server_operation_duration_seconds",
        "Time from receiving an operation to its end (the agent's result, or giving up)",
        labels=["type"],
    )
    for type_, histogram in sorted(stats.durations.items()):
        durations.add_metric([type_], histogram.cumulative(), histogram.total)
    yield durations


class ApiMetrics:
    """The REST API's metrics, in a registry of their own (one per server, not the global)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        feed: ChangeFeed,
        unknown_fields: wire.UnknownFieldCounter | None = None,
        replicas: ReplicaView | None = None,
        follower: ChangeFollower | None = None,
        *,
        accounts: AccountsView | None = None,
        agents: AgentsView | None = None,
        operations: OperationStatistics | None = None,
    ) -> None:
        self.registry = registry
        self.requests = Counter(
            "kubesvc_server_http_requests",
            "HTTP requests answered by the REST API",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "kubesvc_server_http_request_seconds",
            "Time to answer a REST request",
            ["method", "route"],
            registry=registry,
        )
        self.cached_objects = Gauge(
            "kubesvc_server_cached_objects", "Objects in the cache store", registry=registry
        )
        registry.register(_FeedCollector(feed))
        if unknown_fields is not None:  # a server with gRPC sessions (not a standalone API)
            registry.register(_ProtocolCollector(unknown_fields))
        if replicas is not None:
            registry.register(_ReplicaCollector(replicas))
        if follower is not None:
            registry.register(_FollowerCollector(follower))
        registry.register(_ServerCollector(accounts, agents, operations))
        ProcessCollector(registry=registry)  # memory and CPU, as the agent's /metrics has
        # labels() takes a lock and builds a key each call; a request notes through these
        # (as many entries as the metrics have label sets: the registry holds them anyway).
        self._counters: dict[tuple[str, str, str], Any] = {}
        self._timers: dict[tuple[str, str], Any] = {}

    def note(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one answered request and its time, by route template. A method outside
        HTTP's usual ones counts as OTHER: the client chooses it, and every label value is a
        series the registry (and these caches) keep for good."""
        if method not in _METHODS:
            method = "OTHER"
        key = (method, route, str(status))
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.requests.labels(*key)
        counter.inc()
        timer = self._timers.get(key[:2])
        if timer is None:
            timer = self._timers[key[:2]] = self.latency.labels(method, route)
        timer.observe(seconds)


class MetricsMiddleware:
    """Counts and times every HTTP request by its route template (never the raw path, which
    would give every object its own label value)."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.monotonic()

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = str(scope.get("method", ""))
            self.metrics.note(method, template, status, time.monotonic() - started)
