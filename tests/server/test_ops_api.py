"""Operations through the whole server (run_server + REST) with a scripted agent at the edge:
a real gRPC peer (wire.open_connection) that answers Operations the way a test says."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import betterproto
import httpx
import trio

import wire
from server import RunningServer, ServerConfig, parse_server_config, run_server
from server.api import serve_api
from wire import messages as m

from .._wait import Changes, wait_until
from ..wire._loop import in_loop

Answer = Callable[[m.Operation], m.OperationResult | None]


def config(store_path: str, wait_ms: int = 5000) -> ServerConfig:
    return parse_server_config(
        {
            "serverId": "ops-server",
            "grpc": {"host": "127.0.0.1", "port": 0},
            "api": {"host": "127.0.0.1", "port": 0},
            "store": {"path": store_path},
            "sessions": {"helloTimeoutSeconds": 5},
            "operations": {"waitMs": wait_ms},
        }
    )


def deployed(op: m.Operation) -> m.OperationResult:
    """What a well-behaved agent answers to a deploy: the result, phases and objects."""
    payload = json.loads(op.payload_json)
    objects = []
    for i, manifest in enumerate(payload.get("manifests", [])):
        obj = json.loads(json.dumps(manifest))
        meta = obj.setdefault("metadata", {})
        meta.setdefault("namespace", payload["namespace"] or "default")
        meta.update(uid=f"uid-{i}", resourceVersion=str(100 + i))
        objects.append(obj)
    names: dict[str, list[str]] = {}
    for o in objects:
        names.setdefault(o["metadata"]["namespace"], []).append(
            f"{o['kind'].lower()} {o['metadata']['name']}"
        )
    result = {"manifestNamesByNamespace": names, "manifests": objects, "createdArtifacts": []}
    body = {
        "result": result,
        "phases": [{"phase": "DEPLOY_KUBERNETES_MANIFEST", "status": "Deploying manifest"}],
        "objects": objects,
        "deleted": [],
    }
    return m.OperationResult(id=op.id, account=op.account, ok=True, result_json=json.dumps(body))


def refused(op: m.Operation) -> m.OperationResult:
    body = {"result": None, "phases": [{"phase": "SCALE_KUBERNETES_MANIFEST", "status": "Scaling"}]}
    return m.OperationResult(
        id=op.id,
        account=op.account,
        ok=False,
        result_json=json.dumps(body),
        error_message='deployments.apps "web" not found',
        error_code="KubernetesError 404",
    )


@dataclass
class ScriptedAgent:
    """Account ``k1``'s agent speaking the protocol: answers each Operation with ``answer``
    (None: later, with ``reply``)."""

    answer: Answer
    received: list[m.Operation] = field(default_factory=list)
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    welcomed: trio.Event = field(default_factory=trio.Event)
    changed: Changes = field(default_factory=Changes)  # notified on every operation received
    stream: wire.ClientStream | None = None

    async def run(self, port: int, account: str = "k1") -> None:
        info = m.AccountInfo(name=account, kube_host="10.0.0.1:6443", properties_json="{}")
        hello = m.Hello(
            protocol_version=wire.PROTOCOL_VERSION,
            agent_id="agent-1",
            instance_id="i-1",
            agent_version="0.1",
            accounts=[info],
        )
        with self.scope:
            async with wire.open_connection("127.0.0.1", port) as stream:
                self.stream = stream
                await stream.send(m.AgentMessage(hello=hello))
                while True:
                    name, value = betterproto.which_one_of(await stream.receive(), "message")
                    if name == "welcome":
                        self.welcomed.set()
                    if name != "operation":
                        continue
                    self.received.append(value)
                    self.changed.notify()
                    reply = self.answer(value)
                    if reply is not None:
                        await stream.send(m.AgentMessage(operation_result=reply))

    async def reply(self, result: m.OperationResult) -> None:
        """Answer an operation ``answer`` left unanswered."""
        assert self.stream is not None
        await self.stream.send(m.AgentMessage(operation_result=result))


@dataclass
class Env:
    server: RunningServer
    http: httpx.AsyncClient
    nursery: trio.Nursery

    async def agent(self, answer: Answer) -> ScriptedAgent:
        agent = ScriptedAgent(answer)
        self.nursery.start_soon(agent.run, self.server.grpc_port)
        await agent.welcomed.wait()
        await wait_until(
            lambda: self.server.state.sessions.primary_session("k1") is not None,
            what="the scripted agent is k1's PRIMARY",
        )
        return agent

    async def task(self, task_id: str) -> dict[str, Any]:
        """Poll the task as Orca does (the REST API has no push) until it completes."""
        body: dict[str, Any] = {}

        async def completed() -> bool:
            nonlocal body
            body = (await self.http.get(f"/task/{task_id}")).json()
            return bool(body["status"]["completed"])

        await wait_until(completed, what=f"task {task_id} completed")
        return body


@asynccontextmanager
async def open_env(tmp_path: Path, wait_ms: int = 5000) -> AsyncIterator[Env]:
    async with wire.open_loop(), trio.open_nursery() as nursery:
        start = functools.partial(
            run_server, config(str(tmp_path / "ops.db"), wait_ms), serve_api=serve_api
        )
        server: RunningServer = await nursery.start(start)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.api_port}") as http:
            yield Env(server, http, nursery)
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def open_scripted_server(
    config: ServerConfig, answer: Answer
) -> AsyncIterator[RunningServer]:
    """``run_server`` with its REST API (``config``), and a ScriptedAgent answering
    ``answer`` for k1 that the server has welcomed when the block starts; both end with it."""
    async with wire.open_loop(), trio.open_nursery() as nursery:
        server: RunningServer = await nursery.start(
            functools.partial(run_server, config, serve_api=serve_api)
        )
        agent = ScriptedAgent(answer)
        nursery.start_soon(agent.run, server.grpc_port)
        await agent.welcomed.wait()
        yield server
        nursery.cancel_scope.cancel()


DEPLOY_CONTEXT = {
    "cloudProvider": "kubernetes",
    "credentials": "k1",
    "account": "someone-else",
    "source": "text",
    "moniker": {"app": "shop", "cluster": "deployment web"},
    "manifests": [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": "2"},
        }
    ],
    "user": "anonymous",
    "skipExpressionEvaluation": "false",
    "trafficManagement": {"enabled": "false", "options": None},
}


async def test_deploy_runs_once_per_request_id_and_updates_task_cache_and_history(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            agent = await env.agent(deployed)
            body = [{"deployManifest": DEPLOY_CONTEXT}]
            first = await env.http.post("/kubernetes/ops?clientRequestId=abc", json=body)
            assert first.status_code == 200
            task_id = first.json()["id"]
            assert first.json() == {"id": task_id, "resourceUri": f"/task/{task_id}"}
            again = await env.http.post("/kubernetes/ops?clientRequestId=abc", json=body)
            assert again.json()["id"] == task_id
            task = await env.task(task_id)
            assert len(agent.received) == 1
            sent = agent.received[0]
            assert (sent.type, sent.account, sent.id) == ("deployManifest", "k1", f"{task_id}-0")
            payload = json.loads(sent.payload_json)
            assert "user" not in payload
            assert payload["enableTraffic"] is True  # trafficManagement disabled: the default
            assert task["status"] == {
                "phase": "ORCHESTRATION",
                "status": "Orchestration completed.",
                "complete": True,
                "completed": True,
                "failed": False,
                "retryable": False,
            }
            assert [h["status"] for h in task["history"]] == [
                "Initializing Orchestration Task",
                "Processing op: KubernetesDeployManifestOperation",
                "Deploying manifest",
                "Orchestration completed.",
            ]
            assert task["resultObjects"][0]["manifestNamesByNamespace"] == {
                "prod": ["deployment web"]
            }
            assert task["requestId"] == "abc"
            assert task["ownerId"] == "ops-server"
            # The cache shows the deployed object without any watch event.
            manifest = await env.http.get("/manifests/k1/prod/deployment%20web")
            assert manifest.status_code == 200
            assert manifest.json()["manifest"]["metadata"]["uid"] == "uid-0"
            op = (await env.http.get(f"/armory/agent/operations/{task_id}-0")).json()
            assert [h["state"] for h in op["history"]] == ["RECEIVED", "SUCCEEDED"]
            assert op["history"][1]["message"].startswith("sent to agent agent-1 (session ")
            assert "; result received after " in op["history"][1]["message"]
            assert op["durationMs"] >= 0
            listed = (await env.http.get("/armory/agent/operations?account=k1")).json()
            assert [o["id"] for o in listed] == [f"{task_id}-0"]
            tasks = (await env.http.get("/task")).json()
            assert [t["id"] for t in tasks] == [task_id]


async def test_refusals_are_400_before_any_task(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            agent = await env.agent(deployed)
            unknown_op = await env.http.post("/kubernetes/ops", json=[{"launchRocket": {}}])
            assert unknown_op.status_code == 400
            assert "unknown operation 'launchRocket'" in unknown_op.json()["message"]
            no_account = await env.http.post(
                "/kubernetes/ops/scaleManifest",
                json={"account": "nope", "manifestName": "deploy web"},
            )
            assert no_account.status_code == 400
            assert no_account.json()["message"] == "credentials not found (name: nope, names: [k1])"
            invalid = await env.http.post(
                "/ops",
                json=[{"scaleManifest": {"account": "k1", "manifestName": "web", "replicas": 1}}],
            )
            body = invalid.json()
            assert invalid.status_code == 400
            assert body["status"] == 400
            assert body["error"] == "Bad Request"
            assert body["field"] == "scaleManifest.manifestName"
            assert body["errors"] == [body["message"]]
            not_json = await env.http.post("/kubernetes/ops", content=b"{")
            assert not_json.status_code == 400
            missing = await env.http.get("/task/nope")
            assert missing.status_code == 404
            assert missing.json()["message"] == "Task not found (id: nope)"
            assert agent.received == []
            assert (await env.http.get("/task")).json() == []


async def test_a_kubernetes_refusal_fails_the_task_with_the_exception_object(
    tmp_path: Path,
) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            await env.agent(refused)
            posted = await env.http.post(
                "/kubernetes/ops/scaleManifest",
                json={"account": "k1", "manifestName": "deploy web", "location": "prod"},
            )
            task = await env.task(posted.json()["id"])
            message = 'deployments.apps "web" not found'
            assert task["status"]["failed"] is True
            assert task["status"]["completed"] is True
            assert task["history"][-2] == {
                "phase": "SCALE_KUBERNETES_MANIFEST",
                "status": "Scaling",
            }
            assert task["history"][-1]["status"] == (
                "Orchestration failed: KubernetesScaleManifestOperation | KubernetesError: "
                f"[{message}]"
            )
            assert task["resultObjects"] == [
                {
                    "type": "EXCEPTION",
                    "message": message,
                    "cause": "KubernetesError",
                    "details": [{"message": message}],
                    "operation": "KubernetesScaleManifestOperation",
                }
            ]


async def test_no_answer_fails_within_the_deadline(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path, wait_ms=500) as env:
            agent = await env.agent(lambda op: None)
            posted = await env.http.post(
                "/kubernetes/ops/pauseRolloutManifest",
                json={"account": "k1", "manifestName": "deploy web", "location": "prod"},
            )
            started = trio.current_time()
            task = await env.task(posted.json()["id"])
            assert trio.current_time() - started < 3
            assert task["status"]["failed"] is True
            exc = task["resultObjects"][-1]
            assert exc["cause"] == "OperationTimeout"
            assert exc["message"].startswith("sent to agent agent-1 (session ")
            assert "no result within 500 ms (operations.waitMs)" in exc["message"]
            assert len(agent.received) == 1


async def test_agent_gone_mid_operation_fails_and_is_never_resent(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path, wait_ms=10_000) as env:
            silent = await env.agent(lambda op: None)
            posted = await env.http.post(
                "/kubernetes/ops/resumeRolloutManifest",
                json={"account": "k1", "manifestName": "deploy web", "location": "prod"},
            )
            await silent.changed.wait_for(lambda: bool(silent.received), what="the operation sent")
            silent.scope.cancel()  # the agent dies with the operation outstanding
            started = trio.current_time()
            task = await env.task(posted.json()["id"])
            assert trio.current_time() - started < 5  # well within waitMs
            exc = task["resultObjects"][-1]
            assert exc["cause"] == "AgentDisconnected"
            assert "may or may not have been applied" in exc["message"]
            restarted = await env.agent(deployed)
            # Nothing is resent to the new session: the first operation it gets is a new one
            # (the stream is ordered, so a resend would have come first).
            again = await env.http.post(
                "/kubernetes/ops/resumeRolloutManifest",
                json={"account": "k1", "manifestName": "deploy web", "location": "prod"},
            )
            await env.task(again.json()["id"])
            assert [op.id for op in restarted.received] == [f"{again.json()['id']}-0"]
            # With the account's agent gone, a new operation fails fast saying so.
            restarted.scope.cancel()
            await wait_until(
                lambda: env.server.state.sessions.primary_session("k1") is None,
                what="k1 has no agent",
            )
            posted = await env.http.post(
                "/kubernetes/ops/resumeRolloutManifest",
                json={"account": "k1", "manifestName": "deploy web"},
            )
            task = await env.task(posted.json()["id"])
            assert task["resultObjects"][-1]["cause"] == "NoAgent"
            assert "no agent serves account k1" in task["resultObjects"][-1]["message"]


async def test_pod_logs_are_read_through_the_agent(tmp_path: Path) -> None:
    def logs(op: m.Operation) -> m.OperationResult:
        payload = json.loads(op.payload_json)
        if payload["name"] != "job-1-abc":
            return m.OperationResult(
                id=op.id, account=op.account, ok=False,
                error_message='pods "x" not found', error_code="KubernetesError 404",
            )  # fmt: skip
        result = {"logs": [{"container": payload.get("container", "main"), "output": "hello\n"}]}
        return m.OperationResult(
            id=op.id, account=op.account, ok=True, result_json=json.dumps({"result": result})
        )

    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            agent = await env.agent(logs)
            got = await env.http.get("/manifests/k1/jobs/pod%20job-1-abc/logs?tailLines=10")
            assert got.status_code == 200
            assert got.json() == {
                "account": "k1",
                "location": "jobs",
                "name": "pod job-1-abc",
                "logs": [{"container": "main", "output": "hello\n"}],
            }
            sent = json.loads(agent.received[0].payload_json)
            assert agent.received[0].type == "podLogs"
            assert sent == {
                "account": "k1",
                "namespace": "jobs",
                "kind": "Pod",
                "name": "job-1-abc",
                "tailLines": 10,
            }
            console = await env.http.get("/instances/k1/jobs/job-1-abc/console?container=c")
            assert console.json() == {"output": [{"name": "c", "output": "hello\n"}]}
            missing = await env.http.get("/manifests/k1/jobs/pod%20x/logs")
            assert missing.status_code == 404
            assert missing.json()["message"] == 'pods "x" not found'


@in_loop
async def test_tasks_and_request_ids_survive_a_restart(tmp_path: Path) -> None:
    with trio.fail_after(30):
        for attempt in range(2):
            async with trio.open_nursery() as nursery:
                start = functools.partial(
                    run_server, config(str(tmp_path / "ops.db")), serve_api=serve_api
                )
                server: RunningServer = await nursery.start(start)
                base = f"http://127.0.0.1:{server.api_port}"
                async with httpx.AsyncClient(base_url=base) as http:
                    env = Env(server, http, nursery)
                    agent = await env.agent(deployed)
                    body = [{"deployManifest": DEPLOY_CONTEXT}]
                    posted = await http.post("/kubernetes/ops?clientRequestId=r1", json=body)
                    task = await env.task(posted.json()["id"])
                    assert task["status"]["failed"] is False
                    assert len(agent.received) == (1 if attempt == 0 else 0)
                nursery.cancel_scope.cancel()


async def test_a_late_result_is_recorded_and_ignored(tmp_path: Path) -> None:
    held: list[m.Operation] = []
    with trio.fail_after(30):
        async with open_env(tmp_path, wait_ms=300) as env:
            agent = await env.agent(lambda op: held.append(op) or None)  # type: ignore[func-returns-value]
            posted = await env.http.post(
                "/kubernetes/ops/scaleManifest",
                json={"account": "k1", "manifestName": "deploy web", "replicas": 2},
            )
            task_id = posted.json()["id"]
            task = await env.task(task_id)
            assert task["resultObjects"][-1]["cause"] == "OperationTimeout"
            # The agent answers after the server gave up: history only, the task stays failed.
            late = m.OperationResult(id=held[0].id, account="k1", ok=True, result_json="{}")
            session = env.server.state.sessions.primary_session("k1")
            assert session is not None
            await env.server.state.operations.on_result(session, late)
            op = (await env.http.get(f"/armory/agent/operations/{task_id}-0")).json()
            assert op["state"] == "FAILED"
            assert op["history"][-1]["message"].startswith("late result from agent agent-1 ignored")
            assert (await env.http.get(f"/task/{task_id}")).json() == task
            assert len(agent.received) == 1


@in_loop
async def test_a_task_running_when_the_server_stops_reads_back_failed(tmp_path: Path) -> None:
    body = {"account": "k1", "manifestName": "deploy web", "location": "prod"}
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            start = functools.partial(
                run_server, config(str(tmp_path / "ops.db"), 60_000), serve_api=serve_api
            )
            server: RunningServer = await nursery.start(start)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.api_port}") as http:
                agent = await Env(server, http, nursery).agent(lambda op: None)
                posted = await http.post(
                    "/kubernetes/ops/pauseRolloutManifest?clientRequestId=p", json=body
                )
                task_id = posted.json()["id"]
                await agent.changed.wait_for(
                    lambda: bool(agent.received), what="the operation sent"
                )
            nursery.cancel_scope.cancel()
        async with trio.open_nursery() as nursery:
            server = await nursery.start(start)
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.api_port}") as http:
                task = (await http.get(f"/task/{task_id}")).json()
                assert task["status"]["failed"] is True
                assert task["status"]["completed"] is True
                assert task["resultObjects"][-1]["cause"] == "ServerRestarted"
                assert "may or may not have been applied" in task["resultObjects"][-1]["message"]
                again = await http.post(
                    "/kubernetes/ops/pauseRolloutManifest?clientRequestId=p", json=body
                )
                assert again.json()["id"] == task_id  # the retried POST runs nothing
            nursery.cancel_scope.cancel()


async def test_armory_post_runs_one_operation_as_a_task(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path) as env:
            await env.agent(deployed)
            posted = await env.http.post(
                "/armory/agent/operations",
                json={"type": "deployManifest", "description": DEPLOY_CONTEXT},
            )
            assert posted.status_code == 202
            body = posted.json()
            task = await env.task(body["taskId"])
            assert task["status"]["failed"] is False
            op = (await env.http.get(body["operationUri"])).json()
            assert op["id"] == body["operationId"]
            assert op["type"] == "deployManifest"
            assert op["state"] == "SUCCEEDED"
            missing = await env.http.post("/armory/agent/operations", json={"description": {}})
            assert missing.status_code == 400
            assert (await env.http.get("/armory/agent/operations/nope")).status_code == 404


async def test_a_result_from_another_session_is_refused_and_recorded(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_env(tmp_path, wait_ms=1000) as env:
            await env.agent(lambda op: None)  # the PRIMARY never answers
            standby = ScriptedAgent(deployed)
            env.nursery.start_soon(standby.run, env.server.grpc_port)
            await wait_until(
                lambda: len(env.server.state.accounts.registry.holders("k1")) == 2,
                what="k1 has a PRIMARY and a STANDBY",
            )
            other = env.server.state.sessions.get(
                env.server.state.accounts.registry.holders("k1")[1]
            )
            assert other is not None
            posted = await env.http.post(
                "/kubernetes/ops/scaleManifest",
                json={"account": "k1", "manifestName": "deploy web", "replicas": 2},
            )
            task_id = posted.json()["id"]
            await wait_until(
                lambda: env.server.state.operations.in_flight > 0,  # type: ignore[attr-defined]
                what="the operation is in flight",
            )
            forged = m.OperationResult(id=f"{task_id}-0", account="k1", ok=True, result_json="{}")
            await env.server.state.operations.on_result(other, forged)
            task = await env.task(task_id)
            assert task["resultObjects"][-1]["cause"] == "OperationTimeout"
            op = (await env.http.get(f"/armory/agent/operations/{task_id}-0")).json()
            assert op["state"] == "FAILED"
            assert any(
                f"(session {other.session_id}) refused" in e["message"] for e in op["history"]
            )


async def test_secret_payloads_are_redacted_in_records_and_deadlines_are_relative(
    tmp_path: Path,
) -> None:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "prod"},
        "data": {"password": "aHVudGVyMg=="},
        "stringData": {"token": "hunter2"},
    }
    context = {**DEPLOY_CONTEXT, "manifests": [secret]}
    with trio.fail_after(30):
        async with open_env(tmp_path, wait_ms=5000) as env:
            agent = await env.agent(deployed)
            posted = await env.http.post("/kubernetes/ops", json=[{"deployManifest": context}])
            task_id = posted.json()["id"]
            await env.task(task_id)
            (sent,) = agent.received
            # The agent gets the manifest whole, and a deadline relative to its receipt
            # (milliseconds left of the server's wait), not a wall-clock instant.
            assert json.loads(sent.payload_json)["manifests"][0]["stringData"] == {
                "token": "hunter2"
            }
            assert 0 < sent.deadline_ms <= 5000
            shown = (await env.http.get(f"/armory/agent/operations/{task_id}-0")).text
            assert "hunter2" not in shown
            assert "aHVudGVyMg==" not in shown
            assert '"creds"' in shown
