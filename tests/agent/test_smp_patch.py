"""The strategic merge patch, sans-I/O: reading merge keys from OpenAPI and kubectl's diff."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.operations import (
    InvalidOperation,
    PatchSchema,
    parse_v2,
    parse_v3,
    three_way_strategic_merge_patch,
)
from agent.operations._smp_schema import KindPatch


def _ref3(name: str) -> dict[str, Any]:
    return {"allOf": [{"$ref": f"#/components/schemas/{name}"}], "default": {}}


def _keyed(items: dict[str, Any], key: str, strategy: str = "merge") -> dict[str, Any]:
    return {
        "type": "array",
        "items": items,
        "x-kubernetes-patch-strategy": strategy,
        "x-kubernetes-patch-merge-key": key,
        # server-side apply's, which a strategic merge patch ignores
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": [key],
    }


# A group-version document shaped as the API server writes it, much reduced.
V3: dict[str, Any] = {
    "openapi": "3.0.0",
    "paths": {
        "/apis/apps/v1/namespaces/{namespace}/deployments/{name}": {
            "patch": {
                "x-kubernetes-group-version-kind": {
                    "group": "apps",
                    "version": "v1",
                    "kind": "Deployment",
                },
                "requestBody": {
                    "content": {
                        "application/merge-patch+json": {},
                        "application/strategic-merge-patch+json": {},
                    }
                },
            }
        },
        "/apis/apps/v1/namespaces/{namespace}/gadgets/{name}": {
            "patch": {
                "x-kubernetes-group-version-kind": {
                    "group": "apps",
                    "version": "v1",
                    "kind": "Gadget",
                },
                "requestBody": {"content": {"application/merge-patch+json": {}}},
            }
        },
    },
    "components": {
        "schemas": {
            "Deployment": {
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    {"group": "apps", "version": "v1", "kind": "Deployment"}
                ],
                "properties": {
                    "metadata": _ref3("ObjectMeta"),
                    "spec": _ref3("DeploymentSpec"),
                },
            },
            "Gadget": {
                "type": "object",
                "x-kubernetes-group-version-kind": [
                    {"group": "apps", "version": "v1", "kind": "Gadget"}
                ],
            },
            "ObjectMeta": {
                "type": "object",
                "properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "finalizers": {
                        "type": "array",
                        "items": {"type": "string"},
                        "x-kubernetes-patch-strategy": "merge",
                    },
                },
            },
            "DeploymentSpec": {
                "type": "object",
                "properties": {
                    "strategy": {**_ref3("Strategy"), "x-kubernetes-patch-strategy": "retainKeys"},
                    "template": {
                        "type": "object",
                        "properties": {"spec": _ref3("PodSpec")},
                    },
                    "tolerations": {
                        "type": "array",
                        "items": {"type": "object"},
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["key"],
                    },
                    "replaced": {
                        "type": "object",
                        "x-kubernetes-patch-strategy": "replace",
                        "properties": {"a": {"type": "string"}},
                    },
                },
            },
            "Strategy": {
                "type": "object",
                "properties": {"type": {"type": "string"}, "rollingUpdate": {"type": "object"}},
            },
            "PodSpec": {
                "type": "object",
                "properties": {
                    "containers": _keyed(_ref3("Container"), "name"),
                    "volumes": _keyed(_ref3("Volume"), "name", "merge,retainKeys"),
                },
            },
            "Container": {
                "type": "object",
                "properties": {
                    "env": _keyed(_ref3("EnvVar"), "name"),
                    "args": {"type": "array", "items": {"type": "string"}},
                },
            },
            "EnvVar": {"type": "object", "properties": {"name": {"type": "string"}}},
            "Volume": {"type": "object", "properties": {"name": {"type": "string"}}},
        }
    },
}
SCHEMA = parse_v3(V3)
ROOT = "Deployment"


def _patch(
    original: dict[str, Any] | None, modified: dict[str, Any], current: dict[str, Any]
) -> dict[str, Any]:
    return three_way_strategic_merge_patch(original, modified, current, SCHEMA, ROOT)


def _pod(**spec: Any) -> dict[str, Any]:
    return {"spec": {"template": {"spec": spec}}}


def test_the_document_says_which_kinds_take_a_strategic_patch_and_how_fields_merge() -> None:
    deployment = SCHEMA.kind("apps", "v1", "Deployment")
    gadget = SCHEMA.kind("apps", "v1", "Gadget")
    assert deployment == KindPatch("Deployment", strategic=True)
    assert gadget == KindPatch("Gadget", strategic=False)
    assert SCHEMA.kind("apps", "v1", "Missing") is None
    spec = SCHEMA.field("Deployment", "spec").node
    template = SCHEMA.field(spec, "template")  # an inline object, not a $ref
    containers = SCHEMA.field(SCHEMA.field(template.node, "spec").node, "containers")
    assert (containers.strategy, containers.merge_key, containers.node) == (
        "merge",
        "name",
        "Container",
    )
    volumes = SCHEMA.field("PodSpec", "volumes")
    assert (volumes.retain_keys, volumes.strategy) == (True, "merge")
    # The list type alone does not make a list merge (kubectl reads only the patch strategy).
    assert SCHEMA.field("DeploymentSpec", "tolerations").strategy == ""
    assert SCHEMA.field("Container", "unknown") == SCHEMA.field(None, "anything")


def test_v2_documents_name_definitions_and_consumes() -> None:
    v2 = {
        "swagger": "2.0",
        "paths": {
            "/api/v1/namespaces/{namespace}/services/{name}": {
                "patch": {
                    "x-kubernetes-group-version-kind": {
                        "group": "",
                        "version": "v1",
                        "kind": "Service",
                    },
                    "consumes": ["application/strategic-merge-patch+json"],
                }
            }
        },
        "definitions": {
            "io.k8s.api.core.v1.Service": {
                "x-kubernetes-group-version-kind": [
                    {"group": "", "version": "v1", "kind": "Service"}
                ],
                "properties": {"spec": {"$ref": "#/definitions/io.k8s.api.core.v1.ServiceSpec"}},
            },
            "io.k8s.api.core.v1.ServiceSpec": {
                "properties": {
                    "ports": {
                        "type": "array",
                        "items": {"$ref": "#/definitions/io.k8s.api.core.v1.ServicePort"},
                        "x-kubernetes-patch-strategy": "merge",
                        "x-kubernetes-patch-merge-key": "port",
                    }
                }
            },
            "io.k8s.api.core.v1.ServicePort": {"properties": {"port": {"type": "integer"}}},
        },
    }
    schema: PatchSchema = parse_v2(v2)
    service = schema.kind("", "v1", "Service")
    assert service == KindPatch("io.k8s.api.core.v1.Service", strategic=True)
    ports = schema.field(schema.field(service.root, "spec").node, "ports")
    assert (ports.merge_key, ports.node) == ("port", "io.k8s.api.core.v1.ServicePort")


def test_keyed_lists_keep_foreign_items_delete_ours_and_set_the_order() -> None:
    original = _pod(containers=[{"name": "web", "image": "1"}, {"name": "log", "image": "1"}])
    modified = _pod(containers=[{"name": "web", "image": "2"}])
    current = _pod(
        containers=[
            {"name": "web", "image": "1"},
            {"name": "sidecar", "image": "s"},
            {"name": "log", "image": "1"},
        ]
    )
    assert _patch(original, modified, current) == _pod(
        **{
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"name": "web", "image": "2"}, {"name": "log", "$patch": "delete"}],
        }
    )


def test_nested_keyed_lists_merge_item_by_item() -> None:
    applied = _pod(containers=[{"name": "web", "env": [{"name": "A", "value": "1"}]}])
    assert _patch(applied, applied, copy.deepcopy(applied)) == {}
    current = _pod(
        containers=[
            {"name": "web", "env": [{"name": "A", "value": "1"}, {"name": "F", "value": "x"}]}
        ]
    )
    # A foreign item makes the live order differ from ours, so kubectl sends the orders even
    # when nothing else changed (the API server then leaves the object as it was).
    assert _patch(applied, applied, current) == _pod(
        **{
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [{"name": "web", "$setElementOrder/env": [{"name": "A"}]}],
        }
    )
    modified = _pod(containers=[{"name": "web", "env": [{"name": "A", "value": "2"}]}])
    assert _patch(applied, modified, current) == _pod(
        **{
            "$setElementOrder/containers": [{"name": "web"}],
            "containers": [
                {
                    "name": "web",
                    "$setElementOrder/env": [{"name": "A"}],
                    "env": [{"name": "A", "value": "2"}],
                }
            ],
        }
    )


def test_merged_scalar_lists_delete_through_a_parallel_list() -> None:
    original = {"metadata": {"finalizers": ["a", "b"]}}
    modified = {"metadata": {"finalizers": ["a"]}}
    current = {"metadata": {"finalizers": ["a", "b", "theirs"]}}
    assert _patch(original, modified, current) == {
        "metadata": {
            "$deleteFromPrimitiveList/finalizers": ["b"],
            "$setElementOrder/finalizers": ["a"],
        }
    }


def test_retain_keys_on_a_map_and_on_keyed_list_items() -> None:
    original = {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"x": 1}}}}
    modified = {"spec": {"strategy": {"type": "Recreate"}}}
    assert _patch(original, modified, copy.deepcopy(original)) == {
        "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate", "rollingUpdate": None}}
    }
    volume = {"name": "v", "configMap": {"name": "c"}}
    switched = {"name": "v", "emptyDir": {}}
    assert _patch(_pod(volumes=[volume]), _pod(volumes=[switched]), _pod(volumes=[volume])) == (
        _pod(
            **{
                "$setElementOrder/volumes": [{"name": "v"}],
                "volumes": [
                    {
                        "$retainKeys": ["emptyDir", "name"],
                        "name": "v",
                        "emptyDir": {},
                        "configMap": None,
                    }
                ],
            }
        )
    )


def test_lists_without_a_strategy_and_replace_maps_are_sent_whole() -> None:
    current = {"spec": {"tolerations": [{"key": "a"}, {"key": "theirs"}], "replaced": {"a": "1"}}}
    modified = {"spec": {"tolerations": [{"key": "a"}], "replaced": {"b": "2"}}}
    assert _patch(None, modified, current) == {
        "spec": {"tolerations": [{"key": "a"}], "replaced": {"b": "2"}}
    }
    args = _pod(containers=[{"name": "web", "args": ["x", "y"]}])
    reordered = _pod(containers=[{"name": "web", "args": ["y", "x"]}])
    assert _patch(args, reordered, args)["spec"]["template"]["spec"]["containers"] == [
        {"name": "web", "args": ["y", "x"]}
    ]


def test_fields_the_schema_does_not_know_merge_like_a_json_merge_patch() -> None:
    original = {"spec": {"extra": {"a": 1, "b": [1]}}}
    modified = {"spec": {"extra": {"a": 2, "b": [2]}}}
    assert _patch(original, modified, copy.deepcopy(original)) == {
        "spec": {"extra": {"a": 2, "b": [2]}}
    }


def test_the_inputs_are_left_as_they_were() -> None:
    original = _pod(containers=[{"name": "web", "env": [{"name": "A", "value": "1"}]}])
    modified = _pod(containers=[{"name": "web", "image": "2", "env": [{"name": "B"}]}])
    current = _pod(containers=[{"name": "web", "env": [{"name": "A", "value": "1"}]}])
    before = copy.deepcopy((original, modified, current))
    _patch(original, modified, current)
    assert (original, modified, current) == before


def test_a_keyed_item_without_its_key_is_refused_as_kubectl_refuses_it() -> None:
    current = _pod(containers=[{"name": "web"}])
    with pytest.raises(InvalidOperation, match="does not contain declared merge key: name"):
        _patch(None, _pod(containers=[{"image": "nginx"}]), current)
    with pytest.raises(InvalidOperation, match="not identical"):
        _patch(None, _pod(containers=["web", {"name": "x"}]), current)
