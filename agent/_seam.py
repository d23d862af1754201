"""The one seam between the data path and the HTTP client: a streamed request.

The reflector, the paged list and discovery need nothing else from the Kubernetes client, so
this Protocol is all they import. agent/_kube_client.py's ``KubeClient`` satisfies it; tests
use that same client against kubesim on loopback.

Promises expected of an implementation:
- ``stream()`` returns the response for every HTTP status (a 410 or 403 is not raised: the
  caller reads the Status body itself) and applies the account's authentication;
- ``receive_some()`` returns the next raw body bytes as they came off the network, ``b""`` at
  the end, and is a checkpoint (cancellable);
- a network or peer failure raises ``agent._errors.KubeConnectionError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Protocol

__all__ = ["KubeResponse", "KubeTransport"]


class KubeResponse(Protocol):
    """An HTTP response whose body has not been read yet."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def receive_some(self) -> bytes: ...


class KubeTransport(Protocol):
    """Something that opens streamed requests against one API server."""

    def stream(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AbstractAsyncContextManager[KubeResponse]: ...
