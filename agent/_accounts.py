"""The agent's accounts: one Kubernetes client per account, its identity, its watches.

``AccountSet`` owns a task per configured account that keeps the account's ``KubeClient``
open and learns the cluster's identity (host, serving-certificate fingerprint, version) with
backoff. The link asks it for the accounts to announce in Hello (those whose identity is
known) and runs a PRIMARY account's watches through it. A config reload calls ``update``:
added accounts start, removed ones stop, changed ones restart under their new settings.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import trio
import yaml

from budget import EventSender
from wire import messages

from ._backoff import Backoff
from ._errors import AgentError, ConfigError
from ._log_context import account_logs
from .config import AccountConfig, Config, diff_config, parse_config
from .kube import ClusterIdentity, KubeClient, open_kube_client
from .link import ResumeKey
from .watch import (
    AccountWatchStatus,
    AvailabilityLog,
    ListCaps,
    Nudge,
    ReflectorSettings,
    run_account,
)

log = logging.getLogger("agent.accounts")

AccountsChangedHook = Callable[[Sequence[messages.AccountInfo], Sequence[str]], Awaitable[None]]


@dataclass(slots=True)
class AccountState:
    """One account as the agent holds it (admin views read this)."""

    config: AccountConfig
    client: KubeClient | None = None
    identity: ClusterIdentity | None = None
    error: str = ""
    watch: AccountWatchStatus | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    # Outlive the account's sessions (not a config change): what was logged of its kinds'
    # availability, and the wake-up of its unavailable kinds' retries.
    log_book: AvailabilityLog = field(default_factory=AvailabilityLog)
    nudge: Nudge = field(default_factory=Nudge)


class AccountSet:
    """The configured accounts; see the module docstring."""

    def __init__(
        self,
        config: Config,
        *,
        environ: Mapping[str, str] = os.environ,
        on_change: AccountsChangedHook | None = None,
    ) -> None:
        self._config = config
        self._environ = environ
        self.on_change = on_change
        self._caps = ListCaps(
            total_budget=config.tasks.total_budget,
            budget_per_account=config.tasks.budget_per_account,
        )
        self._settings = ReflectorSettings(
            strip_managed_fields=config.kubernetes.strip_managed_fields
        )
        self.accounts: dict[str, AccountState] = {}
        self._nursery: trio.Nursery | None = None

    # -- lifetime --------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold every account's client open until cancelled.

        ``kubernetes.cacheGroupSize`` / ``cacheGroupDelayMs`` start the accounts in groups.
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await self._start_all(self._config.kubernetes.accounts)
            await trio.sleep_forever()

    async def _start_all(self, accounts: Sequence[AccountConfig]) -> None:
        group = self._config.kubernetes.cache_group_size
        delay = self._config.kubernetes.cache_group_delay_ms / 1000
        for index, account in enumerate(accounts):
            if group > 0 and index > 0 and index % group == 0 and delay > 0:
                await trio.sleep(delay)
            self._start(account)

    def _start(self, account: AccountConfig) -> None:
        assert self._nursery is not None
        state = AccountState(account)
        self.accounts[account.name] = state
        self._nursery.start_soon(self._hold_client, state)

    def _stop(self, name: str) -> None:
        state = self.accounts.pop(name, None)
        if state is not None:
            state.scope.cancel()

    async def update(self, config: Config) -> None:
        """Apply a reloaded config: start, stop and restart accounts, then tell the server."""
        diff = diff_config(self._config, config)
        if (config.clouddriver, config.budget, config.tasks, config.idle) != (
            self._config.clouddriver,
            self._config.budget,
            self._config.tasks,
            self._config.idle,
        ):
            log.warning(
                "clouddriver.*, budget.*, tasks.* and idle.* changes apply at the next restart"
            )
        self._config = config
        self._settings = ReflectorSettings(
            strip_managed_fields=config.kubernetes.strip_managed_fields
        )
        for account in diff.removed:
            log.info(
                "account %s removed from the config: stopping it",
                account.name,
                extra={"account": account.name},
            )
            self._stop(account.name)
        for account in diff.changed:
            log.info(
                "account %s changed in the config: restarting it",
                account.name,
                extra={"account": account.name},
            )
            self._stop(account.name)
        # Removed and changed accounts stop streaming now (their clients are closing); a
        # changed one is announced again once its new client has read the cluster's identity,
        # and the server judges it afresh (it may be another cluster under the same name).
        stopped = [account.name for account in (*diff.removed, *diff.changed)]
        if stopped and self.on_change is not None:
            await self.on_change([], stopped)
        started = {account.name for account in (*diff.changed, *diff.added)}
        for account in (*diff.changed, *diff.added):
            log.info("account %s: starting it", account.name, extra={"account": account.name})
            self._start(account)
        # The others go on; a kind they could not read is tried again now (the reload may
        # come with new RBAC, say), not at its next retry.
        for name, state in self.accounts.items():
            if name not in started:
                state.nudge.nudge()

    async def _hold_client(self, state: AccountState) -> None:
        backoff = Backoff(base=1.0, max_delay=60.0)
        # The client's own tasks (HTTP/2 connections) start in here: their lines name it too.
        with state.scope, account_logs(state.config.name):
            while True:
                try:
                    async with open_kube_client(
                        state.config,
                        self._config.kubernetes,
                        timeout_seconds=self._config.timeout_seconds,
                        environ=self._environ,
                    ) as client:
                        state.client = client
                        # Under tasks.totalBudget, like the initial lists: an agent of 1,000
                        # accounts would otherwise dial and handshake with all of them at
                        # once, and behind one proxy the handshakes time out together.
                        async with self._caps.total:
                            state.identity = await client.identity()
                        state.error = ""
                        backoff.reset()
                        log.info(
                            "account %s: cluster %s (%s)",
                            state.config.name,
                            state.identity.host,
                            state.identity.version.get("gitVersion", "unknown version"),
                        )
                        if self.on_change is not None:
                            await self.on_change([self.account_info(state)], [])
                        await trio.sleep_forever()
                except AgentError as exc:
                    state.client = None
                    state.identity = None
                    state.error = str(exc)
                    delay = backoff.next_delay()
                    log.warning(
                        "account %s: %s (retrying in %.0f s)", state.config.name, exc, delay
                    )
                    await trio.sleep(delay)

    # -- what the link needs ----------------------------------------------------------------

    async def add_dynamic(self, definition: Mapping[str, Any]) -> str:
        """Start (or restart) an account the server pushed (Armory's dynamic accounts).

        ``definition`` is a ``kubernetes.accounts[]`` entry as JSON, usually with
        ``kubeconfigContents``. It is validated like the config file; an account of the same
        name from the file is never replaced. Returns what was done; raises ConfigError.
        """
        document = json.dumps({"kubernetes": {"accounts": [dict(definition)]}})
        account = parse_config(document, source="dynamic account").kubernetes.accounts[0]
        _refuse_local_credentials(account)
        if any(a.name == account.name for a in self._config.kubernetes.accounts):
            raise ConfigError(
                f"account {account.name!r} is defined in the config file; a dynamic account "
                "cannot replace it",
                path="name",
            )
        action = "restarted" if account.name in self.accounts else "started"
        self._stop(account.name)
        if action == "restarted" and self.on_change is not None:
            await self.on_change([], [account.name])  # stop streaming with the old client
        self._start(account)
        log.info("dynamic account %s %s", account.name, action, extra={"account": account.name})
        return f"dynamic account {account.name} {action}"

    def client_for(self, name: str) -> KubeClient | None:
        """The account's open client (for the operation executor), or None."""
        state = self.accounts.get(name)
        return state.client if state is not None else None

    async def hello_accounts(self) -> list[messages.AccountInfo]:
        """The accounts whose cluster is known, as Hello announces them."""
        return [
            self.account_info(state)
            for state in self.accounts.values()
            if state.identity is not None
        ]

    def account_info(self, state: AccountState) -> messages.AccountInfo:
        identity = state.identity
        assert identity is not None
        return messages.AccountInfo(
            name=state.config.name,
            kube_host=identity.host,
            cert_fingerprint=identity.cert_fingerprint,
            kube_version=str(identity.version.get("gitVersion", "")),
            properties_json=json.dumps(_properties(state.config), sort_keys=True),
        )

    def max_resume_age_ms(self, name: str) -> int:
        state = self.accounts.get(name)
        return state.config.max_resumable_resource_age_ms if state else 0

    async def run_watches(
        self,
        name: str,
        resume: Mapping[ResumeKey, str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Watch the account ``name`` into ``send`` until cancelled (the link's runner)."""
        state = self.accounts.get(name)
        if state is None or state.client is None:
            log.warning(
                "account %s was assigned but is not running here", name, extra={"account": name}
            )
            task_status.started()
            return
        state.watch = AccountWatchStatus(name)
        task_status.started()
        with account_logs(name):  # every line of its watches names it (agent/_log_context.py)
            await run_account(
                state.config,
                state.client,
                send,
                caps=self._caps,
                settings=self._settings,
                resume=resume,
                status=state.watch,
                discovery_interval=self._config.kubernetes.discovery_interval_seconds,
                budget_capacity=self._config.budget.bytes,
                log_book=state.log_book,
                nudge=state.nudge,
            )


# What the server may know of an account: never credentials (no kubeconfig, no token).
_SHARED_FIELDS = (
    "kinds",
    "omit_kinds",
    "namespaces",
    "omit_namespaces",
    "only_namespaced_resources",
    "permissions",
    "max_resumable_resource_age_ms",
    "metrics",
    "only_spinnaker_managed",
    "shard",  # the part of the cluster this agent serves (docs/sharding.md); None: all of it
)


def _properties(account: AccountConfig) -> dict[str, Any]:
    fields = asdict(account)
    return {key: fields[key] for key in _SHARED_FIELDS if key in fields}


# What a kubeconfig pushed by the server may not contain: each would make the agent run a
# program or read a file of the agent's own machine on the server's say-so.
_FORBIDDEN_USER_KEYS = ("exec", "auth-provider", "tokenFile", "client-certificate", "client-key")
_FORBIDDEN_CLUSTER_KEYS = ("certificate-authority",)


def _refuse_local_credentials(account: AccountConfig) -> None:
    """A dynamic account carries its credentials inline (``kubeconfigContents`` with data
    fields and tokens) or not at all. Raises ConfigError naming what was refused."""
    if account.kube_config_file or account.service_account:
        raise ConfigError(
            "a dynamic account must carry its kubeconfig inline (kubeconfigContents); "
            "kubeConfigFile and serviceAccount would use the agent's own files",
            path="kubeConfigFile" if account.kube_config_file else "serviceAccount",
        )
    if account.kubeconfig_contents is None:
        raise ConfigError("a dynamic account needs kubeconfigContents", path="name")
    try:
        kubeconfig = yaml.safe_load(account.kubeconfig_contents)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"kubeconfigContents is not YAML: {exc}", path="kubeconfigContents"
        ) from exc
    if not isinstance(kubeconfig, dict):
        raise ConfigError("kubeconfigContents is not a kubeconfig", path="kubeconfigContents")
    for section, inner, forbidden in (
        ("users", "user", _FORBIDDEN_USER_KEYS),
        ("clusters", "cluster", _FORBIDDEN_CLUSTER_KEYS),
    ):
        for index, item in enumerate(kubeconfig.get(section) or []):
            body = item.get(inner) if isinstance(item, dict) else None
            for key in forbidden:
                if isinstance(body, dict) and key in body:
                    raise ConfigError(
                        f"{key!r} is not accepted in a dynamic account (it would run a "
                        "program or read a file on the agent); use inline data fields",
                        path=f"kubeconfigContents.{section}[{index}].{inner}.{key}",
                    )
