"""Properties of the three-way strategic merge patch, applied as kubesim's API server applies
it: every field the manifest names ends as the manifest says, what we applied before and no
longer do is gone, and what someone else added stays. The schema is kubesim's own OpenAPI,
so the patch and its application agree on every merge key."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agent.operations import parse_v3, three_way_strategic_merge_patch
from kubesim._openapi import OpenApiDocs
from kubesim._resources import BUILTIN_TYPES
from kubesim._strategic import apply_strategic_merge_patch

_DOCS = OpenApiDocs(lambda: list(BUILTIN_TYPES), lambda _: None, lambda: 0, "v1.32.0")
_APPS = _DOCS.v3("apis/apps/v1")
assert _APPS is not None
SCHEMA = parse_v3(json.loads(_APPS))
ROOT = "io.k8s.api.apps.v1.Deployment"

OURS = ("web", "log", "init")
ENV = ("A", "B", "C")
FINALIZERS = ("example.com/a", "example.com/b", "example.com/c")
LABELS = ("l1", "l2", "l3")
VOLUMES = ("v1", "v2")


def _subset(pool: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    return st.lists(st.sampled_from(pool), unique=True, max_size=len(pool))


env_vars = _subset(ENV).flatmap(
    lambda names: st.tuples(*(st.sampled_from(["1", "2"]) for _ in names)).map(
        lambda values: [{"name": n, "value": v} for n, v in zip(names, values, strict=True)]
    )
)
containers = _subset(OURS).flatmap(
    lambda names: st.tuples(
        *(st.tuples(st.sampled_from(["nginx:1", "nginx:2"]), env_vars) for _ in names)
    ).map(
        lambda parts: [
            {"name": n, "image": image, **({"env": env} if env else {})}
            for n, (image, env) in zip(names, parts, strict=True)
        ]
    )
)
volumes = _subset(VOLUMES).flatmap(
    lambda names: st.tuples(*(st.booleans() for _ in names)).map(
        lambda config: [
            {"name": n, "configMap": {"name": f"cm-{n}"}} if c else {"name": n, "emptyDir": {}}
            for n, c in zip(names, config, strict=True)
        ]
    )
)


@st.composite
def deployments(draw: st.DrawFn) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web", "namespace": "default"}
    labels = draw(_subset(LABELS))
    if labels:
        metadata["labels"] = {k: draw(st.sampled_from(["x", "y"])) for k in labels}
    finalizers = draw(_subset(FINALIZERS))
    if finalizers:
        metadata["finalizers"] = finalizers
    pod: dict[str, Any] = {"containers": draw(containers)}
    chosen_volumes = draw(volumes)
    if chosen_volumes:
        pod["volumes"] = chosen_volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {"template": {"spec": pod}},
    }


@st.composite
def edited(draw: st.DrawFn, applied: dict[str, Any]) -> dict[str, Any]:
    """``applied`` as the live object may be after others worked on it: their label,
    finalizer, env entry, sidecar and volume added (at any place), some of our values changed."""
    live: dict[str, Any] = json.loads(json.dumps(applied))
    meta = live["metadata"]
    meta.setdefault("labels", {})["theirs"] = "yes"
    finalizers = meta.setdefault("finalizers", [])
    finalizers.insert(draw(st.integers(0, len(finalizers))), "theirs/keep")
    pod = live["spec"]["template"]["spec"]
    for container in pod["containers"]:
        if draw(st.booleans()):
            container["image"] = "patched:by-hand"
        env = container.setdefault("env", [])
        env.insert(draw(st.integers(0, len(env))), {"name": "THEIRS", "value": "kept"})
    pod["containers"].insert(
        draw(st.integers(0, len(pod["containers"]))), {"name": "sidecar", "image": "proxy:1"}
    )
    mounted = pod.setdefault("volumes", [])
    mounted.insert(draw(st.integers(0, len(mounted))), {"name": "certs", "emptyDir": {}})
    return live


def _project(result: Any, modified: Any, node: str | None) -> Any:
    """``result`` cut to the shape of ``modified``: its map keys, and in lists merged by key
    (or as a set) the items ``modified`` has, in ``result``'s order."""
    if not isinstance(modified, dict) or not isinstance(result, dict):
        return result
    out: dict[str, Any] = {}
    for key, want in modified.items():
        if key not in result:
            continue
        meta = SCHEMA.field(node, key)
        have = result[key]
        if isinstance(want, list) and isinstance(have, list) and meta.strategy == "merge":
            if meta.merge_key:
                by_key = {item[meta.merge_key]: item for item in want}
                have = [
                    _project(item, by_key[item[meta.merge_key]], meta.node)
                    for item in have
                    if item.get(meta.merge_key) in by_key
                ]
            else:
                have = [value for value in have if value in want]
        elif isinstance(want, dict):
            have = _project(have, want, meta.node)
        out[key] = have
    return out


def _names(items: list[dict[str, Any]] | None) -> set[str]:
    return {item["name"] for item in items or ()}


def _theirs_stay(key: str, original: dict[str, Any], modified: dict[str, Any]) -> bool:
    """Whether what others put in field ``key`` must survive: unless the manifest dropped the
    field we had applied (then the patch nulls the whole field, as kubectl's does)."""
    return key in modified or key not in original


@given(st.data())
def test_the_patch_takes_the_live_object_to_the_manifest_and_keeps_foreign_items(
    data: st.DataObject,
) -> None:
    original = data.draw(deployments(), "original")
    current = data.draw(edited(original), "current")
    modified = data.draw(deployments(), "modified")

    patch = three_way_strategic_merge_patch(original, modified, current, SCHEMA, ROOT)
    result = apply_strategic_merge_patch(current, patch, "Deployment")

    assert _project(result, modified, ROOT) == modified
    meta, pod = result["metadata"], result["spec"]["template"]["spec"]
    was, wants = original["metadata"], modified["metadata"]
    was_pod, wants_pod = original["spec"]["template"]["spec"], modified["spec"]["template"]["spec"]
    # What others added stays; what we applied before and dropped since is gone.
    assert ("theirs" in meta.get("labels", {})) == _theirs_stay("labels", was, wants)
    assert not (set(was.get("labels", {})) - set(wants.get("labels", {}))) & set(
        meta.get("labels", {})
    )
    finalizers = meta.get("finalizers", [])
    assert ("theirs/keep" in finalizers) == _theirs_stay("finalizers", was, wants)
    assert not (set(was.get("finalizers", [])) - set(wants.get("finalizers", []))) & set(finalizers)
    assert _names(pod["containers"]) == {"sidecar", *_names(wants_pod["containers"])}
    theirs_volume = {"certs"} if _theirs_stay("volumes", was_pod, wants_pod) else set()
    assert _names(pod.get("volumes")) == theirs_volume | _names(wants_pod.get("volumes"))
    ours_before = {c["name"]: c for c in was_pod["containers"]}
    wanted = {c["name"]: c for c in wants_pod["containers"]}
    for container in pod["containers"]:
        name = container["name"]
        if name in ours_before and name in wanted:
            env = _names(container.get("env"))
            assert ("THEIRS" in env) == _theirs_stay("env", ours_before[name], wanted[name])
            assert not (_names(ours_before[name].get("env")) - _names(wanted[name].get("env"))) & (
                env
            )
