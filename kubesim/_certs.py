"""A throwaway certificate authority: the serving certificate and client certificates.

Keys are ECDSA P-256 (fast to generate). Everything is PEM bytes; nothing touches disk here.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority", "KeyPair"]


@dataclass(frozen=True, slots=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


class CertificateAuthority:
    """A self-signed CA that issues the server's and the users' certificates."""

    def __init__(self, name: str = "kubesim-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = _name(name)
        now = datetime.datetime.now(datetime.UTC)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, content_commitment=False, key_encipherment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=True,
                    crl_sign=True, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self.cert_pem = self._cert.public_bytes(serialization.Encoding.PEM)

    def _issue(
        self,
        subject: x509.Name,
        usage: x509.ObjectIdentifier,
        sans: list[x509.GeneralName] | None = None,
    ) -> KeyPair:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))

    def issue_server(self, hosts: list[str]) -> KeyPair:
        """A serving certificate valid for ``hosts`` (names or IP addresses)."""
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        return self._issue(_name("kubesim"), ExtendedKeyUsageOID.SERVER_AUTH, sans)

    def issue_client(self, user: str, group: str | None = None) -> KeyPair:
        """A client certificate for ``user`` (CN) in ``group`` (O), as Kubernetes reads them."""
        return self._issue(_name(user, group), ExtendedKeyUsageOID.CLIENT_AUTH)
