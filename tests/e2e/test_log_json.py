"""``--log-format json`` end to end: the real ``kubesvc agent`` and ``kubesvc server``
processes, kubesim over TLS on a loopback port, an agent that syncs its account, watches a
while, is refused by kubesim for a moment and is stopped with SIGTERM. Every line either
process wrote parses as one JSON object with the fields a log pipeline indexes, and every
agent line about the account carries it as ``account`` (the text format's ``[account]``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import trio

import kubesim

from .drain_stack import (
    AGENT_DRAIN_SECONDS,
    NAMESPACE,
    SERVER_DRAIN_SECONDS,
    new_sim,
    open_kubesvc,
    server_config,
    server_ports,
    stop,
    wait_converged,
    write_agent_config,
)

_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _parsed(name: str, lines: list[str]) -> list[dict[str, Any]]:
    """Every line as JSON with the core fields (AssertionError naming the first that is not)."""
    parsed = []
    for line in lines:
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            raise AssertionError(f"{name} wrote a line that is not JSON: {line!r}") from None
        assert isinstance(record, dict), line
        assert {"time", "level", "logger", "message"} <= set(record), line
        assert _TIME.fullmatch(record["time"]), line
        parsed.append(record)
    return parsed


async def test_the_agent_and_server_log_json_lines_that_name_the_account(tmp_path: Path) -> None:
    sim = new_sim()
    for index in range(40):
        sim.create(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"c{index}", "namespace": NAMESPACE},
            }
        )
    store = tmp_path / "server.db"
    server_yaml = server_config(tmp_path, store, drain_seconds=SERVER_DRAIN_SECONDS)
    json_logs = ["--log-format", "json"]
    with trio.fail_after(120):
        async with (
            kubesim.open_server(sim, host="127.0.0.1", port=0, tls=True) as kube,
            trio.open_nursery() as nursery,
            httpx.AsyncClient(timeout=10) as http,
        ):
            kubeconfig = kube.kubeconfig(tmp_path / "kubeconfig", user="admin")
            async with open_kubesvc(
                nursery, "server", ["server", "-c", str(server_yaml), *json_logs],
                tmp_path / "server.log",
            ) as srv:  # fmt: skip
                grpc_port, api_port = await server_ports(srv)
                http.base_url = httpx.URL(f"http://127.0.0.1:{api_port}")
                agent_yaml = write_agent_config(tmp_path, grpc_port, kubeconfig)
                async with open_kubesvc(
                    nursery, "agent", ["agent", "-c", str(agent_yaml), *json_logs],
                    tmp_path / "agent.log",
                ) as agent:  # fmt: skip
                    await agent.wait_for(r'"message": "account k1: initial sync done in')
                    await wait_converged(http, sim)
                    # A refusal in the middle of the account's watches: their retry lines.
                    kube.faults.fail_next(2, status=503, verb="watch", resource="configmaps")
                    kube.cut()
                    await agent.wait_for(r'"message": "account k1: ConfigMap.*retry')
                    # A change ends the retrying: the watch delivers it and says so.
                    sim.create(
                        {
                            "apiVersion": "v1",
                            "kind": "ConfigMap",
                            "metadata": {"name": "after", "namespace": NAMESPACE},
                        }
                    )
                    await agent.wait_for(r'"message": "account k1: ConfigMap.*watching again')
                    await stop(agent, AGENT_DRAIN_SECONDS)
                await stop(srv, SERVER_DRAIN_SECONDS)

    lines = _parsed("the agent", agent.lines)
    assert any(line["message"].startswith("agent starting with") for line in lines)
    about = [line for line in lines if "k1" in line["message"]]
    assert len(about) >= 5, about
    for line in about:
        assert line.get("account") == "k1", line
    # The account's own tasks (its client, its watches) carry it whatever they say.
    from_watches = [line for line in lines if line["logger"] == "agent.reflector"]
    assert from_watches
    assert all(line.get("account") == "k1" for line in from_watches)
    # Lines about no account carry none; every line carries the agent's id.
    assert any("account" not in line for line in lines)
    assert all(line.get("agent") for line in lines if line["logger"] != "kubesvc"), [
        line for line in lines if not line.get("agent")
    ]
    server_lines = _parsed("the server", srv.lines)
    assert any("gRPC on" in line["message"] for line in server_lines)
    assert all(line.get("replica") for line in server_lines if line["logger"] != "kubesvc")
