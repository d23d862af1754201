"""The operations service: tasks in, operations out to agents, results back. The trio part.

Theory of operation. ``submit`` validates every description (refusals raise before any task
exists), de-duplicates by clientRequestId (the task id is derived from it, and the task is
persisted before ``submit`` returns, so a retried POST finds it even after a restart), and
starts one runner task in the service's nursery. The runner sends the task's operations one
after another; each is recorded in the store (RECEIVED) before it is sent (SENT) to the
PRIMARY session of its account, then waits for the agent's result under one cancel scope
whose deadline is ``operations.waitMs``.

At most once. An operation reaches an agent at most once: it is never resent, not after a
timeout and not after a reconnect. When the session it was sent to ends before the result
came, the operation fails with "agent disconnected before answering; the operation may or
may not have been applied" (the agent de-duplicates a repeated id, but its memory of ids does
not survive a restart, so resending could apply a deploy twice). A result that arrives after
the task gave up is recorded in the operation's history and otherwise ignored. Session ends
reach the service through the session manager's close listener, so the operations
outstanding on a session fail the moment it closes.

Bounds: at most ``max_running`` unfinished tasks (more -> OperationsUnavailable, 503), at
most ``max_in_flight`` operations sent and unanswered (the session's outbound queue is
bounded and a full one ends the session), ``max_tasks_kept`` ended tasks in memory (older
ones are read back from the store).
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec
import trio

from wire import EventRecord, construct, messages

from .._accounts import AccountService
from .._errors import ServerError
from .._feed import ChangeFeed
from .._sessions import Session, SessionManager
from ..store import OperationEvent, OperationRecord, Store, is_secret, scrub_secret_object
from ._describe import Description, OperationSpec, normalize, parse_request
from ._errors import OperationsUnavailable, RulesViolated, UnknownCredentials
from ._journal import OperationJournal
from ._results import AgentResult, cache_records, error_name, parse_result
from ._rules import rule_errors
from ._task import Task

__all__ = ["OperationOutcome", "OperationService"]

log = logging.getLogger("server.operations")

TASK_TYPE = "task"  # operations-table rows of this type hold a task (see _persist_task)
_TASK_ID_NAMESPACE = uuid.UUID("5b0c1f9e-6f67-4a43-9b1c-6b7562657376")


@dataclass(slots=True)
class _Outstanding:
    """An operation sent and not yet answered."""

    session_id: str
    agent_id: str
    sent_at: float
    done: trio.Event = field(default_factory=trio.Event)
    result: messages.OperationResult | None = None
    failure: str = ""
    sent_note: str = ""


class _Ending:
    """Writes how one operation ended: now, or into the caller's ``finals`` (and its objects
    into ``objects``) for the caller to write with the task's end."""

    def __init__(
        self,
        service: OperationService,
        record: OperationRecord,
        finals: list[tuple[OperationRecord, str]] | None,
        objects: list[list[EventRecord]] | None,
    ) -> None:
        self.service = service
        self.record = record
        self.finals = finals
        self.objects = objects if finals is not None else None

    async def write(self, record: OperationRecord, message: str) -> None:
        if self.finals is not None:
            self.finals.append((record, message))
        else:
            await self.service._journal.write(record, message)

    async def update_cache(self, records: list[EventRecord]) -> None:
        if not records:
            return
        if self.objects is not None:
            self.objects.append(records)
        else:
            await self.service._update_cache(records)

    async def failed(self, error: str, message: str) -> OperationOutcome:
        await self.write(
            replace(
                self.record,
                state="FAILED",
                updated_ms=self.service._now_ms(),
                error_message=message,
                error_code=error,
            ),
            f"failed: {message}",
        )
        return OperationOutcome(False, AgentResult(ok=False), error, message)


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """How one operation ended: ``error`` is the class-like name, ``message`` the reason."""

    ok: bool
    agent: AgentResult
    error: str = ""
    message: str = ""


def _dumps(value: Any) -> str:
    # msgspec: several times the stdlib's speed, and every record of a deploy is encoded.
    return msgspec.json.encode(value).decode()


class OperationService:
    """The server's OperationsHook, and what the REST routes call (see module docstring)."""

    def __init__(
        self,
        *,
        store: Store,
        sessions: SessionManager,
        accounts: AccountService,
        feed: ChangeFeed,
        owner_id: str,
        wait_ms: int = 30_000,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        max_running: int = 1000,
        max_in_flight: int = 32,
        max_tasks_kept: int = 10_000,
    ) -> None:
        self._store = store
        self._sessions = sessions
        self._accounts = accounts
        self._feed = feed
        self.owner_id = owner_id
        self.wait_ms = wait_ms
        self._now_ms = now_ms
        self._max_running = max_running
        self._max_tasks_kept = max_tasks_kept
        self._slots = trio.Semaphore(max(1, max_in_flight))
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._running = 0
        self._outstanding: dict[str, _Outstanding] = {}
        self._nursery: trio.Nursery | None = None
        self._journal = OperationJournal(store)
        sessions.add_close_listener(self._session_closed)

    # -- lifetime -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run task runners and the journal until cancelled (runners are cancelled too: their
        tasks stay RUNNING in the store and read back as failed after a restart)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._journal.run)
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep(math.inf)
            finally:
                self._nursery = None

    def _session_closed(self, session: Session) -> None:
        """The session manager's close listener: fail what is outstanding on ``session``."""
        reason = session.ended_reason or "its session closed"
        for op_id, waiting in self._outstanding.items():
            if waiting.session_id != session.session_id or waiting.done.is_set():
                continue
            waiting.failure = (
                f"agent {waiting.agent_id} disconnected before answering ({reason}); "
                "the operation may or may not have been applied, and it is not resent"
            )
            log.warning("operation %s: %s", op_id, waiting.failure)
            waiting.done.set()

    # -- submitting -----------------------------------------------------------------------

    def describe(self, operations: Sequence[tuple[str, Any]]) -> list[Description]:
        """Normalize every description and check its account and the account's namespace and
        kind rules (RulesViolated, nothing runs); raises the refusals."""
        described = [
            normalize(name, raw, check_account=self.check_account) for name, raw in operations
        ]
        errors: list[str] = []
        for d in described:
            record = self._accounts.get(d.account)
            errors.extend(rule_errors(d, record.properties) if record is not None else [])
        if errors:
            raise RulesViolated(errors)
        return described

    async def submit_request(self, body: Any, *, request_id: str | None) -> Task:
        """``POST /kubernetes/ops``'s body -> the task (new, or the one for ``request_id``)."""
        return await self.submit(self.describe(parse_request(body)), request_id=request_id)

    async def submit(self, descriptions: Sequence[Description], *, request_id: str | None) -> Task:
        """Create (or find, by ``request_id``) the task and start running it.

        Raises OperationsUnavailable when the service is not running or too many tasks are
        unfinished, and StoreError when the task cannot be persisted (nothing runs then).
        """
        if request_id:
            task_id = str(uuid.uuid5(_TASK_ID_NAMESPACE, request_id))
            # Every task has its first operation's row from the start: one read tells a new
            # request id from a retried one.
            known = task_id in self._tasks or (
                await self._store.get_operation(f"{task_id}-0") is not None
            )
            existing = await self.get_task(task_id) if known else None
            if existing is not None:
                return existing
        else:
            task_id = str(uuid.uuid4())
        if self._nursery is None:
            raise OperationsUnavailable("operations are not running on this server")
        if self._running >= self._max_running:
            raise OperationsUnavailable(
                f"{self._running} operation tasks are unfinished (the limit); retry later"
            )
        if task_id in self._tasks:  # a concurrent POST with the same id got here first
            return self._tasks[task_id]
        task = Task.create(
            task_id,
            request_id=request_id or task_id,
            owner_id=self.owner_id,
            now_ms=self._now_ms(),
            accounts=sorted({d.account for d in descriptions}),
        )
        self._remember(task)
        self._running += 1
        first = descriptions[0]
        try:
            # One write before answering: the first operation's record, which also carries
            # the new task (so a retried POST finds it, even after a restart).
            await self._journal.write(
                self._received_record(f"{task_id}-0", first, {"task": task.to_json()}), "received"
            )
        except BaseException:
            self._running -= 1
            self._tasks.pop(task_id, None)
            raise
        self._nursery.start_soon(self._run_task, task, list(descriptions))
        return task

    def _received_record(
        self, op_id: str, d: Description | tuple[OperationSpec, str, dict[str, Any]], extra: Any
    ) -> OperationRecord:
        spec, account, payload = (d.spec, d.account, d.payload) if isinstance(d, Description) else d
        now = self._now_ms()
        return OperationRecord(
            id=op_id,
            account=account,
            type=spec.name,
            payload_json=_dumps(redacted_payload(payload)),
            state="RECEIVED",
            created_ms=now,
            updated_ms=now,
            result_json=_dumps(extra) if extra is not None else "",
        )

    def _remember(self, task: Task) -> None:
        self._tasks[task.id] = task
        self._tasks.move_to_end(task.id)
        while len(self._tasks) > self._max_tasks_kept:
            oldest = next((t for t in self._tasks.values() if t.ended), None)
            if oldest is None:
                break
            del self._tasks[oldest.id]

    def _task_record(self, task: Task) -> OperationRecord:
        return OperationRecord(
            id=task.id,
            account=",".join(task.accounts),
            type=TASK_TYPE,
            payload_json=_dumps({"requestId": task.request_id}),
            state=task.state,
            created_ms=task.start_time_ms,
            updated_ms=self._now_ms(),
            result_json=task.encoded().decode(),
        )

    async def _persist_task(self, task: Task, message: str) -> None:
        await self._journal.write(self._task_record(task), message)

    async def _run_task(self, task: Task, descriptions: list[Description]) -> None:
        # The operations' final records, the objects they returned (for the cache) and the
        # task's end are written in ONE journal write when the task ends: one store hop (shared
        # with other tasks ending meanwhile). The task shows its end only after that write, so
        # a client that sees it completed finds the objects in /manifests.
        finals: list[tuple[OperationRecord, str]] = []
        objects: list[list[EventRecord]] = []
        end: Callable[[Task], None] | None = None  # none when cancelled: it stays RUNNING
        try:
            for index, d in enumerate(descriptions):
                op_id = f"{task.id}-{index}"
                task.begin_operation(op_id, d.spec.class_name)
                outcome = await self.execute(
                    op_id,
                    d.spec,
                    d.account,
                    d.payload,
                    recorded=index == 0,
                    finals=finals,
                    objects=objects,
                )
                task.add_phases(outcome.agent.phases, d.spec.phase)
                if not outcome.ok:
                    end = functools.partial(
                        Task.fail,
                        operation=d.spec.class_name,
                        error=outcome.error,
                        message=outcome.message,
                        now_ms=self._now_ms(),
                    )
                    break
                task.add_result(outcome.agent.result)
            else:
                end = functools.partial(Task.complete, now_ms=self._now_ms())
        except Exception as exc:
            # A bug or a store failure must fail this task, not the server's nursery.
            log.exception("task %s failed inside the server", task.id)
            end = functools.partial(
                Task.fail,
                operation="orchestration",
                error=type(exc).__name__,
                message=f"the server failed: {exc}",
                now_ms=self._now_ms(),
            )
        finally:
            self._running -= 1
            ending = task.copy()
            if end is not None:
                end(ending)
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                try:
                    errors = await self._journal.write_all(
                        [*finals, (self._task_record(ending), ending.state)], objects
                    )
                    self._published(objects, errors)
                except ServerError as exc:
                    log.error("task %s: could not persist its end: %s", task.id, exc)
            if end is not None:
                end(task)

    # -- one operation --------------------------------------------------------------------

    async def execute(
        self,
        op_id: str,
        spec: OperationSpec,
        account: str,
        payload: dict[str, Any],
        *,
        recorded: bool = False,
        finals: list[tuple[OperationRecord, str]] | None = None,
        objects: list[list[EventRecord]] | None = None,
    ) -> OperationOutcome:
        """Record (unless ``recorded``), send, await one operation and record how it ended
        (appended to ``finals`` for the caller to write, with the returned objects' cache
        records appended to ``objects``; else both written here). Never raises for the
        agent's or the cluster's failures (they are the outcome); StoreError when recording
        fails."""
        record = self._received_record(op_id, (spec, account, payload), None)
        # The agent gets the payload whole; the record holds it redacted (Secret data).
        # Nothing redacted (no Secret): the same JSON, encoded once.
        payload_json = record.payload_json if not _has_secret(payload) else _dumps(payload)
        if not recorded:
            await self._journal.write(record, "received")
        ended = _Ending(self, record, finals, objects)
        waiting: _Outstanding | None = None
        with trio.move_on_after(self.wait_ms / 1000):
            async with self._slots:
                session = self._sessions.primary_session(account)
                if session is None or session.ended_reason:
                    return await ended.failed(
                        "NoAgent",
                        f"no agent serves account {account} now (its agent is disconnected); "
                        "nothing was sent",
                    )
                waiting = _Outstanding(session.session_id, session.agent_id, trio.current_time())
                waiting.sent_note = (
                    f"sent to agent {session.agent_id} (session {session.session_id})"
                )
                self._outstanding[op_id] = waiting
                try:
                    self._send(record, payload_json, session, spec)
                    await waiting.done.wait()
                finally:
                    self._outstanding.pop(op_id, None)
        if waiting is None:
            return await ended.failed(
                "OperationTimeout", f"not sent within {self.wait_ms} ms: too many in flight"
            )
        if waiting.result is not None:
            return await self._received(ended, waiting)
        if waiting.failure:
            return await ended.failed(
                "AgentDisconnected", f"{waiting.sent_note}; {waiting.failure}"
            )
        return await ended.failed(
            "OperationTimeout",
            f"{waiting.sent_note}; no result within {self.wait_ms} ms "
            "(operations.waitMs); the operation may or may not have been applied",
        )

    def _send(
        self, record: OperationRecord, payload_json: str, session: Session, spec: OperationSpec
    ) -> None:
        # The record holds the payload redacted (Secret data); the agent gets it whole.
        # deadline_ms is RELATIVE: the milliseconds this wait has left now (the task's real
        # deadline, not a fresh waitMs), so the agent needs no clock in common with us.
        left_s = max(0.0, trio.current_effective_deadline() - trio.current_time())
        # wire.construct: betterproto's constructor costs ~80 us per message here, and the
        # values are ours, of the fields' types.
        operation = construct(
            messages.Operation,
            {
                "id": record.id,
                "account": record.account,
                "type": spec.name,
                "payload_json": payload_json,
                "deadline_ms": max(1, int(min(left_s, self.wait_ms / 1000) * 1000)),
            },
        )
        if not session.post(construct(messages.ServerMessage, {"operation": operation})):
            waiting = self._outstanding.get(record.id)
            if waiting is not None:
                waiting.failure = (
                    f"could not queue the operation: its session ended "
                    f"({session.ended_reason or 'closed'}); nothing was sent"
                )
                waiting.done.set()

    async def _received(self, ended: _Ending, waiting: _Outstanding) -> OperationOutcome:
        result = waiting.result
        assert result is not None
        elapsed_ms = int((trio.current_time() - waiting.sent_at) * 1000)
        agent = parse_result(result.ok, result.result_json, result.error_message, result.error_code)
        if agent.problem:
            log.warning("operation %s: %s", result.id, agent.problem)
        await ended.update_cache(cache_records(ended.record.account, agent.objects, agent.deleted))
        message = result.error_message or (agent.problem if not result.ok else "")
        if not result.ok and not message:
            message = f"the agent reported a failure with no message (code {result.error_code!r})"
        await ended.write(
            replace(
                ended.record,
                state="SUCCEEDED" if result.ok else "FAILED",
                updated_ms=self._now_ms(),
                result_json=_redacted_result_json(result.result_json),
                error_message=message,
                error_code=result.error_code,
            ),
            f"{waiting.sent_note}; result received after {elapsed_ms} ms: "
            + ("ok" if result.ok else f"failed: {message}"),
        )
        if result.ok:
            return OperationOutcome(True, agent)
        return OperationOutcome(False, agent, error_name(result.error_code), message)

    async def _update_cache(self, records: list[EventRecord]) -> None:
        """Write the objects the agent returned so /manifests shows them at once. The store
        keeps an object the watch already delivered in a newer version (one transaction, so
        no read-then-write race with the session's batches) and leaves resume points alone."""
        try:
            await self._store.apply_operation_objects(records)
        except ServerError as exc:
            self._published([records], [exc])
            return
        self._published([records], [None])

    def _published(
        self, groups: Sequence[list[EventRecord]], errors: Sequence[ServerError | None]
    ) -> None:
        """Offer the applied groups of objects to the change feed; log the others."""
        for records, error in zip(groups, errors, strict=True):
            if error is None:
                self._feed.publish(records)
                # Read-your-writes: reads of these objects wait until the cache shows them
                # (a watch event older than the write may still overwrite them).
                self._feed.freshness.expect(records)
            else:
                log.warning(
                    "operation result for %s: cache not updated: %s", records[0].account, error
                )

    # -- the hook -------------------------------------------------------------------------

    async def on_result(self, session: Session, result: messages.OperationResult) -> None:
        """An agent answered. Never blocks on I/O for an expected result (the session's
        receive loop calls this). Only the session the operation was sent to may answer it:
        another session's result is refused; a late or unknown one is recorded and dropped.
        A store failure while recording those is logged, not raised (it must not end the
        answering agent's session)."""
        waiting = self._outstanding.get(result.id)
        if waiting is not None and not waiting.done.is_set():
            if waiting.session_id == session.session_id:
                waiting.result = result
                waiting.done.set()
                return
            log.warning(
                "operation %s: result from session %s refused: it was sent to session %s",
                result.id,
                session.session_id,
                waiting.session_id,
            )
            await self._note(
                result.id,
                f"result from agent {session.agent_id} (session {session.session_id}) "
                f"refused: the operation was sent to session {waiting.session_id}",
            )
            return
        if result.id.startswith("dynamic-"):
            log.info(
                "dynamic account %s: ok=%s %s", result.account, result.ok, result.error_message
            )
            return
        log.warning("operation %s: late result from agent %s ignored", result.id, session.agent_id)
        await self._note(
            result.id,
            f"late result from agent {session.agent_id} ignored: ok={result.ok} "
            f"{result.error_message}",
        )

    async def _note(self, op_id: str, message: str) -> None:
        """Add ``message`` to an operation's history (nothing for an unknown id)."""
        try:
            record = await self._store.get_operation(op_id)
            if record is None or record.type == TASK_TYPE:
                log.warning("an agent answered unknown operation %r", op_id)
                return
            await self._journal.write(replace(record, updated_ms=self._now_ms()), message)
        except ServerError as exc:
            log.error("operation %s: could not record %r: %s", op_id, message, exc)

    # -- reading --------------------------------------------------------------------------

    def task_in_memory(self, task_id: str) -> Task | None:
        """The task if this server holds it in memory (no store read): every task it runs and
        the newest ``max_tasks_kept`` ended ones. ``get_task`` also reads the store."""
        return self._tasks.get(task_id)

    async def get_task(self, task_id: str) -> Task | None:
        """A task from memory, else from the store. A task the store holds as RUNNING but no
        runner owns (the server restarted) is failed and saved as such."""
        task = self._tasks.get(task_id)
        if task is not None:
            return task
        record = await self._store.get_operation(task_id)
        if record is None or record.type != TASK_TYPE:
            # No task row yet: the task was running (its first operation's row carries it).
            record = await self._store.get_operation(f"{task_id}-0")
            if record is None or '"task"' not in record.result_json[:12]:
                return None
        try:
            data = msgspec.json.decode(record.result_json)
            task = Task.from_json(data["task"] if record.type != TASK_TYPE else data)
        except (ValueError, KeyError, TypeError) as exc:
            log.error("task %s in the store cannot be read: %s", task_id, exc)
            return None
        if task_id in self._tasks:  # a concurrent reader restored it first
            return self._tasks[task_id]
        if not task.ended:
            task.fail(
                "orchestration",
                "ServerRestarted",
                "the server restarted while this task was running; its operation may or may "
                "not have been applied",
                self._now_ms(),
            )
            await self._persist_task(task, task.state)
        self._remember(task)
        return task

    def recent_tasks(self, limit: int = 100) -> list[Task]:
        """The newest tasks in memory, newest first."""
        return list(reversed(self._tasks.values()))[:limit]

    async def operation_view(self, op_id: str) -> dict[str, Any] | None:
        record = await self._store.get_operation(op_id)
        if record is None or record.type == TASK_TYPE:
            return None
        return _operation_json(record, await self._store.operation_history(op_id))

    async def list_operations(self, account: str | None, limit: int) -> list[dict[str, Any]]:
        # Task rows share the table; each task has >= 1 operation row, so the newest 2N rows
        # hold at least the newest N operations.
        records = await self._store.list_operations(account=account, limit=min(20_000, 2 * limit))
        views: list[dict[str, Any]] = []
        for record in records:
            if record.type != TASK_TYPE and len(views) < limit:
                views.append(
                    _operation_json(record, await self._store.operation_history(record.id))
                )
        return views

    def new_operation_id(self) -> str:
        return str(uuid.uuid4())

    def check_account(self, account: str) -> None:
        if self._accounts.get(account) is None:
            raise UnknownCredentials(account, sorted(a.name for a in self._accounts.list()))

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    @property
    def running_tasks(self) -> int:
        return self._running


def _has_secret(payload: dict[str, Any]) -> bool:
    """Whether ``redacted_payload`` could change ``payload`` (else it is an equal copy)."""
    if payload.get("kind") == "Secret" and "patchBody" in payload:
        return True
    manifests = payload.get("manifests")
    candidates = list(manifests) if isinstance(manifests, list) else []
    if "manifest" in payload:
        candidates.append(payload["manifest"])
    return any(
        isinstance(m, dict) and is_secret(str(m.get("apiVersion", "v1")), m.get("kind"))
        for m in candidates
    )


def redacted_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload as the server records and shows it: Secret manifests (``manifests``,
    ``manifest``) and a Secret's ``patchBody`` lose data, stringData and last-applied."""

    def clean(obj: Any) -> Any:
        if isinstance(obj, dict) and is_secret(str(obj.get("apiVersion", "v1")), obj.get("kind")):
            return scrub_secret_object(obj)
        return obj

    redacted = dict(payload)
    if isinstance(redacted.get("manifests"), list):
        redacted["manifests"] = [clean(m) for m in redacted["manifests"]]
    if "manifest" in redacted:
        redacted["manifest"] = clean(redacted["manifest"])
    if redacted.get("kind") == "Secret" and isinstance(redacted.get("patchBody"), dict):
        redacted["patchBody"] = scrub_secret_object(redacted["patchBody"])
    elif redacted.get("kind") == "Secret" and "patchBody" in redacted:
        redacted["patchBody"] = "(redacted: a patch of a Secret)"
    return redacted


def _redacted_result_json(result_json: str) -> str:
    """An agent's result_json as recorded: Secret objects in "objects" and in the result's
    "manifests" without their data (the agent strips them; the server does not rely on it)."""
    if '"Secret"' not in result_json:
        return result_json
    try:
        data = msgspec.json.decode(result_json)
    except ValueError:
        return result_json
    if not isinstance(data, dict):
        return result_json
    data = redacted_payload(data)  # "manifests"/"manifest" at the top (harmless elsewhere)
    if isinstance(data.get("objects"), list):
        data["objects"] = redacted_payload({"manifests": data["objects"]})["manifests"]
    if isinstance(data.get("result"), dict):
        data["result"] = redacted_payload(data["result"])
    return _dumps(data)


def _operation_json(record: OperationRecord, history: list[OperationEvent]) -> dict[str, Any]:
    """An operation as /armory/agent/operations shows it."""
    ended = record.state in ("SUCCEEDED", "FAILED")
    result: Any = None
    if record.result_json:
        try:
            result = msgspec.json.decode(record.result_json)
        except ValueError:
            result = record.result_json
    return {
        "id": record.id,
        "account": record.account,
        "type": record.type,
        "state": record.state,
        "createdMs": record.created_ms,
        "updatedMs": record.updated_ms,
        "durationMs": (record.updated_ms - record.created_ms) if ended else None,
        "errorMessage": record.error_message,
        "errorCode": record.error_code,
        "payload": msgspec.json.decode(record.payload_json or "{}"),
        "result": result,
        "history": [{"atMs": e.at_ms, "state": e.state, "message": e.message} for e in history],
    }
