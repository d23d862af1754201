"""kubesim's exception tree.

::

    KubesimError                  root: everything kubesim raises on purpose
    └── ApiError                  "the API server says no": carries the Kubernetes Status
        ├── PatchError            a patch body that cannot be decoded (400) or applied (422)
        ├── ApplyConflict         server-side apply touched fields another manager owns (409)
        └── InvalidObject         a body that is not a valid object (400 BadRequest, 422 Invalid)

The HTTP layer catches :class:`ApiError` once and answers ``exc.code`` with ``exc.status()``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "ApplyConflict", "InvalidObject", "KubesimError", "PatchError"]


class KubesimError(Exception):
    """Root of every exception kubesim raises on purpose."""


class ApiError(KubesimError):
    """An answer the API server gives as a ``Status`` object (code, reason, message, details)."""

    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``meta/v1 Status`` body the real API server would send for this error."""
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details:
            body["details"] = self.details
        body["code"] = self.code
        return body


class PatchError(ApiError):
    """A patch that cannot be decoded (400), is too big (413), has no meaning for the kind
    (415), or does not apply to the object (422)."""

    _REASONS = {400: "BadRequest", 413: "RequestEntityTooLarge", 415: "UnsupportedMediaType"}

    def __init__(self, message: str, *, code: int = 422) -> None:
        # The apiserver answers a patch that does not apply with a generic 422 (reason Invalid),
        # an undecodable one with 400 BadRequest, one too big with 413, a wrong type with 415.
        super().__init__(code, self._REASONS.get(code, "Invalid"), message)


def nested_too_deeply(what: str) -> PatchError:
    """The error for a document nested deeper than Python's recursion limit lets us walk."""
    return PatchError(f"{what} is nested too deeply", code=400)


class ApplyConflict(ApiError):
    """Server-side apply would change fields owned by other managers; ``force`` overrides.

    ``conflicts`` lists ``(manager, field path)`` pairs; the path is written the way
    structured-merge-diff prints it (``.spec.containers[name="app"].image``).
    """

    def __init__(
        self, conflicts: list[tuple[str, str]], *, describe: dict[str, str] | None = None
    ) -> None:
        # describe maps a manager name to how the apiserver prints it, e.g.
        # '"kubectl" using apps/v1' (Apply) or '"kubectl-edit" using v1 at 2024-01-01T00:00:00Z'.
        self.conflicts = list(conflicts)
        names = describe or {}

        def who(manager: str) -> str:
            return names.get(manager, f'"{manager}"')

        if len(self.conflicts) == 1:
            manager, path = self.conflicts[0]
            message = f"Apply failed with 1 conflict: conflict with {who(manager)}: {path}"
        else:
            by_manager: dict[str, list[str]] = {}
            for manager, path in self.conflicts:
                by_manager.setdefault(who(manager), []).append(path)
            lines: list[str] = []
            for label in sorted(by_manager):
                lines.append(f"conflicts with {label}:")
                lines.extend(f"- {path}" for path in by_manager[label])
            message = f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)
        causes = [
            {"reason": "FieldManagerConflict", "message": f"conflict with {who(m)}", "field": p}
            for m, p in self.conflicts
        ]
        super().__init__(409, "Conflict", message, {"causes": causes})


class InvalidObject(ApiError):
    """A request body that is not a valid object.

    ``status_code`` 400 (BadRequest: not a JSON object, wrong apiVersion/kind, namespace
    mismatch) or 422 (Invalid: field errors, listed in ``causes`` as Status causes with
    ``reason``/``message``/``field``).
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int = 422,
        causes: list[dict[str, str]] | None = None,
        kind: str = "",
        group: str = "",
        name: str = "",
    ) -> None:
        self.status_code = status_code
        self.causes = list(causes or [])
        details: dict[str, Any] | None = None
        if status_code == 422:
            details = {"name": name, "group": group, "kind": kind, "causes": self.causes}
            details = {k: v for k, v in details.items() if v or k == "causes"}
        super().__init__(
            status_code, "Invalid" if status_code == 422 else "BadRequest", message, details
        )
