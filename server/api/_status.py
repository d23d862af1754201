"""The operator's status page: ``GET /ui`` (HTML, with its script and style sheet beside it)
and ``GET /ui/summary.json``, which the page polls every two seconds.

The page is package data (server/api/ui/), plain HTML, CSS and JavaScript: no build step, no
CDN, nothing fetched from anywhere but this server. It has the API's access rules, which are
none of its own (like Clouddriver's: README "Security model"): whoever reaches the REST port
reaches the page. Its requests are same-origin and relative, so the page keeps working behind
an authenticating proxy (its cookie travels with them) or under a path prefix. Everything the
page shows that comes from clusters or agents is set as text, never as HTML, and the
Content-Security-Policy allows scripts from this server only.

A summary costs one store call per section (``_status_summary`` says what they are). However
many pages poll, it is computed at most once per ``SummaryCache`` period: never more often
than every second, and less often when computing it was slow (ten times its cost, up to 30 s),
so a fleet large enough to make it expensive cannot make the page a load on the server.
"""

from __future__ import annotations

import gzip
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources

import msgspec
import trio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._sessions import SessionManager
from ._armory import lease_ttl_ms
from ._context import ApiState, context
from ._status_summary import Limits, SummaryInput, summarize

__all__ = ["SummaryCache", "refresh_due", "status_page", "status_summary"]

LIMITS = Limits()
MIN_PERIOD_S = 1.0
COST_FACTOR = 10.0
MAX_PERIOD_S = 30.0
_ASSETS = resources.files(__package__) / "ui"
_encoder = msgspec.json.Encoder()

_SECURITY_HEADERS = {
    # Only this server's scripts, styles and requests; no frames, forms or plugins.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # A new server version brings its page at once (the files are small).
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> bytes:
    return (_ASSETS / name).read_bytes()


@dataclass(frozen=True, slots=True)
class _Asset:
    name: str
    media_type: str


_PAGE = _Asset("index.html", "text/html; charset=utf-8")
_SCRIPT = _Asset("status.js", "text/javascript; charset=utf-8")
_STYLE = _Asset("status.css", "text/css; charset=utf-8")


def _serve(asset: _Asset) -> Response:
    return Response(_asset(asset.name), media_type=asset.media_type, headers=_SECURITY_HEADERS)


async def status_page(request: Request) -> Response:
    return _serve(_PAGE)


async def status_script(request: Request) -> Response:
    return _serve(_SCRIPT)


async def status_style(request: Request) -> Response:
    return _serve(_STYLE)


async def to_status_page(request: Request) -> Response:
    # Relative, so that a path prefix added by a proxy stays in front of it.
    return RedirectResponse("ui", status_code=307)


def refresh_due(now: float, computed_at: float, cost: float) -> bool:
    """Whether a summary computed at ``computed_at`` in ``cost`` seconds is due again."""
    period = min(MAX_PERIOD_S, max(MIN_PERIOD_S, COST_FACTOR * cost))
    return now - computed_at >= period


class SummaryCache:
    """The newest summary, as JSON and gzipped, shared by every page that polls."""

    def __init__(self, clock: Callable[[], float] = trio.current_time) -> None:
        self._clock = clock
        self._lock = trio.Lock()
        self._at = -math.inf
        self._cost = 0.0
        self._body = b""
        self._gzipped = b""

    async def get(self, compute: Callable[[], Awaitable[bytes]]) -> tuple[bytes, bytes]:
        """(JSON, gzipped JSON), computed anew with ``compute`` when due. Callers arriving
        while it computes wait for that one rather than start another."""
        async with self._lock:
            started = self._clock()
            if not self._body or refresh_due(started, self._at, self._cost):
                body = await compute()
                self._gzipped = await trio.to_thread.run_sync(gzip.compress, body, 6)
                self._body = body
                self._at = self._clock()
                self._cost = self._at - started
            return self._body, self._gzipped


def _stale_agent_ms(state: ApiState) -> int:
    """Three of the server's heartbeat periods, and at least three minutes (agents heartbeat
    every 20 s by default; ``keepAliveHeartbeatSeconds: 0`` has them send nothing while
    quiet)."""
    sessions = getattr(getattr(state, "config", None), "sessions", None)
    period = float(getattr(sessions, "heartbeat_seconds", 60.0))
    return int(max(180.0, 3 * period) * 1000)


async def _live_replicas(state: ApiState, now_ms: int) -> frozenset[str] | None:
    """The replicas whose heartbeat is younger than the lease TTL, this one included; None
    when no replica writes heartbeats (one server on SQLite)."""
    records = await state.store.list_replicas()
    if not records:
        return None
    ttl = lease_ttl_ms(state)
    live = {r.replica_id for r in records if r.heartbeat_ms + ttl > now_ms}
    return frozenset({*live, state.server_id})


async def _read(state: ApiState) -> SummaryInput:
    store = state.store
    sessions = getattr(state, "sessions", None)
    local = sessions.agents() if isinstance(sessions, SessionManager) else []
    now_ms = int(time.time() * 1000)
    return SummaryInput(
        now_ms=now_ms,
        server_id=state.server_id,
        accounts=await store.list_accounts(),
        unavailable=await store.unavailable_kinds(),
        kinds=await store.kind_overview(),
        agents=await store.list_agents(),
        local_agents=local,
        operations=await store.list_operations(limit=LIMITS.operations),
        activity=state.feed.activity.snapshot(),
        stale_agent_ms=_stale_agent_ms(state),
        live_replicas=await _live_replicas(state, now_ms),
    )


def _encode(inp: SummaryInput) -> bytes:
    return _encoder.encode(summarize(inp, LIMITS))


async def status_summary(request: Request) -> Response:
    state = context(request).state
    cache: SummaryCache = request.app.state.status_summary

    async def compute() -> bytes:
        inp = await _read(state)
        # Shaping 500 accounts and encoding them takes milliseconds: off the event loop.
        return await trio.to_thread.run_sync(_encode, inp)

    body, gzipped = await cache.get(compute)
    headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        body = gzipped
    return Response(body, media_type="application/json", headers=headers)
