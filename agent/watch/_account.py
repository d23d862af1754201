"""All the reflectors of one account: discover, start one per target, rediscover, stop.

``run_account`` is the role the agent's composition starts per account (and cancels to stop
or restart it). It discovers the kinds, applies the account's filters, starts one reflector
per watch target in its own cancel scope, and every ``discovery_interval`` seconds (±10 %)
discovers again: new targets (a CRD installed) start, vanished ones (a CRD removed) are cancelled.
A failed rediscovery keeps the running reflectors as they are.

What the server may show follows (docs/protocol.md §7.4, §7.5): after each discovery that
changed what the account watches (and after the first), a ScopeNotice goes into the channel,
so the server removes what is outside (a narrower ``namespaces`` or ``kinds`` after a config
reload); a kind that left discovery is reported unavailable (KindNotice, "gone from
discovery") and kept in the scope until it comes back, so reads of it say why. Every
discovery nudges the reflectors of unavailable kinds to try again at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import trio

from budget import EventSender

from .._backoff import SHARED_RANDOM, Backoff
from .._coarse_sleep import coarse_sleep
from .._errors import KubeError, WatchDecodeError
from ..config import AccountConfig
from ..kube import KubeTransport
from ._discovery import (
    DiscoveryCache,
    KindFilter,
    WatchTarget,
    diff_targets,
    discover,
    select_targets,
)
from ._kind_availability import AvailabilityLog, Nudge, target_key
from ._list_caps import ListCaps
from ._notices import GONE_FROM_DISCOVERY, KindNotice, ScopeNotice, notice_entry
from ._reflector import Reflector
from ._reflector_values import ReflectorHooks, ReflectorSettings, ReflectorState
from ._retry import LogLimiter
from ._stall import StallWatchdog
from ._sync_progress import SyncProgress, report_sync_progress

__all__ = ["AccountWatchStatus", "ResumeKey", "run_account"]

log = logging.getLogger("agent.reflector")

#: (api_version, kind, scope): how the server names a resume point.
ResumeKey = tuple[str, str, str]


@dataclass(slots=True)
class AccountWatchStatus:
    """What one account's watches are doing (for /watches, /ready and the Hello's KindInfo)."""

    account: str
    reflectors: dict[WatchTarget, ReflectorState] = field(default_factory=dict)
    discovered: bool = False
    discovery_error: str = ""
    #: group versions legacy discovery could not read: (path, why)
    discovery_failures: tuple[tuple[str, str], ...] = ()
    #: when the watches started (trio's clock) and how far the initial sync is
    started_at: float = 0.0
    progress: SyncProgress | None = None

    @property
    def synced(self) -> bool:
        """Every available kind has finished its initial list."""
        return self.discovered and all(
            state.synced or not state.available for state in self.reflectors.values()
        )


@dataclass(slots=True)
class _Running:
    scope: trio.CancelScope
    reflector: Reflector


async def run_account(
    account: AccountConfig,
    transport: KubeTransport,
    send: EventSender,
    *,
    caps: ListCaps,
    settings: ReflectorSettings | None = None,
    resume: Mapping[ResumeKey, str] | None = None,
    status: AccountWatchStatus | None = None,
    hooks: ReflectorHooks | None = None,
    discovery_interval: float = 120.0,
    budget_capacity: int | None = None,
    log_book: AvailabilityLog | None = None,
    nudge: Nudge | None = None,
    task_status: trio.TaskStatus[AccountWatchStatus] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Watch every selected kind of ``account`` until cancelled.

    ``resume`` maps (api_version, kind, scope) to the resourceVersion to resume from (the
    server's resume points); targets without one list first. ``send`` is cloned per
    reflector and not closed here; ``budget_capacity`` is its ByteBudget's capacity (see
    Reflector). ``task_status.started(status)`` is called once the first
    discovery succeeded and its reflectors started. Discovery failures are retried with
    backoff and reported in ``status.discovery_error``. ``log_book`` and ``nudge`` are the
    account's (they outlive this call: see agent/watch/_kind_availability.py); ``nudge`` also
    wakes the unavailable kinds' retries after every discovery.
    """
    status = status or AccountWatchStatus(account.name)
    status.started_at = trio.current_time()
    kind_filter = KindFilter.from_account(account)
    account_caps = caps.for_account(account.name)
    resume = dict(resume or {})
    running: dict[WatchTarget, _Running] = {}
    backoff = Backoff(base=1.0, max_delay=60.0)
    quiet = LogLimiter()  # one discovery-failure line per 30 s
    log_book = log_book if log_book is not None else AvailabilityLog()
    nudge = nudge or Nudge()
    watched = _Scope(account.name, kind_filter)
    discovered = DiscoveryCache()  # rediscovery: a 304 while nothing changed
    reflector_settings = settings or ReflectorSettings()
    # One timer for every watch of the account: agent/watch/_stall.py says why.
    watchdog = StallWatchdog(reflector_settings.inactivity_seconds / 10)

    async def reflect(reflector: Reflector, own: EventSender, scope: trio.CancelScope) -> None:
        # The task owns its sender clone from its first instant, so it is closed however
        # the task ends (stopped by a rediscovery, the account stopped, the channel broken).
        async with own:
            with scope:
                await reflector.run()

    async with send.clone() as notices, trio.open_nursery() as nursery:
        nursery.start_soon(watchdog.run)
        started = False
        while True:
            try:
                # Under both list caps (tasks.*): the first discovery of every account comes
                # at once when an agent starts.
                async with account_caps.initial_list():
                    result = await discover(transport, discovered)
            except (KubeError, WatchDecodeError) as exc:
                # Any KubeError (credentials, a closed client, the network, a refusal) is
                # retried: one account's trouble must never end the agent.
                status.discovery_error = str(exc)
                delay = backoff.next_delay()
                suppressed = quiet.allow(trio.current_time())
                if suppressed is not None:
                    more = (
                        f" ({suppressed} more failures since the last line)" if suppressed else ""
                    )
                    log.warning(
                        "account %s: discovery failed: %s; retry %d in %.1f s%s",
                        account.name,
                        exc,
                        backoff.attempts,
                        delay,
                        more,
                    )
                await trio.sleep(delay)
                continue
            backoff.reset()
            status.discovery_error = ""
            status.discovery_failures = result.failed
            targets = select_targets(result.kinds, kind_filter)
            diff = diff_targets(running, targets)
            for target in diff.removed:
                running.pop(target).scope.cancel()
                status.reflectors.pop(target, None)
            # Behind the stopped reflectors' last events: what left discovery, then the scope.
            for notice in watched.update(targets, diff.removed, log_book):
                await notices.send(notice_entry(notice))
            for target in diff.added:
                info = target.kind
                own = send.clone()
                reflector = Reflector(
                    account=account.name,
                    target=target,
                    transport=transport,
                    send=own,
                    caps=account_caps,
                    settings=settings,
                    resume_from=resume.pop((info.api_version, info.kind, target.scope), None),
                    hooks=hooks,
                    budget_capacity=budget_capacity,
                    log_book=log_book,
                    nudge=nudge,
                    watchdog=watchdog,
                )
                scope = trio.CancelScope()
                running[target] = _Running(scope, reflector)
                status.reflectors[target] = reflector.state
                nursery.start_soon(reflect, reflector, own, scope)
            status.discovered = True
            nudge.nudge()  # a kind refused before may be readable now: try it at once
            if not started:
                started = True
                nursery.start_soon(report_sync_progress, status)
                task_status.started(status)
            # Spread ±10 %: accounts started together (1,000 at an agent's start) would
            # otherwise rediscover together, every interval, for ever.
            await coarse_sleep(discovery_interval * SHARED_RANDOM.uniform(0.9, 1.1))


class _Scope:
    """What one account watches, as the server is told it (ScopeNotice), and the kinds that
    left discovery (reported unavailable, kept in the scope until they come back)."""

    def __init__(self, account: str, kind_filter: KindFilter) -> None:
        self._account = account
        self._filter = kind_filter
        self._gone: dict[tuple[str, str], tuple[str, str]] = {}  # (group, kind) -> (v, kind)
        self._sent: ScopeNotice | None = None

    def update(
        self,
        targets: list[WatchTarget],
        removed: tuple[WatchTarget, ...],
        log_book: AvailabilityLog,
    ) -> list[KindNotice | ScopeNotice]:
        """The notices for a discovery that selected ``targets`` and stopped ``removed``."""
        notices: list[KindNotice | ScopeNotice] = []
        served = {(t.kind.group, t.kind.kind) for t in targets}
        for key in served:
            self._gone.pop(key, None)  # back: its reflector reports it available when listed
        for target in removed:
            info = target.kind
            if (info.group, info.kind) in served:
                continue  # another version of it is watched now: not gone
            self._gone[(info.group, info.kind)] = (info.api_version, info.kind)
            if log_book.unavailable(target_key(target), 0):
                log.info(
                    "account %s: %s is %s: no longer watched",
                    self._account,
                    target.describe(),
                    GONE_FROM_DISCOVERY,
                )
            notices.append(
                KindNotice(
                    self._account,
                    info.api_version,
                    info.kind,
                    target.scope,
                    False,
                    0,
                    GONE_FROM_DISCOVERY,
                )
            )
        kinds = {(t.kind.api_version, t.kind.kind) for t in targets} | set(self._gone.values())
        scope = ScopeNotice(
            self._account,
            tuple(sorted(kinds)),
            self._filter.namespaces,
            tuple(sorted(self._filter.omit_namespaces)),
        )
        if scope != self._sent:
            self._sent = scope
            notices.append(scope)
        return notices
