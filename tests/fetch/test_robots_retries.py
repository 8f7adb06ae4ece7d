"""robots.txt (disallow, Crawl-delay, failures), retries, and 429/503 Retry-After back-off."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable

from aiohttp import web

from crawler.fetch import Fetcher, FetchRequest, parse_retry_after
from tests.fetch.conftest import Site, start


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="page", content_type="text/html")


def robots(text: str, status: int = 200) -> Callable[[web.Request], object]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=text, status=status, content_type="text/plain")

    return handler


async def test_robots_disallow_and_cached(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    site.route("/robots.txt", robots("User-agent: *\nDisallow: /private\n"))  # type: ignore[arg-type]
    site.route("/private/x", ok)
    site.route("/public", ok)
    await start(site)
    async with make_fetcher() as f:
        denied = await f.fetch(FetchRequest(1, site.url("/private/x")))
        allowed = await f.fetch(FetchRequest(2, site.url("/public")))
        again = await f.fetch(FetchRequest(3, site.url("/private/x")))
    assert denied.outcome == "error" and denied.error_kind == "robots", denied.error
    assert again.error_kind == "robots"
    assert allowed.outcome == "ok"
    assert site.hits["/private/x"] == 0 and site.hits["/robots.txt"] == 1


async def test_robots_matches_our_user_agent(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    rules = "User-agent: crawler-tests\nDisallow: /\n\nUser-agent: *\nAllow: /\n"
    site.route("/robots.txt", robots(rules))  # type: ignore[arg-type]
    site.route("/public", ok)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/public")))
    assert r.error_kind == "robots"


async def test_crawl_delay_spaces_requests(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    starts: list[float] = []

    async def page(request: web.Request) -> web.Response:
        starts.append(time.monotonic())
        return web.Response(text="x")

    site.route("/robots.txt", robots("User-agent: *\nCrawl-delay: 0.3\n"))  # type: ignore[arg-type]
    site.route("/p/{n}", page)
    await start(site)
    async with make_fetcher(per_host_concurrency=2) as f:
        results = await f.fetch_many([FetchRequest(i, site.url(f"/p/{i}")) for i in range(3)])
    assert all(r.outcome == "ok" for r in results)
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.2 and starts[-1] - starts[0] >= 0.55, gaps


async def test_robots_404_allows_all(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    site.route("/page", ok)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/page")))
    assert r.outcome == "ok" and site.hits["/robots.txt"] == 1


async def test_robots_5xx_disallows_temporarily(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    site.route("/robots.txt", robots("oops", status=500))  # type: ignore[arg-type]
    site.route("/page", ok)
    await start(site)
    async with make_fetcher(robots_error_ttl_s=0.2) as f:
        first = await f.fetch(FetchRequest(1, site.url("/page")))
        second = await f.fetch(FetchRequest(1, site.url("/page")))
        assert site.hits["/robots.txt"] == 1  # the failure is cached ...
        await asyncio.sleep(0.25)
        third = await f.fetch(FetchRequest(1, site.url("/page")))
        assert site.hits["/robots.txt"] == 2  # ... only for robots_error_ttl_s
    assert first.error_kind == second.error_kind == third.error_kind == "robots"
    assert "500" in (first.error or "")
    assert site.hits["/page"] == 0


async def test_robots_unreachable_reports_network_kind(
    make_fetcher: Callable[..., Fetcher],
) -> None:
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, "http://robots-host.invalid/page"))
    assert r.error_kind == "dns" and "robots.txt" in (r.error or "")


async def test_retries_transient_503_then_ok(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def flaky(request: web.Request) -> web.Response:
        if site.hits["/flaky"] < 3:
            raise web.HTTPServiceUnavailable()
        return web.Response(text="finally")

    site.route("/flaky", flaky)
    await start(site)
    async with make_fetcher(retries=2) as f:
        r = await f.fetch(FetchRequest(1, site.url("/flaky")))
    assert r.outcome == "ok" and r.body == b"finally" and site.hits["/flaky"] == 3


async def test_retries_exhausted(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def bad_gateway(request: web.Request) -> web.Response:
        raise web.HTTPBadGateway()

    site.route("/bg", bad_gateway)
    await start(site)
    async with make_fetcher(retries=1) as f:
        r = await f.fetch(FetchRequest(1, site.url("/bg")))
    assert r.error_kind == "http_5xx" and r.status == 502 and site.hits["/bg"] == 2


async def test_429_retry_after_backs_host_off(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def limited(request: web.Request) -> web.Response:
        return web.Response(status=429, headers={"Retry-After": "30"})

    site.route("/limited", limited)
    site.route("/other", ok)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/limited")))
        t0 = time.monotonic()
        later = await f.fetch(FetchRequest(2, site.url("/other")))
        assert time.monotonic() - t0 < 1  # fails fast: no waiting for the 30 s back-off
    assert r.error_kind == "rate_limited" and r.status == 429 and r.retry_after_s == 30
    assert r.outcome == "error"  # the 429 itself was a request that failed
    assert later.error_kind == "rate_limited" and later.retry_after_s is not None
    assert later.outcome == "deferred"  # not attempted: not an error
    assert 29 < later.retry_after_s <= 30
    assert site.hits["/limited"] == 1 and site.hits["/other"] == 0


async def test_503_with_retry_after_capped(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def down(request: web.Request) -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "999999"})

    site.route("/down", down)
    await start(site)
    async with make_fetcher(max_retry_after_s=120) as f:
        r = await f.fetch(FetchRequest(1, site.url("/down")))
    assert r.error_kind == "rate_limited" and r.retry_after_s == 120
    assert site.hits["/down"] == 1  # not retried


def test_parse_retry_after() -> None:
    assert parse_retry_after("120") == 120
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    now = 1_445_412_480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert parse_retry_after("Wed, 21 Oct 2015 07:29:00 GMT", now=now) == 60


async def test_robots_fetched_once_for_concurrent_requests(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def slow_robots(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.Response(text="User-agent: *\nDisallow: /no\n")

    site.route("/robots.txt", slow_robots)
    site.route("/p/{n}", ok)
    await start(site)
    async with make_fetcher() as f:
        results = await f.fetch_many([FetchRequest(i, site.url(f"/p/{i}")) for i in range(20)])
    assert all(r.outcome == "ok" for r in results)
    assert site.hits["/robots.txt"] == 1
