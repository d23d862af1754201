"""An account's initial sync as the operator follows it: kinds done / total, objects so far.

A big cluster's first listing takes minutes, and until it ends the agent is not ready; the
operator wants to see it move (and, when it does not, which kinds it waits for). The
progress is computed from what the reflectors already report (``ReflectorState.synced``,
``available``, ``listed``): :func:`sync_progress` is a pure function of an account's
``AccountWatchStatus``. :func:`report_sync_progress` is the thin loop an account runs beside
its reflectors: a progress line at most every ``interval`` seconds while the sync runs (none
for a sync shorter than that), then one line when it is done, with the time it took; the
progress is also kept in the status for ``/accounts``.

A kind counts as done when every one of its watches (one per namespace when the account
lists namespaces) has synced or is unavailable (403/404: reported on its own, and no reason
to hold the sync back). The objects are those the lists (or the streaming lists' initial
events) brought.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from ._account import AccountWatchStatus
    from ._reflector_values import ReflectorState

__all__ = ["SyncProgress", "report_sync_progress", "sync_progress"]

log = logging.getLogger("agent.reflector")

PROGRESS_INTERVAL = 5.0  # seconds between two progress lines of one account, at least
_NAMED_PENDING = 3  # kinds named in a progress line ("waiting for ..."), at most


@dataclass(frozen=True, slots=True)
class SyncProgress:
    """Where an account's initial sync is (see the module docstring)."""

    kinds_done: int
    kinds_total: int
    objects: int
    unavailable: int  # kinds among the done ones that could not be read
    pending: tuple[str, ...]  # the kinds not done yet, sorted
    done: bool
    seconds: float  # since the account's watches started; the whole sync once done

    def to_json(self) -> dict[str, object]:
        """The ``initialSync`` of ``/accounts``."""
        return {
            "done": self.done,
            "kindsDone": self.kinds_done,
            "kindsTotal": self.kinds_total,
            "objects": self.objects,
            "unavailableKinds": self.unavailable,
            "seconds": round(self.seconds, 3),
        }


def sync_progress(
    reflectors: Iterable[ReflectorState], *, discovered: bool, seconds: float
) -> SyncProgress:
    """The progress of an account whose watches are ``reflectors`` (pure)."""
    kinds: dict[str, list[ReflectorState]] = {}
    objects = 0
    for state in reflectors:
        info = state.target.kind
        name = f"{info.kind}.{info.group}" if info.group else info.kind
        kinds.setdefault(name, []).append(state)
        objects += state.listed
    done = unavailable = 0
    pending = []
    for name, states in kinds.items():
        if all(s.synced or not s.available for s in states):
            done += 1
            unavailable += not all(s.available for s in states)
        else:
            pending.append(name)
    return SyncProgress(
        kinds_done=done,
        kinds_total=len(kinds),
        objects=objects,
        unavailable=unavailable,
        pending=tuple(sorted(pending)),
        done=discovered and not pending,
        seconds=seconds,
    )


def progress_line(account: str, progress: SyncProgress) -> str:
    """``account prod-1: initial sync 7/12 kinds, 23,410 objects (25 s; waiting for ...)``."""
    waiting = ", ".join(progress.pending[:_NAMED_PENDING])
    if len(progress.pending) > _NAMED_PENDING:
        waiting += f" and {len(progress.pending) - _NAMED_PENDING} more"
    return (
        f"account {account}: initial sync {progress.kinds_done}/{progress.kinds_total} kinds, "
        f"{progress.objects:,} objects ({progress.seconds:.0f} s"
        + (f"; waiting for {waiting})" if waiting else ")")
    )


def done_line(account: str, progress: SyncProgress) -> str:
    """``account prod-1: initial sync done in 41.2 s: 12 kinds, 80,112 objects``."""
    unreadable = f" ({progress.unavailable} unavailable)" if progress.unavailable else ""
    return (
        f"account {account}: initial sync done in {progress.seconds:.1f} s: "
        f"{progress.kinds_total} kinds{unreadable}, {progress.objects:,} objects"
    )


async def report_sync_progress(
    status: AccountWatchStatus, *, interval: float = PROGRESS_INTERVAL
) -> None:
    """Log the account's initial sync (see the module docstring) and keep it in
    ``status.progress``; returns once the sync is done. Started by ``run_account`` after the
    first discovery, beside the reflectors it started (whose ``on_synced`` wake it)."""
    started = status.started_at
    wake = trio.Event()

    def synced() -> None:
        wake.set()

    next_line = started + interval
    while True:
        for state in status.reflectors.values():
            state.on_synced = synced
        now = trio.current_time()
        progress = sync_progress(
            status.reflectors.values(), discovered=status.discovered, seconds=now - started
        )
        status.progress = progress
        if progress.done:
            log.info("%s", done_line(status.account, progress))
            return
        if now >= next_line:
            log.info("%s", progress_line(status.account, progress))
            next_line = now + interval
        # A kind that synced wakes this at once (the done line's time is the sync's); one
        # found unavailable is seen at the next line's time.
        with trio.move_on_at(next_line):
            await wake.wait()
        wake = trio.Event()
