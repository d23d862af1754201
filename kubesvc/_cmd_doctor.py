"""``kubesvc doctor --config kubesvc.yaml``: check the agent's accounts and its server link,
print one line per check (or ``--json``), exit 1 when something blocks syncing."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Any

import trio

import agent
import wire

from .doctor import DEFAULT_SECONDS, Report, render_json, render_table, run_doctor


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check the agent's config: kubeconfigs, API servers, RBAC per kind, credentials, "
        "and the link to the server",
        description=(
            "Check what the agent with this config needs: per account the kubeconfig, the "
            "credential and when it expires, the API server and its CA, which kinds may be "
            "listed and watched; then the server: reachable, TLS, the agent's token. One line "
            "per check with a verdict (OK, WARN, FAIL) and a fix. Exit status 1 when a check "
            "FAILs (something blocks syncing), else 0."
        ),
    )
    parser.add_argument(
        "-c",
        "--config",
        default=None,
        help="the agent's config file (default: $KUBESVC_CONFIG, else kubesvc.yaml)",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--account",
        action="append",
        default=None,
        metavar="NAME",
        help="check only this account (repeatable); the server link is checked too",
    )
    parser.add_argument(
        "--no-server", action="store_true", help="skip the checks of the link to the server"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_SECONDS,
        help="seconds each network step may take (default: %(default)s)",
    )
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    path = args.config or agent.default_config_path()

    async def main() -> Report:
        async with wire.open_loop():
            return await run_doctor(
                path,
                seconds=args.timeout,
                accounts=frozenset(args.account) if args.account else None,
                server=not args.no_server,
            )

    report = trio.run(functools.partial(main))
    if args.json:
        sys.stdout.write(render_json(report))
    else:
        sys.stdout.write(render_table(report, color=sys.stdout.isatty()))
    return report.exit_code
