"""The REST API's Prometheus metrics, in a registry per server, and the middleware that
counts requests by route template."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import wire

from .._feed import ChangeFeed
from .._feed_follower import ChangeFollower
from ..store import ReplicaRecord

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


class ApiMetrics:
    """The REST API's metrics, in a registry of their own (one per server, not the global)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        feed: ChangeFeed,
        unknown_fields: wire.UnknownFieldCounter | None = None,
        replicas: ReplicaView | None = None,
        follower: ChangeFollower | None = None,
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
