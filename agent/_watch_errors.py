"""The data path's own errors (discovery, listing, watching), in the agent's one tree.

AgentError                          (agent/_errors.py)
├── KubeError > KubeConnectionError  a watch body cut inside a line is raised as this
├── KubeError > KubeStatusError      410 / 403 / 404 / 429 / 5xx, also when carried by a
│                                    watch ERROR event (built with ``status_error``)
└── WatchError                       root of the errors raised here
    └── WatchDecodeError             a watch line, list page or discovery document that is
        │                            not what the API promises (says what and where)
        └── LineTooLong              one line longer than the decoder's hard cap
"""

from __future__ import annotations

from ._errors import AgentError

__all__ = ["LineTooLong", "WatchDecodeError", "WatchError"]


class WatchError(AgentError):
    """Root of the data path's own errors."""


class WatchDecodeError(WatchError):
    """A watch line, list page or discovery document could not be decoded."""


class LineTooLong(WatchDecodeError):
    """A single watch line exceeded the decoder's hard cap (the peer misbehaves)."""

    def __init__(self, limit: int, seen: int) -> None:
        super().__init__(f"watch line exceeds {limit} bytes (saw {seen} bytes without a newline)")
        self.limit = limit
        self.seen = seen
