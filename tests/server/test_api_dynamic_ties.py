"""Dynamic targets when versions share a creationTimestamp (the API server stamps whole
seconds, and a red/black deploys v001 within a second of v000)."""

from __future__ import annotations

from typing import Any

from server.api._manifest_view import age_key, pick_by_criteria


def rs(name: str, sequence: str | None = None) -> dict[str, Any]:
    notes = {} if sequence is None else {"moniker.spinnaker.io/sequence": sequence}
    return {
        "metadata": {
            "name": name,
            "creationTimestamp": "2026-11-25T10:00:00Z",
            "annotations": notes,
        },
        "spec": {"replicas": 2},
    }


def name(obj: Any) -> str:
    return str(obj["metadata"]["name"])


def test_the_sequence_orders_versions_created_in_the_same_second() -> None:
    # Listed in an order a name sort would get wrong (v1000 < v999 as text).
    objs = [rs("web-v1000"), rs("web-v999"), rs("web-v998")]
    assert name(pick_by_criteria(objs, "newest")) == "web-v1000"
    assert name(pick_by_criteria(objs, "second_newest")) == "web-v999"
    assert name(pick_by_criteria(objs, "oldest")) == "web-v998"


def test_the_moniker_annotation_wins_over_the_name() -> None:
    objs = [rs("web-v000", sequence="7"), rs("web-v001", sequence="3")]
    assert name(pick_by_criteria(objs, "newest")) == "web-v000"
    assert sorted(objs, key=age_key)[0] is objs[1]


def test_the_timestamp_still_comes_first() -> None:
    older = rs("web-v005")
    older["metadata"]["creationTimestamp"] = "2026-11-25T09:59:59Z"
    assert name(pick_by_criteria([rs("web-v001"), older], "oldest")) == "web-v005"
