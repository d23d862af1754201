"""Batch sequence numbers (docs/protocol.md, "Sequence numbers and acks"): seqs start at 1 in
each session and grow by exactly 1; a gap or a repeat ends the call with ABORTED, applies
nothing of the offending batch, and keeps every batch acknowledged before it. A new session
starts again at 1."""

from __future__ import annotations

import pytest
import trio

import wire
from server import RunningServer

from ..wire._loop import in_loop
from .test_grpc import (
    batch,
    bearer,
    drain,
    make_config,
    pod,
    receive_kind,
    running,
    token,
    welcomed,
)


async def _names(server: RunningServer) -> list[tuple[str, str]]:
    page = await server.state.store.query_objects()
    return sorted((o.name, o.resource_version) for o in page.objects)


@pytest.mark.parametrize(
    ("second_seq", "what"),
    [(3, "a gap"), (1, "a repeat"), (0, "a step back to 0")],
)
@in_loop
async def test_a_seq_that_does_not_follow_ends_the_call_with_aborted(
    second_seq: int, what: str
) -> None:
    with trio.fail_after(20):
        async with running(make_config()) as server:
            meta = bearer(token())
            async with welcomed(server.grpc_port, meta) as s:
                await s.send(batch(1, [pod("acked", "1")]))
                assert (await receive_kind(s, "ack")).seq == 1
                await s.send(batch(second_seq, [pod("refused", "2")]))
                with pytest.raises(wire.RemoteRefused) as info:
                    await drain(s)
            assert info.value.status is wire.Status.ABORTED, what
            assert f"batch seq {second_seq} does not follow seq 1" in info.value.message
            assert "expected 2" in info.value.message
            # The acknowledged batch is kept, the offending one applied nothing.
            assert await _names(server) == [("acked", "1")]

            # The agent's next session numbers from 1 again and is accepted.
            async with welcomed(server.grpc_port, meta) as s:
                await s.send(batch(1, [pod("resent", "3")]))
                assert (await receive_kind(s, "ack")).seq == 1
                await s.send(batch(2, [pod("next", "4")]))
                assert (await receive_kind(s, "ack")).seq == 2
            assert await _names(server) == [("acked", "1"), ("next", "4"), ("resent", "3")]


@in_loop
async def test_the_first_batch_of_a_session_must_be_seq_1() -> None:
    with trio.fail_after(20):
        async with running(make_config()) as server:
            meta = bearer(token())
            async with welcomed(server.grpc_port, meta) as s:
                # What an agent that carried its seq over from the previous session would send.
                await s.send(batch(5, [pod("x", "1")]))
                with pytest.raises(wire.RemoteRefused) as info:
                    await drain(s)
            assert info.value.status is wire.Status.ABORTED
            assert "expected 1" in info.value.message
            assert await _names(server) == []
