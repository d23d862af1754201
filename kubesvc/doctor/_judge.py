"""The doctor's judgement, with no I/O: what a token, a certificate, a kubeconfig or an error
says, turned into a verdict and a hint that fixes it.

The runners gather facts (a credential, a certificate, an exception from the agent's own
client or link); the functions here read them. Tokens are read, never verified: the agent
does not hold the keys that sign them (the API server's, the server's JWT secret); whether
they are accepted is what the live checks ask.
"""

from __future__ import annotations

import base64
import binascii
import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

from ._findings import Finding, Verdict

__all__ = [
    "SOON",
    "CertFacts",
    "KubeconfigFacts",
    "cert_facts",
    "error_chain",
    "expiry",
    "jwt_claims",
    "kubeconfig_facts",
    "ssl_failure",
    "when",
]

#: A credential that does not renew itself and ends sooner than this is a WARN.
SOON = timedelta(days=7)


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT (not verified), or None when ``token`` is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def jwt_expiry(claims: Mapping[str, Any]) -> datetime | None:
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        return datetime.fromtimestamp(exp, UTC)
    return None


def when(moment: datetime, now: datetime) -> str:
    """``2025-06-01T12:00:00Z (in 3 d)`` / ``(2 h ago)``."""
    delta = moment - now
    ago = delta < timedelta(0)
    seconds = abs(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            amount = f"{seconds / size:.0f} {unit}"
            break
    else:
        amount = f"{seconds:.0f} s"
    stamp = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"{stamp} ({amount} ago)" if ago else f"{stamp} (in {amount})"


def expiry(
    account: str,
    check: str,
    what: str,
    expires_at: datetime | None,
    now: datetime,
    *,
    renews: bool,
    fix: str,
) -> Finding:
    """The finding for a credential's end: FAIL when past, WARN when a credential that does
    not renew itself ends within SOON, else OK. ``what`` names it ("bearer token (JWT)")."""
    if expires_at is None:
        return Finding(account, check, Verdict.OK, f"{what}: no expiry")
    if expires_at <= now:
        return Finding(account, check, Verdict.FAIL, f"{what} expired {when(expires_at, now)}", fix)
    if not renews and expires_at - now < SOON:
        return Finding(
            account,
            check,
            Verdict.WARN,
            f"{what} expires {when(expires_at, now)} and is not renewed by itself",
            fix,
        )
    renewal = "; renewed before it ends" if renews else ""
    return Finding(
        account, check, Verdict.OK, f"{what} valid until {when(expires_at, now)}{renewal}"
    )


# -- certificates ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CertFacts:
    subject: str
    issuer: str
    not_after: datetime
    names: tuple[str, ...]  # subjectAltName DNS names and IP addresses


def _name(name: x509.Name) -> str:
    common = name.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not common:
        return name.rfc4514_string() or "(empty)"
    value = common[0].value
    return f"CN={value if isinstance(value, str) else value.decode(errors='replace')}"


def _facts(cert: x509.Certificate) -> CertFacts:
    names: list[str] = []
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names += [str(n) for n in san.get_values_for_type(x509.DNSName)]
        names += [str(n) for n in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        pass
    return CertFacts(
        _name(cert.subject), _name(cert.issuer), cert.not_valid_after_utc, tuple(names)
    )


def cert_facts(data: bytes) -> list[CertFacts]:
    """The certificates in PEM ``data`` (or one DER certificate); [] when none parses."""
    if b"-----BEGIN" not in data:
        try:
            return [_facts(x509.load_der_x509_certificate(data))]
        except ValueError:
            return []
    try:
        return [_facts(c) for c in x509.load_pem_x509_certificates(data)]
    except ValueError:
        return []


# -- errors ------------------------------------------------------------------------------------


def error_chain(exc: BaseException) -> list[BaseException]:
    """``exc``, its causes (``from``) and contexts, and the members of exception groups along
    the way (trio's "all attempts to connect" holds the refusals), outermost first (at most
    24)."""
    chain: list[BaseException] = []
    pending: list[BaseException] = [exc]
    while pending and len(chain) < 24:
        current = pending.pop(0)
        if any(current is seen for seen in chain):
            continue
        chain.append(current)
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        inner = current.__cause__ or current.__context__
        if inner is not None:
            pending.append(inner)
    return chain


def ssl_failure(exc: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification error under ``exc`` (a TLS peer we do not trust)."""
    for inner in error_chain(exc):
        if isinstance(inner, ssl.SSLCertVerificationError):
            return inner
    return None


def refused(exc: BaseException) -> bool:
    """Whether ``exc`` comes from a refused TCP connect (the host is there, nothing listens)."""
    return any(isinstance(inner, ConnectionRefusedError) for inner in error_chain(exc))


# -- kubeconfig --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KubeconfigFacts:
    """Names inside a kubeconfig, for details and hints: which context, cluster and user the
    account uses, and where its CA comes from."""

    file: str
    context: str = ""
    cluster: str = ""
    user: str = ""
    ca_field: str = ""  # "certificate-authority-data", "certificate-authority (path)" or ""

    def ca_place(self) -> str:
        field = self.ca_field or "certificate-authority-data"
        where = f"clusters[name={self.cluster}].cluster.{field}" if self.cluster else field
        return f"{where} in {self.file}"


def _named(document: Mapping[str, Any], table: str, name: str) -> Mapping[str, Any]:
    for entry in document.get(table) or ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            inner = entry.get(table[:-1])
            return inner if isinstance(inner, Mapping) else {}
    return {}


def kubeconfig_facts(document: object, file: str, context: str | None) -> KubeconfigFacts:
    """What ``document`` (a loaded kubeconfig the agent's loader accepted) names for
    ``context`` (or its current-context); empty names where it does not say."""
    if not isinstance(document, Mapping):
        return KubeconfigFacts(file)
    chosen = context or str(document.get("current-context") or "")
    ctx = _named(document, "contexts", chosen)
    cluster_name = str(ctx.get("cluster") or "")
    cluster = _named(document, "clusters", cluster_name)
    if "certificate-authority-data" in cluster:
        ca_field = "certificate-authority-data"
    elif "certificate-authority" in cluster:
        ca_field = f"certificate-authority ({cluster['certificate-authority']})"
    else:
        ca_field = ""
    return KubeconfigFacts(file, chosen, cluster_name, str(ctx.get("user") or ""), ca_field)
