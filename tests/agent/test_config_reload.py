"""Live reload: file edits and ConfigMap-style symlink swaps reach on_change; bad files do not."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import trio

from agent import (
    AccountConfig,
    Config,
    ConfigError,
    diff_accounts,
    diff_config,
    parse_config,
    watch_config,
)

from .._wait import Changes

POLL = 0.01  # real time: the watcher reads files in worker threads, where virtual time is unsafe


class _Errors(list[ConfigError]):
    """The errors ``on_error`` reported; ``wait`` returns once there is one."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = Changes()

    def report(self, error: ConfigError) -> None:
        self.append(error)
        self.changed.notify()

    async def wait(self) -> None:
        await self.changed.wait_for(lambda: bool(self), what="a config error reported")


def _accounts(*names: str, kinds: str = "[pod]") -> str:
    items = ", ".join(f"{{name: {name}, kinds: {kinds}}}" for name in names)
    return f"kubernetes: {{accounts: [{items}]}}\n"


class _ConfigMap:
    """The layout kubelet writes for a mounted ConfigMap: file -> ..data/file, ..data -> ..<ts>."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.version = 0

    @property
    def path(self) -> Path:
        return self.root / "kubesvc.yaml"

    def publish(self, text: str) -> None:
        self.version += 1
        folder = self.root / f"..2026_11_21_{self.version:04d}"
        folder.mkdir()
        (folder / "kubesvc.yaml").write_text(text)
        staging = self.root / "..data_tmp"
        staging.symlink_to(folder.name)
        os.replace(staging, self.root / "..data")  # the atomic swap
        if not self.path.is_symlink():
            self.path.symlink_to("..data/kubesvc.yaml")


async def _start(
    nursery: trio.Nursery, path: Path
) -> tuple[Config, trio.MemoryReceiveChannel[Config], _Errors]:
    send, receive = trio.open_memory_channel[Config](10)
    errors = _Errors()
    initial = await nursery.start(
        lambda task_status: watch_config(
            path, send.send, on_error=errors.report, poll_interval=POLL, task_status=task_status
        )
    )
    return initial, receive, errors


async def test_edits_reach_on_change_and_unchanged_content_does_not(tmp_path: Path) -> None:
    path = tmp_path / "kubesvc.yaml"
    path.write_text(_accounts("a", "b"))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            initial, changes, _ = await _start(nursery, path)
            assert [a.name for a in initial.kubernetes.accounts] == ["a", "b"]
            path.write_text(_accounts("a", "b") + "# a comment only\n")  # same Config
            path.write_text(_accounts("a", "c"))
            new = await changes.receive()
            assert [a.name for a in new.kubernetes.accounts] == ["a", "c"]
            await trio.sleep(10 * POLL)  # an observation window: ten more polls bring nothing
            with pytest.raises(trio.WouldBlock):
                changes.receive_nowait()
            nursery.cancel_scope.cancel()


async def test_a_configmap_symlink_swap_is_noticed(tmp_path: Path) -> None:
    cm = _ConfigMap(tmp_path)
    cm.publish(_accounts("a"))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            _, changes, _ = await _start(nursery, cm.path)
            cm.publish(_accounts("a", "b"))
            new = await changes.receive()
            assert [a.name for a in new.kubernetes.accounts] == ["a", "b"]
            nursery.cancel_scope.cancel()


async def test_an_invalid_file_is_reported_once_and_the_running_config_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cm = _ConfigMap(tmp_path)
    cm.publish(_accounts("a"))
    with trio.fail_after(10), caplog.at_level(logging.ERROR, logger="agent.config"):
        async with trio.open_nursery() as nursery:
            _, changes, errors = await _start(nursery, cm.path)
            cm.publish(_accounts("a", "b", kinds="deployment"))
            await errors.wait()
            await trio.sleep(10 * POLL)  # an observation window: ten more polls report nothing
            assert len(errors) == 1
            assert errors[0].path == "kubernetes.accounts[0].kinds"
            assert "keeping the running configuration" in caplog.text
            assert "expected a list of kind names, got 'deployment'" in caplog.text
            assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
            # Fixed again: the valid file goes through.
            cm.publish(_accounts("a", "b"))
            new = await changes.receive()
            assert [a.name for a in new.kubernetes.accounts] == ["a", "b"]
            nursery.cancel_scope.cancel()


async def test_a_missing_file_is_reported_and_the_config_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "kubesvc.yaml"
    path.write_text(_accounts("a"))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            _, changes, errors = await _start(nursery, path)
            path.unlink()
            await errors.wait()
            assert "cannot read the config file" in str(errors[0])
            path.write_text(_accounts("z"))
            new = await changes.receive()
            assert [a.name for a in new.kubernetes.accounts] == ["z"]
            nursery.cancel_scope.cancel()


async def test_an_invalid_initial_file_fails_before_started(tmp_path: Path) -> None:
    path = tmp_path / "kubesvc.yaml"
    path.write_text("tasks: {totalBudget: none}\n")

    async def ignore(config: Config) -> None:
        raise AssertionError("never called")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            with pytest.raises(ConfigError, match=r"tasks\.totalBudget"):
                await nursery.start(watch_config, path, ignore)


def test_diff_accounts() -> None:
    a, b, c = AccountConfig("a"), AccountConfig("b"), AccountConfig("c")
    b2 = AccountConfig("b", kinds=("pod",))
    diff = diff_accounts([a, b, c], [b2, c, AccountConfig("d")])
    added, removed, changed = diff
    assert [x.name for x in added] == ["d"]
    assert removed == (a,)
    assert changed == (b2,)
    assert not diff_accounts([a, b], [b, a])


def test_diff_config_restarts_every_account_when_shared_client_options_change() -> None:
    base = parse_config(_accounts("a", "b"), source="f")
    same = parse_config(_accounts("a", "b") + "tasks: {totalBudget: 5}\n", source="f")
    assert not diff_config(base, same)
    more = parse_config(_accounts("a", "b", "c"), source="f")
    assert [a.name for a in diff_config(base, more).added] == ["c"]
    assert not diff_config(base, more).changed
    no_proxy = parse_config(
        "kubernetes: {noProxy: true, accounts: [{name: a, kinds: [pod]}, {name: c}]}\n",
        source="f",
    )
    added, removed, changed = diff_config(base, no_proxy)
    assert [a.name for a in added] == ["c"]
    assert [a.name for a in removed] == ["b"]
    assert [a.name for a in changed] == ["a"]
    slower = parse_config(_accounts("a", "b") + "timeoutSeconds: 30\n", source="f")
    assert [a.name for a in diff_config(base, slower).changed] == ["a", "b"]
