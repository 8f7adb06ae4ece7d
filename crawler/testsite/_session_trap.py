"""A session-id trap and always-changing pages on a loopback host, for discovery tests and
``benchmarks/hostile_soak.py``.

:class:`SessionTrapSite` answers every page with ``links`` links that carry a fresh session
id on every fetch: ``/s/<hex>/item/<k>?token=<hex>`` (``mode="session"``: canonicalization
folds them into ``/item/<k>``), or fresh numbers ``/item/<n>`` that no canonicalization can
fold (``mode="numeric"``: only the per-source caps hold it). It serves ``/item/<k>`` with or
without the session segment (as a cookie-backed site does). :class:`BusyPages` serves pages
that change on every request. Both count the requests they answered (``served``).
"""

from __future__ import annotations

import itertools
import secrets
from collections import Counter
from typing import Literal

from aiohttp import web

from crawler.testsite._graphserver import _Server


class _HostServer(_Server):
    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host
        self.served: Counter[str] = Counter()

    async def start(self, port: int = 0, host: str | None = None) -> None:
        await super().start(port, host or self.host)

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


class SessionTrapSite(_HostServer):
    """Every page lists ``links`` links with fresh session ids (or fresh numbers)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        mode: Literal["session", "numeric"] = "session",
        links: int = 10,
    ) -> None:
        super().__init__(host)
        self.mode = mode
        self.links = links
        self._numbers = itertools.count(1)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._page)
        app.router.add_get("/item/{k:\\d+}", self._page)
        app.router.add_get("/s/{sid}/item/{k:\\d+}", self._page)
        return app

    def _hrefs(self) -> list[str]:
        if self.mode == "numeric":
            return [f"/item/{next(self._numbers)}" for _ in range(self.links)]
        sid, token = secrets.token_hex(12), secrets.token_hex(8)
        return [f"/s/{sid}/item/{k}?token={token}" for k in range(self.links)]

    async def _page(self, request: web.Request) -> web.Response:
        self.served["/" if request.path == "/" else "item"] += 1
        anchors = "".join(f'<a href="{h}">item</a> ' for h in self._hrefs())
        return web.Response(
            text=f"<html><head><title>trap</title></head><body>{anchors}</body></html>",
            content_type="text/html",
        )


class BusyPages(_HostServer):
    """``/page/<k>`` changes on every request (its text carries the request count)."""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/page/{k}", self._page)
        return app

    async def _page(self, request: web.Request) -> web.Response:
        self.served[request.path] += 1
        n = sum(self.served.values())
        words = " ".join(f"word{(n * 7 + i) % 97}" for i in range(40))
        return web.Response(
            text=f"<html><body><h1>{request.path}</h1><p>{n} {words}</p></body></html>",
            content_type="text/html",
        )
