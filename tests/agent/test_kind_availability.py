"""A kind the agent may no longer read, against kubesim over TLS with a token: RBAC revoked
while the account runs makes the kind unavailable (one WARNING naming the account, the kind
and the API server's reason; one KindNotice; its objects gone from the receiver's view), its
retries back off from 10 s to 2 min without another line, and RBAC restored brings it back
within that backoff, or at once on a rediscovery (docs/protocol.md §7.4).

On trio's virtual clock, as tests/agent/test_reflector_backoff.py explains: kubesim and the
agent share the test's run, and the clock jumps only when both wait on timers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import kubesim
from agent import AccountConfig, AccountWatchStatus, ReflectorSettings, run_account
from agent.watch._kind_availability import AvailabilityLog, Nudge
from agent.watch._notices import GONE_FROM_DISCOVERY, KindNotice, ScopeNotice
from agent.watch._retry import RetryReason

from .._widgets import widget_crd
from .test_reflector import Env, open_env, pod

pytestmark = pytest.mark.filterwarnings("ignore:Async generator:ResourceWarning")

SETTINGS = ReflectorSettings(
    streaming_list=False,
    backoff_jitter=0.0,  # exact delays: 10, 20, 40, 80, 120, 120 s
    watch_timeout_seconds=(600, 600),
)
READ_ALL = {"*": kubesim.ALL_VERBS}
NO_CONFIGMAPS = {"*": kubesim.ALL_VERBS, "configmaps": ()}


def config_map(name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
    }


@asynccontextmanager
async def _open_env(tmp_path: Path, clock: trio.testing.MockClock) -> AsyncIterator[Env]:
    # Bookmarks keep quiet watches alive (no stall) over the minutes the backoff takes.
    config = kubesim.SimConfig(controllers=False, bookmark_interval=30.0)
    async with open_env(tmp_path, config, READ_ALL, tls=True, clock=clock) as env:
        yield env


async def _run(
    env: Env,
    account: AccountConfig,
    *,
    discovery_interval: float = 3600.0,
    log_book: AvailabilityLog | None = None,
    nudge: Nudge | None = None,
    task_status: trio.TaskStatus[AccountWatchStatus],
) -> None:
    await run_account(
        account,
        env.transport,
        env.send,
        caps=env.caps,
        settings=SETTINGS,
        discovery_interval=discovery_interval,
        log_book=log_book,
        nudge=nudge,
        task_status=task_status,
    )


def _config_maps(status: AccountWatchStatus) -> Any:
    [state] = [s for t, s in status.reflectors.items() if t.kind.kind == "ConfigMap"]
    return state


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The WARNING (and worse) lines, but those of the cut's network retries."""
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return [line for line in lines if ": network: " not in line]


async def test_revoked_rbac_is_said_once_backs_off_and_comes_back(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent.reflector")
    account = AccountConfig(name="acc", kinds=("pod", "configmap"))
    with trio.fail_after(3600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.sim.create(pod("p"))
            env.sim.create(config_map("c"))
            status: AccountWatchStatus = await env.nursery.start(_run, env, account)
            await env.receiver.wait_for(lambda: status.synced)
            assert env.receiver.names("ConfigMap") == {"c"}
            # The scope came first, before any listing.
            first = env.receiver.notices[0]
            assert isinstance(first, ScopeNotice)
            assert first.kinds == (("v1", "ConfigMap"), ("v1", "Pod"))

            # RBAC revoked; the open watches go on (as on a real API server) until they end.
            env.server.set_grants("agent", NO_CONFIGMAPS)
            env.server.cut(0.0)
            await env.receiver.wait_for(lambda: not _config_maps(status).available)
            revoked_at = trio.current_time()
            state = _config_maps(status)
            assert state.reason.startswith("403 Forbidden: configmaps is forbidden")
            [told] = env.receiver.kind_notices("ConfigMap")
            assert (told.available, told.code, told.scope) == (False, 403, "")
            assert told.reason == state.reason
            assert env.receiver.names("ConfigMap") == set()  # what the server removes too
            [warning] = _warnings(caplog)
            assert warning.startswith("account acc: ConfigMap is unavailable to the agent: 403")
            assert 'User "agent" cannot' in warning

            # Retried on its own backoff, 10 s doubling to 2 min; said nowhere but DEBUG.
            await trio.sleep(10 + 20 + 40 + 80 + 120 + 120 + 1)
            assert state.retries[RetryReason.UNAVAILABLE] >= 6
            delays = [
                float(r.getMessage().split(" in ")[1].removesuffix(" s"))
                for r in caplog.records
                if r.levelno == logging.DEBUG and "ConfigMap: retry" in r.getMessage()
            ]
            assert delays[:6] == [10.0, 20.0, 40.0, 80.0, 120.0, 120.0]
            assert len(_warnings(caplog)) == 1
            assert len(env.receiver.kind_notices("ConfigMap")) == 1  # told once
            assert _config_maps(status) is state  # the same reflector, never restarted
            pods = next(s for t, s in status.reflectors.items() if t.kind.kind == "Pod")
            assert pods.available

            # RBAC back: watched again at the next retry, within the 2 min cap.
            env.sim.create(config_map("while-forbidden"))
            restored_at = trio.current_time()
            env.server.set_grants("agent", READ_ALL)
            # (The retry in progress may be up to 2 min away: more than wait_for's minute.)
            await env.receiver.wait_for(lambda: state.available, timeout=180)
            assert trio.current_time() - restored_at <= 120.0 + 1
            await env.receiver.wait_for(
                lambda: env.receiver.names("ConfigMap") == {"c", "while-forbidden"}
            )
            back = env.receiver.kind_notices("ConfigMap")[-1]
            assert back.available
            infos = [
                r.getMessage() for r in caplog.records if "is available again" in r.getMessage()
            ]
            assert infos == ["account acc: ConfigMap is available again: watching it"]
            assert len(_warnings(caplog)) == 1
            print(f"\nforbidden for {restored_at - revoked_at:.0f} s, back after "
                  f"{trio.current_time() - restored_at:.1f} s")  # fmt: skip


async def test_a_rediscovery_or_a_nudge_retries_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    account = AccountConfig(name="acc", kinds=("configmap",))
    nudge = Nudge()
    with trio.fail_after(3600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.server.set_grants("agent", NO_CONFIGMAPS)
            status: AccountWatchStatus = await env.nursery.start(
                lambda task_status: _run(
                    env, account, discovery_interval=45.0, nudge=nudge, task_status=task_status
                )
            )
            await env.receiver.wait_for(lambda: not _config_maps(status).available)
            state = _config_maps(status)
            await trio.sleep(100)  # retries at 10, 30 (20 s), 45 (rediscovery), 55, 90 (...)
            retries = state.retries[RetryReason.UNAVAILABLE]
            assert retries >= 5  # without the rediscovery: 4 (10, 30, 70 s)
            # A config reload nudges the account: the kind is tried at once.
            env.server.set_grants("agent", READ_ALL)
            before = trio.current_time()
            nudge.nudge()
            await env.receiver.wait_for(lambda: state.available)
            assert trio.current_time() - before < 1.0
            assert len(_warnings(caplog)) == 1


async def test_the_log_book_outlives_a_session(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # A reconnect restarts the account's watches: the server is told again (it may not have
    # heard), the operator is not.
    account = AccountConfig(name="acc", kinds=("configmap",))
    log_book = AvailabilityLog()
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.server.set_grants("agent", NO_CONFIGMAPS)
            for _ in range(2):
                with trio.CancelScope() as session:
                    status: AccountWatchStatus = await env.nursery.start(
                        lambda task_status: _run(
                            env, account, log_book=log_book, task_status=task_status
                        )
                    )
                    await env.receiver.wait_for(
                        lambda: not _config_maps(status).available  # noqa: B023
                    )
                    session.cancel()
            assert len(env.receiver.kind_notices("ConfigMap")) == 2
            assert len(_warnings(caplog)) == 1


async def test_a_kind_gone_from_discovery_is_reported_and_kept_in_scope(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    account = AccountConfig(name="acc", kinds=("widget", "pod"))
    with trio.fail_after(600):
        async with _open_env(tmp_path, autojump_clock) as env:
            env.sim.create(widget_crd())
            status: AccountWatchStatus = await env.nursery.start(
                lambda task_status: _run(
                    env, account, discovery_interval=5.0, task_status=task_status
                )
            )
            await env.receiver.wait_for(
                lambda: any(t.kind.kind == "Widget" for t in status.reflectors)
            )
            crds = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
            env.sim.delete(*crds, None, "widgets.example.com")
            await env.receiver.wait_for(
                lambda: not any(t.kind.kind == "Widget" for t in status.reflectors)
            )
            # Its watch may meet the 404 first (reported as such, at INFO: not forbidden).
            await env.receiver.wait_for(
                lambda: any(n.code == 0 for n in env.receiver.kind_notices("Widget"))
            )
            gone = env.receiver.kind_notices("Widget")[-1]
            assert (gone.available, gone.code, gone.reason) == (False, 0, GONE_FROM_DISCOVERY)
            scope = [n for n in env.receiver.notices if isinstance(n, ScopeNotice)][-1]
            assert ("example.com/v1", "Widget") in scope.kinds  # kept: reads say why
            # Its reflector's last events came before the notices (the channel is in order).
            assert isinstance(env.receiver.notices[-1], ScopeNotice | KindNotice)
