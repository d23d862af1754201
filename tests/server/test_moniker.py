"""Monikers: Frigga's name parsing and the moniker.spinnaker.io annotations."""

from __future__ import annotations

import pytest

from server._moniker import Moniker, moniker_for, parse_name


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("shop", Moniker(app="shop", cluster="shop")),
        ("shop-prod", Moniker(app="shop", cluster="shop-prod", stack="prod")),
        (
            "shop-prod-canary",
            Moniker(app="shop", cluster="shop-prod-canary", stack="prod", detail="canary"),
        ),
        (
            "shop-prod-canary-eu-west",
            Moniker(
                app="shop",
                cluster="shop-prod-canary-eu-west",
                stack="prod",
                detail="canary-eu-west",
            ),
        ),
        ("shop--canary", Moniker(app="shop", cluster="shop--canary", detail="canary")),
        ("shop-v002", Moniker(app="shop", cluster="shop", sequence=2)),
        (
            "shop-prod-v123456",
            Moniker(app="shop", cluster="shop-prod", stack="prod", sequence=123456),
        ),
        ("shop-v12", Moniker(app="shop", cluster="shop-v12", stack="v12")),
        (
            "shop-prod-v1234567",
            Moniker(app="shop", cluster="shop-prod-v1234567", stack="prod", detail="v1234567"),
        ),
        ("my.app-x", Moniker(app="my.app", cluster="my.app-x", stack="x")),
    ],
)
def test_parse_name(name: str, expected: Moniker) -> None:
    assert parse_name(name) == expected


def test_name_outside_the_pattern_keeps_only_the_cluster() -> None:
    assert parse_name("a:b-v001") == Moniker(cluster="a:b-v001")
    assert parse_name("") == Moniker()


def test_annotations_win_field_by_field() -> None:
    notes = {
        "moniker.spinnaker.io/application": "store",
        "moniker.spinnaker.io/cluster": "deployment shop",
        "moniker.spinnaker.io/sequence": "7",
    }
    obj = {"metadata": {"name": "shop-prod-v003", "annotations": notes}}
    # Stack and detail come only from their annotations (the name's "prod" is not a stack).
    assert moniker_for(obj) == Moniker(app="store", cluster="deployment shop", sequence=7)
    assert moniker_for(obj).to_json() == {
        "app": "store",
        "cluster": "deployment shop",
        "sequence": 7,
    }
    notes["moniker.spinnaker.io/stack"] = "prod"
    notes["moniker.spinnaker.io/detail"] = "canary"
    assert moniker_for(obj).stack == "prod"
    assert moniker_for(obj).detail == "canary"


def test_replica_set_sequence_falls_back_to_the_deployment_revision() -> None:
    notes = {"deployment.kubernetes.io/revision": "4"}
    rs = {"kind": "ReplicaSet", "metadata": {"name": "web-5d8f", "annotations": notes}}
    assert moniker_for(rs).sequence == 4
    assert moniker_for({**rs, "kind": "Deployment"}).sequence is None
    notes["moniker.spinnaker.io/sequence"] = "9"
    assert moniker_for(rs).sequence == 9


def test_bad_sequence_annotation_keeps_the_parsed_one() -> None:
    obj = {"metadata": {"name": "shop-v003", "annotations": {"moniker.spinnaker.io/sequence": "x"}}}
    assert moniker_for(obj).sequence == 3


def test_object_without_metadata() -> None:
    assert moniker_for({}) == Moniker()
    assert moniker_for({"metadata": "junk"}).to_json() == {}
