"""Credentials for the Kubernetes client: static token, rotated token file, exec plugin.

A :class:`CredentialSource` hands out the current :class:`Credential` and can be told that the
API server refused one (a 401), so the next call fetches a fresh one. :class:`KubeAuth` gives
the client the Authorization header of every request and, on a 401 with a refreshable
source, a fresh credential to send the request once more with.

Exec plugins (client.authentication.k8s.io v1/v1beta1) run with the kubeconfig's args and env
plus ``KUBERNETES_EXEC_INFO``; their ``ExecCredential`` is cached until its
``expirationTimestamp`` (refreshed a little early), or until a 401. Concurrent callers share
one run of the plugin. Plugin output is capped in bytes and the run in time.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import trio

from .._errors import KubeCredentialError
from ._kubeconfig import ClusterAccess, ExecConfig

__all__ = [
    "Credential",
    "CredentialSource",
    "ExecPlugin",
    "KubeAuth",
    "StaticCredential",
    "TokenFile",
    "credential_source",
]

log = logging.getLogger("agent.kube")

EXEC_DEADLINE = 60.0  # seconds a plugin may run (it may call a cloud API)
EXEC_MAX_OUTPUT = 1 * 2**20  # bytes of stdout (an ExecCredential is a few KB)
EXEC_REFRESH_EARLY = timedelta(seconds=30)
TOKEN_FILE_MAX_AGE = 60.0  # client-go re-reads a token file once a minute
MAX_TOKEN_FILE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Credential:
    """What to present: a bearer token and/or a client certificate (PEM)."""

    token: str | None = field(default=None, repr=False)
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)
    expires_at: datetime | None = None


class CredentialSource:
    """Hands out the current credential. The base class is the "no credential" source."""

    refreshable = False

    async def get(self) -> Credential:
        """The credential to use now. Raises KubeCredentialError."""
        return Credential()

    def refused(self, credential: Credential) -> None:
        """The API server answered 401 to ``credential``: do not hand it out again."""


class StaticCredential(CredentialSource):
    """A token (or nothing) written in the kubeconfig; a 401 cannot be fixed by asking again."""

    def __init__(self, credential: Credential) -> None:
        self._credential = credential

    async def get(self) -> Credential:
        return self._credential


class TokenFile(CredentialSource):
    """A token file (service account, kubeconfig ``tokenFile``), re-read when it may have rotated.

    Re-read when older than a minute (kubelet rotates projected tokens well before expiry) and
    after a 401. The file is on a local tmpfs and a few hundred bytes, so it is read inline
    rather than in a thread.
    """

    refreshable = True

    def __init__(self, path: str) -> None:
        self._path = path
        self._token: str | None = None
        self._read_at = float("-inf")

    async def get(self) -> Credential:
        now = trio.current_time()
        if self._token is None or now - self._read_at >= TOKEN_FILE_MAX_AGE:
            self._token = self._read()
            self._read_at = now
        return Credential(token=self._token)

    def _read(self) -> str:
        try:
            with open(self._path, "rb") as file:
                token = file.read(MAX_TOKEN_FILE_BYTES).decode().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeCredentialError(f"cannot read the token file {self._path}: {exc}") from exc
        if not token:
            raise KubeCredentialError(f"the token file {self._path} is empty")
        return token

    def refused(self, credential: Credential) -> None:
        if credential.token == self._token:
            self._token = None


class ExecPlugin(CredentialSource):
    """A kubeconfig exec credential plugin, cached until expiry or a 401."""

    refreshable = True

    def __init__(
        self,
        config: ExecConfig,
        *,
        cluster: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] = os.environ,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._config = config
        self._cluster = cluster
        self._environ = environ
        self._now = now
        self._cached: Credential | None = None
        self._lock = trio.Lock()
        self.runs = 0  # how many times the plugin ran (status and tests)

    def _fresh(self, credential: Credential | None) -> bool:
        if credential is None:
            return False
        expires = credential.expires_at
        return expires is None or self._now() < expires - EXEC_REFRESH_EARLY

    async def get(self) -> Credential:
        if self._fresh(self._cached):
            assert self._cached is not None
            return self._cached
        async with self._lock:  # one run serves every caller waiting here
            if not self._fresh(self._cached):
                self._cached = await self._run()
            assert self._cached is not None
            return self._cached

    def refused(self, credential: Credential) -> None:
        if credential == self._cached:
            self._cached = None

    def _exec_info(self) -> str:
        spec: dict[str, Any] = {"interactive": False}
        if self._config.provide_cluster_info and self._cluster is not None:
            spec["cluster"] = dict(self._cluster)
        return json.dumps(
            {"apiVersion": self._config.api_version, "kind": "ExecCredential", "spec": spec}
        )

    async def _run(self) -> Credential:
        config = self._config
        if config.interactive_mode == "Always":
            raise KubeCredentialError(
                f"exec plugin {config.command!r} needs an interactive terminal "
                "(interactiveMode: Always), which the agent does not have"
            )
        env = dict(self._environ)
        env.update(config.env)
        env["KUBERNETES_EXEC_INFO"] = self._exec_info()
        command = [config.command, *config.args]
        self.runs += 1
        try:
            with trio.fail_after(EXEC_DEADLINE):
                process = await trio.lowlevel.open_process(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
                stdout, stderr = await _collect(process)
        except FileNotFoundError as exc:
            hint = f" ({config.install_hint.strip()})" if config.install_hint else ""
            raise KubeCredentialError(f"exec plugin {config.command!r} not found{hint}") from exc
        except OSError as exc:
            raise KubeCredentialError(f"exec plugin {config.command!r}: {exc}") from exc
        except trio.TooSlowError as exc:
            raise KubeCredentialError(
                f"exec plugin {config.command!r} did not finish within {EXEC_DEADLINE:.0f} s"
            ) from exc
        if process.returncode != 0:
            tail = stderr.decode(errors="replace").strip()[-500:]
            raise KubeCredentialError(
                f"exec plugin {config.command!r} exited with {process.returncode}: {tail}"
            )
        return self._parse(stdout)

    def _parse(self, stdout: bytes) -> Credential:
        where = f"exec plugin {self._config.command!r}"
        try:
            document = json.loads(stdout)
        except ValueError as exc:
            raise KubeCredentialError(f"{where} printed no ExecCredential JSON: {exc}") from exc
        if not isinstance(document, dict) or document.get("kind") != "ExecCredential":
            raise KubeCredentialError(f"{where} printed something other than an ExecCredential")
        if document.get("apiVersion") != self._config.api_version:
            raise KubeCredentialError(
                f"{where} answered apiVersion {document.get('apiVersion')!r}, "
                f"expected {self._config.api_version!r}"
            )
        status = document.get("status")
        if not isinstance(status, dict):
            raise KubeCredentialError(f"{where}: the ExecCredential has no status")
        token = status.get("token")
        cert = status.get("clientCertificateData")
        key = status.get("clientKeyData")
        if not token and not (cert and key):
            raise KubeCredentialError(
                f"{where}: status has neither a token nor clientCertificateData+clientKeyData"
            )
        expires_at = None
        if status.get("expirationTimestamp"):
            try:
                expires_at = datetime.fromisoformat(str(status["expirationTimestamp"]))
            except ValueError as exc:
                raise KubeCredentialError(
                    f"{where}: bad expirationTimestamp {status['expirationTimestamp']!r}"
                ) from exc
            if expires_at.tzinfo is None:
                expires_at = expires_at.replace(tzinfo=UTC)
        return Credential(
            token=str(token) if token else None,
            client_cert_pem=str(cert).encode() if cert else None,
            client_key_pem=str(key).encode() if key else None,
            expires_at=expires_at,
        )


async def _collect(process: trio.Process) -> tuple[bytes, bytes]:
    """Read stdout and stderr to the end (each capped) and wait for the process."""
    outputs: dict[str, bytes] = {}
    overflow: list[str] = []

    async def drain(name: str, stream: trio.abc.ReceiveStream | None) -> None:
        data = bytearray()
        if stream is not None:
            async with stream:
                while chunk := await stream.receive_some(65536):
                    data += chunk
                    if len(data) > EXEC_MAX_OUTPUT:
                        overflow.append(name)
                        process.kill()
                        break
        outputs[name] = bytes(data)

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, "stdout", process.stdout)
            nursery.start_soon(drain, "stderr", process.stderr)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True), trio.move_on_after(5):
                await process.wait()
    if overflow:
        raise KubeCredentialError(
            f"exec plugin wrote more than {EXEC_MAX_OUTPUT} bytes to {overflow[0]}"
        )
    return outputs["stdout"], outputs["stderr"]


def credential_source(
    access: ClusterAccess, *, environ: Mapping[str, str] = os.environ
) -> CredentialSource:
    """The source for an access: exec plugin, token file, static token, or none."""
    if access.exec is not None:
        cluster: dict[str, Any] = {
            "server": access.server,
            "insecure-skip-tls-verify": access.insecure_skip_tls_verify,
        }
        if access.ca_pem:
            cluster["certificate-authority-data"] = base64.b64encode(access.ca_pem).decode()
        if access.tls_server_name:
            cluster["tls-server-name"] = access.tls_server_name
        return ExecPlugin(access.exec, cluster=cluster, environ=environ)
    if access.token_file:  # client-go: a token file wins over a token, and is re-read
        return TokenFile(access.token_file)
    if access.token:
        return StaticCredential(Credential(token=access.token))
    return StaticCredential(Credential())


class KubeAuth:
    """The credential part of every request: the Authorization header (bearer token, or basic
    auth) and, after a 401, whether a fresh credential is worth a second attempt.

    ``on_credential`` is called with every credential obtained, before its request is sent,
    so the client can install a client certificate an exec plugin returned. The one caller
    is ``KubeClient``, which sends a request once more after a 401 when :meth:`refresh`
    gives a new credential (client-go does the same).
    """

    def __init__(
        self,
        source: CredentialSource,
        *,
        basic: tuple[str, str] | None = None,
        on_credential: Callable[[Credential], None] | None = None,
    ) -> None:
        self._source = source
        self._basic = (
            "Basic " + base64.b64encode(f"{basic[0]}:{basic[1]}".encode()).decode()
            if basic
            else None
        )
        self._on_credential = on_credential

    async def headers(self) -> tuple[dict[str, str], Credential]:
        """The Authorization header (if any), and the credential it came from (to pass to
        :meth:`refresh` on a 401). Raises KubeCredentialError."""
        credential = await self._source.get()
        if self._on_credential is not None:
            self._on_credential(credential)
        if credential.token:
            return {"authorization": f"Bearer {credential.token}"}, credential
        if self._basic is not None:
            return {"authorization": self._basic}, credential
        return {}, credential

    def refused(self, credential: Credential) -> bool:
        """Note a 401 for ``credential``; True when asking again may give a new one."""
        if not self._source.refreshable:
            return False
        self._source.refused(credential)
        return True

    async def refresh(
        self, credential: Credential, host: str
    ) -> tuple[dict[str, str], Credential] | None:
        """After a 401 to ``credential``: the headers and credential to send once more with,
        or None when it cannot be refreshed or came back the same."""
        if not self.refused(credential):
            return None
        log.info("401 from %s: refreshing the credential", host)
        fresh_headers, fresh = await self.headers()
        return None if fresh == credential else (fresh_headers, fresh)
