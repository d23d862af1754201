"""Load and validate the agent's config file into a :class:`Config`.

``parse_config(text, source=...)`` is pure (no I/O): it parses YAML and validates the whole
option set, raising :class:`ConfigError` with the file, the path inside it and what was
expected. ``load_config(path)`` reads the file and logs the ignored options.

Unknown options. Armory's files carry keys kubesvc does not use (Spring settings, options of
other Armory versions), so an unknown option is a warning listing its path, never a failure --
except inside ``kubernetes.accounts[]``: a typo there (``omitKind`` for ``omitKinds``) would
silently widen what the agent watches and ships out of the cluster, so it is an error that
suggests the probable intended name.

Layouts: the options at the top level (kubesvc.yaml), or all under one top-level ``kubesvc:``
key (armory-agent.yml). Paths in messages are the real paths in the file
(``kubesvc.kubernetes.accounts[0].kinds`` in the second layout).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import yaml

from .._errors import ConfigError
from ._schema import (
    DEFAULT_DRAIN_SECONDS,
    DEFAULT_IDLE_COALESCE_MS,
    MAX_IDLE_COALESCE_MS,
    SSA_MODES,
    AccountConfig,
    AuthConfig,
    BackoffConfig,
    BudgetConfig,
    ClouddriverConfig,
    Config,
    CustomResourceDefinition,
    IdleConfig,
    KubernetesConfig,
    LoggingConfig,
    Permissions,
    PrometheusConfig,
    ResponseRetriesConfig,
    RetriesConfig,
    ServerConfig,
    ServerSideApplyConfig,
    ServerSideApplyKind,
    ServerSslConfig,
    ShardConfig,
    ShutdownConfig,
    TasksConfig,
    TlsConfig,
    TokenCommandConfig,
)
from ._values import Section
from ._yaml import BoundedLoader

__all__ = ["MAX_CONFIG_BYTES", "default_config_path", "load_config", "parse_config"]

log = logging.getLogger("agent.config")

# A config file is a few KB; a cap keeps a wrong path (a log file, a device) from eating memory.
MAX_CONFIG_BYTES = 4 * 2**20
CONFIG_ENV = "KUBESVC_CONFIG"
DEFAULT_CONFIG_FILE = "kubesvc.yaml"


def default_config_path(environ: Mapping[str, str] = os.environ) -> str:
    """The config file to use when none is given: ``$KUBESVC_CONFIG``, else ``kubesvc.yaml``."""
    return environ.get(CONFIG_ENV) or DEFAULT_CONFIG_FILE


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate the config file at ``path`` (blocking file I/O).

    Logs one warning per ignored (unknown) option. Raises ConfigError when the file cannot be
    read or is invalid.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror or exc}", file=name) from exc
    config = parse_config(data, source=name)
    for option in config.ignored_options:
        log.warning("%s: ignoring unknown option %s", name, option)
    return config


def parse_config(text: str | bytes, *, source: str = "<config>") -> Config:
    """Validate a config document (YAML text) into a Config. Raises ConfigError."""
    if len(text) > MAX_CONFIG_BYTES:
        raise ConfigError(f"the file is larger than {MAX_CONFIG_BYTES} bytes", file=source)
    document = _load_yaml(text, source)
    top = Section(document, file=source, path="")
    if top.has("kubesvc") and isinstance(top.raw("kubesvc"), Mapping):
        outer = top
        top = top.section("kubesvc")
    else:
        outer = None
    ignored: list[str] = []
    clouddriver = _clouddriver(top.section("clouddriver"), ignored)
    kubernetes = _kubernetes(top.section("kubernetes"), ignored)
    tasks = _tasks(top.section("tasks"), ignored)
    server = _server(top.section("server"), ignored)
    prometheus = _prometheus(top.section("prometheus"), ignored)
    logging_ = _logging(top.section("logging"), ignored)
    timeout_seconds = top.number("timeoutSeconds", 0.0)
    budget = _budget(top.section("budget"), ignored)
    shutdown = _shutdown(top.section("shutdown"), ignored)
    idle = _idle(top.section("idle"), ignored)
    ignored.extend(top.unknown())
    if outer is not None:
        ignored.extend(outer.unknown())
    return Config(
        clouddriver=clouddriver,
        kubernetes=kubernetes,
        tasks=tasks,
        server=server,
        prometheus=prometheus,
        logging=logging_,
        timeout_seconds=timeout_seconds,
        budget=budget,
        shutdown=shutdown,
        idle=idle,
        source=source,
        ignored_options=tuple(sorted(ignored)),
    )


class _StrictLoader(BoundedLoader):
    """The agent's loader (bounded nesting) that also refuses duplicate keys (YAML would
    silently keep the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in result:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", mark)
        result[key] = loader.construct_object(value_node, deep=True)
    return result


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _load_yaml(text: str | bytes, source: str) -> object:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"invalid YAML: {exc.problem}", file=source, path=where) from exc
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=source) from exc


def _done(section: Section, ignored: list[str]) -> None:
    ignored.extend(section.unknown())


# -- clouddriver -------------------------------------------------------------------------------


def _clouddriver(s: Section, ignored: list[str]) -> ClouddriverConfig:
    d = ClouddriverConfig()
    tls_s = s.section("tls")
    tls = TlsConfig(
        server_name=tls_s.string("serverName", None),
        insecure_skip_verify=tls_s.boolean("insecureSkipVerify", False),
        cacert_file=tls_s.string("cacertFile", None),
        client_cert_file=tls_s.string("clientCertFile", None),
        client_key_file=tls_s.string("clientKeyFile", None),
        client_key_file_password=tls_s.string("clientKeyFilePassword", None),
    )
    if (tls.client_cert_file is None) != (tls.client_key_file is None):
        raise tls_s.error("clientKeyFile", "clientCertFile and clientKeyFile go together")
    _done(tls_s, ignored)

    auth_s = s.section("auth")
    token_command = None
    if auth_s.has("tokenCommand"):
        tc = auth_s.section("tokenCommand")
        token_command = TokenCommandConfig(
            command=tc.required_string("command"),
            args=tc.strings("args", what="command arguments"),
            format=tc.choice("format", "raw", ("raw", "json")),
            refresh_interval_seconds=tc.integer("refreshIntervalSeconds", 0),
        )
        _done(tc, ignored)
    auth = AuthConfig(token=auth_s.string("token", None), token_command=token_command)
    _done(auth_s, ignored)

    b = s.section("backoff")
    backoff = BackoffConfig(
        base_delay=b.duration("baseDelay", d.backoff.base_delay),
        multiplier=b.number("multiplier", d.backoff.multiplier, minimum=1.0),
        jitter=b.number("jitter", d.backoff.jitter),
        max_delay=b.duration("maxDelay", d.backoff.max_delay),
    )
    if backoff.jitter > 1:
        raise b.error("jitter", f"expected a fraction between 0 and 1, got {backoff.jitter}")
    if backoff.base_delay <= 0:
        raise b.error("baseDelay", "expected a positive duration")
    if backoff.max_delay < backoff.base_delay:
        raise b.error("maxDelay", "expected a duration no shorter than baseDelay")
    _done(b, ignored)

    r = s.section("responseRetries")
    response_retries = ResponseRetriesConfig(
        enabled=r.boolean("enabled", True),
        max_retries=r.integer("maxRetries", 3),
        back_off_ms=r.integer("backOffMs", 3000),
    )
    _done(r, ignored)
    grpc_addresses = s.strings("grpcAddresses", what="server addresses (host:port)")
    if grpc_addresses and s.has("grpc"):
        raise s.error(
            "grpcAddresses",
            "give the server's address in clouddriver.grpc or its addresses in "
            "clouddriver.grpcAddresses, not both",
        )
    config = ClouddriverConfig(
        grpc=s.string("grpc", d.grpc),
        grpc_addresses=grpc_addresses,
        insecure=s.boolean("insecure", d.insecure),
        tls=tls,
        auth=auth,
        keep_alive_heartbeat_seconds=s.integer("keepAliveHeartbeatSeconds", 20),
        keep_alive_time_out_seconds=s.integer("keepAliveTimeOutSeconds", 10),
        keep_alive_operation_seconds=s.integer("keepAliveOperationSeconds", 0),
        backoff=backoff,
        response_retries=response_retries,
        no_proxy=s.boolean("noProxy", False),
    )
    _done(s, ignored)
    return config


# -- kubernetes --------------------------------------------------------------------------------


def _kubernetes(s: Section, ignored: list[str]) -> KubernetesConfig:
    r = s.section("retries")
    retries = RetriesConfig(
        enabled=r.boolean("enabled", True),
        max_retries=r.integer("maxRetries", 3),
        back_off_ms=r.integer("backOffMs", 3000),
        retry_any_error=r.boolean("retryAnyError", False),
        retryable_errors=(
            r.strings("retryableErrors", what="error message fragments")
            if r.has("retryableErrors")
            else RetriesConfig().retryable_errors
        ),
    )
    _done(r, ignored)
    config = KubernetesConfig(
        accounts=_accounts(s),
        reconnect_timeout_ms=s.integer("reconnectTimeoutMs", 5000),
        cache_group_size=s.integer("cacheGroupSize", 0),
        cache_group_delay_ms=s.integer("cacheGroupDelayMs", 0),
        retries=retries,
        server_side_apply=_server_side_apply(s.section("serverSideApply"), ignored),
        no_proxy=s.boolean("noProxy", False),
        strip_managed_fields=s.boolean("stripManagedFields", True),
        discovery_interval_seconds=s.integer("discoveryIntervalSeconds", 120, minimum=1),
    )
    _done(s, ignored)
    return config


def _server_side_apply(s: Section, ignored: list[str]) -> ServerSideApplyConfig:
    kinds = []
    for k in s.sections("kinds", what="per-kind server-side apply settings"):
        kinds.append(
            ServerSideApplyKind(
                kind=k.required_string("kind"),
                enabled=k.choice("enabled", "", SSA_MODES) if k.has("enabled") else None,
                clear_managed_fields=(
                    k.choice("clearManagedFields", "", SSA_MODES)
                    if k.has("clearManagedFields")
                    else None
                ),
                manifest_defaults=(
                    k.choice("manifestDefaults", "", SSA_MODES)
                    if k.has("manifestDefaults")
                    else None
                ),
            )
        )
        _done(k, ignored)
    config = ServerSideApplyConfig(
        enabled=s.choice("enabled", "allowed", SSA_MODES),
        clear_managed_fields=s.choice("clearManagedFields", "allowed", SSA_MODES),
        manifest_defaults=s.choice("manifestDefaults", "allowed", SSA_MODES),
        kinds=tuple(kinds),
    )
    _done(s, ignored)
    return config


_ACCOUNT_OPTIONS = [
    "name",
    "kubeConfigFile",
    "kubeconfigContents",
    "context",
    "serviceAccount",
    "insecure",
    "oAuthScopes",
    "kinds",
    "omitKinds",
    "namespaces",
    "omitNamespaces",
    "onlyNamespacedResources",
    "customResourceDefinitions",
    "permissions",
    "maxResumableResourceAgeMs",
    "metrics",
    "onlySpinnakerManaged",
    "noProxy",
    "shard",
]


def _accounts(s: Section) -> tuple[AccountConfig, ...]:
    accounts: list[AccountConfig] = []
    first_index: dict[str, int] = {}
    where = s.child_path("accounts")
    for index, a in enumerate(s.sections("accounts", what="accounts")):
        account = _account(a)
        if account.name in first_index:
            raise a.error(
                "name",
                f"duplicate account name {account.name!r}: {where}[{first_index[account.name]}]"
                f" and {where}[{index}] both use it",
            )
        first_index[account.name] = index
        accounts.append(account)
    return tuple(accounts)


def _refuse_unknown(section: Section, known: list[str]) -> None:
    """Inside an account an unknown option is an error (see the module docstring)."""
    for path in section.unknown():
        key = path.rsplit(".", 1)[-1]
        raise ConfigError(
            f"unknown account option {key!r}{section.suggest(key, known)}",
            file=section.file,
            path=path,
        )


def _account(a: Section) -> AccountConfig:
    name = a.required_string("name")
    if "/" in name:  # the server names an account's shard "account/shard"
        raise a.error("name", f"an account name may not contain '/', got {name!r}")
    kube_config_file = a.string("kubeConfigFile", None)
    kubeconfig_contents = a.string("kubeconfigContents", None)
    service_account = a.boolean("serviceAccount", False)
    chosen = [
        option
        for option, given in (
            ("kubeConfigFile", kube_config_file is not None),
            ("kubeconfigContents", kubeconfig_contents is not None),
            ("serviceAccount", service_account),
        )
        if given
    ]
    if len(chosen) > 1:
        raise a.error(chosen[1], f"give only one of {' and '.join(chosen)}")
    context = a.string("context", None)
    if context is not None and service_account:
        raise a.error("context", "a context needs a kubeconfig, not serviceAccount: true")
    crds = []
    for c in a.sections("customResourceDefinitions", what="custom resource definitions"):
        kind = c.required_string("kind")
        if "." not in kind.strip("."):
            raise c.error(
                "kind", f"expected 'Kind.group' (e.g. 'Rollout.argoproj.io'), got {kind!r}"
            )
        crds.append(
            CustomResourceDefinition(
                kind=kind, scope=c.choice("scope", "Namespaced", ("Namespaced", "Cluster"))
            )
        )
        _refuse_unknown(c, ["kind", "scope"])
    account = AccountConfig(
        name=name,
        kube_config_file=kube_config_file,
        kubeconfig_contents=kubeconfig_contents,
        context=context,
        service_account=service_account,
        insecure=a.boolean("insecure", False),
        o_auth_scopes=a.strings("oAuthScopes", what="OAuth scopes"),
        kinds=a.strings("kinds", what="kind names"),
        omit_kinds=a.strings("omitKinds", what="kind names"),
        namespaces=a.strings("namespaces", what="namespace names"),
        omit_namespaces=a.strings("omitNamespaces", what="namespace names"),
        only_namespaced_resources=a.boolean("onlyNamespacedResources", False),
        custom_resource_definitions=tuple(crds),
        permissions=_permissions(a.section("permissions")),
        max_resumable_resource_age_ms=a.integer("maxResumableResourceAgeMs", 300_000),
        metrics=a.boolean("metrics", False),
        only_spinnaker_managed=a.boolean("onlySpinnakerManaged", False),
        no_proxy=a.boolean("noProxy", False),
    )
    if a.has("shard"):
        account = _sharded(a, account)
    _refuse_unknown(a, _ACCOUNT_OPTIONS)
    return account


# A shard's name becomes part of a name on the server ("account/shard"): a DNS label.
_SHARD_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def _sharded(a: Section, account: AccountConfig) -> AccountConfig:
    """``account`` with its ``shard:`` read and folded into the watch filters (ShardConfig).

    The shard says what the agent watches; the account-level ``kinds``, ``namespaces`` and
    ``omitNamespaces`` would say it a second time, differently, so they are refused beside
    it (``omitKinds`` and ``onlyNamespacedResources`` only narrow, and stay allowed)."""
    s = a.section("shard")
    name = s.required_string("name")
    if not _SHARD_NAME.fullmatch(name):
        raise s.error("name", f"expected a DNS label (a-z, 0-9 and '-'), got {name!r}")
    shard = ShardConfig(
        name=name,
        kinds=s.strings("kinds", what="kind names"),
        omit_kinds=s.strings("omitKinds", what="kind names"),
        namespaces=s.strings("namespaces", what="namespace names"),
    )
    if shard.kinds and shard.omit_kinds:
        raise s.error("omitKinds", "give a shard kinds or omitKinds, not both")
    if s.has("omitNamespaces"):
        raise s.error(
            "omitNamespaces",
            "a shard lists the namespaces it owns (namespaces); 'every namespace but these' is "
            "not a shard: its cluster-wide listings would sweep the other shards' namespaces",
        )
    for option in ("kinds", "namespaces", "omitNamespaces"):
        if a.has(option):
            raise a.error(option, f"a sharded account gives {option} in shard:, not beside it")
    _refuse_unknown(s, ["name", "kinds", "omitKinds", "namespaces", "omitNamespaces"])
    return replace(
        account,
        shard=shard,
        kinds=shard.kinds,
        omit_kinds=tuple(dict.fromkeys((*account.omit_kinds, *shard.omit_kinds))),
        namespaces=shard.namespaces,
        # A shard of some namespaces owns no cluster-scoped kind (the shard of every
        # namespace does): two namespace shards would otherwise both list them.
        only_namespaced_resources=account.only_namespaced_resources or bool(shard.namespaces),
    )


def _permissions(p: Section) -> Permissions:
    # Spinnaker writes READ/WRITE/EXECUTE; accept any letter case.
    keys = {key.upper(): key for key in _keys(p)}
    for upper, key in keys.items():
        if upper not in ("READ", "WRITE", "EXECUTE"):
            raise p.error(key, "expected READ, WRITE or EXECUTE (each a list of role names)")
    return Permissions(
        read=p.strings(keys["READ"], what="role names") if "READ" in keys else (),
        write=p.strings(keys["WRITE"], what="role names") if "WRITE" in keys else (),
        execute=p.strings(keys["EXECUTE"], what="role names") if "EXECUTE" in keys else (),
    )


def _keys(section: Section) -> Iterable[str]:
    # Section.unknown() lists every key not read yet: here, all of them.
    return [path.rsplit(".", 1)[-1] for path in section.unknown()]


# -- the small sections ------------------------------------------------------------------------


def _tasks(s: Section, ignored: list[str]) -> TasksConfig:
    config = TasksConfig(
        total_budget=s.integer("totalBudget", 1000, minimum=1),
        budget_per_account=s.integer("budgetPerAccount", 50, minimum=1),
        queue_check_frequency_ms=s.integer("queueCheckFrequencyMs", 2000),
    )
    _done(s, ignored)
    return config


def _server(s: Section, ignored: list[str]) -> ServerConfig:
    ssl_s = s.section("ssl")
    ssl = ServerSslConfig(
        enabled=ssl_s.boolean("enabled", False),
        cert_file=ssl_s.string("certFile", None),
        key_file=ssl_s.string("keyFile", None),
        key_password=ssl_s.string("keyPassword", None),
        cacert_file=ssl_s.string("cacertFile", None),
    )
    if ssl.enabled and not (ssl.cert_file and ssl.key_file):
        raise ssl_s.error("enabled", "TLS needs certFile and keyFile")
    _done(ssl_s, ignored)
    config = ServerConfig(host=s.string("host", "localhost"), port=s.port("port", 8082), ssl=ssl)
    _done(s, ignored)
    return config


def _prometheus(s: Section, ignored: list[str]) -> PrometheusConfig:
    config = PrometheusConfig(enabled=s.boolean("enabled", False), port=s.port("port", 8008))
    _done(s, ignored)
    return config


def _logging(s: Section, ignored: list[str]) -> LoggingConfig:
    level = s.choice("level", "INFO", ("TRACE", "DEBUG", "INFO", "WARN", "WARNING", "ERROR"))
    config = LoggingConfig(
        file=s.string("file", None),
        format=s.choice("format", "text", ("text", "json")),
        level={"WARN": "WARNING", "TRACE": "DEBUG"}.get(level, level),
        fields=s.string_map("fields"),
        max_size_mb=s.integer("maxSize", 100),
        max_backups=s.integer("maxBackups", 0),
        max_age_days=s.integer("maxAge", 0),
        local_time=s.boolean("localTime", False),
        compress=s.boolean("compress", False),
    )
    _done(s, ignored)
    return config


def _budget(s: Section, ignored: list[str]) -> BudgetConfig:
    config = BudgetConfig(bytes=s.size("bytes", BudgetConfig().bytes))
    if config.bytes < 64 * 1024:
        raise s.error("bytes", f"expected at least 64Ki, got {config.bytes} bytes")
    _done(s, ignored)
    return config


def _idle(s: Section, ignored: list[str]) -> IdleConfig:
    config = IdleConfig(coalesce_ms=s.integer("coalesceMs", DEFAULT_IDLE_COALESCE_MS))
    if (ms := config.coalesce_ms) > MAX_IDLE_COALESCE_MS:
        limit = f"at most {MAX_IDLE_COALESCE_MS} ms (0 turns it off)"
        raise s.error("coalesceMs", f"expected {limit}, got {ms}")
    _done(s, ignored)
    return config


def _shutdown(s: Section, ignored: list[str]) -> ShutdownConfig:
    config = ShutdownConfig(drain_seconds=s.number("drainSeconds", DEFAULT_DRAIN_SECONDS))
    if config.drain_seconds <= 0:
        raise s.error("drainSeconds", f"expected a number > 0, got {config.drain_seconds:g}")
    _done(s, ignored)
    return config
