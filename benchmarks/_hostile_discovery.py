"""The hostile soak's discovery classes: sites a source is pointed at that try to hold the
service through discovery (``benchmarks/hostile_soak.py`` adds them with ``crawler sources
add``, in the soak service only).

One aiohttp application, on its own loopback hosts (a host per class, so that one class's
politeness never paces another's):

* ``REDOS`` ``/news-links``: links ``/aaa.../`` of 25 to 40 ``a`` (then a slash) and
  ``/news/1..3``; the source's include pattern ``(a+)+$|news`` takes a backtracking engine
  2^n steps per ``a`` link;
* ``SITEMAP`` ``/sitemap.xml.gz``: a valid sitemap of 14,000 URLs padded with whitespace to
  about 49 MB, gzip-compressed to about 110 KB (served as a file, no Content-Encoding);
* ``FEED`` ``/feed.xml``: a valid RSS feed of 100,000 items, about 4 MB (under the fetcher's
  5 MB body limit, so that it is read, not refused);
* ``TRAP`` ``/trap/`` (and every page under it): links that carry a fresh session id on every
  fetch, ``/trap/s/<hex>/page/<i>`` and ``/trap/item/<i>?token=<hex>``; added with ``--watch``.
"""

from __future__ import annotations

import gzip
import secrets
from collections import Counter
from dataclasses import dataclass

from aiohttp import web

REDOS, SITEMAP, FEED, TRAP = "127.0.0.25", "127.0.0.26", "127.0.0.27", "127.0.0.28"
HOSTS = (REDOS, SITEMAP, FEED, TRAP)
REDOS_PATTERN = "(a+)+$|news"
SITEMAP_URLS = 14_000
SITEMAP_PAD = 3_600  # whitespace inside each <url>: 14,000 x ~3.7 KB = ~49 MB inflated
FEED_ITEMS = 100_000
TRAP_LINKS = 10  # of each kind, fresh ids on every fetch


@dataclass(frozen=True)
class DiscoverySource:
    """A ``crawler sources add`` of the soak: its URL, extra options and what it tries."""

    url: str
    kind: str
    options: tuple[str, ...] = ()


def _sitemap(port: int) -> bytes:
    pad = " " * SITEMAP_PAD
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    ]
    for k in range(SITEMAP_URLS):
        parts.append(
            f"<url><loc>http://{SITEMAP}:{port}/item/{k}</loc>"
            f"<lastmod>2026-11-26</lastmod>{pad}</url>\n"
        )
    parts.append("</urlset>\n")
    return gzip.compress("".join(parts).encode(), compresslevel=9)


def _feed(port: int) -> bytes:
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n<rss version="2.0"><channel>'
             f"<title>big</title><link>http://{FEED}:{port}/</link>"]  # fmt: skip
    # relative links (resolved against the feed's URL), padded: 100,000 items in about 4 MB
    parts += [f"<item><link>/f/{k}</link>       </item>\n" for k in range(FEED_ITEMS)]
    parts.append("</channel></rss>\n")
    return "".join(parts).encode()


class DiscoveryHostileSite:
    """``await site.start()``, then ``site.sources()`` for the soak to add."""

    def __init__(self) -> None:
        self.port = 0
        self.requests: Counter[str] = Counter()
        self.sitemap = b""
        self.feed = b""
        self._runner: web.AppRunner | None = None

    def sources(self) -> list[DiscoverySource]:
        p = self.port
        return [
            DiscoverySource(
                f"http://{REDOS}:{p}/news-links",
                "discovery: backtracking include",
                ("--include", REDOS_PATTERN),
            ),
            DiscoverySource(f"http://{SITEMAP}:{p}/sitemap.xml.gz", "discovery: 49 MB sitemap"),
            DiscoverySource(f"http://{FEED}:{p}/feed.xml", "discovery: 100,000-item feed"),
            DiscoverySource(f"http://{TRAP}:{p}/trap/", "discovery: session-id trap", ("--watch",)),
        ]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/robots.txt", self._robots)
        app.router.add_get("/{tail:.*}", self._page)
        return app

    async def _robots(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text="User-agent: *\nAllow: /\n")

    async def _page(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        host = request.host.partition(":")[0]
        if path == "/sitemap.xml.gz":
            self.requests["sitemap"] += 1
            return web.Response(body=self.sitemap, content_type="application/x-gzip")
        if path == "/feed.xml":
            self.requests["feed"] += 1
            return web.Response(body=self.feed, content_type="application/rss+xml")
        if path == "/news-links":
            self.requests["news-links"] += 1
            links = [f'<a href="/{"a" * n}/">{n}</a>' for n in range(25, 41)]
            links += [f'<a href="/news/{k}">news {k}</a>' for k in range(1, 4)]
            return _html("".join(links))
        if path.startswith("/trap/"):
            self.requests["trap"] += 1
            links = [
                f'<a href="/trap/s/{secrets.token_hex(8)}/page/{i}">p{i}</a>'
                f'<a href="/trap/item/{i}?token={secrets.token_hex(8)}">i{i}</a>'
                for i in range(TRAP_LINKS)
            ]
            return _html("".join(links))
        key = "a-link" if path.startswith("/aaa") else f"other {host}"
        self.requests[key] += 1
        return _html(f"page {path}")

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        first = web.TCPSite(self._runner, REDOS, 0)
        await first.start()
        server = first._server
        assert server is not None
        self.port = int(getattr(server, "sockets", [])[0].getsockname()[1])
        for host in HOSTS[1:]:
            await web.TCPSite(self._runner, host, self.port).start()
        self.sitemap = _sitemap(self.port)
        self.feed = _feed(self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _html(body: str) -> web.Response:
    return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")
