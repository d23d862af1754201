"""Fixtures for kubesim's HTTP tests: a real server on a loopback port and an httpx client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from kubernetes import client as k8s

import kubesim


@pytest.fixture
def sim() -> kubesim.Cluster:
    return kubesim.Cluster(
        kubesim.SimConfig(watch_history=50, bookmark_interval=0.2, continue_ttl=0.5)
    )


@pytest.fixture
async def server(sim: kubesim.Cluster) -> AsyncIterator[kubesim.Server]:
    async with kubesim.open_server(sim) as running:
        yield running


@pytest.fixture
async def http(server: kubesim.Server) -> AsyncIterator[httpx.AsyncClient]:
    token = server.users["admin"].token
    async with httpx.AsyncClient(
        base_url=server.url, headers={"authorization": f"Bearer {token}"}, timeout=10
    ) as client:
        yield client


@pytest.fixture
def api(server: kubesim.Server) -> Iterator[k8s.ApiClient]:
    """The official kubernetes client, as the admin user, against ``server``."""
    config = k8s.Configuration(host=server.url)
    config.api_key = {"authorization": server.users["admin"].token}
    config.api_key_prefix = {"authorization": "Bearer"}
    with k8s.ApiClient(config) as api_client:
        yield api_client
