"""Graceful SIGTERM (issue 12, defect 5), with the real ``kubesvc agent`` and ``kubesvc server``
processes and kubesim over TLS on a loopback port.

* The agent, SIGTERMed under churn, exits 0 inside its drain bound; what the server holds is,
  kind by kind, exactly kubesim's state at the resourceVersion the server stored (everything
  the agent took from its watches was acknowledged); the store file is clean; after a restart
  nothing is lost.
* The agent, SIGTERMed while a deploy hangs on a stalled API server, ends the operation with
  a retryable failure (Unavailable, "shutting down ... retry") that reaches the task, and
  exits 0 inside its bound.
* The server, SIGTERMed with an agent connected and a REST request in flight: it refuses new
  connections, answers the request (``connection: close``), ends the agent's stream so that
  the agent connects again at once (no backoff, although its base delay is 10 s) through the
  same address (a loopback proxy playing the Kubernetes Service, whose endpoint moved to a
  second server), exits 0, and its store reopens clean.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import trio

import kubesim
from server.store import open_sqlite_store

from .drain_stack import (
    AGENT_DRAIN_SECONDS,
    KINDS,
    NAMESPACE,
    SERVER_DRAIN_SECONDS,
    State,
    assert_clean_store,
    new_sim,
    open_kubesvc,
    open_server_and_agent,
    server_config,
    server_ports,
    sim_state,
    stop,
    wait_converged,
    write_agent_config,
)
from .harness import wait_until


async def _churn(churn: kubesim.Churn, progressed: trio.Event, after: int) -> None:
    done = 0
    while True:
        churn.step()
        done += 1
        if done == after:
            progressed.set()
        await trio.sleep(0.002)  # pacing: ~300 changes/s with the agent's share of the CPU


async def _stored_at_resume_points(path: Path, sim: kubesim.Cluster) -> list[str]:
    """For each kind, what differs between the store and kubesim's state at the
    resourceVersion the store holds for it (empty: equal). Reopens the store."""
    differences: list[str] = []
    async with open_sqlite_store(str(path)) as store:
        points = {p.kind: p for p in await store.resume_points("k1") if p.scope == NAMESPACE}
        assert set(points) == set(KINDS), points
        page = await store.query_objects(account="k1", namespace=NAMESPACE, limit=10_000)
        stored: State = {(o.kind, o.name): o.resource_version for o in page.objects}
    for kind, plural in KINDS.items():
        rv = points[kind].resource_version
        snapshot = sim.list_page(
            sim.resolve("", "v1", plural),
            namespace=NAMESPACE,
            resource_version=rv,
            resource_version_match="Exact",
        )
        want = {(kind, s.name): str(s.rv) for s in snapshot.items}
        have = {key: value for key, value in stored.items() if key[0] == kind}
        if want != have:
            missing = sorted(set(want) - set(have))[:5]
            extra = sorted(set(have) - set(want))[:5]
            stale = sorted(k for k in set(want) & set(have) if want[k] != have[k])[:5]
            differences.append(f"{kind} at {rv}: missing {missing} extra {extra} stale {stale}")
    return differences


async def test_sigterm_agent_under_churn_drains_and_loses_nothing(tmp_path: Path) -> None:
    sim = new_sim()
    churn = kubesim.Churn(sim, rate=1, kinds=tuple(KINDS.values()), namespace=NAMESPACE, seed=7)
    for _ in range(60):
        churn.step()
    store = tmp_path / "server.db"
    server_yaml = server_config(tmp_path, store, drain_seconds=SERVER_DRAIN_SECONDS)
    with trio.fail_after(150):
        async with (
            kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
            trio.open_nursery() as nursery,
            httpx.AsyncClient(timeout=10) as http,
        ):
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", user="admin")
            logs = {"server_log": tmp_path / "server.log", "agent_log": tmp_path / "agent.log"}
            async with open_server_and_agent(
                nursery, http, sim, tmp_path, server_yaml, kubeconfig, **logs
            ) as (srv, agent):
                progressed = trio.Event()
                async with trio.open_nursery() as churning:
                    churning.start_soon(_churn, churn, progressed, 300)
                    await progressed.wait()
                    seconds = await stop(agent, AGENT_DRAIN_SECONDS)
                    churning.cancel_scope.cancel()
                await agent.wait_for(r"every event taken from the watches is acknowledged")
                await agent.wait_for(r"shutdown: drained in")
                assert "Traceback" not in agent.output()
                print(f"\nagent drained under churn in {seconds:.2f} s")
                await stop(srv, SERVER_DRAIN_SECONDS)
            assert_clean_store(store)
            assert await _stored_at_resume_points(store, sim) == []
            for _ in range(30):
                churn.step()  # changes while no agent runs: the restarted one must bring them

            # A restart of both: the agent resumes from what the server stored and the
            # changes made since (the churn went on after the agent stopped reading) arrive.
            async with open_server_and_agent(
                nursery, http, sim, tmp_path, server_yaml, kubeconfig, **logs
            ) as (srv, agent):
                await stop(agent, AGENT_DRAIN_SECONDS)
                await stop(srv, SERVER_DRAIN_SECONDS)
            assert_clean_store(store)


async def test_sigterm_agent_ends_a_hanging_operation_with_a_retryable_failure(
    tmp_path: Path,
) -> None:
    sim = new_sim()
    store = tmp_path / "server.db"
    server_yaml = server_config(tmp_path, store, drain_seconds=SERVER_DRAIN_SECONDS)
    stalled = 1000
    with trio.fail_after(90):
        async with (
            kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
            trio.open_nursery() as nursery,
            httpx.AsyncClient(timeout=10) as http,
        ):
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", user="admin")
            logs = {"server_log": tmp_path / "server.log", "agent_log": tmp_path / "agent.log"}
            async with open_server_and_agent(
                nursery, http, sim, tmp_path, server_yaml, kubeconfig, **logs
            ) as (srv, agent):
                await agent.wait_for(r"account k1: PRIMARY")
                # From now on every API request but the watches hangs: the deploy below
                # cannot finish, however long it is given.
                kube.faults.stall_responses(count=stalled)
                manifest = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "stuck", "namespace": NAMESPACE},
                    "data": {"a": "b"},
                }
                body = [{"deployManifest": {"account": "k1", "manifests": [manifest]}}]
                answer = await http.post("/kubernetes/ops", json=body)
                assert answer.status_code == 200, answer.text
                task_id = answer.json()["id"]

                async def hanging() -> bool:
                    await trio.lowlevel.checkpoint()
                    return kube.faults.stall_next < stalled

                await wait_until(hanging, interval=0.02)
                seconds = await stop(agent, AGENT_DRAIN_SECONDS)
                await agent.wait_for(r"ending 1 operation\(s\) still running")

                task = (await http.get(f"/task/{task_id}")).json()
                assert task["status"]["failed"] is True, task
                failure = task["resultObjects"][-1]
                assert failure["cause"] == "Unavailable", failure
                assert "shutting down" in failure["message"], failure
                assert "retry" in failure["message"], failure
                assert "disconnected" not in json.dumps(task)
                print(f"\nagent ended the operation and exited in {seconds:.2f} s")
                await stop(srv, SERVER_DRAIN_SECONDS)


class _Service:
    """A loopback TCP proxy playing a Kubernetes Service: new connections go to ``backend``
    (which a test moves, as endpoints move in a rollout); open ones stay where they are."""

    def __init__(self, backend: int) -> None:
        self.backend = backend

    async def serve(self, *, task_status: trio.TaskStatus[int]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._forward, listeners)

    async def _forward(self, client: trio.SocketStream) -> None:
        async with client:
            try:
                backend = await trio.open_tcp_stream("127.0.0.1", self.backend)
            except OSError:
                return  # refused: the client sees its connection closed
            async with backend, trio.open_nursery() as nursery:
                nursery.start_soon(_pipe, client, backend, nursery.cancel_scope)
                nursery.start_soon(_pipe, backend, client, nursery.cancel_scope)


async def _pipe(source: trio.SocketStream, sink: trio.SocketStream, both: trio.CancelScope) -> None:
    try:
        while data := await source.receive_some(65536):
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    both.cancel()  # one side ended: end the other too


async def _refused(port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return True
    await stream.aclose()
    return False


async def _read_response(stream: trio.SocketStream) -> tuple[str, bytes]:
    """(the head, the body) of one HTTP/1.1 response the server closes after."""
    data = b""
    while chunk := await stream.receive_some(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body


async def test_sigterm_server_drains_and_the_agent_moves_at_once(tmp_path: Path) -> None:
    sim = new_sim()
    churn = kubesim.Churn(sim, rate=1, kinds=tuple(KINDS.values()), namespace=NAMESPACE, seed=3)
    for _ in range(40):
        churn.step()
    store_a, store_b = tmp_path / "a.db", tmp_path / "b.db"
    yaml_a = server_config(
        tmp_path, store_a, drain_seconds=SERVER_DRAIN_SECONDS, serverId="server-a"
    )
    yaml_b = server_config(
        tmp_path, store_b, drain_seconds=SERVER_DRAIN_SECONDS, serverId="server-b"
    )
    with trio.fail_after(120):
        async with (
            kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
            trio.open_nursery() as nursery,
            httpx.AsyncClient(timeout=10) as http,
        ):
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", user="admin")
            async with (
                open_kubesvc(
                    nursery, "server-a", ["server", "-c", str(yaml_a)], tmp_path / "a.log"
                ) as server_a,
                open_kubesvc(
                    nursery, "server-b", ["server", "-c", str(yaml_b)], tmp_path / "b.log"
                ) as server_b,
            ):
                grpc_a, api_a = await server_ports(server_a)
                grpc_b, api_b = await server_ports(server_b)
                service = _Service(grpc_a)
                service_port: int = await nursery.start(service.serve)
                # A 10 s base delay (8 s at least with its jitter): a reconnect well within it
                # was no backoff.
                agent_yaml = write_agent_config(
                    tmp_path, service_port, kubeconfig, base_delay="10s"
                )
                async with open_kubesvc(
                    nursery, "agent", ["agent", "-c", str(agent_yaml)], tmp_path / "agent.log"
                ) as agent:
                    await agent.wait_for(r"connected to server server-a")
                    http.base_url = httpx.URL(f"http://127.0.0.1:{api_a}")
                    await wait_converged(http, sim)

                    # A request in flight: its head and half its body are sent.
                    query = b"GET /v1/objects?account=k1&namespace=churn HTTP/1.1\r\n"
                    head = query + b"host: a\r\ncontent-length: 8\r\n\r\n"
                    request = await trio.open_tcp_stream("127.0.0.1", api_a)
                    async with request:
                        await request.send_all(head + b"{}  ")
                        service.backend = grpc_b  # the rollout moves the Service's endpoint
                        signalled = trio.current_time()
                        server_a.process.send_signal(signal.SIGTERM)
                        await server_a.wait_for(r"REST API: draining \d+ connection")
                        assert await _refused(api_a), "new REST connections must be refused"
                        assert await _refused(grpc_a), "new gRPC connections must be refused"
                        await agent.wait_for(r"the server is draining: reconnecting in 0\.\d\d s")
                        await agent.wait_for(r"connected to server server-b")
                        moved = trio.current_time() - signalled
                        await request.send_all(b"    ")  # the rest of the body
                        response, body = await _read_response(request)
                    assert response.startswith("HTTP/1.1 200"), response
                    assert "connection: close" in response.lower(), response
                    assert len(json.loads(body)["items"]) == len(sim_state(sim))
                    assert moved < 6.0, f"the agent took {moved:.1f} s to move (a backoff?)"
                    code = await server_a.process.wait()
                    assert code == 0, server_a.output()
                    assert "Traceback" not in server_a.output()
                    print(f"\nagent moved to server-b {moved:.2f} s after server-a's SIGTERM")

                    http.base_url = httpx.URL(f"http://127.0.0.1:{api_b}")
                    await wait_converged(http, sim)
                    await stop(agent, AGENT_DRAIN_SECONDS)
                await stop(server_b, SERVER_DRAIN_SECONDS)
            assert_clean_store(store_a)
            async with open_sqlite_store(str(store_a)) as reopened:
                assert await reopened.count_objects(account="k1") == len(sim_state(sim))
            assert not any("REST" in line and "ERROR" in line for line in server_a.lines)
            nursery.cancel_scope.cancel()  # the proxy
