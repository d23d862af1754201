"""The status page in a real headless chromium (issue 18), over the real server, the real agent
and kubesim over TLS with a token:

* it loads with no console error and shows the account ACTIVE with kubesim's object counts,
  kind by kind;
* it follows kubesim: an object created, then another deleted, show within a poll or two;
* what is broken comes first: RBAC revoked for one kind puts that kind, forbidden, at the top.

Every wait is on the page's DOM (a MutationObserver, tests/e2e/browser.py), never a sleep.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import kubesim
from server.store import group_of

from .browser import Browser, as_js, browser_missing, open_browser
from .cache_check import expected_objects, wait_cache_equal, watched_kinds
from .harness import Stack, open_stack

pytestmark = [
    pytest.mark.skipif(bool(browser_missing()), reason=browser_missing() or "-"),
    pytest.mark.timeout(180),
]

ACCOUNT = "k1"
ROW = f'tr[data-account="{ACCOUNT}"]'
DETAIL = f'tr[data-detail="{ACCOUNT}"]'


def _configmap(name: str, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"k": "v"},
    }


def _seed(sim: kubesim.Cluster) -> None:
    kubesim.load_pods(sim, 30, namespaces=["team-a", "team-b"])
    for index in range(5):
        sim.create(_configmap(f"cm-{index}"))


def _counts(stack: Stack) -> Counter[str]:
    """kubesim's objects per "Kind.group" among the kinds the agent watches."""
    found = expected_objects(stack.sim, watched_kinds(stack, ACCOUNT))
    return Counter(_label(kind, group_of(api_version)) for api_version, kind, _, _ in found)


def _label(kind: str, group: str) -> str:
    return f"{kind}.{group}" if group else kind


# The account's detail row as {"Kind.group": count} (counts as the page prints them).
_SHOWN_COUNTS = f"""(() => {{
  const got = {{}};
  for (const cell of document.querySelectorAll('{DETAIL} [data-kind]')) {{
    const group = cell.dataset.group;
    const label = group ? cell.dataset.kind + '.' + group : cell.dataset.kind;
    got[label] = Number(cell.querySelector('.count').textContent.replace(/,/g, ''));
  }}
  return got;
}})()"""


def _shows_counts(want: Counter[str]) -> str:
    """A condition: the detail row shows ``want`` (kinds with no objects may show 0)."""
    return (
        f"((want, got) => Object.keys(want).every(k => got[k] === want[k]) && "
        f"Object.keys(got).every(k => k in want || got[k] === 0))({as_js(dict(want))}, "
        f"{_SHOWN_COUNTS})"
    )


async def _assert_counts(browser: Browser, want: Counter[str]) -> None:
    try:
        await browser.wait_for(_shows_counts(want))
    except AssertionError:
        shown = await browser.run(f"return {_SHOWN_COUNTS};")
        assert shown == dict(want)  # the difference, kind by kind
        raise


def _cell(column: str) -> str:
    return f"document.querySelector('{ROW} [data-col=\"{column}\"]')?.textContent"


async def test_the_page_shows_the_account_and_follows_kubesim(tmp_path: Path) -> None:
    sim = kubesim.Cluster()
    _seed(sim)
    with trio.fail_after(150):
        async with open_stack(tmp_path, sim=sim, kube_tls=True) as stack:
            await wait_cache_equal(stack, patience=60)
            want = _counts(stack)
            async with open_browser(tmp_path) as browser:
                await browser.get(f"http://127.0.0.1:{stack.server.api_port}/")  # redirects
                await browser.wait_for(f"{_cell('state')} === 'ACTIVE'")
                assert await browser.run("return location.pathname;") == "/ui"
                await browser.wait_for(f"{_cell('objects')} === {as_js(f'{want.total():,}')}")
                assert await browser.run(f"return {_cell('role')};") == "PRIMARY"
                assert await browser.run(f"return {_cell('agent')};") == "agent-a"
                # Nothing is broken, and the page says so at the top.
                await browser.wait_for("document.querySelector('#problems li.ok') !== null")
                await browser.wait_for(
                    "document.querySelector('#agents tr[data-agent=\"agent-a\"]') !== null"
                )

                await browser.click(ROW)  # opens the account's objects per kind
                await _assert_counts(browser, want)
                assert want["ConfigMap"] >= 5, want
                assert want["Pod"] >= 30, want

                # kubesim changes: the page follows, within a poll or two.
                sim.create(_configmap("cm-new"))
                want["ConfigMap"] += 1
                await _assert_counts(browser, want)
                sim.delete("", "v1", "configmaps", "default", "cm-0")
                want["ConfigMap"] -= 1
                await _assert_counts(browser, want)
                await browser.wait_for(f"{_cell('objects')} === {as_js(f'{want.total():,}')}")
                await browser.wait_for(f"Number({_cell('rate')}) >= 2")  # the two events

                # The filter hides what does not match, and finds the account again.
                await browser.run(
                    "const f = document.getElementById('filter');"
                    "f.value = 'no-such-account'; f.dispatchEvent(new Event('input'));"
                )
                await browser.wait_for(f"document.querySelector('{ROW}') === null")
                await browser.run(
                    "const f = document.getElementById('filter');"
                    "f.value = 'k1 active'; f.dispatchEvent(new Event('input'));"
                )
                await browser.wait_for(f"document.querySelector('{ROW}') !== null")
                assert await browser.console_errors() == []


NO_CONFIGMAPS = {"*": kubesim.ALL_VERBS, "configmaps": ()}


async def test_a_forbidden_kind_comes_first(tmp_path: Path) -> None:
    sim = kubesim.Cluster(kubesim.SimConfig(controllers=False))
    for index in range(3):
        sim.create(_configmap(f"cm-{index}"))
    account = {
        "name": ACCOUNT,
        "kubeConfigFile": str(tmp_path / "kubeconfig"),  # where open_stack writes it
        "kinds": ["configMap", "pod"],
    }
    with trio.fail_after(150):
        async with (
            open_stack(tmp_path, sim=sim, kube_tls=True, accounts=[account]) as stack,
            open_browser(tmp_path) as browser,
        ):
            await browser.get(f"http://127.0.0.1:{stack.server.api_port}/ui")
            await browser.wait_for(f"{_cell('state')} === 'ACTIVE'")
            await browser.click(ROW)
            await _assert_counts(browser, Counter({"ConfigMap": 3}))

            # RBAC revoked for ConfigMaps; the link to the API server is cut, as a watch
            # timeout would, so the agent lists again and is refused.
            stack.kube.set_grants("admin", NO_CONFIGMAPS)
            stack.kube.cut(0.0)
            first = "document.querySelector('#problems li')"
            await browser.wait_for(
                f"{first}?.classList.contains('critical') && "
                f"{first}.textContent.includes('may not watch ConfigMap')",
                timeout=60,
            )
            await browser.wait_for(f"{_cell('forbidden')} === '1'")
            await browser.wait_for(
                f"document.querySelector('{DETAIL} [data-unavailable=\"ConfigMap\"]')"
                "?.textContent.includes('403')"
            )
            await browser.wait_for(
                "document.querySelector('[data-total=\"forbidden kinds\"] b')?.textContent === '1'"
            )
            assert await browser.console_errors() == []
