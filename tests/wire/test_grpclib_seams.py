"""The internals of grpclib, h2 and hyperframe the bridge relies on (wire/_bridge/_grpclib.py).

Each test names the seam it guards. When one fails after a dependency upgrade, the seam's
function in _grpclib.py must be revisited (or, when a test says a reason went away, removed)
before the pin in pyproject.toml is widened.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import tomllib
from pathlib import Path
from typing import Any

import grpclib.client
import grpclib.protocol
import grpclib.server
import h2.config
import h2.connection
import h2.settings
import hyperframe.frame
import pytest
import trio
from packaging.requirements import Requirement

import wire
from wire import messages as m
from wire._bridge import _grpclib

from ._loop import in_loop

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def _pins() -> dict[str, Requirement]:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = (Requirement(line) for line in project["dependencies"])
    return {requirement.name: requirement for requirement in requirements}


@pytest.mark.parametrize("name", ["grpclib", "h2", "hyperframe"])
def test_the_installed_dependency_is_one_the_seams_were_checked_against(name: str) -> None:
    pin = _pins()[name]
    assert pin.specifier, f"pyproject.toml must bound {name}: the bridge relies on its internals"
    installed = importlib.metadata.version(name)
    assert pin.specifier.contains(installed), f"{name} {installed} is outside {pin.specifier}"


# ---- install_fast_paths: the repr of received DATA frames --------------------------------------


def test_h2_still_builds_the_repr_of_every_received_data_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reason for install_fast_paths: h2 formats ``repr(frame)`` for its trace log before
    knowing whether anyone logs. If this fails, h2 stopped doing so: remove the fast path."""
    calls: list[int] = []

    def counting_repr(frame: hyperframe.frame.DataFrame) -> str:
        calls.append(len(frame.data))
        return ""

    monkeypatch.setattr(hyperframe.frame.DataFrame, "_body_repr", counting_repr)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    stream_id = client.get_next_available_stream_id()
    client.send_headers(
        stream_id, [(":method", "POST"), (":path", "/"), (":scheme", "http"), (":authority", "x")]
    )
    client.send_data(stream_id, b"x" * 1000)
    server.receive_data(client.data_to_send())
    assert calls == [1000]


def test_install_fast_paths_makes_a_data_frame_repr_say_its_size_only() -> None:
    _grpclib.install_fast_paths()
    _grpclib.install_fast_paths()  # idempotent
    frame = hyperframe.frame.DataFrame(1, b"\x01" * 100_000)
    assert repr(frame) == "DataFrame(stream_id=1, flags=[]): data=<100000 bytes>"
    # Only DATA frames changed: the others keep hyperframe's own repr.
    assert "error_code=8" in repr(hyperframe.frame.RstStreamFrame(1, error_code=8))


def test_a_data_frame_repr_is_built_by_its_body_repr() -> None:
    """install_fast_paths replaces ``DataFrame._body_repr``, which ``Frame.__repr__`` calls
    (DataFrame has none of its own in hyperframe 6: it inherits Frame's, which hex-encodes
    the serialized body)."""
    assert "self._body_repr()" in inspect.getsource(hyperframe.frame.Frame.__repr__)
    assert "serialize_body" in inspect.getsource(hyperframe.frame.Frame._body_repr)
    assert list(inspect.signature(hyperframe.frame.Frame._body_repr).parameters) == ["self"]


# ---- Channel / Server: 1 MiB DATA frames ------------------------------------------------------


def test_grpclib_makes_its_protocols_with_the_factory_the_bridge_overrides() -> None:
    """Channel and Server announce large frames by overriding ``_protocol_factory``, which
    grpclib must still be using to make each connection's protocol, and must still create the
    h2 connection in ``H2Protocol.connection_made`` (as ``connection._connection``)."""
    assert "self._protocol_factory" in inspect.getsource(grpclib.client.Channel._create_connection)
    assert "self._protocol_factory" in inspect.getsource(grpclib.server.Server.start)
    made = inspect.getsource(grpclib.protocol.H2Protocol.connection_made)
    assert "self.connection = Connection(" in made
    assert "self._connection = connection" in inspect.getsource(
        grpclib.protocol.Connection.__init__
    )


async def echo_handler(stream: wire.ServerStream, call: wire.CallInfo) -> None:
    while True:
        try:
            message = await stream.receive()
        except wire.EndOfStream:
            return
        await stream.send(m.ServerMessage(ack=m.Ack(seq=message.event_batch.seq)))


@in_loop
async def test_both_ends_send_one_mib_data_frames() -> None:
    """After the SETTINGS exchange each end may send 1 MiB DATA frames to the other."""
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(wire.serve, echo_handler, "127.0.0.1", 0)
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream.send_event_batch(1, b"r" * 900_000, 1)
                assert await stream.receive_ack_or_message() == 1
                channel = stream._channel
                assert channel is not None
                protocol = channel._protocol
                assert protocol is not None
                h2_connection = protocol.connection._connection
                assert h2_connection.local_settings.max_frame_size == _grpclib.MAX_FRAME_SIZE
                # The server announced it too: the client may send frames that large.
                assert h2_connection.max_outbound_frame_size == _grpclib.MAX_FRAME_SIZE
            nursery.cancel_scope.cancel()


# ---- behaviour seams ---------------------------------------------------------------------------


def test_the_server_stream_reads_through_its_protocol_stream() -> None:
    """protocol_stream: grpclib's server ``Stream`` keeps the HTTP/2 stream as ``_stream``,
    read by ``recv_data(n)`` (n bytes, fewer only at the end of the stream)."""
    assert "self._stream = stream" in inspect.getsource(grpclib.server.Stream.__init__)
    assert list(inspect.signature(grpclib.protocol.Stream.recv_data).parameters) == [
        "self",
        "size",
    ]


def test_the_server_keeps_its_asyncio_listener_as_server() -> None:
    """close_listener: grpclib's ``Server`` keeps asyncio's listening Server as ``_server``."""
    assert "self._server = await self._loop.create_server(" in inspect.getsource(
        grpclib.server.Server.start
    )


@in_loop
async def test_a_drain_refuses_new_connections_while_the_open_call_goes_on() -> None:
    """close_listener, seen from outside: once ``stop_listening`` is set, connecting is
    refused, and the call already open still exchanges messages."""
    stop = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(
                functools.partial(wire.serve, echo_handler, "127.0.0.1", 0, stop_listening=stop)
            )
            async with wire.open_connection("127.0.0.1", port) as stream:
                await stream.send_event_batch(1, b"", 0)
                assert await stream.receive_ack_or_message() == 1
                stop.set()
                # The listener closes on serve's side of the bridge, soon after: until it
                # has, a connection is still accepted (and dropped here).
                while True:
                    try:
                        probe = await trio.open_tcp_stream("127.0.0.1", port)
                    except OSError:
                        break
                    await probe.aclose()
                await stream.send_event_batch(2, b"", 0)
                assert await stream.receive_ack_or_message() == 2
            nursery.cancel_scope.cancel()


def test_channel_connects_through_its_connect_method() -> None:
    """connect_first: ``Channel.__connect__`` returns the H2Protocol, whose connection tells
    ``is_closing()``; and a closed connection deletes its ``_transport`` (which
    _failures.closed_under_grpclib reads as "the connection is gone")."""
    assert inspect.iscoroutinefunction(grpclib.client.Channel.__connect__)
    assert "del self._transport" in inspect.getsource(grpclib.protocol.Connection.close)
    assert callable(grpclib.protocol.Connection.is_closing)


def test_keepalive_settings_are_accepted_by_grpclib() -> None:
    config = wire.Keepalive(interval=3.0, timeout=4.0)
    from wire._bridge._options import configuration

    made = configuration(config)
    assert made._keepalive_time == 3.0
    assert made._keepalive_timeout == 4.0
    assert made._http2_max_pings_without_data == 0


@pytest.mark.trio
@in_loop
async def test_grpclibs_current_task_is_what_enter_task_made_current() -> None:
    """_crossing's stand-in task: in a trio task inside the bridge's loop, the current task
    grpclib's Wrapper records (``grpclib.utils._current_task``, asyncio's or trio-asyncio's
    ``current_task``, whichever was imported first) is whatever ``_enter_task`` put in; and the
    Wrapper interrupts a wait by calling that task's ``cancel()``."""
    import asyncio
    from asyncio.tasks import _enter_task, _leave_task

    import grpclib.utils

    loop = asyncio.get_running_loop()
    stand_in: Any = object()
    _enter_task(loop, stand_in)
    try:
        seen = [grpclib.utils._current_task(), asyncio.current_task()]
    finally:
        _leave_task(loop, stand_in)
    assert all(task is stand_in for task in seen)
    assert grpclib.utils._current_task() is None
    assert "task.cancel()" in inspect.getsource(grpclib.utils.Wrapper.cancel)
