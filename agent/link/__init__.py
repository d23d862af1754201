"""The agent's link to the server: one outbound gRPC stream, reconnected for ever.

``Link`` (``_link``) dials the server (``_rotation`` picks the address, ``_edge`` opens the
stream under a deadline and skips what a newer server sends), says Hello with the bearer
token (``_token``) and, after the Welcome, runs a ``Session`` (``_session``): the PRIMARY
accounts' watches, the batch sender, heartbeats and the operations the server sends, until
the stream ends; ``_drain`` is its shutdown on SIGTERM, ``_settings`` what it is given and
reports. It runs the watches and operations through callables: of the data path it knows
only the notices that travel with the events (``agent.watch``), of operations nothing.
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
