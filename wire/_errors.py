"""The wire package's exceptions, and the gRPC status codes a call can end with.

Every failure the package reports is a :class:`WireError`; errors from grpclib, h2, ssl and
the socket layer are translated at the bridge's edge (``raise ... from exc``) and never leak.
The tree keeps apart "we closed it", "the peer or the network broke it" and "the other side
said no"::

    WireError
    ├── RecordError          event records that are malformed or over a RecordLimits cap
    ├── ProtocolViolation    a message that does not decode as the expected protobuf
    ├── MessageTooLarge      a message over max_message_size (ours, refused before sending;
    │                        or the peer's, refused on receipt)
    ├── StreamClosed         we closed the stream (aclose, or our side was cancelled) and
    │                        then used it again
    ├── EndOfStream          the peer finished the call cleanly (the client ended its side, or
    │                        the server's handler returned)
    ├── ConnectionLost       the peer or the network broke it: connect failure, TCP reset
    │                        (also one at once after the accept), stream reset by the peer,
    │                        keepalive timeout, TLS failure, bytes that are not HTTP/2
    ├── RemoteRefused        the other side ended the call with a gRPC status (``.status``,
    │                        ``.message``), e.g. UNAUTHENTICATED from a server handler
    └── Refuse               raised BY a server handler (not by the package) to end its call
                             with a status, which reaches the client as RemoteRefused

A field or oneof member this version does not know is no error at all: the decoders keep it
aside and the caller skips it (wire._unknown). A known field with the wrong wire type is a
ProtocolViolation.

:class:`Refuse` is an instruction rather than a failure, but it is rooted here all the same,
so that ``except WireError`` covers every exception the package defines. The bridge checks
for it before WireError, and so must a handler's own ``except WireError`` around code that
may refuse.
"""

from __future__ import annotations

import enum


class Status(enum.IntEnum):
    """gRPC status codes (https://grpc.github.io/grpc/core/md_doc_statuscodes.html)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class WireError(Exception):
    """Root of every error the wire package raises."""


class RecordError(WireError):
    """Event records that cannot be encoded or decoded.

    ``index`` is the position of the offending record when one record is to blame, else None.
    """

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class ProtocolViolation(WireError):
    """The peer sent bytes that are not the protobuf message the protocol expects."""


class MessageTooLarge(WireError):
    """A message is larger than the stream's ``max_message_size``."""

    def __init__(self, size: int, limit: int, *, direction: str) -> None:
        super().__init__(
            f"{direction} message of {size} bytes exceeds the limit of {limit} bytes "
            f"(max_message_size)"
        )
        self.size = size
        self.limit = limit
        self.direction = direction


class StreamClosed(WireError):
    """We closed this stream; it cannot be used any more."""


class EndOfStream(WireError):
    """The peer finished the call cleanly; nothing more will arrive."""


class ConnectionLost(WireError):
    """The peer or the network broke the connection or reset the stream."""


class RemoteRefused(WireError):
    """The other side ended the call with a non-OK gRPC status."""

    def __init__(self, status: Status, message: str) -> None:
        super().__init__(f"{status.name}: {message}" if message else status.name)
        self.status = status
        self.message = message


class Refuse(WireError):
    """Raised by a server handler to end its call with ``status`` and ``message``.

    The client sees it as :class:`RemoteRefused` with the same status and message.
    """

    def __init__(self, status: Status, message: str = "") -> None:
        if status is Status.OK:
            raise ValueError("Refuse needs a non-OK status; return from the handler instead")
        super().__init__(f"{status.name}: {message}" if message else status.name)
        self.status = status
        self.message = message


#: How a draining server ends each agent's call: status UNAVAILABLE with a message that starts
#: with this text (then ": " and a reason). It means "this server is shutting down: connect
#: again at once, with no backoff" (behind a load balancer, to another replica). An agent
#: that does not know it sees a plain UNAVAILABLE and reconnects after its backoff.
DRAINING = "server draining"


def is_draining(exc: BaseException) -> bool:
    """Whether ``exc`` is a draining server's end of the call (see :data:`DRAINING`)."""
    return (
        isinstance(exc, RemoteRefused)
        and exc.status is Status.UNAVAILABLE
        and exc.message.startswith(DRAINING)
    )
