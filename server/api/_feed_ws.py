"""The live change feed over WebSocket: `/v1/events?account=&kind=`.

On connect the server sends `{"type": "subscribed", "account": [...], "kind": [...]}` (from
then on no change is missed), then one JSON text message per change (see server/_feed.py).
A subscriber that falls behind gets `{"type": "resync"}` and is closed with code 1013 (try
again later): it should re-read what it needs through the REST API and reconnect. Messages
the client sends are read and ignored, so that a disconnect is noticed at once.

Three tasks per connection: the sender (queue -> socket), a reader that notices the client
leaving, and a watcher that notices the subscriber lagging. The watcher matters when the
client stops reading altogether: the sender is then blocked in a socket write, and only the
watcher can interrupt it. The goodbye (resync + close) is given RESYNC_SEND_SECONDS; a peer
that does not take it is dropped without it, so a dead client never pins a subscription.
"""

from __future__ import annotations

import json

import trio
from starlette.websockets import WebSocket, WebSocketDisconnect

from .._feed import FeedClosed, FeedError, SubscriberLagged, Subscription
from ._context import context

__all__ = ["RESYNC_CLOSE_CODE", "RESYNC_SEND_SECONDS", "events_feed"]

RESYNC_CLOSE_CODE = 1013
RESYNC_SEND_SECONDS = 2.0
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
    except (WebSocketDisconnect, RuntimeError):
        pass  # the connection is gone either way
    finally:
        scope.cancel()


async def _until_lagged(subscription: Subscription, scope: trio.CancelScope) -> None:
    await subscription.wait_lagged()
    scope.cancel()


async def _send_changes(websocket: WebSocket, subscription: Subscription) -> bool:
    """Send queued messages until the subscription lags (False) or the feed closes (True)."""
    while True:
        try:
            message = await subscription.receive()
        except SubscriberLagged:
            return False
        except FeedClosed:
            return True
        await websocket.send_text(message)


async def events_feed(websocket: WebSocket) -> None:
    feed = context(websocket).state.feed
    accounts = _filter_values(websocket, "account")
    kinds = _filter_values(websocket, "kind")
    await websocket.accept()
    try:
        with feed.subscribe(accounts=accounts, kinds=kinds) as subscription:
            hello = {"type": "subscribed", "account": accounts, "kind": kinds}
            await websocket.send_text(json.dumps(hello))
            feed_closed = False
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_until_client_leaves, websocket, nursery.cancel_scope)
                nursery.start_soon(_until_lagged, subscription, nursery.cancel_scope)
                feed_closed = await _send_changes(websocket, subscription)
                nursery.cancel_scope.cancel()
            if feed_closed:
                await websocket.close(_GOING_AWAY, "the server is shutting down")
            elif subscription.lagged:
                with trio.move_on_after(RESYNC_SEND_SECONDS):
                    await websocket.send_text('{"type":"resync"}')
                    await websocket.close(RESYNC_CLOSE_CODE, "fell behind the change feed")
    except FeedClosed:
        await websocket.close(_GOING_AWAY, "the server is shutting down")
    except FeedError as exc:
        await websocket.send_text(json.dumps({"type": "error", "message": str(exc)}))
        await websocket.close(RESYNC_CLOSE_CODE, "too many subscribers")
    except WebSocketDisconnect:
        pass
