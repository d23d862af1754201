"""The operation executor: what the link calls for every Operation the server sends.

Theory of operation. ``await executor(op)`` always returns an OperationResult, never raises
for a bad or failed operation (only cancellation propagates). Steps:

1. De-duplication by operation id: a finished id answers its recorded result from a bounded
   LRU (``remembered`` entries); an id still running waits for that run's result. So a
   resent operation (the server retrying after a reconnect) never runs twice.
2. Admission: at most ``max_concurrent`` run at once; at most ``max_queued`` wait for a
   slot, more are refused at once ("Unavailable"). A wait ends at the operation's
   deadline: ``deadline_ms`` is RELATIVE, the milliseconds the server's wait had left when it
   sent the operation (0 = none, negative = already passed); it is turned into a deadline on
   trio's clock on receipt, so no clock is shared with the server. Past it the operation is
   not started ("Timeout"). A started operation runs under a cancel scope ending at that
   deadline (and at most ``max_run_seconds``): the server has stopped waiting by then.
3. Dispatch by ``type`` to a handler with an OperationContext (the account's cluster, the
   description, an Outcome collecting history lines, objects and the result object).
4. Errors: OperationError subclasses become ``ok=False`` with their code and message;
   anything unexpected is logged with its traceback here and reported as "Internal" with a
   one-line message, never the trace.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

import wire
from wire import messages

from ..kube import KubeClient
from ._context import OperationContext, OperationSettings
from ._delete import PHASE as DELETE_PHASE
from ._delete import delete_manifest
from ._deploy import CLEANUP, DEPLOY, RUN_JOB, cleanup_artifacts, deploy_manifest, run_job
from ._description import Description
from ._errors import AgentUnavailable, OperationError, OperationTimeout, UnsupportedOperation
from ._kinds import KindResolver
from ._kube import Cluster
from ._logs import pod_logs
from ._openapi import PatchSchemas
from ._outcome import Outcome
from ._record import OperationLog
from ._rollout import (
    patch_manifest,
    pause_rollout,
    resume_rollout,
    rolling_restart,
    scale_manifest,
    undo_rollout,
)
from ._traffic import DISABLE, ENABLE, disable_manifest, enable_manifest

__all__ = ["OPERATIONS", "OperationExecutor"]

log = logging.getLogger("agent.operations")

Handler = Callable[[OperationContext], Coroutine[Any, Any, None]]

#: Clouddriver's operation name -> (its history phase, the handler).
OPERATIONS: Mapping[str, tuple[str, Handler]] = {
    "deployManifest": (DEPLOY, deploy_manifest),
    "deleteManifest": (DELETE_PHASE, delete_manifest),
    "scaleManifest": ("SCALE_KUBERNETES_MANIFEST", scale_manifest),
    "patchManifest": ("PATCH_KUBERNETES_MANIFEST", patch_manifest),
    "undoRolloutManifest": ("UNDO_ROLLOUT_KUBERNETES_MANIFEST", undo_rollout),
    "pauseRolloutManifest": ("PAUSE_ROLLOUT_KUBERNETES_MANIFEST", pause_rollout),
    "resumeRolloutManifest": ("RESUME_ROLLOUT_KUBERNETES_MANIFEST", resume_rollout),
    "rollingRestartManifest": ("ROLLING_RESTART_KUBERNETES_MANIFEST", rolling_restart),
    "runJob": (RUN_JOB, run_job),
    "disableManifest": (DISABLE, disable_manifest),
    "enableManifest": (ENABLE, enable_manifest),
    "cleanupArtifacts": (CLEANUP, cleanup_artifacts),
    "podLogs": ("POD_LOGS", pod_logs),  # a read for the server's log routes (no task)
}

ClientForAccount = Callable[[str], KubeClient | None]

# An operation spends nearly all its time waiting for the API server (two to four requests
# of 5-50 ms each), so slots bound latency, not CPU: by Little's law 8 slots at ~60 ms per
# operation cap an agent at ~130 operations/s however idle it is, and the server's 50
# concurrent deploys queued here for most of their time. 64 keeps a burst moving; the queue
# bound still refuses a flood ("Unavailable") rather than holding it without end.
MAX_CONCURRENT = 64
MAX_QUEUED = 1024


@dataclass(slots=True)
class _Run:
    """An operation in flight; duplicates wait on ``done``."""

    done: trio.Event = field(default_factory=trio.Event)
    result: messages.OperationResult | None = None


class OperationExecutor:
    """Runs Clouddriver operations against the account's cluster; see the module docstring.

    ``client_for_account(name)`` gives the account's open KubeClient, or None while it has
    none (the operation then fails "Unavailable"). ``status`` (optional) gets a record per
    operation for the agent's ``/operations`` view.
    """

    def __init__(
        self,
        client_for_account: ClientForAccount,
        *,
        settings: OperationSettings | None = None,
        max_concurrent: int = MAX_CONCURRENT,
        max_queued: int = MAX_QUEUED,
        remembered: int = 1024,
        max_run_seconds: float = 600.0,
        status: OperationLog | None = None,
    ) -> None:
        if max_concurrent < 1 or max_queued < 0 or remembered < 1:
            raise ValueError("max_concurrent and remembered must be >= 1, max_queued >= 0")
        self._client_for_account = client_for_account
        self.settings = settings or OperationSettings()
        self._slots = trio.Semaphore(max_concurrent)
        self._max_queued = max_queued
        self._queued = 0
        self._remembered = remembered
        self._results: OrderedDict[str, messages.OperationResult] = OrderedDict()
        self._running: dict[str, _Run] = {}
        self._max_run_seconds = max_run_seconds
        self.status = status
        # Per account, what its operations learn once about the cluster and keep while the
        # account keeps its client: the kinds it serves and its OpenAPI.
        self._resolvers: dict[str, tuple[KubeClient, KindResolver, PatchSchemas]] = {}
        self.runs = 0  # operations actually started (tests and metrics read it)

    # -- the link's entry point -----------------------------------------------------------

    async def __call__(self, op: messages.Operation) -> messages.OperationResult:
        known = self._results.get(op.id)
        if known is not None:
            self._results.move_to_end(op.id)
            log.info("operation %s (%s) seen again: answering its recorded result", op.id, op.type)
            return known
        running = self._running.get(op.id)
        if running is not None:
            await running.done.wait()
            assert running.result is not None
            return running.result
        run = _Run()
        self._running[op.id] = run
        try:
            run.result = await self._admit_and_run(op)
        finally:
            if run.result is None:  # cancelled: a duplicate waiting on us must not hang
                run.result = _failure(op, AgentUnavailable("the operation was cancelled"), None)
            else:
                self._remember(op.id, run.result)
            del self._running[op.id]
            run.done.set()
        return run.result

    def _remember(self, op_id: str, result: messages.OperationResult) -> None:
        self._results[op_id] = result
        while len(self._results) > self._remembered:
            self._results.popitem(last=False)

    def recorded(self, op_id: str) -> messages.OperationResult | None:
        """The recorded result of a finished operation id, if still remembered."""
        return self._results.get(op_id)

    # -- admission ------------------------------------------------------------------------

    def _deadline(self, op: messages.Operation) -> float:
        """The operation's deadline on trio's clock (inf when it has none): ``deadline_ms``
        counts from now (relative), never compared with our wall clock."""
        if not op.deadline_ms:
            return float("inf")
        return trio.current_time() + int(op.deadline_ms) / 1000.0

    async def _admit_and_run(self, op: messages.Operation) -> messages.OperationResult:
        deadline = self._deadline(op)
        if trio.current_time() >= deadline:
            return _failure(
                op,
                OperationTimeout(f"{op.type} {op.id}: its deadline passed before it could start"),
                None,
            )
        if self._slots.value == 0 and self._queued >= self._max_queued:
            return _failure(
                op,
                AgentUnavailable(
                    f"the agent is busy: {self._queued} operations are already waiting"
                ),
                None,
            )
        acquired = False
        self._queued += 1
        try:
            with trio.move_on_at(deadline):
                await self._slots.acquire()
                acquired = True
        finally:
            self._queued -= 1
        if not acquired:
            return _failure(
                op,
                OperationTimeout(
                    f"{op.type} {op.id}: its deadline passed while it waited for a free slot"
                ),
                None,
            )
        try:
            return await self._run(op, deadline)
        finally:
            self._slots.release()

    # -- running --------------------------------------------------------------------------

    def _cluster(self, account: str) -> Cluster:
        client = self._client_for_account(account)
        if client is None:
            raise AgentUnavailable(f"account {account!r} has no Kubernetes client on this agent")
        held = self._resolvers.get(account)
        if held is None or held[0] is not client:
            held = (client, KindResolver(client), PatchSchemas(client, account))
            self._resolvers[account] = held
        return Cluster(account, client, held[1], held[2])

    async def _run(self, op: messages.Operation, deadline: float) -> messages.OperationResult:
        self.runs += 1
        record = (
            self.status.operation_started(op.id, op.account, op.type)
            if self.status is not None
            else None
        )
        entry = OPERATIONS.get(op.type)
        outcome = Outcome(
            entry[0] if entry else "ORCHESTRATION",
            strip_managed_fields=self.settings.strip_managed_fields,
        )
        try:
            if entry is None:
                raise UnsupportedOperation(
                    f"unknown operation type {op.type!r} (known: {', '.join(OPERATIONS)})"
                )
            fields = _decode_payload(op)
            if not op.account:
                raise OperationError("the operation names no account", code="Invalid")
            ctx = OperationContext(
                self._cluster(op.account), Description(op.type, fields), outcome, self.settings
            )
            limit = min(deadline, trio.current_time() + self._max_run_seconds)
            with trio.move_on_at(limit) as scope:
                await entry[1](ctx)
            if scope.cancelled_caught:
                raise OperationTimeout(
                    f"{op.type} did not finish before its deadline (the server's wait, at "
                    f"most {self._max_run_seconds:.0f} s); it may be partly applied"
                )
        except OperationError as exc:
            result = _failure(op, exc, outcome)
        except Exception as exc:  # the contract: a clear message, never a stack trace
            log.exception("operation %s (%s) failed unexpectedly", op.id, op.type)
            result = _failure(
                op,
                OperationError(
                    f"internal error in the agent: {type(exc).__name__}: {exc}", code="Internal"
                ),
                outcome,
            )
        else:
            # wire.construct: betterproto's constructor costs ~80 us per result. Every field
            # is given: betterproto computes an unset field's default on its first read (and
            # the link reads them all to size the message), 50 of the ~110 us it took to
            # build, check and encode a result.
            result = wire.construct(
                messages.OperationResult,
                {
                    "id": op.id,
                    "account": op.account,
                    "ok": True,
                    "result_json": _encode(outcome.to_json()),
                    "error_message": "",
                    "error_code": "",
                },
            )
            if record is not None:
                record.ok = True
                record.error = ""
                record.finished_at = time.time()
            return result
        if record is not None:
            record.ok = result.ok
            record.error = result.error_message
            record.finished_at = time.time()
        return result


_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


def _encode(value: Any) -> str:
    """``result_json``: msgspec writes it in a third of the json module's time."""
    return _ENCODER.encode(value).decode()


def _decode_payload(op: messages.Operation) -> dict[str, Any]:
    if not op.payload_json:
        return {}
    try:
        fields = _DECODER.decode(op.payload_json)
    except msgspec.DecodeError as exc:
        raise OperationError(
            f"{op.type}: payload_json is not JSON: {exc}", code="Invalid"
        ) from None
    if not isinstance(fields, dict):
        raise OperationError(f"{op.type}: payload_json must be a JSON object", code="Invalid")
    return fields


def _failure(
    op: messages.Operation, exc: OperationError, outcome: Outcome | None
) -> messages.OperationResult:
    log.info(
        "operation %s (%s) on %s failed: %s: %s", op.id, op.type, op.account, exc.code, exc.message
    )
    result_json = ""
    if outcome is not None:
        outcome.say(f"{op.type} failed: {exc.message}")
        result_json = _encode(outcome.to_json())
    return messages.OperationResult(
        id=op.id,
        account=op.account,
        ok=False,
        result_json=result_json,
        error_message=exc.message,
        error_code=exc.code,
    )
