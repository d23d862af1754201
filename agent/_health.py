"""The agent's HTTP endpoints: health and admin views on ``server.port``, metrics on
``prometheus.port``. Hypercorn on trio; the apps are plain ASGI (GET only, JSON or text).

``server.port`` (8082): ``/health`` (200 while the process serves), ``/ready`` (200 when
connected and every PRIMARY account's initial sync is done, else 503 with the reason),
``/accounts``, ``/watches``, ``/operations``.
``prometheus.port`` (8008): ``/metrics`` and ``/prometheus_metrics`` (the same text).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any, cast

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve
from prometheus_client import CollectorRegistry

from ._errors import ConfigError
from ._metrics import CONTENT_TYPE_LATEST, render_metrics
from ._status import AgentStatus, accounts_view, operations_view, watches_view
from .config import ServerSslConfig

__all__ = ["health_app", "metrics_app", "serve_http"]

log = logging.getLogger("agent.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
Page = Callable[[], tuple[int, str, bytes]]


def _json(code: int, data: object) -> tuple[int, str, bytes]:
    return code, "application/json", json.dumps(data, indent=1).encode() + b"\n"


def _app(pages: dict[str, Page]) -> App:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        page = pages.get(scope["path"].rstrip("/") or "/")
        if scope["method"] not in ("GET", "HEAD"):
            code, content_type, body = _json(405, {"error": "only GET is served"})
        elif page is None:
            code, content_type, body = _json(404, {"error": f"no page {scope['path']}"})
        else:
            code, content_type, body = page()
        await send(
            {
                "type": "http.response.start",
                "status": code,
                "headers": [
                    (b"content-type", content_type.encode()),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )

    return app


def health_app(status: AgentStatus) -> App:
    """The ``server.port`` app over ``status``."""

    def ready() -> tuple[int, str, bytes]:
        ok, why = status.ready()
        return _json(200 if ok else 503, {"status": "UP" if ok else "DOWN", "reason": why})

    return _app(
        {
            "/health": lambda: _json(200, {"status": "UP"}),
            "/ready": ready,
            "/accounts": lambda: _json(200, accounts_view(status)),
            "/watches": lambda: _json(200, watches_view(status)),
            "/operations": lambda: _json(200, operations_view(status)),
        }
    )


def metrics_app(registry: CollectorRegistry) -> App:
    """The ``prometheus.port`` app: the registry's text exposition on both paths."""

    def metrics() -> tuple[int, str, bytes]:
        return 200, CONTENT_TYPE_LATEST, render_metrics(registry)

    return _app({"/metrics": metrics, "/prometheus_metrics": metrics})


async def serve_http(
    app: App,
    host: str,
    port: int,
    *,
    ssl: ServerSslConfig | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` on ``host:port`` until cancelled; ``started(bound_port)`` (port 0 picks one).

    Raises ConfigError when TLS is enabled with unusable files, OSError when the port is taken.
    """
    config = HypercornConfig()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = log
    config.graceful_timeout = 1.0
    if ssl is not None and ssl.enabled:
        if not (ssl.cert_file and ssl.key_file):
            raise ConfigError("TLS needs certFile and keyFile", path="server.ssl")
        config.certfile = ssl.cert_file
        config.keyfile = ssl.key_file
        config.keyfile_password = ssl.key_password
        if ssl.cacert_file:
            config.ca_certs = ssl.cacert_file

    async def started(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(cast(Any, app), config, task_status=task_status)

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(started)
        task_status.started(int(binds[0].rsplit(":", 1)[1]))
