"""The agent package's one exception tree.

Every error the agent raises on purpose derives from :class:`AgentError`. Errors of the
libraries underneath (ssl, yaml, OS errors, and the Kubernetes transports' TransportError, in
agent/kube/_response.py's ``translate``) are translated at the edge that calls them, with
``raise ... from exc`` so the original stays visible in tracebacks. Dependency exceptions are
never subclassed.

The tree (operation errors add their own branch, with the ``error_code`` each reports:
docs/protocol.md §11.3)::

    AgentError
    ├── ConfigError                 a config file is invalid: file, path, what was expected
    │   └── KubeconfigError         ... the file is a kubeconfig
    ├── LinkTimeoutError            the server's address took too long to connect (TCP, TLS);
    │                               the link's other failures are wire's (wire.WireError)
    └── KubeError                   talking to a Kubernetes API server failed
        ├── KubeClosedError         we closed the client; nothing was sent
        ├── KubeCredentialError     no credentials (exec plugin, token file failed)
        ├── KubeConnectionError     the network or the peer broke it (refused, reset, TLS, cut)
        │   └── KubeTimeoutError    the request did not finish within ``timeoutSeconds``
        └── KubeStatusError         the API server said no: HTTP status + the Kubernetes Status kept
            ├── KubeUnauthorizedError   401
            ├── KubeForbiddenError      403
            ├── KubeNotFoundError       404
            ├── KubeConflictError       409
            ├── KubeGoneError           410 (expired resourceVersion or continue token: relist)
            ├── KubeTooManyRequestsError 429 (see ``retry_after``)
            └── KubeServerError         5xx
    └── WatchError                  the data path's own (discovery, listing, watching); a body
        │                           cut inside a line is a KubeConnectionError, a watch ERROR
        │                           event a KubeStatusError (built with ``status_error``)
        └── WatchDecodeError        a watch line, list page or discovery document that is
            │                       not what the API promises (says what and where)
            └── LineTooLong         one line longer than the decoder's hard cap
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "AgentError",
    "ConfigError",
    "KubeClosedError",
    "KubeConflictError",
    "KubeConnectionError",
    "KubeCredentialError",
    "KubeError",
    "KubeForbiddenError",
    "KubeGoneError",
    "KubeNotFoundError",
    "KubeServerError",
    "KubeStatusError",
    "KubeTimeoutError",
    "KubeTooManyRequestsError",
    "KubeUnauthorizedError",
    "KubeconfigError",
    "LineTooLong",
    "LinkTimeoutError",
    "WatchDecodeError",
    "WatchError",
    "status_error",
]


class AgentError(Exception):
    """Root of every error the agent package raises on purpose."""


class ConfigError(AgentError):
    """A configuration file is invalid.

    ``str(error)`` reads ``"<file>: <path>: <problem>"``, for example ``"kubesvc.yaml:
    kubernetes.accounts[2].kinds: expected a list of kind names, got 'deployment'"``.
    The parts are kept as attributes for callers that render them differently.
    """

    def __init__(self, problem: str, *, file: str = "", path: str = "") -> None:
        self.file = file
        self.path = path
        self.problem = problem
        super().__init__(": ".join(part for part in (file, path, problem) if part))


class KubeconfigError(ConfigError):
    """A kubeconfig file is invalid or does not contain what the account asks for."""


class LinkTimeoutError(AgentError):
    """The server's address accepted no connection, or finished no TLS handshake, in time."""


class KubeError(AgentError):
    """Talking to a Kubernetes API server failed."""


class KubeClosedError(KubeError):
    """The client was closed by us; the request was not sent."""


class KubeCredentialError(KubeError):
    """Credentials could not be obtained (exec plugin failed, token file unreadable, ...)."""


class KubeConnectionError(KubeError):
    """The network or the peer broke the exchange: refused, reset, TLS failure, cut body."""


class KubeTimeoutError(KubeConnectionError):
    """The request did not finish within the configured ``timeoutSeconds``."""


class KubeStatusError(KubeError):
    """The API server answered with an HTTP error status.

    Attributes: ``code`` (HTTP status), ``reason`` (the Status ``reason``, e.g. ``"Forbidden"``,
    ``"Expired"``; ``""`` when the body was not a Status), ``message`` (the Status ``message``
    or the start of the body), ``status`` (the decoded Status object, or None), ``method`` and
    ``path`` of the request, and ``retry_after`` (seconds from a ``Retry-After`` header, or
    None).
    """

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str = "",
        status: Mapping[str, Any] | None = None,
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        self.code = code
        self.reason = reason
        self.message = message
        self.status = status
        self.method = method
        self.path = path
        self.retry_after = retry_after
        where = f"{method} {path}: " if method or path else ""
        why = f" {reason}" if reason else ""
        super().__init__(f"{where}{code}{why}: {message}")


class KubeUnauthorizedError(KubeStatusError):
    """401: the credentials were refused."""


class KubeForbiddenError(KubeStatusError):
    """403: RBAC does not allow this request."""


class KubeNotFoundError(KubeStatusError):
    """404: no such object or resource."""


class KubeConflictError(KubeStatusError):
    """409: the object changed (resourceVersion conflict) or already exists."""


class KubeGoneError(KubeStatusError):
    """410: the resourceVersion or continue token is too old; list again."""


class KubeTooManyRequestsError(KubeStatusError):
    """429: throttled; wait ``retry_after`` seconds (when given) before retrying."""


class KubeServerError(KubeStatusError):
    """5xx: the API server (or something in front of it) failed."""


class WatchError(AgentError):
    """Root of the data path's own errors."""


class WatchDecodeError(WatchError):
    """A watch line, list page or discovery document could not be decoded."""


class LineTooLong(WatchDecodeError):
    """A single watch line exceeded the decoder's hard cap (the peer misbehaves)."""

    def __init__(self, limit: int, seen: int) -> None:
        super().__init__(f"watch line exceeds {limit} bytes (saw {seen} bytes without a newline)")
        self.limit = limit
        self.seen = seen


_BY_CODE: dict[int, type[KubeStatusError]] = {
    401: KubeUnauthorizedError,
    403: KubeForbiddenError,
    404: KubeNotFoundError,
    409: KubeConflictError,
    410: KubeGoneError,
    429: KubeTooManyRequestsError,
}


def status_error(
    code: int,
    message: str,
    *,
    reason: str = "",
    status: Mapping[str, Any] | None = None,
    method: str = "",
    path: str = "",
    retry_after: float | None = None,
) -> KubeStatusError:
    """Build the most specific :class:`KubeStatusError` subclass for an HTTP status code."""
    cls = _BY_CODE.get(code) or (KubeServerError if code >= 500 else KubeStatusError)
    return cls(
        code,
        message,
        reason=reason,
        status=status,
        method=method,
        path=path,
        retry_after=retry_after,
    )
