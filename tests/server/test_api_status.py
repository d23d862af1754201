"""The status page's endpoints over HTTP (the real server's HTTP/1.1 on a loopback socket):
the page and its files, the redirect from /, and summary.json from a real store and feed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import trio

from server.store import KindChange

from .test_api_support import ACCOUNT, k8s, open_api, record


async def test_the_page_its_files_and_the_redirect(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path, over_socket=True) as api:
            root = await api.client.get("/", follow_redirects=False)
            assert (root.status_code, root.headers["location"]) == (307, "ui")
            page = await api.client.get("/", follow_redirects=True)
            assert page.status_code == 200
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert "script-src 'self'" in page.headers["content-security-policy"]
            assert '<script src="ui/status.js"' in page.text
            for path, media in (
                ("/ui/status.js", "text/javascript"),
                ("/ui/status.css", "text/css"),
            ):
                asset = await api.client.get(path)
                assert asset.status_code == 200, path
                assert asset.headers["content-type"].startswith(media)
                # Nothing from elsewhere (the SVG namespace is a name, never fetched).
                urls = set(re.findall(rb"https?://[^\s\"')]+", asset.content))
                assert urls <= {b"http://www.w3.org/2000/svg"}, urls
            assert (await api.client.get("/ui/nothing.js")).status_code == 404


async def test_the_summary_reads_the_store_and_the_feed(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_api(tmp_path, over_socket=True) as api:
            await api.account(kube_host="10.1.1.1:6443", kube_version="v1.31.0")
            records = [
                record(k8s("v1", "Pod", f"p{i}", "default"), account=ACCOUNT) for i in range(3)
            ]
            records.append(record(k8s("apps/v1", "Deployment", "d", "default")))
            await api.store.apply_batch(ACCOUNT, records)
            api.feed.publish(records)  # as the ingest path does after the commit
            forbidden = KindChange(ACCOUNT, "v1", "Secret", "", False, 403, "forbidden")
            await api.store.apply_kind_changes([forbidden])
            answer = await api.client.get("/ui/summary.json")
            assert answer.status_code == 200
            assert answer.headers["content-encoding"] == "gzip"  # httpx asks for it
            body = answer.json()
            (acct,) = body["accounts"]
            assert acct["state"] == "ACTIVE"
            assert acct["objects"] == 4
            assert sorted(k[:3] for k in acct["kinds"]) == [
                ["Deployment", "apps", 1],
                ["Pod", "", 3],
            ]
            assert acct["eventsLastMinute"] == 4
            assert [u["kind"] for u in acct["unavailable"]] == ["Secret"]
            assert body["problems"][0]["message"].startswith("may not watch Secret")
            assert sum(body["activity"]["events"]) == 4
            plain = await api.client.get(
                "/ui/summary.json", headers={"accept-encoding": "identity"}
            )
            assert "content-encoding" not in plain.headers
            assert json.loads(plain.content)["serverId"] == "srv-1"
