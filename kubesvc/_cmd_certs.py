"""``kubesvc certs init DIR``: a CA, a server certificate and agent client certificates for mTLS.

kubesvc certs init certs/ --san kubesvc.spinnaker.svc --san localhost --agents prod-1 prod-2
"""

from __future__ import annotations

import argparse
from typing import Any

from ._certs import DEFAULT_LEAF_DAYS, DEFAULT_SANS, write_bundle


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "certs",
        help="make the certificates for mTLS between agents and the server",
        description="Certificates for mutual TLS between agents and the server.",
    )
    commands = parser.add_subparsers(title="certs commands", metavar="COMMAND")
    init = commands.add_parser(
        "init",
        help="write a CA, a server certificate and agent client certificates into DIR",
        description=(
            "Write ca.crt/ca.key, server.crt/server.key and agent-NAME.crt/agent-NAME.key into "
            "DIR (ECDSA P-256, keys unencrypted PKCS#8 PEM, mode 0600). An existing CA in DIR "
            "is reused, so running it again adds agents or renews certificates."
        ),
    )
    init.add_argument("dir", metavar="DIR", help="the folder to write into (created if missing)")
    init.add_argument(
        "--san",
        action="append",
        default=None,
        metavar="NAME",
        help="a DNS name or IP address of the server; repeat it "
        f"(default: {', '.join(DEFAULT_SANS)})",
    )
    init.add_argument(
        "--agents",
        nargs="+",
        default=["agent"],
        metavar="NAME",
        help="agent names to issue client certificates for (CN=NAME; default: agent)",
    )
    init.add_argument(
        "--days",
        type=int,
        default=DEFAULT_LEAF_DAYS,
        help="how long the server and agent certificates are valid (default: %(default)s; "
        "a new CA lives 5 times as long)",
    )
    init.set_defaults(func=_init)
    parser.set_defaults(func=lambda _args: _usage(parser))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _init(args: argparse.Namespace) -> int:
    written = write_bundle(
        args.dir, sans=args.san or DEFAULT_SANS, agents=args.agents, days=args.days
    )
    for path in written:
        print(path)
    return 0
