"""The cluster's OpenAPI, fetched for client-side apply and kept per account and server version.

:class:`PatchSchemas` answers, for a kind, how its lists merge (``_smp_schema``), reading what
kubectl reads: ``/openapi/v3`` (an index of group-version documents, each URL carrying a
hash of its content) and the document of the kind's group-version, or ``/openapi/v2`` (one
document for everything) when the cluster publishes no v3. Documents are fetched on first
need, kept, and dropped when ``/version`` (read again at most every ``recheck_seconds``)
says the API server changed version; a v3 document is kept by its hashed URL, so a kind
whose group-version appears later (a CRD created since) has its document fetched then.

Failing soft, like kubectl: when the cluster publishes no OpenAPI (404 on both, or 403) the
answer is None, logged once per server version, and apply falls back to a JSON merge
patch; a failed fetch (network, 5xx, a body that is not JSON) is logged and answered None
too, and tried again after ``retry_seconds``, so one bad moment does not stick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import msgspec
import trio

from .._errors import KubeError
from ..kube import KubeClient
from ._kinds import Resource
from ._smp_schema import KindPatch, PatchSchema, parse_v2, parse_v3, v3_document_paths

__all__ = ["KindSchema", "PatchSchemas"]

log = logging.getLogger("agent.operations")

_DECODER = msgspec.json.Decoder()
_ACCEPT = {"Accept": "application/json"}


@dataclass(frozen=True, slots=True)
class KindSchema:
    """A kind's schema: its ``kind.root`` definition in ``schema``, and whether it takes a
    strategic merge patch (``kind.strategic``)."""

    schema: PatchSchema
    kind: KindPatch


class _Unpublished(Exception):
    """The cluster answered 404 or 403: it has no such document for us."""


class PatchSchemas:
    """One account's OpenAPI for client-side apply (see the module docstring).

    ``client`` is the account's Kubernetes client (owned by the caller)."""

    def __init__(
        self,
        client: KubeClient,
        account: str,
        *,
        recheck_seconds: float = 300.0,
        retry_seconds: float = 30.0,
    ) -> None:
        self._client = client
        self._account = account
        self._recheck = recheck_seconds
        self._retry = retry_seconds
        self._lock = trio.Lock()
        self._version: str | None = None
        self._checked_at = float("-inf")
        self._retry_at = float("-inf")
        self._v3_index: dict[str, str] | None = None
        self._v3_index_read_at = float("-inf")
        self._v3_documents: dict[str, PatchSchema | None] = {}  # None: listed, yet 404
        self._v2: PatchSchema | None = None
        self._unpublished = False  # neither v3 nor v2, for this server version

    async def for_kind(self, res: Resource) -> KindSchema | None:
        """The schema of ``res``'s kind, or None: not published, not described, or the
        fetch failed (logged). Never raises for the cluster's answers."""
        async with self._lock:
            try:
                return await self._for_kind(res)
            except KubeError as exc:
                self._retry_at = trio.current_time() + self._retry
                log.warning(
                    "account %s: could not read the cluster's OpenAPI (%s); client-side apply "
                    "of %s uses a JSON merge patch, which replaces lists whole (retrying in "
                    "%.0f s)",
                    self._account,
                    exc,
                    res.kind,
                    self._retry,
                )
                return None

    async def _for_kind(self, res: Resource) -> KindSchema | None:
        now = trio.current_time()
        if now < self._retry_at:
            return None
        if now - self._checked_at >= self._recheck:
            version = await self._server_version()
            self._checked_at = now
            if version != self._version:
                self._forget(version)
        if self._unpublished:
            return None
        if self._v3_index is None and self._v2 is None:
            try:
                await self._read_v3_index()
            except _Unpublished:
                try:
                    self._v2 = parse_v2(await self._get_json("/openapi/v2"))
                except _Unpublished:
                    self._unpublished = True
                    log.info(
                        "account %s: the cluster publishes no OpenAPI (/openapi/v3, "
                        "/openapi/v2): client-side apply uses JSON merge patches, which "
                        "replace lists whole",
                        self._account,
                    )
                    return None
        schema = self._v2 if self._v2 is not None else await self._v3_document(res)
        if schema is None:
            return None
        kind = schema.kind(res.group, res.version, res.kind)
        return KindSchema(schema, kind) if kind is not None else None

    async def _v3_document(self, res: Resource) -> PatchSchema | None:
        assert self._v3_index is not None
        path = f"apis/{res.group}/{res.version}" if res.group else f"api/{res.version}"
        url = self._v3_index.get(path)
        if url is None and trio.current_time() - self._v3_index_read_at >= self._retry:
            # A group-version newer than the index (a CRD created since): read it again,
            # at most every retry_seconds for one the cluster does not publish at all.
            try:
                await self._read_v3_index()
            except _Unpublished:
                return None
            url = self._v3_index.get(path)
        if url is None:
            return None
        if url not in self._v3_documents:
            try:
                self._v3_documents[url] = parse_v3(await self._get_json(url))
            except _Unpublished:
                self._v3_documents[url] = None
        return self._v3_documents[url]

    async def _read_v3_index(self) -> None:
        self._v3_index = v3_document_paths(await self._get_json("/openapi/v3"))
        self._v3_index_read_at = trio.current_time()

    def _forget(self, version: str) -> None:
        if self._version is not None:
            log.info(
                "account %s: the API server is now %s (was %s): reading its OpenAPI again",
                self._account,
                version,
                self._version,
            )
        self._version = version
        self._v3_index = None
        self._v3_index_read_at = float("-inf")
        self._v3_documents = {}
        self._v2 = None
        self._unpublished = False

    async def _server_version(self) -> str:
        try:
            answer = await self._get_json("/version")
        except _Unpublished:
            return ""
        return str(answer.get("gitVersion", "")) if isinstance(answer, dict) else ""

    async def _get_json(self, url: str) -> Any:
        """GET ``url`` (a path, maybe with a query) as JSON; raises _Unpublished for 404 and
        403, KubeError for any other failure."""
        parts = urlsplit(url)
        params = dict(parse_qsl(parts.query)) or None
        reply = await self._client.request("GET", parts.path, params=params, headers=_ACCEPT)
        if reply.status_code in (403, 404):
            raise _Unpublished(url)
        reply.raise_for_status()
        try:
            return _DECODER.decode(reply.content)
        except msgspec.DecodeError as exc:
            raise KubeError(f"GET {parts.path}: the answer is not JSON: {exc}") from exc
