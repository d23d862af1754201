"""The hot routes (server/api/_hot.py) answer exactly what the Starlette routes answer: the
task body and headers, the metrics by route template, the body limit, chunked bodies, and
the requests they hand over (a task only in the store, refusals) still get their answers."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import trio
from prometheus_client import CollectorRegistry

from server.api import build_app
from server.api._app import MAX_BODY_BYTES
from server.ops import OperationService

from .test_ops_api import deployed, open_env

DEPLOY = [
    {
        "deployManifest": {
            "account": "k1",
            "manifests": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "hot", "namespace": "default"},
                    "data": {"k": "v \u00e9 / <>"},
                }
            ],
        }
    }
]


async def test_hot_routes_answer_like_the_starlette_routes(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            await env.agent(deployed)
            posted = await env.http.post("/kubernetes/ops", json=DEPLOY)
            assert posted.status_code == 200
            assert posted.headers["content-type"] == "application/json"
            task_id = posted.json()["id"]
            assert posted.json() == {"id": task_id, "resourceUri": f"/task/{task_id}"}
            body = await env.task(task_id)
            service = env.server.state.operations
            assert isinstance(service, OperationService)
            task = service.task_in_memory(task_id)
            assert task is not None
            answer = await env.http.get(f"/task/{task_id}")
            assert answer.headers["content-type"] == "application/json"
            assert int(answer.headers["content-length"]) == len(answer.content)
            assert answer.json() == json.loads(json.dumps(task.to_json())) == body
            assert body["status"]["completed"]
            assert not body["status"]["failed"]
            text = (await env.http.get("/metrics")).text
            assert 'method="GET",route="/task/{id}",status="200"' in text
            assert 'method="POST",route="/kubernetes/ops",status="200"' in text

            # A chunked body (no Content-Length) is read whole.
            async def chunks() -> AsyncIterator[bytes]:
                raw = json.dumps(DEPLOY).encode()
                yield raw[:10]
                yield raw[10:]

            chunked = await env.http.post("/ops", content=chunks())
            assert chunked.status_code == 200
            assert (await env.task(chunked.json()["id"]))["status"]["completed"]


async def test_the_hot_routes_answer_themselves(tmp_path: Path) -> None:
    # The test above holds whichever route answers; this one fails if the hot routes hand
    # everything over (the Starlette routes would answer the same).
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            await env.agent(deployed)
            app = build_app(env.server.state, registry=CollectorRegistry())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as local:
                posted = await local.post("/kubernetes/ops", json=DEPLOY)
                assert posted.status_code == 200
                assert app.hot.answered == 1
                task_id = posted.json()["id"]
                await env.task(task_id)
                assert (await local.get(f"/task/{task_id}")).status_code == 200
                assert app.hot.answered == 2
                assert (await local.get("/task/unknown-id")).status_code == 404
                assert app.hot.answered == 2  # handed over: not one this server holds
            body = app.hot.poll(f"/task/{task_id}".encode())
            assert body is not None
            assert json.loads(body)["status"]["completed"]
            assert app.hot.answered == 3


async def test_handed_over_requests_keep_their_answers(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            agent = await env.agent(deployed)
            # In process (over a socket the client would still be uploading when refused).
            app = build_app(env.server.state, registry=CollectorRegistry())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as local:
                too_big = await local.post(
                    "/kubernetes/ops", content=b"[" + b" " * MAX_BODY_BYTES + b"]"
                )
            assert too_big.status_code == 413
            assert too_big.json()["message"] == (
                f"the request body is larger than the limit of {MAX_BODY_BYTES} bytes"
            )
            empty = await env.http.post("/kubernetes/ops", content=b"  ")
            assert empty.status_code == 400
            assert "body is empty" in empty.json()["message"]
            not_json = await env.http.post("/ops", content=b"[{")
            assert not_json.status_code == 400
            assert "not valid JSON" in not_json.json()["message"]
            unknown = await env.http.get("/task/unknown-id")
            assert unknown.status_code == 404
            assert unknown.json()["message"] == "Task not found (id: unknown-id)"
            assert agent.received == []
            # A task the service no longer holds in memory is read back from the store.
            posted = await env.http.post(
                "/kubernetes/ops", params={"clientRequestId": "r-1"}, json=DEPLOY
            )
            task_id = posted.json()["id"]
            done = await env.task(task_id)
            service = env.server.state.operations
            assert isinstance(service, OperationService)
            service._tasks.clear()  # what max_tasks_kept does to old tasks
            assert service.task_in_memory(task_id) is None
            assert (await env.http.get(f"/task/{task_id}")).json() == done
            again = await env.http.post(
                "/kubernetes/ops", params={"clientRequestId": "r-1"}, json=DEPLOY
            )
            assert again.json()["id"] == task_id
            assert len(agent.received) == 1
