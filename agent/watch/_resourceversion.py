"""Where a reflector stands in a kind's history: the resourceVersion to watch from, or none.

Kubernetes resourceVersions are opaque strings: they are never compared or parsed, only
remembered in stream order (the newest seen is the one to resume from). A 410 Gone makes the
remembered version worthless: it is forgotten so that the next step is a list, never a retry
of the stale version.
"""

from __future__ import annotations

__all__ = ["ResourceVersionTracker"]


class ResourceVersionTracker:
    """The resume point of one (account, kind, scope) watch.

    ``current`` is None when the reflector must (re)list, else the version to watch from.
    """

    __slots__ = ("_current",)

    def __init__(self, resume_from: str | None = None) -> None:
        self._current = resume_from or None

    @property
    def current(self) -> str | None:
        """The version to resume the watch from; None means list first."""
        return self._current

    @property
    def needs_list(self) -> bool:
        return self._current is None

    def listed(self, resource_version: str) -> None:
        """A full list (or a streaming list's initial events) completed at this version."""
        if not resource_version:
            # An API server that returns no version for a list cannot be watched from it;
            # listing again is the only safe step.
            self._current = None
            return
        self._current = resource_version

    def observed(self, resource_version: str) -> None:
        """An event or bookmark arrived carrying this version (empty ones are ignored)."""
        if resource_version:
            self._current = resource_version

    def expired(self) -> None:
        """The API server answered 410 Gone for the current version: forget it."""
        self._current = None
