"""The caps on concurrent initial lists: ``tasks.totalBudget`` and ``tasks.budgetPerAccount``.

A full list is the expensive moment of a reflector (the API server reads a whole kind from
etcd, the agent parses every page), so the number that run at once is capped twice, as
Armory's agent does: across the process and per account. Both caps are held for the whole
list (or, for a streaming list, until its initial events end), then released; a watch holds
neither. An account's discoveries run under both caps too, and its first connection (the
cluster's identity) under the total cap, so an agent starting 1,000 accounts opens at most
``totalBudget`` of them at once.

The per-account cap is taken first and the total second, always in this order, so two
reflectors can never each hold the cap the other waits for.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio

__all__ = ["AccountListCaps", "ListCaps"]


class ListCaps:
    """The process-wide cap plus one per-account cap per account name."""

    def __init__(self, *, total_budget: int = 1000, budget_per_account: int = 50) -> None:
        if total_budget < 1 or budget_per_account < 1:
            raise ValueError(
                "tasks.totalBudget and tasks.budgetPerAccount must be at least 1, got "
                f"{total_budget} and {budget_per_account}"
            )
        self._total = trio.CapacityLimiter(total_budget)
        self._per_account = budget_per_account
        self._accounts: dict[str, AccountListCaps] = {}

    @property
    def total(self) -> trio.CapacityLimiter:
        return self._total

    def for_account(self, account: str) -> AccountListCaps:
        """The caps one account's reflectors share (created on first use, then reused)."""
        caps = self._accounts.get(account)
        if caps is None:
            caps = AccountListCaps(self._total, trio.CapacityLimiter(self._per_account))
            self._accounts[account] = caps
        return caps


class AccountListCaps:
    """Both caps as one: ``acquire`` takes the account's then the total, ``release`` both."""

    def __init__(self, total: trio.CapacityLimiter, account: trio.CapacityLimiter) -> None:
        self.total = total
        self.account = account

    async def acquire(self, holder: object) -> None:
        """Wait for both caps on behalf of ``holder``; on cancellation nothing is held."""
        await self.account.acquire_on_behalf_of(holder)
        try:
            await self.total.acquire_on_behalf_of(holder)
        except BaseException:
            self.account.release_on_behalf_of(holder)
            raise

    def release(self, holder: object) -> None:
        """Give back both caps held by ``holder``."""
        self.total.release_on_behalf_of(holder)
        self.account.release_on_behalf_of(holder)

    @asynccontextmanager
    async def initial_list(self) -> AsyncIterator[None]:
        """Hold both caps for the body of the ``async with``."""
        holder = object()
        await self.acquire(holder)
        try:
            yield
        finally:
            self.release(holder)
