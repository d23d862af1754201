"""kubesvc certs: the chain verifies, the SANs and usages are right, keys are PKCS#8 and 0600."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubesvc._certs import CertError, issue_bundle, issue_ca, issue_leaf, write_bundle
from kubesvc.cli import main


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certs_init_writes_a_verifiable_chain(tmp_path: Path) -> None:
    folder = tmp_path / "certs"
    code = main(
        [
            "certs",
            "init",
            str(folder),
            "--san",
            "kubesvc.spinnaker.svc",
            "--san",
            "10.0.0.7",
            "--agents",
            "prod-1",
            "prod-2",
            "--days",
            "30",
        ]
    )
    assert code == 0
    ca = _load(folder / "ca.crt")
    for stem in ("server", "agent-prod-1", "agent-prod-2"):
        leaf = _load(folder / f"{stem}.crt")
        leaf.verify_directly_issued_by(ca)  # raises when the signature or issuer is wrong
        lifetime = leaf.not_valid_after_utc - leaf.not_valid_before_utc
        assert datetime.timedelta(days=30) <= lifetime <= datetime.timedelta(days=30, hours=1)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    server = _load(folder / "server.crt")
    sans = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["kubesvc.spinnaker.svc"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("10.0.0.7")]
    usages = server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    agent = _load(folder / "agent-prod-1.crt")
    assert agent.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "prod-1"
    usages = agent.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_keys_are_unencrypted_pkcs8_readable_by_the_owner_only(tmp_path: Path) -> None:
    written = write_bundle(tmp_path / "c", agents=["a"])
    keys = [p for p in written if p.suffix == ".key"]
    assert {p.name for p in keys} == {"ca.key", "server.key", "agent-a.key"}
    for key in keys:
        text = key.read_text()
        assert text.startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, not "EC PRIVATE KEY"
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "c" / "server.crt").stat().st_mode) == 0o644


def test_default_sans_are_localhost_and_loopback(tmp_path: Path) -> None:
    write_bundle(tmp_path)
    sans = (
        _load(tmp_path / "server.crt")
        .extensions.get_extension_for_class(x509.SubjectAlternativeName)
        .value
    )
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]


def _contexts(server_dir: Path, client_dir: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server that requires a client certificate (trusting server_dir's CA), and a client
    presenting client_dir's agent "a" certificate (trusting client_dir's CA)."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(server_dir / "ca.crt"))
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_cert_chain(server_dir / "server.crt", server_dir / "server.key")
    client = ssl.create_default_context(cafile=str(client_dir / "ca.crt"))
    client.load_cert_chain(client_dir / "agent-a.crt", client_dir / "agent-a.key")
    return server, client


def _handshake(
    server_context: ssl.SSLContext, client_context: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """A full TLS handshake in memory (two MemoryBIO pairs); raises the first SSLError,
    noting which side refused.

    After the handshake each side reads once, so that a TLS 1.3 server's verdict on the
    client certificate (sent after the client's Finished) reaches the client too.
    """
    links = [ssl.MemoryBIO() for _ in range(4)]  # client->server in/out, server->client in/out
    server = server_context.wrap_bio(links[0], links[1], server_side=True)
    client = client_context.wrap_bio(links[2], links[3], server_hostname="localhost")
    done = {"server": False, "client": False}
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            try:
                if not done[name]:
                    side.do_handshake()
                    done[name] = True
                else:
                    side.read(1)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                pass
            except ssl.SSLError as exc:
                exc.add_note(f"refused by the {name}")
                raise
            # Carry what each side wrote to the other.
            links[0].write(links[3].read())
            links[2].write(links[1].read())
        if all(done.values()) and not links[0].pending and not links[2].pending:
            return server, client
    raise AssertionError(f"the handshake did not finish: {done}")


def test_python_ssl_accepts_the_files_for_mutual_tls(tmp_path: Path) -> None:
    write_bundle(tmp_path, agents=["a"])
    server, client = _handshake(*_contexts(tmp_path, tmp_path))
    agent = server.getpeercert()  # verified against the CA, as CERT_REQUIRED demands
    assert agent is not None
    assert (("commonName", "a"),) in agent["subject"]
    assert (("organizationName", "kubesvc-agent"),) in agent["subject"]
    peer = client.getpeercert()
    assert peer is not None
    assert (("commonName", "localhost"),) in peer["subject"]


def test_a_client_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    write_bundle(tmp_path / "ours", agents=["a"])
    write_bundle(tmp_path / "theirs", agents=["a"])
    server_context, _ = _contexts(tmp_path / "ours", tmp_path / "ours")
    _, stranger = _contexts(tmp_path / "theirs", tmp_path / "theirs")
    # The stranger trusts our CA for the server, but its own certificate is from another CA.
    stranger.load_verify_locations(cafile=str(tmp_path / "ours" / "ca.crt"))
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        _handshake(server_context, stranger)
    assert info.value.__notes__ == ["refused by the server"]


def test_a_server_certificate_from_another_ca_is_refused(tmp_path: Path) -> None:
    write_bundle(tmp_path / "ours", agents=["a"])
    write_bundle(tmp_path / "theirs", agents=["a"])
    _, client = _contexts(tmp_path / "ours", tmp_path / "ours")
    impostor, _ = _contexts(tmp_path / "theirs", tmp_path / "theirs")
    with pytest.raises(ssl.SSLCertVerificationError) as info:
        _handshake(impostor, client)
    assert info.value.__notes__ == ["refused by the client"]


def test_running_again_reuses_the_ca(tmp_path: Path) -> None:
    write_bundle(tmp_path, agents=["a"])
    first = (tmp_path / "ca.crt").read_bytes()
    written = write_bundle(tmp_path, agents=["b"])
    assert (tmp_path / "ca.crt").read_bytes() == first
    assert tmp_path / "ca.crt" not in written
    _load(tmp_path / "agent-b.crt").verify_directly_issued_by(_load(tmp_path / "ca.crt"))


def test_a_leaf_may_not_outlive_its_ca() -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca = issue_ca(days=10, now=now)
    with pytest.raises(CertError, match="outlive the CA"):
        issue_leaf(ca, common_name="x", organization="o", days=20, now=now, server=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sans": ["bad name!"]}, "neither an IP address nor a DNS name"),
        ({"agents": ["a/b"]}, "agent name"),
        ({"agents": ["a", "a"]}, "repeat"),
        ({"days": 0}, "--days"),
    ],
)
def test_bad_input_says_what(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(CertError, match=message):
        issue_bundle(**kwargs)  # type: ignore[arg-type]


def test_keys_are_p256() -> None:
    from cryptography.hazmat.primitives import serialization

    bundle = issue_bundle(agents=["a"])
    key = serialization.load_pem_private_key(bundle.agents["a"].key_pem, password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert key.curve.name == "secp256r1"
