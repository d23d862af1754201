"""A client process for the peer-death test: connects, says hello, then waits to be killed.

Run as ``python -m tests.wire._peer_client PORT``.
"""

from __future__ import annotations

import sys

import trio

import wire
from wire import messages as m


async def main(port: int) -> None:
    async with wire.open_loop(), wire.open_connection("127.0.0.1", port) as stream:
        await stream.send(m.AgentMessage(hello=m.Hello(protocol_version=1, agent_id="doomed")))
        await stream.receive()  # the server never answers; the test kills us here


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
