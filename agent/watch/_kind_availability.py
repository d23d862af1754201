"""A reflector's kind becomes unavailable, or available again: what it records, logs and
tells the server (docs/protocol.md §7.4).

Theory of operation. The API server refuses a kind (401/403), stops serving it (404/406), or
discovery drops it: the watch cannot go on, and the server must stop showing the kind's
objects. :class:`KindAvailability` (one per reflector) then marks the reflector's state,
puts a KindNotice into the budget channel behind the kind's events (agent/watch/_notices.py)
and logs. Logging is per account, not per reflector: :class:`AvailabilityLog` remembers what
was last said of each (group, kind, scope), and outlives sessions (the account keeps it), so
an operator reads one WARNING when a kind becomes forbidden (naming the account, the kind
and the API server's reason; INFO when it is not served: a CRD deleted), one INFO when it is
back, and nothing for each retry or each
reconnect in between. The server is told afresh by every reflector (a new session's server
may not have heard), and again whenever the code changes.

The retry waits (growing from ~10 s to ~2 min, ``RetryPolicy.unavailable``) are cut short by
the account's :class:`Nudge`: after every rediscovery and on a config reload, so a kind whose
RBAC came back is watched again at once rather than at its next retry.
"""

from __future__ import annotations

import logging

import trio

from budget import EventSender

from .._errors import KubeStatusError
from ._discovery import WatchTarget
from ._notices import KindNotice, notice_entry
from ._reflector_values import ReflectorHooks, ReflectorState

__all__ = ["AvailabilityLog", "KindAvailability", "Nudge", "target_key"]

log = logging.getLogger("agent.reflector")

#: (API group, kind, scope): what availability is remembered by (not the version, which a
#: rediscovery may change).
TargetKey = tuple[str, str, str]


def target_key(target: WatchTarget) -> TargetKey:
    return (target.kind.group, target.kind.kind, target.scope)


class Nudge:
    """Wakes every wait of one account's unavailable kinds at once (``nudge``)."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def nudge(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def sleep(self, seconds: float) -> bool:
        """Sleep ``seconds``, or until the next nudge; True when nudged."""
        with trio.move_on_after(seconds):
            await self._event.wait()
            return True
        return False


class AvailabilityLog:
    """What was last logged of each kind of one account (see the module docstring).

    By the API server's code (0: gone from discovery), not its message: the message names
    the verb refused ("cannot watch", then "cannot list" on the retry), which is no news."""

    def __init__(self) -> None:
        self._unavailable: dict[TargetKey, int] = {}

    def unavailable(self, key: TargetKey, code: int) -> bool:
        """Note ``key`` unavailable with ``code``; whether that is news (to be logged)."""
        news = self._unavailable.get(key) != code
        self._unavailable[key] = code
        return news

    def available(self, key: TargetKey) -> bool:
        """Note ``key`` available; whether it was unavailable (its return to be logged)."""
        return self._unavailable.pop(key, None) is not None

    def code(self, key: TargetKey) -> int | None:
        """The code ``key`` was last said unavailable with (None: it was not)."""
        return self._unavailable.get(key)


class KindAvailability:
    """One reflector's availability: its state, its notices to the server, its log lines.

    ``state`` is the reflector's ReflectorState (``available``, ``reason``, ``last_error``);
    ``hooks`` its ReflectorHooks (metrics). Both notices wait for room in the budget like
    events do; the caller makes that wait exempt from its inactivity deadline.
    """

    def __init__(
        self,
        *,
        account: str,
        target: WatchTarget,
        name: str,
        state: ReflectorState,
        hooks: ReflectorHooks,
        send: EventSender,
        log_book: AvailabilityLog | None = None,
    ) -> None:
        self._account = account
        self._target = target
        self._name = name
        self._state = state
        self._hooks = hooks
        self._send = send
        self._log = log_book if log_book is not None else AvailabilityLog()
        self._key = target_key(target)
        # The code this reflector last told the server the kind is unavailable with (None:
        # it told nothing, or that it is available).
        self._told: int | None = None

    @property
    def settled(self) -> bool:
        """Available, and known so: a sync has nothing to report (the common case, cheap)."""
        return self._state.available and self._log.code(self._key) is None

    async def unavailable(
        self, exc: KubeStatusError, *, retry_from: float, retry_to: float
    ) -> None:
        """The API server answered ``exc`` (401/403/404/406) for the kind."""
        state = self._state
        reason = f"{exc.code} {exc.reason}: {exc.message}".strip()
        state.last_error = reason
        changed = state.available or state.reason != reason
        if changed:
            state.available = False
            state.reason = reason
            state.unavailable_code = exc.code
            self._hooks.kind_unavailable(self._account, self._target, reason)
        if self._log.unavailable(self._key, exc.code):
            # Refused (RBAC) is the operator's to fix; not served (a CRD deleted) is news.
            level = logging.WARNING if exc.code in (401, 403) else logging.INFO
            log.log(
                level,
                "account %s: %s is unavailable to the agent: %s; the server stops showing "
                "its objects; retrying from %g s up to %g s",
                self._account,
                self._name,
                reason,
                retry_from,
                retry_to,
            )
        if self._told != exc.code:  # its message alone (the verb refused) is no news
            self._told = exc.code
            await self._notify(False, exc.code, reason)

    async def available(self) -> None:
        """The kind was listed (or its watch resumed): available, if it was not."""
        state = self._state
        was_unavailable = not state.available
        if was_unavailable:
            state.available = True
            state.reason = ""
            state.unavailable_code = 0
            self._hooks.kind_available(self._account, self._target)
        if self._log.available(self._key):
            log.info("account %s: %s is available again: watching it", self._account, self._name)
            was_unavailable = True
        if was_unavailable:
            self._told = None
            await self._notify(True, 0, "")

    async def _notify(self, available: bool, code: int, reason: str) -> None:
        info = self._target.kind
        notice = KindNotice(
            self._account,
            info.api_version,
            info.kind,
            self._target.scope,
            available,
            code,
            reason,
        )
        await self._send.send(notice_entry(notice))
