"""The changing site: an aiohttp application with a background change clock."""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, field
from email.utils import formatdate

import numpy as np
from aiohttp import web
from numpy.typing import NDArray

from crawler.testsite._pages import PageRenderer


def zipf_rates(n: int, alpha: float, beta: float) -> NDArray[np.float64]:
    """p_k = alpha / k^beta for k = 1..n (capped at 1)."""
    return np.minimum(1.0, alpha / np.arange(1, n + 1, dtype=np.float64) ** beta)


@dataclass
class SiteTruth:
    """What the site served: the truth a crawler's hit count is checked against."""

    served: int = 0
    baselines: int = 0
    true_changes_seen: int = 0  # polls that saw a version different from the last one served
    not_modified: int = 0
    last_served: dict[int, int] = field(default_factory=dict)

    def record(self, k: int, version: int) -> None:
        self.served += 1
        previous = self.last_served.get(k)
        if previous is None:
            self.baselines += 1
        elif previous != version:
            self.true_changes_seen += 1
        self.last_served[k] = version


class ChangingSite:
    """Pages ``/page/{k}`` (k = 1..n) changing with probability ``rates[k-1]`` per tick.

    ``tick_seconds`` is the site's slot; ``manual=True`` disables the clock so that a test
    calls ``tick()`` itself. ``etags=True`` serves a version ETag and answers 304 to a
    matching If-None-Match (the nonces make the raw bytes differ anyway). ``host``: the
    loopback address it serves on (127.0.0.2, ... for a site of many hosts). ``crawl_delay``:
    a robots.txt Crawl-delay in seconds (None: none). ``last_modified=True`` sends each page's
    ``Last-Modified``: the time of its version's last change, as static sites and most CMSs
    do (a page's first version is as old as a page of its rate would be at a random time:
    a geometric number of ticks before the site was made, drawn apart from the changes).
    """

    def __init__(
        self,
        rates: NDArray[np.float64],
        *,
        tick_seconds: float = 1.0,
        page_size: int = 30_000,
        seed: int = 0,
        etags: bool = False,
        manual: bool = False,
        host: str = "127.0.0.1",
        crawl_delay: float | None = None,
        last_modified: bool = False,
    ) -> None:
        self.host = host
        self.crawl_delay = crawl_delay
        self.rates = np.asarray(rates, dtype=np.float64)
        self.versions = np.zeros(self.rates.size, dtype=np.int64)
        self.tick_seconds = tick_seconds
        self.etags = etags
        self.manual = manual
        self.truth = SiteTruth()
        self.ticks = 0
        self._renderer = PageRenderer(page_size)
        self._rng = np.random.default_rng(seed)
        self.last_modified = last_modified
        #: each page's last change (``time.time()``)
        ages = np.random.default_rng([seed, 1]).geometric(np.clip(self.rates, 1e-9, 1.0))
        self.changed_at = time.time() - tick_seconds * ages.astype(np.float64)
        self._clock: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def n(self) -> int:
        return int(self.rates.size)

    def url(self, k: int) -> str:
        return f"http://{self.host}:{self.port}/page/{k}"

    def urls(self) -> list[str]:
        return [self.url(k) for k in range(1, self.n + 1)]

    def tick(self) -> None:
        """Advance one slot: each page changes with its probability."""
        changed = self._rng.random(self.n) < self.rates
        self.versions += changed
        self.changed_at[changed] = time.time()
        self.ticks += 1

    async def _run_clock(self) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        while True:
            due = int((loop.time() - start) / self.tick_seconds)
            while self.ticks < due:
                self.tick()
            next_tick = start + (self.ticks + 1) * self.tick_seconds
            await asyncio.sleep(max(0.0, next_tick - loop.time()))

    async def _page(self, request: web.Request) -> web.StreamResponse:
        try:
            k = int(request.match_info["k"])
        except ValueError:
            raise web.HTTPNotFound() from None
        if not 1 <= k <= self.n:
            raise web.HTTPNotFound()
        version = int(self.versions[k - 1])
        etag = f'W/"{k}-{version}"'
        if self.etags and request.headers.get("If-None-Match") == etag:
            self.truth.record(k, version)
            self.truth.not_modified += 1
            headers = {"ETag": etag}
            if self.last_modified:
                headers["Last-Modified"] = formatdate(float(self.changed_at[k - 1]), usegmt=True)
            return web.Response(status=304, headers=headers)
        self.truth.record(k, version)
        body = self._renderer.render(k, version, secrets.token_hex(8))
        headers = {"ETag": etag} if self.etags else {}
        if self.last_modified:
            headers["Last-Modified"] = formatdate(float(self.changed_at[k - 1]), usegmt=True)
        return web.Response(body=body, content_type="text/html", charset="utf-8", headers=headers)

    async def _truth(self, request: web.Request) -> web.Response:
        t = self.truth
        return web.json_response(
            {
                "served": t.served,
                "baselines": t.baselines,
                "true_changes_seen": t.true_changes_seen,
                "not_modified": t.not_modified,
                "ticks": self.ticks,
            }
        )

    async def _robots(self, request: web.Request) -> web.Response:
        delay = "" if self.crawl_delay is None else f"Crawl-delay: {self.crawl_delay:g}\n"
        return web.Response(text=f"User-agent: *\n{delay}Allow: /\n")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/page/{k}", self._page)
        app.router.add_get("/_truth", self._truth)
        app.router.add_get("/robots.txt", self._robots)
        return app

    async def start(self, port: int = 0) -> None:
        """Serve on ``host`` (``port`` 0 picks a free one) and start the change clock."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port)
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port
        if not self.manual:
            self._clock = asyncio.create_task(self._run_clock())

    async def __aenter__(self) -> ChangingSite:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self._clock is not None:
            self._clock.cancel()
            await asyncio.gather(self._clock, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
