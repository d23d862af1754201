"""Strategic merge patch: list merge by key for the common kinds, and the $ directives."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubesim._errors import PatchError
from kubesim._patch import apply_merge_patch, apply_strategic_merge_patch


def deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}, "finalizers": ["a", "b"]},
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "nginx:1.25",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                            "ports": [{"containerPort": 80}, {"containerPort": 443}],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                            "args": ["--x", "--y"],
                        },
                        {"name": "sidecar", "image": "envoy:1"},
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "tolerations": [{"key": "k1", "operator": "Exists"}],
                },
            },
        },
    }


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def test_containers_merge_by_name() -> None:
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"}]}}}}
    original = deployment()
    result = apply_strategic_merge_patch(original, patch, "Deployment")
    containers = pod_spec(result)["containers"]
    assert [c["name"] for c in containers] == ["app", "sidecar"]
    assert containers[0]["image"] == "nginx:2"
    assert containers[0]["env"] == pod_spec(deployment())["containers"][0]["env"]
    assert original == deployment()


def test_new_items_are_appended_and_nested_lists_merge() -> None:
    patch = {"spec": {"template": {"spec": {
        "containers": [
            {"name": "app", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}],
             "ports": [{"containerPort": 80, "name": "http"}],
             "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
            {"name": "new", "image": "busybox"},
        ],
        "volumes": [{"name": "cache", "emptyDir": {}}],
    }}}}  # fmt: skip
    spec = pod_spec(apply_strategic_merge_patch(deployment(), patch, "Deployment"))
    app = spec["containers"][0]
    assert app["env"] == [
        {"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}
    ]  # fmt: skip
    assert app["ports"] == [{"containerPort": 80, "name": "http"}, {"containerPort": 443}]
    assert [m["mountPath"] for m in app["volumeMounts"]] == ["/data", "/cache"]
    assert [c["name"] for c in spec["containers"]] == ["app", "sidecar", "new"]
    assert [v["name"] for v in spec["volumes"]] == ["data", "cache"]


def test_lists_without_a_strategy_are_replaced() -> None:
    patch = {"spec": {"template": {"spec": {
        "containers": [{"name": "app", "args": ["--z"]}],
        "tolerations": [{"key": "k2", "operator": "Exists"}],
    }}}}  # fmt: skip
    spec = pod_spec(apply_strategic_merge_patch(deployment(), patch, "Deployment"))
    assert spec["containers"][0]["args"] == ["--z"]
    assert spec["tolerations"] == [{"key": "k2", "operator": "Exists"}]


def test_null_deletes_a_key_and_patch_delete_removes_an_item() -> None:
    patch = {
        "metadata": {"labels": {"app": None, "tier": "front"}},
        "spec": {"template": {"spec": {"containers": [
            {"name": "sidecar", "$patch": "delete"},
            {"name": "app", "env": [{"name": "A", "$patch": "delete"}], "args": None},
            {"name": "ghost", "$patch": "delete"},
        ]}}},
    }  # fmt: skip
    result = apply_strategic_merge_patch(deployment(), patch, "Deployment")
    assert result["metadata"]["labels"] == {"tier": "front"}
    containers = pod_spec(result)["containers"]
    assert [c["name"] for c in containers] == ["app"]
    assert containers[0]["env"] == [{"name": "B", "value": "2"}]
    assert "args" not in containers[0]


def test_patch_replace_on_a_map_and_on_a_list() -> None:
    patch = {
        "metadata": {"labels": {"$patch": "replace", "only": "this"}},
        "spec": {"template": {"spec": {"containers": [
            {"$patch": "replace"}, {"name": "solo", "image": "x"},
        ]}}},
    }  # fmt: skip
    result = apply_strategic_merge_patch(deployment(), patch, "Deployment")
    assert result["metadata"]["labels"] == {"only": "this"}
    assert pod_spec(result)["containers"] == [{"name": "solo", "image": "x"}]


def test_patch_delete_on_a_map_removes_the_field() -> None:
    patch = {"spec": {"template": {"metadata": {"$patch": "delete"}}}}
    result = apply_strategic_merge_patch(deployment(), patch, "Deployment")
    assert "metadata" not in result["spec"]["template"]


def test_finalizers_merge_as_a_set_and_delete_from_primitive_list() -> None:
    patch = {"metadata": {"finalizers": ["b", "c"], "$deleteFromPrimitiveList/finalizers": ["a"]}}
    result = apply_strategic_merge_patch(deployment(), patch, "Deployment")
    assert result["metadata"]["finalizers"] == ["b", "c"]


def test_set_element_order_is_honoured() -> None:
    patch = {"spec": {"template": {"spec": {
        "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
        "containers": [{"name": "app", "image": "nginx:3"}],
    }}}}  # fmt: skip
    containers = pod_spec(apply_strategic_merge_patch(deployment(), patch, "Deployment"))[
        "containers"
    ]
    assert [c["name"] for c in containers] == ["sidecar", "app"]
    assert containers[1]["image"] == "nginx:3"
    order = {"metadata": {"$setElementOrder/finalizers": ["b", "a"]}}
    assert apply_strategic_merge_patch(deployment(), order, "Deployment")["metadata"][
        "finalizers"
    ] == ["b", "a"]


def test_retain_keys_drops_the_others() -> None:
    obj = {"kind": "Deployment", "spec": {"strategy": {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}  # fmt: skip
    patch = {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}
    result = apply_strategic_merge_patch(obj, patch, "Deployment")
    assert result["spec"]["strategy"] == {"type": "Recreate"}


def test_service_ports_merge_by_port_and_owner_references_by_uid() -> None:
    svc = {
        "metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]},
    }
    patch = {
        "metadata": {"ownerReferences": [{"uid": "2", "name": "bee"}]},
        "spec": {"ports": [{"port": 80, "targetPort": 9090}]},
    }
    result = apply_strategic_merge_patch(svc, patch, "Service")
    assert result["spec"]["ports"] == [{"port": 80, "targetPort": 9090}, {"port": 443}]
    assert result["metadata"]["ownerReferences"][1] == {"uid": "2", "name": "bee"}


def test_conditions_merge_by_type() -> None:
    pod = {"status": {"conditions": [{"type": "Ready", "status": "False"},
                                     {"type": "Initialized", "status": "True"}]}}  # fmt: skip
    patch = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    result = apply_strategic_merge_patch(pod, patch, "Pod")
    assert result["status"]["conditions"][0] == {"type": "Ready", "status": "True"}
    assert len(result["status"]["conditions"]) == 2


def test_configmap_data_merges_like_a_merge_patch() -> None:
    cm = {"data": {"a": "1", "b": "2"}}
    result = apply_strategic_merge_patch(cm, {"data": {"a": None, "c": "3"}}, "ConfigMap")
    assert result == {"data": {"b": "2", "c": "3"}}


def test_results_share_nothing_with_inputs() -> None:
    original = deployment()
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [
        {"name": "Z", "value": "z"}]}]}}}}  # fmt: skip
    frozen_patch = copy.deepcopy(patch)
    result = apply_strategic_merge_patch(original, patch, "Deployment")
    pod_spec(result)["containers"][0]["env"][0]["value"] = "changed"
    pod_spec(result)["containers"][1]["image"] = "changed"
    assert original == deployment()
    assert patch == frozen_patch


@pytest.mark.parametrize(
    ("patch", "code", "message"),
    [
        (["not", "a", "map"], 400, "must be a JSON object, got array"),
        ({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}, 422,
         "spec.template.spec.containers[0]: does not contain declared merge key: name"),
        ({"spec": {"$patch": "explode"}}, 422, "spec: unknown $patch directive 'explode'"),
        ({"spec": {"$frob": 1}}, 422, "spec: unknown directive '$frob'"),
        ({"$patch": "delete"}, 422, "cannot delete the whole object"),
        ({"spec": {"$retainKeys": "x"}}, 422, "$retainKeys must be a list"),
    ],
)  # fmt: skip
def test_bad_strategic_patches(patch: Any, code: int, message: str) -> None:
    with pytest.raises(PatchError) as info:
        apply_strategic_merge_patch(deployment(), patch, "Deployment")
    assert info.value.code == code
    assert message in info.value.message


def test_custom_resources_have_no_strategic_merge() -> None:
    with pytest.raises(PatchError) as info:
        apply_strategic_merge_patch({"spec": {}}, {"spec": {"a": 1}}, "CronTab")
    assert info.value.code == 415
    assert "application/merge-patch+json" in info.value.message


list_free_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda children: st.dictionaries(
        st.sampled_from(["a", "b", "c", "data"]), children, max_size=3
    ),
    max_leaves=10,
)
list_free_maps = st.dictionaries(
    st.sampled_from(["a", "b", "c", "data"]), list_free_values, max_size=3
)


@given(list_free_maps, list_free_maps)
def test_without_lists_or_directives_it_is_a_json_merge_patch(
    obj: dict[str, Any], patch: dict[str, Any]
) -> None:
    assert apply_strategic_merge_patch(obj, patch, "ConfigMap") == apply_merge_patch(obj, patch)


@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
    st.lists(st.sampled_from(["a", "b", "c", "d"]), unique=True),
)
def test_keyed_list_merge_keeps_every_name_once(before: list[str], patch: list[str]) -> None:
    obj = {"spec": {"containers": [{"name": n, "image": "old"} for n in before]}}
    body = {"spec": {"containers": [{"name": n, "image": "new"} for n in patch]}}
    merged = apply_strategic_merge_patch(obj, body, "Pod")["spec"]["containers"]
    assert [c["name"] for c in merged] == before + [n for n in patch if n not in before]
    assert all(c["image"] == ("new" if c["name"] in patch else "old") for c in merged)


def test_kubectl_rollout_undo_replaces_the_template() -> None:
    # kubectl rollout undo sends the old ReplicaSet's template with "$patch": "replace"
    old_template = {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx:1.24"}]}}  # fmt: skip
    patch = {"spec": {"template": {"$patch": "replace", **old_template}}}
    result = apply_strategic_merge_patch(deployment(), patch, "Deployment")
    assert result["spec"]["template"] == old_template
    assert result["spec"]["replicas"] == 2


def test_set_element_order_keeps_server_only_items_in_their_places() -> None:
    pod = {"spec": {"containers": [{"name": n, "image": "i"} for n in ("b", "x", "a")]}}
    patch = {"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
                      "containers": [{"name": "a", "image": "j"}]}}  # fmt: skip
    merged = apply_strategic_merge_patch(pod, patch, "Pod")["spec"]["containers"]
    # the apiserver's answer: x (server-only, at server position 1) goes before a (position 2)
    assert [c["name"] for c in merged] == ["x", "a", "b"]
    assert merged[1]["image"] == "j"
    # a new item in the order goes where the order puts it
    patch["spec"]["$setElementOrder/containers"] = [{"name": "n"}, {"name": "a"}, {"name": "b"}]
    patch["spec"]["containers"] = [{"name": "n", "image": "new"}]
    merged = apply_strategic_merge_patch(pod, patch, "Pod")["spec"]["containers"]
    assert [c["name"] for c in merged] == ["n", "x", "a", "b"]
