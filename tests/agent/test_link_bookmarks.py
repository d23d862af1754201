"""Bookmarks alone wait for company (LinkSettings.bookmark_linger_seconds): a quiet agent's
watches each send one a minute, and one batch per bookmark cost a thousand watches ~1 ms each;
held, they travel together, and at once with the next object event."""

from __future__ import annotations

import json
from collections.abc import Mapping

import betterproto
import trio

import wire
from agent.watch import BookmarkKey
from budget import Entry, EntryKind, EventSender
from wire import EventRecord, EventType, messages

from ..wire._loop import in_loop
from ._link_env import k1_link, loopback_link, welcome_k1


def _pod(name: str) -> Entry:
    body = json.dumps({"metadata": {"name": name, "namespace": "a"}}).encode()
    record = EventRecord(
        int(EventType.ADDED), "k1", "v1", "Pod", "a", name, f"u-{name}", "5", body, ""
    )
    return Entry(("k1", "v1", "Pod", "a", name), EntryKind.UPSERT_ADDED, 100 + len(body), record)


def _bookmark(kind: str, rv: str) -> Entry:
    record = EventRecord(int(EventType.BOOKMARK), "k1", "v1", kind, "", "", "", rv, b"", "")
    return Entry(BookmarkKey("k1", "v1", kind, ""), EntryKind.BOOKMARK, 100, record)


class _Recorder:
    """Makes k1 PRIMARY, acknowledges every batch, records each batch's (kind, name)s."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, str]]] = []
        self.changed = trio.Event()

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await welcome_k1(stream)
        while True:
            _, body = betterproto.which_one_of(await stream.receive(), "message")
            if isinstance(body, messages.EventBatch):
                records = wire.decode_events(body.records)
                self.batches.append([(r.kind, r.name) for r in records])
                await stream.send(messages.ServerMessage(ack=messages.Ack(seq=body.seq)))
                self.changed.set()
                self.changed = trio.Event()


async def _run(
    linger: float, groups: list[list[Entry]], batches: int
) -> list[list[tuple[str, str]]]:
    """Send ``groups`` one after the other (a checkpoint apart) through a real Link whose
    bookmarks linger ``linger`` s; the first ``batches`` batches the server got."""
    recorder = _Recorder()

    async def runner(
        name: str,
        resume: Mapping[tuple[str, str, str], str],
        send: EventSender,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        task_status.started()
        for group in groups:
            await send.send_many(group)
            # Apart in time (not a wait for anything): past the link's 5 ms linger, without
            # the hold each group would be a batch of its own.
            await trio.sleep(0.05)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(wire.serve, recorder.handler, "127.0.0.1", 0)
        settings = loopback_link(port, "agent-bookmarks", bookmark_linger_seconds=linger)
        link = k1_link(settings, runner)
        nursery.start_soon(link.run)
        while len(recorder.batches) < batches:
            await recorder.changed.wait()
        nursery.cancel_scope.cancel()
    return recorder.batches[:batches]


@in_loop
async def test_bookmarks_wait_for_the_next_object_event_and_go_with_it() -> None:
    with trio.fail_after(20):
        groups = [[_bookmark("Pod", "7")], [_bookmark("ConfigMap", "8")], [_pod("p")]]
        batches = await _run(60.0, groups, 1)
    assert batches == [[("Pod", ""), ("ConfigMap", ""), ("Pod", "p")]]


@in_loop
async def test_bookmarks_alone_go_together_after_the_linger() -> None:
    with trio.fail_after(20):
        groups = [[_bookmark("Pod", "7")], [_bookmark("ConfigMap", "8")]]
        batches = await _run(3.0, groups, 1)
    assert batches == [[("Pod", ""), ("ConfigMap", "")]]
