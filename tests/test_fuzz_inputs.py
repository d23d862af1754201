"""Fuzz the parsers of untrusted input (issue 12): the wire record decoder, the agent config
and kubeconfig loaders, the server config loader and the operations payload parser.

The property, for each: any input gives a value or that package's own clear error, never
another exception, never a hang (each call runs under an alarm). Inputs are arbitrary bytes,
arbitrary values in the parser's format, and valid documents with a few parts replaced by
arbitrary values (so that the fuzz reaches the checks deep inside, not only the first one).

Derandomized, with a bounded number of examples, so the default run is deterministic and quick
(``KUBESVC_FUZZ_EXAMPLES=5000`` explores with random seeds instead).
"""

from __future__ import annotations

import base64
import copy
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import wire
from agent import ConfigError as AgentConfigError
from agent import KubeconfigError
from agent.config._load import parse_config
from agent.kube._kubeconfig import parse_kubeconfig
from server import ConfigError as ServerConfigError
from server import load_server_config, parse_server_config
from server.ops import OPERATIONS, OperationError, normalize, parse_request

from .agent.test_config_load import FULL as AGENT_CONFIG

T = TypeVar("T")

# KUBESVC_FUZZ_EXAMPLES=5000 explores: that many examples per test, from random seeds.
_EXPLORE = int(os.environ.get("KUBESVC_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    derandomize=not _EXPLORE,
    database=None,
    deadline=None,  # the alarm below is the hang guard; timing varies with the machine's load
    max_examples=_EXPLORE or 120,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
SECONDS_PER_CALL = 5.0


class Hang(Exception):
    pass


@contextmanager
def alarm(seconds: float = SECONDS_PER_CALL) -> Iterator[None]:
    """Raise Hang in the main thread if the block spends more than ``seconds`` of CPU.

    A parser that hangs loops (or backtracks) on the CPU, so CPU time catches it, and the
    virtual timer (SIGVTALRM) leaves the real-time one (SIGALRM) to a per-test timeout.
    """

    def ring(signum: int, frame: object) -> None:
        raise Hang(f"no answer within {seconds} s of CPU")

    previous = signal.signal(signal.SIGVTALRM, ring)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def value_or(error: type[Exception] | tuple[type[Exception], ...], call: Callable[[], T]) -> None:
    """``call()`` returns, or raises ``error`` with a message; anything else fails the test."""
    with alarm():
        try:
            call()
        except error as exc:
            refusal: Exception = exc
        else:
            return
    assert str(refusal), f"{type(refusal).__name__} without a message"


# -- values ------------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=20)
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)


def trees(leaves: st.SearchStrategy[Any], keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        leaves,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    )


json_values = trees(json_scalars, st.text(max_size=12))
yaml_values = trees(scalars, scalars.filter(lambda k: not isinstance(k, float)))


@st.composite
def mutated(draw: st.DrawFn, base: Any, values: st.SearchStrategy[Any]) -> Any:
    """``base`` with one to three nodes replaced by a drawn value (or removed from a mapping)."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        parent: Any = None
        key: Any = None
        node = doc
        while isinstance(node, (dict, list)) and node and draw(st.integers(0, 3)):
            key = draw(
                st.sampled_from(
                    sorted(node, key=repr) if isinstance(node, dict) else range(len(node))
                )
            )
            parent, node = node, node[key]
        replacement = draw(values)
        if parent is None:
            return replacement
        if isinstance(parent, dict) and draw(st.integers(0, 4)) == 0:
            del parent[key]
        else:
            parent[key] = replacement
    return doc


def dumped(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return values.map(lambda v: yaml.safe_dump(v, allow_unicode=True).encode())


def yaml_inputs(base: Any) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, arbitrary YAML, and ``base`` (a parsed valid document) mutated."""
    return (
        st.binary(max_size=200)
        | st.text(max_size=200).map(str.encode)
        | dumped(yaml_values)
        | dumped(mutated(base, yaml_values))
    )


# -- wire: the event records inside EventBatch -------------------------------------------------

RECORDS = [
    wire.EventRecord(1, "prod", "v1", "Pod", "ns", "web-1", "uid-1", "42", b'{"kind":"Pod"}'),
    wire.EventRecord(4, "prod", "v1", "Pod", "ns", "", "", "43", b""),
    wire.EventRecord(5, "prod", "apps/v1", "Deployment", "", "", "", "", b""),
]
ENCODED = wire.encode_events(RECORDS)
LIMITS = wire.RecordLimits(max_events=50, max_bytes=4096, max_object_bytes=64)


@st.composite
def corrupted(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` with a few bytes overwritten, then maybe cut short or extended."""
    buffer = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        buffer[draw(st.integers(0, len(buffer) - 1))] = draw(st.integers(0, 255))
    cut = draw(st.integers(0, len(buffer)))
    return bytes(buffer[:cut]) + draw(st.binary(max_size=8))


msgpack_values = trees(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12),
    st.text(max_size=8),
)


@FUZZ
@given(
    st.binary(max_size=300)
    | corrupted(ENCODED)
    | msgpack_values.map(msgspec.msgpack.encode)
    | st.lists(st.lists(msgpack_values, max_size=10), max_size=5).map(msgspec.msgpack.encode)
)
@example(b"\xdd\xff\xff\xff\xff")  # claims 4 billion records
@example(b"\x91\x99" + b"\xc0" * 9)  # a record of nulls
def test_the_record_decoder_gives_records_or_a_record_error(data: bytes) -> None:
    value_or(wire.RecordError, lambda: wire.decode_events(data, LIMITS))
    value_or(wire.RecordError, lambda: wire.decode_events(data))


# -- agent: the config file and kubeconfigs ----------------------------------------------------

AGENT_DOCUMENT = yaml.safe_load(AGENT_CONFIG)
DEEP_YAML = b"a: " + b"[" * 5000 + b"]" * 5000


@FUZZ
@given(yaml_inputs(AGENT_DOCUMENT))
@example(DEEP_YAML)
@example(b"kubernetes: {accounts: " + b"[" * 3000 + b"]" * 3000 + b"}")
def test_the_agent_config_loader_gives_a_config_or_a_config_error(text: bytes) -> None:
    value_or(AgentConfigError, lambda: parse_config(text, source="fuzz.yaml"))


CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot really\n-----END CERTIFICATE-----\n")
KUBECONFIG = {
    "apiVersion": "v1",
    "kind": "Config",
    "current-context": "main",
    "clusters": [
        {
            "name": "c",
            "cluster": {"server": "https://127.0.0.1:6443", "certificate-authority-data": CA},
        },
        {"name": "d", "cluster": {"server": "https://k.example", "certificate-authority": "ca"}},
    ],
    "users": [
        {"name": "u", "user": {"token": "t", "client-certificate-data": CA}},
        {
            "name": "e",
            "user": {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "get-token",
                    "args": ["--x"],
                    "env": [{"name": "A", "value": "b"}],
                }
            },
        },
        {"name": "f", "user": {"tokenFile": "token", "username": "a", "password": "b"}},
    ],
    "contexts": [
        {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "ns"}},
        {"name": "other", "context": {"cluster": "d", "user": "e"}},
        {"name": "third", "context": {"cluster": "d", "user": "f"}},
    ],
}


@pytest.fixture(scope="module")
def kube_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the fuzzed kubeconfigs' relative file names resolve: a CA and a token file."""
    base = tmp_path_factory.mktemp("kubeconfig")
    (base / "ca").write_bytes(base64.b64decode(CA))
    (base / "token").write_text("t0k3n")
    return base


@FUZZ
@given(yaml_inputs(KUBECONFIG), st.sampled_from([None, "main", "other", "third", "nope"]))
@example(DEEP_YAML, None)
@example(b"clusters: &x [*x]\ncontexts: &y [*y]\n", None)
def test_the_kubeconfig_loader_gives_access_or_a_kubeconfig_error(
    kube_dir: Path, text: bytes, context: str | None
) -> None:
    value_or(
        KubeconfigError,
        lambda: parse_kubeconfig(text, source="kc", base_dir=kube_dir, context=context),
    )


# -- server: server.yaml -----------------------------------------------------------------------

SERVER_DOCUMENT = {
    "serverId": "cd-1",
    "grpc": {
        "port": 9999,
        "maxMessageSize": 8388608,
        "tls": {"enabled": True, "certFile": "tls.crt", "keyFile": "tls.key", "caFile": "ca.crt"},
        "auth": {
            "jwt": {
                "enabled": True,
                "algorithms": ["HS256", "RS256"],
                "secretFile": "secret",
                "publicKeyFiles": ["jwt.pub"],
                "audience": "kubesvc",
                "leewaySeconds": 5,
            },
            "x509": {"subjectFilters": ["^CN=agent-.*"]},
        },
    },
    "api": {"host": "127.0.0.1", "port": 8000, "httpServer": "kubesvc"},
    "store": {"path": ":memory:"},
    "accounts": {"orphanGraceSeconds": 30, "maxResumableResourceAgeMs": 1000},
    "sessions": {"helloTimeoutSeconds": 3, "maxBatchEvents": 500, "heartbeatSeconds": 0},
    "operations": {"waitMs": 1000},
}


@pytest.fixture(scope="module")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("server")
    for name in ("tls.crt", "tls.key", "ca.crt", "jwt.pub"):
        (base / name).write_text("x")
    (base / "secret").write_text("s3cret\n")
    return base


@FUZZ
@given(mutated(SERVER_DOCUMENT, yaml_values) | yaml_values)
def test_the_server_config_parser_gives_a_config_or_a_config_error(
    server_dir: Path, data: Any
) -> None:
    value_or(ServerConfigError, lambda: parse_server_config(data, base=server_dir))


@FUZZ
@given(yaml_inputs(SERVER_DOCUMENT))
@example(DEEP_YAML)
@example(b"serverId: caf\xc3\xa9\xff")
def test_the_server_config_file_loader_gives_a_config_or_a_config_error(
    server_dir: Path, text: bytes
) -> None:
    path = server_dir / "server.yaml"
    path.write_bytes(text)
    value_or(ServerConfigError, lambda: load_server_config(path))


# -- server: the operations payload ------------------------------------------------------------

MANIFEST = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "prod", "labels": {"app": "web"}},
    "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}},
}
DESCRIPTION = {
    "account": "k1",
    "credentials": "k1",
    "cloudProvider": "kubernetes",
    "source": "text",
    "manifests": [MANIFEST],
    "manifestName": "deployment web",
    "location": "prod",
    "namespaceOverride": "prod",
    "moniker": {"app": "shop", "cluster": "deployment web"},
    "replicas": "3",
    "options": {"cascading": "true", "gracePeriodSeconds": 5, "mergeStrategy": "strategic"},
    "patchBody": {"spec": {"replicas": 1}},
    "kinds": ["deployment"],
    "labelSelectors": {"selectors": [{"key": "app", "kind": "EQUALS", "values": ["web"]}]},
    "numRevisionsBack": 1,
    "revision": "2",
    "trafficManagement": {"enabled": "false", "options": {"strategy": "redblack"}},
    "enableTraffic": True,
    "skipSpecTemplateLabels": "false",
    "application": "shop",
}
KEYS = sorted({*DESCRIPTION, "cascading", "orphanDependents", "services", "manifest", "items"})


def check_account(name: str) -> None:
    if name != "k1":
        raise OperationError(f"credentials not found (name: {name})")


def parse_and_normalize(body: Any) -> None:
    for name, raw in parse_request(body):
        normalize(name, raw, check_account=check_account)


@st.composite
def requests(draw: st.DrawFn) -> Any:
    """A list of {operation: description}: known operation names (sometimes not), descriptions
    made of the known keys with the reference's values or arbitrary ones."""
    body = []
    for _ in range(draw(st.integers(1, 3))):
        name = draw(st.sampled_from(sorted(OPERATIONS)) | st.text(max_size=8))
        keys = draw(st.lists(st.sampled_from(KEYS), max_size=8, unique=True))
        description: dict[str, Any] = {}
        for key in keys:
            known = DESCRIPTION.get(key)
            description[key] = draw(
                (st.just(known) | mutated(known, json_values)) if known is not None else json_values
            )
        body.append({name: description})
    return body


@FUZZ
@given(json_values | requests() | mutated([{"deployManifest": DESCRIPTION}], json_values))
def test_the_operations_parser_gives_descriptions_or_an_operation_error(body: Any) -> None:
    value_or(OperationError, lambda: parse_and_normalize(body))


def spin() -> None:
    while True:
        pass


def test_the_hang_guard_rings() -> None:
    with pytest.raises(Hang), alarm(0.2):
        spin()
