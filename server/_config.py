"""server.yaml: loading and validation into frozen settings, with errors that say where.

Every error names the file, the path inside it (``grpc.tls.clientAuth``) and what was
expected. Unknown keys are errors too (a typo must not silently fall back to a default).
File paths inside the config are resolved relative to the config file's folder.

::

    serverId: clouddriver-1                 # default: a random id per process
    grpc:   {host: 0.0.0.0, port: 9091, maxMessageSize: 4194304,
             tls: {enabled: false, certFile, keyFile, caFile, clientAuth: NONE|OPTIONAL|REQUIRE},
             auth: {jwt: {enabled: false, algorithms: [HS256], secret | secretFile,
                          publicKeyFiles: [], audience, issuer, leewaySeconds: 30,
                          accountsClaim: accounts},
                    x509: {subjectFilters: [regex, ...]}}}
    api:    {host: 0.0.0.0, port: 7002, httpServer: kubesvc|hypercorn}
    store:  {url: "sqlite://kubesvc.db",          # or sqlite:///abs.db, sqlite://:memory:,
             passwordFile, maxConnections: 4}     # postgresql://user@host:port/db?sslmode=...
            # (older: {type: sqlite, path: kubesvc.db}, read as url sqlite://<path>)
    accounts: {orphanGraceSeconds: 600, maxResumableResourceAgeMs: 300000}
    sessions: {helloTimeoutSeconds: 30, maxBatchEvents: 10000, maxAccountsPerAgent: 1000,
               outboundQueue: 64, heartbeatSeconds: 60}
    operations: {waitMs: 30000}
    shutdown: {drainSeconds: 15}
    replicas: {heartbeatMs: 2000, leaseTtlMs: 10000,   # leaseTtlMs > 2 x heartbeatMs
               address: "pod-ip:9091 api=pod-ip:7002", # default: from the bound ports
               feedPollMs: 500,                        # PostgreSQL: the change log's poll
               changeLogKeepMs: 300000, changeLogMaxRows: 100000}  # and its trimming
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from ._auth import AuthSettings, ClientAuth, JwtSettings, TlsSettings
from ._errors import ConfigError
from .store import DEFAULT_STATEMENT_TIMEOUT_MS, parse_store_url, sqlite_url
from .store import StoreConfig as StoreConfig

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GrpcConfig:
    host: str = "0.0.0.0"
    port: int = 9091
    max_message_size: int = 4 * 2**20
    tls: TlsSettings | None = None
    auth: AuthSettings = field(default_factory=AuthSettings)


@dataclass(frozen=True, slots=True)
class ApiConfig:
    host: str = "0.0.0.0"
    port: int = 7002
    # Who speaks HTTP/1.1 for the REST API: our lean server (server/api/_http1.py; WebSocket
    # upgrades still go to Hypercorn) or Hypercorn for everything, the fallback.
    http_server: str = "kubesvc"


@dataclass(frozen=True, slots=True)
class AccountsConfig:
    orphan_grace_seconds: float = 600.0
    max_resumable_resource_age_ms: int = 300_000


@dataclass(frozen=True, slots=True)
class SessionsConfig:
    hello_timeout_seconds: float = 30.0
    max_batch_events: int = 10_000
    max_accounts_per_agent: int = 1000
    outbound_queue: int = 64
    heartbeat_seconds: float = 60.0


@dataclass(frozen=True, slots=True)
class OperationsConfig:
    wait_ms: int = 30_000


#: Inside Kubernetes' default grace period of 30 s, with room for what a drain cut short
#: still does (a session's close is given up to 10 s to reach the store).
DEFAULT_DRAIN_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class ShutdownConfig:
    # The bound of the drain after SIGTERM: stop accepting, end the agents' streams, finish
    # the REST requests in flight; then the store closes.
    drain_seconds: float = DEFAULT_DRAIN_SECONDS


@dataclass(frozen=True, slots=True)
class ReplicasConfig:
    # Every heartbeat renews this replica's row and its accounts' leases; a lease not renewed
    # for lease_ttl_ms lapses and a standby on another replica takes the account over.
    heartbeat_ms: int = 2000
    lease_ttl_ms: int = 10_000
    # What /armory/clouddrivers shows for this replica ("" : built from the bound ports).
    address: str = ""
    # PostgreSQL: the feed follower reads the other replicas' changes on a notification, or
    # after this long without one (a missed notification costs at most this).
    feed_poll_ms: int = 500
    # Housekeeping trims the change log to the changes of the last change_log_keep_ms and
    # at most change_log_max_rows rows (a row: one committed write, up to an agent's batch).
    # A follower further behind than that tells its subscribers to resync.
    change_log_keep_ms: int = 300_000
    change_log_max_rows: int = 100_000


@dataclass(frozen=True, slots=True)
class ServerConfig:
    server_id: str = ""
    grpc: GrpcConfig = field(default_factory=GrpcConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    accounts: AccountsConfig = field(default_factory=AccountsConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    operations: OperationsConfig = field(default_factory=OperationsConfig)
    shutdown: ShutdownConfig = field(default_factory=ShutdownConfig)
    replicas: ReplicasConfig = field(default_factory=ReplicasConfig)


class _Section:
    """A mapping at a path in the file, read with type checks; leftovers are errors."""

    def __init__(self, file: str, path: str, data: Any, base: Path) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(file, path, f"expected a mapping, got {type(data).__name__}")
        self.file, self.path, self.base = file, path, base
        self._data = dict(data)
        self._seen: set[str] = set()

    def _where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def _get(self, key: str, kind: type[T] | tuple[type, ...], what: str, default: T) -> T:
        self._seen.add(key)
        value = self._data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) and kind is not bool:
            raise ConfigError(self.file, self._where(key), f"expected {what}, got {value!r}")
        if not isinstance(value, kind):
            raise ConfigError(self.file, self._where(key), f"expected {what}, got {value!r}")
        return value  # type: ignore[return-value]

    def text(self, key: str, default: str = "") -> str:
        return self._get(key, str, "a string", default)

    def integer(self, key: str, default: int, *, low: int = 0, high: int | None = None) -> int:
        value = self._get(key, int, "an integer", default)
        if value < low or (high is not None and value > high):
            bound = f"{low}..{high}" if high is not None else f">= {low}"
            raise ConfigError(
                self.file, self._where(key), f"expected an integer {bound}, got {value}"
            )
        return value

    def number(self, key: str, default: float, *, low: float = 0.0) -> float:
        value = float(self._get(key, (int, float), "a number", default))
        if not math.isfinite(value):  # YAML's .nan and .inf: nan passes every comparison
            raise ConfigError(self.file, self._where(key), f"expected a finite number, got {value}")
        if value < low:
            raise ConfigError(
                self.file, self._where(key), f"expected a number >= {low}, got {value}"
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        return self._get(key, bool, "true or false", default)

    def strings(self, key: str) -> list[str]:
        values = self._get(key, list, "a list of strings", [])
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise ConfigError(
                    self.file, f"{self._where(key)}[{i}]", f"expected a string, got {v!r}"
                )
        return values

    def one_of(self, key: str, choices: tuple[str, ...], default: str) -> str:
        """A text that must be one of ``choices`` exactly (case matters)."""
        value = self.text(key, default)
        if value not in choices:
            raise ConfigError(
                self.file, self._where(key), f"expected one of {', '.join(choices)}, got {value!r}"
            )
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str) -> str:
        value = self.text(key, default)
        if value.upper() not in choices:
            raise ConfigError(
                self.file, self._where(key), f"expected one of {', '.join(choices)}, got {value!r}"
            )
        return value.upper()

    def file_path(self, key: str, *, required: bool = False) -> str:
        value = self.text(key)
        if not value:
            if required:
                raise ConfigError(self.file, self._where(key), "expected a file path (required)")
            return ""
        path = Path(value) if Path(value).is_absolute() else self.base / value
        if not path.is_file():
            raise ConfigError(
                self.file, self._where(key), f"expected a readable file, {path} does not exist"
            )
        return str(path)

    def read_file(self, key: str) -> str:
        path = self.file_path(key)
        if not path:
            return ""
        try:
            return _read_text(Path(path))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(self.file, self._where(key), f"cannot read {path}: {exc}") from exc

    def section(self, key: str) -> _Section:
        self._seen.add(key)
        return _Section(self.file, self._where(key), self._data.get(key), self.base)

    def done(self) -> None:
        extra = sorted(set(map(str, self._data)) - self._seen)
        if extra:
            known = ", ".join(sorted(self._seen))
            raise ConfigError(
                self.file, self._where(extra[0]), f"unknown key; expected one of: {known}"
            )


# server.yaml is a few hundred bytes; the cap keeps a wrong path (a device, a log) harmless.
MAX_CONFIG_BYTES = 4 * 2**20
MAX_YAML_DEPTH = 64


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses documents nesting deeper than MAX_YAML_DEPTH: PyYAML composes
    nodes by recursion, so a deep enough document (``a: [[[[...``) raised RecursionError
    instead of an error naming its place. (The agent has the same loader, agent/config/_yaml.py:
    the two packages share no code.)"""

    _depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self._depth >= MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None, None, f"the document nests deeper than {MAX_YAML_DEPTH} levels", mark
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _read_text(path: Path) -> str:
    with open(path, "rb") as stream:
        data = stream.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ValueError(f"larger than {MAX_CONFIG_BYTES} bytes")
    return data.decode("utf-8")


def load_server_config(path: str | Path) -> ServerConfig:
    """Read and validate server.yaml; raises ConfigError naming the file, path and expectation."""
    file = str(path)
    try:
        with open(path, "rb") as stream:
            text = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(file, "", f"cannot read the file: {exc.strerror or exc}") from exc
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(file, "", f"the file is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        # Bytes: PyYAML reads the encoding (UTF-8/16, a BOM) and names a bad byte's position.
        data = yaml.load(text, Loader=_BoundedLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(file, where, f"invalid YAML: {getattr(exc, 'problem', exc)}") from exc
    return parse_server_config(data, file=file, base=Path(path).resolve().parent)


def parse_server_config(
    data: Any, *, file: str = "<config>", base: Path | None = None
) -> ServerConfig:
    """Validate an already-parsed config mapping (see load_server_config)."""
    root = _Section(file, "", data, base or Path.cwd())
    server_id = root.text("serverId")
    grpc = _grpc(root.section("grpc"))
    api_s = root.section("api")
    api = ApiConfig(
        api_s.text("host", "0.0.0.0"),
        api_s.integer("port", 7002, high=65535),
        api_s.one_of("httpServer", ("kubesvc", "hypercorn"), "kubesvc"),
    )
    api_s.done()
    store = _store(root.section("store"))
    acc_s = root.section("accounts")
    accounts = AccountsConfig(
        acc_s.number("orphanGraceSeconds", 600.0),
        acc_s.integer("maxResumableResourceAgeMs", 300_000),
    )
    acc_s.done()
    ses_s = root.section("sessions")
    sessions = SessionsConfig(
        ses_s.number("helloTimeoutSeconds", 30.0),
        ses_s.integer("maxBatchEvents", 10_000, low=1),
        ses_s.integer("maxAccountsPerAgent", 1000, low=1),
        ses_s.integer("outboundQueue", 64, low=1),
        ses_s.number("heartbeatSeconds", 60.0),
    )
    ses_s.done()
    ops_s = root.section("operations")
    operations = OperationsConfig(ops_s.integer("waitMs", 30_000, low=1))
    ops_s.done()
    shutdown_s = root.section("shutdown")
    drain_seconds = shutdown_s.number("drainSeconds", DEFAULT_DRAIN_SECONDS)
    if drain_seconds <= 0:
        raise ConfigError(
            file, f"{shutdown_s.path}.drainSeconds", f"expected a number > 0, got {drain_seconds:g}"
        )
    shutdown = ShutdownConfig(drain_seconds)
    shutdown_s.done()
    replicas = _replicas(root.section("replicas"))
    root.done()
    return ServerConfig(
        server_id, grpc, api, store, accounts, sessions, operations, shutdown, replicas
    )


def _replicas(s: _Section) -> ReplicasConfig:
    heartbeat = s.integer("heartbeatMs", 2000, low=10)
    ttl = s.integer("leaseTtlMs", 10_000, low=1)
    if ttl <= 2 * heartbeat:
        # One late heartbeat must not cost a replica its accounts.
        raise ConfigError(
            s.file,
            s._where("leaseTtlMs"),
            f"expected more than twice heartbeatMs ({heartbeat}), got {ttl}",
        )
    config = ReplicasConfig(
        heartbeat,
        ttl,
        s.text("address"),
        feed_poll_ms=s.integer("feedPollMs", 500, low=10, high=60_000),
        change_log_keep_ms=s.integer("changeLogKeepMs", 300_000, low=1000),
        change_log_max_rows=s.integer("changeLogMaxRows", 100_000, low=100),
    )
    s.done()
    return config


_STORE_URLS = "sqlite:///path, sqlite://:memory: or postgresql://user@host:port/db"


def _store(s: _Section) -> StoreConfig:
    """store.url (or the older store.type + store.path), checked and with relative paths
    resolved against the config file's folder."""
    url = s.text("url")
    kind, path = s.text("type"), s.text("path")
    password_file = s.file_path("passwordFile")
    max_connections = s.integer("maxConnections", 4, low=1, high=1000)
    statement_timeout_ms = s.integer(
        "statementTimeoutMs", DEFAULT_STATEMENT_TIMEOUT_MS, low=0, high=3_600_000
    )
    s.done()
    where = f"{s.path}.url"
    if url:
        if kind or path:
            raise ConfigError(
                s.file, f"{s.path}.{'type' if kind else 'path'}", "give url or type/path, not both"
            )
    else:
        if kind.lower() not in ("", "sqlite"):
            raise ConfigError(
                s.file,
                f"{s.path}.type",
                f"expected sqlite (SQLITE); for PostgreSQL set {s.path}.url: postgresql://...",
            )
        url = sqlite_url(path or "kubesvc.db")
    config = store_config(url, s.base, password_file=password_file, where=(s.file, where))
    return StoreConfig(config.url, config.password_file, max_connections, statement_timeout_ms)


def store_config(
    url: str,
    base: Path,
    *,
    password_file: str = "",
    where: tuple[str, str] = ("--store", ""),
) -> StoreConfig:
    """A StoreConfig for ``url``, a relative SQLite path resolved against ``base``; raises
    ConfigError at ``where`` (file, path) when the URL is not a store URL."""
    file, path = where
    try:
        location = parse_store_url(url)
    except ValueError as exc:
        raise ConfigError(file, path, f"expected {_STORE_URLS}: {exc}") from exc
    if location.backend == "sqlite":
        if password_file:
            raise ConfigError(file, path, "passwordFile is for a postgresql:// URL only")
        if location.path != ":memory:" and not Path(location.path).is_absolute():
            url = sqlite_url(str(base / location.path))
    elif location.password_file:
        if password_file:
            raise ConfigError(file, path, "passwordFile given twice (in the URL and the section)")
        if not Path(location.password_file).is_absolute():
            raise ConfigError(
                file, path, f"expected an absolute passwordFile, got {location.password_file!r}"
            )
    return StoreConfig(url, password_file)


def _grpc(s: _Section) -> GrpcConfig:
    host = s.text("host", "0.0.0.0")
    port = s.integer("port", 9091, high=65535)
    size = s.integer("maxMessageSize", 4 * 2**20, low=1024)
    tls_s = s.section("tls")
    tls = None
    if tls_s.flag("enabled", False):
        client_auth = ClientAuth(tls_s.choice("clientAuth", tuple(ClientAuth), "NONE"))
        ca = tls_s.file_path("caFile", required=client_auth is not ClientAuth.NONE)
        tls = TlsSettings(
            tls_s.file_path("certFile", required=True),
            tls_s.file_path("keyFile", required=True),
            client_auth,
            ca or None,
        )
    else:
        for key in ("certFile", "keyFile", "caFile", "clientAuth"):
            tls_s.text(key)
    tls_s.done()
    auth_s = s.section("auth")
    jwt_s = auth_s.section("jwt")
    jwt = None
    if jwt_s.flag("enabled", False):
        algorithms = tuple(jwt_s.strings("algorithms") or ["HS256"])
        secret = jwt_s.text("secret") or jwt_s.read_file("secretFile").strip()
        keys = tuple(
            Path(p if Path(p).is_absolute() else jwt_s.base / p).read_text()
            for p in jwt_s.strings("publicKeyFiles")
        )
        jwt = JwtSettings(
            algorithms=algorithms,
            secret=secret,
            public_keys=keys,
            audience=jwt_s.text("audience") or None,
            issuer=jwt_s.text("issuer") or None,
            leeway_seconds=jwt_s.number("leewaySeconds", 30.0),
            accounts_claim=jwt_s.text("accountsClaim", "accounts"),
        )
        if any(a.startswith("HS") for a in algorithms) and not secret:
            raise ConfigError(
                s.file, jwt_s.path, "expected secret or secretFile for an HS* algorithm"
            )
        if any(not a.startswith("HS") for a in algorithms) and not keys:
            raise ConfigError(
                s.file, jwt_s.path, "expected publicKeyFiles for an RS*/ES* algorithm"
            )
    else:
        for key in ("secret", "secretFile", "audience", "issuer", "accountsClaim"):
            jwt_s.text(key)
        jwt_s.strings("algorithms")
        jwt_s.strings("publicKeyFiles")
        jwt_s.number("leewaySeconds", 30.0)
    jwt_s.done()
    x509_s = auth_s.section("x509")
    filters = []
    for i, pattern in enumerate(x509_s.strings("subjectFilters")):
        try:
            filters.append(re.compile(pattern))
        except re.error as exc:
            raise ConfigError(
                s.file,
                f"{x509_s.path}.subjectFilters[{i}]",
                f"expected a regular expression: {exc}",
            ) from exc
    x509_s.done()
    auth_s.done()
    s.done()
    return GrpcConfig(host, port, size, tls, AuthSettings(jwt, tuple(filters)))
