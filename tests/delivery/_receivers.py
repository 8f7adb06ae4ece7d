"""The delivery tests' receivers on 127.0.0.1, one module for all of them: a webhook
receiver whose behaviour a test switches (ok, 500, hang, 429, refusing connections) and
which verifies every signature with the reference library, and a receiver of apprise's
``json://`` notifications. ``conftest.py`` makes fixtures of them; other test packages
import them from here."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from aiohttp import web
from standardwebhooks import Webhook

from crawler.delivery import generate_secret


class _Server(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=_Server)


@contextlib.asynccontextmanager
async def running(receiver: S) -> AsyncIterator[S]:
    """``receiver`` started for the block, stopped after it."""
    await receiver.start()
    try:
        yield receiver
    finally:
        await receiver.stop()


async def serve(path: str, handler: Any, port: int = 0) -> tuple[web.AppRunner, int]:
    """An aiohttp server on 127.0.0.1 answering POSTs to ``path``; (its runner, its port)."""
    app = web.Application()
    app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server: Any = site._server
    return runner, int(server.sockets[0].getsockname()[1])


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
        self._runner, self.port = await serve("/hook", self._hook, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def ids(self, event_type: str = "page.changed") -> list[str]:
        return [r.msg_id for r in self.received if r.body["type"] == event_type]


class JsonReceiver:
    """What apprise's ``json://`` posts: ``{"title", "message", "type", ...}``; answers 500
    while ``failing``."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.failing = False
        self.attempts = 0
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def _post(self, request: web.Request) -> web.Response:
        self.attempts += 1
        if self.failing:
            return web.Response(status=500)
        self.received.append(json.loads(await request.text()))
        return web.Response(status=200)

    async def start(self) -> None:
        self._runner, self.port = await serve("/notify", self._post)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
