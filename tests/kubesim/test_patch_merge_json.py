"""JSON merge patch (RFC 7386) and JSON patch (RFC 6902) as kubesim applies them."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubesim._errors import ApiError, PatchError
from kubesim._patch import (
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
    parse_pointer,
)

# --- merge patch ---------------------------------------------------------------------------

# RFC 7386 appendix A, the cases with an object target.
RFC7386_CASES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
    (["a", "b"], {"a": "b"}, {"a": "b"}),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"a": "b"}, ["c"], ["c"]),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC7386_CASES)
def test_merge_patch_rfc7386_examples(target: Any, patch: Any, expected: Any) -> None:
    assert apply_merge_patch(target, patch) == expected


def test_merge_patch_leaves_inputs_alone_and_shares_nothing() -> None:
    obj = {"metadata": {"labels": {"a": "1"}}, "spec": {"list": [{"x": 1}]}}
    patch = {"metadata": {"labels": {"b": "2"}}, "data": {"k": [1, 2]}}
    before_obj, before_patch = copy.deepcopy(obj), copy.deepcopy(patch)
    result = apply_merge_patch(obj, patch)
    assert obj == before_obj
    assert patch == before_patch
    result["spec"]["list"][0]["x"] = 99
    result["data"]["k"].append(3)
    assert obj == before_obj
    assert patch == before_patch


json_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)
no_null_values = st.recursive(
    st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=12,
)


def make_merge_patch(source: Any, target: Any) -> Any:
    """The merge patch that turns source into target (as kubectl computes it)."""
    if not isinstance(source, dict) or not isinstance(target, dict):
        return target
    patch: dict[str, Any] = {key: None for key in source if key not in target}
    for key, value in target.items():
        if key not in source:
            patch[key] = value
        elif source[key] != value or type(source[key]) is not type(value):
            patch[key] = make_merge_patch(source[key], value)
    return patch


@given(st.dictionaries(st.text(max_size=3), json_values, max_size=4),
       st.dictionaries(st.text(max_size=3), no_null_values, max_size=4))  # fmt: skip
def test_merge_patch_of_a_diff_reproduces_the_target(source: Any, target: Any) -> None:
    # Targets hold no nulls: RFC 7386 cannot express a null value (null means delete).
    assert apply_merge_patch(source, make_merge_patch(source, target)) == target


@given(st.dictionaries(st.text(max_size=3), json_values, max_size=4), json_values)
def test_merge_patch_is_idempotent(source: Any, patch: Any) -> None:
    once = apply_merge_patch(source, patch)
    assert apply_merge_patch(once, patch) == once


@given(st.dictionaries(st.text(max_size=3), no_null_values, max_size=4))
def test_empty_merge_patch_changes_nothing(source: Any) -> None:
    assert apply_merge_patch(source, {}) == source


# --- JSON pointers ---------------------------------------------------------------------------


def test_pointer_escapes() -> None:
    assert parse_pointer("") == []
    assert parse_pointer("/") == [""]
    assert parse_pointer("/a~1b/m~0n/~01") == ["a/b", "m~n", "~1"]
    with pytest.raises(ValueError, match="must be empty or start with '/'"):
        parse_pointer("a/b")
    with pytest.raises(ValueError, match="'~' must be followed by 0 or 1"):
        parse_pointer("/a~2")


# --- JSON patch ----------------------------------------------------------------------------

DOC = {"foo": "bar", "list": [1, 2, 3], "obj": {"a": {"b": 1}}}


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        ([{"op": "add", "path": "/baz", "value": "qux"}], {**DOC, "baz": "qux"}),
        ([{"op": "add", "path": "/list/1", "value": 9}], {**DOC, "list": [1, 9, 2, 3]}),
        ([{"op": "add", "path": "/list/-", "value": 9}], {**DOC, "list": [1, 2, 3, 9]}),
        ([{"op": "add", "path": "/list/3", "value": 9}], {**DOC, "list": [1, 2, 3, 9]}),
        ([{"op": "remove", "path": "/list/0"}], {**DOC, "list": [2, 3]}),
        ([{"op": "replace", "path": "/foo", "value": 1}], {**DOC, "foo": 1}),
        ([{"op": "move", "path": "/x", "from": "/obj/a"}], {**DOC, "obj": {}, "x": {"b": 1}}),
        ([{"op": "move", "path": "/list/0", "from": "/list/2"}], {**DOC, "list": [3, 1, 2]}),
        ([{"op": "move", "path": "/obj", "from": "/obj"}], DOC),
        ([{"op": "copy", "path": "/c", "from": "/obj"}], {**DOC, "c": {"a": {"b": 1}}}),
        ([{"op": "test", "path": "/obj", "value": {"a": {"b": 1.0}}}], DOC),
        ([{"op": "add", "path": "", "value": {"new": 1}}], {"new": 1}),
        ([{"op": "replace", "path": "", "value": {"new": 1}}], {"new": 1}),
        ([], DOC),
    ],
)
def test_json_patch_operations(ops: list[Any], expected: Any) -> None:
    before = copy.deepcopy(DOC)
    assert apply_json_patch(DOC, ops) == expected
    assert before == DOC


def test_json_patch_keys_with_slash_and_tilde() -> None:
    obj = {"metadata": {"labels": {"app.kubernetes.io/name": "x", "a~b": "y"}}}
    ops = [
        {"op": "replace", "path": "/metadata/labels/app.kubernetes.io~1name", "value": "z"},
        {"op": "remove", "path": "/metadata/labels/a~0b"},
    ]
    assert apply_json_patch(obj, ops) == {"metadata": {"labels": {"app.kubernetes.io/name": "z"}}}


def test_copy_is_a_copy_not_an_alias() -> None:
    ops = [
        {"op": "copy", "from": "/obj", "path": "/c"},
        {"op": "replace", "path": "/c/a/b", "value": 2},
    ]
    result = apply_json_patch(DOC, ops)
    assert result["obj"] == {"a": {"b": 1}}
    assert result["c"] == {"a": {"b": 2}}


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [{"op": "replace", "path": "/foo", "value": 1},
             {"op": "test", "path": "/foo", "value": 2}],
            "operation 1 (test '/foo') failed: test failed: the value is 1, not 2",
        ),
        ([{"op": "test", "path": "/list/0", "value": True}], "operation 0 (test '/list/0')"),
        ([{"op": "remove", "path": "/nope"}], "operation 0 (remove '/nope') failed: "
         "the key 'nope' does not exist"),
        ([{"op": "replace", "path": "/nope", "value": 1}], "the key 'nope' does not exist"),
        ([{"op": "add", "path": "/a/b", "value": 1}], "'/a' does not exist"),
        ([{"op": "add", "path": "/list/5", "value": 1}], "array index 5 is out of range"),
        ([{"op": "add", "path": "/list/01", "value": 1}], "'01' is not an array index"),
        ([{"op": "remove", "path": "/list/-"}], "'-' is not an array index"),
        ([{"op": "add", "path": "/foo/x", "value": 1}], "the parent '/foo' is a string"),
        ([{"op": "move", "from": "/obj", "path": "/obj/a/c"}], "into its own child"),
        ([{"op": "copy", "from": "/missing", "path": "/x"}], "'/missing' does not exist"),
        ([{"op": "remove", "path": ""}], "cannot remove the whole document"),
        ([{"op": "replace", "path": "", "value": [1]}], "result must be a JSON object"),
    ],
)  # fmt: skip
def test_json_patch_failures_name_the_operation(ops: list[Any], message: str) -> None:
    with pytest.raises(PatchError) as info:
        apply_json_patch(DOC, ops)
    assert message in info.value.message
    assert info.value.code == 422


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"op": "add"}, "must be a JSON array of operations, got object"),
        (["add"], "operation 0: must be a JSON object, got string"),
        ([{"op": "frobnicate", "path": "/a"}], "unknown op 'frobnicate'"),
        ([{"op": "add", "value": 1}], "operation 0 (add): 'path' must be a string"),
        ([{"op": "add", "path": "/a"}], "operation 0 (add '/a'): missing 'value'"),
        ([{"op": "move", "path": "/a"}], "operation 0 (move): 'from' must be a string"),
        ([{"op": "remove", "path": "a"}], "must be empty or start with '/'"),
    ],
)
def test_malformed_json_patch_is_a_bad_request(ops: Any, message: str) -> None:
    with pytest.raises(PatchError) as info:
        apply_json_patch(DOC, ops)
    assert message in info.value.message
    assert info.value.code == 400
    assert info.value.status()["reason"] == "BadRequest"


def test_a_failed_patch_changes_nothing() -> None:
    before = copy.deepcopy(DOC)
    with pytest.raises(ApiError):
        apply_json_patch(DOC, [{"op": "remove", "path": "/foo"}, {"op": "remove", "path": "/x"}])
    assert before == DOC


@given(st.dictionaries(st.text(max_size=3), json_values, min_size=1, max_size=4), st.data())
def test_json_patch_laws(doc: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(doc)))
    pointer = "/" + key.replace("~", "~0").replace("/", "~1")
    value = doc[key]
    # test succeeds on the value that is there, and leaves the document unchanged
    assert apply_json_patch(doc, [{"op": "test", "path": pointer, "value": value}]) == doc
    # copy then test finds an equal value at the destination
    copied = apply_json_patch(doc, [{"op": "copy", "from": pointer, "path": "/~0copy"}])
    assert copied["~copy"] == value
    # move out and back is the identity on the content
    moved = apply_json_patch(
        doc,
        [{"op": "move", "from": pointer, "path": "/~1tmp"},
         {"op": "move", "from": "/~1tmp", "path": pointer}],
    )  # fmt: skip
    assert moved == doc
    # remove then add restores it
    restored = apply_json_patch(
        doc, [{"op": "remove", "path": pointer}, {"op": "add", "path": pointer, "value": value}]
    )
    assert restored == doc


def test_json_patch_bounds() -> None:
    with pytest.raises(PatchError) as info:
        apply_json_patch({}, [{"op": "test", "path": "", "value": {}}] * 10_001)
    assert info.value.code == 413
    assert info.value.status()["reason"] == "RequestEntityTooLarge"
    assert "maximum operations in a JSON patch is 10000, got 10001" in info.value.message
    # copies of copies double the document each time: stopped once they add over 9 MiB
    doubling = [{"op": "add", "path": "/a", "value": "x" * 1024}] + [
        {"op": "copy", "from": "", "path": f"/c{i}"} for i in range(20)
    ]
    with pytest.raises(PatchError, match="accumulated size of copies") as info:
        apply_json_patch({}, doubling)
    assert info.value.code == 422


def test_patches_nested_too_deeply_are_a_clear_400() -> None:
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(5000):
        deep = {"a": deep}
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: apply_merge_patch({}, deep), "the merge patch or the object"),
        (lambda: apply_json_patch({}, [{"op": "add", "path": "/x", "value": deep}]),
         "the JSON patch or the object"),
        (lambda: apply_strategic_merge_patch({}, deep, "Pod"),
         "the strategic merge patch or the object"),
    ]  # fmt: skip
    for apply, message in cases:
        with pytest.raises(PatchError, match=message + " is nested too deeply") as info:
            apply()
        assert info.value.code == 400
