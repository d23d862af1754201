"""kubesvc demo: the unattended run ends with a summary and exit code 0; the view's pieces."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest

from kubesvc._demo_view import (
    DeployOutcome,
    Display,
    ReplicaState,
    Snapshot,
    Summary,
    progress_line,
    replicas_segment,
    status_line,
    summary_lines,
)

from .._procs import kubesvc_command, run


@pytest.mark.timeout(200)  # a 20 s demo; its own bound is 150 s on a loaded machine
def test_demo_duration_20_exits_0_with_a_summary(tmp_path: Path) -> None:
    # Port 0: other runs on this machine may hold 7002/9091 (the default falls back too).
    done = run(
        kubesvc_command(
            "demo",
            "--duration",
            "20",
            "--api-port",
            "0",
            "--grpc-port",
            "0",
            "--data-dir",
            str(tmp_path / "demo"),
        ),
        timeout=150,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    synced = re.search(r"objects synced:\s+([\d,]+) in the server's cache \(([\d,]+) in", out)
    assert synced, out
    stored, in_cluster = (int(g.replace(",", "")) for g in synced.groups())
    assert stored >= 1000, out
    assert abs(stored - in_cluster) < 50, out
    assert "initial sync in" in out
    events = re.search(r"events streamed:\s+([\d,]+)", out)
    assert events, out
    assert int(events.group(1).replace(",", "")) > stored, out
    # Operations exist (issue 6): the sample deploy must go through.
    assert re.search(r"sample deploy:\s+succeeded \(task [\w-]+\)", out), out
    assert "curl -s http://127.0.0.1:" in out
    assert (tmp_path / "demo" / "kubesvc.db").exists()


def test_progress_bar_waits_for_the_agent_before_100_percent() -> None:
    assert "99%" in progress_line(500, 500, 1.0, done=False)
    assert "100%" in progress_line(500, 520, 1.0, done=True)
    assert " 50%" in progress_line(250, 500, 1.0, done=False)


def test_status_line_shows_the_top_kinds_and_the_rest() -> None:
    line = status_line(
        Snapshot(
            elapsed=3,
            accounts={"demo": "ACTIVE"},
            objects_by_kind={
                "Pod": 1000,
                "ConfigMap": 30,
                "Deployment": 7,
                "Service": 7,
                "Secret": 2,
            },
            stored=1046,
            in_cluster=1046,
            events_per_second=31.4,
            budget_in_use=2048,
            budget_capacity=16 * 2**20,
            reconnects=1,
        )
    )
    for part in (
        "demo ACTIVE",
        "Pod 1,000",
        "other 2",
        "31 events/s",
        "2.0 KiB/16.0 MiB",
        "reconnects 1",
    ):
        assert part in line


def test_replicas_segment_shows_each_replica_its_role_and_the_agent() -> None:
    states = [ReplicaState(1, running=False, primary=False), ReplicaState(2, True, True)]
    assert replicas_segment(states, agent_on=2) == "replicas 1 DOWN, 2 PRIMARY+agent"
    states = [ReplicaState(1, True, True), ReplicaState(2, True, False)]
    assert replicas_segment(states, agent_on=None) == "replicas 1 PRIMARY, 2 up"


def test_status_line_ends_with_the_replicas_when_there_are_several() -> None:
    snapshot = Snapshot(
        elapsed=1,
        accounts={"demo": "ACTIVE"},
        objects_by_kind={},
        stored=0,
        in_cluster=0,
        events_per_second=0,
        budget_in_use=0,
        budget_capacity=0,
        reconnects=0,
    )
    assert status_line(snapshot).endswith("reconnects 0")
    with_replicas = dataclasses.replace(snapshot, replicas="replicas 1 PRIMARY+agent, 2 up")
    assert status_line(with_replicas).endswith("| replicas 1 PRIMARY+agent, 2 up")


def test_summary_lists_what_happened_to_the_replicas() -> None:
    summary = Summary(
        synced=True,
        sync_seconds=1.0,
        stored=1,
        in_cluster=1,
        events_streamed=1,
        bytes_streamed=1,
        run_seconds=1,
        reconnects=1,
        churn_operations=0,
        replica_events=("2 live at the start", "[   9s] replica 1 ended: killed by SIGKILL"),
    )
    lines = summary_lines(summary)
    assert lines[-2:] == [
        "  replicas:         2 live at the start",
        "                    [   9s] replica 1 ended: killed by SIGKILL",
    ]


def test_summary_says_how_the_deploy_ended() -> None:
    summary = Summary(
        synced=True,
        sync_seconds=2.5,
        stored=1200,
        in_cluster=1201,
        events_streamed=1500,
        bytes_streamed=4 * 2**20,
        run_seconds=20,
        reconnects=0,
        churn_operations=400,
        deploy=DeployOutcome("succeeded", "deployment demo-apps/x", "t-1"),
    )
    text = "\n".join(summary_lines(summary))
    assert "1,200 in the server's cache (1,201 in the cluster)" in text
    assert "initial sync in 2.5s" in text
    assert "succeeded (task t-1)" in text


def test_display_rewrites_one_line_on_a_tty() -> None:
    out = io.StringIO()
    display = Display(out, tty=True)
    display.status("a")
    display.status("b")
    display.line("done")
    assert out.getvalue() == "\ra\x1b[K\rb\x1b[K\r\x1b[Kdone\n"


def test_display_prints_periodic_lines_elsewhere() -> None:
    now = [0.0]
    out = io.StringIO()
    display = Display(out, tty=False, period=5.0, clock=lambda: now[0])
    for t in (0.0, 1.0, 4.0, 5.0, 6.0, 10.5):
        now[0] = t
        display.status(f"t={t}")
    assert out.getvalue().splitlines() == ["t=0.0", "t=5.0", "t=10.5"]
