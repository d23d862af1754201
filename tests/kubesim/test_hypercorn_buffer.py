"""kubesim's Hypercorn changes (kubesim/_hypercorn.py): the bounded HTTP/2 stream buffer (a
writer waits until the sender has taken the buffer below the low-water mark, so a stream never
holds more than the high-water mark plus one write; Hypercorn's own push let it grow without
limit), and the keep-alive task that ends with its connection."""

from __future__ import annotations

import httpx
import trio
from hypercorn.protocol.h2 import BUFFER_HIGH_WATER, BUFFER_LOW_WATER, StreamBuffer
from hypercorn.trio.worker_context import EventWrapper

import kubesim
from kubesim._hypercorn import _pop_as_frames, _push

from .._wait import wait_until

CHUNK = 256 * 1024


async def test_a_writer_waits_until_the_sender_drains_the_buffer() -> None:
    buffer = StreamBuffer(EventWrapper)
    pushed = 0
    largest = 0

    async def writer() -> None:
        nonlocal pushed, largest
        for _ in range(8):
            await _push(buffer, b"x" * CHUNK)
            pushed += 1
            largest = max(largest, len(buffer.buffer))

    frames: list[bytearray] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert pushed == 0  # the first write is held: the buffer is over the high-water mark
        assert len(buffer.buffer) == CHUNK
        await _pop_as_frames(buffer, 64 * 1024, 16 * 1024, lambda frame: frames.append(frame))
        await trio.testing.wait_all_tasks_blocked()
        assert pushed == 0  # 192 KiB left: still over the low-water mark
        while pushed < 8:
            await _pop_as_frames(buffer, 64 * 1024, 16 * 1024, lambda frame: frames.append(frame))
            await trio.testing.wait_all_tasks_blocked()
            assert len(buffer.buffer) < BUFFER_HIGH_WATER + CHUNK
    assert largest < BUFFER_LOW_WATER + CHUNK
    assert all(len(frame) <= 16 * 1024 for frame in frames)


async def test_closing_the_stream_lets_a_waiting_writer_go() -> None:
    buffer = StreamBuffer(EventWrapper)
    done = trio.Event()

    async def writer() -> None:
        await _push(buffer, b"x" * CHUNK)
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()
        await buffer.close()
        with trio.fail_after(5):
            await done.wait()


async def test_a_connection_ends_when_its_client_hangs_up() -> None:
    # The keep-alive timeout is an hour; the connection's idle task must end with the
    # connection, not hold it (and its bookkeeping) until then.
    with trio.fail_after(10):
        async with kubesim.open_server(kubesim.Cluster()) as server:
            token = server.users["admin"].token
            async with httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{server.port}",
                headers={"authorization": f"Bearer {token}"},
            ) as http:
                assert (await http.get("/version")).status_code == 200
                assert server.open_connections == 1
            await wait_until(
                lambda: server.open_connections == 0, what="the connection's bookkeeping ended"
            )
