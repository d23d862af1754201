"""What grpclib, h2, ssl and sockets raise, translated into wire's tree (wire/_errors.py).

Theory of operation. Whatever escapes grpclib is one of three things, kept apart as
STYLE 6 asks: the peer or the network broke the call (:data:`BROKEN`, read as
ConnectionLost), the peer said no with a gRPC status (GRPCError, read as RemoteRefused), or a
bug, which propagates. Once a call is over, every later operation raises its outcome again
(:func:`again`: a fresh copy, so a reraise does not grow the traceback).
"""

from __future__ import annotations

import ssl

import h2.exceptions
from grpclib.exceptions import GRPCError, StreamTerminatedError

from .._errors import ConnectionLost, MessageTooLarge, RemoteRefused, Status, WireError

__all__ = ["BROKEN", "CLOSED_AT_ONCE", "again", "closed_under_grpclib", "lost", "refused"]

#: Failures that mean "the peer or the network broke it" when they escape grpclib.
BROKEN = (StreamTerminatedError, h2.exceptions.H2Error, ConnectionError, ssl.SSLError, OSError)

CLOSED_AT_ONCE = (
    "the connection closed before the call began (the server reset it, or its first bytes "
    "were not HTTP/2)"
)


def lost(exc: BaseException, what: str) -> ConnectionLost:
    """ConnectionLost saying ``what`` failed and why."""
    return ConnectionLost(f"{what}: {exc}" if str(exc) else f"{what}: {type(exc).__name__}")


def refused(exc: GRPCError) -> RemoteRefused:
    """The peer's gRPC status as RemoteRefused."""
    return RemoteRefused(Status(exc.status.value), exc.message or "")


def again(exc: WireError) -> WireError:
    """A fresh exception equal to ``exc``, so a reraise does not grow its traceback."""
    if isinstance(exc, RemoteRefused):
        return RemoteRefused(exc.status, exc.message)
    if isinstance(exc, MessageTooLarge):
        return MessageTooLarge(exc.size, exc.limit, direction=exc.direction)
    return type(exc)(*exc.args)


def closed_under_grpclib(exc: AttributeError) -> bool:
    """Whether ``exc`` is grpclib 0.4 reaching for a connection that is already closed.

    grpclib's ``Connection.close()`` deletes its ``_transport``, and some paths still use
    it afterwards: creating the call's HTTP/2 stream on a connection the peer reset between
    the TCP handshake and the first request (an address that accepts and resets at once: a
    Service or load balancer whose server restarts), or giving back flow-control credit
    after the close. That AttributeError means "the connection is gone", so the bridge
    reports it as ConnectionLost. Nothing of ours has an attribute of that name on the
    asyncio side, so any other AttributeError is a bug and propagates. (Checked against
    grpclib by tests/wire/test_grpclib_seams.py.)"""
    return exc.name == "_transport"
