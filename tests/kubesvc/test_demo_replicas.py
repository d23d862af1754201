"""kubesvc demo --replicas 2: two server processes on a PostgreSQL the demo starts, one
cluster; kill -9 of the replica holding the PRIMARY leaves the other serving, the agent on
it and, after the lease TTL, the PRIMARY with it; SIGTERM ends everything, PostgreSQL too.
With --store, a PostgreSQL of the user's is used and left running.

Skipped, with the reason, where no PostgreSQL server binaries can be had (as the store tests
are); the error the demo gives then is tested here with no binaries on purpose.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from kubesvc._postgres import TEST_SETTINGS, NoPostgres, TempPostgres, find_binaries
from server.store import AccountRecord, AccountState, StoreConfig, open_store

from .._procs import LoggedProcess, kubesvc_command, open_logged, run
from .._wait import wait_until

_MANIFEST = "/manifests/demo/shop/deployment%20storefront"
_LEASE_TTL_S = 5.0  # the demo's (kubesvc/_demo_run.py), printed by the demo and checked below


@pytest.fixture
def postgres_binaries() -> Iterator[Path]:
    try:
        yield find_binaries()
    except NoPostgres as exc:
        pytest.skip(f"PostgreSQL tests skipped: {exc}")


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (PID 1 in a container may never reap the
    postmaster that pg_ctl daemonized)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _cleanup(state: dict[str, Any]) -> None:
    """Only when the test failed before the demo cleaned up: what it started must not
    outlive the test."""
    for replica in state.get("replicas", []):
        if _alive(replica["pid"]):
            os.kill(replica["pid"], signal.SIGKILL)
    postgres = state.get("postgres") or {}
    if postgres.get("pid") and _alive(postgres["pid"]):
        os.kill(postgres["pid"], signal.SIGQUIT)  # PostgreSQL's immediate shutdown
    if postgres.get("folder"):
        shutil.rmtree(postgres["folder"], ignore_errors=True)


async def _primaries(client: httpx.AsyncClient, api: str) -> list[str]:
    """The replicas whose session is PRIMARY for demo, as ``api`` answers."""
    reply = await client.get(f"{api}/armory/accounts/demo")
    reply.raise_for_status()
    return [c["clouddriverId"] for c in reply.json()["connections"] if c.get("role") == "PRIMARY"]


async def _live(client: httpx.AsyncClient, api: str) -> set[str]:
    reply = await client.get(f"{api}/armory/clouddrivers")
    reply.raise_for_status()
    return {d["id"] for d in reply.json()}


@pytest.mark.timeout(330)
async def test_demo_replicas_2_survives_killing_the_primary_replica(
    tmp_path: Path, postgres_binaries: Path
) -> None:
    folder = tmp_path / "demo"
    command = kubesvc_command(
        "demo",
        "--replicas",
        "2",
        "--api-port",
        "0",
        "--grpc-port",
        "0",
        "--pods",
        "100",
        "--churn",
        "5",
        "--data-dir",
        str(folder),
    )
    state: dict[str, Any] = {}
    try:
        with trio.fail_after(300):
            async with (
                trio.open_nursery() as nursery,
                httpx.AsyncClient(timeout=10.0) as client,
                # SIGTERM if the test fails midway: the demo then stops what it started.
                open_logged(
                    nursery,
                    "demo",
                    command,
                    tmp_path / "demo.log",
                    stop_signal=signal.SIGTERM,
                    grace=60.0,
                ) as demo,
            ):
                await _scenario(demo, client, folder, state)
    finally:
        _cleanup(state)


async def _scenario(
    demo: LoggedProcess, client: httpx.AsyncClient, folder: Path, state: dict[str, Any]
) -> None:
    await demo.wait_for(rf"lease TTL {_LEASE_TTL_S:g} s")
    await demo.wait_for(r"replica 2: pid \d+")
    state.update(json.loads(await trio.Path(folder / "demo.json").read_text()))
    assert state["postgres"]["startedByDemo"], state
    replicas = {r["index"]: r for r in state["replicas"]}
    for index, replica in replicas.items():
        line = await demo.wait_for(rf"replica {index}: pid (\d+)  REST (\S+)  gRPC")
        assert (int(line.group(1)), line.group(2)) == (replica["pid"], replica["rest"])
    assert _alive(state["postgres"]["pid"])

    # After the sync the demo says whom to kill: the replica holding demo's PRIMARY.
    kill = await demo.wait_for(r"kill -9 (\d+)\s+# replica (\d), (\S+), holds demo's PRIMARY")
    victim = replicas[int(kill.group(2))]
    survivor = replicas[3 - victim["index"]]
    assert int(kill.group(1)) == victim["pid"]
    ids = {victim["serverId"], survivor["serverId"]}
    for replica in replicas.values():  # either replica lists both, from the store
        assert await _live(client, replica["rest"]) == ids
    # Asked of the replica serving demo: on this branch a replica answers 404 for an account
    # no session of its own serves (its registry never reads the row another replica wrote).
    assert await _primaries(client, victim["rest"]) == [victim["serverId"]]
    assert (await client.get(victim["rest"] + _MANIFEST)).status_code == 200
    deployed = await demo.wait_for(r"^  -> (\w+): ")  # the sample deploy's end, before the kill
    assert deployed.group(1) == "succeeded", demo.output()

    os.kill(victim["pid"], signal.SIGKILL)
    await demo.wait_for(rf"replica {victim['index']} \(.*\) ended: killed by SIGKILL")
    await demo.wait_for(rf"the agent's stream is on {survivor['serverId']}")
    # The agent moved at once; the survivor serves demo's cache before any lease moved.
    await demo.wait_for(rf"replica {survivor['index']} answers GET {_MANIFEST}: 200")
    assert (await client.get(survivor["rest"] + _MANIFEST)).status_code == 200

    async def survivor_is_primary() -> bool:
        # Among live replicas: the killed one's connection stays listed in the account's
        # row (it never removed it), next to the PRIMARY that took over.
        live = await _live(client, survivor["rest"])
        return [p for p in await _primaries(client, survivor["rest"]) if p in live] == [
            survivor["serverId"]
        ]

    await wait_until(
        survivor_is_primary,
        timeout=_LEASE_TTL_S * 6,
        what="the survivor holds demo's PRIMARY once the killed replica's lease lapsed",
        interval=0.2,
    )
    await demo.wait_for(rf"PRIMARY for demo is on {survivor['serverId']} now")

    async def only_survivor_live() -> bool:
        return await _live(client, survivor["rest"]) == {survivor["serverId"]}

    await wait_until(
        only_survivor_live,
        timeout=_LEASE_TTL_S * 6,
        what="/armory/clouddrivers lists the survivor alone",
        interval=0.2,
    )
    reply = await client.get(survivor["rest"] + _MANIFEST)
    assert reply.status_code == 200
    assert reply.json()["name"] == "deployment storefront"

    code, _ = await demo.signal_and_wait(signal.SIGTERM, within=120)
    assert code == 0, demo.output()
    out = demo.output()
    assert "PostgreSQL stopped" in out
    assert "replicas stopped: " in out
    assert not _alive(survivor["pid"]), out
    assert not _alive(state["postgres"]["pid"]), out
    assert not await trio.Path(state["postgres"]["folder"]).exists(), out


def test_demo_replicas_without_postgres_says_how_to_get_it(tmp_path: Path) -> None:
    done = run(
        kubesvc_command("demo", "--replicas", "2", "--data-dir", str(tmp_path / "demo")),
        env={**os.environ, "KUBESVC_PG_BIN": str(tmp_path / "nowhere")},
        timeout=60,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    for hint in ("needs PostgreSQL", "apt-get install postgresql", "pip install pgserver"):
        assert hint in done.stderr
    assert "--store postgresql://" in done.stderr


def test_demo_replicas_refuse_a_sqlite_store(tmp_path: Path) -> None:
    done = run(
        kubesvc_command(
            "demo", "--replicas", "2", "--store", f"sqlite://{tmp_path / 'x.db'}", "--duration", "1"
        ),
        timeout=60,
    )
    assert done.returncode == 1
    assert "need a store they share: --store postgresql://" in done.stderr


@pytest.mark.timeout(330)
async def test_demo_replicas_on_a_given_store_forget_an_earlier_demo_and_leave_it_running(
    tmp_path: Path, postgres_binaries: Path
) -> None:
    # An existing PostgreSQL (--store) where an earlier demo left account demo, bound to
    # that run's kubesim: this run's agent would be refused unless the demo drops it first.
    server = TempPostgres(dict(TEST_SETTINGS))
    await trio.to_thread.run_sync(server.start)
    try:
        url = server.url(await trio.to_thread.run_sync(server.create_database, "mine"))
        async with open_store(StoreConfig(url)) as store:
            stale = AccountRecord("demo", "10.9.9.9:6443", "ab" * 32, status=AccountState.ACTIVE)
            await store.upsert_account(stale)
        command = kubesvc_command(
            "demo",
            "--replicas",
            "2",
            "--store",
            url,
            "--duration",
            "10",
            "--api-port",
            "0",
            "--grpc-port",
            "0",
            "--pods",
            "50",
            "--churn",
            "2",
            "--data-dir",
            str(tmp_path / "demo"),
        )
        with trio.fail_after(300):
            async with (
                trio.open_nursery() as nursery,
                open_logged(
                    nursery,
                    "demo",
                    command,
                    tmp_path / "demo.log",
                    stop_signal=signal.SIGTERM,
                    grace=60.0,
                ) as demo,
            ):
                await demo.process.wait()
        out = demo.output()
        assert demo.returncode == 0, out
        assert "(--store; left as it is)" in out
        assert "forgot account 'demo' left by an earlier demo" in out
        assert "initial sync in" in out
        assert "PostgreSQL stopped" not in out
        # The user's server still runs, with what the demo wrote in its database.
        async with open_store(StoreConfig(url)) as store:
            account = await store.get_account("demo")
            assert account is not None
            assert account.kube_host != stale.kube_host
            assert await store.count_objects(account="demo") > 0
    finally:
        await trio.to_thread.run_sync(server.stop)
