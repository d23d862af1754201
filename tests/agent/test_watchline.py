"""The sans-I/O watch decoder: arbitrary chunk boundaries, caps, statuses, list pages."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent._errors import KubeConnectionError, LineTooLong, WatchDecodeError
from agent.watch._lines import WatchDecoder, decode_list_page, decode_status


def pod(name: str, rv: str, namespace: str = "default") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "labels": {"app": "x"},
        },
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }


def line(event_type: str, obj: dict[str, object]) -> bytes:
    """As API servers write it (compact): the decoder's sliced fast path."""
    envelope = {"type": event_type, "object": obj}
    return json.dumps(envelope, separators=(",", ":")).encode() + b"\n"


def spaced(event_type: str, obj: dict[str, object]) -> bytes:
    """Any other valid shape: the decoder's general path."""
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\r\n"


STREAM = (
    line("ADDED", pod("a", "10"))
    + line("MODIFIED", pod("a", "11"))
    + line(
        "BOOKMARK",
        {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "resourceVersion": "12",
                "annotations": {"k8s.io/initial-events-end": "true"},
            },
        },
    )
    + line("DELETED", pod("a", "13"))
    + line(
        "ERROR",
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version: 1 (5)",
        },
    )
)


def test_decodes_every_event_type() -> None:
    events = WatchDecoder().feed(STREAM)
    assert [e.type for e in events] == ["ADDED", "MODIFIED", "BOOKMARK", "DELETED", "ERROR"]
    added = events[0]
    assert (added.name, added.namespace, added.uid, added.resource_version) == (
        "a",
        "default",
        "uid-a",
        "10",
    )
    assert json.loads(added.object) == pod("a", "10")
    assert type(added.object) is bytes  # owned, not a view keeping the read buffer alive
    assert events[2].resource_version == "12"
    assert events[2].initial_events_end
    assert events[4].status is not None
    assert events[4].status.code == 410
    assert events[4].status.reason == "Expired"


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_any_chunk_boundaries_give_the_same_events(cuts: list[int]) -> None:
    whole = WatchDecoder().feed(STREAM)
    decoder = WatchDecoder()
    got = []
    points = [0, *sorted(cuts), len(STREAM)]
    for start, end in itertools.pairwise(points):
        got.extend(decoder.feed(STREAM[start:end]))
    decoder.end_of_stream()
    assert got == whole


def test_a_line_over_the_cap_is_refused_clearly() -> None:
    decoder = WatchDecoder(max_line_bytes=100)
    with pytest.raises(LineTooLong, match="exceeds 100 bytes"):
        decoder.feed(line("ADDED", pod("a" * 200, "1")))
    decoder = WatchDecoder(max_line_bytes=100)
    decoder.feed(b'{"type":"ADDED",' + b" " * 60)
    with pytest.raises(LineTooLong):
        decoder.feed(b" " * 60)


def test_a_bad_line_names_its_number() -> None:
    decoder = WatchDecoder()
    with pytest.raises(WatchDecodeError, match="watch line 2"):
        decoder.feed(line("ADDED", pod("a", "1")) + b'{"type": 5}\n')


def test_blank_lines_and_unknown_types_pass() -> None:
    data = b"\n\r\n" + line("SOMETHING", {"x": 1}) + line("ADDED", pod("b", "2"))
    events = WatchDecoder().feed(data)
    assert [e.type for e in events] == ["SOMETHING", "ADDED"]


def test_a_body_cut_inside_a_line_is_a_broken_stream() -> None:
    decoder = WatchDecoder()
    decoder.feed(line("ADDED", pod("a", "1"))[:20])
    assert decoder.pending_bytes == 20
    with pytest.raises(KubeConnectionError, match="inside a line"):
        decoder.end_of_stream()


def test_list_page_splices_the_type_into_typed_items() -> None:
    item = pod("a", "5")
    del item["apiVersion"], item["kind"]
    body = json.dumps(
        {
            "kind": "PodList",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": "99", "continue": "tok", "remainingItemCount": 3},
            "items": [item, pod("b", "6")],
        }
    ).encode()
    page = decode_list_page(body, api_version="v1", kind="Pod")
    assert (page.resource_version, page.continue_token, page.remaining_item_count) == (
        "99",
        "tok",
        3,
    )
    assert [json.loads(i.object) for i in page.items] == [pod("a", "5"), pod("b", "6")]
    assert page.items[0].name == "a"
    assert page.items[1].resource_version == "6"
    empty = decode_list_page(
        b'{"metadata":{"resourceVersion":"1"},"items":null}', api_version="v1", kind="Pod"
    )
    assert empty.items == []
    assert empty.continue_token == ""


def test_list_page_errors_say_where() -> None:
    with pytest.raises(WatchDecodeError, match="Pod list item 1"):
        decode_list_page(b'{"items":[{},5]}', api_version="v1", kind="Pod")
    with pytest.raises(WatchDecodeError, match="Pod list page"):
        decode_list_page(b"<html>", api_version="v1", kind="Pod")


def test_decode_status_tolerates_non_status_bodies() -> None:
    assert decode_status(b"<html>oops</html>") is None
    status = decode_status(b'{"kind":"Status","code":403,"reason":"Forbidden","message":"no"}')
    assert status is not None
    assert status.code == 403


def test_the_fast_and_general_paths_agree() -> None:
    shapes = [
        line("ADDED", pod("a", "1")),
        spaced("ADDED", pod("a", "1")),
        b'{"object":' + json.dumps(pod("a", "1")).encode() + b',"type":"ADDED"}\n',
        line("ADDED", pod("a", "1"))[:-2] + b',"extra":1}\n',
    ]
    results = [WatchDecoder().feed(shape) for shape in shapes]
    for got in results:
        assert [(e.type, e.name, e.resource_version) for e in got] == [("ADDED", "a", "1")]
        assert json.loads(got[0].object) == pod("a", "1")


def test_managed_fields_are_stripped_while_decoding_when_asked() -> None:
    managed = pod("a", "1")
    meta = managed["metadata"]
    assert isinstance(meta, dict)
    meta["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
    for data in (line("MODIFIED", managed), spaced("MODIFIED", managed)):
        kept = WatchDecoder().feed(data)[0].object
        assert b"managedFields" in kept
        stripped = WatchDecoder(strip_managed_fields=True).feed(data)[0].object
        assert json.loads(stripped) == pod("a", "1")
    item = dict(managed)
    del item["kind"], item["apiVersion"]
    body = json.dumps({"metadata": {}, "items": [item]}).encode()
    page = decode_list_page(body, api_version="v1", kind="Pod", strip_managed_fields=True)
    assert json.loads(page.items[0].object) == pod("a", "1")
