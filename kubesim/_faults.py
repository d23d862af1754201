"""Injected faults, request counters and the write log, for tests (sans-I/O: the server asks,
these answer).

Faults are armed from Python (``server.faults``) or the admin endpoint and consumed by the
requests they hit: ``fail_next(3, status=429)`` fails exactly the next three API requests.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Protocol

from kubesim._errors import ApiError

__all__ = ["Faults", "RequestCounters", "WatchFault", "Write", "WriteLog"]

_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    500: ("InternalError", "Internal error occurred: injected by kubesim"),
    502: ("InternalError", "bad gateway: injected by kubesim"),
    503: ("ServiceUnavailable", "The server is currently unable to handle the request"),
    504: ("Timeout", "The server was unable to return a response in the time allotted"),
}


class Gate(Protocol):
    """What holds a request (``Faults.hold``): a ``trio.Event`` the test sets, say."""

    async def wait(self) -> None: ...


@dataclass(slots=True)
class _Hold:
    gate: Gate
    verb: str | None
    resource: str | None


@dataclass(frozen=True, slots=True)
class WatchFault:
    """What to do to one watch: drop its connection or stall it after some events/bytes."""

    drop_after_events: int | None = None
    drop_after_bytes: int | None = None
    stall_after_events: int | None = None
    stall_seconds: float = math.inf


@dataclass(slots=True)
class _Failure:
    remaining: int
    status: int
    retry_after: int | None
    resource: str | None
    verb: str | None


@dataclass(slots=True)
class _Drop:
    remaining: int
    method: str | None
    path: str | None


@dataclass(slots=True)
class _ArmedWatchFault:
    remaining: int
    fault: WatchFault


class Faults:
    """The faults armed now. Each ``arm`` call adds to what is pending."""

    def __init__(self) -> None:
        self._failures: list[_Failure] = []
        self._watch_faults: list[_ArmedWatchFault] = []
        self.delay = 0.0  # seconds added before every API response
        self.stall_next = 0  # how many next non-watch responses stall
        self.stall_seconds = math.inf
        #: until this time (trio's clock) every new connection is reset as it is accepted
        self.cut_until = -math.inf
        self._drops: list[_Drop] = []
        #: (method, path) of every request whose connection a drop fault closed
        self.dropped: list[tuple[str, str]] = []
        self._holds: list[_Hold] = []
        #: (verb, resource) of every request a hold held (counted when it arrived)
        self.held: list[tuple[str, str]] = []

    def fail_next(
        self,
        count: int = 1,
        *,
        status: int = 429,
        retry_after: int | None = 1,
        resource: str | None = None,
        verb: str | None = None,
    ) -> None:
        """Fail the next ``count`` API requests (of ``verb`` on ``resource`` if given) with
        ``status`` (429 with Retry-After, or 500/502/503/504)."""
        if status not in _REASONS:
            raise ValueError(f"status must be one of {sorted(_REASONS)}, got {status}")
        self._failures.append(_Failure(count, status, retry_after, resource, verb))

    def drop_connections(
        self, count: int = 1, *, method: str | None = None, path: str | None = None
    ) -> None:
        """Close the connection of the next ``count`` requests (of ``method``, on paths
        starting with ``path``, if given) as soon as they arrive, unanswered and unprocessed:
        what a client sees when the server closed a kept-alive connection (HTTP/1.1 or
        HTTP/2) just as a request went out on it, as after an API-server restart."""
        self._drops.append(_Drop(count, method, path))

    def take_drop(self, method: str, path: str) -> bool:
        """Whether this request's connection is to be closed now (and consume the fault)."""
        for drop in self._drops:
            if drop.method not in (None, method):
                continue
            if drop.path is not None and not path.startswith(drop.path):
                continue
            drop.remaining -= 1
            if drop.remaining <= 0:
                self._drops.remove(drop)
            self.dropped.append((method, path))
            return True
        return False

    def drop_watches(
        self, *, after_events: int | None = None, after_bytes: int | None = None, count: int = 1
    ) -> None:
        """Cut the connection of the next ``count`` watches after N events or N bytes."""
        fault = WatchFault(drop_after_events=after_events, drop_after_bytes=after_bytes)
        self._watch_faults.append(_ArmedWatchFault(count, fault))

    def stall_watches(
        self, *, after_events: int = 0, seconds: float = math.inf, count: int = 1
    ) -> None:
        """Stop sending on the next ``count`` watches after N events, for ``seconds``."""
        fault = WatchFault(stall_after_events=after_events, stall_seconds=seconds)
        self._watch_faults.append(_ArmedWatchFault(count, fault))

    def stall_responses(self, *, seconds: float = math.inf, count: int = 1) -> None:
        """Hold the next ``count`` non-watch responses for ``seconds`` before answering."""
        self.stall_next = count
        self.stall_seconds = seconds

    def hold(self, gate: Gate, *, verb: str | None = None, resource: str | None = None) -> None:
        """Hold every API request (of ``verb`` on ``resource``, e.g. "watch" and "pods", if
        given) before it is answered until ``gate.wait()`` returns; for as long as the fault
        is armed (``clear`` disarms it; a set gate lets everything through)."""
        self._holds.append(_Hold(gate, verb, resource))

    def take_hold(self, verb: str, resource: str) -> Gate | None:
        """The gate this request waits on, if a hold matches it (noted in ``held``)."""
        for hold in self._holds:
            if hold.verb in (None, verb) and hold.resource in (None, resource):
                self.held.append((verb, resource))
                return hold.gate
        return None

    def slow(self, delay: float) -> None:
        """Delay every API response by ``delay`` seconds (0 turns it off)."""
        self.delay = max(0.0, delay)

    def refuse_connections(self, now: float, seconds: float) -> None:
        """Reset every connection accepted from ``now`` for ``seconds`` (see Server.cut)."""
        if not seconds >= 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self.cut_until = now + seconds

    def end_cut(self) -> None:
        """Accept connections again (ends a cut given ``math.inf`` seconds, or any cut)."""
        self.cut_until = -math.inf

    def refusing(self, now: float) -> bool:
        """Whether a connection accepted at ``now`` is to be reset at once."""
        return now < self.cut_until

    def clear(self) -> None:
        self.__init__()  # type: ignore[misc]

    def take_failure(
        self, verb: str, resource: str, *, named_only: bool = False
    ) -> tuple[ApiError, int | None] | None:
        """The injected error for this request, if one is armed (and consume it).
        ``named_only``: only a failure armed for this very ``resource`` (the OpenAPI
        documents fail only when asked to, not with "the next API requests")."""
        for failure in self._failures:
            if failure.resource not in (None, resource) or failure.verb not in (None, verb):
                continue
            if named_only and failure.resource != resource:
                continue
            failure.remaining -= 1
            if failure.remaining <= 0:
                self._failures.remove(failure)
            reason, message = _REASONS[failure.status]
            details = {"retryAfterSeconds": failure.retry_after} if failure.retry_after else None
            return ApiError(failure.status, reason, message, details), failure.retry_after
        return None

    def take_watch_fault(self) -> WatchFault | None:
        if not self._watch_faults:
            return None
        armed = self._watch_faults[0]
        armed.remaining -= 1
        if armed.remaining <= 0:
            self._watch_faults.pop(0)
        return armed.fault

    def take_stall(self) -> float:
        if self.stall_next <= 0:
            return 0.0
        self.stall_next -= 1
        return self.stall_seconds


class RequestCounters:
    """How many requests of each verb reached each resource (``"pods"``, ``"deployments.apps"``).

    A watch that starts with every current object (a streaming list, or a watch from
    resourceVersion 0) is counted as a ``watch`` and also as a ``watchlist``: a full listing
    like a ``list``, which a client resuming from a resourceVersion never causes."""

    def __init__(self) -> None:
        self._counts: Counter[tuple[str, str]] = Counter()

    def record(self, verb: str, resource: str) -> None:
        self._counts[(verb, resource)] += 1

    def count(self, verb: str, resource: str | None = None) -> int:
        """Requests of ``verb`` (on ``resource``, or on all resources when None)."""
        if resource is not None:
            return self._counts[(verb, resource)]
        return sum(n for (v, _), n in self._counts.items() if v == verb)

    def snapshot(self) -> dict[str, int]:
        """``{"list pods": 2, "watch deployments.apps": 1, ...}``."""
        return {f"{verb} {resource}": n for (verb, resource), n in sorted(self._counts.items())}

    def reset(self) -> None:
        self._counts.clear()


@dataclass(frozen=True, slots=True)
class Write:
    """One write request as it reached the server: what a client sent, to assert on."""

    verb: str  # create, update, patch, delete, deletecollection
    resource: str  # "deployments.apps"
    path: str
    query: dict[str, str]
    content_type: str
    body: bytes
    user_agent: str = ""


class WriteLog:
    """The last ``size`` write requests (oldest first), whatever their answer."""

    def __init__(self, size: int = 256) -> None:
        self._writes: deque[Write] = deque(maxlen=size)

    def record(self, write: Write) -> None:
        self._writes.append(write)

    def recent(self, verb: str | None = None, resource: str | None = None) -> list[Write]:
        """The kept writes of ``verb`` on ``resource`` (any when None), oldest first."""
        return [
            w
            for w in self._writes
            if (verb is None or w.verb == verb) and (resource is None or w.resource == resource)
        ]

    def clear(self) -> None:
        self._writes.clear()
