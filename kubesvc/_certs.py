"""Certificates for mutual TLS between agents and the server: a CA, a server certificate and
agent client certificates.

``issue_bundle`` is pure (no I/O): it returns PEM bytes. ``write_bundle`` puts them in a folder
with private keys readable by their owner only (0600). Keys are ECDSA P-256 in unencrypted
PKCS#8 PEM (``BEGIN PRIVATE KEY``), what Python's ssl, Go and Java all load.

Files written by ``write_bundle(folder, ...)``::

    ca.crt  ca.key                    the CA (reused when both files already exist)
    server.crt  server.key            the server's certificate (SANs as given)
    agent-<name>.crt  agent-<name>.key   per agent: CN=<name>, O=kubesvc-agent
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "AGENT_ORGANIZATION",
    "DEFAULT_SANS",
    "CertBundle",
    "CertError",
    "KeyPair",
    "issue_bundle",
    "write_bundle",
]

DEFAULT_SANS = ("localhost", "127.0.0.1")
AGENT_ORGANIZATION = "kubesvc-agent"  # the server's x509 subjectFilters can match O=kubesvc-agent
DEFAULT_LEAF_DAYS = 365
# The CA outlives its leaves so that leaves can be re-issued without re-distributing the CA.
CA_DAYS_FACTOR = 5
_MAX_DAYS = 3650
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# Clocks of peers drift; a certificate valid from "now" fails on a peer a few seconds behind.
_BACKDATE = datetime.timedelta(minutes=5)


class CertError(ValueError):
    """Bad input for a certificate (a SAN, an agent name, a lifetime, an unusable CA)."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes


@dataclass(frozen=True, slots=True)
class CertBundle:
    ca: KeyPair
    server: KeyPair
    agents: dict[str, KeyPair] = field(default_factory=dict)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _name(common_name: str, organization: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def parse_san(text: str) -> x509.GeneralName:
    """``127.0.0.1`` / ``::1`` -> an IP SAN, anything else -> a DNS SAN; raises CertError."""
    value = text.strip()
    if not value:
        raise CertError("a subject alternative name must not be empty")
    try:
        return x509.IPAddress(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not re.fullmatch(r"(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", value):
        raise CertError(f"{value!r} is neither an IP address nor a DNS name")
    return x509.DNSName(value)


def _check_days(days: int) -> None:
    if not 1 <= days <= _MAX_DAYS:
        raise CertError(f"--days must be between 1 and {_MAX_DAYS}, got {days}")


def issue_ca(*, days: int, now: datetime.datetime, common_name: str = "kubesvc CA") -> KeyPair:
    """A self-signed CA that may sign leaf certificates only (path length 0)."""
    _check_days(days)
    key = _new_key()
    name = _name(common_name, "kubesvc")
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(_cert_pem(cert), _key_pem(key))


def _load_ca(ca: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    try:
        cert = x509.load_pem_x509_certificate(ca.cert_pem)
        key = serialization.load_pem_private_key(ca.key_pem, password=None)
    except ValueError as exc:
        raise CertError(f"the CA certificate or key is unreadable: {exc}") from exc
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError("the CA key is not an ECDSA key (kubesvc certs writes P-256 keys)")
    return cert, key


def issue_leaf(
    ca: KeyPair,
    *,
    common_name: str,
    organization: str,
    days: int,
    now: datetime.datetime,
    sans: Sequence[str] = (),
    server: bool,
) -> KeyPair:
    """A certificate signed by ``ca``: for a TLS server (``server=True``, SANs required) or
    a TLS client (CN = the agent's name)."""
    _check_days(days)
    ca_cert, ca_key = _load_ca(ca)
    if now + datetime.timedelta(days=days) > ca_cert.not_valid_after_utc:
        raise CertError(
            f"a {days}-day certificate would outlive the CA (valid until "
            f"{ca_cert.not_valid_after_utc:%Y-%m-%d}); use fewer --days or a new CA"
        )
    key = _new_key()
    public = key.public_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    names = [parse_san(s) for s in sans]
    if server and not names:
        raise CertError("a server certificate needs at least one --san")
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return KeyPair(_cert_pem(builder.sign(ca_key, hashes.SHA256())), _key_pem(key))


def check_agent_name(name: str) -> str:
    if not _AGENT_NAME.match(name):
        raise CertError(
            f"agent name {name!r}: use letters, digits, '.', '_' or '-' (at most 63 characters)"
        )
    return name


def issue_bundle(
    *,
    sans: Sequence[str] = DEFAULT_SANS,
    agents: Sequence[str] = ("agent",),
    days: int = DEFAULT_LEAF_DAYS,
    ca: KeyPair | None = None,
    now: datetime.datetime | None = None,
) -> CertBundle:
    """A CA (new unless given), a server certificate for ``sans`` and one client certificate
    per agent name, the leaves valid ``days`` days. Raises CertError for bad input."""
    now = now or datetime.datetime.now(datetime.UTC)
    for name in agents:
        check_agent_name(name)
    if len(set(agents)) != len(agents):
        raise CertError(f"agent names repeat: {list(agents)}")
    ca = ca or issue_ca(days=min(days * CA_DAYS_FACTOR, _MAX_DAYS), now=now)
    server = issue_leaf(
        ca,
        common_name=sans[0] if sans else "kubesvc-server",
        organization="kubesvc",
        days=days,
        now=now,
        sans=sans,
        server=True,
    )
    issued = {
        name: issue_leaf(
            ca,
            common_name=name,
            organization=AGENT_ORGANIZATION,
            days=days,
            now=now,
            server=False,
        )
        for name in agents
    }
    return CertBundle(ca=ca, server=server, agents=issued)


def _write(path: Path, data: bytes, mode: int) -> None:
    # Create with the final mode so a key is never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    os.chmod(path, mode)  # O_CREAT's mode does not apply to an existing file


def write_bundle(
    folder: str | os.PathLike[str],
    *,
    sans: Sequence[str] = DEFAULT_SANS,
    agents: Sequence[str] = ("agent",),
    days: int = DEFAULT_LEAF_DAYS,
    now: datetime.datetime | None = None,
) -> list[Path]:
    """Issue a bundle into ``folder`` (created 0700 when missing) and return the files written.

    An existing ``ca.crt`` + ``ca.key`` pair in the folder is reused, so running it again
    adds agents or renews leaves without changing what peers trust. Raises CertError / OSError.
    """
    root = Path(folder)
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_cert, ca_key = root / "ca.crt", root / "ca.key"
    existing = None
    if ca_cert.exists() and ca_key.exists():
        existing = KeyPair(ca_cert.read_bytes(), ca_key.read_bytes())
    bundle = issue_bundle(sans=sans, agents=agents, days=days, ca=existing, now=now)
    written: list[Path] = []
    pairs = [("server", bundle.server)] + [(f"agent-{n}", p) for n, p in bundle.agents.items()]
    if existing is None:
        pairs.insert(0, ("ca", bundle.ca))
    for stem, pair in pairs:
        _write(root / f"{stem}.crt", pair.cert_pem, 0o644)
        _write(root / f"{stem}.key", pair.key_pem, 0o600)
        written += [root / f"{stem}.crt", root / f"{stem}.key"]
    return written
