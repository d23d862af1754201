"""The chaos test's TCP proxy (tests/e2e/chaos_proxy.py): its fault state with no I/O, then
the real thing on loopback in front of an echo server."""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from .chaos_proxy import Admission, ChaosProxy, LinkFaults, Mode


def _view(faults: LinkFaults) -> tuple[Mode, Admission, bool]:
    return faults.mode, faults.admit(), faults.may_forward()


def test_fault_state_machine() -> None:
    faults = LinkFaults()
    assert _view(faults) == (Mode.OPEN, Admission.CONNECT, True)
    faults.silence()
    assert _view(faults) == (Mode.SILENT, Admission.HOLD, False)
    faults.restore()
    assert _view(faults) == (Mode.OPEN, Admission.CONNECT, True)
    faults.silence()
    faults.cut()  # a silent link that does not come back
    assert _view(faults) == (Mode.DOWN, Admission.RESET, False)
    assert faults.cuts == 1
    faults.silence()  # a link that is down stays down
    assert _view(faults) == (Mode.DOWN, Admission.RESET, False)
    faults.restore()
    assert _view(faults) == (Mode.OPEN, Admission.CONNECT, True)


@dataclass
class Echo:
    """An upstream that echoes, and records how each of its connections ended."""

    endings: list[str] = field(default_factory=list)
    received: bytearray = field(default_factory=bytearray)
    ended: trio.Event = field(default_factory=trio.Event)

    async def handler(self, stream: trio.SocketStream) -> None:
        try:
            while data := await stream.receive_some(65536):
                self.received += data
                await stream.send_all(data)
            self.endings.append("eof")
        except trio.BrokenResourceError:
            self.endings.append("reset")
        finally:
            await stream.aclose()
            self.ended.set()
            self.ended = trio.Event()


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        assert chunk, f"EOF after {len(data)} of {size} bytes"
        data += chunk
    return bytes(data)


async def _assert_reset(stream: trio.SocketStream, what: str) -> None:
    """The peer reset ``stream`` (ECONNRESET), rather than closing it or sending data."""
    try:
        data = await stream.receive_some(10)
    except trio.BrokenResourceError:
        await stream.aclose()
        return
    await stream.aclose()
    raise AssertionError(f"{what}: expected a reset, got {data!r}")


async def _open_echo(nursery: trio.Nursery, echo: Echo) -> ChaosProxy:
    listeners = await nursery.start(trio.serve_tcp, echo.handler, 0)
    port = listeners[0].socket.getsockname()[1]
    proxy = ChaosProxy(("127.0.0.1", port))
    await nursery.start(proxy.serve)
    return proxy


async def test_forwards_both_ways_and_passes_an_eof_on() -> None:
    echo = Echo()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            proxy = await _open_echo(nursery, echo)
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            payload = bytes(range(256)) * 1000  # more than one chunk
            await client.send_all(payload)
            assert await _receive_exactly(client, len(payload)) == payload
            ended = echo.ended
            await client.send_eof()
            assert await client.receive_some(10) == b""  # the echo server closed in turn
            await client.aclose()
            await ended.wait()
            assert echo.endings == ["eof"]
            assert (proxy.statistics.bytes_up, proxy.statistics.bytes_down) == (
                len(payload),
                len(payload),
            )
            nursery.cancel_scope.cancel()


async def test_a_cut_resets_both_sides_and_new_clients_until_restored() -> None:
    echo = Echo()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            proxy = await _open_echo(nursery, echo)
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await client.send_all(b"hello")
            assert await _receive_exactly(client, 5) == b"hello"
            ended = echo.ended
            proxy.cut()
            await ended.wait()
            assert echo.endings == ["reset"]  # the upstream side saw an RST, not a FIN
            await _assert_reset(client, "the cut client")

            refused = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await _assert_reset(refused, "a client of a down link")

            proxy.restore()
            again = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await again.send_all(b"back")
            assert await _receive_exactly(again, 4) == b"back"
            await again.aclose()
            assert proxy.statistics.reset >= 2
            nursery.cancel_scope.cancel()


async def test_a_silent_link_holds_everything_then_resumes_in_order() -> None:
    echo = Echo()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            proxy = await _open_echo(nursery, echo)
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await client.send_all(b"one ")
            assert await _receive_exactly(client, 4) == b"one "
            proxy.silence()
            await client.send_all(b"two ")
            late = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await late.send_all(b"late")
            # Absence can only be shown by waiting: a bounded look, which cannot fail falsely.
            with trio.move_on_after(0.3):
                await client.receive_some(10)
                raise AssertionError("a silent link forwarded")
            assert bytes(echo.received) == b"one "
            assert proxy.connections == 2  # both kept: the held one and the stalled one
            proxy.restore()
            assert await _receive_exactly(client, 4) == b"two "
            assert await _receive_exactly(late, 4) == b"late"
            await client.aclose()
            await late.aclose()
            nursery.cancel_scope.cancel()


async def test_a_silent_link_that_is_cut_resets_the_held_clients_too() -> None:
    echo = Echo()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            proxy = await _open_echo(nursery, echo)
            proxy.silence()
            held = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await held.send_all(b"never")
            await trio.testing.wait_all_tasks_blocked()
            proxy.cut()
            await _assert_reset(held, "a held client")
            assert echo.received == b""
            assert proxy.statistics.connected == 0
            nursery.cancel_scope.cancel()


async def test_an_unreachable_upstream_resets_the_client() -> None:
    with trio.fail_after(10):
        probe = trio.socket.socket()
        await probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nothing listens there now
        proxy = ChaosProxy(("127.0.0.1", port))
        async with trio.open_nursery() as nursery:
            await nursery.start(proxy.serve)
            client = await trio.open_tcp_stream("127.0.0.1", proxy.port)
            await _assert_reset(client, "a client of an unreachable upstream")
            assert proxy.statistics.refused == 1
            nursery.cancel_scope.cancel()
