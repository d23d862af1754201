"""``/watches`` shows a watch's error only while it is failing (issue 15: after API-server
restarts it kept showing old errors on watches that were healthy again); the reflector keeps
the last error (and counts the retries) for whoever wants the history."""

from __future__ import annotations

from pathlib import Path

import trio

from agent import AccountConfig
from agent._accounts import AccountState
from agent._status import AgentStatus, watches_view
from agent.watch._account import AccountWatchStatus
from agent.watch._discovery import WatchTarget

from .test_reflector import PODS, open_env, pod


async def test_an_error_shows_while_failing_and_goes_once_the_watch_is_healthy(
    tmp_path: Path,
) -> None:
    with trio.fail_after(20):
        async with open_env(tmp_path) as env:
            env.sim.create(pod("a"))
            env.server.faults.fail_next(10**6, status=503, retry_after=None, verb="list")
            reflector = env.reflector(WatchTarget(PODS))
            watch = AccountWatchStatus("acc", reflectors={reflector.target: reflector.state})
            status = AgentStatus(accounts={"acc": AccountState(AccountConfig("acc"), watch=watch)})
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.failing)
            (line,) = watches_view(status)
            assert "503" in line["lastError"]
            env.server.faults.clear()  # the API server is back
            await env.receiver.wait_for(lambda: reflector.state.synced)
            (line,) = watches_view(status)
            assert line["lastError"] == ""
            assert line["retries"] >= 1
            assert "503" in reflector.state.last_error  # kept, for the history
