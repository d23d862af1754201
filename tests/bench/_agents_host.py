"""bench_agents' agent host: many real agents in one process, each its own ``run_agent``.

An agent here is the whole agent of ``kubesvc agent``: its own config file, accounts, kube
client (its own HTTP/2 connection to its kubesim cluster), byte budget, metrics registry,
health endpoint and link (its own gRPC connection and stream to the server), with its own id
(``POD_NAME`` in the environ it is given). They share the process, its trio run and the one
asyncio loop of the bridge, as nothing in the agent is global. Hosting a few hundred in one
process is what lets one machine stand in for a fleet of 1,000 agents.

``run_host`` starts the agents of config files ``agent-{n}.yaml`` for n in a range and writes
``host-{first}.json`` (what the agents' statuses say, summed; see :class:`HostStatus`) every
``STATUS_SECONDS``, whole or not at all, for the bench to poll.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import trio

import agent
import wire

__all__ = ["STATUS_SECONDS", "HostStatus", "agent_config_path", "host_status", "run_host"]

STATUS_SECONDS = 0.25
#: The agents' config files are not edited during a run: a slow poll keeps 250 stat calls a
#: second per host out of the measured machine's load.
RELOAD_POLL_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class HostStatus:
    """The agents of one host, summed."""

    agents: int = 0  # started
    connected: int = 0  # whose link has a session (a Welcome)
    primary: int = 0  # accounts the server made PRIMARY in the current sessions
    ready: int = 0  # agents connected whose every PRIMARY account has synced (/ready)
    sessions: int = 0  # sessions opened, over all agents, since they started
    #: full listings (a list, or a streaming list) the current sessions' watches made: 0 after
    #: a server restart when every kind resumed from the resourceVersion the server stored
    listings: int = 0
    watches: int = 0  # reflectors of the current sessions


def agent_config_path(folder: Path, n: int) -> Path:
    return folder / f"agent-{n}.yaml"


def host_status(agents: list[agent.Agent]) -> HostStatus:
    connected = primary = ready = sessions = listings = watches = 0
    for one in agents:
        link = one.link.status
        sessions += link.sessions
        if link.connected:
            connected += 1
            primary += sum(1 for role in link.roles.values() if role == "PRIMARY")
        if one.status.ready()[0]:
            ready += 1
        for state in one.accounts.accounts.values():
            if state.watch is None:
                continue
            for reflector in state.watch.reflectors.values():
                watches += 1
                listings += reflector.lists + reflector.streaming
    return HostStatus(len(agents), connected, primary, ready, sessions, listings, watches)


def _write(path: Path, status: HostStatus) -> None:
    partial = path.with_suffix(".part")
    partial.write_text(json.dumps(asdict(status)))
    partial.rename(path)


async def run_host(folder: Path, first: int, count: int, start_rate: float = 0.0) -> None:
    """Run agents ``first`` .. ``first + count - 1`` and report them; runs until killed.
    ``start_rate``: agents started per second (a rollout), 0 for all at once.

    Raises ConfigError (from the first agent whose config fails to load)."""
    logging.basicConfig(
        level=os.environ.get("BENCH_AGENT_LOG", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    agents: list[agent.Agent] = []
    out = folder / f"host-{first}.json"

    async def start_one(n: int, nursery: trio.Nursery) -> None:
        one: agent.Agent = await nursery.start(
            functools.partial(
                agent.run_agent,
                str(agent_config_path(folder, n)),
                environ={"POD_NAME": f"agent-{n}"},
                reload_poll_seconds=RELOAD_POLL_SECONDS,
            )
        )
        agents.append(one)

    async with wire.open_loop(), trio.open_nursery() as nursery:
        nursery.start_soon(_report, out, agents)
        began = trio.current_time()
        # Each agent's start (its health endpoint, its cluster's identity, its link) runs
        # beside the others', at ``start_rate`` starts a second.
        for n in range(first, first + count):
            if start_rate > 0:
                await trio.sleep_until(began + (n - first) / start_rate)
            nursery.start_soon(start_one, n, nursery)


async def _report(out: Path, agents: list[agent.Agent]) -> None:
    while True:
        _write(out, host_status(agents))
        await trio.sleep(STATUS_SECONDS)
