"""Operations on a sharded account, offline (server/ops/_shard_route.py): each goes to the
shard that owns the kind and namespace it writes; one writing what no shard owns is refused
before it runs; an account whole is its own route."""

from __future__ import annotations

import json
from typing import Any

from server._registry import Claim, Registry
from server._shards import ShardSpec
from server.ops import normalize
from server.ops._shard_route import route, shard_errors


def claim(name: str, **spec: Any) -> Claim:
    raw = {"name": name, **spec}
    return Claim(f"big/{name}", "h", "f", properties={"shard": raw}, shard=ShardSpec.of(raw))


def registry() -> Registry:
    r = Registry()
    for session in ("s1", "s2", "s3"):
        r.open_session(session, session)
    r.register("s1", claim("pods", kinds=["Pod"]), 1)
    r.register("s2", claim("team-a", kinds=["Deployment"], namespaces=["a"]), 1)
    r.register("s3", Claim("whole", "h", "f"), 1)
    return r


def manifest(kind: str, namespace: str = "", api_version: str = "v1") -> dict[str, Any]:
    meta = {"name": "x", **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": api_version, "kind": kind, "metadata": meta}


def deploy(account: str, *manifests: dict[str, Any]) -> Any:
    return normalize("deployManifest", {"account": account, "manifests": list(manifests)})


def routed(r: Registry, d: Any) -> str:
    return route(r, d.account, d.spec.name, json.dumps(d.payload))


def test_an_operation_goes_to_the_shard_owning_what_it_writes() -> None:
    r = registry()
    assert routed(r, deploy("big", manifest("Pod", "b"))) == "big/pods"
    deployment = manifest("Deployment", "a", "apps/v1")
    assert routed(r, deploy("big", deployment)) == "big/team-a"
    # Aliases and groups name the kind as a shard does.
    delete = normalize(
        "deleteManifest", {"account": "big", "manifestName": "deploy x", "location": "a"}
    )
    assert routed(r, delete) == "big/team-a"
    # Several targets: the first one a shard owns decides.
    assert routed(r, deploy("big", manifest("Pod", "a"), deployment)) == "big/pods"
    # An account whole, or one unknown, is its own route.
    assert routed(r, deploy("whole", manifest("Pod", "a"))) == "whole"
    assert routed(r, deploy("nobody", manifest("Pod", "a"))) == "nobody"
    assert route(r, "big", "deployManifest", "not json") == "big"


def test_what_no_shard_owns_is_refused_with_the_shards_listed() -> None:
    r = registry()
    assert shard_errors(r, deploy("big", manifest("Pod", "a"))) == []
    [error] = shard_errors(r, deploy("big", manifest("Deployment", "b", "apps/v1")))
    assert "no shard of the account owns kind Deployment in namespace 'b'" in error
    assert "pods: kinds pod in every namespace and the cluster scope" in error
    [error] = shard_errors(r, deploy("big", manifest("Namespace")))
    assert "in the cluster scope" in error
    assert shard_errors(r, deploy("whole", manifest("Namespace"))) == []
