"""Secrets leave as metadata only; managedFields are stripped only when present."""

from __future__ import annotations

import json

from agent.watch._scrub import LAST_APPLIED_ANNOTATION, Scrubber

SECRET_VALUE = "c3VwZXItc2VjcmV0LXZhbHVl"


def full_secret() -> dict[str, object]:
    applied = {"apiVersion": "v1", "kind": "Secret", "data": {"password": SECRET_VALUE}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "db",
            "namespace": "prod",
            "annotations": {LAST_APPLIED_ANNOTATION: json.dumps(applied), "team": "a"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:data": {"f:password": {}}}}],
        },
        "data": {"password": SECRET_VALUE},
        "stringData": {"token": "plain-" + SECRET_VALUE},
        "extra": {"value": SECRET_VALUE},
    }


def test_a_full_secret_keeps_only_its_metadata() -> None:
    out = Scrubber().secret(json.dumps(full_secret()).encode())
    assert SECRET_VALUE.encode() not in out
    assert json.loads(out) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "db", "namespace": "prod", "annotations": {"team": "a"}},
    }


def test_partial_object_metadata_becomes_a_secret() -> None:
    partial = {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": {"name": "db", "annotations": {LAST_APPLIED_ANNOTATION: "{}"}},
    }
    out = json.loads(Scrubber(strip_managed_fields=False).secret(json.dumps(partial).encode()))
    assert out == {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}}


def test_objects_without_managed_fields_pass_as_the_same_bytes() -> None:
    data = b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a"},"spec":{}}'
    assert Scrubber().clean(data) is data


def test_managed_fields_are_stripped_and_the_rest_kept_verbatim() -> None:
    data = (
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":[{"m":1}],'
        b'"labels":{"x":"y"}},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    )
    out = Scrubber().clean(data)
    assert out == (
        b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","labels":{"x":"y"}},'
        b'"spec":{"containers":[{"name":"c","image":"i"}]}}'
    )
    assert Scrubber(strip_managed_fields=False).clean(data) is data


def test_the_marker_elsewhere_changes_nothing() -> None:
    data = b'{"metadata":{"name":"a"},"spec":{"note":"\\"managedFields\\""}}'
    data2 = b'{"kind":"X","metadata":{"labels":{"managedFields":"1"}}}'
    assert Scrubber().clean(data) is data
    assert Scrubber().clean(data2) is data2
