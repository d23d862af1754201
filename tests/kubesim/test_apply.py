"""Server-side apply and managedFields bookkeeping (FieldsV1), as pure functions."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubesim._apply import server_side_apply, update_managed_fields
from kubesim._errors import ApiError, ApplyConflict, InvalidObject
from kubesim._fieldpath import (
    describe_path,
    field_values,
    from_fields_v1,
    to_fields_v1,
)

T0, T1, T2 = "2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z", "2026-01-01T00:02:00Z"


def config(replicas: int | None = 3, image: str = "nginx:1", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": image, "ports": [
                {"containerPort": 80}]}]},
        },
    }  # fmt: skip
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", **labels}},
        "spec": spec,
    }


def entry(obj: dict[str, Any], manager: str, operation: str = "Apply") -> dict[str, Any]:
    found: list[dict[str, Any]] = [
        e
        for e in obj["metadata"]["managedFields"]
        if e["manager"] == manager and e["operation"] == operation
    ]
    assert len(found) == 1, obj["metadata"]["managedFields"]
    return found[0]


def test_first_apply_creates_and_records_real_fieldsv1() -> None:
    obj = server_side_apply(None, config(), manager="kubectl", force=False, now=T0)
    assert obj["spec"]["replicas"] == 3
    (mf,) = obj["metadata"]["managedFields"]
    assert mf == {
        "manager": "kubectl",
        "operation": "Apply",
        "apiVersion": "apps/v1",
        "time": T0,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:containers": {
                            'k:{"name":"app"}': {
                                ".": {},
                                "f:image": {},
                                "f:name": {},
                                "f:ports": {
                                    'k:{"containerPort":80,"protocol":"TCP"}': {
                                        ".": {},
                                        "f:containerPort": {},
                                    }
                                },
                            }
                        }
                    },
                },
            },
        },
    }


def test_reapply_is_stable_and_leaves_the_input_alone() -> None:
    applied = config()
    frozen = copy.deepcopy(applied)
    first = server_side_apply(None, applied, manager="kubectl", force=False, now=T0)
    again = server_side_apply(first, applied, manager="kubectl", force=False, now=T1)
    assert applied == frozen
    assert {k: v for k, v in again.items() if k != "metadata"} == {
        k: v for k, v in first.items() if k != "metadata"
    }
    assert entry(again, "kubectl")["time"] == T1
    assert len(again["metadata"]["managedFields"]) == 1


def test_conflict_with_an_updater_and_the_real_message() -> None:
    live = server_side_apply(None, config(), manager="kubectl", force=False, now=T0)
    scaled = copy.deepcopy(live)
    scaled["spec"]["replicas"] = 5
    scaled["metadata"]["managedFields"] = update_managed_fields(
        live, scaled, manager="kube-controller-manager", now=T1
    )
    # the scaler took .spec.replicas from kubectl
    assert "f:replicas" not in entry(scaled, "kubectl")["fieldsV1"]["f:spec"]
    assert entry(scaled, "kube-controller-manager", "Update")["fieldsV1"] == {
        "f:spec": {"f:replicas": {}}
    }
    # a second applier setting replicas to another value conflicts with the updater
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(scaled, config(replicas=7), manager="ci", force=False, now=T2)
    err = info.value
    assert err.code == 409
    assert err.conflicts == [("kube-controller-manager", ".spec.replicas")]
    assert err.message == (
        'Apply failed with 1 conflict: conflict with "kube-controller-manager" using apps/v1 '
        f"at {T1}: .spec.replicas"
    )
    status = err.status()
    assert status["reason"] == "Conflict"
    assert status["code"] == 409
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": f'conflict with "kube-controller-manager" using apps/v1 at {T1}',
            "field": ".spec.replicas",
        }
    ]


def test_same_value_is_shared_ownership_not_a_conflict() -> None:
    live = server_side_apply(None, config(), manager="a", force=False, now=T0)
    both = server_side_apply(live, config(), manager="b", force=False, now=T1)
    assert entry(both, "a")["fieldsV1"] == entry(both, "b")["fieldsV1"]


def test_several_conflicts_are_grouped_by_manager() -> None:
    live = server_side_apply(None, config(), manager="a", force=False, now=T0)
    with pytest.raises(ApplyConflict) as info:
        server_side_apply(live, config(replicas=1, image="x"), manager="b", force=False, now=T1)
    assert info.value.message == (
        'Apply failed with 2 conflicts: conflicts with "a" using apps/v1:\n'
        "- .spec.replicas\n"
        '- .spec.template.spec.containers[name="app"].image'
    )


def test_force_moves_ownership() -> None:
    live = server_side_apply(None, config(), manager="a", force=False, now=T0)
    forced = server_side_apply(live, config(replicas=1), manager="b", force=True, now=T1)
    assert forced["spec"]["replicas"] == 1
    assert "f:replicas" not in entry(forced, "a")["fieldsV1"]["f:spec"]
    assert "f:replicas" in entry(forced, "b")["fieldsV1"]["f:spec"]
    # a now applying its old value conflicts with b
    with pytest.raises(ApplyConflict, match=r'conflict with "b" using apps/v1: \.spec\.replicas'):
        server_side_apply(forced, config(), manager="a", force=False, now=T2)


def test_fields_no_longer_applied_are_removed_unless_someone_else_owns_them() -> None:
    live = server_side_apply(None, config(tier="front"), manager="a", force=False, now=T0)
    shared = server_side_apply(live, config(tier="front"), manager="b", force=False, now=T0)
    # a drops the label and replicas; b still owns them, so they stay
    dropped = server_side_apply(shared, config(replicas=None), manager="a", force=False, now=T1)
    assert dropped["metadata"]["labels"] == {"app": "web", "tier": "front"}
    assert dropped["spec"]["replicas"] == 3
    # only a owned them: they go
    alone = server_side_apply(live, config(replicas=None), manager="a", force=False, now=T1)
    assert alone["metadata"]["labels"] == {"app": "web"}
    assert "replicas" not in alone["spec"]


def test_associative_lists_merge_by_key_and_items_leave_with_their_owner() -> None:
    base = config()
    live = server_side_apply(None, base, manager="a", force=False, now=T0)
    sidecar = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"template": {"spec": {"containers": [{"name": "proxy", "image": "envoy"}]}}},
    }
    both = server_side_apply(live, sidecar, manager="mesh", force=False, now=T1)
    names = [c["name"] for c in both["spec"]["template"]["spec"]["containers"]]
    assert names == ["app", "proxy"]
    # the mesh stops applying its container: it is removed, the app's stays
    bare = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"}}
    gone = server_side_apply(both, bare, manager="mesh", force=False, now=T2)
    assert [c["name"] for c in gone["spec"]["template"]["spec"]["containers"]] == ["app"]
    assert all(e["manager"] != "mesh" for e in gone["metadata"]["managedFields"])


def test_finalizers_are_a_set() -> None:
    a = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": ["x"]}}
    b = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "finalizers": ["y"]}}
    live = server_side_apply(None, a, manager="a", force=False, now=T0)
    both = server_side_apply(live, b, manager="b", force=False, now=T1)
    assert both["metadata"]["finalizers"] == ["x", "y"]
    assert entry(both, "b")["fieldsV1"] == {"f:metadata": {"f:finalizers": {'v:"y"': {}}}}
    dropped = server_side_apply(both, {**b, "metadata": {"name": "c"}}, manager="b", force=False,
                                now=T2)  # fmt: skip
    assert dropped["metadata"]["finalizers"] == ["x"]


def test_apply_to_an_object_without_managed_fields_conflicts_with_before_first_apply() -> None:
    live = config()
    live["metadata"]["uid"] = "u1"
    with pytest.raises(ApplyConflict, match='conflict with "before-first-apply"'):
        server_side_apply(live, config(replicas=9), manager="a", force=False, now=T0)
    forced = server_side_apply(live, config(replicas=9), manager="a", force=True, now=T0)
    assert forced["metadata"]["uid"] == "u1"
    assert entry(forced, "before-first-apply", "Update")


def test_server_set_metadata_is_never_applied() -> None:
    live = server_side_apply(None, config(), manager="a", force=False, now=T0)
    live["metadata"].update(uid="u1", resourceVersion="10", creationTimestamp=T0)
    applied = config()
    applied["metadata"].update(uid="evil", resourceVersion="1", generation=99)
    result = server_side_apply(live, applied, manager="a", force=False, now=T1)
    assert result["metadata"]["uid"] == "u1"
    assert result["metadata"]["resourceVersion"] == "10"
    assert "generation" not in result["metadata"]


def test_apply_needs_a_field_manager() -> None:
    with pytest.raises(InvalidObject) as info:
        server_side_apply(None, config(), manager="", force=False, now=T0)
    assert info.value.code == 400
    assert "fieldManager is required" in info.value.message
    assert isinstance(info.value, ApiError)


def test_update_managed_fields_on_create_then_update() -> None:
    created = config()
    mf = update_managed_fields(None, created, manager="kubectl-create", now=T0)
    assert len(mf) == 1
    assert mf[0]["operation"] == "Update"
    assert mf[0]["fieldsV1"]["f:spec"]["f:replicas"] == {}
    created["metadata"]["managedFields"] = mf
    edited = copy.deepcopy(created)
    edited["metadata"]["labels"]["tier"] = "db"
    del edited["spec"]["replicas"]
    mf2 = update_managed_fields(created, edited, manager="kubectl-edit", now=T1)
    owners = {e["manager"]: e["fieldsV1"] for e in mf2}
    assert owners["kubectl-edit"] == {"f:metadata": {"f:labels": {"f:tier": {}}}}
    assert "f:replicas" not in owners["kubectl-create"]["f:spec"]
    assert mf2[0] is mf[0] or mf2[0]["time"] == T0  # untouched entries keep their time


def test_update_that_changes_nothing_keeps_entries() -> None:
    obj = config()
    obj["metadata"]["managedFields"] = update_managed_fields(None, obj, manager="a", now=T0)
    assert (
        update_managed_fields(obj, copy.deepcopy(obj), manager="b", now=T1)
        == obj["metadata"]["managedFields"]
    )


def test_describe_path() -> None:
    path = ("f:spec", "f:ports", 'k:{"port":80,"protocol":"TCP"}', "f:name")
    assert describe_path(path) == '.spec.ports[port=80,protocol="TCP"].name'
    assert describe_path(("f:metadata", "f:finalizers", 'v:"x"')) == '.metadata.finalizers[="x"]'


label_maps = st.dictionaries(
    st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["1", "2"]), max_size=4
)


@given(label_maps, label_maps)
def test_fieldsv1_round_trips(labels: dict[str, str], annotations: dict[str, str]) -> None:
    obj = {"kind": "Pod", "metadata": {"labels": labels, "annotations": annotations},
           "spec": {"containers": [{"name": "x", "image": "y"}]}}  # fmt: skip
    paths = set(field_values(obj, "Pod"))
    assert from_fields_v1(to_fields_v1(paths)) == paths


@given(label_maps, label_maps)
def test_two_appliers_own_their_labels(mine: dict[str, str], theirs: dict[str, str]) -> None:
    def cm(labels: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "c", "labels": labels},
        }

    live = server_side_apply(None, cm(theirs), manager="them", force=False, now=T0)
    # a conflict is exactly a key both set to different values
    clashing = {k for k in mine if k in theirs and mine[k] != theirs[k]}
    if clashing:
        with pytest.raises(ApplyConflict) as info:
            server_side_apply(live, cm(mine), manager="me", force=False, now=T1)
        assert {p for _, p in info.value.conflicts} == {f".metadata.labels.{k}" for k in clashing}
        return
    result = server_side_apply(live, cm(mine), manager="me", force=False, now=T1)
    assert result["metadata"].get("labels", {}) == {**theirs, **mine}


def model_update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str
) -> dict[tuple[str, str], set[Any]]:
    """The set-based reference of update_managed_fields: who owns which paths afterwards."""
    owners: dict[tuple[str, str], set[Any]] = {}
    if old is not None:
        for e in old["metadata"].get("managedFields", []):
            owners[(e["manager"], e["operation"])] = from_fields_v1(e["fieldsV1"])
    new_values = field_values(new, new["kind"])
    old_values = field_values(old, old["kind"]) if old is not None else {}
    changed = {p for p, v in new_values.items() if p not in old_values or old_values[p] != v}
    removed = set(old_values) - set(new_values)
    for key in owners:
        owners[key] -= removed if key == (manager, "Update") else changed | removed
    if changed:
        owners[(manager, "Update")] = owners.get((manager, "Update"), set()) | changed
    return {k: v for k, v in owners.items() if v}


small_maps = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["1", "2"]))
env_lists = st.lists(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["X", "Y", "Z"]), "value": st.sampled_from(["1", "2"])}
    ),
    max_size=3,
    unique_by=lambda e: e["name"],
)


def pod(labels: dict[str, str], env: list[dict[str, str]], image: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "labels": labels},
        "spec": {"containers": [{"name": "c", "image": image, "env": env}]},
    }


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["m1", "m2", "m3"]), small_maps, env_lists, st.sampled_from(["i", "j"])
        ),
        min_size=1,
        max_size=5,
    )
)
def test_update_managed_fields_matches_the_set_model(
    writes: list[tuple[str, dict[str, str], list[dict[str, str]], str]],
) -> None:
    current: dict[str, Any] | None = None
    for manager, labels, env, image in writes:
        new = pod(labels, env, image)
        expected = model_update(current, new, manager)
        new["metadata"]["managedFields"] = update_managed_fields(
            current, new, manager=manager, now=T0
        )
        got = {
            (e["manager"], e["operation"]): from_fields_v1(e["fieldsV1"])
            for e in new["metadata"]["managedFields"]
        }
        assert got == expected
        current = new


def test_reset_fields_are_neither_merged_nor_owned() -> None:
    live = server_side_apply(None, config(), manager="a", force=False, now=T0)
    live["status"] = {"replicas": 1}
    applied = {**config(), "status": {"replicas": 99}}
    result = server_side_apply(
        live, applied, manager="a", force=False, now=T1, reset_fields=("status",)
    )
    assert result["status"] == {"replicas": 1}
    assert "f:status" not in entry(result, "a")["fieldsV1"]


def owned_paths_exist(obj: dict[str, Any]) -> None:
    # a path is there as a leaf or as a node above a leaf (an owned map that gained keys)
    present = set(field_values(obj, obj["kind"]))
    present |= {path[:i] for path in present for i in range(1, len(path))}
    for e in obj["metadata"]["managedFields"]:
        missing = from_fields_v1(e["fieldsV1"]) - present
        assert not missing, (e["manager"], missing)


configs = st.tuples(
    st.sampled_from(["m1", "m2", "m3"]),
    small_maps,
    env_lists,
    st.sampled_from(["i", "j"]),
    st.booleans(),
)


@given(st.lists(configs, min_size=1, max_size=6))
def test_apply_sequences_keep_ownership_consistent(
    applies: list[tuple[str, dict[str, str], list[dict[str, str]], str, bool]],
) -> None:
    live: dict[str, Any] | None = None
    for manager, labels, env, image, force in applies:
        config = pod(labels, env, image)
        try:
            result = server_side_apply(live, config, manager=manager, force=force, now=T0)
        except ApplyConflict:
            assert not force
            continue
        # what was applied is there, and the manager owns exactly what it applied
        assert result["metadata"].get("labels", {}).items() >= labels.items()
        container = result["spec"]["containers"][0]
        assert container["image"] == image
        assert {e["name"]: e.get("value") for e in container.get("env", [])}.items() >= {
            e["name"]: e["value"] for e in env
        }.items()
        mine = from_fields_v1(entry(result, manager)["fieldsV1"])
        assert mine == set(field_values(config, "Pod"))
        owned_paths_exist(result)
        live = result


def test_subresource_writes_get_their_own_entry() -> None:
    obj = config()
    obj["metadata"]["managedFields"] = update_managed_fields(None, obj, manager="kcm", now=T0)
    scaled = copy.deepcopy(obj)
    scaled["spec"]["replicas"] = 9
    entries = update_managed_fields(obj, scaled, manager="kcm", now=T1, subresource="scale")
    by_key = {(e["manager"], e.get("subresource", "")): e for e in entries}
    assert by_key[("kcm", "scale")]["fieldsV1"] == {"f:spec": {"f:replicas": {}}}
    assert by_key[("kcm", "scale")]["subresource"] == "scale"
    assert "f:replicas" not in by_key[("kcm", "")]["fieldsV1"]["f:spec"]


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(depth):
        value = {"a": value}
    return value


def test_documents_nested_too_deeply_are_a_clear_400() -> None:
    # A depth the JSON decoder accepts (under ~1000 levels) is walked without trouble ...
    ok = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "x": nested(400)}
    result = server_side_apply(None, ok, manager="m", force=False, now=T0)
    assert update_managed_fields(result, ok, manager="n", now=T1)
    # ... and one beyond Python's recursion limit is refused with a message, not a crash
    deep = {**ok, "x": nested(5000)}
    with pytest.raises(
        ApiError, match="the applied configuration or the object is nested too deeply"
    ):
        server_side_apply(None, deep, manager="m", force=False, now=T0)
    with pytest.raises(ApiError, match="the object is nested too deeply") as info:
        update_managed_fields(None, deep, manager="m", now=T0)
    assert info.value.code == 400


def test_label_selectors_are_owned_as_one_value() -> None:
    policy: dict[str, Any] = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "np"},
        "spec": {"podSelector": {"matchLabels": {"app": "web"}}},
    }
    live = server_side_apply(None, policy, manager="a", force=False, now=T0)
    assert entry(live, "a")["fieldsV1"] == {"f:spec": {"f:podSelector": {}}}
    changed = copy.deepcopy(policy)
    changed["spec"]["podSelector"] = {"matchLabels": {"tier": "db"}}
    result = server_side_apply(live, changed, manager="a", force=False, now=T1)
    # atomic: the new selector replaces the old one instead of merging into it
    assert result["spec"]["podSelector"] == {"matchLabels": {"tier": "db"}}
