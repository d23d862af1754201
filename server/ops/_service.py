"""The operations service: tasks in, operations out to agents, results back. The trio part.

Theory of operation. ``submit`` validates every description (refusals raise before any task
exists), de-duplicates by clientRequestId (the task id is derived from it, and the task is
created in the store insert-if-absent before ``submit`` returns, so a retried POST finds it,
even after a restart or on another replica, and two replicas given one id at once run it
once), and starts one runner task in the service's nursery. The runner sends the task's
operations one after another; each is recorded in the store (RECEIVED) before it is sent to
the PRIMARY session of its account (``_agents``), or, when another replica holds that
session, dispatched to it (``_dispatch``); then it waits for the result under one deadline,
``operations.waitMs``.

At most once. An operation reaches an agent at most once: it is never resent, not after a
timeout and not after a reconnect. When the session it was sent to ends before the result
came, the operation fails with "agent disconnected before answering; the operation may or
may not have been applied" (the agent de-duplicates a repeated id, but its memory of ids does
not survive a restart, so resending could apply a deploy twice). A result that arrives after
the task gave up is recorded in the operation's history and otherwise ignored.

Any replica answers for a task: the store holds it (created RUNNING, rewritten after each
operation when replicas share the store, and at its end); a replica that does not run it
shows the stored task while its owner replica lives, and fails it, naming the owner, once
the owner is gone.

Bounds: at most ``max_running`` unfinished tasks (more -> OperationsUnavailable, 503), at
most ``max_in_flight`` operations sent and unanswered (the session's outbound queue is
bounded and a full one ends the session), as many dispatched to this replica running at once,
``max_tasks_kept`` ended tasks in memory (older ones are read back from the store).
"""

from __future__ import annotations

import functools
import logging
import math
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import msgspec
import trio

from wire import EventRecord, messages

from .._accounts import AccountService
from .._errors import ServerError
from .._feed import ChangeFeed
from .._log_context import account_logs
from .._sessions import Session, SessionManager
from ..store import DispatchRecord, OperationRecord, Store
from ._agents import AgentLink, Outstanding
from ._describe import Description, OperationSpec, normalize, parse_request
from ._dispatch import Dispatcher, result_notice
from ._errors import OperationsUnavailable, RulesViolated, UnknownCredentials
from ._journal import OperationJournal
from ._outcome import Ending, OperationOutcome
from ._redact import (
    dumps,
    has_secret,
    operation_json,
    redacted_payload,
    redacted_result_json,
)
from ._results import cache_records, error_name, parse_result
from ._rules import rule_errors
from ._shard_route import route, shard_errors
from ._stats import OperationStatistics
from ._task import Task

__all__ = ["OperationOutcome", "OperationService"]

log = logging.getLogger("server.operations")

TASK_TYPE = "task"  # operations-table rows of this type hold a task (see _persist_task)
_TASK_ID_NAMESPACE = uuid.UUID("5b0c1f9e-6f67-4a43-9b1c-6b7562657376")


class OperationService:
    """The server's OperationsHook, and what the REST routes call (see module docstring).

    ``lease_ttl_ms`` > 0 means replicas share the store (PostgreSQL): operations for an
    account whose stream another replica holds are dispatched to it, tasks are readable on
    every replica, and accounts another replica registered are read from the store."""

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
        lease_ttl_ms: int = 0,
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
        self._tasks: OrderedDict[str, Task] = OrderedDict()
        self._running = 0
        self._nursery: trio.Nursery | None = None
        self._journal = OperationJournal(store)
        #: what the operations run here came to (the metrics read it)
        self.statistics = OperationStatistics()
        self._link = AgentLink(sessions, max_in_flight=max_in_flight, wait_ms=wait_ms)
        self.dispatcher = (
            Dispatcher(
                store,
                self._journal,
                replica_id=owner_id,
                lease_ttl_ms=lease_ttl_ms,
                now_ms=now_ms,
                serve=self._serve_dispatched,
                max_claimed=max_in_flight,
            )
            if lease_ttl_ms > 0
            else None
        )
        # A sharded account's operation goes to the shard owning what it writes.
        self._link.route = self._route
        if self.dispatcher is not None:
            self.dispatcher.route = self._route

    def _route(self, record: OperationRecord, payload_json: str) -> str:
        return route(self._accounts.registry, record.account, record.type, payload_json)

    # -- lifetime -------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run task runners, the journal and (replicas sharing the store) the dispatcher until
        cancelled (runners are cancelled too: their tasks stay RUNNING in the store and read
        back as failed once this replica is gone or restarted)."""
        async with trio.open_nursery() as nursery:
            await nursery.start(self._journal.run)
            if self.dispatcher is not None:
                await nursery.start(self.dispatcher.run)
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep(math.inf)
            finally:
                self._nursery = None

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
            errors.extend(shard_errors(self._accounts.registry, d))
        if errors:
            raise RulesViolated(errors)
        return described

    async def submit_request(self, body: Any, *, request_id: str | None) -> Task:
        """``POST /kubernetes/ops``'s body -> the task (new, or the one for ``request_id``)."""
        operations = parse_request(body)
        looked_up: set[str] = set()
        while True:
            try:
                described = self.describe(operations)
                break
            except UnknownCredentials as exc:
                # Replicas sharing the store: another one may have registered it just now.
                if exc.name in looked_up or not await self.known_account(exc.name):
                    raise
                looked_up.add(exc.name)
        return await self.submit(described, request_id=request_id)

    async def submit(self, descriptions: Sequence[Description], *, request_id: str | None) -> Task:
        """Create (or find, by ``request_id``) the task and start running it.

        Raises OperationsUnavailable when the service is not running or too many tasks are
        unfinished, and StoreError when the task cannot be persisted (nothing runs then).
        """
        if request_id:
            task_id = str(uuid.uuid5(_TASK_ID_NAMESPACE, request_id))
            if task_id in self._tasks:  # a retry, or a concurrent POST that got here first
                return self._tasks[task_id]
        else:
            task_id = str(uuid.uuid4())
        if self._nursery is None:
            raise OperationsUnavailable("operations are not running on this server")
        if self._running >= self._max_running:
            raise OperationsUnavailable(
                f"{self._running} operation tasks are unfinished (the limit); retry later"
            )
        task = Task.create(
            task_id,
            request_id=request_id or task_id,
            owner_id=self.owner_id,
            now_ms=self._now_ms(),
            accounts=sorted({d.account for d in descriptions}),
        )
        self._remember(task)
        self._running += 1
        # One write before answering: the first operation's record (its id is the unique
        # key of a clientRequestId: insert-if-absent) and the task's, RUNNING.
        first = self._received_record(f"{task_id}-0", descriptions[0])
        items = [(first, "received"), (self._task_record(task), "received")]
        try:
            created = True
            if request_id:
                created = await self._journal.create(items)
            else:
                await self._journal.write_all(items)
        except BaseException:
            self._running -= 1
            self._tasks.pop(task_id, None)
            raise
        if not created:  # a retry of a task in the store, or another replica's
            self._running -= 1
            self._tasks.pop(task_id, None)
            existing = await self.get_task(task_id)
            if existing is None:
                raise ServerError(f"task {task_id} exists but cannot be read from the store")
            return existing
        assert self._nursery is not None
        self._nursery.start_soon(self._run_task, task, list(descriptions))
        return task

    def _received_record(
        self, op_id: str, d: Description | tuple[OperationSpec, str, dict[str, Any]]
    ) -> OperationRecord:
        spec, account, payload = (d.spec, d.account, d.payload) if isinstance(d, Description) else d
        now = self._now_ms()
        return OperationRecord(
            id=op_id,
            account=account,
            type=spec.name,
            payload_json=dumps(redacted_payload(payload)),
            state="RECEIVED",
            created_ms=now,
            updated_ms=now,
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
            payload_json=dumps({"requestId": task.request_id}),
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
                if self.dispatcher is not None and index + 1 < len(descriptions):
                    # Other replicas answer GET /task from the store: show the progress.
                    await self._persist_task(task, task.state)
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
        records appended to ``objects``; else both written here). An operation another
        replica ran for us is recorded there. Never raises for the agent's or the cluster's
        failures (they are the outcome); StoreError when recording fails."""
        with account_logs(account):  # every line of its sending and waiting names it
            record = self._received_record(op_id, (spec, account, payload))
            # The agent gets the payload whole; the record holds it redacted (Secret data).
            # Nothing redacted (no Secret): the same JSON, encoded once.
            payload_json = record.payload_json if not has_secret(payload) else dumps(payload)
            if not recorded:
                await self._journal.write(record, "received")
            ended = self._ending(record, finals, objects)
            started = trio.current_time()
            deadline = started + self.wait_ms / 1000
            outcome = await self._send_local(ended, payload_json, deadline)
            if outcome is None and self.dispatcher is not None:
                outcome = await self.dispatcher.remote(ended, payload_json, deadline)
            if outcome is None:
                outcome = await ended.failed(
                    "NoAgent",
                    f"no agent serves account {account} now (its agent is disconnected); "
                    "nothing was sent",
                )
            self.statistics.note(account, spec.name, outcome, trio.current_time() - started)
            return outcome

    def _ending(
        self,
        record: OperationRecord,
        finals: list[tuple[OperationRecord, str]] | None,
        objects: list[list[EventRecord]] | None,
    ) -> Ending:
        return Ending(
            record,
            journal=self._journal,
            now_ms=self._now_ms,
            update_cache=self._update_cache,
            finals=finals,
            objects=objects,
        )

    async def _send_local(
        self, ended: Ending, payload_json: str, deadline: float, note: str = ""
    ) -> OperationOutcome | None:
        """Send to this replica's PRIMARY session of the account, wait until ``deadline``
        and record how it ended; None when there is none here (nothing sent or recorded)."""
        waiting = await self._link.send(ended.record, payload_json, deadline=deadline, note=note)
        if waiting is None:
            return None
        if not waiting.sent:
            return await ended.failed(
                "OperationTimeout", f"{note}not sent within {self.wait_ms} ms: too many in flight"
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

    async def _serve_dispatched(self, row: DispatchRecord, deadline: float) -> None:
        """The target's side of a dispatched operation (``Dispatcher``): send it to the local
        primary until ``deadline`` and write its end, the objects it returned and a
        notification to the origin, in one journal write."""
        with account_logs(row.account):
            payload_json = row.payload_json
            shown = payload_json
            if "Secret" in payload_json:  # cheap: most payloads hold none to redact
                payload = msgspec.json.decode(payload_json)
                if isinstance(payload, dict) and has_secret(payload):
                    shown = dumps(redacted_payload(payload))
            now = self._now_ms()
            record = OperationRecord(
                row.op_id, row.account, row.type, shown, "DISPATCHED", row.created_ms, now
            )
            finals: list[tuple[OperationRecord, str]] = []
            objects: list[list[EventRecord]] = []
            ended = self._ending(record, finals, objects)
            note = f"dispatched by replica {row.origin_replica}; on replica {self.owner_id}: "
            if deadline <= trio.current_time():
                await ended.failed(
                    "OperationTimeout", f"{note}taken after its deadline; nothing was sent"
                )
            elif await self._send_local(ended, payload_json, deadline, note) is None:
                await ended.failed(
                    "NoAgent",
                    f"{note}this replica no longer holds the account's primary agent stream (it "
                    "moved, or its agent disconnected); nothing was sent",
                )
            errors = await self._journal.write_all(
                finals, objects, notices=[result_notice(row.origin_replica, row.op_id)]
            )
            self._published(objects, errors)

    async def _received(self, ended: Ending, waiting: Outstanding) -> OperationOutcome:
        result = waiting.result
        assert result is not None
        # Each field read once: a betterproto attribute costs ~1.6 us here.
        ok, result_json, code = result.ok, result.result_json, result.error_code
        given_message = result.error_message
        elapsed_ms = int((trio.current_time() - waiting.sent_at) * 1000)
        agent = parse_result(ok, result_json, given_message, code)
        if agent.problem:
            log.warning("operation %s: %s", result.id, agent.problem)
        await ended.update_cache(cache_records(ended.record.account, agent.objects, agent.deleted))
        message = given_message or (agent.problem if not ok else "")
        if not ok and not message:
            message = f"the agent reported a failure with no message (code {code!r})"
        await ended.write(
            replace(
                ended.record,
                state="SUCCEEDED" if ok else "FAILED",
                updated_ms=self._now_ms(),
                result_json=redacted_result_json(result_json),
                error_message=message,
                error_code=code,
            ),
            f"{waiting.sent_note}; result received after {elapsed_ms} ms: "
            + ("ok" if ok else f"failed: {message}"),
        )
        if ok:
            return OperationOutcome(True, agent)
        return OperationOutcome(False, agent, error_name(code), message)

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
        verdict = self._link.answered(session, result)
        if not verdict:
            return
        if verdict == "refused":
            sent_to = self._link.outstanding[result.id].session_id
            log.warning(
                "operation %s: result from session %s refused: it was sent to session %s",
                result.id,
                session.session_id,
                sent_to,
                extra={"account": result.account},
            )
            await self._note(
                result.id,
                f"result from agent {session.agent_id} (session {session.session_id}) "
                f"refused: the operation was sent to session {sent_to}",
            )
            return
        if result.id.startswith("dynamic-"):
            log.info(
                "dynamic account %s: ok=%s %s", result.account, result.ok, result.error_message
            )
            return
        log.warning(
            "operation %s: late result from agent %s ignored",
            result.id,
            session.agent_id,
            extra={"account": result.account},
        )
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
        """A task from memory, else from the store. A RUNNING task this replica does not run
        is answered as stored while its owner replica lives; once the owner is gone (or this
        server restarted) it is failed, with the reason, and saved as such."""
        task = self._tasks.get(task_id)
        if task is not None:
            return task
        record = await self._store.get_operation(task_id)
        if record is None or record.type != TASK_TYPE:
            # Written by an earlier version: a running task lived in its first operation's row.
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
            why = await self._owner_gone(task)
            if not why:
                return task  # running on a live replica: not kept, it changes there
            task.fail("orchestration", *why, self._now_ms())
            await self._persist_task(task, task.state)
        self._remember(task)
        return task

    async def _owner_gone(self, task: Task) -> tuple[str, str] | None:
        """(cause, message) when no live replica runs ``task`` (RUNNING, not in memory)."""
        if task.owner_id == self.owner_id or self.dispatcher is None or not task.owner_id:
            return (
                "ServerRestarted",
                "the server restarted while this task was running; its operation may or may "
                "not have been applied",
            )
        stopped = await self.dispatcher.owner_stopped(task.owner_id, task.start_time_ms)
        if not stopped:
            return None
        return (
            "ReplicaStopped",
            f"the replica {task.owner_id} running this task {stopped} while it was running; "
            "its operation may or may not have been applied",
        )

    def recent_tasks(self, limit: int = 100) -> list[Task]:
        """The newest tasks in memory, newest first."""
        return list(reversed(self._tasks.values()))[:limit]

    async def operation_view(self, op_id: str) -> dict[str, Any] | None:
        record = await self._store.get_operation(op_id)
        if record is None or record.type == TASK_TYPE:
            return None
        return operation_json(record, await self._store.operation_history(op_id))

    async def list_operations(self, account: str | None, limit: int) -> list[dict[str, Any]]:
        # Task rows share the table; each task has >= 1 operation row, so the newest 2N rows
        # hold at least the newest N operations.
        records = await self._store.list_operations(account=account, limit=min(20_000, 2 * limit))
        views: list[dict[str, Any]] = []
        for record in records:
            if record.type != TASK_TYPE and len(views) < limit:
                views.append(operation_json(record, await self._store.operation_history(record.id)))
        return views

    def new_operation_id(self) -> str:
        return str(uuid.uuid4())

    def check_account(self, account: str) -> None:
        if self._accounts.get(account) is None:
            raise UnknownCredentials(account, sorted(a.name for a in self._accounts.list()))

    async def known_account(self, account: str) -> bool:
        """Whether ``account`` is known here, reading it from the store first when replicas
        share it (another replica's agent may have registered it)."""
        if self._accounts.get(account) is None and self.dispatcher is not None:
            await self._accounts.refresh([account])
        return self._accounts.get(account) is not None

    @property
    def in_flight(self) -> int:
        return len(self._link.outstanding)

    @property
    def running_tasks(self) -> int:
        return self._running
