"""How one operation ended: the outcome a task reads, and the writing of that end.

An operation ends in one of three places: on this replica (its agent answered, or the
service gave up), on another replica that holds the account's stream (its stored record is
the end: ``outcome_of``), or, for a task, in the one write of the task's end (``Ending`` with
``finals``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from wire import EventRecord

from ..store import OperationRecord
from ._journal import OperationJournal
from ._results import AgentResult, error_name, parse_result

__all__ = ["ENDED_STATES", "Ending", "OperationOutcome", "outcome_of"]

ENDED_STATES = frozenset({"SUCCEEDED", "FAILED"})


@dataclass(frozen=True, slots=True)
class OperationOutcome:
    """How one operation ended: ``error`` is the class-like name, ``message`` the reason."""

    ok: bool
    agent: AgentResult
    error: str = ""
    message: str = ""


def outcome_of(record: OperationRecord) -> OperationOutcome:
    """The outcome an ended record (SUCCEEDED or FAILED) stands for: what the task of
    another replica reads when this one wrote the end."""
    ok = record.state == "SUCCEEDED"
    agent = parse_result(ok, record.result_json, record.error_message, record.error_code)
    if ok:
        return OperationOutcome(True, agent)
    return OperationOutcome(False, agent, error_name(record.error_code), record.error_message)


class Ending:
    """Writes how the operation of ``record`` ended: now, or into the caller's ``finals``
    (and its objects into ``objects``) for the caller to write with the task's end."""

    def __init__(
        self,
        record: OperationRecord,
        *,
        journal: OperationJournal,
        now_ms: Callable[[], int],
        update_cache: Callable[[list[EventRecord]], Awaitable[None]],
        finals: list[tuple[OperationRecord, str]] | None = None,
        objects: list[list[EventRecord]] | None = None,
    ) -> None:
        self.record = record
        self.now_ms = now_ms
        self._journal = journal
        self._update_cache = update_cache
        self.finals = finals
        self.objects = objects if finals is not None else None

    async def write(self, record: OperationRecord, message: str) -> None:
        if self.finals is not None:
            self.finals.append((record, message))
        else:
            await self._journal.write(record, message)

    async def update_cache(self, records: list[EventRecord]) -> None:
        if not records:
            return
        if self.objects is not None:
            self.objects.append(records)
        else:
            await self._update_cache(records)

    async def failed(self, error: str, message: str) -> OperationOutcome:
        await self.write(
            replace(
                self.record,
                state="FAILED",
                updated_ms=self.now_ms(),
                error_message=message,
                error_code=error,
            ),
            f"failed: {message}",
        )
        return OperationOutcome(False, AgentResult(ok=False), error, message)
