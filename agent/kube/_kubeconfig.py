"""Where an account's API server is and how to authenticate to it: kubeconfig and service account.

Both sources end as one :class:`ClusterAccess`, everything the client needs: the server URL,
the CA to trust, TLS options, and one credential (client certificate, token, token file, exec
plugin or basic auth). Files named in a kubeconfig are read here, once, relative to the
kubeconfig's own folder as kubectl does -- except token files, which are re-read by the client
because kubelet rotates them.

``KUBECONFIG`` may list several files (``:``-separated): they merge like kubectl merges them,
the first file to define a cluster, user or context (or ``current-context``) wins.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from .._errors import ConfigError, KubeconfigError
from ..config import BoundedLoader, Section, describe

__all__ = [
    "SERVICE_ACCOUNT_DIR",
    "ClusterAccess",
    "ExecConfig",
    "load_kubeconfig",
    "parse_kubeconfig",
    "service_account_access",
]

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
MAX_KUBECONFIG_BYTES = 4 * 2**20
EXEC_API_VERSIONS = (
    "client.authentication.k8s.io/v1",
    "client.authentication.k8s.io/v1beta1",
)


@dataclass(frozen=True, slots=True)
class ExecConfig:
    """A kubeconfig ``user.exec`` credential plugin."""

    api_version: str
    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    provide_cluster_info: bool = False
    interactive_mode: str = "IfAvailable"
    install_hint: str = ""


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    """How to reach one API server and which credential to present.

    ``server`` has no trailing slash. ``ca_pem`` None means the system trust store. At most one
    of the credentials is normally set; a token wins over basic auth, and a client certificate
    is presented whatever else is set (as client-go does).
    """

    server: str
    source: str = ""
    ca_pem: bytes | None = None
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    exec: ExecConfig | None = None
    proxy_url: str | None = None
    namespace: str | None = None


def load_kubeconfig(
    path: str | os.PathLike[str] | None,
    *,
    context: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ClusterAccess:
    """Read a kubeconfig (blocking file I/O) and resolve ``context`` (or current-context).

    ``path`` None means ``$KUBECONFIG`` (a ``:``-separated list, merged) or ``~/.kube/config``.
    Raises KubeconfigError naming the file and the path inside it.
    """
    if path is not None:
        paths = [os.fspath(path)]
    elif environ.get("KUBECONFIG"):
        paths = [p for p in environ["KUBECONFIG"].split(os.pathsep) if p]
    else:
        home = environ.get("HOME") or str(Path.home())
        paths = [os.path.join(home, ".kube", "config")]
    documents = []
    for name in paths:
        try:
            with open(name, "rb") as file:
                data = file.read(MAX_KUBECONFIG_BYTES + 1)
        except FileNotFoundError as exc:
            if path is None and len(paths) > 1:
                continue  # kubectl skips missing files of a KUBECONFIG list
            raise KubeconfigError("the kubeconfig file does not exist", file=name) from exc
        except OSError as exc:
            raise KubeconfigError(f"cannot read the kubeconfig: {exc.strerror}", file=name) from exc
        if len(data) > MAX_KUBECONFIG_BYTES:
            raise KubeconfigError(f"larger than {MAX_KUBECONFIG_BYTES} bytes", file=name)
        documents.append(_Document(name, Path(name).resolve().parent, _load_yaml(data, name)))
    if not documents:
        raise KubeconfigError("none of the KUBECONFIG files exists", file=":".join(paths))
    return _resolve(documents, context)


def parse_kubeconfig(
    text: str | bytes,
    *,
    source: str,
    base_dir: Path | None = None,
    context: str | None = None,
) -> ClusterAccess:
    """Resolve a kubeconfig given as text (e.g. a dynamic account's ``kubeconfigContents``).

    Relative file names resolve against ``base_dir`` (default: the working directory); files
    it names are read (blocking). Raises KubeconfigError.
    """
    document = _Document(source, base_dir or Path.cwd(), _load_yaml(text, source))
    return _resolve([document], context)


def service_account_access(
    base_dir: Path = SERVICE_ACCOUNT_DIR, environ: Mapping[str, str] = os.environ
) -> ClusterAccess:
    """The pod's own service account: ``KUBERNETES_SERVICE_HOST/PORT``, its CA and token file.

    The token is not read here: the client re-reads the file because kubelet rotates it.
    Raises KubeconfigError when not running in a pod (no host variable, no CA file).
    """
    host = environ.get("KUBERNETES_SERVICE_HOST")
    port = environ.get("KUBERNETES_SERVICE_PORT") or "443"
    source = f"service account ({base_dir})"
    if not host:
        raise KubeconfigError(
            "serviceAccount: true needs KUBERNETES_SERVICE_HOST (is the agent in a pod?)",
            file=source,
        )
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    try:
        ca_pem = (base_dir / "ca.crt").read_bytes()
    except OSError as exc:
        raise KubeconfigError(
            f"cannot read the service account CA: {exc.strerror}", file=str(base_dir / "ca.crt")
        ) from exc
    try:
        namespace: str | None = (base_dir / "namespace").read_text().strip() or None
    except OSError:
        namespace = None
    return ClusterAccess(
        server=f"https://{host}:{port}",
        source=source,
        ca_pem=ca_pem,
        token_file=str(base_dir / "token"),
        namespace=namespace,
    )


# -- resolution --------------------------------------------------------------------------------


@dataclass(slots=True)
class _Document:
    source: str
    base_dir: Path
    data: object


def _load_yaml(text: str | bytes, source: str) -> object:
    try:
        return yaml.load(text, Loader=BoundedLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise KubeconfigError(
            f"invalid YAML: {getattr(exc, 'problem', None) or exc}", file=source, path=where
        ) from exc


@dataclass(slots=True)
class _Named:
    """One entry of ``clusters``/``users``/``contexts``, with where it came from."""

    document: _Document
    section: Section  # the inner mapping (``cluster:``, ``user:``, ``context:``)


def _resolve(documents: list[_Document], context: str | None) -> ClusterAccess:
    try:
        return _resolve_or_config_error(documents, context)
    except KubeconfigError:
        raise
    except ConfigError as exc:
        raise KubeconfigError(exc.problem, file=exc.file, path=exc.path) from exc


def _resolve_or_config_error(documents: list[_Document], context: str | None) -> ClusterAccess:
    tables: dict[str, dict[str, _Named]] = {"clusters": {}, "users": {}, "contexts": {}}
    current: str | None = None
    for document in documents:
        top = Section(document.data, file=document.source, path="")
        current = current or top.string("current-context", None) or None
        for table, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in top.sections(table, what=table):
                name = entry.required_string("name")
                if name not in tables[table]:
                    tables[table][name] = _Named(document, entry.section(inner))
    chosen = context or current
    sources = ", ".join(d.source for d in documents)
    if not chosen:
        raise KubeconfigError("no context given and no current-context set", file=sources)
    if chosen not in tables["contexts"]:
        known = ", ".join(sorted(tables["contexts"])) or "none"
        raise KubeconfigError(f"no context {chosen!r} (contexts: {known})", file=sources)
    ctx = tables["contexts"][chosen].section
    cluster_name = ctx.required_string("cluster")
    user_name = ctx.string("user", None)
    namespace = ctx.string("namespace", None)
    if cluster_name not in tables["clusters"]:
        raise ctx.error("cluster", f"no cluster {cluster_name!r} in the kubeconfig")
    if user_name is not None and user_name not in tables["users"]:
        raise ctx.error("user", f"no user {user_name!r} in the kubeconfig")
    cluster = tables["clusters"][cluster_name]
    access = _cluster(cluster.section, cluster.document)
    if user_name is not None:
        access = _user(
            tables["users"][user_name].section, tables["users"][user_name].document, access
        )
    return replace(access, namespace=namespace, source=cluster.document.source)


def _file_or_data(s: Section, document: _Document, file_key: str, data_key: str) -> bytes | None:
    """The bytes of ``<x>-data`` (base64) or of the file ``<x>`` (relative to the kubeconfig)."""
    if s.has(data_key):
        raw = s.string(data_key, "")
        try:
            return base64.b64decode(raw.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise s.error(data_key, "expected base64 data") from exc
    name = s.string(file_key, None)
    if name is None:
        return None
    path = document.base_dir / os.path.expanduser(name)
    try:
        # Bounded, like the kubeconfig itself: a wrong name (/dev/zero, a log) must fail
        # with the field's path, not fill the agent's memory.
        with open(path, "rb") as file:
            data = file.read(MAX_KUBECONFIG_BYTES + 1)
    except OSError as exc:
        raise s.error(file_key, f"cannot read {str(path)!r}: {exc.strerror}") from exc
    if len(data) > MAX_KUBECONFIG_BYTES:
        raise s.error(file_key, f"{str(path)!r} is larger than {MAX_KUBECONFIG_BYTES} bytes")
    return data


def _cluster(s: Section, document: _Document) -> ClusterAccess:
    server = s.required_string("server").rstrip("/")
    if not server.startswith(("https://", "http://")):
        raise s.error("server", f"expected an http(s):// URL, got {server!r}")
    return ClusterAccess(
        server=server,
        ca_pem=_file_or_data(s, document, "certificate-authority", "certificate-authority-data"),
        insecure_skip_tls_verify=s.boolean("insecure-skip-tls-verify", False),
        tls_server_name=s.string("tls-server-name", None),
        proxy_url=s.string("proxy-url", None),
    )


def _user(s: Section, document: _Document, access: ClusterAccess) -> ClusterAccess:
    cert = _file_or_data(s, document, "client-certificate", "client-certificate-data")
    key = _file_or_data(s, document, "client-key", "client-key-data")
    if (cert is None) != (key is None):
        raise s.error("client-key", "a client certificate and its key go together")
    token_file = s.string("tokenFile", None)
    if token_file is not None:
        token_file = str(document.base_dir / os.path.expanduser(token_file))
    if s.has("auth-provider"):
        raise s.error(
            "auth-provider",
            "auth-provider plugins were removed from Kubernetes; use an exec plugin",
        )
    return replace(
        access,
        client_cert_pem=cert,
        client_key_pem=key,
        token=s.string("token", None),
        token_file=token_file,
        username=s.string("username", None),
        password=s.string("password", None),
        exec=_exec(s.section("exec"), document) if s.has("exec") else None,
    )


def _exec(s: Section, document: _Document) -> ExecConfig:
    api_version = s.required_string("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise s.error(
            "apiVersion", f"expected one of {', '.join(EXEC_API_VERSIONS)}, got {api_version!r}"
        )
    command = s.required_string("command")
    # kubectl: a command with a path separator is relative to the kubeconfig's folder.
    if os.sep in command and not os.path.isabs(command):
        command = str(document.base_dir / command)
    env = []
    for item in s.sections("env", what="{name, value} pairs"):
        env.append((item.required_string("name"), item.string("value", "")))
    args = s.raw("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise s.error("args", f"expected a list of strings, got {describe(args)}")
    return ExecConfig(
        api_version=api_version,
        command=command,
        args=tuple(args),
        env=tuple(env),
        provide_cluster_info=s.boolean("provideClusterInfo", False),
        interactive_mode=s.string("interactiveMode", "IfAvailable"),
        install_hint=s.string("installHint", ""),
    )
