"""Notifications between replicas: the part both backends share, and SQLite's in-process hub.

Theory of operation. A notification is a wake-up carrying only an id (PostgreSQL's
``pg_notify`` refuses payloads of 8000 bytes or more, and a notification is not durable): the
tables hold the truth, and every receiver also polls them, so a notification missed (a
listener reconnecting, a full channel) costs latency, never correctness. A listener hands
what it receives to a trio task through a bounded memory channel given by that task; when the
channel is full the notification is dropped and counted (the receiver's poll finds what it
announced). After each (re)start of listening a resync marker (``Notification("")``) tells the
receiver to poll now.

On SQLite one process owns the file, so notifications never leave it: ``LocalHub`` delivers
them to the listeners of this store object, after the transaction that sent them committed.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Iterable, Sequence

import trio

from ._records import Notification

log = logging.getLogger("server.store")

#: pg_notify's limit is 8000 bytes, the channel name included in some versions: stay under.
MAX_PAYLOAD_BYTES = 7000
#: PostgreSQL truncates identifiers (a channel is one) to 63 bytes.
MAX_CHANNEL_BYTES = 63

Notice = tuple[str, str]  # (channel, payload): a notification to send


def channel_for(topic: str, name: str) -> str:
    """The channel of ``topic`` for ``name`` (e.g. a replica id): ``kubesvc_<topic>_<name>``,
    or, when that is longer than PostgreSQL allows, the name replaced by a hash of it (so two
    long names never share a channel by truncation)."""
    channel = f"kubesvc_{topic}_{name}"
    if len(channel.encode()) <= MAX_CHANNEL_BYTES:
        return channel
    digest = hashlib.sha256(name.encode()).hexdigest()[:24]
    return f"kubesvc_{topic}_{digest}"


def check_notices(notices: Iterable[Notice]) -> None:
    """Raises ValueError for a channel or a payload PostgreSQL would refuse (on either
    backend, so that SQLite tests catch what PostgreSQL would)."""
    for channel, payload in notices:
        if not channel or len(channel.encode()) > MAX_CHANNEL_BYTES:
            raise ValueError(f"notification channel {channel[:80]!r}: 1..63 bytes expected")
        if len(payload.encode()) > MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"notification payload on {channel}: {len(payload.encode())} bytes, "
                f"at most {MAX_PAYLOAD_BYTES} (send an id, not the data)"
            )


class Deliverer:
    """Puts notifications into one listener's channel without waiting: dropped (and counted)
    when it is full or closed. Used from trio only (PostgreSQL's thread calls in)."""

    def __init__(self, send: trio.MemorySendChannel[Notification]) -> None:
        self._send = send
        self.dropped = 0

    def deliver(self, notifications: Sequence[Notification]) -> None:
        for notification in notifications:
            try:
                self._send.send_nowait(notification)
            except trio.WouldBlock:
                self.dropped += 1
                if self.dropped in (1, 10) or self.dropped % 1000 == 0:
                    log.warning(
                        "notification listener full: %d notifications dropped so far (the "
                        "receiver's poll covers them)",
                        self.dropped,
                    )
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                return  # the receiver is gone: nobody to wake


class LocalHub:
    """Notifications within one process (SQLite's store)."""

    def __init__(self) -> None:
        self._listeners: dict[str, list[Deliverer]] = {}

    def notify(self, notices: Sequence[Notice]) -> None:
        for channel, payload in notices:
            for deliverer in list(self._listeners.get(channel, ())):
                deliverer.deliver([Notification(channel, payload)])

    async def listen(
        self,
        channels: Sequence[str],
        send: trio.MemorySendChannel[Notification],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        deliverer = Deliverer(send)
        names = list(dict.fromkeys(channels))
        for channel in names:
            self._listeners.setdefault(channel, []).append(deliverer)
        try:
            deliverer.deliver([Notification("")])
            task_status.started()
            await trio.sleep(math.inf)
        finally:
            for channel in names:
                listeners = self._listeners.get(channel, [])
                if deliverer in listeners:
                    listeners.remove(deliverer)
                if not listeners:
                    self._listeners.pop(channel, None)
