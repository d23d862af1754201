"""kubesvc token: the server's own authenticator accepts the tokens, and refuses them when
expired, for another account or another audience."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import server
from kubesvc._certs import issue_ca
from kubesvc._tokens import TokenError, mint_token, parse_duration, public_key_pem

from .._procs import kubesvc_command, run

SECRET = "s" * 40


def _authenticator(**jwt: object) -> server.Authenticator:
    settings = server.JwtSettings(**{"secret": SECRET, "audience": "kubesvc", **jwt})  # type: ignore[arg-type]
    return server.Authenticator(server.AuthSettings(jwt=settings))


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_the_cli_token_is_accepted_with_its_accounts(tmp_path: Path) -> None:
    secret_file = tmp_path / "jwt.secret"
    secret_file.write_text(SECRET + "\n")
    out = run(
        kubesvc_command(
            "token",
            "--agent-id",
            "prod-1",
            "--accounts",
            "east,west",
            "--expires-in",
            "1h",
            "--secret-file",
            str(secret_file),
            "--audience",
            "kubesvc",
        ),
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    principal = _authenticator().authenticate(_bearer(out.stdout.strip()), None)
    assert principal.subject == "prod-1"
    assert principal.may_register("east")
    assert principal.may_register("west")
    assert not principal.may_register("prod-other")


def test_an_expired_token_is_refused() -> None:
    token = mint_token(
        agent_id="a",
        accounts=["k1"],
        expires_in=60,
        secret=SECRET,
        audience="kubesvc",
        now=time.time() - 3600,
    )
    with pytest.raises(server.AuthError, match="expired"):
        _authenticator().authenticate(_bearer(token), None)


def test_another_audience_or_secret_is_refused() -> None:
    token = mint_token(
        agent_id="a", accounts=["k1"], expires_in=60, secret=SECRET, audience="elsewhere"
    )
    with pytest.raises(server.AuthError, match="audience"):
        _authenticator().authenticate(_bearer(token), None)
    forged = mint_token(
        agent_id="a", accounts=["k1"], expires_in=60, secret="x" * 40, audience="kubesvc"
    )
    with pytest.raises(server.AuthError, match="signature"):
        _authenticator().authenticate(_bearer(forged), None)


def test_no_accounts_claim_allows_any_account() -> None:
    token = mint_token(
        agent_id="a", accounts=None, expires_in=60, secret=SECRET, audience="kubesvc"
    )
    assert _authenticator().authenticate(_bearer(token), None).may_register("anything")


@pytest.mark.parametrize("algorithm", ["ES256", "RS256"])
def test_private_key_tokens_verify_with_the_public_key(algorithm: str) -> None:
    if algorithm == "ES256":
        import datetime

        from kubesvc._certs import KeyPair

        pair: KeyPair = issue_ca(days=1, now=datetime.datetime.now(datetime.UTC))
        private = pair.key_pem
    else:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        private = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    token = mint_token(
        agent_id="a",
        accounts=["k1"],
        expires_in=60,
        algorithm=algorithm,
        private_key_pem=private,
        audience="kubesvc",
    )
    auth = _authenticator(
        algorithms=(algorithm,), secret="", public_keys=(public_key_pem(private).decode(),)
    )
    assert auth.authenticate(_bearer(token), None).may_register("k1")


def test_durations() -> None:
    assert parse_duration("24h") == 86400
    assert parse_duration("1h30m") == 5400
    assert parse_duration("7d") == 7 * 86400
    assert parse_duration("3600") == 3600
    for bad in ("", "soon", "0", "5y", "400d"):
        with pytest.raises(TokenError):
            parse_duration(bad)


def test_short_secrets_and_wrong_keys_are_refused() -> None:
    with pytest.raises(TokenError, match="at least 32"):
        mint_token(agent_id="a", accounts=None, expires_in=60, secret="short")
    with pytest.raises(TokenError, match="private key"):
        mint_token(agent_id="a", accounts=None, expires_in=60, algorithm="ES256")
