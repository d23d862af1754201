"""What the demo shows: the sync progress bar, the live status line and the summary.

The formatting functions are pure (numbers in, text out). ``Display`` writes them: on a
terminal one line rewritten in place (``\\r`` + erase), elsewhere (a pipe, a CI log) a plain
line at most every ``period`` seconds, so logs stay readable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

__all__ = [
    "DeployOutcome",
    "Display",
    "ReplicaState",
    "Snapshot",
    "Summary",
    "format_bytes",
    "progress_line",
    "replicas_segment",
    "status_line",
    "summary_lines",
]

_BAR_WIDTH = 28
_TOP_KINDS = 4


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The numbers of one status tick."""

    elapsed: float
    accounts: Mapping[str, str]  # name -> the server's state for it (ACTIVE, ...)
    objects_by_kind: Mapping[str, int]  # kind -> objects in the server's cache
    stored: int  # objects in the server's cache (every kind)
    in_cluster: int  # objects in kubesim (every kind)
    events_per_second: float
    budget_in_use: int
    budget_capacity: int
    reconnects: int
    replicas: str = ""  # with several server replicas: replicas_segment's text


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One server replica in the status line."""

    index: int
    running: bool
    primary: bool  # it holds the demo account's PRIMARY


@dataclass(frozen=True, slots=True)
class DeployOutcome:
    """How the sample deploy ended: ``succeeded``, ``failed`` or ``unavailable`` (the agent
    runs no operations yet), with the task id and what the task said."""

    status: str
    message: str
    task_id: str = ""
    history: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Summary:
    synced: bool
    sync_seconds: float | None
    stored: int
    in_cluster: int
    events_streamed: int
    bytes_streamed: int
    run_seconds: float
    reconnects: int
    churn_operations: int
    deploy: DeployOutcome | None = None
    objects_by_kind: Mapping[str, int] = field(default_factory=dict)
    replica_events: Sequence[str] = ()  # with several replicas: what happened to them


def format_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def progress_line(stored: int, in_cluster: int, elapsed: float, *, done: bool) -> str:
    """``initial sync [#####.....]  63%  812/1,290 objects  1.4s``. The bar stops at 99%
    until the agent says every kind is listed (objects keep arriving from churn meanwhile)."""
    ratio = 1.0 if done else min(stored / in_cluster, 0.99) if in_cluster else 0.0
    filled = round(ratio * _BAR_WIDTH)
    bar = "#" * filled + "." * (_BAR_WIDTH - filled)
    return (
        f"initial sync [{bar}] {ratio * 100:3.0f}%  {stored:,}/{in_cluster:,} objects  "
        f"{elapsed:.1f}s"
    )


def _top_kinds(counts: Mapping[str, int], limit: int = _TOP_KINDS) -> str:
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = [f"{kind} {count:,}" for kind, count in ranked[:limit]]
    rest = sum(count for _, count in ranked[limit:])
    if rest:
        shown.append(f"other {rest:,}")
    return ", ".join(shown) or "none yet"


def status_line(s: Snapshot) -> str:
    accounts = ", ".join(f"{name} {state}" for name, state in sorted(s.accounts.items()))
    budget = (
        f"{format_bytes(s.budget_in_use)}/{format_bytes(s.budget_capacity)}"
        if s.budget_capacity
        else "n/a"
    )
    line = (
        f"[{s.elapsed:5.0f}s] accounts: {accounts or 'none'} | objects {s.stored:,} "
        f"({_top_kinds(s.objects_by_kind)}) | {s.events_per_second:,.0f} events/s | "
        f"budget {budget} | reconnects {s.reconnects}"
    )
    return f"{line} | {s.replicas}" if s.replicas else line


def replicas_segment(states: Sequence[ReplicaState], agent_on: int | None) -> str:
    """``replicas 1 DOWN, 2 PRIMARY+agent``: each replica's process and role, and where
    the agent's stream is."""
    parts = []
    for state in states:
        word = ("PRIMARY" if state.primary else "up") if state.running else "DOWN"
        if state.index == agent_on:
            word += "+agent"
        parts.append(f"{state.index} {word}")
    return "replicas " + ", ".join(parts)


def summary_lines(s: Summary) -> list[str]:
    sync = (
        f"in {s.sync_seconds:.1f}s" if s.synced and s.sync_seconds is not None else "NOT finished"
    )
    lines = [
        "summary",
        f"  objects synced:   {s.stored:,} in the server's cache ({s.in_cluster:,} in the "
        f"cluster); initial sync {sync}",
        f"  objects by kind:  {_top_kinds(s.objects_by_kind, limit=8)}",
        f"  events streamed:  {s.events_streamed:,} ({format_bytes(s.bytes_streamed)}) in "
        f"{s.run_seconds:.0f}s; churn made {s.churn_operations:,} changes",
        f"  reconnects:       {s.reconnects}",
    ]
    if s.deploy is None:
        lines.append("  sample deploy:    not run (the run ended first)")
    else:
        task = f" (task {s.deploy.task_id})" if s.deploy.task_id else ""
        lines.append(f"  sample deploy:    {s.deploy.status}{task}: {s.deploy.message}")
    for i, event in enumerate(s.replica_events):
        lines.append(f"  {'replicas:' if i == 0 else '':<18}{event}")
    return lines


class Display:
    """Writes the demo's output to ``out``; see the module docstring."""

    def __init__(
        self,
        out: TextIO,
        *,
        tty: bool,
        period: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._out, self._tty, self._period, self._clock = out, tty, period, clock
        self._live = False  # a status line is on screen (TTY) and must be cleared first
        self._last_line_at: float | None = None

    def line(self, text: str = "") -> None:
        """A permanent line (under the status line's place)."""
        self._clear()
        self._out.write(text + "\n")
        self._out.flush()

    def lines(self, texts: Sequence[str]) -> None:
        for text in texts:
            self.line(text)

    def status(self, text: str, *, force: bool = False) -> None:
        """The live line: rewritten in place on a TTY, else printed every ``period`` s."""
        if self._tty:
            self._out.write("\r" + text + "\x1b[K")
            self._out.flush()
            self._live = True
            return
        now = self._clock()
        if force or self._last_line_at is None or now - self._last_line_at >= self._period:
            self._last_line_at = now
            self._out.write(text + "\n")
            self._out.flush()

    def end_status(self) -> None:
        """Keep the live line on screen as a normal line (a TTY's cursor moves down)."""
        if self._live:
            self._out.write("\n")
            self._out.flush()
            self._live = False
        self._last_line_at = None

    def _clear(self) -> None:
        if self._live:
            self._out.write("\r\x1b[K")
            self._live = False
