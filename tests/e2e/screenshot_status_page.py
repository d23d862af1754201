"""Take the README's picture of the status page with the demo's data:

    .venv/bin/python -m tests.e2e.screenshot_status_page docs/status-page.png

It runs ``kubesvc demo`` (free ports, a temporary folder), waits until the demo's sample
deploy is done and the page has ``--history`` seconds (60 by default) of events to chart,
then has headless chromium (tests/e2e/browser.py) photograph /ui. Needs
Debian's chromium and chromium-driver (tests/check.sh installs them as root).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import trio

from .._procs import open_process
from .browser import browser_missing, open_browser

_REST = re.compile(r"REST (http://\S+)")
_DEPLOYED = "-> "  # the demo's line with the sample deploy's outcome


async def _demo_lines(process: trio.Process, lines: trio.MemorySendChannel[str]) -> None:
    assert process.stdout is not None
    buffered = b""
    async with lines:
        async for chunk in process.stdout:
            buffered += chunk
            *done, buffered = buffered.split(b"\n")
            for line in done:
                await lines.send(line.decode(errors="replace"))


async def _wait_history(api: str, seconds: float) -> None:
    """Until the summary has ``seconds`` of event buckets with events in them."""
    async with httpx.AsyncClient(base_url=api, timeout=10) as http:
        while True:
            activity = (await http.get("/ui/summary.json")).json()["activity"]
            filled = sum(1 for n in activity["events"] if n) * activity["bucketMs"] / 1000
            if filled >= seconds:
                return
            await trio.sleep(1)


async def take(target: Path, history: float) -> None:
    with tempfile.TemporaryDirectory(prefix="kubesvc-shot-") as folder:
        command = [
            sys.executable,
            "-m",
            "kubesvc",
            "demo",
            "--duration",
            str(history + 120),
            "--api-port",
            "0",
            "--grpc-port",
            "0",
            "--data-dir",
            folder,
        ]
        demo = open_process(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        async with demo as process, trio.open_nursery() as nursery:
            send, receive = trio.open_memory_channel[str](100)
            nursery.start_soon(_demo_lines, process, send)
            api = ""
            with trio.fail_after(180):
                async for line in receive:
                    print(line)
                    found = _REST.search(line)
                    if found:
                        api = found.group(1)
                    if api and line.strip().startswith(_DEPLOYED):
                        break
            nursery.start_soon(_drain, receive)
            with trio.fail_after(history + 60):
                await _wait_history(api, history)
            async with open_browser(Path(folder)) as browser:
                await browser.resize(1400, 1250)
                await browser.get(f"{api}/ui")
                await browser.wait_for("document.querySelector('tr[data-account]') !== null")
                await browser.click("tr[data-account]")  # its objects per kind
                await browser.wait_for("document.querySelector('tr[data-detail]') !== null")
                await browser.screenshot(target)
                errors = await browser.console_errors()
                assert not errors, errors
            nursery.cancel_scope.cancel()  # the demo is stopped and reaped on the way out
    print(f"wrote {target}")


async def _drain(lines: trio.MemoryReceiveChannel[str]) -> None:
    async for line in lines:
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", type=Path, help="the PNG to write")
    parser.add_argument("--history", type=float, default=60.0, help="seconds of events first")
    args = parser.parse_args()
    missing = browser_missing()
    if missing:
        print(missing, file=sys.stderr)
        return 1
    trio.run(take, args.target, args.history)
    return 0


if __name__ == "__main__":
    sys.exit(main())
