"""The orchestration task as Orca reads it (pure state machine)."""

from __future__ import annotations

from collections.abc import Callable

from server.ops import Task, TaskState


def new_task() -> Task:
    return Task.create("t-1", request_id="r-1", owner_id="server-1", now_ms=1000, accounts=["k1"])


def test_a_successful_task_has_clouddrivers_shape() -> None:
    task = new_task()
    body = task.to_json()
    assert body["status"] == {
        "phase": "ORCHESTRATION",
        "status": "Initializing Orchestration Task",
        "complete": False,
        "completed": False,
        "failed": False,
        "retryable": False,
    }
    task.begin_operation("t-1-0", "KubernetesDeployManifestOperation")
    task.add_phases(
        [{"phase": "DEPLOY_KUBERNETES_MANIFEST", "status": "Deploying manifest"}, {"status": "x"}],
        "DEPLOY_KUBERNETES_MANIFEST",
    )
    task.add_result({"manifestNamesByNamespace": {"ns": ["deployment web"]}})
    task.add_result(None)  # scale & co. have no result object
    task.complete(2000)
    body = task.to_json()
    assert [(h["phase"], h["status"]) for h in body["history"]] == [
        ("ORCHESTRATION", "Initializing Orchestration Task"),
        ("ORCHESTRATION", "Processing op: KubernetesDeployManifestOperation"),
        ("DEPLOY_KUBERNETES_MANIFEST", "Deploying manifest"),
        ("DEPLOY_KUBERNETES_MANIFEST", "x"),
        ("ORCHESTRATION", "Orchestration completed."),
    ]
    assert body["status"]["completed"] is body["status"]["complete"] is True
    assert body["status"]["failed"] is False
    assert body["retryable"] is False
    assert body["resultObjects"] == [{"manifestNamesByNamespace": {"ns": ["deployment web"]}}]
    assert (body["id"], body["requestId"], body["ownerId"], body["startTimeMs"]) == (
        "t-1",
        "r-1",
        "server-1",
        1000,
    )
    assert body["sagaIds"] == []
    assert body["outputs"] == []


def test_a_failure_is_final_with_the_exception_object() -> None:
    task = new_task()
    task.begin_operation("t-1-0", "KubernetesScaleManifestOperation")
    task.fail("KubernetesScaleManifestOperation", "KubernetesError", "nope: 422", 1500)
    task.complete(1600)  # no effect after the end
    task.log("X", "ignored")
    body = task.to_json()
    assert body["status"]["failed"] is True
    assert body["status"]["completed"] is True
    assert body["history"][-1] == {
        "phase": "ORCHESTRATION",
        "status": "Orchestration failed: KubernetesScaleManifestOperation | KubernetesError: "
        "[nope: 422]",
    }
    assert body["resultObjects"] == [
        {
            "type": "EXCEPTION",
            "message": "nope: 422",
            "cause": "KubernetesError",
            "details": [{"message": "nope: 422"}],
            "operation": "KubernetesScaleManifestOperation",
        }
    ]
    assert task.state == TaskState.FAILED
    assert task.end_time_ms == 1500


def test_round_trip_through_json() -> None:
    for end in ("ok", "failed", "running"):
        task = new_task()
        task.begin_operation("t-1-0", "KubernetesDeleteManifestOperation")
        if end == "ok":
            task.complete(5)
        elif end == "failed":
            task.fail("Op", "E", "m", 5)
        again = Task.from_json(task.to_json())
        assert again.to_json() == task.to_json()
        assert again.state == task.state


def test_history_is_bounded() -> None:
    task = new_task()
    task.add_phases([{"phase": "P", "status": str(i)} for i in range(5000)], "P")
    task.complete(1)
    assert len(task.history) == 1000
    assert task.history[-1]["status"] == "Orchestration completed."


def test_encoded_follows_every_change() -> None:
    """``encoded`` (GET /task's body, kept between changes) is ``to_json`` after each change."""
    import msgspec

    task = Task.create("t", request_id="r", owner_id="o", now_ms=1)
    steps: list[Callable[[], None]] = [
        lambda: task.begin_operation("t-0", "DeployManifest"),
        lambda: task.add_phases([{"phase": "DEPLOY", "status": "applied"}], "DEPLOY"),
        lambda: task.add_result({"manifestNamesByNamespace": {}}),
        lambda: task.fail("DeployManifest", "E", "no", 5),
    ]
    for step in steps:
        assert task.encoded() == msgspec.json.encode(task.to_json())
        step()
        assert task.encoded() == msgspec.json.encode(task.to_json())
    copy = task.copy()
    assert copy.encoded() == task.encoded()
    stored = Task.from_json(msgspec.json.decode(task.encoded()))
    assert stored.encoded() == task.encoded()
