"""One reflector: a kind of one account (cluster-wide or in one namespace) into the budget.

Theory of operation (DESIGN section 3):

1. With no resourceVersion to resume from, list: SYNC_BEGIN, every object page by page,
   SYNC_END carrying the list's resourceVersion, all under both initial-list caps. Or, when
   enabled and the server supports it, the streaming list (a watch with
   ``sendInitialEvents=true``) whose initial events are bracketed the same way and end at the
   bookmark annotated ``k8s.io/initial-events-end``.
2. Watch from the resourceVersion (bookmarks on, ``timeoutSeconds`` spread at random so
   watches do not end together). Every event and bookmark advances the resume point once its
   group of events is in the channel. One network read becomes one ``send_many``.
3. The watch ends: a timeout or a disconnect resumes from the last version (no list); 410 or
   an ERROR event with 410 forgets the version and lists again; 429/5xx and network errors
   back off with jitter (honouring Retry-After); 401/403/404/406 mark the kind unavailable
   (state, hook, a KindNotice to the server and one WARNING: agent/watch/_kind_availability.py)
   and retry it from ~10 s up to ~2 min, at once when the account nudges. Every other
   KubeError (a credential source failed, the client was closed under us by a config
   reload) is recorded in ``state.last_error`` and retried with backoff too. Nothing here
   ends the reflector but cancellation or a closed channel. How long to wait, and when the
   backoff starts over (a watch that delivered or lived past the cap, a completed list), is
   ``RetryPolicy``'s decision (``agent.watch._retry``); every retry is counted by reason in
   ``state.retries`` and logged, at most one line per ``retry_log_interval`` (an
   unavailable kind's retries are not: it was said once).
4. Inactivity (no read yields an event for ``inactivity_seconds``, backpressure not
   counted) ends a watch whose connection went silent; the watch then resumes. The
   account's ``StallWatchdog`` (agent/watch/_stall.py) sees it: one timer for all its watches.

The reflector keeps no objects: its memory is one read chunk, one line and one list page.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final, NoReturn

import trio

from budget import Entry, EntryKind, EventSender
from wire import EventRecord, EventType

from .._backoff import SHARED_RANDOM, Backoff
from .._errors import (
    KubeError,
    KubeForbiddenError,
    KubeGoneError,
    KubeNotFoundError,
    KubeStatusError,
    KubeUnauthorizedError,
    WatchDecodeError,
)
from .._pacing import busy
from ..kube import KubeTransport
from ._discovery import WatchTarget
from ._kind_availability import AvailabilityLog, KindAvailability, Nudge
from ._lines import ListPage, WatchDecoder, WatchEvent
from ._list_caps import AccountListCaps
from ._listing import (
    check_status,
    list_pages,
    status_from_event,
)
from ._reflector_values import (
    BookmarkKey,
    NoHooks,
    ReflectorHooks,
    ReflectorSettings,
    ReflectorState,
)
from ._resourceversion import ResourceVersionTracker
from ._retry import (
    LogLimiter,
    Retry,
    RetryPolicy,
    RetryReason,
    error_reason,
    resource_version_too_large,
    status_reason,
)
from ._scrub import Scrubber
from ._stall import StallWatchdog, Ticket

__all__ = ["Reflector"]

log = logging.getLogger("agent.reflector")

#: Accept headers that make the API server send Secrets as metadata only.
SECRET_LIST_ACCEPT: Final = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
SECRET_WATCH_ACCEPT: Final = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"

#: Bytes charged per record on top of its object and names (framing, the Entry itself).
RECORD_OVERHEAD: Final = 64

_ENTRY_KINDS: Final = {
    "ADDED": (EventType.ADDED, EntryKind.UPSERT_ADDED),
    "MODIFIED": (EventType.MODIFIED, EntryKind.UPSERT_MODIFIED),
    "DELETED": (EventType.DELETED, EntryKind.DELETED),
}
_UNAVAILABLE: Final = (KubeForbiddenError, KubeNotFoundError, KubeUnauthorizedError)
_STREAMING_REFUSED: Final = frozenset({400, 422})


class _StreamingUnsupported(Exception):
    """The server ignored sendInitialEvents (no initial-events-end bookmark came)."""


@dataclass(slots=True)
class _Initial:
    """A streaming list in progress: the caps it holds until its initial events end."""

    caps: AccountListCaps
    holder: object = field(default_factory=object)
    done: bool = False


class Reflector:
    """Streams one watch target of one account into the budget channel.

    ``resume_from`` is where the caller wants to start: None lists first; a resourceVersion
    (for example the resume point the server returned) watches from it, and a 410 on it
    lists. ``send`` is the reflector's own clone of the channel's sender; the reflector never
    closes it. ``budget_capacity`` is the capacity of the channel's ByteBudget (a group of
    entries larger than it is sent in chunks; unknown, every group of several entries is
    sent the awaited way). ``log_book`` and ``nudge`` are the account's (what was logged of its
    kinds' availability; the wake-up of unavailable kinds' retries:
    agent/watch/_kind_availability.py).
    ``run`` returns only by cancellation or when the channel is closed (then
    trio.BrokenResourceError / ClosedResourceError / budget.BudgetClosed propagate).
    """

    def __init__(
        self,
        *,
        account: str,
        target: WatchTarget,
        transport: KubeTransport,
        send: EventSender,
        caps: AccountListCaps,
        settings: ReflectorSettings | None = None,
        resume_from: str | None = None,
        hooks: ReflectorHooks | None = None,
        budget_capacity: int | None = None,
        log_book: AvailabilityLog | None = None,
        nudge: Nudge | None = None,
        watchdog: StallWatchdog | None = None,
    ) -> None:
        self.account = account
        self._watchdog = watchdog
        self.target = target
        self.state = ReflectorState(target)
        self._transport = transport
        self._send = send
        self._caps = caps
        self._settings = settings or ReflectorSettings()
        self._tracker = ResourceVersionTracker(resume_from)
        self._hooks: ReflectorHooks = hooks or NoHooks()
        self._scrubber = Scrubber(strip_managed_fields=self._settings.strip_managed_fields)
        self._streaming = self._settings.streaming_list
        info = target.kind
        self._api_version = info.api_version
        self._kind = info.kind
        self._path = target.path
        self._is_secret = info.group == "" and info.kind == "Secret"
        secret = self._is_secret
        self._list_headers = {"Accept": SECRET_LIST_ACCEPT if secret else "application/json"}
        self._watch_headers = {"Accept": SECRET_WATCH_ACCEPT if secret else "application/json"}
        self._fixed_size = RECORD_OVERHEAD + len(account) + len(info.api_version) + len(info.kind)
        self._bookmark_key = BookmarkKey(account, info.api_version, info.kind, target.scope)
        self._random = SHARED_RANDOM  # one for all: a Random per watch is ~2.5 KB
        # What the channel admits as one group (see _admissible_at_once). Without the
        # budget's capacity, several entries always take the awaited (splitting) path.
        self._budget_capacity = budget_capacity or 0
        self._max_group_entries = send.statistics().max_pending_entries
        settings = self._settings
        self._retry = RetryPolicy(
            Backoff(
                base=settings.backoff_base,
                multiplier=1.6,
                jitter=settings.backoff_jitter,
                max_delay=settings.backoff_max,
            ),
            unavailable=Backoff(
                base=settings.unavailable_retry_seconds,
                multiplier=2.0,
                jitter=settings.backoff_jitter,
                max_delay=max(settings.unavailable_retry_max, settings.unavailable_retry_seconds),
            ),
        )
        self._nudge = nudge or Nudge()
        self._log_limiter = LogLimiter(settings.retry_log_interval)
        self._retrying = False  # a retry was logged (or held back) and no recovery since
        group = f".{info.group}" if info.group else ""
        where = f" in namespace {target.namespace}" if target.namespace else ""
        self._name = f"{info.kind}{group}{where}"
        self._availability = KindAvailability(
            account=account,
            target=target,
            name=self._name,
            state=self.state,
            hooks=self._hooks,
            send=send,
            log_book=log_book,
        )

    @property
    def resource_version(self) -> str | None:
        """The version a watch would resume from now (None: the next step is a list)."""
        return self._tracker.current

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """List/watch forever. See the module docstring for what happens on each failure."""
        if self._watchdog is None:  # alone (tests): a watchdog of its own
            self._watchdog = StallWatchdog(self._settings.inactivity_seconds / 10)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watchdog.run)
                await self.run(task_status=task_status)
        task_status.started()
        while True:
            retry = await self._attempt()
            if retry is not None:
                await self._wait(*retry)

    async def _attempt(self) -> tuple[Retry, str] | None:
        """One list and/or watch; what to do next (None: go on at once), and why."""
        policy = self._retry
        if self._tracker.needs_list:
            busy()  # a list (streaming or paged): its round trips are not paced
        try:
            if self._tracker.needs_list and self._streaming:
                stalled = await self._watch(streaming=True)
            else:
                if self._tracker.needs_list:
                    await self._list()
                stalled = await self._watch(streaming=False)
            now = trio.current_time()
            if stalled:
                return policy.stalled(now), self.state.last_error
            retry = policy.watch_ended(now)
            return None if retry is None else (retry, "the watch ended at once, empty")
        except KubeGoneError as exc:
            self._tracker.expired()
            self.state.relists += 1
            return self._failed(policy.gone(trio.current_time()), exc)
        except _UNAVAILABLE as exc:
            return await self._unavailable(exc)
        except KubeStatusError as exc:
            now = trio.current_time()
            if exc.code == 406:
                return await self._unavailable(exc)
            if resource_version_too_large(exc):
                # Our version is from the future of this API server (restored from a
                # backup, or a fresh simulator): waiting will not help, list again as
                # client-go does.
                self._tracker.expired()
                self.state.relists += 1
                return self._failed(policy.failed(RetryReason.FUTURE_VERSION, now), exc)
            if self._streaming and exc.code in _STREAMING_REFUSED:
                self._streaming = False  # the server refused the streaming-list params
                log.info(
                    "account %s: %s: the API server refused the streaming list (%s); "
                    "listing and watching instead",
                    self.account,
                    self._name,
                    exc,
                )
                return None
            retry = policy.failed(status_reason(exc), now, at_least=exc.retry_after or 0.0)
            return self._failed(retry, exc)
        except _StreamingUnsupported:
            self._streaming = False
            return None
        except (KubeError, WatchDecodeError) as exc:
            # The network, a credential source (exec plugin, token file) or a client
            # closed under us (a config reload restarts the account with a new one):
            # none of these may end the reflector, let alone the agent. A closed client
            # fails at once without a request, so retrying it costs nothing and the kind
            # still shows why it is stuck if no restart cancels us.
            return self._failed(policy.failed(error_reason(exc), trio.current_time()), exc)

    async def _unavailable(self, exc: KubeStatusError) -> tuple[Retry, str]:
        """The kind is unavailable: report it, forget the version (the server removes the
        kind's objects, so it must be listed when back), and wait on the slow backoff."""
        settings = self._settings
        await self._availability.unavailable(
            exc,
            retry_from=settings.unavailable_retry_seconds,
            retry_to=settings.unavailable_retry_max,
        )
        self._tracker.expired()
        return self._failed(self._retry.unavailable(trio.current_time()), exc)

    def _failed(self, retry: Retry, exc: Exception) -> tuple[Retry, str]:
        if retry.reason is not RetryReason.GONE:
            self.state.last_error = str(exc)
            self.state.failing = True
        return retry, str(exc)

    async def _wait(self, retry: Retry, why: str) -> None:
        """Count ``retry``, log it (rate-limited), and sleep its delay."""
        state = self.state
        state.retries[retry.reason] = state.retries.get(retry.reason, 0) + 1
        state.last_retry = retry
        unavailable = retry.reason is RetryReason.UNAVAILABLE
        if unavailable:
            # Said once when it became unavailable (KindAvailability), not at every retry.
            log.debug("account %s: %s: retry %d in %.1f s", self.account, self._name,
                      retry.attempt, retry.delay)  # fmt: skip
        else:
            self._retrying = True
            self._log_retry(retry, why)
        if retry.delay <= 0:
            return
        state.backoff_seconds = retry.delay
        try:
            if unavailable:
                await self._nudge.sleep(retry.delay)  # a rediscovery or reload: try now
            else:
                await trio.sleep(retry.delay)
        finally:
            state.backoff_seconds = 0.0

    def _log_retry(self, retry: Retry, why: str) -> None:
        suppressed = self._log_limiter.allow(trio.current_time())
        if suppressed is None:
            return
        more = f" ({suppressed} more retries since the last line)" if suppressed else ""
        level = logging.INFO if retry.reason is RetryReason.GONE else logging.WARNING
        log.log(
            level,
            "account %s: %s: %s: %s; retry %d in %.1f s%s",
            self.account,
            self._name,
            retry.reason,
            why,
            retry.attempt,
            retry.delay,
            more,
        )

    def _recovered(self) -> None:
        """A list completed or the watch delivered after retries: one INFO line saying so,
        with the retries the rate limit held back, so an operator reading the log sees the
        outage end (the last line would otherwise be a retry)."""
        if not self._retrying:
            return
        self._retrying = False
        held = self._log_limiter.flush()
        log.info(
            "account %s: %s: watching again%s",
            self.account,
            self._name,
            f" ({held} retries since the last line)" if held else "",
        )

    # --- list ---------------------------------------------------------------------------

    async def _list(self) -> None:
        """One full list between sync markers, under both initial-list caps."""
        async with self._caps.initial_list():
            self.state.lists += 1
            self._hooks.request(self.account, "list", self.target)
            await self._send.send(self._marker(EventType.SYNC_BEGIN, ""))
            resource_version = await list_pages(
                self._transport,
                self._path,
                api_version=self._api_version,
                kind=self._kind,
                on_page=self._send_page,
                headers=self._list_headers,
                limit=self._settings.page_limit,
                max_page_bytes=self._settings.max_page_bytes,
                strip_managed_fields=self._settings.strip_managed_fields,
                # A stalled page would hold the initial-list caps (and /ready) for ever.
                page_deadline=self._settings.inactivity_seconds,
            )
            await self._send.send(self._marker(EventType.SYNC_END, resource_version))
        self._tracker.listed(resource_version)
        await self._synced(resource_version)
        self._retry.listed()
        self._recovered()

    async def _send_page(self, page: ListPage) -> None:
        entries = self._entries(page.items, None)
        self.state.listed += len(entries)  # a list page holds objects only
        if entries:
            await self._send.send_many(entries)

    # --- watch --------------------------------------------------------------------------

    async def _watch(self, *, streaming: bool) -> bool:
        """One watch request, until it ends; raises on the failures ``run`` sorts out.

        Returns True when the inactivity deadline dropped it (the connection went silent).
        """
        low, high = self._settings.watch_timeout_seconds
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._random.randint(low, high)),
        }
        initial: _Initial | None = None
        if streaming:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"
            initial = _Initial(self._caps)
            await initial.caps.acquire(initial.holder)
        else:
            params["resourceVersion"] = self._tracker.current or ""
        try:
            stalled = await self._watch_request(params, initial)
        finally:
            if initial is not None and not initial.done:
                initial.caps.release(initial.holder)
        if initial is not None and not initial.done:
            # The watch ended before the initial events did: the server does not support
            # the streaming list (or cut it); list the plain way from now on.
            raise _StreamingUnsupported
        return stalled

    async def _watch_request(self, params: dict[str, str], initial: _Initial | None) -> bool:
        inactivity = self._settings.inactivity_seconds
        decoder = WatchDecoder(
            max_line_bytes=self._settings.max_line_bytes,
            strip_managed_fields=self._settings.strip_managed_fields,
        )
        self.state.watches += 1
        self._hooks.request(self.account, "watch", self.target)
        assert self._watchdog is not None
        with trio.CancelScope() as scope, self._watchdog.watching(scope, inactivity) as idle:
            async with self._transport.stream(
                "GET", self._path, params=params, headers=self._watch_headers
            ) as response:
                await check_status(response, method="WATCH", path=self._path)
                self._retry.watch_opened(trio.current_time())
                self.state.failing = False
                if initial is None and not self.state.synced:
                    # Resumed from a stored resourceVersion (no list this time): the server
                    # accepted it, so the receiver holds this kind up to it and the watch
                    # brings the rest; otherwise /ready would wait for ever after a resume.
                    await self._synced(self._tracker.current or "", idle)
                    if self._tracker.current:
                        # Accepted: the server stores it again as of now. Else sessions
                        # shorter than the bookmark interval (a starved server) age every
                        # point past maxResumableResourceAgeMs and all accounts relist.
                        with idle.pause():
                            await self._send.send(self._bookmark(self._tracker.current))
                if initial is not None:
                    self.state.streaming = True
                    await self._send.send(self._marker(EventType.SYNC_BEGIN, ""))
                while chunk := await response.receive_some():
                    events = decoder.feed(chunk)
                    if not events:
                        continue
                    await self._deliver(events, initial, idle)
                    idle.touch()
                decoder.end_of_stream()
        if scope.cancelled_caught:
            self.state.stalls += 1
            self.state.last_error = f"no event for {inactivity} s: watch dropped and resumed"
            self.state.failing = True
            return True
        return False

    async def _deliver(
        self, events: Sequence[WatchEvent], initial: _Initial | None, idle: Ticket
    ) -> None:
        """Send one read's events as one group, then advance the resume point."""
        in_initial = initial is not None and not initial.done
        entries = self._entries(events, initial)
        if entries:
            if self._admissible_at_once(entries):
                try:
                    self._send.send_many_nowait(entries)  # the common case: room in the budget
                    waited = False
                except trio.WouldBlock:
                    waited = True
            else:
                waited = True  # send_many splits a group the channel could never take whole
            if waited:
                with idle.pause():  # backpressure is not inactivity
                    await self._send.send_many(entries)
        failure: WatchEvent | None = None
        # Only events past a streaming list's initial phase show a working watch: a list
        # a proxy cuts before it completes would otherwise retry at the smallest delay
        # forever. A completed list starts the backoff over itself (listed()).
        watched = False
        for event in events:
            if event.type == "ERROR":
                failure = event
                break
            if in_initial:
                if event.initial_events_end and initial is not None:
                    in_initial = False
                    initial.done = True
                    initial.caps.release(initial.holder)
                    self._tracker.listed(event.resource_version)
                    await self._synced(event.resource_version, idle)
                    self._retry.listed()
                    self._recovered()
            else:
                watched = True
                self._tracker.observed(event.resource_version)
        self.state.resource_version = self._tracker.current or ""
        if watched:
            self._retry.delivered()  # the watch works: its next failure starts the backoff over
            self._recovered()
        if failure is not None and failure.status is not None:
            status = failure.status
            raise status_from_event(status.code, status.reason, status.message, path=self._path)

    def _admissible_at_once(self, entries: Sequence[Entry]) -> bool:
        """Whether the channel could take ``entries`` as one group (send_many_nowait's rule).

        Decided here, from the sizes, rather than by catching send_many_nowait's ValueError:
        a ValueError from a real accounting bug must surface, not re-send the group.
        """
        if len(entries) == 1:
            return True
        if len(entries) > self._max_group_entries:
            return False
        return sum(entry.size for entry in entries) <= self._budget_capacity

    # --- records ------------------------------------------------------------------------

    def _entries(self, events: Sequence[WatchEvent], initial: _Initial | None) -> list[Entry]:
        """The channel entries for a group of events (stops at an ERROR event)."""
        entries: list[Entry] = []
        account, api_version, kind = self.account, self._api_version, self._kind
        omit = self.target.omit_namespaces
        # Every record names its watch's scope: the server keeps one resume point per
        # (kind, scope), and an object event advances its own watch's point.
        scope = self.target.scope
        fixed = self._fixed_size + len(scope)
        in_initial = initial is not None and not initial.done
        initial_objects = 0
        objects = 0
        for event in events:
            kinds = _ENTRY_KINDS.get(event.type)
            if kinds is not None:
                if omit and event.namespace in omit:
                    continue
                objects += 1
                initial_objects += in_initial
                # Ordinary objects were stripped by the decoder (it had the metadata at hand).
                data = self._scrubber.secret(event.object) if self._is_secret else event.object
                record = EventRecord(
                    kinds[0],
                    account,
                    api_version,
                    kind,
                    event.namespace,
                    event.name,
                    event.uid,
                    event.resource_version,
                    data,
                    scope,
                )
                size = fixed + len(data) + len(event.name) + len(event.namespace)
                key = (account, api_version, kind, event.namespace, event.name)
                entries.append(Entry(key, kinds[1], size, record))
            elif event.type == "BOOKMARK":
                if in_initial and event.initial_events_end:
                    in_initial = False
                    entries.append(self._marker(EventType.SYNC_END, event.resource_version))
                elif not in_initial:
                    entries.append(self._bookmark(event.resource_version))
            elif event.type == "ERROR":
                break
            # Unknown event types are skipped: the API may grow new ones.
        if objects:
            busy()  # a change is flowing: the agent is not idle (agent/_pacing.py)
        self.state.events += len(entries)
        self.state.listed += initial_objects
        return entries

    def _marker(self, event_type: EventType, resource_version: str) -> Entry:
        record = self._objectless(event_type, resource_version)
        return Entry(None, EntryKind.BARRIER, self._fixed_size + len(record.scope), record)

    def _bookmark(self, resource_version: str) -> Entry:
        record = self._objectless(EventType.BOOKMARK, resource_version)
        size = self._fixed_size + len(record.scope)
        return Entry(self._bookmark_key, EntryKind.BOOKMARK, size, record)

    def _objectless(self, event_type: EventType, resource_version: str) -> EventRecord:
        """A record of this watch that carries no object (a sync marker or a bookmark)."""
        return EventRecord(
            event_type,
            self.account,
            self._api_version,
            self._kind,
            "",
            "",
            "",
            resource_version,
            b"",
            self.target.scope,
        )

    # --- state --------------------------------------------------------------------------

    async def _synced(self, resource_version: str, idle: Ticket | None = None) -> None:
        self.state.synced = True
        self.state.failing = False
        self.state.resource_version = resource_version
        self.state.on_synced()
        if self._availability.settled:
            return
        # Waiting for room in the budget is not inactivity (as in _deliver).
        with idle.pause() if idle is not None else contextlib.nullcontext():
            await self._availability.available()
