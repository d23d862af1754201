"""Rediscovery with nothing new costs no document (issue 17: 1,000 accounts rediscover every
2 minutes): the agent sends the aggregated document's ETag back as If-None-Match, kubesim
answers 304 as kube-apiserver does, and the kinds parsed last time are used again. A change
(a CRD created) changes the ETag: the next discovery reads and parses the new document."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import kubesim
from agent import AccountConfig, open_kube_client
from agent.watch import DiscoveryCache, discover
from tests._widgets import widget_crd

TRANSPORTS = [
    pytest.param(True, True, id="h2-tls"),
    pytest.param(True, False, id="http1-tls"),
    pytest.param(False, False, id="http1-plain"),
]


@pytest.mark.parametrize(("tls", "http2"), TRANSPORTS)
async def test_an_unchanged_discovery_is_a_304_and_a_crd_changes_it(
    tmp_path: Path, tls: bool, http2: bool
) -> None:
    with trio.fail_after(30):
        sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
        async with kubesim.open_server(sim, tls=tls) as server:
            kubeconfig = server.kubeconfig(tmp_path / "kc")
            account = AccountConfig("acc", kube_config_file=str(kubeconfig))
            async with open_kube_client(account, environ={}, http2=http2) as client:
                cache = DiscoveryCache()
                first = await discover(client, cache)
                assert cache.not_modified == 0
                assert set(cache.entries) == {"/api", "/apis"}

                again = await discover(client, cache)
                assert cache.not_modified == 2  # /api and /apis: no body either time
                assert again.kinds == first.kinds

                sim.create(widget_crd())
                changed = await discover(client, cache)
                assert cache.not_modified == 3  # /api (core) did not change; /apis did
                assert "Widget" in {kind.kind for kind in changed.kinds}
                assert "Widget" not in {kind.kind for kind in first.kinds}


async def test_discovery_without_a_cache_reads_every_document(tmp_path: Path) -> None:
    """Callers without a cache (the doctor, one-off tools) get the whole document each time."""
    with trio.fail_after(30):
        sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
        async with kubesim.open_server(sim, tls=True) as server:
            account = AccountConfig("acc", kube_config_file=str(server.kubeconfig(tmp_path / "k")))
            async with open_kube_client(account, environ={}) as client:
                assert (await discover(client)).kinds == (await discover(client)).kinds
