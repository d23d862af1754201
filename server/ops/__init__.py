"""Clouddriver's operations: tolerant descriptions, orchestration tasks, and the service that
sends operations to agents and turns their results into tasks and cache updates."""

from ._describe import (
    OPERATIONS,
    POD_LOGS,
    Description,
    OperationSpec,
    normalize,
    operation_spec,
    parse_request,
)
from ._errors import (
    InvalidDescription,
    OperationError,
    OperationsUnavailable,
    RulesViolated,
    UnknownCredentials,
    UnknownOperation,
)
from ._outcome import ENDED_STATES, outcome_of
from ._results import AgentResult, cache_records, parse_result
from ._rules import RULE_CONTEXTS, AccountRules, rule_errors
from ._service import OperationOutcome, OperationService
from ._stats import OUTCOMES, OperationStatistics, outcome_label
from ._task import Task, TaskState

__all__ = [
    "ENDED_STATES",
    "OPERATIONS",
    "OUTCOMES",
    "POD_LOGS",
    "RULE_CONTEXTS",
    "AccountRules",
    "AgentResult",
    "Description",
    "InvalidDescription",
    "OperationError",
    "OperationOutcome",
    "OperationService",
    "OperationSpec",
    "OperationStatistics",
    "OperationsUnavailable",
    "RulesViolated",
    "Task",
    "TaskState",
    "UnknownCredentials",
    "UnknownOperation",
    "cache_records",
    "normalize",
    "operation_spec",
    "outcome_label",
    "outcome_of",
    "parse_request",
    "parse_result",
    "rule_errors",
]
