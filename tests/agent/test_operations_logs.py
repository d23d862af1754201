"""podLogs (the server's log routes): refusals that the server maps to 404/400.

The operation's payload and result are in docs/protocol.md §11.4; kubesim's
``pods/{name}/log`` itself is tested in tests/kubesim/test_writes_http.py.
"""

from __future__ import annotations

from pathlib import Path

import trio

from tests.agent.operations_harness import open_ops_bench

POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
}


async def test_pod_logs_refuses_a_missing_pod_or_container(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            bench.sim.create(POD)
            missing = await bench.run(
                "podLogs", {"namespace": "default", "kind": "Pod", "name": "nope"}
            )
            container = await bench.run(
                "podLogs",
                {"namespace": "default", "kind": "Pod", "name": "p", "container": "sidecar"},
            )
            negative = await bench.run(
                "podLogs", {"namespace": "default", "kind": "Pod", "name": "p", "tailLines": -1}
            )
    assert missing.answer.error_code == "KubernetesError 404"
    assert missing.answer.error_message == 'pods "nope" not found'
    assert container.answer.error_code == "Invalid"
    assert "sidecar" in container.answer.error_message
    assert "main" in container.answer.error_message
    assert negative.answer.error_code == "Invalid"
