"""When a reflector retries, how long it waits first, and when its backoff starts over.

Theory of operation. A reflector reports what happened to :class:`RetryPolicy` (a list or a
streaming list completed, a watch was accepted, a watch delivered events or bookmarks, a
watch ended or failed) and asks it what to do next: resume at once (None) or a
:class:`Retry` naming the reason, the delay and the attempt. The policy is plain
synchronous code: times are passed in, nothing sleeps, so it is tested with no event loop.

The backoff starts from its smallest delay again, as client-go's backoff manager lets it,
after each of these (so one bad hour does not make every later blip wait minutes):

* a watch that delivered anything (an event or a bookmark) or stayed open longer than the
  backoff cap, however it ended;
* a completed list (paged, or the streaming list's initial events);
* a 410: the API server answered, so the relist that follows (and its retries, should the
  list fail) starts from the smallest delay.

An unavailable kind (401/403/404/406) waits on a backoff of its own (``unavailable``,
from ~10 s to ~2 min by default): RBAC or a CRD comes back on a human's time, not the
network's, and its retries must not spend the network backoff. A completed list or a
delivering watch starts it over.

A 410 is answered by a relist at once. A relist whose watch meets 410 again before it
delivered anything (a loop a list cannot fix) backs off on its own counter, which only a
watch that delivered resets: a list cannot reset it, or the loop would list once a second.

:class:`LogLimiter` keeps the retry log to one line per reflector per interval; the line
says how many retries it did not log since the last one.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from .._backoff import Backoff
from .._errors import (
    KubeClosedError,
    KubeCredentialError,
    KubeError,
    KubeServerError,
    KubeStatusError,
    KubeTooManyRequestsError,
    WatchDecodeError,
)

__all__ = [
    "LogLimiter",
    "Retry",
    "RetryPolicy",
    "RetryReason",
    "error_reason",
    "resource_version_too_large",
    "status_reason",
]


class RetryReason(enum.StrEnum):
    """Why a reflector retries (the ``reason`` label of ``kubesvc_watch_retries_total``)."""

    NETWORK = "network"  # refused, reset, cut, TLS failure, timeout
    THROTTLED = "throttled"  # 429
    SERVER_ERROR = "server_error"  # 5xx
    STATUS = "status"  # another HTTP error status
    GONE = "gone"  # 410: the resourceVersion expired, relist
    FUTURE_VERSION = "future_version"  # 504 Too large resource version: relist
    UNAVAILABLE = "unavailable"  # 401/403/404/406: the kind is retried slowly
    CREDENTIALS = "credentials"  # an exec plugin or token file failed
    CLIENT_CLOSED = "client_closed"  # the client was closed under the reflector
    DECODE = "decode"  # a watch line or list page that is not what the API promises
    STALLED = "stalled"  # nothing arrived within the inactivity deadline
    SHORT_WATCH = "short_watch"  # the watch ended cleanly at once, with nothing delivered


@dataclass(frozen=True, slots=True)
class Retry:
    """One retry: ``delay`` seconds to wait first; ``attempt`` counts the failures since the
    backoff last started over (1 = the first, which waits the smallest delay)."""

    reason: RetryReason
    delay: float
    attempt: int


class RetryPolicy:
    """The retry decisions of one reflector (see the module docstring).

    ``backoff`` gives the delays of failures; ``reset_after`` is how long a watch must stay
    open to count as healthy without delivering (default: the backoff's cap);
    ``min_watch`` is how short a clean, empty watch must be to count as a failure (so a
    server that ends every watch at once is not hammered).
    """

    __slots__ = (
        "_backoff",
        "_delivered",
        "_gone_streak",
        "_opened_at",
        "_relist_backoff",
        "_unavailable",
        "min_watch",
        "reset_after",
    )

    def __init__(
        self,
        backoff: Backoff,
        *,
        reset_after: float | None = None,
        min_watch: float = 1.0,
        unavailable: Backoff | None = None,
    ) -> None:
        self._backoff = backoff
        self._unavailable = unavailable or Backoff(base=10.0, multiplier=2.0, max_delay=120.0)
        self._relist_backoff = Backoff(
            base=backoff.base,
            multiplier=backoff.multiplier,
            jitter=backoff.jitter,
            max_delay=backoff.max_delay,
        )
        self.reset_after = backoff.max_delay if reset_after is None else reset_after
        self.min_watch = min_watch
        self._opened_at: float | None = None
        self._delivered = False
        self._gone_streak = 0

    @property
    def attempts(self) -> int:
        """Failures since the backoff last started over."""
        return self._backoff.attempts

    # --- what happened --------------------------------------------------------------------

    def listed(self) -> None:
        """A list (paged, or a streaming list's initial events) completed: start over."""
        self._backoff.reset()
        self._unavailable.reset()

    def watch_opened(self, now: float) -> None:
        """The API server accepted a watch (its response headers arrived) at ``now``."""
        self._opened_at = now
        self._delivered = False

    def delivered(self) -> None:
        """The open watch delivered an event or a bookmark."""
        self._delivered = True

    # --- what to do next ------------------------------------------------------------------

    def watch_ended(self, now: float) -> Retry | None:
        """The watch ended cleanly (timeoutSeconds, or the server closed it): None resumes
        at once; a watch that ended at once with nothing delivered waits a backoff delay."""
        lived, delivered = self._close(now)
        if delivered or lived >= self.reset_after:
            self._backoff.reset()
        elif lived < self.min_watch:
            return self._retry(RetryReason.SHORT_WATCH)
        return None

    def stalled(self, now: float) -> Retry:
        """The inactivity deadline dropped a silent watch: resume at once."""
        lived, delivered = self._close(now)
        if delivered or lived >= self.reset_after:
            self._backoff.reset()
        return Retry(RetryReason.STALLED, 0.0, self._backoff.attempts)

    def failed(self, reason: RetryReason, now: float, *, at_least: float = 0.0) -> Retry:
        """A request failed (or a watch broke) for ``reason``; ``at_least`` honours a
        Retry-After. A watch that was healthy before it broke starts the backoff over."""
        lived, delivered = self._close(now)
        if delivered or lived >= self.reset_after:
            self._backoff.reset()
        return self._retry(reason, at_least=at_least)

    def gone(self, now: float) -> Retry:
        """410: the version expired and the reflector relists; at once the first time, with
        backoff while relists keep meeting 410 before their watch delivers anything."""
        lived, _ = self._close(now)  # a delivery already ended the streak (_close)
        # The API server answered: whatever failures came before are over, and the relist
        # (and its watch) start from the smallest delay.
        self._backoff.reset()
        if lived >= self.reset_after:
            self._relist_backoff.reset()
            self._gone_streak = 0
        self._gone_streak += 1
        if self._gone_streak == 1:
            return Retry(RetryReason.GONE, 0.0, self._gone_streak)
        return Retry(RetryReason.GONE, self._relist_backoff.next_delay(), self._gone_streak)

    def unavailable(self, now: float) -> Retry:
        """The kind is unavailable (401/403/404/406): wait on the unavailable backoff."""
        self._close(now)
        delay = self._unavailable.next_delay()
        return Retry(RetryReason.UNAVAILABLE, delay, self._unavailable.attempts)

    # --- inside -------------------------------------------------------------------------

    def _close(self, now: float) -> tuple[float, bool]:
        """How long the last watch lived and whether it delivered; forgets it."""
        opened, delivered = self._opened_at, self._delivered
        self._opened_at = None
        self._delivered = False
        if delivered:
            self._gone_streak = 0
            self._relist_backoff.reset()
            self._unavailable.reset()
        return (now - opened if opened is not None else 0.0), delivered

    def _retry(self, reason: RetryReason, *, at_least: float = 0.0) -> Retry:
        delay = self._backoff.next_delay(at_least=at_least)
        return Retry(reason, delay, self._backoff.attempts)


class LogLimiter:
    """At most one log line per ``interval`` seconds; counts the lines it held back.

    ``allow(now)`` returns None to stay quiet, or the number of lines suppressed since the
    last allowed one (0 or more) when this one should be logged.
    """

    __slots__ = ("_last", "_suppressed", "interval")

    def __init__(self, interval: float = 30.0) -> None:
        self.interval = interval
        self._last = -math.inf
        self._suppressed = 0

    def allow(self, now: float) -> int | None:
        if now - self._last >= self.interval:
            suppressed, self._suppressed = self._suppressed, 0
            self._last = now
            return suppressed
        self._suppressed += 1
        return None

    def flush(self) -> int:
        """The lines held back since the last allowed one, and start the count over (for a
        closing line, e.g. "recovered", so no held-back retry goes unmentioned)."""
        suppressed, self._suppressed = self._suppressed, 0
        return suppressed


def resource_version_too_large(exc: KubeStatusError) -> bool:
    """The API server's 504 for a resourceVersion newer than anything it has seen.

    client-go looks for the ResourceVersionTooLarge cause; the Status we keep may carry only
    its message, whose wording the API server has used since 1.18.
    """
    if exc.code != 504:
        return False
    if "Too large resource version" in str(exc):
        return True
    if not isinstance(exc.status, dict):
        return False
    details = exc.status.get("details")
    causes = details.get("causes") if isinstance(details, dict) else None
    return isinstance(causes, list) and any(
        isinstance(cause, dict) and cause.get("reason") == "ResourceVersionTooLarge"
        for cause in causes
    )


def status_reason(exc: KubeStatusError) -> RetryReason:
    """The retry reason of an HTTP error status (not 410, not an unavailable kind)."""
    if isinstance(exc, KubeTooManyRequestsError):
        return RetryReason.THROTTLED
    if isinstance(exc, KubeServerError):
        return RetryReason.SERVER_ERROR
    return RetryReason.STATUS


def error_reason(exc: KubeError | WatchDecodeError) -> RetryReason:
    """The retry reason of a failure that is not an HTTP status."""
    if isinstance(exc, WatchDecodeError):
        return RetryReason.DECODE
    if isinstance(exc, KubeCredentialError):
        return RetryReason.CREDENTIALS
    if isinstance(exc, KubeClosedError):
        return RetryReason.CLIENT_CLOSED
    # KubeConnectionError, or another KubeError: the exchange with the API server failed.
    return RetryReason.NETWORK
