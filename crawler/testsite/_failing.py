"""A changing site whose pages can be made to fail while it runs (404, 410, timeouts).

``site.failing[k] = "404" | "410" | "timeout"`` makes page k answer 404 Not Found, 410 Gone,
or nothing for ``hang_s`` seconds (longer than the crawler's fetch timeout); deleting the
entry brings the page back. The site keeps changing the failing pages as before, and counts
the requests each page got (``requests``, failures included).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any, Literal

from aiohttp import web

from crawler.testsite._site import ChangingSite

Failure = Literal["404", "410", "timeout"]


class FailingSite(ChangingSite):
    """``ChangingSite`` with pages that fail on demand (see the module docstring)."""

    def __init__(self, *args: Any, hang_s: float = 5.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.failing: dict[int, Failure] = {}
        self.requests: Counter[int] = Counter()
        self.hang_s = hang_s

    async def _page(self, request: web.Request) -> web.StreamResponse:
        try:
            k = int(request.match_info["k"])
        except ValueError:
            raise web.HTTPNotFound() from None
        self.requests[k] += 1
        failure = self.failing.get(k)
        if failure == "404":
            raise web.HTTPNotFound()
        if failure == "410":
            raise web.HTTPGone()
        if failure == "timeout":
            await asyncio.sleep(self.hang_s)
        return await super()._page(request)
