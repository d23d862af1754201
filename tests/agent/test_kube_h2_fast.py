"""The HTTP/2 transport's DATA handling against kubesim over TLS: far more than a window of
watch events arrives whole and in order (our WINDOW_UPDATEs keep it flowing), a consumer
that pauses holds at most a window, and the stream's end comes through."""

from __future__ import annotations

from pathlib import Path

import trio

import kubesim
from agent import AccountConfig, open_kube_client
from agent.kube._h2 import STREAM_WINDOW, H2Exchange
from agent.watch._lines import WatchDecoder

PODS = 1500  # ~6.6 MB of events: more than six stream windows


async def _watch_all(tmp_path: Path, *, pause_after: int | None) -> tuple[list[str], int]:
    sim = kubesim.Cluster(kubesim.SimConfig(watch_history=PODS + 100, controllers=False))
    before = str(sim.resource_version)
    names = kubesim.load_pods(sim, PODS, namespaces=["fast"])
    seen: list[str] = []
    most_buffered = 0
    with trio.fail_after(60):
        async with kubesim.open_server(sim, tls=True) as server:
            path = server.kubeconfig(tmp_path / "kubeconfig", user="admin")
            account = AccountConfig("sim", kube_config_file=str(path))
            async with open_kube_client(account, environ={}) as client:
                params = {"watch": "1", "resourceVersion": before, "timeoutSeconds": "5"}
                async with client.stream(
                    "GET", "/api/v1/namespaces/fast/pods", params=params
                ) as response:
                    assert response.http_version == "HTTP/2"
                    decoder = WatchDecoder()
                    while chunk := await response.receive_some():
                        seen += [event.name for event in decoder.feed(chunk)]
                        if pause_after is not None and len(seen) >= pause_after:
                            pause_after = None
                            # Paused: the server sends until it runs into the window. Wait
                            # until what is buffered stops growing (a stall is no progress
                            # for a while; a fixed pause was too short under load).
                            exchange = response._exchange
                            assert isinstance(exchange, H2Exchange)
                            most_buffered = -1
                            while (held := exchange._stream.buffered) != most_buffered:
                                most_buffered = held
                                await trio.sleep(0.3)
                    decoder.end_of_stream()  # the END_STREAM frame went through h2
    assert seen[: len(names)] == names
    return seen, most_buffered


async def test_many_windows_of_events_arrive_whole_and_in_order(tmp_path: Path) -> None:
    seen, _ = await _watch_all(tmp_path, pause_after=None)
    assert len(seen) == PODS


async def test_a_paused_consumer_holds_at_most_one_window(tmp_path: Path) -> None:
    seen, buffered = await _watch_all(tmp_path, pause_after=10)
    assert len(seen) == PODS
    assert 0 < buffered <= STREAM_WINDOW
