"""``run_doctor``: the config loaded as ``kubesvc agent`` loads it, every account checked (a
few at a time), then the link to the server; one Report.

Must run inside ``wire.open_loop()`` (the server probe speaks gRPC through wire's bridge).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime

import trio

import agent

from ._findings import Finding, Report, Verdict
from ._kube import check_account
from ._link import check_server

__all__ = ["ACCOUNTS_AT_ONCE", "DEFAULT_SECONDS", "run_doctor"]

#: Accounts checked at once: enough to get through 200 clusters quickly, few enough not to
#: look like a storm to a shared API server or proxy.
ACCOUNTS_AT_ONCE = 8
#: Each network step's deadline (a TCP connect, a TLS handshake, a request's answer).
DEFAULT_SECONDS = 10.0


async def run_doctor(
    config_path: str,
    *,
    seconds: float = DEFAULT_SECONDS,
    accounts: frozenset[str] | None = None,
    server: bool = True,
    now: datetime | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Report:
    """Check the agent config at ``config_path``: its accounts (only those named in
    ``accounts`` when given) and, with ``server``, the link to the server.

    A config the agent would refuse is one FAIL with the loader's own message (file, path,
    problem). Never raises for what it checks.
    """
    try:
        config = await trio.to_thread.run_sync(agent.load_config, config_path)
    except agent.ConfigError as exc:
        return Report.of(
            [
                Finding(
                    "-",
                    "config",
                    Verdict.FAIL,
                    str(exc),
                    "fix the file at the place named: `kubesvc agent` refuses it the same way",
                )
            ]
        )
    moment = now or datetime.now(UTC)
    chosen = [
        (index, account)
        for index, account in enumerate(config.kubernetes.accounts)
        if accounts is None or account.name in accounts
    ]
    results: dict[int, list[Finding]] = {}
    limiter = trio.CapacityLimiter(ACCOUNTS_AT_ONCE)

    async def one(index: int, account: agent.AccountConfig) -> None:
        async with limiter:
            try:
                results[index] = await check_account(
                    index, account, config.kubernetes, now=moment, seconds=seconds, environ=environ
                )
            except Exception as exc:  # one account's surprise must not hide the others'
                results[index] = [
                    Finding(
                        account.name,
                        "doctor",
                        Verdict.FAIL,
                        f"the checks of this account stopped: {type(exc).__name__}: {exc}",
                        "a doctor bug or an unexpected answer: report it with this line",
                    )
                ]

    findings: list[Finding] = [
        Finding(
            "-",
            "config",
            Verdict.OK,
            f"{config_path}: {len(config.kubernetes.accounts)} account(s)",
        )
    ]
    if not config.kubernetes.accounts:
        findings[0] = Finding(
            "-",
            "config",
            Verdict.WARN,
            f"{config_path}: no kubernetes.accounts (the agent waits for dynamic accounts)",
            "add kubernetes.accounts[] entries, or push dynamic accounts from the server",
        )
    missing = sorted((accounts or frozenset()) - {a.name for a in config.kubernetes.accounts})
    for name in missing:
        findings.append(
            Finding(name, "config", Verdict.FAIL, f"no account {name!r} in {config_path}")
        )
    async with trio.open_nursery() as nursery:
        for index, account in chosen:
            nursery.start_soon(one, index, account)
    for index, _ in chosen:
        findings += results[index]
    if server:
        findings += await check_server(config, now=moment, seconds=seconds)
    return Report.of(findings)
