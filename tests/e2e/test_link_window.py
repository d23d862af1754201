"""The agent keeps at most ``max_batches_in_flight`` (4) batches unacknowledged: a server that
falls behind gets no queue of small batches, and what waits meanwhile travels in the next one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import betterproto
import trio

import kubesim
import wire
from wire import messages

from .._wait import Changes
from .harness import open_receiver_stack, wait_until


class HoldingReceiver:
    """Reads every batch but acknowledges only when the test says so."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.events = 0
        self.stream: wire.ServerStream | None = None
        self.changed = Changes()  # notified after every batch

    def more_batches_than(self, count: int) -> Callable[[], bool]:
        return lambda: len(self.seqs) > count

    async def ack(self, seq: int) -> None:
        assert self.stream is not None
        await self.stream.send(messages.ServerMessage(ack=messages.Ack(seq=seq)))

    async def handler(self, stream: wire.ServerStream, call: wire.CallInfo) -> None:
        hello = await stream.receive()
        _, body = betterproto.which_one_of(hello, "message")
        assert isinstance(body, messages.Hello)
        self.stream = stream
        await stream.send(
            messages.ServerMessage(
                welcome=messages.Welcome(
                    session_token="s",
                    server_id="holding",
                    accounts=[_primary(info.name) for info in body.accounts],
                )
            )
        )
        while True:
            try:
                message = await stream.receive()
            except wire.EndOfStream:
                return
            _, body = betterproto.which_one_of(message, "message")
            if isinstance(body, messages.EventBatch):
                self.seqs.append(body.seq)
                self.events += body.count
                self.changed.notify()
            elif isinstance(body, messages.AccountsChanged):
                await stream.send(
                    messages.ServerMessage(
                        assignment=messages.Assignment(
                            accounts=[_primary(info.name) for info in body.accounts]
                        )
                    )
                )
            elif isinstance(body, messages.Heartbeat):
                await stream.send(messages.ServerMessage(heartbeat=body))


def _primary(name: str) -> messages.AccountAssignment:
    return messages.AccountAssignment(name=name, role=messages.Role.PRIMARY)


def _configmap(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"v": "1"},
    }


async def test_at_most_four_batches_wait_for_their_ack(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    receiver = HoldingReceiver()
    with trio.fail_after(30):
        async with open_receiver_stack(tmp_path, receiver, sim=sim) as stack:
            serial = 0
            while len(receiver.seqs) < 4:  # one change at a time until four batches wait
                serial += 1
                sent = len(receiver.seqs)
                sim.create(_configmap(f"early-{serial}"))
                await receiver.changed.wait_for(
                    receiver.more_batches_than(sent), what=f"a batch with early-{serial}"
                )
            for index in range(50):  # changes keep coming while nothing is acknowledged
                sim.create(_configmap(f"cm-{index}"))
            last = sim.get("", "v1", "configmaps", "default", "cm-49")["metadata"][
                "resourceVersion"
            ]

            def the_agent_holds_them() -> bool:
                watch = stack.agent.accounts.accounts["k1"].watch
                assert watch is not None
                return any(
                    target.kind.kind == "ConfigMap" and state.resource_version == last
                    for target, state in watch.reflectors.items()
                )

            # The agent has read all 50 from its watch, and sent none of them.
            await wait_until(the_agent_holds_them, what="the agent's watch reached cm-49")
            assert receiver.seqs == [1, 2, 3, 4]
            events_before = receiver.events

            await receiver.ack(1)

            async def fifth() -> bool:
                return len(receiver.seqs) == 5

            await wait_until(fifth)
            assert receiver.seqs == [1, 2, 3, 4, 5]
            # The fifth batch carries the 50 ConfigMaps that waited (coalesced, one batch).
            assert receiver.events - events_before >= 50
            assert stack.agent.link.status.connected
