"""Compare the server's cache with what kubesim holds, object by object, kind by kind.

The agent changes what it sends in exactly two ways (agent/watch/_scrub.py):
``metadata.managedFields`` is stripped from every object, and a Secret keeps its metadata only
(it is watched as PartialObjectMetadata: no ``data``/``stringData``/``type``, and no
``kubectl.kubernetes.io/last-applied-configuration`` annotation). ``expected_objects`` applies
the same reductions to kubesim's objects, so the comparison is otherwise exact.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import trio

import kubesim
from agent import Agent

from .harness import ObjectKey, Stack, stored_objects

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` as the agent sends it (see the module docstring)."""
    obj = copy.deepcopy(obj)
    meta = obj.get("metadata", {})
    meta.pop("managedFields", None)
    if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1":
        # Secrets are watched as PartialObjectMetadata: only the metadata exists to send.
        obj = {"apiVersion": "v1", "kind": "Secret", "metadata": meta}
        annotations = meta.get("annotations")
        if annotations is not None:
            annotations.pop(LAST_APPLIED, None)
            if not annotations:
                meta.pop("annotations")
    return obj


def watched_kinds(stack: Stack, account: str, watcher: Agent | None = None) -> set[tuple[str, str]]:
    """(apiVersion, kind) of every kind the agent's reflectors watch for ``account``
    (``watcher``: that agent instead of the stack's first)."""
    state = (watcher or stack.agent).accounts.accounts.get(account)
    if state is None or state.watch is None:
        return set()
    return {
        (target.kind.api_version, target.kind.kind)
        for target, reflector in state.watch.reflectors.items()
        if reflector.available
    }


def expected_objects(
    sim: kubesim.Cluster, kinds: set[tuple[str, str]]
) -> dict[ObjectKey, dict[str, Any]]:
    """Every object of ``kinds`` in kubesim, reduced as the agent sends it."""
    found: dict[ObjectKey, dict[str, Any]] = {}
    for rtype in sim.registry:
        if (rtype.api_version, rtype.kind) not in kinds or "list" not in rtype.verbs:
            continue
        for obj in sim.list(rtype.group, rtype.version, rtype.plural):
            meta = obj["metadata"]
            key = (rtype.api_version, rtype.kind, meta.get("namespace", ""), meta["name"])
            found[key] = as_sent(obj)
    return found


async def cache_differences(
    stack: Stack, account: str = "k1", watcher: Agent | None = None
) -> list[str]:
    """What differs between the server's cache of ``account`` and kubesim (empty: equal);
    ``watcher`` is the agent serving it (default: the stack's first)."""
    state = (watcher or stack.agent).accounts.accounts.get(account)
    if state is None or state.watch is None or not state.watch.synced:
        return [f"the agent has not synced account {account} yet"]
    kinds = watched_kinds(stack, account, watcher)
    want = expected_objects(stack.sim, kinds)
    have = await stored_objects(stack, account)
    problems: list[str] = []
    for key in sorted(want.keys() - have.keys()):
        problems.append(f"missing in the server: {key}")
    for key in sorted(have.keys() - want.keys()):
        problems.append(f"only in the server: {key}")
    for key in sorted(want.keys() & have.keys()):
        if want[key] != have[key]:
            problems.append(
                f"differs: {key}: kubesim rv "
                f"{want[key]['metadata'].get('resourceVersion')}, server rv "
                f"{have[key]['metadata'].get('resourceVersion')}"
            )
    return problems


async def wait_cache_equal(
    stack: Stack, account: str = "k1", *, patience: float, watcher: Agent | None = None
) -> None:
    """Poll until the cache equals kubesim; after ``patience`` s fail with the differences."""
    problems: list[str] = []
    with trio.move_on_after(patience):
        while True:
            problems = await cache_differences(stack, account, watcher)
            if not problems:
                return
            await trio.sleep(0.2)
    shown = "\n".join(problems[:20])
    raise AssertionError(f"{len(problems)} differences after {patience} s, first ones:\n{shown}")


async def secret_bodies(stack: Stack, account: str = "k1") -> list[dict[str, Any]]:
    """The stored bodies of every Secret (to check that no data is stored)."""
    page = await stack.store.query_objects(account=account, kind="Secret", limit=10_000)
    return [json.loads(obj.body) for obj in page.objects]


def relisted_kinds(watcher: Agent, account: str = "k1") -> list[str]:
    """The kinds ``watcher``'s current reflectors fetched in full (a list, or a streaming
    list: kubesim counts the latter as a watch) instead of resuming from a stored version."""
    state = watcher.accounts.accounts.get(account)
    if state is None or state.watch is None:
        return []
    return sorted(
        target.describe()
        for target, reflector in state.watch.reflectors.items()
        if reflector.lists or reflector.streaming
    )
