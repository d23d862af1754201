"""Who may open a session: JWT bearer tokens, client-certificate subject filters, TLS contexts.

``Authenticator.authenticate(metadata, peer_cert)`` is pure (no I/O): it returns a Principal
or raises AuthError carrying the gRPC status to refuse the call with. Messages say what was
wrong ("token expired", "audience mismatch") and never echo the token.
"""

from __future__ import annotations

import enum
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jwt

from ._errors import AuthError

_UNAUTHENTICATED = "UNAUTHENTICATED"
_PERMISSION_DENIED = "PERMISSION_DENIED"
_HMAC = {"HS256", "HS384", "HS512"}
_PUBLIC = {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "EdDSA"}
# Short names as in RFC 4514 (what operators write in subject filters).
_RDN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "emailAddress": "emailAddress",
}


class ClientAuth(enum.StrEnum):
    """Whether the TLS server asks for, and requires, a client certificate."""

    NONE = "NONE"
    OPTIONAL = "OPTIONAL"
    REQUIRE = "REQUIRE"


@dataclass(frozen=True, slots=True)
class JwtSettings:
    """How bearer tokens are checked. HS* use ``secret``; RS*/ES* try each public key (PEM)."""

    algorithms: tuple[str, ...] = ("HS256",)
    secret: str = ""
    public_keys: tuple[str, ...] = ()
    audience: str | None = None
    issuer: str | None = None
    leeway_seconds: float = 30.0
    # The claim listing the account names this token may register; absent claim = any name.
    accounts_claim: str = "accounts"


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """``jwt`` None: no token needed. ``subject_filters``: a client certificate is needed
    whose subject (``CN=agent,O=acme``) matches at least one (``re.search``; anchor with ^$)."""

    jwt: JwtSettings | None = None
    subject_filters: tuple[re.Pattern[str], ...] = ()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who opened the session: the token's subject, the certificate subject, and the account
    names the token allows (None = any)."""

    subject: str = ""
    cert_subject: str | None = None
    allowed_accounts: frozenset[str] | None = None
    claims: dict[str, Any] = field(default_factory=dict)
    # When the token stops being valid (epoch seconds: ``exp`` plus the leeway the check
    # allowed); None without a token. The session is ended then (server/_grpc.py).
    expires_at: float | None = None

    def may_register(self, account: str) -> bool:
        return self.allowed_accounts is None or account in self.allowed_accounts


def certificate_subject(peer_cert: Mapping[str, Any]) -> str:
    """``ssl.getpeercert()``'s subject as ``CN=...,O=...`` (most specific first, RFC 4514)."""
    parts = []
    for rdn in reversed(peer_cert.get("subject", ())):
        for key, value in rdn:
            parts.append(f"{_RDN_NAMES.get(key, key)}={value}")
    return ",".join(parts)


class Authenticator:
    """Checks a call's metadata and client certificate against AuthSettings."""

    def __init__(self, settings: AuthSettings) -> None:
        self._settings = settings
        jwt_settings = settings.jwt
        if jwt_settings is not None:
            unknown = set(jwt_settings.algorithms) - _HMAC - _PUBLIC
            if unknown or not jwt_settings.algorithms:
                raise ValueError(f"unsupported JWT algorithms: {sorted(unknown) or 'none given'}")
            # Each key is tried with its own algorithm family only: the shared secret with
            # HS*, the public keys with RS*/ES*/PS*/EdDSA. Offering HS* with a public key is
            # the classic algorithm-confusion hole (the public PEM used as an HMAC secret);
            # we do not rely on PyJWT's PEM heuristics to refuse it.
            self._keys: list[tuple[Any, list[str]]] = []
            hmac = [a for a in jwt_settings.algorithms if a in _HMAC]
            public = [a for a in jwt_settings.algorithms if a in _PUBLIC]
            if hmac:
                if not jwt_settings.secret:
                    raise ValueError("an HS* JWT algorithm needs a shared secret")
                self._keys.append((jwt_settings.secret, hmac))
            if public:
                if not jwt_settings.public_keys:
                    raise ValueError("an RS*/ES* JWT algorithm needs at least one public key")
                self._keys += [(key, public) for key in jwt_settings.public_keys]

    def authenticate(
        self, metadata: Mapping[str, str], peer_cert: Mapping[str, Any] | None
    ) -> Principal:
        """The call's Principal; raises AuthError(status, message) when it is refused."""
        cert_subject = certificate_subject(peer_cert) if peer_cert else None
        filters = self._settings.subject_filters
        if filters:
            if cert_subject is None:
                raise AuthError(
                    _UNAUTHENTICATED,
                    "a client certificate is required (x509 subject filters are configured)",
                )
            if not any(f.search(cert_subject) for f in filters):
                raise AuthError(
                    _PERMISSION_DENIED,
                    f"client certificate subject {cert_subject!r} matches no allowed filter",
                )
        if self._settings.jwt is None:
            return Principal(cert_subject=cert_subject)
        claims = self._verify(self._settings.jwt, metadata.get("authorization", ""))
        return Principal(
            subject=str(claims.get("sub", "")),
            cert_subject=cert_subject,
            allowed_accounts=self._allowed(self._settings.jwt, claims),
            claims=claims,
            # "exp" is required and checked to be a number by the decode above.
            expires_at=float(claims["exp"]) + self._settings.jwt.leeway_seconds,
        )

    def _verify(self, settings: JwtSettings, header: str) -> dict[str, Any]:
        scheme, _, token = header.partition(" ")
        if not header:
            raise AuthError(
                _UNAUTHENTICATED, "no bearer token: the authorization metadata is missing"
            )
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError(_UNAUTHENTICATED, "authorization metadata is not 'Bearer <token>'")
        options = {"require": ["exp"], "verify_aud": settings.audience is not None}
        last: jwt.PyJWTError | None = None
        try:
            header_alg = jwt.get_unverified_header(token.strip()).get("alg")
        except jwt.PyJWTError as exc:
            raise AuthError(_UNAUTHENTICATED, f"bearer token rejected: {exc}") from exc
        if header_alg not in settings.algorithms:
            raise AuthError(
                _UNAUTHENTICATED, f"bearer token rejected: algorithm {header_alg!r} is not allowed"
            )
        for key, algorithms in self._keys:
            if header_alg not in algorithms:
                continue
            try:
                claims: dict[str, Any] = jwt.decode(
                    token.strip(),
                    key=key,
                    algorithms=algorithms,
                    audience=settings.audience,
                    issuer=settings.issuer,
                    leeway=settings.leeway_seconds,
                    options=options,  # type: ignore[arg-type]
                )
                return claims
            except jwt.InvalidSignatureError as exc:
                last = exc
            except (jwt.InvalidKeyError, jwt.InvalidAlgorithmError) as exc:
                last = exc
            except jwt.ExpiredSignatureError as exc:
                raise AuthError(_UNAUTHENTICATED, "bearer token expired") from exc
            except jwt.InvalidAudienceError as exc:
                raise AuthError(_UNAUTHENTICATED, "bearer token audience mismatch") from exc
            except jwt.InvalidIssuerError as exc:
                raise AuthError(_UNAUTHENTICATED, "bearer token issuer mismatch") from exc
            except jwt.MissingRequiredClaimError as exc:
                raise AuthError(
                    _UNAUTHENTICATED, f"bearer token lacks the {exc.claim!r} claim"
                ) from exc
            except jwt.PyJWTError as exc:
                raise AuthError(_UNAUTHENTICATED, f"bearer token rejected: {exc}") from exc
        raise AuthError(_UNAUTHENTICATED, "bearer token signature does not verify") from last

    @staticmethod
    def _allowed(settings: JwtSettings, claims: Mapping[str, Any]) -> frozenset[str] | None:
        value = claims.get(settings.accounts_claim)
        if value is None:
            return None
        if isinstance(value, str):
            return frozenset(v for v in value.replace(",", " ").split() if v)
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return frozenset(value)
        raise AuthError(
            _UNAUTHENTICATED,
            f"bearer token claim {settings.accounts_claim!r} must be a list of account names",
        )


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The gRPC endpoint's TLS: its certificate chain and key, and client-certificate rules."""

    cert_file: str
    key_file: str
    client_auth: ClientAuth = ClientAuth.NONE
    ca_file: str | None = None  # the trust collection for client certificates


def server_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """A server SSLContext for ``tls``; raises OSError/ssl.SSLError for unreadable files."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.ca_file:
        context.load_verify_locations(tls.ca_file)
    context.verify_mode = {
        ClientAuth.NONE: ssl.CERT_NONE,
        ClientAuth.OPTIONAL: ssl.CERT_OPTIONAL,
        ClientAuth.REQUIRE: ssl.CERT_REQUIRED,
    }[tls.client_auth]
    return context
