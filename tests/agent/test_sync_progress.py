"""An account's initial sync, followed (agent/watch/_sync_progress.py): kinds done / total and
objects so far in ``/accounts`` while a kind's list is held back in kubesim, a progress line
at most every 5 s (on trio's virtual clock), and one line when it is done with the time it
took. Against kubesim over TLS with the agent's real client and ``run_account``."""

from __future__ import annotations

import itertools
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agent import AccountConfig, AccountState, AccountWatchStatus, AgentStatus, run_account
from agent._status import accounts_view
from agent.watch._sync_progress import progress_line, sync_progress

from .._wait import wait_until
from .test_kind_availability import config_map
from .test_reflector import open_env, pod

pytestmark = pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")


def _initial_sync(status: AccountWatchStatus, account: AccountConfig) -> Any:
    view = accounts_view(AgentStatus(accounts={"acc": AccountState(account, watch=status)}))
    return view[0]["initialSync"]


def _lines(caplog: pytest.LogCaptureFixture, what: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if what in r.getMessage()]


async def test_progress_shows_while_a_list_is_held_and_the_end_says_how_long(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agent.reflector")
    account = AccountConfig(name="acc", kinds=("pod", "configmap"))
    with trio.fail_after(600):
        async with open_env(tmp_path, tls=True, clock=autojump_clock) as env:
            for index in range(30):
                env.sim.create(pod(f"p{index}"))
            for index in range(20):
                env.sim.create(config_map(f"c{index}"))
            # The ConfigMaps' list (a streaming list: a watch) waits until the gate opens.
            gate = trio.Event()
            env.server.faults.hold(gate, verb="watch", resource="configmaps")
            began = trio.current_time()
            status: AccountWatchStatus = await env.nursery.start(
                lambda task_status: run_account(
                    account, env.transport, env.send, caps=env.caps, task_status=task_status
                )
            )

            def pods_done() -> bool:
                shown = _initial_sync(status, account)
                return bool(shown["kindsDone"] == 1 and shown["objects"] == 30)

            await wait_until(pods_done, what="the Pods listed, the ConfigMaps held")
            assert ("watch", "configmaps") in env.server.faults.held
            shown = _initial_sync(status, account)
            assert shown["done"] is False
            assert (shown["kindsDone"], shown["kindsTotal"], shown["objects"]) == (1, 2, 30)

            # While it is held: a line every 5 s (virtual), naming what it waits for.
            await wait_until(
                lambda: len(_lines(caplog, "initial sync 1/2 kinds")) >= 3,
                timeout=60,
                what="three progress lines",
            )
            progress = _lines(caplog, "initial sync 1/2 kinds")
            assert progress[0].getMessage() == (
                "account acc: initial sync 1/2 kinds, 30 objects (5 s; waiting for ConfigMap)"
            )
            # The lines' own seconds are the virtual clock's (a record's ``created`` is not).
            times = [int(re.findall(r"\((\d+) s;", r.getMessage())[0]) for r in progress]
            assert all(later - earlier >= 5 for earlier, later in itertools.pairwise(times)), times
            assert not _lines(caplog, "initial sync done")

            gate.set()
            await env.receiver.wait_for(lambda: status.synced)
            await wait_until(lambda: bool(_lines(caplog, "initial sync done")), what="done")
            took = trio.current_time() - began
            [done] = _lines(caplog, "initial sync done")
            found = re.fullmatch(
                r"account acc: initial sync done in ([\d.]+) s: 2 kinds, 50 objects",
                done.getMessage(),
            )
            assert found is not None, done.getMessage()
            assert 15 <= float(found.group(1)) <= took
            shown = _initial_sync(status, account)
            assert shown["done"] is True
            assert (shown["kindsDone"], shown["kindsTotal"], shown["objects"]) == (2, 2, 50)


def test_a_kind_is_done_when_all_its_watches_are_synced_or_unavailable() -> None:
    from agent import KindInfo, WatchTarget
    from agent.watch import ReflectorState

    def state(kind: str, namespace: str, *, synced: bool, available: bool = True) -> Any:
        info = KindInfo(
            group="", version="v1", kind=kind, plural=kind.lower() + "s", namespaced=True
        )
        s = ReflectorState(WatchTarget(info, namespace))
        s.synced, s.available, s.listed = synced, available, 7
        return s

    states = [
        state("Pod", "a", synced=True),
        state("Pod", "b", synced=False),  # one namespace of two: Pod is not done
        state("Secret", "a", synced=False, available=False),  # 403: done, unavailable
        state("ConfigMap", "a", synced=True),
    ]
    progress = sync_progress(states, discovered=True, seconds=12.4)
    assert (progress.kinds_done, progress.kinds_total, progress.objects) == (2, 3, 28)
    assert (progress.unavailable, progress.pending, progress.done) == (1, ("Pod",), False)
    assert progress_line("prod-1", progress) == (
        "account prod-1: initial sync 2/3 kinds, 28 objects (12 s; waiting for Pod)"
    )
    assert not sync_progress([], discovered=False, seconds=0).done
