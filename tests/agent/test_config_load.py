"""The config loader: the whole Armory option set, sizes, durations, and clear errors."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent import ConfigError, load_config, parse_config, parse_duration, parse_size
from agent.config._load import default_config_path

FULL = """
clouddriver:
  grpc: clouddriver.example:9091
  insecure: false
  tls:
    serverName: clouddriver.example
    insecureSkipVerify: false
    cacertFile: /tls/ca.pem
    clientCertFile: /tls/agent.pem
    clientKeyFile: /tls/agent.key
    clientKeyFilePassword: hunter2
  auth:
    token: abc
    tokenCommand:
      command: /bin/get-token
      args: [--audience, spinnaker]
      format: json
      refreshIntervalSeconds: 300
  keepAliveHeartbeatSeconds: 30
  keepAliveTimeOutSeconds: 15
  keepAliveOperationSeconds: 600
  backoff:
    baseDelay: 2000000000
    multiplier: 2
    jitter: 0.1
    maxDelay: 1m30s
  responseRetries: {enabled: false, maxRetries: 5, backOffMs: 100}
  noProxy: true
kubernetes:
  reconnectTimeoutMs: 7000
  cacheGroupSize: 5
  cacheGroupDelayMs: 250
  noProxy: true
  retries:
    enabled: true
    maxRetries: 4
    backOffMs: 50
    retryAnyError: true
    retryableErrors: [timeout, "connection reset"]
  serverSideApply:
    enabled: always
    clearManagedFields: never
    manifestDefaults: allowed
    kinds:
      - kind: Deployment
        enabled: never
  accounts:
    - name: prod
      kubeConfigFile: /kube/prod.yaml
      context: prod-admin
      insecure: true
      oAuthScopes: [scope-a]
      kinds: [deployment, Service, rollout]
      omitKinds: [secret]
      namespaces: [web, api]
      omitNamespaces: [kube-system]
      onlyNamespacedResources: true
      customResourceDefinitions:
        - {kind: Rollout.argoproj.io, scope: Namespaced}
        - {kind: ClusterThing.example.com, scope: Cluster}
      permissions: {READ: [dev, ops], WRITE: [ops]}
      maxResumableResourceAgeMs: 60000
      metrics: true
      onlySpinnakerManaged: true
      noProxy: true
    - name: in-cluster
      serviceAccount: true
tasks: {totalBudget: 10, budgetPerAccount: 2, queueCheckFrequencyMs: 500}
server:
  host: 0.0.0.0
  port: 9082
  ssl: {enabled: true, certFile: /tls/s.pem, keyFile: /tls/s.key}
prometheus: {enabled: true, port: 9008}
logging:
  file: /var/log/agent.log
  format: json
  level: debug
  fields: {cluster: east}
  maxSize: 10
timeoutSeconds: 30
budget: {bytes: 1Gi}
"""


def test_every_option_of_the_reference_is_read() -> None:
    config = parse_config(FULL, source="kubesvc.yaml")
    assert config.ignored_options == ()
    cd = config.clouddriver
    assert cd.grpc == "clouddriver.example:9091"
    assert not cd.insecure
    assert cd.tls.server_name == "clouddriver.example"
    assert cd.tls.client_key_file_password == "hunter2"
    assert cd.auth.token == "abc"
    assert cd.auth.token_command is not None
    assert cd.auth.token_command.args == ("--audience", "spinnaker")
    assert cd.auth.token_command.format == "json"
    assert cd.auth.token_command.refresh_interval_seconds == 300
    assert (cd.keep_alive_heartbeat_seconds, cd.keep_alive_time_out_seconds) == (30, 15)
    assert cd.keep_alive_operation_seconds == 600
    assert cd.backoff.base_delay == 2.0
    assert cd.backoff.max_delay == 90.0
    assert cd.backoff.multiplier == 2.0
    assert cd.backoff.jitter == 0.1
    assert not cd.response_retries.enabled
    assert cd.response_retries.max_retries == 5
    assert cd.no_proxy
    k = config.kubernetes
    assert (k.reconnect_timeout_ms, k.cache_group_size, k.cache_group_delay_ms) == (7000, 5, 250)
    assert k.no_proxy
    assert k.retries.retry_any_error
    assert k.retries.max_retries == 4
    assert k.retries.retryable_errors == ("timeout", "connection reset")
    assert k.server_side_apply.enabled == "always"
    assert k.server_side_apply.kinds[0].kind == "Deployment"
    assert k.server_side_apply.kinds[0].enabled == "never"
    assert k.server_side_apply.kinds[0].clear_managed_fields is None
    prod, in_cluster = k.accounts
    assert prod.kinds == ("deployment", "Service", "rollout")
    assert prod.omit_kinds == ("secret",)
    assert prod.namespaces == ("web", "api")
    assert prod.custom_resource_definitions[1].scope == "Cluster"
    assert prod.permissions.read == ("dev", "ops")
    assert prod.permissions.write == ("ops",)
    assert prod.max_resumable_resource_age_ms == 60000
    assert prod.metrics
    assert prod.only_spinnaker_managed
    assert prod.no_proxy
    assert prod.insecure
    assert in_cluster.service_account
    assert in_cluster.kube_config_file is None
    assert config.tasks.total_budget == 10
    assert config.tasks.budget_per_account == 2
    assert config.server.port == 9082
    assert config.server.ssl.enabled
    assert config.prometheus.enabled
    assert config.prometheus.port == 9008
    assert config.logging.level == "DEBUG"
    assert config.logging.format == "json"
    assert config.logging.fields == (("cluster", "east"),)
    assert config.timeout_seconds == 30.0
    assert config.budget.bytes == 2**30


def test_an_empty_file_gives_the_reference_defaults() -> None:
    config = parse_config("", source="empty.yaml")
    assert config.clouddriver.grpc == "spin-clouddriver-grpc:9091"
    assert config.clouddriver.insecure
    assert config.clouddriver.backoff.base_delay == 1.0
    assert config.clouddriver.backoff.max_delay == 120.0
    assert config.kubernetes.reconnect_timeout_ms == 5000
    assert config.kubernetes.retries.retryable_errors == ("timeout", "deadline exceeded")
    assert config.tasks.total_budget == 1000
    assert config.tasks.budget_per_account == 50
    assert config.server.port == 8082
    assert config.prometheus.port == 8008
    assert config.budget.bytes == 64 * 2**20
    assert config.timeout_seconds == 0.0


def test_the_armory_layout_under_kubesvc_is_accepted_and_paths_say_so() -> None:
    text = (
        "kubesvc:\n  kubernetes:\n    accounts:\n      - name: a\n        kinds: pod\nspring: {}\n"
    )
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="armory-agent.yml")
    assert info.value.path == "kubesvc.kubernetes.accounts[0].kinds"
    config = parse_config(text.replace("kinds: pod", "kinds: [pod]"), source="armory-agent.yml")
    assert config.kubernetes.accounts[0].kinds == ("pod",)
    assert config.ignored_options == ("spring",)


def test_unknown_options_outside_accounts_are_listed_with_their_path() -> None:
    config = parse_config(
        "clouddriver: {grpc: x:1, someFutureOption: 1}\nmanagement: {port: 1}\n", source="f"
    )
    assert config.ignored_options == ("clouddriver.someFutureOption", "management")


def test_load_config_warns_about_ignored_options(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kubesvc.yaml"
    path.write_text("tasks: {totalBudget: 5, extra: true}\n")
    with caplog.at_level(logging.WARNING, logger="agent.config"):
        config = load_config(path)
    assert config.tasks.total_budget == 5
    assert "tasks.extra" in caplog.text
    assert str(path) in caplog.text


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        (
            "kubernetes: {accounts: [{name: a}, {name: b}, {name: c, kinds: deployment}]}",
            "kubernetes.accounts[2].kinds",
            "expected a list of kind names, got 'deployment'",
        ),
        (
            "kubernetes: {accounts: [{name: a, omitKind: [secret]}]}",
            "kubernetes.accounts[0].omitKind",
            "unknown account option 'omitKind'; did you mean 'omitKinds'?",
        ),
        (
            "kubernetes: {accounts: [{name: a, kinds: [pod, 3]}]}",
            "kubernetes.accounts[0].kinds[1]",
            "expected one of the kind names (a non-empty string), got 3",
        ),
        (
            "kubernetes: {accounts: [{kinds: [pod]}]}",
            "kubernetes.accounts[0].name",
            "is required",
        ),
        (
            "kubernetes: {accounts: [{name: a, serviceAccount: true, kubeConfigFile: /k}]}",
            "kubernetes.accounts[0].serviceAccount",
            "give only one of kubeConfigFile and serviceAccount",
        ),
        (
            "kubernetes: {accounts: [{name: a, customResourceDefinitions: [{kind: Rollout}]}]}",
            "kubernetes.accounts[0].customResourceDefinitions[0].kind",
            "expected 'Kind.group'",
        ),
        (
            "kubernetes: {accounts: [{name: a, permissions: {READ: [x], ADMIN: [y]}}]}",
            "kubernetes.accounts[0].permissions.ADMIN",
            "expected READ, WRITE or EXECUTE",
        ),
        ("kubernetes: {accounts: {name: a}}", "kubernetes.accounts", "expected a list of accounts"),
        ("kubernetes: {accounts: [prod]}", "kubernetes.accounts[0]", "expected a mapping"),
        ("server: {port: 70000}", "server.port", "expected a TCP port"),
        ("server: {port: eighty}", "server.port", "expected an integer, got 'eighty'"),
        ("clouddriver: {insecure: maybe}", "clouddriver.insecure", "expected true or false"),
        ("logging: {format: xml}", "logging.format", "expected one of text, json, got 'xml'"),
        ("budget: {bytes: lots}", "budget.bytes", "expected a size like '64Mi'"),
        ("clouddriver: {backoff: {baseDelay: 5}}", "clouddriver.backoff.baseDelay", "write '5s'"),
        ("clouddriver: {backoff: {jitter: 3}}", "clouddriver.backoff.jitter", "between 0 and 1"),
        (
            "kubernetes: {serverSideApply: {kinds: [{kind: Pod, enabled: sometimes}]}}",
            "kubernetes.serverSideApply.kinds[0].enabled",
            "expected one of always, never, allowed",
        ),
        ("tasks: [1, 2]", "tasks", "expected a mapping of options"),
        ("shutdown: {drainSeconds: 0}", "shutdown.drainSeconds", "expected a number > 0"),
        ("shutdown: {drainSeconds: soon}", "shutdown.drainSeconds", "expected a number"),
        # .nan passed every comparison: SIGTERM then raised in move_on_at (exit 1)
        ("shutdown: {drainSeconds: .nan}", "shutdown.drainSeconds", "a finite number"),
        ("shutdown: {drainSeconds: .inf}", "shutdown.drainSeconds", "a finite number"),
        ("idle: {coalesceMs: -1}", "idle.coalesceMs", "expected an integer >= 0"),
        ("idle: {coalesceMs: 1001}", "idle.coalesceMs", "at most 1000 ms (0 turns it off)"),
        ("idle: {coalesceMs: 0.5}", "idle.coalesceMs", "expected an integer"),
        ("clouddriver: {backoff: {jitter: .nan}}", "clouddriver.backoff.jitter", "finite"),
        ("clouddriver: {backoff: {baseDelay: .nan}}", "clouddriver.backoff.baseDelay", "got nan"),
        ("clouddriver: {backoff: {maxDelay: .inf}}", "clouddriver.backoff.maxDelay", "got inf"),
        ("a: [1\n", "line 2, column 1", "invalid YAML"),
        ("a: 1\na: 2\n", "line 2, column 1", "duplicate key 'a'"),
    ],
)
def test_a_bad_file_names_the_file_the_path_and_what_was_expected(
    text: str, path: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, source="kubesvc.yaml")
    assert info.value.file == "kubesvc.yaml"
    assert info.value.path == path
    assert expected in info.value.problem
    assert str(info.value).startswith(f"kubesvc.yaml: {path}: ")


def test_duplicate_account_names_name_both_indices() -> None:
    text = "kubernetes: {accounts: [{name: a}, {name: b}, {name: a}]}"
    with pytest.raises(ConfigError, match=r"accounts\[0\] and kubernetes.accounts\[2\]"):
        parse_config(text, source="f")


def test_an_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config file") as info:
        load_config(tmp_path / "absent.yaml")
    assert info.value.file == str(tmp_path / "absent.yaml")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("64Mi", 64 * 2**20),
        ("1Gi", 2**30),
        ("500k", 500_000),
        ("2Ki", 2048),
        ("1.5Gi", 3 * 2**29),
        (123, 123),
        ("4096", 4096),
        ("3M", 3_000_000),
    ],
)
def test_sizes(value: object, expected: int) -> None:
    assert parse_size(value) == expected


@pytest.mark.parametrize("value", ["64 MB", "-1", -1, True, "Mi", 1.5, None])
def test_bad_sizes(value: object) -> None:
    with pytest.raises(ValueError, match="expected"):
        parse_size(value)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (1_000_000_000, 1.0),
        (120_000_000_000, 120.0),
        ("1s", 1.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("2h", 7200.0),
        ("1.5s", 1.5),
        ("250us", 0.00025),
        ("0", 0.0),
        (0, 0.0),
        ("3000000000", 3.0),
    ],
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["1 second", "s", "1x", -5, 1, 999, True, "1s2"])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(value)


def test_default_config_path_honours_the_environment() -> None:
    assert default_config_path({}) == "kubesvc.yaml"
    assert default_config_path({"KUBESVC_CONFIG": "/etc/kubesvc/agent.yaml"}) == (
        "/etc/kubesvc/agent.yaml"
    )


def test_configs_compare_by_value_not_by_source() -> None:
    a = parse_config(FULL, source="one.yaml")
    b = parse_config(FULL, source="two.yaml")
    assert a == b
    assert hash(a) == hash(b)
    assert a.account("prod") is not None
    assert a.account("nope") is None


def test_idle_pacing_is_on_by_default_and_zero_turns_it_off() -> None:
    assert parse_config("").idle.coalesce_ms == 20
    assert parse_config("idle: {coalesceMs: 0}").idle.coalesce_ms == 0
    assert parse_config("idle: {coalesceMs: 50}").idle.coalesce_ms == 50


def test_the_drain_bound_defaults_inside_kubernetes_grace_period() -> None:
    assert parse_config("").shutdown.drain_seconds == 20.0  # of the pod's 30 s
    assert parse_config("shutdown: {drainSeconds: 7.5}").shutdown.drain_seconds == 7.5
