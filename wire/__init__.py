"""kubesvc's wire protocol: the protobuf messages, the event-record framing and the trio bridge.

- ``wire.messages``: the betterproto messages of kubesvc.proto (AgentMessage, ServerMessage, ...).
- Event records (sans-I/O): :class:`EventRecord`, :func:`encode_events`, :func:`decode_events`.
- The bridge (trio API over grpclib): :func:`open_loop`, :func:`open_connection`, :func:`serve`.
- Forward compatibility: :func:`unknown_fields` names what a received message carries that
  this version does not know; :class:`UnknownFieldCounter` counts it (skip, count, log once).
- Round-trip timing: :class:`LatencyHistogram` (batch -> Ack on the agent, operation -> result
  on the server), exported by each side as a Prometheus histogram.
- Errors: one tree rooted at :class:`WireError` (see wire._errors).
"""

from . import messages
from ._bridge import (
    DEFAULT_MAX_MESSAGE_SIZE,
    CallInfo,
    ClientStream,
    Handler,
    Keepalive,
    ServerStream,
    open_connection,
    open_loop,
    serve,
)
from ._envelope import construct
from ._errors import (
    DRAINING,
    ConnectionLost,
    EndOfStream,
    MessageTooLarge,
    ProtocolViolation,
    RecordError,
    Refuse,
    RemoteRefused,
    Status,
    StreamClosed,
    WireError,
    is_draining,
)
from ._latency import ACK_BUCKETS, OPERATION_BUCKETS, LatencyHistogram
from ._records import (
    DEFAULT_LIMITS,
    EventRecord,
    EventType,
    RecordLimits,
    decode_events,
    encode_events,
)
from ._unknown import OTHER_UNKNOWN, UnknownField, UnknownFieldCounter, unknown_fields

#: Sent in Hello.protocol_version; see kubesvc.proto for when it changes.
PROTOCOL_VERSION: int = int(messages.ProtocolVersion.CURRENT)

__all__ = [
    "ACK_BUCKETS",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DRAINING",
    "OPERATION_BUCKETS",
    "OTHER_UNKNOWN",
    "PROTOCOL_VERSION",
    "CallInfo",
    "ClientStream",
    "ConnectionLost",
    "EndOfStream",
    "EventRecord",
    "EventType",
    "Handler",
    "Keepalive",
    "LatencyHistogram",
    "MessageTooLarge",
    "ProtocolViolation",
    "RecordError",
    "RecordLimits",
    "Refuse",
    "RemoteRefused",
    "ServerStream",
    "Status",
    "StreamClosed",
    "UnknownField",
    "UnknownFieldCounter",
    "WireError",
    "construct",
    "decode_events",
    "encode_events",
    "is_draining",
    "messages",
    "open_connection",
    "open_loop",
    "serve",
    "unknown_fields",
]
