"""Coalescing must not reorder a kind's events across a reconnect (review finding B1).

The receiver, like the server, moves a kind's resume point to the resourceVersion of the
last event it applied, and the agent's next session watches from there. If the channel
handed out a coalesced entry at its *oldest* place (``a@5, b@6, a@7`` taken as
``[a@7, b@6]``), a stream that dropped after ``a@7`` was applied but before ``b@6`` was
would resume from 7 and ``b@6`` would be lost for good (until a relist).

The workload makes that window wide: a few small hot ConfigMaps are updated over and over
among big cold ones that are each updated exactly once, through a 256 KiB budget to a
receiver that acks slowly, so entries wait in the channel, hot ones coalesce and batches
split (64 KiB each: two cold objects and the hot ones squeezed in between). The receiver is
taken down 15 times, each time right after it applied a batch that ends on a hot object and
before acknowledging it. Afterwards:

* the receiver holds exactly what kubesim holds (every cold update arrived, every hot object
  is at its last version): nothing was lost across the reconnects;
* within every session, a kind's watch events arrived in resourceVersion order (the cause
  checked directly, whether or not a cut happened to land in a reordered stretch), and the
  resume point is the newest event.

Measured against the old queue (oldest place), 10 runs: every run failed; the final-state
check caught lost updates in 4 of them (cold objects stuck at their initial version), the
order check caught the reordering (hundreds of events behind a newer one) in the others.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import trio

import kubesim
import wire

from .harness import ReceiverStack, open_receiver_stack, wait_until
from .receiver import Receiver

NAMESPACE = "order"
ACCOUNT = "k1"
COLD = 400  # updated once each, during the burst
HOT = 4  # updated HOT_PER_COLD times per cold update, at random
HOT_PER_COLD = 2
CUTS = 15  # receiver restarts during the burst
CUT_EVERY = 20  # events received
# Cold objects are big (~20 KB: three fill a 64 KiB batch), hot ones small, so that a batch
# tends to end on a small hot entry squeezed in after two big cold ones.
COLD_PADDING = "x" * 20_000
HOT_PADDING = "x" * 100
SCOPE = (ACCOUNT, "v1", "ConfigMap", NAMESPACE)


class StreamOrder:
    """Checks, batch by batch, that the resourceVersions of a kind's watch events never go
    backwards within a session (outside sync brackets, where listed objects come in any
    order). Going backwards is exactly what lets a reconnect skip an event."""

    def __init__(self, receiver: Receiver) -> None:
        self._receiver = receiver
        self._last: dict[tuple[int, tuple[str, str, str, str]], int] = {}
        self._listing: set[tuple[str, str, str, str]] = set()
        self.checked = 0
        self.newest = 0  # the newest resourceVersion seen of any watch event
        self.backwards: list[tuple[int, int]] = []  # (newer seen first, older seen after)

    def see(self, records: list[wire.EventRecord]) -> None:
        session = self._receiver.sessions
        for record in records:
            scope = (record.account, record.api_version, record.kind, record.scope)
            if record.type == wire.EventType.SYNC_BEGIN:
                self._listing.add(scope)
                continue
            if record.type == wire.EventType.SYNC_END:
                self._listing.discard(scope)
                self._last[session, scope] = int(record.resource_version)
                continue
            if scope in self._listing:
                continue
            rv = int(record.resource_version)
            self.newest = max(self.newest, rv)
            last = self._last.get((session, scope), 0)
            if rv < last:
                self.backwards.append((last, rv))
            else:
                self._last[session, scope] = rv
            self.checked += 1


def _configmap(name: str, value: str, padding: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": {"value": value, "padding": padding},
    }


def _update(sim: kubesim.Cluster, name: str, value: str) -> str:
    obj = sim.get("", "v1", "configmaps", NAMESPACE, name)
    obj["data"]["value"] = value
    updated = sim.update(obj)
    rv: str = updated["metadata"]["resourceVersion"]
    return rv


def _sim_versions(sim: kubesim.Cluster) -> dict[str, str]:
    return {
        item["metadata"]["name"]: item["metadata"]["resourceVersion"]
        for item in sim.list("", "v1", "configmaps", NAMESPACE)
    }


def _received_versions(receiver: Receiver) -> dict[str, str]:
    return {
        key[4]: json.loads(body)["metadata"]["resourceVersion"]
        for key, body in receiver.objects.items()
        if key[0] == ACCOUNT and key[2] == "ConfigMap" and key[3] == NAMESPACE
    }


async def _burst(sim: kubesim.Cluster, done: trio.Event, last_rv: list[str]) -> None:
    """Each cold object updated once, with hot updates at random in between; yields often so
    that the watch streams the changes while they are made."""
    rng = random.Random(7)
    for index in range(COLD):
        last_rv[0] = _update(sim, f"cold-{index}", "updated")
        for _ in range(HOT_PER_COLD):
            last_rv[0] = _update(sim, f"hot-{rng.randrange(HOT)}", f"v{index}")
        if index % 5 == 0:
            await trio.sleep(0.002)
    done.set()


class Cutter:
    """Takes the receiver down at the riskiest moment: right after it applied (committed) a
    batch that ends on a hot object, before that batch is acknowledged, at most CUTS times
    and at least CUT_EVERY events apart. A hot entry at the end of a batch is the one that,
    had it kept its oldest place, would carry a newer resourceVersion than entries behind it.
    """

    def __init__(self, stack: ReceiverStack, receiver: Receiver) -> None:
        self._stack = stack
        self._receiver = receiver
        self._next_at = CUT_EVERY
        self.cuts = 0
        self.down = trio.Event()

    def see(self, records: list[wire.EventRecord]) -> None:
        if self.cuts >= CUTS or self.down.is_set() or self._receiver.events < self._next_at:
            return
        if records and records[-1].name.startswith("hot-"):
            # Cancels the handler at its next checkpoint: before it acknowledges this batch.
            self._stack.stop_receiver()
            self.cuts += 1
            self.down.set()

    async def restart_after_each_cut(self) -> None:
        while True:
            await self.down.wait()
            # Down until the agent has seen it (its batches in flight are then dropped).
            await wait_until(
                lambda: not self._stack.agent.link.status.connected, what="the agent saw the cut"
            )
            await self._stack.start_receiver()
            self._next_at = self._receiver.events + CUT_EVERY
            self.down = trio.Event()


@pytest.mark.timeout(180)  # its own bound is 120 s (about 10 s on 2 idle cores)
async def test_coalescing_never_loses_an_event_across_reconnects(tmp_path: Path) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=100_000, controllers=False))
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for index in range(COLD):
        sim.create(_configmap(f"cold-{index}", "initial", COLD_PADDING))
    for index in range(HOT):
        sim.create(_configmap(f"hot-{index}", "initial", HOT_PADDING))
    receiver = Receiver(ack_delay=0.02, keep_payloads=False)
    order = StreamOrder(receiver)
    accounts = [
        {
            "name": ACCOUNT,
            "kubeConfigFile": str(tmp_path / "kubeconfig"),
            "kinds": ["ConfigMap"],
            "namespaces": [NAMESPACE],
        }
    ]
    with trio.fail_after(120):
        async with open_receiver_stack(
            tmp_path, receiver, sim=sim, accounts=accounts, budget={"bytes": "256Ki"}
        ) as stack:
            await receiver.changed.wait_for(
                lambda: SCOPE in receiver.resume, what="the initial list is in"
            )
            cutter = Cutter(stack, receiver)

            def on_batch(records: list[wire.EventRecord]) -> None:
                order.see(records)
                cutter.see(records)

            receiver.on_batch = on_batch
            stack.nursery.start_soon(cutter.restart_after_each_cut)
            sessions_before = receiver.sessions
            done = trio.Event()
            last_rv = [""]

            def caught_up() -> bool:
                # Everything the agent will ever send has been sent and acknowledged once the
                # burst is over, its newest event has arrived and the budget is empty.
                return (
                    done.is_set()
                    and not cutter.down.is_set()
                    and order.newest >= int(last_rv[0])
                    and stack.agent.budget.statistics().in_use == 0
                )

            await _burst(sim, done, last_rv)
            await wait_until(caught_up, timeout=100, what="the agent caught up after the burst")
            cuts = cutter.cuts
            assert cuts >= 3, f"the receiver was cut only {cuts} time(s) mid-stream"
            assert receiver.sessions - sessions_before == cuts
            expected = _sim_versions(sim)
            received = _received_versions(receiver)
            wrong = {
                name: (received.get(name), rv)
                for name, rv in expected.items()
                if received.get(name) != rv
            }
            assert not wrong, (
                f"{len(wrong)} object(s) differ (received, kubesim) after "
                f"{cuts} reconnects: {dict(list(wrong.items())[:8])}"
            )
            assert received.keys() == expected.keys()
            # The cause, seen on the wire: a kind's resourceVersions never went backwards, so
            # the resume point is the newest event and nothing is behind it.
            assert order.checked > COLD, order.checked
            assert not order.backwards, (
                f"{len(order.backwards)} watch event(s) of {order.checked} arrived after a "
                f"newer one of their kind (newer, older): {order.backwards[:8]}"
            )
            assert receiver.resume[SCOPE] == last_rv[0]
