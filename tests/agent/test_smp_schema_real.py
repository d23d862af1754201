"""The schema reader on a real API server's document (``golden.REAL_APPS_V1``), and
kubesim's documents against it: every strategy kubesim publishes for a Deployment is the real
one, and none the real document has is missing."""

from __future__ import annotations

import json

from agent.operations import PatchSchema, parse_v3
from agent.operations._smp_schema import FieldPatch, KindPatch
from kubesim._openapi import OpenApiDocs
from kubesim._resources import BUILTIN_TYPES
from tests.agent.golden import REAL_APPS_V1

REAL = parse_v3(json.loads(REAL_APPS_V1.read_text()))
_KUBESIM = OpenApiDocs(lambda: list(BUILTIN_TYPES), lambda _: None, lambda: 0, "v1.32.0").v3(
    "apis/apps/v1"
)
assert _KUBESIM is not None
KUBESIM = parse_v3(json.loads(_KUBESIM))
DEPLOYMENT = "io.k8s.api.apps.v1.Deployment"


def _walk(schema: PatchSchema, other: PatchSchema) -> dict[str, tuple[FieldPatch, FieldPatch]]:
    """The paths (from the Deployment's root) where ``schema`` and ``other`` disagree, over
    every field ``schema`` describes."""
    differences: dict[str, tuple[FieldPatch, FieldPatch]] = {}
    todo: list[tuple[str, str | None, str | None]] = [("", DEPLOYMENT, DEPLOYMENT)]
    seen: set[tuple[str | None, str | None]] = set()
    while todo:
        path, mine, theirs = todo.pop()
        if (mine, theirs) in seen or mine is None:
            continue
        seen.add((mine, theirs))
        for name in schema.fields_of(mine):
            a, b = schema.field(mine, name), other.field(theirs, name)
            here = f"{path}.{name}"
            if (a.strategy, a.retain_keys, a.merge_key) != (b.strategy, b.retain_keys, b.merge_key):
                differences[here] = (a, b)
            todo.append((here, a.node, b.node))
    return differences


def test_a_real_documents_deployment_takes_strategic_patches_merged_by_key() -> None:
    assert REAL.kind("apps", "v1", "Deployment") == KindPatch(DEPLOYMENT, strategic=True)
    spec = REAL.field(REAL.field(DEPLOYMENT, "spec").node, "template")
    pod = REAL.field(REAL.field(spec.node, "spec").node, "containers")
    assert (pod.strategy, pod.merge_key, pod.node) == (
        "merge",
        "name",
        "io.k8s.api.core.v1.Container",
    )
    assert REAL.field("io.k8s.api.core.v1.PodSpec", "volumes").retain_keys
    assert REAL.field("io.k8s.api.apps.v1.DeploymentSpec", "strategy").retain_keys
    assert REAL.field("io.k8s.api.core.v1.PodSpec", "tolerations").strategy == ""


def test_kubesim_publishes_the_real_strategies_for_every_field_it_describes() -> None:
    assert _walk(KUBESIM, REAL) == {}


def test_kubesim_describes_every_field_the_real_document_merges_specially() -> None:
    # The other way round: no field of a Deployment whose strategy kubectl would read from a
    # real cluster is missing from (or plain in) kubesim's documents, status aside.
    missing = {
        path: pair
        for path, pair in _walk(REAL, KUBESIM).items()
        if not path.startswith(".status")
        and (pair[0].strategy, pair[0].retain_keys, pair[0].merge_key) != ("", False, "")
    }
    assert missing == {}
