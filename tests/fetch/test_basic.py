"""Happy paths, conditional GET, fetch_many, URL validation."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from aiohttp import web

from crawler.fetch import ERROR_KINDS, FetchConfig, Fetcher, FetchRequest, validate_url
from tests.fetch.conftest import Site, start

PAGE = "<html><body><p>hello</p></body></html>"


async def test_ok_with_user_agent(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html", headers={"ETag": '"v1"'})

    site.route("/", page)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/")))
    assert r.outcome == "ok", r.error
    assert r.status == 200 and r.body == PAGE.encode() and r.bytes_received == len(PAGE)
    assert r.content_type is not None and r.content_type.startswith("text/html")
    assert r.etag == '"v1"' and r.error_kind is None and r.duration_s > 0
    page_request = next(q for q in site.requests if q.path == "/")
    assert page_request.headers["User-Agent"].startswith("crawler-tests/0.1")


async def test_conditional_get_etag_and_last_modified(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    lm = "Wed, 21 Oct 2015 07:28:00 GMT"

    async def page(request: web.Request) -> web.Response:
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        if request.headers.get("If-Modified-Since") == lm:
            return web.Response(status=304)
        return web.Response(text=PAGE, content_type="text/html", headers={"Last-Modified": lm})

    site.route("/", page)
    await start(site)
    async with make_fetcher() as f:
        first = await f.fetch(FetchRequest(1, site.url("/")))
        by_etag = await f.fetch(FetchRequest(1, site.url("/"), etag='"v1"'))
        by_date = await f.fetch(FetchRequest(1, site.url("/"), last_modified=first.last_modified))
    assert first.outcome == "ok" and first.last_modified == lm
    assert by_etag.outcome == "not_modified" and by_etag.status == 304 and by_etag.body == b""
    assert by_etag.etag == '"v1"'
    assert by_date.outcome == "not_modified" and by_date.last_modified == lm


async def test_fetch_many_keeps_order(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def page(request: web.Request) -> web.Response:
        return web.Response(text=request.match_info["n"])

    site.route("/p/{n}", page)
    await start(site)
    async with make_fetcher() as f:
        results = await f.fetch_many([FetchRequest(i, site.url(f"/p/{i}")) for i in range(50)])
    assert [r.url_id for r in results] == list(range(50))
    assert [r.body for r in results] == [str(i).encode() for i in range(50)]


async def test_per_host_concurrency_and_delay(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    import asyncio
    import time

    starts: list[float] = []
    active = 0
    peak = 0

    async def page(request: web.Request) -> web.Response:
        nonlocal active, peak
        starts.append(time.monotonic())
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1
        return web.Response(text="x")

    site.route("/p/{n}", page)
    await start(site)
    delay = 0.05
    async with make_fetcher(per_host_concurrency=2, per_host_min_delay_s=delay) as f:
        asked = time.monotonic()
        results = await f.fetch_many([FetchRequest(i, site.url(f"/p/{i}")) for i in range(6)])
    assert all(r.outcome == "ok" for r in results)
    assert peak <= 2
    # The fetcher starts a host's requests a delay apart, so the k-th to reach the server
    # (from 0) does so no sooner than k delays after they were asked for. The gaps between
    # the server's arrival times also carry each request's time in transit, which a busy
    # machine stretches unevenly: 0.2 ms between two of them at load 9 (2026-11-27).
    assert len(starts) == 6
    early = [(k, at - asked) for k, at in enumerate(starts) if at - asked < k * delay]
    assert not early, (early, [b - a for a, b in itertools.pairwise(starts)])


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("not a url", "malformed"),
        ("http://", "no host"),
        ("http://exa mple.com/", "invalid host"),
        ("http://a.com:99999/", "malformed"),
        ("", "empty"),
    ],
)
async def test_malformed_url_is_clear_error(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_url(url)
    async with Fetcher(FetchConfig(user_agent="t")) as f:
        r = await f.fetch(FetchRequest(7, url))
    assert r.outcome == "error" and r.error_kind == "invalid_url" and r.error


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "javascript:x"])
async def test_unsupported_scheme(url: str) -> None:
    with pytest.raises(ValueError, match="unsupported scheme"):
        validate_url(url)
    async with Fetcher(FetchConfig(user_agent="t")) as f:
        r = await f.fetch(FetchRequest(7, url))
    assert r.outcome == "error" and r.error_kind == "unsupported_scheme"


def test_validate_url_canonical_form() -> None:
    assert validate_url("HTTP://Example.COM") == "http://example.com/"
    assert validate_url(" http://a.com:80/x?b=1&a=2#frag ") == "http://a.com/x?b=1&a=2"
    assert validate_url("https://bücher.de/a b") == "https://xn--bcher-kva.de/a%20b"


def test_error_kinds_documented() -> None:
    assert {"invalid_url", "dns", "timeout", "too_large", "robots", "rate_limited"} <= set(
        ERROR_KINDS
    )
