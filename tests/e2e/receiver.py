"""A recording receiver: the smallest real gRPC server an agent can talk to.

It answers Hello with every account PRIMARY (resuming from what it recorded, like the real
server), keeps the final state of every object by applying sync brackets the way the server
does, records every raw EventBatch payload (so tests can search the bytes that crossed the
wire), and acknowledges each batch, optionally after a delay (a slow receiver). Used where a
test needs to see the stream itself, and by the agent benchmark.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import betterproto
import trio

import wire
from wire import messages

from .._wait import Changes

ObjectKey = tuple[str, str, str, str, str]  # account, apiVersion, kind, namespace, name
ScopeKey = tuple[str, str, str, str]  # account, apiVersion, kind, scope


@dataclass
class Receiver:
    """State the handler fills; read it from the test."""

    ack_delay: float = 0.0
    objects: dict[ObjectKey, bytes] = field(default_factory=dict)
    resume: dict[ScopeKey, str] = field(default_factory=dict)
    payloads: list[bytes] = field(default_factory=list)
    keep_payloads: bool = True
    events: int = 0
    batches: int = 0
    sessions: int = 0
    hellos: list[messages.Hello] = field(default_factory=list)
    on_batch: Callable[[list[wire.EventRecord]], None] | None = None
    # Notified after every hello and every batch applied: tests wait on it, not by polling.
    changed: Changes = field(default_factory=Changes)
    _open: dict[ScopeKey, set[ObjectKey]] = field(default_factory=dict)
    _first_event_at: float | None = None
    _last_event_at: float | None = None

    def apply(self, records: list[wire.EventRecord]) -> None:
        for record in records:
            kind = record.type
            scope_key = (record.account, record.api_version, record.kind, record.scope)
            if kind == wire.EventType.SYNC_BEGIN:
                self._open[scope_key] = set()
                continue
            if kind == wire.EventType.SYNC_END:
                seen = self._open.pop(scope_key, set())
                for key in [
                    k
                    for k in self.objects
                    if k[:3] == scope_key[:3]
                    and (not record.scope or k[3] == record.scope)
                    and k not in seen
                ]:
                    del self.objects[key]
                self.resume[scope_key] = record.resource_version
                continue
            if kind == wire.EventType.BOOKMARK:
                if scope_key not in self._open:
                    self.resume[scope_key] = record.resource_version
                continue
            key = (record.account, record.api_version, record.kind, record.namespace, record.name)
            if kind == wire.EventType.DELETED:
                self.objects.pop(key, None)
            else:
                self.objects[key] = record.object
                if scope_key in self._open:
                    self._open[scope_key].add(key)
            if scope_key not in self._open:
                self.resume[scope_key] = record.resource_version

    def rate(self) -> float:
        if self._first_event_at is None or self._last_event_at is None:
            return 0.0
        spent = self._last_event_at - self._first_event_at
        return self.events / spent if spent > 0 else 0.0

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        first = await stream.receive()
        name, hello = betterproto.which_one_of(first, "message")
        if not isinstance(hello, messages.Hello):
            raise wire.Refuse(wire.Status.FAILED_PRECONDITION, f"expected hello, got {name}")
        self.sessions += 1
        self.hellos.append(hello)
        self.changed.notify()
        await stream.send(
            messages.ServerMessage(
                welcome=messages.Welcome(
                    session_token=f"s{self.sessions}",
                    server_id="receiver",
                    accounts=[self._assign(info.name) for info in hello.accounts],
                )
            )
        )
        while True:
            try:
                message = await stream.receive()
            except wire.EndOfStream:
                return
            name, body = betterproto.which_one_of(message, "message")
            if isinstance(body, messages.EventBatch):
                records = wire.decode_events(body.records)
                now = time.perf_counter()
                self._first_event_at = self._first_event_at or now
                self._last_event_at = now
                self.events += len(records)
                self.batches += 1
                if self.keep_payloads:
                    self.payloads.append(bytes(body.records))
                self.apply(records)
                if self.on_batch is not None:
                    self.on_batch(records)
                self.changed.notify()
                if self.ack_delay:
                    await trio.sleep(self.ack_delay)
                await stream.send(messages.ServerMessage(ack=messages.Ack(seq=body.seq)))
            elif isinstance(body, messages.AccountsChanged):
                await stream.send(
                    messages.ServerMessage(
                        assignment=messages.Assignment(
                            accounts=[self._assign(info.name) for info in body.accounts]
                        )
                    )
                )
            elif isinstance(body, messages.Heartbeat):
                await stream.send(messages.ServerMessage(heartbeat=body))
            elif isinstance(body, messages.KindStatus):
                for state in body.kinds:
                    if not state.available:
                        self._forget(state.account, state.kind, state.scope)
                self.changed.notify()
            elif isinstance(body, messages.WatchScope):
                kinds = {kind.kind for kind in body.kinds}
                for key in [k for k in self.objects if k[0] == body.account]:
                    namespace = key[3]
                    outside = bool(namespace) and (
                        namespace in body.omit_namespaces
                        or (bool(body.namespaces) and namespace not in body.namespaces)
                    )
                    if key[2] not in kinds or outside:
                        del self.objects[key]
                self.changed.notify()

    def _forget(self, account: str, kind: str, scope: str) -> None:
        """Drop the objects of ``account``'s ``kind`` in ``scope`` ("" every namespace), as
        the server does for an unavailable kind (docs/protocol.md §7.4)."""
        for key in [k for k in self.objects if k[0] == account and k[2] == kind]:
            if not scope or key[3] == scope:
                del self.objects[key]

    def _assign(self, account: str) -> messages.AccountAssignment:
        resume = [
            messages.ResumePoint(
                api_version=key[1], kind=key[2], scope=key[3], resource_version=rv, age_ms=0
            )
            for key, rv in self.resume.items()
            if key[0] == account and rv
        ]
        return messages.AccountAssignment(name=account, role=messages.Role.PRIMARY, resume=resume)


def object_states(receiver: Receiver, account: str) -> dict[tuple[str, str, str, str], Any]:
    """The receiver's objects of ``account`` keyed (apiVersion, kind, namespace, name)."""
    return {key[1:]: value for key, value in receiver.objects.items() if key[0] == account}
