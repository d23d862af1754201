"""Which server address the link's next session dials, and whether the backoff comes first.

Theory of operation. The agent may know several addresses of the server (``clouddriver.
grpcAddresses``: the replicas, or one Service per zone); it uses one at a time. A *round* is
one try of every address, starting from the one that last gave a Welcome. A failed session (no
connect, a refused Hello, a stream that broke) moves to the next address at once, while the
round lasts; once every address has failed in this round the backoff is due, once, and a new
round begins. So the backoff applies per round, not per address: one dead replica among two
costs the agent one failed connect, not a backoff. With a single address every failure ends a
round, which is the link's behaviour before addresses were a list.

A Welcome starts the round over at the address that gave it, and so does a draining server
that ended a session we had (``wire.DRAINING``): the link moves to the next address at once
(the drain's short spread aside) and that address starts a fresh round, since the draining
replica is expected to refuse new sessions for a while. Plain and synchronous: the link
(agent/link/_link.py) sleeps and dials; tests drive this with no event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["AddressRotation", "ServerAddress"]


@dataclass(frozen=True, slots=True)
class ServerAddress:
    """One address of the server: ``host`` (a name, or an IP without brackets) and ``port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class AddressRotation:
    """Round-robin over ``addresses`` with a backoff per full round (see the module
    docstring). ``current`` is the address the next session dials."""

    def __init__(self, addresses: Sequence[ServerAddress]) -> None:
        if not addresses:
            raise ValueError("the link needs at least one server address")
        self._addresses = tuple(addresses)
        self._index = 0
        self._failed_in_round = 0  # failures since the round began (a Welcome, a drain, a wait)

    @property
    def addresses(self) -> tuple[ServerAddress, ...]:
        return self._addresses

    @property
    def current(self) -> ServerAddress:
        return self._addresses[self._index]

    def failed(self) -> bool:
        """The session on ``current`` failed: move to the next address. True when that failure
        completed a round (every address failed since the last Welcome or wait): the caller
        waits its backoff, and the next round begins."""
        self._index = (self._index + 1) % len(self._addresses)
        self._failed_in_round += 1
        if self._failed_in_round < len(self._addresses):
            return False
        self._failed_in_round = 0
        return True

    def connected(self) -> None:
        """``current`` gave a Welcome: a new round begins from it."""
        self._failed_in_round = 0

    def drained(self) -> None:
        """A draining server ended the session we had on ``current``: move to the next
        address, which begins a fresh round (reached at once, no backoff)."""
        self._index = (self._index + 1) % len(self._addresses)
        self._failed_in_round = 0
