"""The one place where trio meets grpclib (asyncio): a trio client and a trio server for Connect.

Theory of operation. Every process runs trio; :func:`open_loop` runs an asyncio loop inside
it (trio-asyncio) and grpclib runs on that loop. Trio code crosses into asyncio once per
message (or per batch), never per event; protobuf work stays on the trio side, grpclib only
moves bytes. One concern per module:

- ``_loop``: the asyncio loop inside trio, and the process-wide settings made when it opens.
- ``_crossing``: :func:`cross`, how trio code runs one of grpclib's coroutines (in its own
  task until the coroutine must wait for the network, then in an asyncio task).
- ``_options``: size caps, keepalive, TLS (ALPN h2), grpclib's configuration and codec.
- ``_failures``: what grpclib, h2, ssl and sockets raise, translated into wire's tree.
- ``_client``: the agent's end (:func:`open_connection`, :class:`ClientStream`).
- ``_server_stream``: the server's end of a call (:class:`ServerStream`), its bounded reads.
- ``_serve``: the server (:func:`serve`): one trio handler per call, drain and stop.
- ``_grpclib``: every reach below grpclib's, h2's and hyperframe's public API, each behind one
  documented function and checked by tests/wire/test_grpclib_seams.py.

grpclib, h2, hyperframe and asyncio are imported by these modules only (import-linter).
"""

from ._client import ClientStream, open_connection
from ._loop import open_loop
from ._options import DEFAULT_MAX_MESSAGE_SIZE, Keepalive
from ._serve import CallInfo, Handler, serve
from ._server_stream import ServerStream

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "CallInfo",
    "ClientStream",
    "Handler",
    "Keepalive",
    "ServerStream",
    "open_connection",
    "open_loop",
    "serve",
]
