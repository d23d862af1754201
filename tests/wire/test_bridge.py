"""The bridge with a real client and a real server on 127.0.0.1 under trio (real time)."""

from __future__ import annotations

import functools

import pytest
import trio

import wire
from wire import messages as m

from .._wait import wait_until
from ._loop import in_loop


def batch(seq: int, records: bytes = b"") -> m.AgentMessage:
    return m.AgentMessage(event_batch=m.EventBatch(seq=seq, records=records, count=0))


async def ack_handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
    """Acks every batch until the client finishes."""
    while True:
        try:
            message = await stream.receive()
        except wire.EndOfStream:
            return
        await stream.send(m.ServerMessage(ack=m.Ack(seq=message.event_batch.seq)))


@in_loop
async def test_round_trip_with_metadata_and_peer() -> None:
    seen: list[wire.CallInfo] = []

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        seen.append(call)
        hello = await stream.receive()
        await stream.send(
            m.ServerMessage(welcome=m.Welcome(session_token="s-1", server_id=hello.hello.agent_id))
        )
        await ack_handler(stream, call)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection(
                "127.0.0.1", port, metadata={"authorization": "Bearer t0k3n"}
            ) as stream:
                await stream.send(m.AgentMessage(hello=m.Hello(protocol_version=1, agent_id="a-1")))
                welcome = await stream.receive()
                assert welcome.welcome.session_token == "s-1"
                assert welcome.welcome.server_id == "a-1"
                for seq in range(1, 20):
                    await stream.send(batch(seq, b"r" * seq))
                    assert (await stream.receive()).ack.seq == seq
                await stream.end()
                with pytest.raises(wire.EndOfStream):
                    await stream.receive()
                with pytest.raises(wire.EndOfStream):  # sticky: the call is over
                    await stream.receive()
            nursery.cancel_scope.cancel()
    (call,) = seen
    assert call.metadata["authorization"] == "Bearer t0k3n"
    assert call.peer is not None
    assert call.peer[0] == "127.0.0.1"
    assert call.peer_cert is None


@in_loop
async def test_several_concurrent_streams() -> None:
    async def client(port: int, index: int) -> None:
        async with wire.open_connection("127.0.0.1", port) as stream:
            for seq in range(index * 100, index * 100 + 30):
                await stream.send(batch(seq))
                assert (await stream.receive()).ack.seq == seq
            await stream.end()
            with pytest.raises(wire.EndOfStream):
                await stream.receive()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, ack_handler, "127.0.0.1", 0)
            async with trio.open_nursery() as clients:
                for index in range(5):
                    clients.start_soon(client, port, index)
            nursery.cancel_scope.cancel()


@in_loop
async def test_refuse_reaches_the_client_with_status_and_message() -> None:
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        if call.metadata.get("authorization") != "Bearer good":
            raise wire.Refuse(wire.Status.UNAUTHENTICATED, "bad token for agent x")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection(
                "127.0.0.1", port, metadata={"authorization": "Bearer bad"}
            ) as stream:
                with pytest.raises(wire.RemoteRefused) as info:
                    await stream.receive()
                assert info.value.status is wire.Status.UNAUTHENTICATED
                assert info.value.message == "bad token for agent x"
                with pytest.raises(wire.RemoteRefused):  # sticky
                    await stream.send(batch(1))
            nursery.cancel_scope.cancel()


@in_loop
async def test_refuse_after_messages_were_exchanged() -> None:
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()
        await stream.send(m.ServerMessage(ack=m.Ack(seq=1)))
        raise wire.Refuse(wire.Status.PERMISSION_DENIED, "account prod belongs to another cluster")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream.send(batch(1))
                assert (await stream.receive()).ack.seq == 1
                with pytest.raises(wire.RemoteRefused) as info:
                    await stream.receive()
                assert info.value.status is wire.Status.PERMISSION_DENIED
                assert "another cluster" in info.value.message
            nursery.cancel_scope.cancel()


@in_loop
async def test_oversize_message_is_refused_on_both_sides() -> None:
    limit = 64 * 1024
    big = batch(1, b"x" * (limit + 1))
    errors: list[BaseException] = []

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        try:
            await stream.receive()
        except wire.MessageTooLarge as exc:
            errors.append(exc)
            raise

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(wire.serve, handler, "127.0.0.1", 0, max_message_size=limit)
            )
            # Our own limit: refused before anything is sent; the stream stays usable.
            async with wire.open_connection("127.0.0.1", port, max_message_size=limit) as stream:
                with pytest.raises(wire.MessageTooLarge, match=r"outgoing message of 65\d+ bytes"):
                    await stream.send(big)
                await stream.end()
                with pytest.raises(wire.EndOfStream):
                    await stream.receive()
            # The server's limit: the call ends with RESOURCE_EXHAUSTED and says why.
            async with wire.open_connection(
                "127.0.0.1", port, max_message_size=4 * limit
            ) as stream:
                await stream.send(big)
                with pytest.raises(wire.RemoteRefused) as info:
                    await stream.receive()
                assert info.value.status is wire.Status.RESOURCE_EXHAUSTED
                assert f"exceeds the limit of {limit} bytes" in info.value.message
            nursery.cancel_scope.cancel()
    (error,) = errors
    assert "incoming message" in str(error)


@in_loop
async def test_client_cancellation_resets_the_stream() -> None:
    server_saw: list[BaseException] = []
    handler_started = trio.Event()
    handler_done = trio.Event()

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        handler_started.set()
        try:
            await stream.receive()
        except wire.WireError as exc:
            server_saw.append(exc)
        handler_done.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await handler_started.wait()
                with trio.move_on_after(0.2) as scope:
                    await stream.receive()
                assert scope.cancelled_caught
                with pytest.raises(wire.StreamClosed, match="cancelled"):
                    await stream.send(batch(1))
            await handler_done.wait()
            nursery.cancel_scope.cancel()
    assert isinstance(server_saw[0], wire.ConnectionLost)


@in_loop
async def test_a_receive_cancelled_between_messages_leaves_the_call_usable() -> None:
    # Nothing of a message was read, so nothing is half done: the handler may still answer
    # and end the call with its own status (the server ends sessions this way, and the agent
    # must learn why).
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        with trio.move_on_after(0.2):
            await stream.receive()
        await stream.send(m.ServerMessage(ack=m.Ack(seq=1)))
        raise wire.Refuse(wire.Status.UNAVAILABLE, "session ended: by an operator")

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                first = await stream.receive()
                assert first.ack.seq == 1
                with pytest.raises(wire.RemoteRefused, match="by an operator"):
                    await stream.receive()
            nursery.cancel_scope.cancel()


@in_loop
async def test_server_shutdown_is_connection_lost_for_the_client() -> None:
    handler_started = trio.Event()

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        handler_started.set()
        await trio.sleep_forever()

    with trio.fail_after(10):
        async with trio.open_nursery() as outer:
            server_scope = trio.CancelScope()

            async def run_server(task_status: trio.TaskStatus[int]) -> None:
                with server_scope:
                    await wire.serve(handler, "127.0.0.1", 0, task_status=task_status)

            port = await outer.start(run_server)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await handler_started.wait()
                server_scope.cancel()
                with pytest.raises(wire.ConnectionLost):
                    await stream.receive()


@in_loop
async def test_connect_to_a_closed_port_is_connection_lost() -> None:
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    with trio.fail_after(10), pytest.raises(wire.ConnectionLost, match=f"127.0.0.1:{port}"):
        async with wire.open_connection("127.0.0.1", port):
            pass


@in_loop
async def test_malformed_protobuf_from_the_client_is_refused() -> None:
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()

    # An EventBatch field whose body ends in the middle of a varint.
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream._op(stream._aio_send, [b"\x12\x03\x08"])
                with pytest.raises(wire.RemoteRefused) as info:
                    await stream.receive()
                assert info.value.status is wire.Status.INVALID_ARGUMENT
                assert "not a valid AgentMessage" in info.value.message
            nursery.cancel_scope.cancel()


class HandlerBug(Exception):
    pass


@in_loop
async def test_a_handler_bug_ends_the_call_with_internal_and_propagates_out_of_serve() -> None:
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()
        raise HandlerBug("oops")

    refused: list[wire.RemoteRefused] = []
    with trio.fail_after(10), pytest.RaisesGroup(HandlerBug, flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream.send(batch(1))
                try:
                    await stream.receive()
                except wire.RemoteRefused as exc:
                    refused.append(exc)
    (error,) = refused
    assert error.status is wire.Status.INTERNAL
    assert error.message == "internal server error"  # no details of the bug leak to the client


def test_refuse_needs_a_non_ok_status() -> None:
    with pytest.raises(ValueError, match="non-OK"):
        wire.Refuse(wire.Status.OK)


def test_every_exception_of_the_package_is_a_wire_error() -> None:
    # One tree per package: `except wire.WireError` covers Refuse too (the bridge and the
    # server's session code test for Refuse first).
    for name in wire.__all__:
        value = getattr(wire, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, wire.WireError), name


@in_loop
async def test_bad_records_reach_the_client_as_invalid_argument_naming_the_record() -> None:
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        message = await stream.receive()
        wire.decode_events(message.event_batch.records)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream.send(batch(1, b"\x91\x93\x01\x02\x03"))
                with pytest.raises(wire.RemoteRefused) as info:
                    await stream.receive()
            nursery.cancel_scope.cancel()
    assert info.value.status is wire.Status.INVALID_ARGUMENT
    assert "$[0]" in info.value.message


@in_loop
async def test_send_after_end_is_refused_locally_and_receiving_goes_on() -> None:
    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        with pytest.raises(wire.EndOfStream):
            await stream.receive()
        await stream.send(m.ServerMessage(ack=m.Ack(seq=7)))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream.end()
                with pytest.raises(wire.StreamClosed, match="after end"):
                    await stream.send(batch(1))
                assert (await stream.receive()).ack.seq == 7
                with pytest.raises(wire.EndOfStream):
                    await stream.receive()
            nursery.cancel_scope.cancel()


@in_loop
async def test_client_reset_wakes_a_receive_while_another_task_sends() -> None:
    """A handler receives in one task and sends in another; the client going away must wake
    the pending receive even though sends started and finished meanwhile."""
    outcome: list[BaseException] = []
    sent = trio.Event()
    handler_done = trio.Event()

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        async def sender() -> None:
            for seq in range(5):
                await stream.send(m.ServerMessage(ack=m.Ack(seq=seq)))
            sent.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            try:
                await stream.receive()
            except wire.WireError as exc:
                outcome.append(exc)
            handler_done.set()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                for seq in range(5):
                    assert (await stream.receive()).ack.seq == seq
                await sent.wait()
            await handler_done.wait()
            nursery.cancel_scope.cancel()
    assert isinstance(outcome[0], wire.ConnectionLost)


@in_loop
async def test_concurrent_sends_do_not_interleave() -> None:
    received: list[int] = []

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        while True:
            try:
                message = await stream.receive()
            except wire.EndOfStream:
                return
            received.append(len(message.event_batch.records))

    sizes = [300_000, 5, 200_000, 7, 100_000, 3]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                async with trio.open_nursery() as senders:
                    for size in sizes:
                        senders.start_soon(stream.send, batch(1, b"z" * size))
                await stream.end()
                with pytest.raises(wire.EndOfStream):
                    await stream.receive()
            nursery.cancel_scope.cancel()
    assert sorted(received) == sorted(sizes)


@in_loop
async def test_backpressure_a_server_that_does_not_read_stops_the_sender() -> None:
    """HTTP/2 credit goes back only when the handler calls receive(): a sender facing a handler
    that does not read blocks once the stream window (4 MiB) is full, and resumes after."""
    start_reading = trio.Event()
    received = 0

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        nonlocal received
        await start_reading.wait()
        while True:
            try:
                await stream.receive()
            except wire.EndOfStream:
                return
            received += 1

    chunk = 256 * 1024
    total = 40  # 10 MiB: well over the window
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                sent = 0

                async def sender() -> None:
                    nonlocal sent
                    while sent < total:
                        await stream.send(batch(sent, b"b" * chunk))
                        sent += 1

                async with trio.open_nursery() as senders:
                    senders.start_soon(sender)
                    await wait_until(lambda: sent >= 8, what="the sender filled most of a window")
                    # A stall is "no progress for a while": wait until the count stops moving
                    # (blocked on the window, or, were backpressure broken, done at 40).
                    stalled_at = -1
                    while sent != stalled_at:
                        stalled_at = sent
                        await trio.sleep(0.3)
                    assert stalled_at * chunk <= 5 * 2**20
                    start_reading.set()
                await stream.end()
                with pytest.raises(wire.EndOfStream):
                    await stream.receive()
            nursery.cancel_scope.cancel()
    assert received == total


@in_loop
async def test_the_server_refuses_an_oversize_message_without_reading_its_body() -> None:
    """The length prefix is checked first: a 20 MiB message to a server with a 64 KiB limit is
    refused while the client is still blocked sending it (the server never takes the rest)."""

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        await stream.receive()

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(wire.serve, handler, "127.0.0.1", 0, max_message_size=2**16)
            )
            async with wire.open_connection(
                "127.0.0.1", port, max_message_size=64 * 2**20
            ) as stream:
                with pytest.raises(wire.RemoteRefused) as info:
                    await stream.send(batch(1, b"h" * (20 * 2**20)))
            nursery.cancel_scope.cancel()
    assert info.value.status is wire.Status.RESOURCE_EXHAUSTED
    assert "exceeds the limit of 65536 bytes" in info.value.message


async def test_using_the_bridge_outside_open_loop_says_what_is_missing() -> None:
    with trio.fail_after(5):
        with pytest.raises(RuntimeError, match=r"inside `async with wire.open_loop\(\)`"):
            async with wire.open_connection("127.0.0.1", 9):
                pass
        with pytest.raises(RuntimeError, match=r"wire\.serve needs"):
            await wire.serve(ack_handler, "127.0.0.1", 0)


@in_loop
async def test_event_batches_and_acks_on_the_fast_paths() -> None:
    """send_event_batch is send(AgentMessage{event_batch}) on the wire; receive_ack_or_message
    gives an Ack as its seq and any other message whole."""

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        for _ in range(3):
            message = await stream.receive()
            await stream.send(m.ServerMessage(ack=m.Ack(seq=message.event_batch.seq)))
            assert message.event_batch.count == len(message.event_batch.records)
        await stream.send(m.ServerMessage(heartbeat=m.Heartbeat(sent_at_ms=7)))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                for seq in (1, 2, 2**40):
                    await stream.send_event_batch(seq, b"r" * (seq % 7), seq % 7)
                    assert await stream.receive_ack_or_message() == seq
                beat = await stream.receive_ack_or_message()
                assert isinstance(beat, m.ServerMessage)
                assert beat.heartbeat.sent_at_ms == 7
                with pytest.raises(ValueError, match="out of range"):
                    await stream.send_event_batch(-1, b"", 0)
            nursery.cancel_scope.cancel()


@in_loop
async def test_operation_results_sent_in_one_write_arrive_one_message_each() -> None:
    received: list[m.AgentMessage] = []
    results = [
        m.OperationResult(id=f"op-{n}", account="k", ok=n % 2 == 0, result_json="{}" * n)
        for n in range(5)
    ]

    async def handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
        for _ in range(len(results)):
            received.append(await stream.receive())
        await stream.send(m.ServerMessage(ack=m.Ack(seq=1)))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(wire.serve, handler, "127.0.0.1", 0, max_message_size=1024)
            )
            async with wire.open_connection("127.0.0.1", port, max_message_size=1024) as stream:
                # One too large: none of them is sent, and the stream stays usable.
                too_large = m.OperationResult(id="big", result_json="x" * 2048)
                with pytest.raises(wire.MessageTooLarge):
                    await stream.send_operation_results([results[0], too_large])
                await stream.send_operation_results([])
                await stream.send_operation_results(results[:3])
                await stream.send_operation_results(results[3:])
                assert (await stream.receive()).ack.seq == 1
            nursery.cancel_scope.cancel()
    assert [message.operation_result for message in received] == results
