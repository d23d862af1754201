"""Watch notices travel in order with the events (agent/watch/_notices.py): the real Link cuts
a budget batch at a notice, sends the records before it as one EventBatch, the notice as a
KindStatus or WatchScope, then the rest; the budget's bytes come back with the last Ack."""

from __future__ import annotations

import json
from collections.abc import Mapping

import betterproto
import trio

import wire
from agent.watch._notices import (
    GONE_FROM_DISCOVERY,
    KindNotice,
    ScopeNotice,
    notice_entry,
    notice_messages,
)
from budget import ByteBudget, Entry, EntryKind, EventSender
from wire import EventRecord, EventType, messages

from .._wait import wait_until
from ..wire._loop import in_loop
from ._link_env import k1_link, loopback_link, welcome_k1


def pod(name: str) -> Entry:
    body = json.dumps({"metadata": {"name": name, "namespace": "a"}}).encode()
    record = EventRecord(
        int(EventType.ADDED), "k1", "v1", "Pod", "a", name, f"u-{name}", "5", body, ""
    )
    return Entry(("k1", "v1", "Pod", "a", name), EntryKind.UPSERT_ADDED, 100 + len(body), record)


FORBIDDEN = KindNotice("k1", "v1", "ConfigMap", "", False, 403, "403 Forbidden: no")
GONE = KindNotice("k1", "example.com/v1", "Widget", "a", False, 0, GONE_FROM_DISCOVERY)
SCOPE = ScopeNotice("k1", (("v1", "Pod"),), ("a",), ("b",))


class Recorder:
    """A server that makes k1 PRIMARY, acknowledges every batch and records what came."""

    def __init__(self, expected: int) -> None:
        self.seen: list[tuple[str, object]] = []
        self.expected = expected
        self.done = trio.Event()

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await welcome_k1(stream)
        while True:
            name, body = betterproto.which_one_of(await stream.receive(), "message")
            if isinstance(body, messages.EventBatch):
                records = wire.decode_events(body.records)
                self.seen.append(("event_batch", [r.name for r in records]))
                await stream.send(messages.ServerMessage(ack=messages.Ack(seq=body.seq)))
            elif isinstance(body, messages.KindStatus):
                self.seen.append((name, [(k.kind, k.scope, k.code, k.reason) for k in body.kinds]))
            elif isinstance(body, messages.WatchScope):
                kinds = [(k.api_version, k.kind) for k in body.kinds]
                self.seen.append((name, (kinds, body.namespaces, body.omit_namespaces)))
            if len(self.seen) >= self.expected:
                self.done.set()


@in_loop
async def test_notices_cut_batches_and_keep_their_place() -> None:
    recorder = Recorder(expected=4)
    budget = ByteBudget(1 << 20)
    sent = trio.Event()

    async def runner(
        name: str,
        resume: Mapping[tuple[str, str, str], str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        # One group: the link takes it as one budget batch.
        entries = [pod("a"), notice_entry(FORBIDDEN), notice_entry(GONE), pod("b")]
        await send.send_many([*entries, notice_entry(SCOPE)])
        sent.set()
        await trio.sleep_forever()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, recorder.handler, "127.0.0.1", 0)
            settings = loopback_link(port, "agent-notices")
            link = k1_link(settings, runner, budget)
            nursery.start_soon(link.run)
            await sent.wait()
            await recorder.done.wait()
            assert recorder.seen == [
                ("event_batch", ["a"]),
                (
                    "kind_status",  # two notices in a row: one message
                    [
                        ("ConfigMap", "", 403, "403 Forbidden: no"),
                        ("Widget", "a", 0, GONE_FROM_DISCOVERY),
                    ],
                ),
                ("event_batch", ["b"]),
                ("watch_scope", ([("v1", "Pod")], ["a"], ["b"])),
            ]
            # Every byte comes back once the batch's last EventBatch is acknowledged.
            await wait_until(lambda: budget.statistics().in_use == 0, what="the budget released")
            assert link.status.batches_sent == 2
            nursery.cancel_scope.cancel()


def test_notice_messages_group_runs_of_kind_states() -> None:
    out = notice_messages([FORBIDDEN, GONE, SCOPE, FORBIDDEN])
    assert [betterproto.which_one_of(m, "message")[0] for m in out] == [
        "kind_status",
        "watch_scope",
        "kind_status",
    ]
    assert len(out[0].kind_status.kinds) == 2
    entry = notice_entry(SCOPE)
    assert (entry.kind, entry.key) == (EntryKind.BARRIER, None)
