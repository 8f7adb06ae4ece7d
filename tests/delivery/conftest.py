"""A webhook receiver on 127.0.0.1 whose behaviour a test switches (ok, 500, hang, 429,
refusing connections) and which verifies every signature with the reference library."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from standardwebhooks import Webhook

from crawler.delivery import generate_secret


@dataclass
class Received:
    msg_id: str
    body: dict[str, Any]
    verified: bool


@dataclass
class Receiver:
    """``mode``: "ok", "500", "hang", "429" (with Retry-After ``retry_after``), "gone"; a
    stopped receiver refuses connections (``stop()``/``start()`` keep the port)."""

    secret: str = field(default_factory=generate_secret)
    mode: str = "ok"
    retry_after: int = 1
    received: list[Received] = field(default_factory=list)
    attempts: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def _hook(self, request: web.Request) -> web.Response:
        self.attempts += 1
        body = await request.text()
        if self.mode == "500":
            return web.Response(status=500, text="broken")
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "429":
            return web.Response(status=429, headers={"Retry-After": str(self.retry_after)})
        if self.mode == "gone":
            return web.Response(status=410)
        try:
            Webhook(self.secret).verify(body, dict(request.headers))
            verified = True
        except Exception:
            verified = False
        self.received.append(Received(request.headers["webhook-id"], json.loads(body), verified))
        return web.Response(status=204)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server: Any = site._server
        self.port = int(server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def ids(self, event_type: str = "page.changed") -> list[str]:
        return [r.msg_id for r in self.received if r.body["type"] == event_type]


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    await r.start()
    try:
        yield r
    finally:
        await r.stop()
