"""docs/protocol.md's examples, checked against the code; and a client written from the
document alone talking to the real server.

Each ``<!-- example: NAME -->`` block of the document is extracted here and checked against
our record encoder and decoder, the protobuf envelopes, the JWT check, the operation
description parser, the result parser and the agent's executor (on kubesim); and the
document must describe every field and enum value of the .proto. The client test runs a second
implementation in miniature (tests/wire/_doc_client.py, its own process, importing nothing of
ours: grpcio stubs generated from wire/kubesvc.proto at test time, records built by hand with
msgpack) against the real server on loopback, then reads its object back through the REST API.
"""

from __future__ import annotations

import json
import re
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import betterproto
import httpx
import jwt
import msgspec
import pytest
import trio

import wire
from agent.operations import OperationExecutor
from server import RunningServer, parse_server_config, run_server
from server._auth import Authenticator, AuthSettings, JwtSettings
from server.api import serve_api
from server.ops._describe import normalize
from server.ops._results import cache_records, parse_result
from wire import messages as m
from wire._envelope import (
    decode_ack,
    decode_agent_message,
    decode_server_message,
    encode_agent_message,
    encode_server_message,
    grpc_framed,
)

from ..agent.operations_harness import open_ops_bench
from ._loop import in_loop

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
PROTO = Path(__file__).resolve().parents[2] / "wire" / "kubesvc.proto"
DOC_CLIENT = Path(__file__).resolve().parent / "_doc_client.py"
_EXAMPLE = re.compile(r"<!-- example: ([\w-]+) -->\n```\w*\n(.*?)\n```", re.DOTALL)
_HEX_BYTE = re.compile(r"[0-9a-f]{2}")


def examples() -> dict[str, str]:
    found: dict[str, str] = {}
    for name, body in _EXAMPLE.findall(DOC.read_text()):
        assert name not in found, f"example {name} appears twice in {DOC}"
        found[name] = body
    return found


EXAMPLES = examples()


def example_json(name: str) -> Any:
    return json.loads(EXAMPLES[name])


def example_bytes(name: str) -> bytes:
    """The hex bytes of an example: each line's leading two-digit hex tokens; the rest of a
    line is a comment."""
    out = bytearray()
    for line in EXAMPLES[name].splitlines():
        for token in line.split():
            if not _HEX_BYTE.fullmatch(token):
                break
            out.append(int(token, 16))
    return bytes(out)


def test_the_document_has_the_examples_the_tests_use() -> None:
    assert set(EXAMPLES) == {
        "jwt-claims",
        "record-added-fields",
        "record-added-hex",
        "record-bookmark-hex",
        "envelope-event-batch-hex",
        "envelope-ack-hex",
        "deploy-description",
        "deploy-payload",
        "deploy-result",
        "scale-description",
        "scale-payload",
        "scale-failure",
        "unknown-member-hex",
        "unknown-field-hex",
    }


# -- event records and envelopes ---------------------------------------------------------------


def _record(fields: list[Any]) -> wire.EventRecord:
    """An EventRecord from the document's JSON view of one (the object shown as text)."""
    values = list(fields)
    values[8] = values[8].encode()
    return wire.EventRecord(*values)


def test_the_added_record_example_is_what_we_encode_and_decode() -> None:
    data = example_bytes("record-added-hex")
    record = _record(example_json("record-added-fields"))
    assert record.type == wire.EventType.ADDED
    assert wire.decode_events(data) == [record]
    assert wire.encode_events([record]) == data
    assert f"these {len(data)} bytes" in DOC.read_text()
    # The same bytes by any msgpack encoder: a plain array, the object as bin.
    as_plain = [*example_json("record-added-fields")]
    as_plain[8] = as_plain[8].encode()
    assert msgspec.msgpack.encode([as_plain]) == data


def test_the_bookmark_and_its_envelope_are_what_we_send() -> None:
    records = example_bytes("record-bookmark-hex")
    (bookmark,) = wire.decode_events(records)
    assert (bookmark.type, bookmark.resource_version, bookmark.scope) == (
        wire.EventType.BOOKMARK,
        "57",
        "shop",
    )
    assert (bookmark.namespace, bookmark.name, bookmark.object) == ("", "", b"")
    envelope = example_bytes("envelope-event-batch-hex")
    message = m.AgentMessage(event_batch=m.EventBatch(seq=1, records=records, count=1))
    assert encode_agent_message(message) == envelope
    assert bytes(message) == envelope  # the hand-written path is protobuf's bytes
    decoded = decode_agent_message(envelope).event_batch
    assert (decoded.seq, decoded.records, decoded.count) == (1, records, 1)
    assert grpc_framed(envelope)[:5] == bytes.fromhex("00 00 00 00 2a")


def test_the_ack_example_is_what_the_server_sends() -> None:
    ack = example_bytes("envelope-ack-hex")
    assert encode_server_message(m.ServerMessage(ack=m.Ack(seq=1))) == ack
    assert decode_server_message(ack).ack.seq == 1


def test_the_forward_compatibility_examples_are_read_past() -> None:
    """§13: a member this version lacks is skipped (no kind set, nothing refused) and named;
    a field added to a known message leaves the rest of it readable."""
    member = decode_agent_message(example_bytes("unknown-member-hex"))
    assert betterproto.which_one_of(member, "message") == ("", None)
    assert wire.unknown_fields(member) == [("AgentMessage", 15)]
    extended = example_bytes("unknown-field-hex")
    assert decode_ack(extended) is None  # not the bare Ack the fast path knows...
    ack = decode_server_message(extended)  # ...so the full decoder reads it
    assert ack.ack.seq == 1
    assert wire.unknown_fields(ack) == [("Ack", 9)]


def test_records_may_omit_the_scope_and_may_carry_later_fields() -> None:
    """§6: index 9 may be omitted; elements after it are ignored; the object must be bin."""
    fields = example_json("record-added-fields")
    expected = _record(fields)
    plain = [*fields[:8], fields[8].encode()]
    assert wire.decode_events(msgspec.msgpack.encode([plain])) == [expected]
    assert wire.decode_events(msgspec.msgpack.encode([[*plain, "", "later", 7]])) == [expected]
    with pytest.raises(wire.RecordError, match=r"Expected `bytes`, got `str`"):
        wire.decode_events(msgspec.msgpack.encode([fields]))
    with pytest.raises(wire.RecordError, match=r"<= 6"):
        wire.decode_events(msgspec.msgpack.encode([[7, *plain[1:]]]))


# -- auth ----------------------------------------------------------------------------------------


def test_the_jwt_claims_example_is_accepted_and_scopes_the_accounts() -> None:
    claims = example_json("jwt-claims")
    secret = "a-shared-secret-for-the-doc-test-0123456789"
    settings = AuthSettings(
        jwt=JwtSettings(secret=secret, audience="kubesvc", issuer="https://issuer.example.com")
    )
    token = jwt.encode(claims, secret, algorithm="HS256")
    principal = Authenticator(settings).authenticate({"authorization": f"Bearer {token}"}, None)
    assert principal.subject == "agent-eu-1"
    assert principal.allowed_accounts == frozenset({"prod-eu", "staging-eu"})
    assert not principal.may_register("prod-us")
    assert principal.expires_at == claims["exp"] + 30  # the default leeway


# -- operations ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "stem"), [("deployManifest", "deploy"), ("scaleManifest", "scale")]
)
def test_a_description_becomes_the_documented_payload(operation: str, stem: str) -> None:
    description = normalize(operation, example_json(f"{stem}-description"))
    assert description.payload == example_json(f"{stem}-payload")


def _contains(actual: Any, documented: Any, where: str = "$") -> None:
    """Every key and item the document shows is in ``actual`` (the document abbreviates)."""
    if isinstance(documented, dict):
        assert isinstance(actual, dict), where
        for key, value in documented.items():
            assert key in actual, f"{where}.{key} missing"
            _contains(actual[key], value, f"{where}.{key}")
    elif isinstance(documented, list):
        assert isinstance(actual, list), where
        assert len(actual) == len(documented), where
        for i, (a, d) in enumerate(zip(actual, documented, strict=True)):
            _contains(a, d, f"{where}[{i}]")
    else:
        assert actual == documented, f"{where}: {actual!r} != {documented!r}"


async def test_the_agent_answers_the_documented_results(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            executor = OperationExecutor(lambda account: bench.client)
            deploy = await executor(
                m.Operation(
                    id="doc-deploy",
                    account="prod",
                    type="deployManifest",
                    payload_json=json.dumps(example_json("deploy-payload")),
                )
            )
            assert deploy.ok, deploy.error_message
            _contains(json.loads(deploy.result_json), example_json("deploy-result"))
            scale = await executor(
                m.Operation(
                    id="doc-scale",
                    account="prod",
                    type="scaleManifest",
                    payload_json=json.dumps(example_json("scale-payload")),
                )
            )
            failure = example_json("scale-failure")
            assert (scale.ok, scale.error_code, scale.error_message) == (
                failure["ok"],
                failure["error_code"],
                failure["error_message"],
            )
            assert json.loads(scale.result_json) == json.loads(failure["result_json"])


def test_the_server_reads_the_documented_results() -> None:
    result_json = EXAMPLES["deploy-result"]
    read = parse_result(True, result_json, "", "")
    assert read.problem == ""
    assert [p["phase"] for p in read.phases] == ["DEPLOY_KUBERNETES_MANIFEST"] * 3
    (record,) = cache_records("prod", read.objects, read.deleted)
    assert (record.type, record.kind, record.namespace, record.name) == (
        wire.EventType.MODIFIED,
        "ConfigMap",
        "default",
        "app-v000",
    )
    failure = example_json("scale-failure")
    read = parse_result(
        failure["ok"], failure["result_json"], failure["error_message"], failure["error_code"]
    )
    assert (read.ok, read.result, read.problem, read.objects) == (False, None, "", [])


def test_every_status_the_document_names_exists() -> None:
    text = DOC.read_text()
    section = text[text.index("## 12. Errors") : text.index("## 13.")]
    named = set(re.findall(r"^\| `([A-Z_]+)` \|", section, re.MULTILINE))
    assert {"UNAUTHENTICATED", "ABORTED", "INVALID_ARGUMENT", "UNAVAILABLE"} <= named
    assert named <= set(wire.Status.__members__)


# -- a client from the document alone ------------------------------------------------------------

SECRET = "a-shared-secret-for-the-doc-client-0123456789"


def _stubs(folder: Path) -> None:
    """kubesvc_pb2 and kubesvc_pb2_grpc, generated from the .proto into ``folder``."""
    from grpc_tools import protoc  # a test dependency (pyproject's test extra)

    status = protoc.main(
        [
            "protoc",
            f"-I{PROTO.parent}",
            f"--python_out={folder}",
            f"--grpc_python_out={folder}",
            str(PROTO),
        ]
    )
    assert status == 0, "protoc failed"


@in_loop
async def test_a_client_written_from_the_document_talks_to_the_real_server(
    tmp_path: Path,
) -> None:
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    _stubs(stubs)
    config = parse_server_config(
        {
            "grpc": {
                "host": "127.0.0.1",
                "port": 0,
                "auth": {"jwt": {"enabled": True, "secret": SECRET, "audience": "kubesvc"}},
            },
            "api": {"host": "127.0.0.1", "port": 0},
            "store": {"path": str(tmp_path / "doc.db")},
        }
    )
    claims = {"sub": "doc-client", "aud": "kubesvc", "exp": int(time.time()) + 300}
    token = jwt.encode({**claims, "accounts": ["prod"]}, SECRET, algorithm="HS256")
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            server: RunningServer = await nursery.start(
                partial(run_server, config, serve_api=serve_api)
            )
            # Its own process: grpcio never loads into the test process, and the client can
            # import nothing of ours. Cancelling run_process kills and waits for it.
            client = await trio.run_process(
                [
                    sys.executable,
                    str(DOC_CLIENT),
                    str(stubs),
                    f"127.0.0.1:{server.grpc_port}",
                    token,
                ],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
            assert client.returncode == 0, client.stderr.decode(errors="replace")[-3000:]
            seen = json.loads(client.stdout.decode().splitlines()[-1])["seen"]
            assert seen[:3] == ["welcome", "ack", "ack"]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.api_port}") as api:
                found = await api.get("/manifests/prod/shop/configMap%20app")
                assert found.status_code == 200, found.text
                assert found.json()["manifest"]["data"] == {"color": "blue"}
                assert found.json()["manifest"]["metadata"]["resourceVersion"] == "42"
                swept = await api.get("/manifests/prod/shop/configMap%20old")
                assert swept.status_code == 404, swept.text
                account = (await api.get("/armory/accounts/prod")).json()
                assert account["kubeHost"] == "10.9.9.9:6443"
            nursery.cancel_scope.cancel()


# -- the document covers the whole schema ---------------------------------------------------------

_MESSAGE = re.compile(r"^message (\w+) \{(.*?)^\}", re.DOTALL | re.MULTILINE)
_FIELD = re.compile(r"^\s+(?:repeated )?[\w.]+ (\w+) = (\d+);", re.MULTILINE)


def _described(message: str, text: str) -> str:
    """The part of the document that describes ``message``: from its bold heading (or, for
    the two envelopes, "`X` is a oneof") to the next bold heading or section."""
    start = text.find(f"**`{message}`**")
    if start < 0:
        start = text.index(f"`{message}` is a oneof")
    ends = [i for i in (text.find("**`", start + 4), text.find("\n#", start)) if i > 0]
    return text[start : min(ends)]


def test_every_message_and_field_of_the_proto_is_described_with_its_number() -> None:
    proto, text = PROTO.read_text(), DOC.read_text()
    messages = _MESSAGE.findall(proto)
    assert len(messages) >= 15
    for message, body in messages:
        part = _described(message, text)
        for name, number in _FIELD.findall(body):
            in_table = f"| {number} | `{name}` |" in part
            inline = f"`{name}` = {number}" in part
            assert in_table or inline, (
                f"docs/protocol.md does not describe {message}.{name} = {number}"
            )


def test_every_enum_value_of_the_proto_is_described_with_its_number() -> None:
    proto, text = PROTO.read_text(), DOC.read_text()
    values = re.findall(r"^\s+([A-Z_]+) = (\d+);", proto, re.MULTILINE)
    assert ("PRIMARY", "1") in values
    for name, number in values:
        if name.endswith("_UNSPECIFIED") and number == "0":
            continue  # proto3's zero value, never sent
        assert f"`{name}` = {number}" in text, f"docs/protocol.md does not give {name} = {number}"
