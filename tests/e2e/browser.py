"""A real headless browser for the tests: Debian's chromium, driven through its chromedriver by
Selenium (pyproject's test extras say why Selenium).

Selenium's calls block, so each runs in a worker thread (``trio.to_thread``) beside the test's
trio loop; one that outlives its deadline is abandoned and the test fails by its name. The
browser starts with everything that would reach for the network turned off (this machine has
none, and chromium would wait on it: background networking, component updates, sync, QUIC)
and a fresh profile in the test's folder.

``Browser.wait_for(condition)`` waits on the page itself: a MutationObserver re-checks the
JavaScript ``condition`` on every change of the DOM (no polling, no sleeps), within a
deadline after which the test fails naming the condition.

``browser_missing()`` says why no browser can be had (then the tests skip, saying so).
"""

from __future__ import annotations

import functools
import json
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio
from selenium import webdriver
from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",  # the tests run as root, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1000",
)
T = TypeVar("T")


def browser_missing() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return (
                f"no {path}: install Debian's chromium and chromium-driver "
                "(tests/check.sh does, as root)"
            )
    return ""


class Browser:
    """One page of a headless chromium (see the module docstring)."""

    def __init__(self, driver: webdriver.Chrome) -> None:
        self.driver = driver

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await trio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True)

    async def get(self, url: str) -> None:
        await self._call(self.driver.get, url)

    async def run(self, script: str, *args: Any) -> Any:
        """The value of ``script`` (a function body: ``return ...``) run in the page."""
        return await self._call(self.driver.execute_script, script, *args)

    async def wait_for(self, condition: str, *, timeout: float = 20.0) -> None:  # noqa: ASYNC109
        """Until the JavaScript expression ``condition`` holds in the page, re-checked on
        every DOM change; AssertionError naming it after ``timeout`` s."""
        script = (
            "const done = arguments[arguments.length - 1];\n"
            f"const check = () => {{ try {{ return Boolean({condition}); }}"
            " catch (e) { return false; } };\n"
            "if (check()) { done(true); return; }\n"
            "const seen = new MutationObserver(() => {\n"
            "  if (check()) { seen.disconnect(); done(true); }\n"
            "});\n"
            "seen.observe(document, {subtree: true, childList: true, characterData: true,"
            " attributes: true});\n"
        )
        await self._call(self.driver.set_script_timeout, timeout)
        try:
            await self._call(self.driver.execute_async_script, script)
        except TimeoutException:
            raise AssertionError(f"the page never showed: {condition}") from None

    async def click(self, selector: str) -> None:
        await self.run("document.querySelector(arguments[0]).click();", selector)

    async def console_errors(self) -> list[str]:
        """The page's console errors and failed loads since the last call."""
        entries = await self._call(self.driver.get_log, "browser")
        return [e["message"] for e in entries if e["level"] == "SEVERE"]

    async def screenshot(self, path: Path) -> None:
        ok = await self._call(self.driver.save_screenshot, str(path))
        assert ok, f"chromium could not write {path}"

    async def resize(self, width: int, height: int) -> None:
        await self._call(self.driver.set_window_size, width, height)


def _start(profile: Path) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(30)
    return driver


@asynccontextmanager
async def open_browser(folder: Path) -> AsyncIterator[Browser]:
    """A headless chromium with a fresh profile under ``folder``, quit when the block ends.
    Raises AssertionError when it cannot start (call ``browser_missing`` first to skip)."""
    profile = folder / "chromium-profile"
    profile.mkdir(parents=True, exist_ok=True)
    try:
        # Shielded: a test cancelled while chromium starts waits for the start (Selenium's
        # own timeouts bound it) and then quits it, instead of leaving its processes behind.
        with trio.CancelScope(shield=True):
            driver = await trio.to_thread.run_sync(_start, profile)
    except WebDriverException as exc:
        raise AssertionError(f"chromium did not start: {exc.msg}") from exc
    try:
        yield Browser(driver)
    finally:
        with trio.move_on_after(15) as cleanup:
            cleanup.shield = True
            await trio.to_thread.run_sync(driver.quit, abandon_on_cancel=True)
        if cleanup.cancelled_caught:
            # quit() hung: end chromedriver ourselves (chromium goes with its driver's session).
            driver.service.process.kill()
        shutil.rmtree(profile, ignore_errors=True)


def as_js(value: Any) -> str:
    """``value`` as a JavaScript literal (for conditions built from Python data)."""
    return json.dumps(value)
