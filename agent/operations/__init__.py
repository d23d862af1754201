"""Clouddriver's Kubernetes operations, run by the agent with the account's credentials.

``OperationExecutor`` (``_executor``) answers each ``messages.Operation`` the link hands it
(docs/protocol.md §11.2): ``_deploy``, ``_delete``, ``_rollout``, ``_traffic`` on manifests
prepared without I/O (``_manifests``, ``_binding``, ``_reuse``), applied like kubectl
(``_apply``, ``_smp_*`` and ``_openapi``; ``_threeway`` for custom resources).
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
from ._record import OperationLog, OperationRecord
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
    "OperationLog",
    "OperationRecord",
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
