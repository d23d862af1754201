"""Clouddriver's Kubernetes operations, run by the agent with the account's credentials.

``OperationExecutor(client_for_account, ...)`` is what ``Link(operations=...)`` calls for
each ``messages.Operation``; it answers a ``messages.OperationResult`` whose ``result_json``
is ``{"result", "phases", "objects", "deleted"}`` (docs/protocol.md §11.2).
Modules: ``_executor`` (dedup, concurrency, deadlines, dispatch), ``_kinds`` (kind ->
resource via discovery), ``_manifests`` (sans-I/O deploy preparation), ``_binding`` (artifact
binding: Clouddriver's replacers as a table), ``_reuse`` (version reuse), client-side apply's
patches: ``_smp_diff`` + ``_smp_merge`` (kubectl's three-way strategic merge patch),
``_smp_schema`` (the merge keys and strategies read from OpenAPI), ``_openapi`` (fetching and
caching the cluster's OpenAPI), ``_threeway`` (the JSON merge patch for custom resources);
``_apply`` / ``_deploy`` / ``_delete`` / ``_rollout`` (the operations), ``_kube`` (the calls,
errors translated), ``_outcome`` (what is reported).
"""

from ._binding import REPLACERS, Replacer, bind
from ._context import OperationSettings
from ._errors import (
    AgentUnavailable,
    InvalidOperation,
    KubernetesRefusal,
    OperationError,
    OperationTimeout,
    UnsupportedOperation,
)
from ._executor import OPERATIONS, OperationExecutor
from ._kinds import KindResolver, Resource, match_kind
from ._manifests import Strategy, deploy_order, flatten, next_version
from ._smp_diff import three_way_strategic_merge_patch
from ._smp_schema import PatchSchema, parse_v2, parse_v3
from ._threeway import three_way_merge_patch

__all__ = [
    "OPERATIONS",
    "REPLACERS",
    "AgentUnavailable",
    "InvalidOperation",
    "KindResolver",
    "KubernetesRefusal",
    "OperationError",
    "OperationExecutor",
    "OperationSettings",
    "OperationTimeout",
    "PatchSchema",
    "Replacer",
    "Resource",
    "Strategy",
    "UnsupportedOperation",
    "bind",
    "deploy_order",
    "flatten",
    "match_kind",
    "next_version",
    "parse_v2",
    "parse_v3",
    "three_way_merge_patch",
    "three_way_strategic_merge_patch",
]
