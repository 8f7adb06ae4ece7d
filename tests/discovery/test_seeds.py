"""The start-page bandit, and SourceCrawl driven by sitemaps, feeds and conditional polls."""

from __future__ import annotations

import gzip
import random
from email.utils import parsedate_to_datetime

import aiohttp
import pytest

from crawler.discovery import Scope, SourceCrawl
from crawler.discovery._seeds import SeedBandit
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite


def test_bandit_learns_which_start_pages_pay() -> None:
    seeds = [f"http://e.com/s/{i}" for i in range(50)]
    paying = {seeds[3]: 0.4, seeds[17]: 0.2, seeds[42]: 0.1}
    rng = random.Random(5)
    bandit = SeedBandit(seeds, rng=random.Random(1))
    waiting = dict.fromkeys(seeds, 0)
    for slot in range(1, 301):
        for seed, rate in paying.items():
            waiting[seed] += rng.random() < rate
        polled: set[str] = set()
        for _ in range(5):
            seed = bandit.choose(slot, polled)
            assert seed is not None and seed not in polled  # never twice in a slot
            polled.add(seed)
            bandit.polled(seed, slot)
            if waiting[seed]:
                bandit.credit(seed, waiting[seed])
                waiting[seed] = 0
    shares = bandit.shares()
    assert sum(shares.values()) == pytest.approx(1.0)
    assert all(bandit.polls[s] >= 1 for s in seeds)  # every page was tried
    # 3 of 50 pages (6%) pay; they get far more than their 6% of the polls, in rate order.
    assert shares[seeds[3]] + shares[seeds[17]] + shares[seeds[42]] > 0.3
    assert shares[seeds[3]] > shares[seeds[42]] > max(shares[s] for s in seeds if s not in paying)


def test_a_hint_comes_first_and_a_bad_prior_is_refused() -> None:
    bandit = SeedBandit(["a", "b", "c"])
    for seed in ("a", "b", "c"):
        bandit.polled(seed, 1)
    bandit.credit("a", 10)
    bandit.hint("c")
    assert bandit.choose(2) == "c"
    bandit.polled("c", 2)
    assert bandit.choose(3, {"a"}) in ("b", "c")
    bandit.hint("unknown")  # not a start page: ignored
    assert bandit.choose(4, {"a", "b", "c"}) is None
    with pytest.raises(ValueError, match="prior"):
        SeedBandit(["a"], prior_yield=0)


SITEMAP_INDEX = """<sitemapindex><sitemap><loc>/s/1.xml</loc><lastmod>{one}</lastmod></sitemap>
<sitemap><loc>/s/2.xml</loc><lastmod>2026-01-01</lastmod></sitemap></sitemapindex>"""


def test_a_sitemap_index_source_learns_from_moved_lastmods() -> None:
    site = {
        "http://e.com/s/1.xml": b"<urlset><url><loc>/a/1</loc></url></urlset>",
        "http://e.com/s/2.xml": gzip.compress(b"<urlset><url><loc>/b/1</loc></url></urlset>"),
        "http://e.com/a/1": b"<html><body>one</body></html>",
        "http://e.com/a/2": b"<html><body>two</body></html>",
        "http://e.com/b/1": b"<html><body>b one</body></html>",
    }
    index = "http://e.com/sitemap.xml"
    site[index] = SITEMAP_INDEX.format(one="2026-01-01").encode()
    crawl = SourceCrawl(
        index,
        known={"http://e.com/a/1", "http://e.com/b/1"},
        start_choice="bandit",
        max_step=0,
    )
    fetched = []
    while (url := crawl.next_url()) is not None:
        crawl.fetched(url, site.get(url), published=None, now=0.0)
        fetched.append(url)
    # The index, then its two sitemaps (start pages now); nothing new, nothing moved yet.
    assert sorted(fetched) == sorted([index, "http://e.com/s/1.xml", "http://e.com/s/2.xml"])
    assert crawl.found == [] and not crawl.hints and not crawl.listing_errors
    # Section 1 gains a page; the index says so.
    site[index] = SITEMAP_INDEX.format(one="2026-01-02").encode()
    site["http://e.com/s/1.xml"] = (
        b"<urlset><url><loc>/a/2</loc><lastmod>2026-01-02</lastmod></url>"
        b"<url><loc>/a/1</loc></url></urlset>"
    )
    crawl.new_slot()
    crawl.hint(index)  # as the service might, when the index is due
    order = []
    for _ in range(3):
        url = crawl.next_url()
        assert url is not None
        crawl.fetched(url, site.get(url), published=None, now=86_400.0 * 1)
        order.append(url)
    assert order == [index, "http://e.com/s/1.xml", "http://e.com/a/2"]  # hint first
    assert [h.url for h in crawl.take_hints()] == ["http://e.com/s/1.xml"]
    assert not crawl.hints  # taken
    assert [d.url for d in crawl.found] == ["http://e.com/a/2"]
    assert crawl.found[0].start == "http://e.com/s/1.xml"


def test_broken_listings_are_counted_not_raised() -> None:
    bomb = (
        b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaa"><!ENTITY b "&a;&a;&a;">]>'
        b"<urlset><url><loc>&b;</loc></url></urlset>"
    )
    crawl = SourceCrawl("http://e.com/sitemap.xml", start_choice="bandit", max_step=0)
    url = crawl.next_url()
    assert url is not None
    assert crawl.fetched(url, bomb, published=None, now=0.0) is False
    assert crawl.listing_errors["forbidden_xml"] == 1
    assert crawl.found == []


def test_not_modified_replays_the_links_read_before() -> None:
    page = b'<html><body><a href="/new">n</a></body></html>'
    crawl = SourceCrawl("http://e.com/", known={"http://e.com/"}, start_choice="bandit", max_step=0)
    url = crawl.next_url()
    assert url == "http://e.com/"
    crawl.fetched(url, page, published=None, now=0.0)
    assert crawl.next_url() == "http://e.com/new"
    crawl.fetched("http://e.com/new", None, published=None, now=0.0)  # failed: retry later
    crawl.new_slot()
    crawl.known.discard("http://e.com/new")
    assert crawl.next_url() == "http://e.com/"
    crawl.fetched("http://e.com/", None, published=None, now=10.0, not_modified=True)
    assert crawl.not_modified == 1
    assert crawl.next_url() == "http://e.com/new"  # the link read before still stands


async def _crawl_site(site: GraphSite, crawl: SourceCrawl, polls: int, now: float) -> int:
    downloads = 0
    stamps: dict[str, str] = {}
    async with aiohttp.ClientSession() as http:
        for _ in range(polls):
            url = crawl.next_url()
            if url is None:
                break
            headers = {"If-Modified-Since": stamps[url]} if url in stamps else {}
            async with http.get(url, headers=headers) as response:
                body = await response.read() if response.status == 200 else None
                stamp = response.headers.get("Last-Modified")
                status = response.status
            published = None
            if stamp is not None:
                stamps[url] = stamp
                published = (parsedate_to_datetime(stamp) - EPOCH).total_seconds()
            downloads += status == 200
            crawl.fetched(url, body, published=published, now=now, not_modified=status == 304)
    return downloads


@pytest.mark.parametrize("source", ["/sitemap.xml", "/feed.xml"])
async def test_sitemap_and_feed_sources_over_http(source: str) -> None:
    graph = generate(
        pages=400, sections=8, active_sections=2, duration=20 * 3_600.0, new_per_hour=1, seed=3
    )
    site = GraphSite(graph, now=0.0)
    site.conditional = True
    await site.start()
    try:
        known = {site.url(p) for p in range(graph.size) if graph.exists(p, 0.0)}
        crawl = SourceCrawl(
            site.base + source,
            known=known,
            start_choice="bandit",
            max_step=0,
            scope=Scope.same_host(site.base, page_budget=100_000),
        )
        for slot in range(20):
            site.now = (slot + 1) * 3_600.0
            crawl.new_slot()
            await _crawl_site(site, crawl, 12, site.now)
    finally:
        await site.stop()
    new = {site.url(int(p)) for p in graph.new_pages() if graph.created[p] <= site.now}
    found = {d.url for d in crawl.found}
    assert new and found <= new  # nothing old reported new
    assert len(found) >= 0.9 * len(new)
    assert not crawl.listing_errors


async def test_graph_site_answers_conditional_requests_and_describes_itself() -> None:
    graph = generate(pages=200, sections=4, duration=10 * 3_600.0, new_per_hour=2, seed=2)
    site = GraphSite(graph, now=0.0)
    site.conditional = True
    await site.start()
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(site.url(1)) as response:
                stamp = response.headers["Last-Modified"]
            async with http.get(site.url(1), headers={"If-Modified-Since": stamp}) as response:
                assert response.status == 304
            first = int(graph.new_pages()[0])
            section = int(graph.section[first])
            site.now = float(graph.created[first])
            async with http.get(site.url(section), headers={"If-Modified-Since": stamp}) as r:
                assert r.status == 200  # a new page listed on the index changed it
            async with http.get(f"{site.base}/sitemap/{section}.xml.gz") as response:
                body = await response.read()
                assert body[:2] == b"\x1f\x8b"
                assert site.url(first).encode() in gzip.decompress(body)
            async with http.get(f"{site.base}/feed.xml") as response:
                assert site.url(first).encode() in await response.read()
            async with http.get(f"{site.base}/sitemap/99.xml") as response:
                assert response.status == 404
    finally:
        await site.stop()


def test_the_bandit_state_survives_a_restart() -> None:
    seeds = [f"http://e.com/s/{i}" for i in range(4)]
    crawl = SourceCrawl(seeds[0], seeds=seeds, known=set(seeds), start_choice="bandit", max_step=0)
    for slot in range(30):
        crawl.new_slot()
        for _ in range(2):
            url = crawl.next_url()
            assert url is not None
            page = f'<a href="/new/{slot}">n</a>' if url == seeds[2] else "<p>old</p>"
            crawl.fetched(url, page, published=None, now=float(slot))
            if url == seeds[2]:
                nxt = crawl.next_url()
                assert nxt == f"http://e.com/new/{slot}"
                crawl.fetched(nxt, "<p>new</p>", published=None, now=float(slot))
    saved = crawl.start_state()
    assert saved[seeds[2]][0] > 0 and saved[seeds[0]][0] == 0
    again = SourceCrawl(seeds[0], seeds=seeds, known=set(seeds), start_choice="bandit", max_step=0)
    broken: dict[str, object] = {seeds[1]: ["x", 1, 2], "http://other/": [1, 1, 1]}
    assert again.restore_starts({**saved, **broken}) == 3  # seeds 0, 2, 3; 1 malformed
    again.new_slot()
    assert again.bandit is not None
    assert again.bandit.rate(seeds[2]) > 5 * again.bandit.rate(seeds[0])
    assert again.next_url() == seeds[1]  # never tried (its entry was malformed): first
    assert SourceCrawl(seeds[0]).restore_starts(saved) == 0  # no bandit: nothing to restore
