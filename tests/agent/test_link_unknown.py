"""Forward compatibility, agent side (issue #12, point 6): a message kind or field from the
server that this version does not know is skipped, counted in the agent's
kubesvc_protocol_unknown_fields_total, logged once per field number, and the session stays up.

The peer is a server written here with wire.serve that sends hand-built frames, as the next
version's server would; the agent side is the real Link.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import pytest
import trio

import wire
from agent import AgentStatus, Backoff
from agent._metrics import metrics_registry, render_metrics
from agent.link._link import Link
from budget import ByteBudget, EventSender
from wire import messages as m

from ..wire._loop import in_loop
from ..wire.protobuf_bytes import as_sent, bytes_field, varint_field
from ._link_env import loopback_link

# ServerMessage field 30: a kind of message from the future, with a body of its own.
FUTURE_KIND = bytes_field(30, bytes_field(1, b"a message kind this agent does not know"))


def _welcome_with_unknown_fields() -> bytes:
    """A Welcome making k1 PRIMARY, with field 20 unknown in Welcome and field 9 unknown in
    its AccountAssignment."""
    assignment = bytes(m.AccountAssignment(name="k1", role=m.Role.PRIMARY)) + varint_field(9, 1)
    welcome = bytes(m.Welcome(session_token="t" * 32, server_id="future-server"))
    return bytes_field(1, welcome + bytes_field(4, assignment) + bytes_field(20, b"new"))


class _FutureServer:
    """Answers Hello with frames of a newer protocol, then sends Operations (and a Role from the
    future) and records the results the agent sends back."""

    def __init__(self) -> None:
        self.sessions = 0
        self.results: list[m.OperationResult] = []
        self.done = trio.Event()

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        self.sessions += 1
        first = await stream.receive()
        assert first.hello.agent_id == "agent-future"
        await stream.send(as_sent(m.ServerMessage, FUTURE_KIND))  # before the Welcome
        await stream.send(as_sent(m.ServerMessage, _welcome_with_unknown_fields()))
        await stream.send(as_sent(m.ServerMessage, FUTURE_KIND))
        await stream.send(as_sent(m.ServerMessage, bytes_field(31, b"")))  # another, empty
        await stream.send(m.ServerMessage(heartbeat=m.Heartbeat(sent_at_ms=1)))
        await stream.send(m.ServerMessage(operation=m.Operation(id="op-1", account="k1")))
        await self._result(stream)
        # A Role value from the future (7): the account runs nothing, the session goes on.
        future_role = m.AccountAssignment(name="k1", role=7)
        await stream.send(m.ServerMessage(assignment=m.Assignment(accounts=[future_role])))
        await stream.send(m.ServerMessage(operation=m.Operation(id="op-2", account="k1")))
        await self._result(stream)
        self.done.set()
        await trio.sleep_forever()

    async def _result(self, stream: wire.ServerStream) -> None:
        while True:
            message = await stream.receive()
            if message.is_set("operation_result"):
                self.results.append(message.operation_result)
                return


@in_loop
async def test_unknown_kinds_and_fields_from_the_server_are_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agent.link")
    future = _FutureServer()
    primary, stopped = trio.Event(), trio.Event()

    async def accounts() -> list[m.AccountInfo]:
        return [m.AccountInfo(name="k1")]

    async def runner(
        name: str,
        resume: Mapping[tuple[str, str, str], str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        primary.set()
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    async def operations(operation: m.Operation) -> m.OperationResult:
        return m.OperationResult(id=operation.id, account=operation.account, ok=True)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, future.handler, "127.0.0.1", 0)
            settings = loopback_link(
                port, "agent-future", backoff=Backoff(base=0.05, jitter=0, max_delay=0.1)
            )
            link = Link(
                settings,
                ByteBudget(1 << 20),
                hello_accounts=accounts,
                runner=runner,
                max_resume_age_ms=lambda name: 0,
                operations=operations,
            )
            await nursery.start(link.run)
            await primary.wait()  # the Welcome with unknown fields was taken
            await future.done.wait()  # messages after the unknown ones still flow
            assert link.status.connected
            assert link.status.roles == {"k1": "UNKNOWN(7)"}
            await stopped.wait()  # the unknown role stopped the account's runner
            nursery.cancel_scope.cancel()
    assert [(r.id, r.ok) for r in future.results] == [("op-1", True), ("op-2", True)]
    assert (future.sessions, link.status.sessions, link.status.disconnections) == (1, 1, 0)
    assert link.status.unknown_fields.counts == {
        ("ServerMessage", 30): 2,
        ("Welcome", 20): 1,
        ("AccountAssignment", 9): 1,
        ("ServerMessage", 31): 1,
    }
    logged = [r.getMessage() for r in caplog.records if "sent field" in r.getMessage()]
    assert len(logged) == 4, logged  # once per (message, field number)
    assert any("role 7, which this agent does not know" in r.getMessage() for r in caplog.records)
    metrics = render_metrics(metrics_registry(AgentStatus(link=link.status), process=False))
    family = "kubesvc_protocol_unknown_fields_total"
    assert f'{family}{{field="30",message="ServerMessage"}} 2.0'.encode() in metrics
    assert f'{family}{{field="9",message="AccountAssignment"}} 1.0'.encode() in metrics
