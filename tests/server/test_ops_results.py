"""Reading an agent's result tolerantly, and the cache records it implies (pure)."""

from __future__ import annotations

import json

import wire
from server.ops import cache_records, parse_result
from server.ops._results import error_name


def test_a_malformed_result_is_reported_not_raised() -> None:
    for raw, problem in [("{", "not JSON"), ("[1]", "not a JSON object"), ("", "")]:
        result = parse_result(False, raw, "boom", "KubernetesError 500")
        assert problem in result.problem
        assert result.phases == [] and result.result is None  # noqa: PT018
    good = parse_result(
        True,
        json.dumps({"result": {"a": 1}, "phases": [{"phase": "P", "status": "s"}, 3], "x": 1}),
        "",
        "",
    )
    assert good.result == {"a": 1}
    assert good.phases == [{"phase": "P", "status": "s"}]


def test_error_names() -> None:
    assert error_name("KubernetesError 422") == "KubernetesError"
    assert error_name("Invalid") == "Invalid"
    assert error_name("") == "OperationFailed"
    assert error_name("422") == "OperationFailed"


def test_cache_records_from_objects_and_deletions() -> None:
    obj = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "prod", "uid": "u1", "resourceVersion": "42"},
    }
    records = cache_records(
        "k1",
        [obj, {"kind": "Deployment", "metadata": {}}],
        [{"apiVersion": "v1", "kind": "Service", "namespace": "prod", "name": "web"}, {}],
    )
    assert [(r.type, r.kind, r.name, r.resource_version) for r in records] == [
        (int(wire.EventType.MODIFIED), "Deployment", "web", "42"),
        (int(wire.EventType.DELETED), "Service", "web", ""),
    ]
    assert json.loads(records[0].object) == obj
    assert records[0].uid == "u1"
    assert records[0].account == "k1"
