"""A reflector's backoff against kubesim over TLS: it starts over after every healthy spell.

Issue 12 measured the time until a change is visible again after repeated 2-second cuts
between agent and API server grow from 0.8 s to 34 s: the backoff never started over after
a watch that reconnected and delivered. These tests cut the link with kubesim's fault
injection (``Server.cut``: open connections reset, new ones reset as they are accepted) and
read the reflector's own account of its retries (``state.last_retry``, ``state.retries``)
and its log.

They run on trio's virtual clock: kubesim and the agent's client share the test's trio run,
so every byte one of them writes on loopback is readable by the other before the run loop
looks for I/O, and the clock only jumps when both are waiting on timers. Delays are exact
(no jitter), so the assertions are equalities up to the loop's own steps.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import kubesim
from agent import Reflector, ReflectorSettings, WatchTarget
from agent.watch._retry import Retry, RetryReason

from .test_reflector import PODS, Env, open_env, pod

pytestmark = pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")

#: The production delays (1 s, x1.6, cap 60 s) without jitter, so every delay is exact.
SETTINGS = ReflectorSettings(
    streaming_list=False,
    backoff_jitter=0.0,
    watch_timeout_seconds=(600, 600),
    retry_log_interval=30.0,
)
CUT = 2.0
#: Into a 2 s cut, the retries wait 1.0 s (fails: still cut), then 1.6 s: the watch is back
#: 2.6 s after the cut began, 0.6 s after it ended.
RECOVERY = 1.0 + 1.6 - CUT


def _reflector(env: Env, settings: ReflectorSettings = SETTINGS) -> Reflector:
    return env.reflector(WatchTarget(PODS), settings=settings)


@asynccontextmanager
async def _open_env(
    tmp_path: Path, clock: trio.testing.MockClock, **sim: Any
) -> AsyncIterator[Env]:
    """tests/agent/test_reflector.py's stack over TLS (HTTP/2: every watch on one connection),
    on the autojump ``clock``, with no bookmarks unless ``sim`` says otherwise."""
    config = kubesim.SimConfig(controllers=False, **{"bookmark_interval": 3600.0, **sim})
    async with open_env(tmp_path, config, tls=True, clock=clock) as env:
        yield env


async def test_ten_cuts_in_a_row_recover_as_fast_as_the_first(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.reflector")
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.sim.create(pod("first"))
            reflector = _reflector(env)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            recoveries = []
            for i in range(10):
                name = f"during-cut-{i}"
                env.server.cut(CUT)
                env.sim.create(pod(name))  # the change to see again
                await trio.sleep(CUT)
                ended = trio.current_time()
                await env.receiver.wait_for(lambda: name in env.receiver.names("Pod"))  # noqa: B023
                recoveries.append(trio.current_time() - ended)
                await trio.sleep(5.0)  # the watch runs on, healthy, until the next cut
            print(f"\nrecovery after each of 10 cuts of {CUT} s: {recoveries}")
            assert all(RECOVERY <= r <= RECOVERY + 0.1 for r in recoveries), recoveries
            assert recoveries[-1] <= recoveries[0] + 0.05, recoveries
            # Each cut cost two retries, both starting from the smallest delay.
            assert reflector.state.retries == {"network": 20}
            assert reflector.state.last_retry is not None
            assert reflector.state.last_retry.attempt == 2
            assert reflector.state.lists == 1  # every reconnect resumed the watch
    # Logged, rate-limited (one line per 30 s per reflector), naming account, kind, reason
    # and delay.
    logged = [r.getMessage() for r in caplog.records if r.name == "agent.reflector"]
    lines = [line for line in logged if "watching again" not in line]
    assert lines, "no retry was logged"
    assert lines[0].startswith("account acc: Pod: network: ")
    assert lines[0].endswith("retry 1 in 1.0 s")
    assert len(lines) < 20
    # Each recovery says so, once, with the retries the rate limit held back since the last
    # line: the log never ends on a retry that is long over.
    recovered = [line for line in logged if "watching again" in line]
    assert len(recovered) == 10, recovered
    assert all(line.startswith("account acc: Pod: watching again") for line in recovered)
    assert any("retries since the last line" in line for line in recovered), recovered
    assert logged[-1].startswith("account acc: Pod: watching again"), logged[-3:]


async def _grown(reflector: Reflector, env: Env, failures: int) -> None:
    """Wait until ``failures`` watch requests failed with 503 (armed before the reflector
    started): the backoff has climbed to its ``failures``-th delay."""
    await env.receiver.wait_for(lambda: reflector.state.retries.get("server_error", 0) == failures)
    retry = reflector.state.last_retry
    assert retry is not None
    assert astuple(retry) == (
        RetryReason.SERVER_ERROR,
        pytest.approx(1.6 ** (failures - 1)),
        failures,
    )


async def _next_cut_waits_the_smallest_delay(env: Env, reflector: Reflector) -> None:
    """Cut the link for an instant: the retry that follows waits 1 s, attempt 1."""
    before = reflector.state.retries.get("network", 0)
    env.server.cut()
    await env.receiver.wait_for(lambda: reflector.state.retries.get("network", 0) > before)
    assert reflector.state.last_retry == Retry(RetryReason.NETWORK, 1.0, 1)


async def test_a_watch_that_ran_longer_than_the_cap_then_broke_starts_over(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.server.faults.fail_next(4, status=503, retry_after=None, verb="watch")
            reflector = _reflector(env)
            await env.nursery.start(reflector.run)
            await _grown(reflector, env, 4)
            await env.receiver.wait_for(lambda: reflector.state.watches == 5)
            # The watch delivers nothing (no change, no bookmark) but stays open past the
            # 60 s cap.
            await trio.sleep(61.0)
            assert reflector.state.events == 0
            await _next_cut_waits_the_smallest_delay(env, reflector)


async def test_a_successful_streaming_list_starts_over(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    settings = replace(SETTINGS, streaming_list=True)
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.sim.create(pod("a"))
            # The first four streaming lists (watch requests) fail; the fifth delivers.
            reflector = _reflector(env, settings)
            env.server.faults.fail_next(4, status=503, retry_after=None, verb="watch")
            await env.nursery.start(reflector.run)
            await _grown(reflector, env, 4)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert reflector.state.streaming
            assert reflector.state.retries == {"server_error": 4}
            assert env.server.requests.count("list", "pods") == 0
            await _next_cut_waits_the_smallest_delay(env, reflector)


async def test_a_relist_after_a_410_starts_over(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock, watch_history=5) as env:
            reflector = _reflector(env)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            # A long cut: the backoff climbs while more changes happen than the API server
            # keeps, so the resumed watch meets 410 and the reflector lists again.
            env.server.cut(10.0)
            for i in range(10):
                env.sim.create(pod(f"p{i}"))
            await env.receiver.wait_for(lambda: reflector.state.lists == 2)
            assert reflector.state.relists == 1
            assert reflector.state.retries["gone"] == 1
            assert reflector.state.retries["network"] >= 4  # the backoff had climbed
            await env.receiver.wait_for(lambda: len(env.receiver.names("Pod")) == 10)
            await _next_cut_waits_the_smallest_delay(env, reflector)


async def test_a_streaming_list_cut_again_and_again_backs_off(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """A big streaming list that a proxy cuts before it completes is not a watch that
    delivered: its initial events do not start the backoff over (only a completed list does),
    or the reflector would retry at the smallest delay forever (found in review)."""
    settings = replace(SETTINGS, streaming_list=True)
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock) as env:
            for i in range(5):
                env.sim.create(pod(f"p{i}"))
            env.server.faults.drop_watches(after_events=2, count=5)
            reflector = _reflector(env, settings)
            await env.nursery.start(reflector.run)
            await env.receiver.wait_for(lambda: reflector.state.synced)
            assert reflector.state.streaming
            assert sum(reflector.state.retries.values()) == 5
            # The completed sixth list started the backoff over; before it, the five cut
            # lists climbed 1, 1.6, 2.56, 4.096, 6.5536 s.
            retry = reflector.state.last_retry
            assert retry is not None
            assert retry.attempt == 5
            assert retry.delay == pytest.approx(1.6**4)
            await _next_cut_waits_the_smallest_delay(env, reflector)
