"""Every place the bridge reaches below grpclib's (and h2's, hyperframe's) public API.

Theory of operation. grpclib 0.4 drives the HTTP/2 calls; where its public API lacks what
the bridge needs, the bridge reaches into its internals here and nowhere else, one
documented function (or subclass) per need. tests/wire/test_grpclib_seams.py checks each
internal name and behaviour relied on, against the versions pyproject.toml allows
(grpclib >=0.4.7,<0.5, h2 4, hyperframe 6): when a dependency changes them, that test fails
and says which seam to revisit. Two kinds of seams:

Speed, kept because bench_wire measures what they buy (framed batches of 200 4.4 KB events,
client -> server process, CPU us per event; 4 alternating rounds at load 8-10 on 2 cores,
2026-11-27): with every seam, client 14.2-15.4 and server 19.2-21.1; without any, client
20.0-25.4 and server 40.0-50.3 (events/s 7.3-11.1k against 3.6-6.2k).

- :func:`install_fast_paths` (process-wide, called once by open_loop): h2 logs every
  received frame with an eagerly built ``repr(frame)``, and a DATA frame's repr copies and
  hex-encodes its whole payload. Only the DATA frame's repr changes. Without it: server
  26.8-32.6 us per event (+8-11; the client, which receives only acks, unchanged).
- :class:`Channel`, :class:`Server`: both ends announce 1 MiB HTTP/2 DATA frames (h2 costs
  per frame; with the default 16 KiB a 0.9 MB batch takes 55 frames). Without: client
  21.7-23.3 us (+7-8), server 30.1-34.6 (+10-13).

Removed for want of a figure: ``send_framed``, grpclib's ``send_message`` rewritten on its
private state to take a message already framed (one copy of a ~1 MiB batch less, and up to
32 operation results in one write). bench_wire, 5 alternating pairs at load 7-8: with it,
client 11.4-15.2 us per event and server 14.9-21.2; with ``send_message``, 11.9-15.4 and
15.7-20.7. bench_ops, 4 pairs at load 6.5-7: agent CPU per concurrent deploy 5.5-7.9 ms with
it, 5.6-7.0 without.

Behaviour grpclib offers no public way to get (each with the test that fails without it):

- :func:`protocol_stream`: the server reads a message's gRPC length prefix itself and refuses
  an oversize message before reading its body (grpclib would buffer any size a client sends;
  test_bridge's test_the_server_refuses_an_oversize_message_without_reading_its_body).
- :meth:`Server.close_connections`: a stop closes open connections (grpclib only cancels the
  calls, leaving clients on a silent connection; test_server_shutdown_is_connection_lost...).
- :func:`close_listener`: a drain stops accepting while open calls go on
  (test_grpclib_seams' test_a_drain_refuses_new_connections_while_the_open_call_goes_on).
- :func:`connect_first`: connect before the first request, so that a connection the peer
  reset at once is seen before grpclib creates a stream on it (tests/agent/test_link_faults'
  test_an_address_that_accepts_and_resets_at_once failed 4 runs in 5 without it).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import grpclib.client
import grpclib.server
import h2.settings
import hyperframe.frame
from grpclib.protocol import H2Protocol
from grpclib.protocol import Stream as ProtocolStream

__all__ = [
    "MAX_FRAME_SIZE",
    "Channel",
    "Server",
    "close_listener",
    "connect_first",
    "install_fast_paths",
    "protocol_stream",
]

#: HTTP/2 DATA frames we accept (announced in our SETTINGS). h2 costs ~0.1-0.5 ms per frame
#: here; with the default 16 KiB a 0.9 MB batch takes 55 frames, with 1 MiB it takes one.
MAX_FRAME_SIZE = 2**20


# ---- speed -----------------------------------------------------------------------------------


def _data_frame_repr(self: hyperframe.frame.DataFrame) -> str:
    return f"data=<{len(self.data)} bytes>"


def install_fast_paths() -> None:
    """Make received HTTP/2 DATA frames cheap to log, for every h2 connection of the process.

    h2 logs each received frame at trace level with ``repr(frame)`` built before the call
    (h2.connection.H2Connection._receive_frame), and hyperframe's repr of a DATA frame copies
    its payload and hex-encodes all of it to show 10 bytes. This makes a DATA frame's repr say
    only its size. Idempotent; process-wide, because the repr belongs to hyperframe's class:
    every h2 user in the process (the agent's own HTTP/2 Kubernetes client too) pays less.
    Nothing reads the repr but log lines nobody enables.
    """
    hyperframe.frame.DataFrame._body_repr = _data_frame_repr  # type: ignore[method-assign,assignment]


def _announce_large_frames(protocol: H2Protocol) -> H2Protocol:
    """Make ``protocol`` announce MAX_FRAME_SIZE in its SETTINGS once its connection is up."""
    connection_made = protocol.connection_made

    def made(transport: asyncio.BaseTransport) -> None:
        connection_made(transport)
        h2_connection = protocol.connection._connection
        h2_connection.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: MAX_FRAME_SIZE})
        protocol.connection.flush()

    protocol.connection_made = made  # type: ignore[method-assign]
    return protocol


class Channel(grpclib.client.Channel):
    """grpclib's Channel whose connections accept 1 MiB DATA frames."""

    def _protocol_factory(self) -> H2Protocol:
        return _announce_large_frames(super()._protocol_factory())


# ---- behaviour -------------------------------------------------------------------------------


class Server(grpclib.server.Server):
    """grpclib's Server whose connections accept 1 MiB DATA frames, and which can close its
    open connections (:meth:`close_connections`; grpclib's close only cancels the calls)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._protocols: weakref.WeakSet[H2Protocol] = weakref.WeakSet()

    def _protocol_factory(self) -> H2Protocol:
        protocol = _announce_large_frames(super()._protocol_factory())
        self._protocols.add(protocol)
        return protocol

    def close_connections(self) -> None:
        """Close every connection this server accepted that is still open."""
        for protocol in list(self._protocols):
            connection = getattr(protocol, "connection", None)  # None: not made yet
            if connection is not None:
                connection.close()


def close_listener(server: grpclib.server.Server) -> None:
    """Close ``server``'s listening socket: new connections are refused, open ones go on
    (grpclib's ``close`` would also cancel every call)."""
    listener = server._server  # asyncio's Server
    if listener is not None:
        listener.close()


def protocol_stream(stream: grpclib.server.Stream[Any, Any]) -> ProtocolStream:
    """The HTTP/2 stream under a server call, whose ``recv_data(n)`` reads exactly what is
    asked (grpclib's ``recv_message`` reads a whole message, whatever its size). Reading from
    it gives flow-control credit back as grpclib's own read does."""
    return stream._stream


async def connect_first(channel: grpclib.client.Channel) -> bool:
    """Connect ``channel`` (grpclib otherwise connects inside the first request) and say
    whether the connection is still open. The peer may have reset it while the connect's
    result waited for this task to run; grpclib's ``send_request`` would create its stream
    on the closed connection. Once connected, ``send_request`` reaches ``create_stream``
    without giving the loop a turn, so nothing can close it in between."""
    protocol = await channel.__connect__()
    return not protocol.connection.is_closing()
