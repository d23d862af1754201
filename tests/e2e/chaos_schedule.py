"""The chaos test's fault schedule and its report, with no I/O.

A schedule is drawn from a seed: every fault kind once (so even a short run covers them all),
then kinds drawn at random, shuffled together; each fault gets a duration drawn from the
run's range (how long a link stays cut or silent, or how long a killed process stays down).
The same seed gives the same schedule. The report collects each fault's recovery time and
findings (crashes, slow exits) and the cache checkpoints, prints them as a table, and says
what broke the run's promises.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "Checkpoint",
    "FaultKind",
    "Outcome",
    "Report",
    "ScheduledFault",
    "compare_objects",
    "nearest_rank",
    "schedule",
]


K = TypeVar("K", bound=Hashable)


class FaultKind(enum.Enum):
    CUT_KUBE = "cut kube link"  # RST both sides; reset new connections for the duration
    CUT_SERVER = "cut server link"
    SILENT_KUBE_RESUME = "silent kube link, resume"
    SILENT_KUBE_CUT = "silent kube link, cut"
    SILENT_SERVER_RESUME = "silent server link, resume"
    SILENT_SERVER_CUT = "silent server link, cut"
    KILL_AGENT = "kill -9 agent"  # down for the duration, then started again
    TERM_AGENT = "SIGTERM agent"
    KILL_SERVER = "kill -9 server"
    TERM_SERVER = "SIGTERM server"


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    index: int
    kind: FaultKind
    duration: float  # seconds, one decimal


def schedule(seed: int, count: int, durations: tuple[float, float]) -> list[ScheduledFault]:
    """``count`` faults drawn from ``seed``; all kinds appear when ``count`` allows it."""
    rng = random.Random(seed)
    kinds = list(FaultKind)
    drawn = kinds[:count] + [rng.choice(kinds) for _ in range(count - len(kinds))]
    rng.shuffle(drawn)
    low, high = durations
    return [
        ScheduledFault(index, kind, round(rng.uniform(low, high), 1))
        for index, kind in enumerate(drawn, 1)
    ]


def nearest_rank(values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile: the smallest value with ``fraction`` of them at or below."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(slots=True)
class Outcome:
    fault: ScheduledFault
    recovery: float | None = None  # None: the probe never became visible
    notes: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # crashes and the like: fail the run


@dataclass(frozen=True, slots=True)
class Checkpoint:
    after_fault: int
    objects: int  # in kubesim, of the watched kinds
    missing: int
    extra: int
    stale: int  # same object, another resourceVersion or uid
    differs: int  # same resourceVersion, another body
    waited: float  # seconds until equal (or until the bound ran out)
    examples: tuple[str, ...] = ()

    @property
    def equal(self) -> bool:
        return not (self.missing or self.extra or self.stale or self.differs)


def compare_objects(
    after: int,
    want: Mapping[K, Mapping[str, Any]],
    have: Mapping[K, Mapping[str, Any]],
    waited: float,
) -> Checkpoint:
    """Compare kubesim's objects (``want``, as the agent sends them) with the server's
    (``have``), both keyed by (apiVersion, kind, namespace, name): missing from the server,
    extra in it, stale (another uid or resourceVersion), or a different body at the same
    resourceVersion; a few examples of each."""
    missing = [k for k in want if k not in have]
    extra = [k for k in have if k not in want]
    stale, differs = [], []
    for key in want.keys() & have.keys():
        w, h = want[key].get("metadata", {}), have[key].get("metadata", {})
        if (w.get("uid"), w.get("resourceVersion")) != (h.get("uid"), h.get("resourceVersion")):
            stale.append(
                f"{key}: kubesim rv {w.get('resourceVersion')}, server rv "
                f"{h.get('resourceVersion')}"
            )
        elif want[key] != have[key]:
            differs.append(f"{key} at rv {w.get('resourceVersion')}")
    examples = (
        [f"missing {k}" for k in sorted(map(str, missing))[:3]]
        + [f"extra {k}" for k in sorted(map(str, extra))[:3]]
        + [f"stale {s}" for s in sorted(stale)[:3]]
        + [f"differs {d}" for d in sorted(differs)[:3]]
    )
    return Checkpoint(
        after,
        len(want),
        len(missing),
        len(extra),
        len(stale),
        len(differs),
        waited,
        tuple(examples),
    )


@dataclass(slots=True)
class Report:
    seed: int
    p90_bound: float
    max_bound: float
    outcomes: list[Outcome] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)  # outside any one fault (start, end)

    def recoveries(self) -> list[float]:
        return [o.recovery for o in self.outcomes if o.recovery is not None]

    def table(self) -> str:
        lines = [
            f"chaos run, seed {self.seed}: {len(self.outcomes)} faults",
            f"{'#':>3}  {'fault':<27} {'dur s':>5} {'recovery s':>10}  notes",
        ]
        for o in self.outcomes:
            shown = "never" if o.recovery is None else f"{o.recovery:.2f}"
            notes = "; ".join([*o.notes, *(f"FINDING: {f}" for f in o.findings)])
            lines.append(
                f"{o.fault.index:>3}  {o.fault.kind.value:<27} {o.fault.duration:>5.1f} "
                f"{shown:>10}  {notes}"
            )
        values = self.recoveries()
        if values:
            lines.append(
                f"recovery: median {nearest_rank(values, 0.5):.2f} s, p90 "
                f"{nearest_rank(values, 0.9):.2f} s, max {max(values):.2f} s "
                f"(bounds: p90 <= {self.p90_bound} s, max <= {self.max_bound} s)"
            )
        for c in self.checkpoints:
            lines.append(
                f"checkpoint after fault {c.after_fault}: {c.objects} objects, "
                f"{c.missing} missing, {c.extra} extra, {c.stale} stale, {c.differs} differ "
                f"(waited {c.waited:.1f} s)"
            )
        lines += [f"FINDING: {f}" for f in self.findings]
        return "\n".join(lines)

    def failures(self) -> list[str]:
        """What broke the run's promises (empty: the run passed)."""
        problems = list(self.findings)
        for o in self.outcomes:
            where = f"fault {o.fault.index} ({o.fault.kind.value})"
            problems += [f"{where}: {f}" for f in o.findings]
            if o.recovery is None:
                problems.append(f"{where}: never recovered")
        for c in self.checkpoints:
            if not c.equal:
                shown = "; ".join(c.examples)
                problems.append(
                    f"checkpoint after fault {c.after_fault}: {c.missing} missing, {c.extra} "
                    f"extra, {c.stale} stale, {c.differs} differ: {shown}"
                )
        values = self.recoveries()
        if values and nearest_rank(values, 0.9) > self.p90_bound:
            problems.append(f"recovery p90 {nearest_rank(values, 0.9):.2f} s > {self.p90_bound} s")
        if values and max(values) > self.max_bound:
            problems.append(f"recovery max {max(values):.2f} s > {self.max_bound} s")
        return problems
