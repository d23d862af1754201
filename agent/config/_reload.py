"""Live reload of the config file, and the account diff that tells the agent what to restart.

Theory of operation. A mounted ConfigMap is a symlink chain: ``kubesvc.yaml ->
..data/kubesvc.yaml``, ``..data -> ..2026_11_21_23_30_00.123``; an update writes a new
timestamped folder and swaps ``..data`` atomically. So every poll (about once a second) resolves
the symlinks again and compares (real path, inode, size, mtime, ctime); when any of them moved,
the file is read and its SHA-256 compared, and only new content is parsed. Valid new content
whose Config differs from the running one is handed to ``on_change``; an invalid file is
reported once (one log line with the error, plus ``on_error``) and the running config kept.
A missing file (deleted, or caught mid-swap) is treated the same way: reported, config kept.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import trio

from .._errors import ConfigError
from ._load import MAX_CONFIG_BYTES, parse_config
from ._schema import AccountConfig, Config

__all__ = ["AccountsDiff", "diff_accounts", "diff_config", "watch_config"]

log = logging.getLogger("agent.config")

POLL_INTERVAL = 1.0


class AccountsDiff(NamedTuple):
    """What a config change means for the accounts: start ``added``, stop ``removed``,
    restart ``changed`` (the new configs). Each in the order of the new (or old) file."""

    added: tuple[AccountConfig, ...]
    removed: tuple[AccountConfig, ...]
    changed: tuple[AccountConfig, ...]

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def diff_accounts(old: Sequence[AccountConfig], new: Sequence[AccountConfig]) -> AccountsDiff:
    """Compare two account lists by name. Pure.

    An account whose any option differs is ``changed`` (its watches restart with the new
    config); identical accounts are left out. Options outside ``kubernetes.accounts[]`` that
    affect every client (``kubernetes.noProxy``, ``retries``, ``timeoutSeconds``) are not
    seen here: the caller restarts all accounts when those change.
    """
    old_by_name = {account.name: account for account in old}
    new_names = {account.name for account in new}
    added = tuple(account for account in new if account.name not in old_by_name)
    changed = tuple(
        account
        for account in new
        if account.name in old_by_name and old_by_name[account.name] != account
    )
    removed = tuple(account for account in old if account.name not in new_names)
    return AccountsDiff(added, removed, changed)


def diff_config(old: Config, new: Config) -> AccountsDiff:
    """Like :func:`diff_accounts`, but an account also counts as ``changed`` when an option
    outside ``accounts[]`` that shapes every account's client or watches changed
    (``kubernetes.*`` such as ``noProxy``, ``retries``, ``stripManagedFields``, and
    ``timeoutSeconds``). Pure."""
    diff = diff_accounts(old.kubernetes.accounts, new.kubernetes.accounts)
    shared_old = (replace(old.kubernetes, accounts=()), old.timeout_seconds)
    shared_new = (replace(new.kubernetes, accounts=()), new.timeout_seconds)
    if shared_old == shared_new:
        return diff
    added = {account.name for account in diff.added}
    kept = tuple(account for account in new.kubernetes.accounts if account.name not in added)
    return AccountsDiff(diff.added, diff.removed, kept)


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What a cheap stat tells about the file; a change means "read it again"."""

    real_path: str
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int


def _stamp(path: str) -> _Stamp:
    real = os.path.realpath(path)
    st = os.stat(real)
    return _Stamp(real, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _read(path: str) -> tuple[_Stamp, bytes]:
    # Stat before and after: a write between them shows as a stamp that moves on the next poll.
    stamp = _stamp(path)
    with open(stamp.real_path, "rb") as file:
        data = file.read(MAX_CONFIG_BYTES + 1)
    return stamp, data


async def watch_config(
    path: str | os.PathLike[str],
    on_change: Callable[[Config], Awaitable[None]],
    *,
    on_error: Callable[[ConfigError], None] | None = None,
    poll_interval: float = POLL_INTERVAL,
    task_status: trio.TaskStatus[Config] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Load ``path``, report it through ``task_status.started(config)``, then watch it forever.

    ``on_change(new_config)`` is awaited for every valid new content whose Config differs from
    the running one (it may be a memory channel's ``send``); the watcher waits for it, so a slow
    consumer delays the next poll rather than queueing configs. ``on_error(error)`` is called
    once per distinct invalid content (or missing file).

    Raises ConfigError before ``started`` when the initial file is invalid; never afterwards.
    """
    name = os.fspath(path)
    try:
        stamp, data = await trio.to_thread.run_sync(_read, name)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", file=name) from exc
    running = parse_config(data, source=name)
    for option in running.ignored_options:
        log.warning("%s: ignoring unknown option %s", name, option)
    digest = hashlib.sha256(data).digest()
    reported: bytes | None = None  # the digest (or b"missing") of the last bad content reported
    task_status.started(running)

    def report(error: ConfigError, key: bytes) -> None:
        nonlocal reported
        if reported == key:
            return
        reported = key
        log.error("config reload failed, keeping the running configuration: %s", error)
        if on_error is not None:
            on_error(error)

    while True:
        await trio.sleep(poll_interval)
        try:
            new_stamp = await trio.to_thread.run_sync(_stamp, name)
            if new_stamp == stamp:
                continue
            new_stamp, data = await trio.to_thread.run_sync(_read, name)
        except OSError as exc:
            report(
                ConfigError(f"cannot read the config file: {exc.strerror or exc}", file=name),
                b"missing",
            )
            stamp = _Stamp("", -1, -1, -1, -1)  # read again as soon as it is back
            continue
        stamp = new_stamp
        new_digest = hashlib.sha256(data).digest()
        if new_digest == digest:
            reported = None  # back to the running content: report the next problem again
            continue
        try:
            config = parse_config(data, source=name)
        except ConfigError as exc:
            report(exc, new_digest)
            continue
        digest, reported = new_digest, None
        if config == running:
            continue
        for option in config.ignored_options:
            log.warning("%s: ignoring unknown option %s", name, option)
        log.info("config %s changed: %s", name, _summary(running, config))
        running = config
        await on_change(config)


def _summary(old: Config, new: Config) -> str:
    diff = diff_accounts(old.kubernetes.accounts, new.kubernetes.accounts)
    if not diff:
        return "accounts unchanged"
    parts = []
    for label, accounts in zip(("added", "removed", "changed"), diff, strict=True):
        if accounts:
            parts.append(f"{label} {', '.join(a.name for a in accounts)}")
    return "accounts " + "; ".join(parts)
