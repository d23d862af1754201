"""Bounded reads of whole responses, failures as Kubernetes Status errors, and the paged list.

A list is read page by page (``limit`` + ``continue``), each page body whole (bounded by
``max_page_bytes``) and decoded with its items kept raw (agent/watch/_lines.py). The pages go
to the caller's ``on_page`` one at a time, so the agent holds at most one page of objects.
A 410 on a continue token (it expired while we paged) raises ``KubeGoneError``: the caller
starts the whole list again, as a list spread over pages of different versions is not one
consistent snapshot.

Two bounds keep one list from wedging its reflector (which holds the initial-list caps while
it lists, so other kinds and /ready wait on it): every page, headers and body, must arrive
within ``page_deadline`` seconds (``timeoutSeconds`` bounds only the headers, and defaults to
none), else KubeTimeoutError; and a page larger than ``max_page_bytes`` is asked for again
with half the ``limit`` (down to one object) instead of failing the same way for ever.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import trio

from .._errors import KubeStatusError, KubeTimeoutError, WatchDecodeError, status_error
from ..kube import KubeResponse, KubeTransport
from ._lines import ListPage, decode_list_page, decode_status

__all__ = [
    "DEFAULT_MAX_PAGE_BYTES",
    "DEFAULT_PAGE_LIMIT",
    "STATUS_BODY_LIMIT",
    "BodyTooLarge",
    "check_status",
    "list_pages",
    "parse_retry_after",
    "read_body",
]

#: Objects per list page: a page of 4.4 KB pods is about 2 MB, parsed in one piece.
DEFAULT_PAGE_LIMIT: Final = 500
#: A page larger than this is refused (lower ``limit`` for kinds with very large objects).
DEFAULT_MAX_PAGE_BYTES: Final = 64 * 2**20
#: How much of an error body is read to find the Status in it.
STATUS_BODY_LIMIT: Final = 64 * 2**10


class BodyTooLarge(WatchDecodeError):
    """A response body longer than the reader's ``limit`` (attribute) bytes."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what}: response body exceeds {limit} bytes")
        self.limit = limit


async def read_body(response: KubeResponse, *, limit: int, what: str) -> bytes:
    """Read a whole body, refusing one longer than ``limit`` bytes (BodyTooLarge)."""
    chunks: list[bytes] = []
    size = 0
    while chunk := await response.receive_some():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(what, limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


async def check_status(response: KubeResponse, *, method: str, path: str) -> None:
    """Raise the KubeStatusError subclass for a non-2xx response (reads at most 64 KiB)."""
    code = response.status_code
    if 200 <= code < 300:
        return
    body = b""
    try:
        body = await read_body(response, limit=STATUS_BODY_LIMIT, what=f"{method} {path}")
    except WatchDecodeError:
        pass  # an oversize error body: the code alone still says what happened
    status = decode_status(body)
    if status is not None:
        message, reason = status.message, status.reason
    else:
        message, reason = body[:200].decode("utf-8", "replace"), ""
    raise status_error(
        code,
        message,
        reason=reason,
        method=method,
        path=path,
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


def status_from_event(code: int, reason: str, message: str, *, path: str) -> KubeStatusError:
    """The error a watch ERROR event stands for (a Status in the stream, not an HTTP status)."""
    return status_error(code or 500, message, reason=reason, method="WATCH", path=path)


async def list_pages(
    transport: KubeTransport,
    path: str,
    *,
    api_version: str,
    kind: str,
    on_page: Callable[[ListPage], Awaitable[None]],
    headers: Mapping[str, str] | None = None,
    params: Mapping[str, str] | None = None,
    limit: int = DEFAULT_PAGE_LIMIT,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    strip_managed_fields: bool = False,
    page_deadline: float = math.inf,
) -> str:
    """List a collection page by page; return the list's resourceVersion.

    ``on_page`` is awaited once per page, in order, before the next page is requested (so
    backpressure from it slows the listing; its time does not count against
    ``page_deadline``). A page over ``max_page_bytes`` is requested again (same continue
    token) with half the limit, down to 1; the smaller limit is kept for the rest of this
    list. Raises KubeStatusError subclasses (KubeGoneError when a continue token expired),
    KubeTimeoutError (a page not read within ``page_deadline`` seconds), KubeConnectionError,
    WatchDecodeError (BodyTooLarge: one object alone is over ``max_page_bytes``).
    """
    continue_token = ""
    while True:
        query = dict(params or {})
        query["limit"] = str(limit)
        if continue_token:
            query["continue"] = continue_token
        try:
            body = await _read_page(transport, path, query, headers, max_page_bytes, page_deadline)
        except BodyTooLarge:
            if limit == 1:
                raise
            # limit 0 (everything at once) starts halving from the default page size.
            limit = max(1, limit // 2) if limit > 0 else DEFAULT_PAGE_LIMIT
            continue
        page = decode_list_page(
            body, api_version=api_version, kind=kind, strip_managed_fields=strip_managed_fields
        )
        del body  # the items own copies of their bytes; let the page buffer go now
        await on_page(page)
        if not page.continue_token:
            return page.resource_version
        continue_token = page.continue_token


async def _read_page(
    transport: KubeTransport,
    path: str,
    query: Mapping[str, str],
    headers: Mapping[str, str] | None,
    max_page_bytes: int,
    deadline: float,
) -> bytes:
    """One page's body, headers and body read within ``deadline`` seconds."""
    with trio.move_on_after(deadline) as scope:
        async with transport.stream("GET", path, params=query, headers=headers) as response:
            await check_status(response, method="LIST", path=path)
            return await read_body(response, limit=max_page_bytes, what=f"list {path}")
    assert scope.cancelled_caught
    raise KubeTimeoutError(
        f"LIST {path}: timeout: page (limit {query['limit']}) not read within {deadline} s"
    )
