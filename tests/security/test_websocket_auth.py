"""The actor API's bearer check covers WebSocket handshakes, not only HTTP requests."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket, WebSocketDisconnect

from runtimes.actor.api.middleware import BearerAuth

TOKEN = "ws-token-0123456789abcdef"


async def _echo(ws: WebSocket) -> None:
    await ws.accept()
    await ws.send_text("in")
    await ws.close()


def test_a_websocket_route_needs_the_token() -> None:
    app = BearerAuth(Starlette(routes=[WebSocketRoute("/v1/ws", _echo)]), token=TOKEN)
    with TestClient(app) as client:
        for headers in ({}, {"authorization": f"Bearer {TOKEN}x"}):
            with (
                pytest.raises(WebSocketDisconnect) as refused,
                client.websocket_connect("/v1/ws", headers=headers),
            ):
                pass
            assert refused.value.code == 1008
        with client.websocket_connect("/v1/ws", headers={"authorization": f"Bearer {TOKEN}"}) as ws:
            assert ws.receive_text() == "in"
