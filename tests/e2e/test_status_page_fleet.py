"""The status page with a fleet of 500 accounts, in a real headless chromium: troubled
accounts first, pages of 50, sorting by a column, the filter and "only with problems".

The accounts are written to the server's store directly (the REST API over a real SQLite file
on a loopback socket, tests/server/test_api_support.py): what is tested is the page's
handling of many rows, not how accounts arrive (tests/e2e/test_status_page.py does that).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from server.store import AccountRecord, AccountState

from ..server.test_api_support import k8s, open_api, record
from .browser import Browser, browser_missing, open_browser

pytestmark = [
    pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "-"),
    pytest.mark.timeout(180),
]

FLEET = 500
ORPHANED = {"acct-007", "acct-123", "acct-250", "acct-333", "acct-499"}
INACTIVE = {"acct-010", "acct-020"}


def _state(name: str) -> AccountState:
    if name in ORPHANED:
        return AccountState.ORPHANED
    return AccountState.INACTIVE if name in INACTIVE else AccountState.ACTIVE


async def _rows(browser: Browser) -> list[str]:
    return list(
        await browser.run(
            "return [...document.querySelectorAll('#accounts tr[data-account]')]"
            ".map(r => r.dataset.account);"
        )
    )


def _page_info(first: int, last: int, total: int) -> str:
    """A condition: the pager says rows ``first``-``last`` of ``total`` are shown."""
    text = f"{first}\u2013{last} of {total}"  # an en dash, as the page writes it
    return f"document.getElementById('page-info').textContent === '{text}'"


async def _filter(browser: Browser, text: str) -> None:
    await browser.run(
        "const f = document.getElementById('filter');"
        "f.value = arguments[0]; f.dispatchEvent(new Event('input'));",
        text,
    )


async def test_five_hundred_accounts_page_sort_and_filter(tmp_path: Path) -> None:
    with trio.fail_after(150):
        async with open_api(tmp_path, over_socket=True) as api:
            for i in range(FLEET):
                name = f"acct-{i:03}"
                await api.store.upsert_account(
                    AccountRecord(name, f"10.0.{i // 250}.{i % 250}:6443", status=_state(name))
                )
            pods = [record(k8s("v1", "Pod", f"p{i}", "ns"), account="acct-042") for i in range(7)]
            await api.store.apply_batch("acct-042", pods)
            async with open_browser(tmp_path) as browser:
                await browser.get(f"http://127.0.0.1:{api.port}/ui")
                await browser.wait_for(_page_info(1, 50, FLEET))
                rows = await _rows(browser)
                assert len(rows) == 50
                # Troubled first: the ORPHANED (critical), then the INACTIVE, then by name.
                assert rows[:7] == [*sorted(ORPHANED), *sorted(INACTIVE)]
                assert rows[7] == "acct-000"
                first = "document.querySelector('#problems li')"
                await browser.wait_for(f"{first}?.classList.contains('critical')")

                await browser.click("#next")
                await browser.wait_for(_page_info(51, 100, FLEET))

                # A new order starts again at its first page.
                await browser.click('#accounts th[data-sort="name"]')
                await browser.wait_for(_page_info(1, 50, FLEET))
                assert (await _rows(browser))[0] == "acct-000"
                await browser.click('#accounts th[data-sort="name"]')  # descending
                await browser.wait_for(
                    "document.querySelector('#accounts th[data-sort=\"name\"]')"
                    ".getAttribute('aria-sort') === 'descending'"
                )
                assert (await _rows(browser))[0] == "acct-499"
                await browser.click("#next")
                await browser.wait_for(_page_info(51, 100, FLEET))
                assert (await _rows(browser))[0] == "acct-449"
                await browser.click('#accounts th[data-sort="objects"]')
                await browser.click('#accounts th[data-sort="objects"]')  # most objects first
                await browser.wait_for(
                    "document.querySelector('#accounts tr[data-account]')?.dataset.account"
                    " === 'acct-042'"
                )

                await _filter(browser, "orphaned")
                await browser.wait_for(_page_info(1, 5, 5))
                assert sorted(await _rows(browser)) == sorted(ORPHANED)
                await _filter(browser, "")
                await browser.click("#only-problems")
                await browser.wait_for(_page_info(1, 7, len(ORPHANED | INACTIVE)))
                assert await browser.console_errors() == []
