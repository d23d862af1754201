"""server.yaml loading: defaults, every section, and errors naming file, path and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from server import ClientAuth, ConfigError, load_server_config
from server._app import SHUTDOWN_SLACK_SECONDS
from server._config import store_config
from server._grpc import CLOSE_AFTER_DRAIN_SECONDS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.yaml"
    path.write_text(text)
    return path


def test_empty_file_gives_the_defaults(tmp_path: Path) -> None:
    config = load_server_config(write(tmp_path, ""))
    assert (config.grpc.port, config.api.port) == (9091, 7002)
    assert config.grpc.max_message_size == 4 * 2**20
    assert config.grpc.tls is None
    assert config.grpc.auth.jwt is None
    assert config.accounts.orphan_grace_seconds == 600
    assert config.accounts.max_resumable_resource_age_ms == 300_000
    assert config.store.path == str(tmp_path / "kubesvc.db")
    assert config.api.http_server == "kubesvc"


def test_the_rest_api_can_fall_back_to_hypercorn(tmp_path: Path) -> None:
    config = load_server_config(write(tmp_path, "api: {httpServer: hypercorn}"))
    assert config.api.http_server == "hypercorn"


def test_full_config(tmp_path: Path) -> None:
    for name in ("tls.crt", "tls.key", "ca.crt", "jwt.pub"):
        (tmp_path / name).write_text("x")
    (tmp_path / "secret").write_text("s3cret\n")
    config = load_server_config(
        write(
            tmp_path,
            """
serverId: cd-1
grpc:
  port: 9999
  maxMessageSize: 8388608
  tls: {enabled: true, certFile: tls.crt, keyFile: tls.key, caFile: ca.crt, clientAuth: require}
  auth:
    jwt: {enabled: true, algorithms: [HS256, RS256], secretFile: secret,
          publicKeyFiles: [jwt.pub], audience: kubesvc, leewaySeconds: 5, accountsClaim: accts}
    x509: {subjectFilters: ["^CN=agent-.*"]}
api: {host: 127.0.0.1, port: 8000}
store: {path: ":memory:"}
accounts: {orphanGraceSeconds: 30, maxResumableResourceAgeMs: 1000}
sessions: {helloTimeoutSeconds: 3, maxBatchEvents: 500, outboundQueue: 8, heartbeatSeconds: 0}
operations: {waitMs: 1000}
""",
        )
    )
    assert config.server_id == "cd-1"
    tls = config.grpc.tls
    assert tls is not None
    assert tls.client_auth is ClientAuth.REQUIRE
    assert tls.ca_file == str(tmp_path / "ca.crt")
    jwt = config.grpc.auth.jwt
    assert jwt is not None
    assert (jwt.secret, jwt.public_keys, jwt.accounts_claim) == ("s3cret", ("x",), "accts")
    assert config.grpc.auth.subject_filters[0].pattern == "^CN=agent-.*"
    assert config.store.path == ":memory:"
    assert config.sessions.max_batch_events == 500
    assert config.operations.wait_ms == 1000


@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ("grpc: {port: nine}", "grpc.port", "expected an integer"),
        ("grpc: {port: 70000}", "grpc.port", "0..65535"),
        ("grpc: {prot: 1}", "grpc.prot", "unknown key"),
        ("grpc: {tls: {enabled: true, keyFile: k}}", "grpc.tls.certFile", "required"),
        ("grpc: {tls: {enabled: true, certFile: nope.crt}}", "grpc.tls.certFile", "does not exist"),
        ("grpc: {tls: {clientAuth: SOMETIMES, enabled: true}}", "grpc.tls.clientAuth", "NONE, "),
        ("grpc: {auth: {jwt: {enabled: true}}}", "grpc.auth.jwt", "secret or secretFile"),
        ("grpc: {auth: {x509: {subjectFilters: ['(']}}}", "subjectFilters[0]", "regular expr"),
        ("accounts: {orphanGraceSeconds: -1}", "accounts.orphanGraceSeconds", ">= 0"),
        ("sessions: {outboundQueue: true}", "sessions.outboundQueue", "an integer"),
        ("store: {type: postgres}", "store.type", "set store.url: postgresql://"),
        ("store: {url: 'mysql://h/db'}", "store.url", "unknown store scheme 'mysql'"),
        ("store: {url: 'postgresql://u@h/db?sslmod=require'}", "store.url", "sslmod"),
        ("store: {url: 'postgresql://u@h:5432'}", "store.url", "names no database"),
        ("store: {url: 'sqlite://'}", "store.url", "needs a path"),
        ("store: {url: 'sqlite://a.db', path: b.db}", "store.path", "not both"),
        ("store: {url: 'sqlite://a.db', passwordFile: x}", "store.passwordFile", "does not"),
        ("store: {maxConnections: 0}", "store.maxConnections", "1..1000"),
        ("store: {statementTimeoutMs: -1}", "store.statementTimeoutMs", "0..3600000"),
        ("api: {httpServer: nginx}", "api.httpServer", "kubesvc, hypercorn"),
        ("shutdown: {drainSeconds: 0}", "shutdown.drainSeconds", "a number > 0"),
        # .nan passed every comparison: SIGTERM then raised in move_on_at, and a nan
        # helloTimeoutSeconds made every call handler raise
        ("shutdown: {drainSeconds: .nan}", "shutdown.drainSeconds", "a finite number"),
        ("shutdown: {drainSeconds: .inf}", "shutdown.drainSeconds", "a finite number"),
        ("sessions: {helloTimeoutSeconds: .nan}", "sessions.helloTimeoutSeconds", "finite"),
        ("sessions: {helloTimeoutSeconds: -.inf}", "sessions.helloTimeoutSeconds", "finite"),
        ("shutdown: {drainSecs: 3}", "shutdown.drainSecs", "unknown key"),
        ("- a list", "", "expected a mapping"),
        ("grpc: [1", "line 1", "invalid YAML"),
    ],
)
def test_errors_name_file_path_and_expectation(
    tmp_path: Path, text: str, path: str, expected: str
) -> None:
    file = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_server_config(file)
    message = str(info.value)
    assert message.startswith(str(file))
    assert path in message
    assert expected in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the file"):
        load_server_config(tmp_path / "absent.yaml")


def test_the_drain_bound_defaults_inside_kubernetes_grace_period(tmp_path: Path) -> None:
    assert load_server_config(write(tmp_path, "{}")).shutdown.drain_seconds == 15.0
    # ... and so does the whole shutdown: 15 s drain + 10 s session close + 5 s store close
    # was exactly Kubernetes' 30 s, with nothing left for the exit.
    assert CLOSE_AFTER_DRAIN_SECONDS + 2.0 + 1.0 <= SHUTDOWN_SLACK_SECONDS
    assert 15.0 + SHUTDOWN_SLACK_SECONDS <= 25.0
    config = load_server_config(write(tmp_path, "shutdown: {drainSeconds: 12}"))
    assert config.shutdown.drain_seconds == 12.0


@pytest.mark.parametrize(
    ("text", "url"),
    [
        ("", "sqlite://{dir}/kubesvc.db"),  # the default, beside the config file
        ("store: {type: sqlite, path: cache.db}", "sqlite://{dir}/cache.db"),  # older keys
        ("store: {path: ':memory:'}", "sqlite://:memory:"),
        ("store: {url: 'sqlite://:memory:'}", "sqlite://:memory:"),
        ("store: {url: 'sqlite://data/k.db'}", "sqlite://{dir}/data/k.db"),
        ("store: {url: 'sqlite:///var/lib/k.db'}", "sqlite:///var/lib/k.db"),
        (
            "store: {url: 'postgresql://kubesvc@db.example:5432/kubesvc?sslmode=verify-full'}",
            "postgresql://kubesvc@db.example:5432/kubesvc?sslmode=verify-full",
        ),
    ],
)
def test_store_urls(tmp_path: Path, text: str, url: str) -> None:
    config = load_server_config(write(tmp_path, text))
    assert config.store.url == url.format(dir=tmp_path)


def test_a_postgresql_password_comes_from_a_file_never_the_text(tmp_path: Path) -> None:
    (tmp_path / "pg-password").write_text("hunter2\n")
    config = load_server_config(
        write(
            tmp_path,
            "store: {url: 'postgresql://kubesvc@db/kubesvc', passwordFile: pg-password,"
            " maxConnections: 8, statementTimeoutMs: 5000}",
        )
    )
    assert config.store.password_file == str(tmp_path / "pg-password")
    assert config.store.max_connections == 8
    assert config.store.statement_timeout_ms == 5000
    assert config.store.location.conninfo == "postgresql://kubesvc@db/kubesvc"
    # Also as an option of the URL (for --store), taken out before libpq sees the URL.
    config = load_server_config(
        write(tmp_path, "store: {url: 'postgresql://k@db/k?passwordFile=/run/pw&sslmode=require'}")
    )
    location = config.store.location
    assert (location.conninfo, location.password_file) == (
        "postgresql://k@db/k?sslmode=require",
        "/run/pw",
    )


def test_a_bad_url_error_never_echoes_a_password(tmp_path: Path) -> None:
    file = write(tmp_path, "store: {url: 'postgresql://k:hunter2@db/k?nonsense=1'}")
    with pytest.raises(ConfigError, match=r"store\.url") as info:
        load_server_config(file)
    assert "hunter2" not in str(info.value)
    assert "k:***@db" in str(info.value)


def test_the_command_line_store_overrides_the_file(tmp_path: Path) -> None:
    config = store_config("sqlite://rel.db", tmp_path)
    assert config.url == f"sqlite://{tmp_path}/rel.db"
    with pytest.raises(ConfigError, match=r"^--store: expected sqlite:///path"):
        store_config("postgres:/oops", tmp_path)
