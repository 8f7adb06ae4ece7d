"""Each hostile or broken input becomes a recorded failed poll, never a crash or a hang."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable

from aiohttp import web

from crawler.fetch import Fetcher, FetchRequest
from tests._ports import free_port
from tests.fetch.conftest import LOCAL, Site, raw_server, start


async def test_dns_failure(make_fetcher: Callable[..., Fetcher]) -> None:
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, "http://no-such-host.invalid/page"))
    assert r.outcome == "error" and r.error_kind == "dns", r.error
    assert r.error and "no-such-host.invalid" in r.error


async def test_unreachable_host_connection_refused(make_fetcher: Callable[..., Fetcher]) -> None:
    async with make_fetcher(respect_robots=False) as f:
        r = await f.fetch(FetchRequest(1, f"http://{LOCAL}:{free_port(LOCAL)}/"))
    assert r.outcome == "error" and r.error_kind == "connect", r.error


async def test_connection_reset_is_retried_then_error(
    make_fetcher: Callable[..., Fetcher],
) -> None:
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await reader.readuntil(b"\r\n\r\n")
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()  # RST

    server = await raw_server(handle)
    port = server.sockets[0].getsockname()[1]
    async with server, make_fetcher(respect_robots=False, retries=2) as f:
        r = await f.fetch(FetchRequest(1, f"http://{LOCAL}:{port}/"))
    assert r.outcome == "error" and r.error_kind == "reset", r.error
    # first try + 2 retries (aiohttp may itself retry an idempotent GET once per attempt)
    assert 3 <= connections <= 6


async def test_slow_loris_server_times_out(make_fetcher: Callable[..., Fetcher]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 100000\r\n\r\n"
        )
        try:
            for _ in range(1000):
                writer.write(b"x")
                await writer.drain()
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError):
            pass
        writer.close()

    server = await raw_server(handle)
    port = server.sockets[0].getsockname()[1]
    t0 = time.monotonic()
    async with server, make_fetcher(respect_robots=False, timeout_s=0.8) as f:
        r = await f.fetch(FetchRequest(1, f"http://{LOCAL}:{port}/"))
    assert r.outcome == "error" and r.error_kind == "timeout", r.error
    assert time.monotonic() - t0 < 2.5


async def test_endless_body_aborted_at_cap(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    sent = 0

    async def endless(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        await resp.prepare(request)
        chunk = b"<p>" + b"a" * 65536 + b"</p>"
        try:
            while sent < 10 * 2**30:  # "10 GB"
                await resp.write(chunk)
                sent += len(chunk)
        except (ConnectionError, asyncio.CancelledError):
            pass
        return resp

    site.route("/huge", endless)
    await start(site)
    t0 = time.monotonic()
    async with make_fetcher(max_body_bytes=2**20) as f:
        r = await f.fetch(FetchRequest(1, site.url("/huge")))
    assert r.outcome == "error" and r.error_kind == "too_large", r.error
    assert time.monotonic() - t0 < 5
    assert sent < 64 * 2**20


async def test_declared_huge_content_length_refused_unread(
    make_fetcher: Callable[..., Fetcher],
) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10737418240\r\n\r\n" + b"x" * 1000)
        await writer.drain()
        await asyncio.sleep(1)
        writer.close()

    server = await raw_server(handle)
    port = server.sockets[0].getsockname()[1]
    async with server, make_fetcher(respect_robots=False) as f:
        t0 = time.monotonic()
        r = await f.fetch(FetchRequest(1, f"http://{LOCAL}:{port}/"))
    assert r.error_kind == "too_large" and "10737418240" in (r.error or "")
    assert time.monotonic() - t0 < 0.9


async def test_redirect_loop(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def a(request: web.Request) -> web.Response:
        raise web.HTTPFound("/b")

    async def b(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently(site.url("/a"))

    site.route("/a", a)
    site.route("/b", b)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/a")))
    assert r.outcome == "error" and r.error_kind == "redirect_loop", r.error


async def test_too_many_redirects(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def step(request: web.Request) -> web.Response:
        raise web.HTTPFound(f"/r/{int(request.match_info['n']) + 1}")

    async def done(request: web.Request) -> web.Response:
        return web.Response(text="done")

    site.route("/r/{n}", step)
    site.route("/ok", done)
    await start(site)
    async with make_fetcher(max_redirects=3) as f:
        r = await f.fetch(FetchRequest(1, site.url("/r/0")))
    assert r.outcome == "error" and r.error_kind == "too_many_redirects", r.error
    assert site.hits["/r/0"] == 1 and site.hits["/r/3"] == 1 and site.hits["/r/4"] == 0


async def test_redirect_followed(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def old(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/new?x=1")

    async def new(request: web.Request) -> web.Response:
        return web.Response(text="moved here", content_type="text/plain")

    site.route("/old", old)
    site.route("/new", new)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/old")))
    assert r.outcome == "ok" and r.body == b"moved here"
    assert r.final_url == site.url("/new?x=1") and r.url == site.url("/old")


async def test_redirect_to_bad_scheme(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def old(request: web.Request) -> web.Response:
        raise web.HTTPFound("file:///etc/passwd")

    site.route("/old", old)
    await start(site)
    async with make_fetcher() as f:
        r = await f.fetch(FetchRequest(1, site.url("/old")))
    assert r.error_kind == "unsupported_scheme", r.error


async def test_http_errors(site: Site, make_fetcher: Callable[..., Fetcher]) -> None:
    async def missing(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    async def broken(request: web.Request) -> web.Response:
        raise web.HTTPInternalServerError()

    site.route("/missing", missing)
    site.route("/broken", broken)
    await start(site)
    async with make_fetcher() as f:
        r404 = await f.fetch(FetchRequest(1, site.url("/missing")))
        r500 = await f.fetch(FetchRequest(2, site.url("/broken")))
    assert r404.error_kind == "http_4xx" and r404.status == 404 and "404" in (r404.error or "")
    assert r500.error_kind == "http_5xx" and r500.status == 500
    assert site.hits["/broken"] == 1  # 500 is not transient: no retry


async def test_malformed_http_response(make_fetcher: Callable[..., Fetcher]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"\x00\x01garbage that is not HTTP\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await raw_server(handle)
    port = server.sockets[0].getsockname()[1]
    async with server, make_fetcher(respect_robots=False, retries=0) as f:
        r = await f.fetch(FetchRequest(1, f"http://{LOCAL}:{port}/"))
    assert r.outcome == "error" and r.error_kind in ("bad_response", "reset"), r.error


async def test_gzip_bomb_capped_on_decoded_bytes(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    import gzip

    bomb = gzip.compress(b"<p>" + b"a" * (8 * 2**20) + b"</p>")  # ~8 KB on the wire

    async def handler(request: web.Request) -> web.Response:
        return web.Response(
            body=bomb, headers={"Content-Encoding": "gzip", "Content-Type": "text/html"}
        )

    site.route("/bomb", handler)
    await start(site)
    async with make_fetcher(max_body_bytes=2**20) as f:
        r = await f.fetch(FetchRequest(1, site.url("/bomb")))
    assert len(bomb) < 2**20
    assert r.error_kind == "too_large", r.error


async def test_queueing_for_a_connection_is_not_timed(
    site: Site, make_fetcher: Callable[..., Fetcher]
) -> None:
    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.02)
        return web.Response(text="ok")

    site.route("/p/{n}", slow)
    await start(site)
    async with make_fetcher(total_concurrency=4, timeout_s=0.5, respect_robots=False) as f:
        results = await f.fetch_many([FetchRequest(i, site.url(f"/p/{i}")) for i in range(100)])
    assert all(r.outcome == "ok" for r in results), {r.error_kind for r in results}


async def test_a_corrupt_gzip_body_is_a_bad_response_not_retried(
    make_fetcher: Callable[..., Fetcher],
) -> None:
    from crawler.testsite.hostile import HostileServer

    async with HostileServer(LOCAL) as server, make_fetcher(respect_robots=False) as f:
        r = await f.fetch(FetchRequest(1, server.url("/corrupt-gzip")))
    assert r.outcome == "error" and r.error_kind == "bad_response", r.error
    assert "Content-Encoding" in (r.error or "")
    assert server.served["/corrupt-gzip"] == 1  # not retried as a transient reset (retries=2)
