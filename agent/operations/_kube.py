"""The Kubernetes calls operations make, with errors translated into the operation tree.

:class:`Cluster` wraps one account's client and kind resolver. Every method raises
KubernetesRefusal (the API server's Status message and code) or AgentUnavailable (the
network or the peer broke it); reads of an absent object return None instead of raising.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from .._errors import (
    KubeClosedError,
    KubeConnectionError,
    KubeCredentialError,
    KubeStatusError,
)
from ..kube import KubeClient, KubeReply
from ._errors import AgentUnavailable, KubernetesRefusal
from ._kinds import KindResolver, Resource
from ._openapi import PatchSchemas

__all__ = ["APPLY_PATCH", "JSON_PATCH", "MERGE_PATCH", "STRATEGIC_PATCH", "Cluster"]

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
MAX_LIST_PAGES = 200  # 200 x 500 objects: a bound on how much one operation reads
# msgspec rather than the json module: ~3x less CPU for the bodies an operation sends and
# reads (measured with the deploy path, see the commit).
_ENCODER = msgspec.json.Encoder()
_DECODER = msgspec.json.Decoder()


@dataclass(frozen=True, slots=True)
class Gone:
    """A delete the API server accepted; ``uid`` is the deleted object's ("" when unsaid)."""

    uid: str


class Cluster:
    """One account's API server as operations see it: its client, its kinds and (for
    client-side apply) its OpenAPI."""

    def __init__(
        self, account: str, client: KubeClient, kinds: KindResolver, schemas: PatchSchemas
    ) -> None:
        self.account = account
        self.client = client
        self.kinds = kinds
        self.schemas = schemas

    async def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        missing_ok: bool = False,
    ) -> Any:
        headers = {"Accept": "application/json"}
        content = None
        if body is not None:
            content = _ENCODER.encode(body)
            headers["Content-Type"] = content_type
        try:
            reply: KubeReply = await self.client.request(
                method, path, params=params, headers=headers, content=content
            )
        except (KubeConnectionError, KubeClosedError, KubeCredentialError) as exc:
            raise AgentUnavailable(f"{method} {path}: {exc}") from exc
        if reply.status_code == 404 and missing_ok:
            return None
        if reply.status_code >= 400:
            try:
                reply.raise_for_status()
            except KubeStatusError as exc:
                raise KubernetesRefusal.from_status(exc) from exc
        if not reply.content:
            return {}
        try:
            return _DECODER.decode(reply.content)
        except msgspec.DecodeError as exc:
            raise AgentUnavailable(f"{method} {path}: the answer is not JSON: {exc}") from exc

    async def get(self, res: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        found = await self._call("GET", res.object_path(namespace, name), missing_ok=True)
        return found if isinstance(found, dict) else None

    async def create(self, res: Resource, namespace: str, obj: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self._call("POST", res.collection_path(namespace), body=obj)
        return created

    async def replace(
        self, res: Resource, namespace: str, name: str, obj: Mapping[str, Any]
    ) -> dict[str, Any]:
        replaced: dict[str, Any] = await self._call(
            "PUT", res.object_path(namespace, name), body=obj
        )
        return replaced

    async def patch(
        self,
        res: Resource,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str = "",
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        patched: dict[str, Any] = await self._call(
            "PATCH",
            res.object_path(namespace, name, subresource),
            params=params,
            body=body,
            content_type=content_type,
        )
        return patched

    async def delete(
        self, res: Resource, namespace: str, name: str, options: Mapping[str, Any]
    ) -> Gone | None:
        """Delete one object; None when it was already gone."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", **options}
        answer = await self._call(
            "DELETE", res.object_path(namespace, name), body=body, missing_ok=True
        )
        if answer is None:
            return None
        # The API server answers with the object (or, for some kinds, a Status naming it in
        # details.uid): which object of that name went, for the server's read-your-writes.
        meta = answer.get("metadata") if answer.get("kind") != "Status" else None
        source = meta if isinstance(meta, Mapping) else answer.get("details")
        uid = source.get("uid") if isinstance(source, Mapping) else None
        return Gone(uid=uid if isinstance(uid, str) else "")

    async def list(
        self, res: Resource, namespace: str, *, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Every object of ``res`` in ``namespace`` (all namespaces when ""), paged."""
        items: list[dict[str, Any]] = []
        params = {"limit": "500"}
        if label_selector:
            params["labelSelector"] = label_selector
        for _ in range(MAX_LIST_PAGES):
            page = await self._call("GET", res.collection_path(namespace), params=params)
            items.extend(item for item in page.get("items") or () if isinstance(item, dict))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            params["continue"] = token
        return items

    async def read_text(
        self, path: str, *, params: Mapping[str, str] | None = None, limit: int
    ) -> tuple[str, bool]:
        """GET a text body (a pod's log), keeping at most ``limit`` bytes; returns the text
        and whether it was cut there."""
        body = bytearray()
        truncated = False
        try:
            async with self.client.stream("GET", path, params=params) as response:
                if response.status_code >= 400:
                    try:
                        await response.raise_for_status()
                    except KubeStatusError as exc:
                        raise KubernetesRefusal.from_status(exc) from exc
                while chunk := await response.receive_some():
                    body += chunk
                    if len(body) >= limit:
                        truncated = len(body) > limit
                        del body[limit:]
                        break
        except (KubeConnectionError, KubeClosedError, KubeCredentialError) as exc:
            raise AgentUnavailable(f"GET {path}: {exc}") from exc
        return body.decode(errors="replace"), truncated
