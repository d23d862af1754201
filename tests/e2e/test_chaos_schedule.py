"""The chaos test's schedule and report (tests/e2e/chaos_schedule.py), with no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from .chaos_schedule import (
    Checkpoint,
    FaultKind,
    Outcome,
    Report,
    ScheduledFault,
    compare_objects,
    nearest_rank,
    schedule,
)


def test_a_seed_gives_one_schedule_covering_every_kind() -> None:
    first = schedule(12, 20, (0.2, 1.0))
    assert first == schedule(12, 20, (0.2, 1.0))
    assert first != schedule(13, 20, (0.2, 1.0))
    assert [f.index for f in first] == list(range(1, 21))
    assert {f.kind for f in first} == set(FaultKind)
    assert all(0.2 <= f.duration <= 1.0 for f in first)
    assert len(schedule(1, 3, (1.0, 1.0))) == 3  # fewer faults than kinds: no duplicates needed


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]  # 1..20
    assert nearest_rank(values, 0.9) == 18.0
    assert nearest_rank(values, 0.5) == 10.0
    assert nearest_rank([3.0], 0.9) == 3.0
    with pytest.raises(ValueError, match="no values"):
        nearest_rank([], 0.9)


def _report(recoveries: Sequence[float | None]) -> Report:
    report = Report(seed=5, p90_bound=5.0, max_bound=15.0)
    for index, value in enumerate(recoveries, 1):
        report.outcomes.append(Outcome(ScheduledFault(index, FaultKind.CUT_KUBE, 0.5), value))
    return report


def test_a_clean_run_has_no_failures_and_a_table() -> None:
    report = _report([0.5, 1.0, 1.5])
    report.checkpoints.append(Checkpoint(3, 10, 0, 0, 0, 0, 0.2))
    assert report.failures() == []
    table = report.table()
    assert "seed 5" in table
    assert "cut kube link" in table
    assert "p90 1.50 s" in table
    assert "0 missing, 0 extra, 0 stale" in table


def test_what_fails_a_run() -> None:
    report = _report([*[1.0] * 8, 6.0, 16.0, None])
    report.outcomes[0].findings.append("the agent exited by itself (exit 1)")
    report.checkpoints.append(Checkpoint(10, 10, 1, 0, 2, 0, 30.0, ("missing x",)))
    failures = report.failures()
    assert "fault 1 (cut kube link): the agent exited by itself (exit 1)" in failures
    assert "fault 11 (cut kube link): never recovered" in failures
    assert any(f.startswith("checkpoint after fault 10: 1 missing") for f in failures)
    assert "recovery p90 6.00 s > 5.0 s" in failures
    assert "recovery max 16.00 s > 15.0 s" in failures
    assert "FINDING: the agent exited by itself" in report.table()


def _obj(name: str, rv: str, uid: str = "u", value: str = "v") -> dict[str, Any]:
    return {
        "kind": "ConfigMap",
        "metadata": {"name": name, "uid": uid, "resourceVersion": rv},
        "data": {"value": value},
    }


def test_compare_counts_each_kind_of_difference() -> None:
    want = {
        "same": _obj("same", "1"),
        "missing": _obj("missing", "2"),
        "older": _obj("older", "5"),
        "recreated": _obj("recreated", "6", uid="new"),
        "other body": _obj("other body", "7"),
    }
    have = {
        "same": _obj("same", "1"),
        "older": _obj("older", "4"),
        "recreated": _obj("recreated", "6", uid="old"),
        "other body": _obj("other body", "7", value="changed"),
        "extra": _obj("extra", "3"),
    }
    c = compare_objects(9, want, have, 1.5)
    assert (c.after_fault, c.objects, c.missing, c.extra, c.stale, c.differs, c.waited) == (
        9,
        5,
        1,
        1,
        2,
        1,
        1.5,
    )
    assert not c.equal
    assert "missing missing" in c.examples
    assert "stale older: kubesim rv 5, server rv 4" in c.examples
    assert compare_objects(1, want, dict(want), 0.0).equal
