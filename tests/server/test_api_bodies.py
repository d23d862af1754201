"""Every way a REST body can be wrong is a 4xx whose message says what and where, through the
real server (run_server, REST on a loopback port, a scripted agent serving account k1), on
both HTTP servers; none is a 500 and none logs an ERROR (issue 12, defect 4)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from server import RunningServer, parse_server_config
from server.api._body import MAX_BODY_BYTES, MAX_JSON_DEPTH

from .test_ops_api import deployed, open_scripted_server

HTTP_SERVERS = ["kubesvc", "hypercorn"]


@dataclass
class Api:
    server: RunningServer
    http: httpx.AsyncClient

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
        answer = await self.http.post(path, content=body)
        assert answer.headers["content-type"] == "application/json", answer.text
        return answer.status_code, answer.json()


@asynccontextmanager
async def open_api(tmp_path: Path, http_server: str) -> AsyncIterator[Api]:
    config = parse_server_config(
        {
            "serverId": "bodies",
            "grpc": {"host": "127.0.0.1", "port": 0},
            "api": {"host": "127.0.0.1", "port": 0, "httpServer": http_server},
            "store": {"path": str(tmp_path / "bodies.db")},
        }
    )
    async with (
        open_scripted_server(config, deployed) as server,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.api_port}") as http,
    ):
        yield Api(server, http)


@pytest.fixture
def no_errors_logged(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Fails the test when anything logged an ERROR (a traceback) while it ran."""
    caplog.set_level(logging.WARNING)
    yield None
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


# (route, a body that is fine but for the case under test): every body-reading route.
ROUTES = [
    "/kubernetes/ops",
    "/ops",
    "/kubernetes/ops/deployManifest",
    "/armory/accounts",
    "/armory/accounts/dynamic",
    "/armory/agent/operations",
]

DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize("http_server", HTTP_SERVERS)
@pytest.mark.usefixtures("no_errors_logged")
async def test_undecodable_bodies_are_400_saying_what_and_where(
    tmp_path: Path, http_server: str
) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, http_server) as api:
            for route in ROUTES:
                status, body = await api.post(route, DEEP)
                assert (status, body["message"]) == (
                    400,
                    f"the request body nests arrays/objects deeper than {MAX_JSON_DEPTH} "
                    f"levels at byte {MAX_JSON_DEPTH}",
                ), route
                # Deep inside an object, behind a string full of brackets that do not count.
                prefix = b'{"a": "[[[[", "b": '
                nested = prefix + b'{"c": ' * MAX_JSON_DEPTH + b"1" + b"}" * (MAX_JSON_DEPTH + 1)
                status, body = await api.post(route, nested)
                assert status == 400, route
                # The first object is level 1: level MAX + 1 opens at the chain's MAX-th brace.
                offset = len(prefix) + len(b'{"c": ') * (MAX_JSON_DEPTH - 1)
                assert body["message"].endswith(f"levels at byte {offset}"), body

                status, body = await api.post(route, b'[{"name": "caf\xc3\xa9\xff"}]')
                assert (status, body["message"]) == (
                    400,
                    "the request body is not valid UTF-8: byte 0xff at offset 16",
                ), route
                status, body = await api.post(route, b'{"name": "a"} trailing')
                assert status == 400, route
                assert body["message"].startswith("the request body is not valid JSON: ")
                assert "trailing characters (byte " in body["message"]  # msgspec's own words
                for empty in (b"", b" \r\n\t"):
                    status, body = await api.post(route, empty)
                    assert (status, body["message"]) == (
                        400,
                        "the request body is empty; a JSON body is required",
                    ), route
                assert body["status"] == 400
                assert body["error"] == "Bad Request"


@pytest.mark.parametrize("http_server", HTTP_SERVERS)
@pytest.mark.usefixtures("no_errors_logged")
async def test_a_body_as_deep_as_the_limit_is_read(tmp_path: Path, http_server: str) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, http_server) as api:
            deep: Any = "x"
            # [{"deployManifest": {"manifests": [{"data": {"deep": [[...]]}}]}}]: 6 levels + deep
            for _ in range(MAX_JSON_DEPTH - 6):
                deep = [deep]
            manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
            manifest["data"] = {"deep": deep}
            sent = [{"deployManifest": {"account": "k1", "manifests": [manifest]}}]
            assert _depth(sent) == MAX_JSON_DEPTH
            body = json.dumps(sent).encode()
            status, answer = await api.post("/kubernetes/ops", body)
            assert status == 200, answer
            task = (await api.http.get(answer["resourceUri"])).json()
            assert task["id"] == answer["id"]


@pytest.mark.parametrize("http_server", HTTP_SERVERS)
@pytest.mark.usefixtures("no_errors_logged")
async def test_wrong_shapes_and_fields_name_the_json_path(tmp_path: Path, http_server: str) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, http_server) as api:
            cases: list[tuple[str, Any, str]] = [
                ("/armory/accounts", {"name": "a"}, "body: expected a JSON list of accounts"),
                ("/armory/accounts", "a", "body: expected a JSON list of accounts"),
                ("/armory/accounts", [{"name": 5}], "body[0].name: expected a non-empty string"),
                ("/armory/accounts", [{"name": "a"}, 7], "body[1]: expected an object"),
                ("/armory/accounts/dynamic", [], "body: expected a JSON object"),
                (
                    "/armory/accounts/dynamic",
                    {"name": "d", "serviceAccount": True, "kinds": "Pod"},
                    "body.kinds: expected a list of strings",
                ),
                ("/kubernetes/ops", 42, "body: expected a non-empty JSON list"),
                ("/kubernetes/ops", [], "body: expected a non-empty JSON list"),
                ("/kubernetes/ops", [{"a": {}, "b": {}}], "body[0]: expected an object with"),
                ("/kubernetes/ops", [{"brew": {}}], "unknown operation 'brew'"),
                (
                    "/kubernetes/ops",
                    [{"deployManifest": {"account": "nobody"}}],
                    "credentials not found (name: nobody",
                ),
                (
                    "/kubernetes/ops",
                    [
                        {
                            "scaleManifest": {
                                "account": "k1",
                                "manifestName": "deployment w",
                                "replicas": "many",
                            }
                        }
                    ],
                    "scaleManifest.replicas: expected an integer >= 0, got 'many'",
                ),
                ("/kubernetes/ops/deployManifest", [1], "deployManifest: expected a description"),
                ("/armory/agent/operations", {"description": {}}, "body.type: required"),
            ]
            for route, sent, message in cases:
                status, body = await api.post(route, json.dumps(sent).encode())
                assert status == 400, (route, sent, body)
                assert body["message"].startswith(message) or message in body["message"], (
                    route,
                    body["message"],
                )


@pytest.mark.parametrize("http_server", HTTP_SERVERS)
@pytest.mark.usefixtures("no_errors_logged")
async def test_a_body_over_the_limit_is_413_naming_the_limit(
    tmp_path: Path, http_server: str
) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, http_server) as api:
            port = api.server.api_port
            assert port is not None
            for route in ("/kubernetes/ops", "/armory/accounts"):
                # Only the head is sent: a server that refuses it must not wait for the body
                # (and a client still uploading 4 MiB could be reset before reading the answer).
                head = (
                    f"POST {route} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                    f"content-length: {MAX_BODY_BYTES + 1}\r\n\r\n"
                ).encode()
                status, body = await _raw_exchange(port, head)
                assert (status, body["message"]) == (
                    413,
                    f"the request body is larger than the limit of {MAX_BODY_BYTES} bytes",
                ), route
            # The server still answers.
            assert (await api.http.get("/health")).status_code == 200


async def _raw_exchange(port: int, request: bytes) -> tuple[int, dict[str, Any]]:
    """Send ``request`` and read one response with a Content-Length body."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some()
            assert chunk, data
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fields = (line.partition(":") for line in lines[1:])
        headers = {name.strip().lower(): value.strip() for name, _, value in fields}
        length = int(headers["content-length"])
        while len(rest) < length:
            chunk = await stream.receive_some()
            assert chunk, rest
            rest += chunk
        assert headers["content-type"] == "application/json"
        return int(lines[0].split()[1]), json.loads(rest[:length])


def _depth(value: Any) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


@pytest.mark.parametrize("http_server", HTTP_SERVERS[:1])
@pytest.mark.usefixtures("no_errors_logged")
async def test_a_message_quoting_a_huge_value_is_cut(tmp_path: Path, http_server: str) -> None:
    with trio.fail_after(30):
        async with open_api(tmp_path, http_server) as api:
            huge = list(range(100_000))
            for route, sent in (
                ("/armory/accounts", [{"name": huge}]),
                ("/kubernetes/ops/deployManifest", huge),
            ):
                status, body = await api.post(route, json.dumps(sent).encode())
                assert status == 400
                assert len(body["message"]) < 1100, route
                assert body["message"].endswith("characters in all)"), route
                assert body.get("errors", [body["message"]]) == [body["message"]]
