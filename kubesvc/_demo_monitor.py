"""What the demo shows of its server replicas, read the way an operator reads it: their
processes, ``GET /armory/clouddrivers`` (the live replicas) and ``GET /armory/accounts/
{account}`` (whose session is PRIMARY), asked of the first replica that answers.

``refresh`` reads them once (the live status calls it every tick); ``events`` returns what
changed since the last call as lines to print (a replica ended, the agent moved, the PRIMARY
moved, a surviving replica still answers the cache); ``overview`` is the block printed after
the initial sync, with the ``kill -9`` line that shows the failover.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from ._demo_replicas import Replica
from ._demo_view import ReplicaState, replicas_segment

__all__ = ["ReplicaMonitor"]

_REQUEST_SECONDS = 3.0


@dataclass(frozen=True, slots=True)
class _View:
    """One reading of the REST API."""

    source: int  # the replica index that answered (0: none did)
    live: tuple[dict[str, Any], ...]  # /armory/clouddrivers
    primary: str  # the clouddriverId of the account's PRIMARY session ("" when none)


def _live_primary(account: Any, live: set[str]) -> str:
    """The replica whose session is the account's PRIMARY, among the live ones: an account's
    row still lists the connections of a replica that died (killed, it never removed
    them) next to the PRIMARY that took over."""
    connections = account.get("connections") if isinstance(account, dict) else None
    for connection in connections or []:
        if not isinstance(connection, dict) or connection.get("role") != "PRIMARY":
            continue
        holder = str(connection.get("clouddriverId") or "")
        if holder in live:
            return holder
    return ""


class ReplicaMonitor:
    """See the module docstring. ``agent_server`` says which server id the agent's stream is
    on ("" while it has none); ``probe`` is a path every replica should answer from the
    cache (a GET that must keep working when one replica dies)."""

    def __init__(
        self,
        replicas: Sequence[Replica],
        account: str,
        client: httpx.AsyncClient,
        *,
        agent_server: Callable[[], str],
        probe: str,
        lease_ttl_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._replicas = tuple(replicas)
        self._account = account
        self._client = client
        self._agent_server = agent_server
        self._probe_path = probe
        self._ttl_ms = lease_ttl_ms
        self._clock = clock
        self._started = clock()
        self._view = _View(0, (), "")
        self._ended: dict[int, float] = {}  # replica index -> when we saw it had ended
        self._reported_primary = ""
        self._reported_agent = ""
        self._pending: list[str] = []
        self.history: list[str] = []  # every event, for the summary

    # -- reading --------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the processes and the REST API once (no exception: what failed shows as
        "none answered")."""
        for replica in self._replicas:
            if not replica.running and replica.index not in self._ended:
                self._ended[replica.index] = self._clock()
                self._event(
                    f"replica {replica.index} ({replica.server_id}, pid {replica.pid}) ended: "
                    f"{replica.exit_text()}"
                )
        self._view = await self._read()
        agent_on = self._agent_server()
        if agent_on and agent_on != self._reported_agent:
            on = self._by_id(agent_on)
            if self._reported_agent:
                where = f" ({on.grpc})" if on else ""
                self._event(f"the agent's stream is on {agent_on}{where} now")
                if on is not None:
                    await self._probe(on)
            self._reported_agent = agent_on
        primary = self._view.primary
        if primary and primary != self._reported_primary:
            if self._reported_primary:
                self._event(f"PRIMARY for {self._account} is on {primary} now{self._since()}")
            self._reported_primary = primary

    async def _read(self) -> _View:
        for replica in self._replicas:
            if not replica.running:
                continue
            try:
                drivers = await self._get_json(replica, "/armory/clouddrivers")
                account = await self._get_json(replica, f"/armory/accounts/{self._account}")
            except (httpx.HTTPError, ValueError):
                continue  # this one cannot answer now: ask the next
            live = (
                tuple(d for d in drivers if isinstance(d, dict))
                if isinstance(drivers, list)
                else ()
            )
            primary = _live_primary(account, {str(d.get("id")) for d in live})
            return _View(replica.index, live, primary)
        return _View(0, (), "")

    async def _get_json(self, replica: Replica, path: str) -> Any:
        reply = await self._client.get(replica.api + path, timeout=_REQUEST_SECONDS)
        if reply.status_code == 404:
            return {}
        reply.raise_for_status()
        return reply.json()

    async def _probe(self, replica: Replica) -> None:
        """Show that ``replica``, which the agent moved to, answers from the cache."""
        try:
            reply = await self._client.get(replica.api + self._probe_path, timeout=_REQUEST_SECONDS)
            answer = f"{reply.status_code}"
        except httpx.HTTPError as exc:
            answer = f"no answer ({type(exc).__name__})"
        self._event(f"replica {replica.index} answers GET {self._probe_path}: {answer}")

    def _since(self) -> str:
        if not self._ended:
            return ""
        index, at = max(self._ended.items(), key=lambda item: item[1])
        return f", {self._clock() - at:.1f} s after replica {index} ended"

    def _event(self, text: str) -> None:
        stamped = f"[{self._clock() - self._started:5.0f}s] {text}"
        self._pending.append(stamped)
        self.history.append(stamped)

    def _by_id(self, server_id: str) -> Replica | None:
        return next((r for r in self._replicas if r.server_id == server_id), None)

    # -- what the demo prints -------------------------------------------------------------

    @property
    def primary(self) -> Replica | None:
        """The replica holding the account's PRIMARY at the last reading (if it runs)."""
        replica = self._by_id(self._view.primary)
        return replica if replica is not None and replica.running else None

    def events(self) -> list[str]:
        """The event lines since the last call."""
        pending, self._pending = self._pending, []
        return pending

    def segment(self) -> str:
        """The status line's part about the replicas."""
        agent_on = self._by_id(self._agent_server())
        states = [
            ReplicaState(r.index, r.running, r.server_id == self._view.primary)
            for r in self._replicas
        ]
        return replicas_segment(states, agent_on.index if agent_on else None)

    def overview(self) -> list[str]:
        """The replicas as /armory/clouddrivers lists them, who holds the PRIMARY, and how
        to watch the agent move (printed once, after the initial sync)."""
        source = next((r for r in self._replicas if r.index == self._view.source), None)
        if source is None:
            return ["replicas: none answered GET /armory/clouddrivers", ""]
        lines = [f"replicas (curl -s {source.api}/armory/clouddrivers):"]
        for driver in self._view.live:
            driver_id = str(driver.get("id", "?"))
            agents = ", ".join(str(a) for a in driver.get("agents") or []) or "none"
            role = f"  PRIMARY for {self._account}" if driver_id == self._view.primary else ""
            lines.append(f"  {driver_id}  {driver.get('address', '?')}  agents: {agents}{role}")
        primary = self.primary
        self.history.append(
            f"{len(self._view.live)} live at the start (/armory/clouddrivers); PRIMARY for "
            f"{self._account} on {self._view.primary or 'none'}"
        )
        ttl = self._ttl_ms / 1000
        if primary is None:
            lines.append(f"  no PRIMARY for {self._account} yet")
            lines.append("")
            return lines
        others = [r for r in self._replicas if r is not primary and r.running]
        lines += [
            "",
            "watch the agent move: kill the replica it is on (in another terminal):",
            f"  kill -9 {primary.pid}    # replica {primary.index}, {primary.server_id}, "
            f"holds {self._account}'s PRIMARY",
        ]
        if others:
            other = others[0]
            lines += [
                f"the agent reconnects to replica {other.index} at once and its cache keeps "
                f"answering (curl -s {other.api}/armory/clouddrivers); "
                f"{other.server_id} takes the PRIMARY once the dead replica's lease lapses "
                f"(lease TTL {ttl:g} s)",
            ]
        lines.append("")
        return lines
