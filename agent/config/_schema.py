"""The agent's configuration as frozen dataclasses, with the defaults of Armory's agent.

Field names are the option names of the config file in snake_case (``omitKinds`` ->
``omit_kinds``), so that /work/shared/reference/armory-compat.md reads as the schema. Units are
kept as the option names say (``..._ms`` fields are milliseconds, ``..._seconds`` seconds),
except the Go durations of ``clouddriver.backoff``, which are converted to seconds (float).

Everything is immutable and hashable, so two configs compare with ``==`` (live reload uses
that to tell changed accounts from unchanged ones).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "AccountConfig",
    "AuthConfig",
    "BackoffConfig",
    "BudgetConfig",
    "ClouddriverConfig",
    "Config",
    "CustomResourceDefinition",
    "IdleConfig",
    "KubernetesConfig",
    "LoggingConfig",
    "Permissions",
    "PrometheusConfig",
    "ResponseRetriesConfig",
    "RetriesConfig",
    "ServerConfig",
    "ServerSideApplyConfig",
    "ServerSideApplyKind",
    "ServerSslConfig",
    "ShardConfig",
    "ShutdownConfig",
    "TasksConfig",
    "TlsConfig",
    "TokenCommandConfig",
]

DEFAULT_BUDGET_BYTES = 64 * 2**20
#: Inside Kubernetes' default grace period of 30 s, with room for the stream's close.
DEFAULT_DRAIN_SECONDS = 20.0
#: The wait before a quiet agent handles what woke it, in ms (see agent/_pacing.py).
DEFAULT_IDLE_COALESCE_MS = 20
MAX_IDLE_COALESCE_MS = 1000


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """``clouddriver.tls``: TLS (and mTLS) towards the server. Used when ``insecure`` is false."""

    server_name: str | None = None
    insecure_skip_verify: bool = False
    cacert_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None
    client_key_file_password: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class TokenCommandConfig:
    """``clouddriver.auth.tokenCommand``: run ``command args...`` for the bearer token."""

    command: str
    args: tuple[str, ...] = ()
    format: str = "raw"  # "raw" (stdout is the token) or "json" ({"token": ...})
    refresh_interval_seconds: int = 0  # 0: run once


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """``clouddriver.auth``: the bearer token sent to the server (a value or a command)."""

    token: str | None = field(default=None, repr=False)
    token_command: TokenCommandConfig | None = None


@dataclass(frozen=True, slots=True)
class BackoffConfig:
    """``clouddriver.backoff``; delays in seconds (the file may give nanoseconds)."""

    base_delay: float = 1.0
    multiplier: float = 1.6
    jitter: float = 0.2
    max_delay: float = 120.0


@dataclass(frozen=True, slots=True)
class ResponseRetriesConfig:
    """``clouddriver.responseRetries``: retries for sending operation results."""

    enabled: bool = True
    max_retries: int = 3
    back_off_ms: int = 3000


@dataclass(frozen=True, slots=True)
class ClouddriverConfig:
    """``clouddriver.*``: how the agent reaches the server."""

    grpc: str = "spin-clouddriver-grpc:9091"
    # kubesvc's own: several addresses of the server, dialled in turn (grpc is then unset).
    grpc_addresses: tuple[str, ...] = ()
    insecure: bool = True
    tls: TlsConfig = TlsConfig()
    auth: AuthConfig = AuthConfig()
    keep_alive_heartbeat_seconds: int = 20  # 0: no heartbeats
    keep_alive_time_out_seconds: int = 10
    keep_alive_operation_seconds: int = 0  # 0: never reconnect for lack of operations
    backoff: BackoffConfig = BackoffConfig()
    response_retries: ResponseRetriesConfig = ResponseRetriesConfig()
    no_proxy: bool = False


@dataclass(frozen=True, slots=True)
class RetriesConfig:
    """``kubernetes.retries``: retries of non-watch Kubernetes requests."""

    enabled: bool = True
    max_retries: int = 3
    back_off_ms: int = 3000
    retry_any_error: bool = False
    retryable_errors: tuple[str, ...] = ("timeout", "deadline exceeded")


SSA_MODES = ("always", "never", "allowed")


@dataclass(frozen=True, slots=True)
class ServerSideApplyKind:
    """One entry of ``kubernetes.serverSideApply.kinds[]``; None inherits the global mode."""

    kind: str
    enabled: str | None = None
    clear_managed_fields: str | None = None
    manifest_defaults: str | None = None


@dataclass(frozen=True, slots=True)
class ServerSideApplyConfig:
    """``kubernetes.serverSideApply``: each mode is ``always``, ``never`` or ``allowed``."""

    enabled: str = "allowed"
    clear_managed_fields: str = "allowed"
    manifest_defaults: str = "allowed"
    kinds: tuple[ServerSideApplyKind, ...] = ()


@dataclass(frozen=True, slots=True)
class CustomResourceDefinition:
    """``kubernetes.accounts[].customResourceDefinitions[]``: ``kind`` is ``Kind.group``."""

    kind: str
    scope: str = "Namespaced"  # or "Cluster"


@dataclass(frozen=True, slots=True)
class Permissions:
    """``kubernetes.accounts[].permissions``: role names per Spinnaker authorization."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    execute: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ShardConfig:
    """``kubernetes.accounts[].shard``: the part of the cluster this agent serves (sharding).

    When one account is split across agents (docs/sharding.md), the server gives each shard
    its own PRIMARY and sync scopes; shards of one account must not overlap.

    ``kinds`` xor ``omit_kinds`` (none: every kind) and ``namespaces`` (none: every namespace
    and the cluster-scoped kinds; given: those namespaces only, no cluster-scoped kinds).
    At load they are folded into the account's own ``kinds``/``omit_kinds``/``namespaces``/
    ``only_namespaced_resources``, which is what the watches read.
    """

    name: str
    kinds: tuple[str, ...] = ()
    omit_kinds: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AccountConfig:
    """One ``kubernetes.accounts[]`` entry: a cluster the agent watches and operates on.

    Credentials: ``kube_config_file`` (+ optional ``context``), ``kubeconfig_contents`` (the
    kubeconfig itself, as dynamic accounts carry it) or ``service_account: true``; none of them
    means the default kubeconfig (``$KUBECONFIG``, else ``~/.kube/config``), as kubectl does.
    ``kinds`` / ``omit_kinds`` are singular kind names without group, compared
    case-insensitively.
    """

    name: str
    kube_config_file: str | None = None
    kubeconfig_contents: str | None = field(default=None, repr=False)
    context: str | None = None
    service_account: bool = False
    insecure: bool = False
    o_auth_scopes: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    omit_kinds: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    omit_namespaces: tuple[str, ...] = ()
    only_namespaced_resources: bool = False
    custom_resource_definitions: tuple[CustomResourceDefinition, ...] = ()
    permissions: Permissions = Permissions()
    max_resumable_resource_age_ms: int = 300_000
    metrics: bool = False
    only_spinnaker_managed: bool = False
    no_proxy: bool = False
    shard: ShardConfig | None = None


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    """``kubernetes.*``: the accounts and how the agent talks to their API servers.

    kubesvc additions: ``strip_managed_fields`` (drop ``metadata.managedFields`` before
    sending, default true) and ``discovery_interval_seconds`` (how often kinds are re-discovered
    so new CRDs are watched, default 120).
    """

    accounts: tuple[AccountConfig, ...] = ()
    reconnect_timeout_ms: int = 5000
    cache_group_size: int = 0
    cache_group_delay_ms: int = 0
    retries: RetriesConfig = RetriesConfig()
    server_side_apply: ServerSideApplyConfig = ServerSideApplyConfig()
    no_proxy: bool = False
    strip_managed_fields: bool = True
    discovery_interval_seconds: int = 120


@dataclass(frozen=True, slots=True)
class TasksConfig:
    """``tasks.*``: caps on concurrent initial lists (both are checked)."""

    total_budget: int = 1000
    budget_per_account: int = 50
    queue_check_frequency_ms: int = 2000


@dataclass(frozen=True, slots=True)
class ServerSslConfig:
    """``server.ssl``: TLS for the health/admin endpoint."""

    enabled: bool = False
    cert_file: str | None = None
    key_file: str | None = None
    key_password: str | None = field(default=None, repr=False)
    cacert_file: str | None = None


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """``server.*``: the health and admin HTTP endpoint."""

    host: str = "localhost"
    port: int = 8082
    ssl: ServerSslConfig = ServerSslConfig()


@dataclass(frozen=True, slots=True)
class PrometheusConfig:
    """``prometheus.*``: ``/metrics`` and ``/prometheus_metrics``."""

    enabled: bool = False
    port: int = 8008


@dataclass(frozen=True, slots=True)
class LoggingConfig:
    """``logging.*``: where and how the agent logs (rotation applies to ``file`` only)."""

    file: str | None = None
    format: str = "text"  # or "json"
    level: str = "INFO"
    fields: tuple[tuple[str, str], ...] = ()  # extra fields on every record
    max_size_mb: int = 100
    max_backups: int = 0
    max_age_days: int = 0
    local_time: bool = False
    compress: bool = False


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    """``budget.*`` (kubesvc's own): bytes of events between the reflectors and the ack."""

    bytes: int = DEFAULT_BUDGET_BYTES


@dataclass(frozen=True, slots=True)
class ShutdownConfig:
    """``shutdown.*`` (kubesvc's own): the drain after SIGTERM, bounded by ``drainSeconds``."""

    drain_seconds: float = DEFAULT_DRAIN_SECONDS


@dataclass(frozen=True, slots=True)
class IdleConfig:
    """``idle.*`` (kubesvc's own): a quiet agent coalesces its wake-ups, read at start."""

    coalesce_ms: int = DEFAULT_IDLE_COALESCE_MS  # 0: off


@dataclass(frozen=True, slots=True)
class Config:
    """The whole agent configuration.

    ``source`` is the file it came from and ``ignored_options`` the paths of unknown options
    that were warned about; neither takes part in ``==``.
    """

    clouddriver: ClouddriverConfig = ClouddriverConfig()
    kubernetes: KubernetesConfig = KubernetesConfig()
    tasks: TasksConfig = TasksConfig()
    server: ServerConfig = ServerConfig()
    prometheus: PrometheusConfig = PrometheusConfig()
    logging: LoggingConfig = LoggingConfig()
    timeout_seconds: float = 0.0  # Kubernetes request timeout; 0 = none
    budget: BudgetConfig = BudgetConfig()
    shutdown: ShutdownConfig = ShutdownConfig()
    idle: IdleConfig = IdleConfig()
    source: str = field(default="", compare=False)
    ignored_options: tuple[str, ...] = field(default=(), compare=False)

    def account(self, name: str) -> AccountConfig | None:
        """The account called ``name``, or None."""
        for account in self.kubernetes.accounts:
            if account.name == name:
                return account
        return None
