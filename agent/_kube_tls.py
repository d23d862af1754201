"""TLS contexts for the Kubernetes client: the cluster CA, insecure mode, client certificates."""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

from ._errors import KubeError
from ._kubeconfig import ClusterAccess

__all__ = ["load_client_certificate", "ssl_context"]


def ssl_context(access: ClusterAccess) -> ssl.SSLContext:
    if access.ca_pem:
        try:
            context = ssl.create_default_context(cadata=access.ca_pem.decode())
        except (ssl.SSLError, ValueError) as exc:
            raise KubeError(f"{access.source}: the cluster CA is not valid PEM: {exc}") from exc
    else:
        context = ssl.create_default_context()
    if access.insecure_skip_tls_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def load_client_certificate(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Install a client certificate from memory (ssl only loads files: a private temp dir)."""
    with tempfile.TemporaryDirectory(prefix="kubesvc-cert-") as folder:
        cert_path = Path(folder) / "tls.crt"
        key_path = Path(folder) / "tls.key"
        cert_path.write_bytes(cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key_pem)
        try:
            context.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as exc:
            raise KubeError(f"the client certificate or key is not valid: {exc}") from exc
