"""Fuzz the REST API from its own OpenAPI document (issue 12): schemathesis generates requests
for every documented operation (path and query parameters, bodies from the body schemas, and
in its negative mode bodies and parameters that break them), sent to the real server (run_server
on a loopback port, a scripted agent serving account k1 and answering every operation).

The property: no answer is a 500 (nor a 5xx the route does not document), every 4xx says
what was wrong (the JSON error shape with a message), each request is answered within its
deadline, and the server logs no ERROR.

schemathesis is synchronous (requests), so it runs in a worker thread while the server runs in
this test's trio loop. Derandomized, with a bounded number of examples per operation.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
import schemathesis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Err

from server import RunningServer, parse_server_config
from wire import messages as m

from .test_ops_api import open_scripted_server

# KUBESVC_FUZZ_EXAMPLES=200 explores: that many examples per operation, from random seeds.
_EXPLORE = int(os.environ.get("KUBESVC_FUZZ_EXAMPLES", "0"))
EXAMPLES = _EXPLORE or 6
REQUEST_SECONDS = 10.0
FUZZ = settings(
    derandomize=not _EXPLORE,
    database=None,
    deadline=None,  # REQUEST_SECONDS is the hang guard; timing varies with the machine's load
    max_examples=EXAMPLES,
    suppress_health_check=list(HealthCheck),
)


def answer_anything(op: m.Operation) -> m.OperationResult:
    """An agent that says every operation succeeded, with an empty result."""
    body: dict[str, Any] = {"result": {}, "phases": [], "objects": [], "deleted": []}
    return m.OperationResult(id=op.id, account=op.account, ok=True, result_json=json.dumps(body))


@asynccontextmanager
async def open_server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    config = parse_server_config(
        {
            "serverId": "fuzz",
            "grpc": {"host": "127.0.0.1", "port": 0},
            "api": {"host": "127.0.0.1", "port": 0},
            "store": {"path": str(tmp_path / "fuzz.db")},
            "operations": {"waitMs": 2000},
        }
    )
    async with open_scripted_server(config, answer_anything) as server:
        yield server


def fuzz(document: dict[str, Any], base_url: str) -> list[str]:
    """Run every operation of ``document`` in both generation modes; the problems found."""
    schema = schemathesis.openapi.from_dict(document)
    session = requests.Session()
    session.trust_env = False  # loopback: no proxy from the environment
    problems: list[str] = []

    def check(case: schemathesis.Case[Any]) -> None:
        response = case.call(base_url=base_url, session=session, timeout=REQUEST_SECONDS)
        where = f"{case.method} {case.formatted_path} -> {response.status_code}"
        documented = case.operation.definition.raw.get("responses", {})
        # A 5xx the route documents (503: no agent serves the account now, 504: the agent did
        # not answer in time) is an answer; a 500 or any other 5xx is a failure of ours.
        if response.status_code == 500 or (
            response.status_code > 500 and str(response.status_code) not in documented
        ):
            problems.append(f"{where}: {response.text[:300]}\n  {case.as_curl_command()}")
        elif response.status_code >= 400:
            try:
                message = response.json().get("message")
            except (ValueError, AttributeError):
                message = None
            if not message:
                problems.append(f"{where}: no message in {response.text[:300]!r}")

    with session:
        for result in schema.get_all_operations():
            if isinstance(result, Err):
                raise AssertionError(f"the document is not valid OpenAPI: {result.err()}")
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                test = FUZZ(given(case=operation.as_strategy(generation_mode=mode))(check))
                try:
                    test()
                except Unsatisfiable:
                    # Nothing to break: no parameter or body (schemathesis skips these too).
                    assert mode is GenerationMode.NEGATIVE, operation.label
    return problems


# ~70 operations, 12 examples each: 1.5 CPU-minutes, up to 4 minutes on a loaded machine.
@pytest.mark.timeout(600)
async def test_no_request_made_from_the_openapi_document_breaks_the_server(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    with trio.fail_after(480):
        async with open_server(tmp_path) as server:
            base_url = f"http://127.0.0.1:{server.api_port}"
            async with httpx.AsyncClient(base_url=base_url) as http:
                document = (await http.get("/openapi.json")).json()
            assert len(document["paths"]) >= 30
            problems = await trio.to_thread.run_sync(fuzz, document, base_url)
    assert not problems, "\n".join(problems)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
