"""bench_agents' machinery at a tiny size: real processes (kubesim, ``kubesvc server``, one
agent host running 3 agents), a server killed and started again on its store file, and every
account back with no listing at all.

Marked slow (``pytest -m slow``): five Python processes start and the agents reconnect on
their own backoff: 7 s on an idle build machine, 30 s when it is loaded."""

from __future__ import annotations

import pytest
import trio

from tests.bench import bench_agents


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_three_agents_in_one_host_resume_after_a_server_restart_without_relists() -> None:
    args = bench_agents.parse_args(
        ["--agents", "3", "--hosts", "1", "--quiet-s", "0.5", "--settle-s", "0.5"]
    )
    with trio.fail_after(110):
        results = await bench_agents.bench(args)
    assert results["agents"] == 3
    assert results["watches"] == 3 * len(bench_agents.KINDS)
    assert results["relists"] == 0
    assert results["agent_relists"] == 0
    # Every watch resumed from its stored resourceVersion (one that renewed meanwhile counts
    # twice: a resumed watch too, never a listing).
    assert results["resumed_watches"] >= results["watches"]
    for key in ("server_rss_mb", "reconnect_all_s", "sync_all_s"):
        assert results[key] > 0
    assert results["server_idle_cpu_pct"] >= 0  # a 0.5 s window may hold no clock tick
