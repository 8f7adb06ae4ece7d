"""Real HTTP servers on 127.0.0.1 only, and a fetcher configured for them."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from crawler.fetch import FetchConfig, Fetcher

LOCAL = "127.0.0.1"
BASE_CONFIG = FetchConfig(
    user_agent="crawler-tests/0.1 (+https://example.org/bot)",
    timeout_s=3,
    connect_timeout_s=1,
    max_body_bytes=1 * 2**20,
    per_host_concurrency=0,
    per_host_min_delay_s=0,
    retries=2,
    retry_backoff_s=0.01,
    allowed_networks=(f"{LOCAL}/32",),
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Site:
    """An aiohttp app on 127.0.0.1 whose routes tests add, with per-path hit counts."""

    def __init__(self) -> None:
        self.app = web.Application()
        self.hits: Counter[str] = Counter()
        self.requests: list[web.Request] = []
        self.server: TestServer | None = None

        @web.middleware
        async def count(request: web.Request, handler: Handler) -> web.StreamResponse:
            self.hits[request.path] += 1
            self.requests.append(request)
            return await handler(request)

        self.app.middlewares.append(count)

    def route(self, path: str, handler: Handler) -> None:
        self.app.router.add_get(path, handler)

    def url(self, path: str) -> str:
        assert self.server is not None
        return f"http://{LOCAL}:{self.server.port}{path}"


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = Site()
    yield s
    if s.server is not None:
        await s.server.close()


async def start(site: Site) -> Site:
    site.server = TestServer(site.app, host=LOCAL)
    await site.server.start_server()
    return site


@pytest.fixture
def make_fetcher() -> Callable[..., Fetcher]:
    def make(**overrides: object) -> Fetcher:
        return Fetcher(replace(BASE_CONFIG, **overrides))  # type: ignore[arg-type]

    return make


async def raw_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> asyncio.Server:
    return await asyncio.start_server(handle, LOCAL, 0)
