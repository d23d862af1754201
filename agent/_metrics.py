"""Prometheus metrics of one agent, read from its :class:`AgentStatus` at scrape time.

A per-agent ``CollectorRegistry`` (never the global one, so several agents can run in one test
process) holds one custom collector that turns the live status into the metric names of the
Armory agent -- ``kubesvc_connection_count``, ``kubesvc_disconnection_total``,
``kubesvc_events_sent_total`` and ``kubesvc_events_bytes_sent_total`` (labels ``event_kind``,
``event_group``), ``kubesvc_resource_agent_total``, ``kubesvc_kubernetes_requests``,
``kubesvc_watches`` -- plus the watch retries (``kubesvc_watch_retries_total`` by account,
kind, group and reason; ``kubesvc_watch_backoff_seconds``, the delay waited now), the
relists (``kubesvc_watch_relists_total``: a 410 or a resourceVersion from the future made a
kind list again), the kinds the API server refuses (``kubesvc_watch_unavailable`` by account,
kind, group and HTTP ``code``), the time from an event batch's send to its Ack
(``kubesvc_ack_latency_seconds``, a histogram), the budget's, the process's, and
``kubesvc_protocol_unknown_fields_total`` (labels ``message``, ``field``: what the server sent
that this version does not know, skipped). Nothing is counted twice: the numbers are the ones
the link, the reflectors and the budget already keep. docs/monitoring.md lists them all, and
the dashboard and alerts built on them.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

import wire

from ._status import AgentStatus

__all__ = ["CONTENT_TYPE_LATEST", "AgentCollector", "metrics_registry", "render_metrics"]


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0] if "/" in api_version else "core"


class AgentCollector:
    """A prometheus_client collector over an AgentStatus."""

    def __init__(self, status: AgentStatus) -> None:
        self._status = status

    def describe(self) -> list[Metric]:
        return []  # families depend on the state; collected fresh on every scrape

    def collect(self) -> Iterator[Metric]:
        status = self._status
        link = status.link
        yield GaugeMetricFamily(
            "kubesvc_connection_count",
            "Open streams to the server (0 or 1).",
            value=1 if link.connected else 0,
        )
        yield CounterMetricFamily(
            "kubesvc_disconnection_total",
            "Sessions with the server that ended.",
            value=link.disconnections,
        )
        events = CounterMetricFamily(
            "kubesvc_events_sent_total",
            "Kubernetes events sent to the server.",
            labels=["event_kind", "event_group"],
        )
        sizes = CounterMetricFamily(
            "kubesvc_events_bytes_sent_total",
            "Bytes of Kubernetes objects sent to the server.",
            labels=["event_kind", "event_group"],
        )
        for (kind, api_version), (count, size) in sorted(link.events_by_kind.items()):
            events.add_metric([kind, _group(api_version)], count)
            sizes.add_metric([kind, _group(api_version)], size)
        yield events
        yield sizes
        unknown = CounterMetricFamily(
            "kubesvc_protocol_unknown_fields_total",
            "Fields and oneof members of server messages this agent does not know, skipped.",
            labels=["message", "field"],
        )
        for message, label, count in link.unknown_fields.metric_rows():
            unknown.add_metric([message, label], count)
        yield unknown
        yield _histogram(
            "kubesvc_ack_latency_seconds",
            "Time from sending an event batch to the server's Ack (the server stored it).",
            link.ack_latency,
        )
        yield CounterMetricFamily(
            "kubesvc_events_oversize_dropped_total",
            "Objects too large for one message, reported and not sent.",
            value=link.oversize_dropped,
        )
        agents = GaugeMetricFamily(
            "kubesvc_resource_agent_total",
            "Watches (one per kind and namespace) per account.",
            labels=["account"],
        )
        requests = CounterMetricFamily(
            "kubesvc_kubernetes_requests",
            "List and watch requests sent to the Kubernetes API.",
            labels=["account", "verb"],
        )
        watches = GaugeMetricFamily(
            "kubesvc_watches",
            "Watches by state: syncing (initial list), synced, unavailable (403/404).",
            labels=["account", "state"],
        )
        for name, state in sorted(status.accounts.items()):
            reflectors = list(state.watch.reflectors.values()) if state.watch else []
            agents.add_metric([name], len(reflectors))
            requests.add_metric([name, "list"], sum(r.lists for r in reflectors))
            requests.add_metric([name, "watch"], sum(r.watches for r in reflectors))
            counts = {"syncing": 0, "synced": 0, "unavailable": 0}
            for r in reflectors:
                counts[
                    "unavailable" if not r.available else "synced" if r.synced else "syncing"
                ] += 1
            for label, count in counts.items():
                watches.add_metric([name, label], count)
        yield agents
        yield requests
        yield watches
        yield from _retry_metrics(status)
        waits, wait_seconds = 0, 0.0
        if status.budget is not None:
            stats = status.budget()
            waits, wait_seconds = stats.waits, stats.wait_seconds
            for name, help_text, value in (
                ("kubesvc_budget_capacity_bytes", "The event byte budget.", stats.capacity),
                ("kubesvc_budget_in_use_bytes", "Bytes of events in flight.", stats.in_use),
                ("kubesvc_budget_high_water_bytes", "Most bytes ever in flight.", stats.high_water),
                ("kubesvc_budget_waiters", "Reservations waiting for room now.", stats.waiters),
            ):
                yield GaugeMetricFamily(name, help_text, value=value)
        yield CounterMetricFamily(
            "kubesvc_budget_waits_total",
            "Reservations that had to wait for room in the budget.",
            value=waits,
        )
        yield CounterMetricFamily(
            "kubesvc_budget_wait_seconds_total",
            "Seconds reservations waited for room in the budget, added up (counted when each "
            "wait ends).",
            value=wait_seconds,
        )


def _histogram(name: str, documentation: str, data: wire.LatencyHistogram) -> Metric:
    """``data`` as a Prometheus histogram family of one series."""
    return HistogramMetricFamily(
        name,
        documentation,
        buckets=data.cumulative(),
        sum_value=data.total,
    )


def _retry_metrics(status: AgentStatus) -> Iterator[Metric]:
    """Watch retries by account, kind and reason, the delay each kind waits now, its relists
    and, for a kind the API server refuses, the HTTP code.

    The reflectors of one kind in several namespaces are summed (retries) or their longest
    wait shown (delay), so the series stay one per account and kind.
    """
    retries: dict[tuple[str, str, str, str], int] = {}
    delays: dict[tuple[str, str, str], float] = {}
    relists: dict[tuple[str, str, str], int] = {}
    unavailable: dict[tuple[str, str, str, str], int] = {}
    for name, state in status.accounts.items():
        if state.watch is None:
            continue
        for r in state.watch.reflectors.values():
            kind = (name, r.target.kind.kind, r.target.kind.group or "core")
            delays[kind] = max(delays.get(kind, 0.0), r.backoff_seconds)
            relists[kind] = relists.get(kind, 0) + r.relists
            if not r.available:
                key = (*kind, str(r.unavailable_code))
                unavailable[key] = unavailable.get(key, 0) + 1
            for reason, count in r.retries.items():
                key = (*kind, str(reason))
                retries[key] = retries.get(key, 0) + count
    counter = CounterMetricFamily(
        "kubesvc_watch_retries_total",
        "List and watch retries of the reflectors, by reason (network, throttled, "
        "server_error, gone, stalled, unavailable, ...).",
        labels=["account", "kind", "group", "reason"],
    )
    for key, count in sorted(retries.items()):
        counter.add_metric(list(key), count)
    yield counter
    gauge = GaugeMetricFamily(
        "kubesvc_watch_backoff_seconds",
        "The delay a kind's reflector waits now before its next list or watch (0: running).",
        labels=["account", "kind", "group"],
    )
    for kind, delay in sorted(delays.items()):
        gauge.add_metric(list(kind), delay)
    yield gauge
    counter = CounterMetricFamily(
        "kubesvc_watch_relists_total",
        "Lists of a kind after its first: a 410 Gone (the resourceVersion expired) or a "
        "resourceVersion the API server has not reached.",
        labels=["account", "kind", "group"],
    )
    for kind, count in sorted(relists.items()):
        counter.add_metric(list(kind), count)
    yield counter
    gauge = GaugeMetricFamily(
        "kubesvc_watch_unavailable",
        "Watches of a kind the API server refuses (code 403: RBAC forbids list/watch; 401: "
        "the credentials; 404/406: the kind is gone or not served as asked), retried slowly.",
        labels=["account", "kind", "group", "code"],
    )
    for key, count in sorted(unavailable.items()):
        gauge.add_metric(list(key), count)
    yield gauge


def metrics_registry(status: AgentStatus, *, process: bool = True) -> CollectorRegistry:
    """A fresh registry with the agent's collector (and the process collector)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(status))
    if process:
        ProcessCollector(registry=registry)
    return registry


def render_metrics(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of ``registry``."""
    data: bytes = generate_latest(registry)
    return data
