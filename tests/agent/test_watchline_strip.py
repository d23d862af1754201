"""managedFields stripping while decoding: the fast cut and the exact fallback agree."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from agent.watch._lines import WatchDecoder

MANAGED = [{"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {"f:a": {}}}}]


def _line(obj: dict[str, Any], *, compact: bool = True) -> bytes:
    event = {"type": "MODIFIED", "object": obj}
    text = msgspec.json.encode(event) if compact else json.dumps(event, indent=1).encode()
    return text.replace(b"\n", b"") + b"\n" if not compact else text + b"\n"


def _decode(line: bytes) -> dict[str, Any]:
    (event,) = WatchDecoder(strip_managed_fields=True).feed(line)
    result: dict[str, Any] = json.loads(event.object)
    return result


def _cm(metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, **extra}


@pytest.mark.parametrize(
    "metadata",
    [
        {"managedFields": MANAGED, "name": "a", "namespace": "n"},  # first key
        {"name": "a", "managedFields": MANAGED, "namespace": "n"},  # middle
        {"name": "a", "namespace": "n", "managedFields": MANAGED},  # last
        {"managedFields": MANAGED},  # the only key
        {"name": "a", "managedFields": []},  # empty list
        # After the list: fields (kubesim's order), a nested object (the fast path's short
        # parse cannot close the metadata there and falls back).
        {"name": "a", "managedFields": MANAGED, "uid": "u", "resourceVersion": "7"},
        {"name": "a", "managedFields": MANAGED, "labels": {"x": "y"}, "namespace": "n"},
        # A "]" inside a string of the list: the first "]" is not the list's end.
        {"name": "a", "managedFields": [{"manager": "a]b", "fieldsV1": {"f:x]": {}}}]},
    ],
)
def test_managed_fields_are_cut_wherever_they_sit(metadata: dict[str, Any]) -> None:
    obj = _cm(metadata, data={"k": "v"})
    expected = {key: value for key, value in metadata.items() if key != "managedFields"}
    for compact in (True, False):
        decoded = _decode(_line(obj, compact=compact))
        assert decoded["metadata"] == expected
        assert decoded["data"] == {"k": "v"}


def test_the_same_key_elsewhere_leaves_it_there_and_strips_the_metadata() -> None:
    # A data field that is an exact copy of the metadata's managedFields, placed before the
    # metadata: the fast cut must not take it; the exact path strips only the metadata's.
    obj = {
        "apiVersion": "example.com/v1",
        "kind": "Copy",
        "data": {"managedFields": MANAGED},
        "metadata": {"name": "a", "managedFields": MANAGED},
    }
    decoded = _decode(_line(obj))
    assert decoded["metadata"] == {"name": "a"}
    assert decoded["data"] == {"managedFields": MANAGED}


def test_the_key_inside_a_string_is_not_mistaken_for_the_field() -> None:
    obj = _cm(
        {"name": "a", "annotations": {"note": '"managedFields":[]'}, "managedFields": MANAGED}
    )
    decoded = _decode(_line(obj))
    assert decoded["metadata"] == {"name": "a", "annotations": {"note": '"managedFields":[]'}}


def test_null_managed_fields_are_left_as_they_are() -> None:
    obj = _cm({"name": "a", "managedFields": None})
    assert _decode(_line(obj))["metadata"] == {"name": "a", "managedFields": None}


def test_metadata_fields_are_read_in_the_same_parse() -> None:
    obj = _cm(
        {
            "name": "a",
            "namespace": "n",
            "uid": "u",
            "resourceVersion": "7",
            "managedFields": MANAGED,
        }
    )
    (event,) = WatchDecoder(strip_managed_fields=True).feed(_line(obj))
    assert (event.name, event.namespace, event.uid, event.resource_version) == ("a", "n", "u", "7")
    (kept,) = WatchDecoder(strip_managed_fields=False).feed(_line(obj))
    assert json.loads(kept.object)["metadata"]["managedFields"] == MANAGED


# An extra key whose value is an object is not told apart from the object's own last field
# without parsing the object whole: the short parse trusts the API server's envelope
# (metav1.WatchEvent: type and object only) that far.
@pytest.mark.parametrize("extra", [b"1", b'"x"', b"[]", b"null"])
def test_an_envelope_with_more_than_type_and_object_is_parsed_whole(extra: bytes) -> None:
    obj = _cm({"name": "a", "managedFields": MANAGED}, data={"k": "v"})
    line = _line(obj)[:-2] + b',"extra":' + extra + b"}\n"
    (event,) = WatchDecoder(strip_managed_fields=True).feed(line)
    assert json.loads(event.object) == _cm({"name": "a"}, data={"k": "v"})


def test_an_extra_object_after_the_object_is_taken_as_part_of_it() -> None:
    # The assumption above, pinned (and proof that the short parse, not the whole one, ran:
    # the whole parse would give the object alone). API servers never write such a line; if
    # one did, the server's ingest would refuse the batch, since this is not one JSON value.
    obj = _cm({"name": "a", "managedFields": MANAGED}, data={"k": "v"})
    line = _line(obj)[:-2] + b',"extra":{"x":1}}\n'
    (event,) = WatchDecoder(strip_managed_fields=True).feed(line)
    assert event.object.endswith(b'"data":{"k":"v"}},"extra":{"x":1}')
    (whole,) = WatchDecoder(strip_managed_fields=False).feed(line)
    assert json.loads(whole.object)["data"] == {"k": "v"}


def test_the_short_parse_reads_every_metadata_field_around_the_list() -> None:
    obj = _cm(
        {
            "name": "a",
            "namespace": "n",
            "managedFields": MANAGED,
            "uid": "u",
            "resourceVersion": "7",
        },
        data={"k": "v"},
    )
    (event,) = WatchDecoder(strip_managed_fields=True).feed(_line(obj))
    assert (event.name, event.namespace, event.uid, event.resource_version) == ("a", "n", "u", "7")
    assert json.loads(event.object)["metadata"] == {
        "name": "a",
        "namespace": "n",
        "uid": "u",
        "resourceVersion": "7",
    }
