"""The Armory-compatible endpoints: accounts, dynamic accounts, agents, clouddrivers."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from server.store import AgentRecord

from .test_api_support import ACCOUNT, k8s, names, open_api


@pytest.mark.parametrize("standalone", [False, True], ids=["server-state", "standalone"])
async def test_add_accounts_then_read_them(tmp_path: Path, standalone: bool) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path, standalone=standalone) as api:
            body = [{"name": "a1", "zoneId": "eu"}, {"name": "a2", "kubeconfigFile": "/k/a2"}]
            r = await api.client.post("/armory/accounts", json=body)
            assert r.status_code == 202
            assert names(r.json()) == ["a1", "a2"]
            r = await api.client.get("/armory/accounts/a1")
            assert r.status_code == 200
            account = r.json()
            assert account["status"] == "INACTIVE"
            assert account["zoneId"] == "eu"
            assert set(account) == {
                "name", "kubeHost", "certFingerprint", "kubeVersion", "status", "errorMessage",
                "retryCount", "dynamic", "permissions", "properties", "zoneId", "lastUpdated",
                "connections",
                "unavailableKinds",  # ours: the kinds the agent cannot watch (none here)
            }  # fmt: skip
            assert account["unavailableKinds"] == []
            r = await api.client.get("/armory/accounts/a2")
            assert r.json()["properties"] == {"kubeconfigFile": "/k/a2"}
            r = await api.client.get("/armory/accounts")
            assert names(r.json()) == ["a1", "a2"]


async def test_add_accounts_refusals(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await api.account("taken")
            r = await api.client.post("/armory/accounts", json=[{"name": "taken"}, {"name": "n"}])
            assert r.status_code == 409
            assert r.json()["names"] == ["taken"]
            assert (await api.client.get("/armory/accounts/n")).status_code == 404  # nothing added
            r = await api.client.post("/armory/accounts", json=[])
            assert r.status_code == 400
            assert "empty" in r.json()["message"]
            r = await api.client.post("/armory/accounts", json=[{"name": "x"}, {"zoneId": "eu"}])
            assert r.status_code == 400
            assert r.json()["message"].startswith("body[1].name")
            r = await api.client.post("/armory/accounts", json={"name": "x"})
            assert r.status_code == 400
            assert "list" in r.json()["message"]
            # "/" separates an account from its shard (docs/sharding.md).
            r = await api.client.post("/armory/accounts", json=[{"name": "big/pods"}])
            assert r.status_code == 400
            assert r.json()["message"].startswith("body[0].name: an account name may not")
            r = await api.client.post("/armory/accounts", content=b"{not json")
            assert r.status_code == 400
            assert "not valid JSON" in r.json()["message"]
            r = await api.client.post("/armory/accounts", json=[{"name": "d"}, {"name": "d"}])
            assert r.status_code == 400
            assert "more than once" in r.json()["message"]
            body = r.json()
            assert body["status"] == 400
            assert body["error"] == "Bad Request"


async def test_patch_accounts(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await api.client.post("/armory/accounts", json=[{"name": "a1"}])
            r = await api.client.patch(
                "/armory/accounts", json=[{"name": "a1", "state": "active", "zoneId": "us"}]
            )
            assert r.status_code == 200
            assert r.json()[0]["status"] == "ACTIVE"
            assert (await api.client.get("/armory/accounts/a1")).json()["zoneId"] == "us"
            r = await api.client.patch("/armory/accounts", json=[{"name": "a1", "state": "SLEEPY"}])
            assert r.status_code == 400
            assert "body[0].state" in r.json()["message"]
            r = await api.client.patch("/armory/accounts", json=[{"name": "a1"}])
            assert r.status_code == 400
            assert "body[0].state" in r.json()["message"]
            r = await api.client.patch(
                "/armory/accounts", json=[{"name": "nope", "state": "ACTIVE"}]
            )
            assert r.status_code == 404
            assert r.json()["names"] == ["nope"]


async def test_delete_accounts_and_their_objects(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            for name in ("a1", "a2", ACCOUNT):
                await api.account(name)
            await api.add(k8s("v1", "ConfigMap", "cm", "ns"))
            r = await api.client.request("DELETE", "/armory/accounts", json=["a1", "nope"])
            assert r.status_code == 404
            assert r.json()["names"] == ["nope"]
            assert (await api.client.get("/armory/accounts/a1")).status_code == 200  # untouched
            r = await api.client.request("DELETE", "/armory/accounts", json=["a1", "a2"])
            assert r.status_code == 200
            assert r.json() == {"deleted": ["a1", "a2"]}
            r = await api.client.request("DELETE", "/armory/accounts", json=[1, 2])
            assert r.status_code == 400
            r = await api.client.request("DELETE", "/armory/accounts", json=[])
            assert r.status_code == 400
            r = await api.client.delete(f"/armory/accounts/{ACCOUNT}")
            assert r.status_code == 200
            r = await api.client.get("/v1/objects", params={"account": ACCOUNT})
            assert r.json()["items"] == []
            r = await api.client.delete(f"/armory/accounts/{ACCOUNT}")
            assert r.status_code == 404
            assert r.json()["message"] == f"Account does not exist (name: {ACCOUNT})"
            r = await api.client.get("/armory/accounts/ghost")
            assert r.status_code == 404


@pytest.mark.parametrize("standalone", [False, True], ids=["server-state", "standalone"])
async def test_dynamic_accounts(tmp_path: Path, standalone: bool) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path, standalone=standalone) as api:
            definition = {
                "name": "dyn",
                "kubeconfigContents": "apiVersion: v1\nkind: Config\n",
                "namespaces": ["team-a"],
                "permissions": {"READ": ["devs"], "WRITE": ["ops"]},
            }
            r = await api.client.post("/armory/accounts/dynamic", json=definition)
            assert r.status_code == 202
            body = r.json()
            assert body["agentId"] is None  # no agent connected: stored, not pushed
            assert "no agent" in body["message"]
            account = body["account"]
            assert account["dynamic"] is True
            assert account["status"] == "INACTIVE"
            assert "kubeconfigContents" not in account["properties"]  # credentials never stored
            assert account["permissions"] == {"READ": ["devs"], "WRITE": ["ops"]}
            r = await api.client.post("/armory/accounts/dynamic", json=definition)
            assert r.status_code == 409
            r = await api.client.put(
                "/armory/accounts/dynamic", json={**definition, "namespaces": ["team-b"]}
            )
            assert r.status_code == 202
            stored = (await api.client.get("/armory/accounts/dyn")).json()
            assert stored["properties"]["namespaces"] == ["team-b"]
            await api.account("static")
            r = await api.client.put(
                "/armory/accounts/dynamic", json={"name": "static", "serviceAccount": True}
            )
            assert r.status_code == 409
            assert "not a dynamic account" in r.json()["message"]


async def test_dynamic_account_bad_bodies(tmp_path: Path) -> None:
    cases = [
        ([], "body: expected a JSON object"),
        ({"kubeconfigFile": "/k"}, "body.name"),
        ({"name": "x"}, "needs one of kubeconfigContents, kubeconfigFile or serviceAccount"),
        ({"name": "x", "serviceAccount": "yes"}, "body.serviceAccount"),
        ({"name": "x", "serviceAccount": True, "kinds": "deployment"}, "body.kinds"),
        ({"name": "x", "kubeconfigFile": 3}, "body.kubeconfigFile"),
        (
            {"name": "x", "serviceAccount": True, "permissions": {"READ": "devs"}},
            "permissions.READ",
        ),
    ]
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            for body, message in cases:
                r = await api.client.post("/armory/accounts/dynamic", json=body)
                assert r.status_code == 400, body
                assert message in r.json()["message"], (body, r.json())


async def test_agents_and_clouddrivers(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            assert (await api.client.get("/armory/agents")).json() == []
            for i, accounts in enumerate((["a1"], ["a1", "a2"])):
                await api.store.upsert_agent(
                    AgentRecord(
                        session_id=f"s{i}", agent_id="agent-1", instance_id=f"pod-{i}",
                        server_id="srv-1", accounts=accounts, connected_at_ms=1000 + i,
                    )
                )  # fmt: skip
            agents = (await api.client.get("/armory/agents")).json()
            assert len(agents) == 1
            agent = agents[0]
            assert agent["agentId"] == "agent-1"
            assert agent["accounts"] == ["a1", "a2"]
            assert agent["clouddriverId"] == "srv-1"
            assert agent["lastConnection"] == 1001
            assert {"caching", "type"} <= set(agent)
            assert [i["instanceId"] for i in agent["instances"]] == ["pod-0", "pod-1"]
            r = await api.client.get("/armory/agents/agent-1")
            assert r.json() == agent
            r = await api.client.get("/armory/agents/ghost")
            assert r.status_code == 404
            assert "ghost" in r.json()["message"]
            r = await api.client.post("/armory/agent/agent-1/disconnect")
            assert r.status_code == 200
            assert r.json() == {"agentId": "agent-1", "sessionsEnded": 0}  # standalone: no sessions
            r = await api.client.post("/armory/agent/ghost/disconnect")
            assert r.status_code == 404
            drivers = (await api.client.get("/armory/clouddrivers")).json()
            assert drivers == [{"id": "srv-1", "local": True, "agents": ["agent-1"]}]
            assert (await api.client.get("/armory/clouddrivers/srv-1")).json() == drivers[0]
            assert (await api.client.get("/armory/clouddrivers/other")).status_code == 404


async def test_kubernetes_account_views(tmp_path: Path) -> None:
    with trio.fail_after(10):
        async with open_api(tmp_path) as api:
            await api.account("listed", properties={"namespaces": ["b", "a"]})
            await api.account(ACCOUNT)
            await api.add(k8s("v1", "Namespace", "prod"), k8s("v1", "Namespace", "dev"))
            r = await api.client.get("/agents/kubernetes/accounts/listed")
            assert r.json()["namespaces"] == ["a", "b"]
            r = await api.client.get(f"/agents/kubernetes/accounts/{ACCOUNT}/namespaces")
            assert r.json() == ["dev", "prod"]
            r = await api.client.get("/agents/kubernetes/accounts/ghost")
            assert r.status_code == 404
            r = await api.client.get("/agents/kubernetes/accounts/ghost/namespaces")
            assert r.status_code == 404
