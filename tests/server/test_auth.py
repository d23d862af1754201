"""Authentication: JWT (HS256, RS256, ES256; expiry, audience, leeway, accounts claim) and
client-certificate subject filters, unit-level and through the real gRPC endpoint with mTLS."""

from __future__ import annotations

import functools
import re
import ssl
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
import trio
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

import wire
from server import (
    Authenticator,
    AuthError,
    AuthSettings,
    JwtSettings,
    RunningServer,
    parse_server_config,
    run_server,
)

from ..wire._certs import CertificateAuthority, client_context
from ..wire._loop import in_loop
from .test_grpc import account, hello, receive_kind


async def say_hello(port: int, context: ssl.SSLContext) -> None:
    async with wire.open_connection("127.0.0.1", port, ssl_context=context) as s:
        await s.send(hello(account("third")))
        await s.receive()


def _pem_pair(key: Any) -> tuple[Any, str]:
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key, public.decode()


def _claims(**extra: Any) -> dict[str, Any]:
    return {"sub": "agent", "aud": "kubesvc", "exp": int(time.time()) + 60, **extra}


@pytest.mark.parametrize(
    ("algorithm", "make_key"),
    [
        ("RS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
        ("ES256", lambda: ec.generate_private_key(ec.SECP256R1())),
    ],
)
def test_public_key_tokens(algorithm: str, make_key: Any) -> None:
    key, public = _pem_pair(make_key())
    _, other_public = _pem_pair(make_key())
    auth = Authenticator(
        AuthSettings(
            JwtSettings((algorithm,), public_keys=(other_public, public), audience="kubesvc")
        )
    )
    good = jwt.encode(_claims(accounts=["prod", "dev"]), key, algorithm=algorithm)
    principal = auth.authenticate({"authorization": f"Bearer {good}"}, None)
    assert principal.subject == "agent"
    assert principal.may_register("prod")
    assert not principal.may_register("staging")
    forged = jwt.encode(_claims(), "a-guessed-shared-secret-of-32-bytes!!", algorithm="HS256")
    with pytest.raises(AuthError, match=r"signature|rejected") as info:
        auth.authenticate({"authorization": f"Bearer {forged}"}, None)
    assert info.value.status == "UNAUTHENTICATED"


def test_leeway_and_claims() -> None:
    secret = "shared-secret-shared-secret-shared-secret"
    auth = Authenticator(AuthSettings(JwtSettings(secret=secret, leeway_seconds=30)))
    just_expired = jwt.encode(_claims(exp=int(time.time()) - 10), secret, algorithm="HS256")
    assert auth.authenticate({"authorization": f"Bearer {just_expired}"}, None).subject == "agent"
    long_expired = jwt.encode(_claims(exp=int(time.time()) - 100), secret, algorithm="HS256")
    with pytest.raises(AuthError, match="expired"):
        auth.authenticate({"authorization": f"Bearer {long_expired}"}, None)
    no_exp = jwt.encode({"sub": "x"}, secret, algorithm="HS256")
    with pytest.raises(AuthError, match="'exp'"):
        auth.authenticate({"authorization": f"Bearer {no_exp}"}, None)
    spaced = jwt.encode(_claims(accounts="a, b"), secret, algorithm="HS256")
    principal = auth.authenticate({"authorization": f"Bearer {spaced}"}, None)
    assert principal.allowed_accounts == frozenset({"a", "b"})
    bad_claim = jwt.encode(_claims(accounts=[1]), secret, algorithm="HS256")
    with pytest.raises(AuthError, match="list of account names"):
        auth.authenticate({"authorization": f"Bearer {bad_claim}"}, None)


def test_subject_filters_without_jwt() -> None:
    auth = Authenticator(AuthSettings(subject_filters=(re.compile(r"^CN=agent-\d+"),)))
    cert = {"subject": ((("organizationName", "acme"),), (("commonName", "agent-7"),))}
    assert auth.authenticate({}, cert).cert_subject == "CN=agent-7,O=acme"
    with pytest.raises(AuthError, match="matches no allowed filter") as info:
        auth.authenticate({}, {"subject": ((("commonName", "intruder"),),)})
    assert info.value.status == "PERMISSION_DENIED"
    with pytest.raises(AuthError, match="client certificate is required"):
        auth.authenticate({}, None)


def test_misconfigured_jwt_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="shared secret"):
        Authenticator(AuthSettings(JwtSettings(("HS256",))))
    with pytest.raises(ValueError, match="public key"):
        Authenticator(AuthSettings(JwtSettings(("ES256",))))
    with pytest.raises(ValueError, match="unsupported"):
        Authenticator(AuthSettings(JwtSettings(("none",))))


@in_loop
async def test_mtls_subject_filters_through_the_endpoint(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path)
    server_cert = ca.issue("server", server=True)
    config = parse_server_config(
        {
            "grpc": {
                "host": "127.0.0.1",
                "port": 0,
                "tls": {
                    "enabled": True,
                    "certFile": str(server_cert.cert),
                    "keyFile": str(server_cert.key),
                    "caFile": str(ca.cert_path),
                    "clientAuth": "REQUIRE",
                },
                "auth": {"x509": {"subjectFilters": ["^CN=agent-"]}},
            },
            "store": {"path": ":memory:"},
        }
    )
    good = client_context(ca, ca.issue("agent-1", server=False))
    wrong_subject = client_context(ca, ca.issue("intruder", server=False))
    (tmp_path / "other").mkdir()
    stranger_ca = CertificateAuthority(tmp_path / "other", name="stranger CA")
    untrusted = client_context(ca, stranger_ca.issue("agent-2", server=False))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            server: RunningServer = await nursery.start(functools.partial(run_server, config))
            port = server.grpc_port
            async with wire.open_connection("127.0.0.1", port, ssl_context=good) as s:
                await s.send(hello(account()))
                welcome = await receive_kind(s, "welcome")
                assert welcome.accounts[0].name == "prod"
            async with wire.open_connection("127.0.0.1", port, ssl_context=wrong_subject) as s:
                await s.send(hello(account("other")))
                with pytest.raises(wire.RemoteRefused) as info:
                    await s.receive()
            assert info.value.status is wire.Status.PERMISSION_DENIED
            assert "CN=intruder" in info.value.message
            # a certificate from a CA the server does not trust fails the TLS handshake
            with pytest.raises(wire.ConnectionLost):
                await say_hello(port, untrusted)
            assert [a.name for a in server.state.accounts.list()] == ["prod"]
            nursery.cancel_scope.cancel()


def test_each_key_is_tried_only_with_its_own_algorithm_family() -> None:
    """HS and RS configured together: the secret is never tried as an RSA key and the public
    key never as an HMAC secret (algorithm confusion), whatever PyJWT's own guards do."""
    secret = "shared-secret-shared-secret-shared-secret"
    key, public = _pem_pair(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    auth = Authenticator(
        AuthSettings(JwtSettings(("HS256", "RS256"), secret=secret, public_keys=(public,)))
    )
    for good in (
        jwt.encode(_claims(), secret, algorithm="HS256"),
        jwt.encode(_claims(), key, algorithm="RS256"),
    ):
        principal = auth.authenticate({"authorization": f"Bearer {good}"}, None)
        assert principal.subject == "agent"
        assert principal.expires_at is not None
        assert principal.expires_at > time.time() + 60
    wrong = jwt.encode(_claims(), "another-secret-another-secret-another", algorithm="HS256")
    with pytest.raises(AuthError, match="signature does not verify") as info:
        auth.authenticate({"authorization": f"Bearer {wrong}"}, None)
    # The last key tried was the secret (HS family), not the public key offered to HMAC.
    assert isinstance(info.value.__cause__, jwt.InvalidSignatureError)
    other = jwt.encode(_claims(), key, algorithm="RS384")
    with pytest.raises(AuthError, match="'RS384' is not allowed"):
        auth.authenticate({"authorization": f"Bearer {other}"}, None)
