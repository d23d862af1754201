"""Bearer tokens (JWT) for agents, as the server's authenticator (server/_auth.py) checks them.

Claims: ``sub`` = the agent id, ``accounts`` = the account names the agent may register (the
server's default ``accountsClaim``; leave it out and any name is allowed), ``iat``/``nbf``/``exp``
(``exp`` is required by the server), and ``aud``/``iss`` when given (the server compares them
when its config names an audience/issuer). ``mint_token`` is pure apart from reading the clock.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

__all__ = ["ALGORITHMS", "TokenError", "mint_token", "parse_duration", "public_key_pem"]

ALGORITHMS = ("HS256", "RS256", "ES256")
_MIN_SECRET_BYTES = 32  # RFC 7518 3.2: an HS256 key at least as long as the hash
_MAX_LIFETIME = 366 * 86400
_DURATION = re.compile(r"(\d+)\s*(s|m|h|d)")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class TokenError(ValueError):
    """Bad input for a token: a duration, a key, an algorithm, an account list."""


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``24h``, ``7d``, ``1h30m`` or plain seconds -> seconds (> 0)."""
    value = text.strip().lower()
    if value.isdigit():
        seconds = int(value)
    else:
        parts = _DURATION.findall(value)
        if not parts or _DURATION.sub("", value).strip():
            raise TokenError(f"expected a duration like 24h, 30m, 7d or 3600, got {text!r}")
        seconds = sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)
    if not 0 < seconds <= _MAX_LIFETIME:
        raise TokenError(f"a token lifetime must be between 1s and 366d, got {text!r}")
    return seconds


def _signing_key(algorithm: str, secret: str | None, private_key_pem: bytes | None) -> Any:
    if algorithm not in ALGORITHMS:
        raise TokenError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if algorithm == "HS256":
        if not secret:
            raise TokenError("HS256 needs a shared secret (--secret or --secret-file)")
        if len(secret.encode()) < _MIN_SECRET_BYTES:
            raise TokenError(
                f"the shared secret is {len(secret.encode())} bytes; use at least "
                f"{_MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)"
            )
        return secret
    if not private_key_pem:
        raise TokenError(f"{algorithm} needs a private key (--private-key PEM file)")
    try:
        key = serialization.load_pem_private_key(private_key_pem, password=None)
    except (ValueError, TypeError) as exc:
        raise TokenError(f"the private key is not an unencrypted PEM key: {exc}") from exc
    wanted = rsa.RSAPrivateKey if algorithm == "RS256" else ec.EllipticCurvePrivateKey
    if not isinstance(key, wanted):
        raise TokenError(f"{algorithm} needs an {'RSA' if algorithm == 'RS256' else 'EC'} key")
    return key


def public_key_pem(private_key_pem: bytes) -> bytes:
    """The public half of a PEM private key (for the server's ``publicKeyFiles``)."""
    key = serialization.load_pem_private_key(private_key_pem, password=None)
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def mint_token(
    *,
    agent_id: str,
    accounts: Sequence[str] | None,
    expires_in: int,
    algorithm: str = "HS256",
    secret: str | None = None,
    private_key_pem: bytes | None = None,
    audience: str | None = None,
    issuer: str | None = None,
    now: float | None = None,
) -> str:
    """A signed JWT for ``agent_id``; ``accounts`` None = no accounts claim (any account).

    Raises TokenError for bad input.
    """
    if not agent_id.strip():
        raise TokenError("--agent-id must not be empty")
    if accounts is not None:
        bad = [a for a in accounts if not a or a != a.strip() or "," in a]
        if bad or not accounts:
            raise TokenError(f"--accounts must be a comma-separated list of names, got {accounts}")
    key = _signing_key(algorithm, secret, private_key_pem)
    issued = int(now if now is not None else time.time())
    claims: dict[str, Any] = {
        "sub": agent_id,
        "iat": issued,
        "nbf": issued,
        "exp": issued + expires_in,
    }
    if accounts is not None:
        claims["accounts"] = list(accounts)
    if audience:
        claims["aud"] = audience
    if issuer:
        claims["iss"] = issuer
    return jwt.encode(claims, key, algorithm=algorithm)
