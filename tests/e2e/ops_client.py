"""A client that drives the operations API the way Orca does (for the e2e operations tests).

Orca posts a whole stage context (extra keys, string numbers) as ``[{"<op>": context}]`` with
a clientRequestId, retries the POST with the same id, polls ``/task/{id}`` reading only
``status.completed`` / ``status.failed`` and, for deploy/delete/patch, keeps polling until
``resultObjects`` is non-empty; after a deploy it polls ``/manifests`` until
``status.stable.state``.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import quote

import httpx
import trio

NEEDS_RESULTS = frozenset({"deployManifest", "deleteManifest", "patchManifest"})
STAGE_NOISE = {
    "cloudProvider": "kubernetes",
    "app": "shop",
    "user": "anonymous",
    "reason": None,
    "mode": "static",
    "cluster": "deployment web",
    "criteria": None,
    "type": "stage",
    "refId": "1",
}


class OrcaClient:
    def __init__(self, http: httpx.AsyncClient, *, poll: float = 0.05) -> None:
        self.http = http
        self.poll = poll

    async def submit(self, operation: str, context: dict[str, Any], *, retries: int = 1) -> str:
        """POST the stage (with Orca's noise) and retry it with the same clientRequestId;
        every answer must name the same task."""
        body = [{operation: {**STAGE_NOISE, **context}}]
        request_id = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        ids = set()
        for _ in range(1 + retries):
            answer = await self.http.post(
                f"/kubernetes/ops?clientRequestId={request_id}", json=body
            )
            assert answer.status_code == 200, answer.text
            ids.add(answer.json()["id"])
        assert len(ids) == 1, ids
        return str(ids.pop())

    async def wait(self, operation: str, task_id: str) -> dict[str, Any]:
        """Poll until Orca would move on: failed, or completed (with results when needed)."""
        while True:
            task: dict[str, Any] = (await self.http.get(f"/task/{task_id}")).json()
            status = task["status"]
            if status["failed"]:
                return task
            if status["completed"] and (operation not in NEEDS_RESULTS or task["resultObjects"]):
                return task
            await trio.sleep(self.poll)

    async def run(self, operation: str, context: dict[str, Any]) -> dict[str, Any]:
        return await self.wait(operation, await self.submit(operation, context))

    async def wait_stable(self, account: str, location: str, name: str) -> dict[str, Any]:
        path = f"/manifests/{account}/{location}/{quote(name)}"
        while True:
            answer = await self.http.get(path)
            if answer.status_code == 200:
                body: dict[str, Any] = answer.json()
                if body["status"]["stable"]["state"]:
                    return body
            await trio.sleep(self.poll)
