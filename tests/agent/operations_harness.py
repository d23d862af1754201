"""A real KubeClient against kubesim on loopback, and an executor running operations on it."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubesim
from agent import AccountConfig, KubeClient, open_kube_client
from agent.operations import OperationExecutor
from wire import messages

_ids = itertools.count(1)


@dataclass
class Ran:
    """One operation's answer, with result_json decoded."""

    answer: messages.OperationResult
    body: dict[str, Any]

    @property
    def ok(self) -> bool:
        return bool(self.answer.ok)

    @property
    def result(self) -> Any:
        return self.body.get("result")


@dataclass
class OpsBench:
    sim: kubesim.Cluster
    server: kubesim.Server
    client: KubeClient
    executor: OperationExecutor
    account: str = "k1"

    async def run(
        self, type: str, payload: dict[str, Any], *, op_id: str = "", deadline_ms: int = 0
    ) -> Ran:
        op = messages.Operation(
            id=op_id or f"op-{next(_ids)}",
            account=self.account,
            type=type,
            payload_json=json.dumps({"account": self.account, **payload}),
            deadline_ms=deadline_ms,
        )
        answer = await self.executor(op)
        body = json.loads(answer.result_json) if answer.result_json else {}
        return Ran(answer, body)


@asynccontextmanager
async def open_ops_bench(
    tmp_path: Path,
    *,
    user: str = "admin",
    sim: kubesim.Cluster | None = None,
    tls: bool = False,
    **executor_options: Any,
) -> AsyncIterator[OpsBench]:
    """kubesim on loopback (``tls``: over HTTPS with its CA and the user's token, as a real
    cluster is) and an executor whose one account ``k1`` is a real KubeClient to it."""
    sim = sim or kubesim.Cluster()
    async with kubesim.open_server(sim, host="127.0.0.1", port=0, tls=tls) as server:
        if user != "admin":
            server.add_user(user, grants={"*": kubesim.READ_VERBS, "configmaps": kubesim.ALL_VERBS})
        path = server.kubeconfig(tmp_path / "kubeconfig", user=user)
        account = AccountConfig("k1", kube_config_file=str(path))
        async with open_kube_client(account, environ={}) as client:
            executor = OperationExecutor(
                lambda name: client if name == "k1" else None, **executor_options
            )
            yield OpsBench(sim, server, client, executor)


# kubesim plays a pod template's outcome from this annotation ("fail", "unready", ...).
OUTCOME = "kubesim.io/outcome"


def workload(
    kind: str,
    name: str,
    *,
    image: str = "nginx:1",
    replicas: int = 1,
    container: str = "main",
    namespace: str | None = None,
    annotations: dict[str, str] | None = None,
    outcome: str = "",
) -> dict[str, Any]:
    """An apps/v1 ``kind`` (Deployment, ReplicaSet, ...) of one container, its pods labelled
    ``app: name``; the tests' one builder. ``annotations`` go on the object (None: no key),
    ``outcome`` on the pod template (see OUTCOME)."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": container, "image": image}]},
    }
    if outcome:
        template["metadata"]["annotations"] = {OUTCOME: outcome}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }


def replica_set(name: str = "web", image: str = "nginx:1", **annotations: str) -> dict[str, Any]:
    return workload("ReplicaSet", name, image=image, annotations=annotations)


def deployment(name: str = "api", image: str = "nginx:1", replicas: int = 1) -> dict[str, Any]:
    return workload("Deployment", name, image=image, replicas=replicas)


def job(
    name: str = "migrate",
    *,
    container: str = "m",
    image: str = "busybox",
    namespace: str | None = None,
    outcome: str = "",
    **spec: Any,
) -> dict[str, Any]:
    """A Job running ``image`` once (busybox by default); ``outcome`` as ``workload``'s,
    ``spec`` added to its spec."""
    template: dict[str, Any] = {
        "spec": {"restartPolicy": "Never", "containers": [{"name": container, "image": image}]}
    }
    if outcome:
        template["metadata"] = {"annotations": {OUTCOME: outcome}}
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"template": template, **spec},
    }


def assert_ok(*runs: Ran) -> None:
    """Every run succeeded (the failing one's answer is shown otherwise)."""
    for ran in runs:
        assert ran.ok, ran.answer
