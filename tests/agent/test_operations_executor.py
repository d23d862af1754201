"""The executor's own promises: de-duplication, bounded concurrency, deadlines, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import trio
import trio.testing

from agent.operations import OperationExecutor
from tests.agent.operations_harness import Ran, assert_ok, deployment, job, open_ops_bench
from wire import messages

from .._wait import wait_until

JOB = job("once")


async def test_the_same_operation_id_runs_once(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            payload = {"namespace": "default", "manifest": JOB}
            results: list[Ran] = []

            async def run() -> None:
                results.append(await bench.run("runJob", payload, op_id="same"))

            async with trio.open_nursery() as nursery:  # a duplicate while the first runs
                nursery.start_soon(run)
                nursery.start_soon(run)
            later = await bench.run("runJob", payload, op_id="same")  # and one after it ended
            jobs = bench.sim.list("batch", "v1", "jobs", "default")
    assert_ok(*results, later)
    assert len(jobs) == 1
    assert bench.executor.runs == 1
    assert results[0].answer == results[1].answer == later.answer


async def test_a_past_deadline_is_never_started(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            past = -1000  # relative: it passed a second ago
            ran = await bench.run(
                "deployManifest",
                {"namespace": "default", "manifests": [deployment()]},
                deadline_ms=past,
            )
            deployments = bench.sim.list("apps", "v1", "deployments", "default")
    assert not ran.ok
    assert ran.answer.error_code == "Timeout"
    assert "deadline" in ran.answer.error_message
    assert deployments == []
    assert bench.executor.runs == 0


async def test_concurrency_is_bounded_and_waits_end_at_the_deadline(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, max_concurrent=1, max_queued=1) as bench:
            await bench.run(
                "scaleManifest", {"kind": "Deployment", "name": "warm", "namespace": "default"}
            )  # discovery done
            bench.server.faults.stall_responses(seconds=2, count=1)
            slow: list[Ran] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: _collect(
                        slow,
                        bench.run(
                            "deployManifest", {"namespace": "default", "manifests": [deployment()]}
                        ),
                    )
                )
                # The first holds the only slot (it started: runs counts it), stalled.
                await wait_until(lambda: bench.executor.runs == 2, what="the first op started")
                soon = 300  # relative: 300 ms from receipt
                waited = await bench.run(
                    "deployManifest",
                    {"namespace": "default", "manifests": [deployment(name="b")]},
                    deadline_ms=soon,
                )
                nursery.start_soon(
                    lambda: _collect(
                        slow,
                        bench.run(
                            "deployManifest",
                            {"namespace": "default", "manifests": [deployment(name="c")]},
                        ),
                    )
                )
                # "c" waits in the only queue place: nothing but I/O and timers is left to run
                # (c reaches the slot's wait with no await before it).
                await trio.testing.wait_all_tasks_blocked()
                refused = await bench.run(
                    "deployManifest", {"namespace": "default", "manifests": [deployment(name="d")]}
                )
            names = {
                d["metadata"]["name"]
                for d in bench.sim.list("apps", "v1", "deployments", "default")
            }
    assert waited.answer.error_code == "Timeout"
    assert "waited for a free slot" in waited.answer.error_message
    assert refused.answer.error_code == "Unavailable"
    assert "busy" in refused.answer.error_message
    assert_ok(*slow)
    assert names == {"api", "c"}


async def _collect(into: list[Ran], run: object) -> None:
    into.append(await run)  # type: ignore[misc]


async def test_clear_errors_for_bad_operations(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path) as bench:
            unknown_type = await bench.run("explodeManifest", {})
            unknown_kind = await bench.run(
                "scaleManifest",
                {"namespace": "default", "kind": "Gizmo", "name": "g", "replicas": 1},
            )
            not_found = await bench.run(
                "scaleManifest",
                {"namespace": "default", "kind": "deployment", "name": "nope", "replicas": 1},
            )
            bad_field = await bench.run(
                "scaleManifest",
                {"namespace": "default", "kind": "deployment", "name": "x", "replicas": "many"},
            )
            no_manifests = await bench.run("deployManifest", {"manifests": [None]})
            bad_json = await bench.executor(
                messages.Operation(
                    id="j", account="k1", type="deployManifest", payload_json="{nope"
                )
            )
            other_account = await bench.executor(
                messages.Operation(
                    id="o",
                    account="k2",
                    type="deployManifest",
                    payload_json=json.dumps({"manifests": [deployment()]}),
                )
            )
    assert unknown_type.answer.error_code == "Unsupported"
    assert "explodeManifest" in unknown_type.answer.error_message
    assert unknown_kind.answer.error_code == "Invalid"
    assert "Gizmo" in unknown_kind.answer.error_message
    assert not_found.answer.error_code == "KubernetesError 404"
    assert "nope" in not_found.answer.error_message
    assert bad_field.answer.error_code == "Invalid"
    assert "scaleManifest.replicas" in bad_field.answer.error_message
    assert no_manifests.answer.error_code == "Invalid"
    assert bad_json.error_code == "Invalid"
    assert other_account.error_code == "Unavailable"
    assert "k2" in other_account.error_message
    for answer in (unknown_type, unknown_kind, not_found, bad_field):
        assert "Traceback" not in answer.answer.error_message


async def test_the_result_lru_is_bounded() -> None:
    executor = OperationExecutor(lambda name: None, remembered=2)
    with trio.fail_after(5):
        for op_id in ("a", "b", "c"):
            await executor(messages.Operation(id=op_id, account="k", type="deployManifest"))
    assert executor.recorded("a") is None
    assert executor.recorded("b") is not None
    assert executor.recorded("c") is not None


async def test_a_cancelled_run_releases_its_waiters_and_its_slot(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with open_ops_bench(tmp_path, max_concurrent=1) as bench:
            await bench.run(
                "scaleManifest", {"kind": "Deployment", "name": "warm", "namespace": "default"}
            )  # discovery done
            bench.server.faults.stall_responses(seconds=60, count=1)
            waiter: list[Ran] = []
            payload = {"namespace": "default", "manifests": [deployment()]}
            async with trio.open_nursery() as nursery:
                cancel = trio.CancelScope()

                async def first() -> None:
                    with cancel:
                        await bench.run("deployManifest", payload, op_id="x")

                nursery.start_soon(first)
                await wait_until(lambda: bench.executor.runs == 2, what="x started")
                nursery.start_soon(
                    lambda: _collect(waiter, bench.run("deployManifest", payload, op_id="x"))
                )
                await trio.testing.wait_all_tasks_blocked()  # the duplicate waits for x's result
                cancel.cancel()
            bench.server.faults.clear()
            after = await bench.run("deployManifest", payload, op_id="y")
    assert waiter[0].answer.error_code == "Unavailable"
    assert "cancelled" in waiter[0].answer.error_message
    assert bench.executor.recorded("x") is None
    assert_ok(after)  # the slot came back
