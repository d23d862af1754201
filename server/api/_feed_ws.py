"""The live change feed over WebSocket: `/v1/events?account=&kind=`.

On connect the server sends `{"type": "subscribed", "account": [...], "kind": [...]}` (from
then on no change is missed), then one JSON text message per change (see server/_feed.py).
A subscriber that falls behind gets `{"type": "resync"}` and is closed with code 1013 (try
again later): it should re-read what it needs through the REST API and reconnect. Messages
the client sends are read and ignored, so that a disconnect is noticed at once.
"""

from __future__ import annotations

import json

import trio
from starlette.websockets import WebSocket, WebSocketDisconnect

from .._feed import FeedClosed, FeedError, SubscriberLagged
from ._context import context

__all__ = ["RESYNC_CLOSE_CODE", "events_feed"]

RESYNC_CLOSE_CODE = 1013
_GOING_AWAY = 1001


def _filter_values(websocket: WebSocket, name: str) -> list[str]:
    values: list[str] = []
    for raw in websocket.query_params.getlist(name):
        values.extend(v.strip() for v in raw.split(",") if v.strip())
    return values


async def _until_client_leaves(websocket: WebSocket, scope: trio.CancelScope) -> None:
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
    finally:
        scope.cancel()


async def events_feed(websocket: WebSocket) -> None:
    feed = context(websocket).state.feed
    accounts = _filter_values(websocket, "account")
    kinds = _filter_values(websocket, "kind")
    await websocket.accept()
    try:
        with feed.subscribe(accounts=accounts, kinds=kinds) as subscription:
            hello = {"type": "subscribed", "account": accounts, "kind": kinds}
            await websocket.send_text(json.dumps(hello))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_client_leaves, websocket, nursery.cancel_scope)
                while True:
                    try:
                        message = await subscription.receive()
                    except SubscriberLagged:
                        await websocket.send_text('{"type":"resync"}')
                        await websocket.close(RESYNC_CLOSE_CODE, "fell behind the change feed")
                        break
                    except FeedClosed:
                        await websocket.close(_GOING_AWAY, "the server is shutting down")
                        break
                    await websocket.send_text(message)
                nursery.cancel_scope.cancel()
    except FeedClosed:
        await websocket.close(_GOING_AWAY, "the server is shutting down")
    except FeedError as exc:
        await websocket.send_text(json.dumps({"type": "error", "message": str(exc)}))
        await websocket.close(RESYNC_CLOSE_CODE, "too many subscribers")
    except WebSocketDisconnect:
        pass
