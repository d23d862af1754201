"""``kubesvc token``: mint the bearer token (JWT) an agent presents to the server.

    kubesvc token --agent-id prod-1 --accounts prod-east,prod-west --expires-in 30d \\
        --secret-file jwt.secret
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ._tokens import ALGORITHMS, TokenError, mint_token, parse_duration


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "token",
        help="mint a JWT for an agent (its id, allowed accounts and expiry)",
        description=(
            "Print a JWT the server accepts (grpc.auth.jwt): sub = the agent id, accounts = the "
            "account names it may register, exp = now + --expires-in. Sign it with the server's "
            "shared secret (HS256) or with a private key whose public half the server lists "
            "in publicKeyFiles (RS256/ES256)."
        ),
    )
    parser.add_argument("--agent-id", required=True, help="the agent's id (the token's sub)")
    parser.add_argument(
        "--accounts",
        default=None,
        help="comma-separated account names the agent may register (default: no accounts "
        "claim, so any name)",
    )
    parser.add_argument(
        "--expires-in", default="24h", help="lifetime: 3600, 90m, 24h, 30d (default: %(default)s)"
    )
    key = parser.add_mutually_exclusive_group(required=True)
    key.add_argument("--secret", help="the HS256 shared secret (visible in `ps`; prefer a file)")
    key.add_argument("--secret-file", help="a file holding the HS256 shared secret")
    key.add_argument("--private-key", help="a PEM private key file for RS256 or ES256")
    parser.add_argument(
        "--algorithm",
        choices=ALGORITHMS,
        default=None,
        help="HS256 with a secret (the default); RS256 or ES256 with --private-key",
    )
    parser.add_argument("--audience", default=None, help="the aud claim (grpc.auth.jwt.audience)")
    parser.add_argument("--issuer", default=None, help="the iss claim (grpc.auth.jwt.issuer)")
    parser.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    secret = args.secret
    if args.secret_file:
        secret = Path(args.secret_file).read_text(encoding="utf-8").strip()
    private_key = Path(args.private_key).read_bytes() if args.private_key else None
    algorithm = args.algorithm or ("HS256" if private_key is None else "ES256")
    if private_key is not None and algorithm == "HS256":
        raise TokenError("--private-key signs RS256 or ES256; pick one with --algorithm")
    if private_key is None and algorithm != "HS256":
        raise TokenError(f"{algorithm} needs --private-key")
    accounts = None
    if args.accounts is not None:
        accounts = [a.strip() for a in args.accounts.split(",")]
    token = mint_token(
        agent_id=args.agent_id,
        accounts=accounts,
        expires_in=parse_duration(args.expires_in),
        algorithm=algorithm,
        secret=secret,
        private_key_pem=private_key,
        audience=args.audience,
        issuer=args.issuer,
    )
    print(token)
    return 0
