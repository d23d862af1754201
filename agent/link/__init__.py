"""The agent's link to the server: one outbound gRPC stream, reconnected for ever.

``Link`` (``_link``) dials an address (``_rotation``, ``_edge``), says Hello with the token
(``_token``) and runs a ``Session`` per Welcome (``_session``: watches, batch sender,
heartbeats, operations) until the stream ends; ``_drain`` is SIGTERM. It runs watches and
operations through callables; of ``watch`` it imports only the notices sent with events.
"""

from ._link import OVERSIZE_ANNOTATION, Link, LinkSettings, LinkStatus, ResumeKey
from ._rotation import ServerAddress
from ._token import TokenSource

__all__ = [
    "OVERSIZE_ANNOTATION",
    "Link",
    "LinkSettings",
    "LinkStatus",
    "ResumeKey",
    "ServerAddress",
    "TokenSource",
]
