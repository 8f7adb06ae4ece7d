"""HTTP servers on 127.0.0.1 for discovery tests: the generated link graph, and a trap site.

:class:`GraphSite` serves a :class:`~crawler.testsite._graph.LinkGraph` at its simulated time
``now`` (set by the test; pages that do not exist yet answer 404): ``/p/<n>`` is page n, with
its links, a ``Last-Modified`` header (its last edit, or its creation), an
``article:published_time`` meta tag and words standing for its section and topic, so a
crawler can make its own state vectors from the text. ``/_truth`` returns which pages exist and
were created after a given time, for tests to check what a crawl found.

A page's ``Last-Modified`` is its last change: its creation, an edit, or (for an index page)
a new page listed on it; with ``conditional`` set, a request with ``If-Modified-Since`` at or
after it is answered 304 with no body, as a real server would (``served`` counts every request
for a page, ``unchanged`` those answered 304). The site also describes itself the two ways crawlers
read natively: ``/sitemap.xml`` is a sitemap index with one sitemap per section
(``/sitemap/<c>.xml``, its ``lastmod`` the section's last change; ``.xml.gz`` serves it
gzip-compressed), each a ``urlset`` of the section's existing pages with their ``lastmod``;
``/feed.xml`` is an RSS 2.0 feed of the 20 newest pages with their ``pubDate``.

:class:`TrapSite` produces unboundedly many URLs: an infinite calendar (every day links to the
day before and after and to next month), item pages whose links carry a fresh session id on
every response (``;jsessionid=`` in the path and ``?sid=`` in the query), and a faceted shop
whose every page links to each way of adding one more facet. It counts what it served.
"""

from __future__ import annotations

import bisect
import datetime as dt
import gzip
import math
import secrets
from collections import Counter
from email.utils import format_datetime, parsedate_to_datetime
from xml.sax.saxutils import escape

from aiohttp import web

from crawler.testsite._graph import LinkGraph

EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class _Server:
    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        raise NotImplementedError

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = int(sockets[0].getsockname()[1]) if sockets else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class GraphSite(_Server):
    """Serves a link graph at the simulated time ``now`` (seconds since the crawl began)."""

    def __init__(self, graph: LinkGraph, now: float = 0.0) -> None:
        super().__init__()
        self.graph = graph
        self.now = now
        self.served: Counter[int] = Counter()
        self.unchanged: Counter[int] = Counter()  # of ``served``: answered 304
        self.conditional = False  # answer If-Modified-Since with 304 (off: always the page)
        self.listings_served: Counter[str] = Counter()
        self.gzip_sitemaps = False  # the index lists /sitemap/<c>.xml.gz instead of .xml
        self._members: dict[int, list[int]] = {}
        for page in range(graph.size):
            self._members.setdefault(int(graph.section[page]), []).append(page)

    def url(self, page: int) -> str:
        return f"{self.base}/p/{page}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/p/{page:\\d+}", self._page)
        app.router.add_get("/_truth", self._truth)
        app.router.add_get("/sitemap.xml", self._sitemap_index)
        app.router.add_get("/sitemap/{section:\\d+}.xml", self._sitemap)
        app.router.add_get("/sitemap/{section:\\d+}.xml.gz", self._sitemap)
        app.router.add_get("/feed.xml", self._feed)
        return app

    def changed(self, page: int) -> float:
        """The page's last change at ``now``: creation, edit, or a new page listed on it."""
        graph = self.graph
        stamps = [float(graph.created[page])]
        stamps += [e for e in graph.edits[page] if e <= self.now]
        items = graph.listings.get(page)
        if items:
            end = bisect.bisect_right([t for t, _ in items], self.now)
            if end:
                stamps.append(items[end - 1][0])
        return max(stamps)

    def section_changed(self, section: int) -> float:
        pages = self._members.get(section, [])
        return max(self.changed(p) for p in pages if self.graph.exists(p, self.now))

    @staticmethod
    def _http_date(t: float) -> str:
        return format_datetime(EPOCH + dt.timedelta(seconds=t), usegmt=True)

    @staticmethod
    def _w3c(t: float) -> str:
        return (EPOCH + dt.timedelta(seconds=t)).isoformat()

    def _fresh(self, request: web.Request, changed: float) -> bool:
        """Whether the site answers conditionally and the request's If-Modified-Since covers
        the last change (HTTP dates are in whole seconds, so the change is compared floored)."""
        since = request.headers.get("If-Modified-Since")
        if since is None or not self.conditional:
            return False
        try:
            stamp = (parsedate_to_datetime(since) - EPOCH).total_seconds()
        except (TypeError, ValueError):
            return False
        return stamp >= math.floor(changed)

    def _xml(self, body: str, gz: bool, changed: float) -> web.Response:
        data = body.encode()
        return web.Response(
            body=gzip.compress(data) if gz else data,
            content_type="application/gzip" if gz else "application/xml",
            headers={"Last-Modified": self._http_date(changed)},
        )

    async def _sitemap_index(self, request: web.Request) -> web.Response:
        self.listings_served["index"] += 1
        stamps = {c: self.section_changed(c) for c in range(self.graph.sections)}
        latest = max(stamps.values())
        if self._fresh(request, latest):
            return web.Response(status=304)
        rows = "".join(
            f"<sitemap><loc>{self.base}/sitemap/{c}.xml{'.gz' if self.gzip_sitemaps else ''}</loc>"
            f"<lastmod>{self._w3c(t)}</lastmod></sitemap>"
            for c, t in stamps.items()
        )
        return self._xml(
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            f"{rows}</sitemapindex>",
            False,
            latest,
        )

    async def _sitemap(self, request: web.Request) -> web.Response:
        section = int(request.match_info["section"])
        if not 0 <= section < self.graph.sections:
            return web.Response(status=404, text="no such section")
        self.listings_served["section"] += 1
        latest = self.section_changed(section)
        if self._fresh(request, latest):
            return web.Response(status=304)
        pages = [p for p in self._members[section] if self.graph.exists(p, self.now)]
        rows = "".join(
            f"<url><loc>{self.url(p)}</loc><lastmod>{self._w3c(self.changed(p))}</lastmod></url>"
            for p in pages
        )
        return self._xml(
            '<?xml version="1.0" encoding="UTF-8"?>'
            f'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{rows}</urlset>',
            request.path.endswith(".gz"),
            latest,
        )

    async def _feed(self, request: web.Request) -> web.Response:
        self.listings_served["feed"] += 1
        created = self.graph.created
        existing = [p for p in self.graph.new_pages().tolist() if created[p] <= self.now]
        newest = existing[-20:][::-1]
        latest = float(created[newest[0]]) if newest else 0.0
        if self._fresh(request, latest):
            return web.Response(status=304)
        items = "".join(
            f"<item><title>{escape(f'Page {p}')}</title><link>{self.url(p)}</link>"
            f"<pubDate>{self._http_date(float(created[p]))}</pubDate></item>"
            for p in newest
        )
        return self._xml(
            '<?xml version="1.0"?><rss version="2.0"><channel><title>generated site</title>'
            f"<link>{self.base}/</link>{items}</channel></rss>",
            False,
            latest,
        )

    def html(self, page: int) -> str:
        graph = self.graph
        links = graph.links_at(page, self.now)
        published = EPOCH + dt.timedelta(seconds=float(graph.created[page]))
        words = [f"section{graph.section[page]}"] * 5
        if page < graph.sections:
            words += ["index", "latest"]
        if graph.topical[page]:
            words += ["topic", "harbor", "river"]
        version = graph.version_at(page, self.now)
        anchors = "".join(f'<li><a href="/p/{p}">page {p}</a></li>' for p in links)
        return (
            f"<!doctype html><html><head><title>Page {page}</title>"
            f'<meta property="article:published_time" content="{published.isoformat()}">'
            f"</head><body><h1>Page {page}</h1><p>{' '.join(words)} edition {version}</p>"
            f"<ul>{anchors}</ul></body></html>"
        )

    async def _page(self, request: web.Request) -> web.Response:
        page = int(request.match_info["page"])
        if not self.graph.exists(page, self.now):
            return web.Response(status=404, text="no such page")
        changed = self.changed(page)
        self.served[page] += 1
        if self._fresh(request, changed):
            self.unchanged[page] += 1
            return web.Response(status=304)
        return web.Response(
            text=self.html(page),
            content_type="text/html",
            headers={"Last-Modified": self._http_date(changed)},
        )

    async def _truth(self, request: web.Request) -> web.Response:
        since = float(request.query.get("since", "0"))
        created = self.graph.created
        new = [p for p in range(self.graph.size) if since < created[p] <= self.now]
        return web.json_response({"now": self.now, "new": new})


FACETS = {
    "color": ("red", "green", "blue", "black"),
    "size": ("s", "m", "l", "xl"),
    "sort": ("price", "name", "new"),
    "brand": ("acme", "globex", "initech"),
}


class TrapSite(_Server):
    """An infinite calendar, session ids in links, and faceted navigation."""

    def __init__(self) -> None:
        super().__init__()
        self.served: Counter[str] = Counter()

    @property
    def start_url(self) -> str:
        return f"{self.base}/"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._front)
        app.router.add_get("/calendar", self._calendar)
        app.router.add_get("/item/{n:\\d+}", self._item)
        app.router.add_get("/item/{n:\\d+};jsessionid={sid}", self._item)
        app.router.add_get("/shop", self._shop)
        return app

    @staticmethod
    def _page(title: str, hrefs: list[str]) -> web.Response:
        anchors = "".join(f'<a href="{h}">{h}</a> ' for h in hrefs)
        return web.Response(
            text=f"<html><head><title>{title}</title></head><body>{anchors}</body></html>",
            content_type="text/html",
        )

    async def _front(self, request: web.Request) -> web.Response:
        self.served["front"] += 1
        sid = secrets.token_hex(8)
        return self._page(
            "trap",
            ["/calendar?date=2026-11-23", f"/item/1;jsessionid={sid}", "/shop?color=red"],
        )

    async def _calendar(self, request: web.Request) -> web.Response:
        self.served["calendar"] += 1
        try:
            day = dt.date.fromisoformat(request.query.get("date", "2026-11-23"))
        except ValueError:
            return web.Response(status=400, text="bad date")
        hrefs = [
            f"/calendar?date={day - dt.timedelta(days=1)}",
            f"/calendar?date={day + dt.timedelta(days=1)}",
            f"/calendar?date={day + dt.timedelta(days=31)}",
        ]
        return self._page(f"calendar {day}", hrefs)

    async def _item(self, request: web.Request) -> web.Response:
        self.served["item"] += 1
        n = int(request.match_info["n"])
        sid = secrets.token_hex(8)
        hrefs = [f"/item/{n + 1};jsessionid={sid}", f"/item/{n + 2}?sid={sid}", "/"]
        return self._page(f"item {n}", hrefs)

    async def _shop(self, request: web.Request) -> web.Response:
        self.served["shop"] += 1
        chosen = {k: v for k, v in request.query.items() if k in FACETS}
        hrefs = []
        for facet, values in FACETS.items():
            for value in values:
                query = {**chosen, facet: value}
                hrefs.append("/shop?" + "&".join(f"{k}={v}" for k, v in query.items()))
        return self._page("shop", hrefs)
