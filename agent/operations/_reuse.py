"""Version reuse: a versioned deploy that answers an existing version. Pure.

Reuse (Clouddriver's ``ResourceVersioner.findMatchingVersion``): a versioned manifest whose
content equals an existing version's is not written again; the deploy answers that version.
Content is the object less ``metadata`` (``KubernetesManifest.nonMetadataEquals``). The new
manifest is compared AS GIVEN (its artifacts and config references bound, nothing of
kubesvc's added: no moniker labels, template annotations, traffic labels or source capacity),
with what that version was applied from: its ``kubectl.kubernetes.io/last-applied-
configuration``, else (a server-side apply leaves none) the live object less ``metadata`` and
``status``. Kinds with a pod template never reuse: Clouddriver compares before it labels the
template, so its comparison never matches them, and their live state (disabled: traffic
labels patched away; scaled to 0) is not in what they were applied from, so a match would
answer a version that serves nothing. In effect reuse is for ConfigMaps, Secrets and other
template-less kinds. When several match, the newest wins (Clouddriver takes the first its
cache lists: no order is promised).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._manifests import LAST_APPLIED, annotations_of, pod_specs, version_of

__all__ = ["content_of", "matching_version"]


def content_of(existing: Mapping[str, Any]) -> dict[str, Any] | None:
    """What ``existing`` was applied from, less metadata; None when unreadable."""
    raw = annotations_of(existing).get(LAST_APPLIED)
    if raw:
        try:
            applied = json.loads(raw)
        except ValueError:
            return None
        if not isinstance(applied, dict):
            return None
        return {k: v for k, v in applied.items() if k != "metadata"}
    return {k: v for k, v in existing.items() if k not in ("metadata", "status")}


def matching_version(
    given: Mapping[str, Any],
    versions: Iterable[Mapping[str, Any]],
    base: str,
) -> tuple[int, Mapping[str, Any]] | None:
    """The newest of ``versions`` whose content equals ``given`` (the manifest as given,
    before kubesvc's additions), with its number; None when none does or ``given`` has a pod
    template (see the module's docstring)."""
    if pod_specs(dict(given)):
        return None
    wanted = {k: v for k, v in given.items() if k != "metadata"}
    found: list[tuple[int, Mapping[str, Any]]] = []
    for existing in versions:
        number = version_of(existing, base)
        if number is None:
            continue
        if content_of(existing) == wanted:
            found.append((number, existing))
    return max(found, key=lambda f: f[0]) if found else None
