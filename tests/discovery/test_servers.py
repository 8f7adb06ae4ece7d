"""The HTTP sites for discovery, and a discovery crawl over real HTTP against each of them."""

from __future__ import annotations

from email.utils import parsedate_to_datetime

import aiohttp
import pytest

from crawler.discovery import Refusal, Scope, SourceCrawl
from crawler.testsite._graph import generate
from crawler.testsite._graphserver import EPOCH, GraphSite, TrapSite


async def test_graph_site_serves_the_graph_at_its_time() -> None:
    graph = generate(pages=300, sections=6, duration=86_400.0, new_per_hour=10, seed=4)
    site = GraphSite(graph, now=0.0)
    await site.start()
    try:
        async with aiohttp.ClientSession() as http:
            response = await http.get(site.url(1))
            assert response.status == 200
            body = await response.text()
            for p in graph.links_at(1, 0.0):
                assert f'href="/p/{p}"' in body
            new = int(graph.new_pages()[0])
            assert (await http.get(site.url(new))).status == 404
            site.now = float(graph.created[new])
            hub = int(graph.section[new])
            assert f'href="/p/{new}"' in await (await http.get(site.url(hub))).text()
            page = await http.get(site.url(new))
            assert page.status == 200
            stamp = parsedate_to_datetime(page.headers["Last-Modified"])
            assert abs((stamp - EPOCH).total_seconds() - graph.created[new]) < 1.0
            truth = await (await http.get(f"{site.base}/_truth?since=0")).json()
            assert truth["new"] == [new]
            assert (await http.get(f"{site.base}/p/999999")).status == 404
    finally:
        await site.stop()
    assert site.served[1] == 1 and site.served[new] == 1


async def _crawl(crawl: SourceCrawl, http: aiohttp.ClientSession, now: float, limit: int) -> int:
    fetched = 0
    while fetched < limit and (url := crawl.next_url()) is not None:
        async with http.get(url) as response:
            html = await response.text() if response.status == 200 else None
        crawl.fetched(url, html, published=None, now=now)
        fetched += 1
    return fetched


@pytest.mark.parametrize("strategy", ["weblog", "rl", "best_first", "breadth_first"])
async def test_trap_site_costs_at_most_the_page_budget(strategy: str) -> None:
    site = TrapSite()
    await site.start()
    try:
        crawl = SourceCrawl(
            site.start_url, strategy=strategy, scope=Scope.same_host(site.start_url, page_budget=60)
        )
        async with aiohttp.ClientSession() as http:
            fetched = await _crawl(crawl, http, now=0.0, limit=10_000)
    finally:
        await site.stop()
    assert fetched == crawl.budget.pages <= 60
    assert sum(site.served.values()) == fetched
    assert crawl.next_url() is None


@pytest.mark.parametrize("start_choice", ["bandit", "round_robin"])
async def test_trap_site_costs_at_most_the_page_budget_over_slots(start_choice: str) -> None:
    site = TrapSite()
    await site.start()
    try:
        crawl = SourceCrawl(
            site.start_url,
            start_choice=start_choice,
            max_step=3,
            scope=Scope.same_host(site.start_url, page_budget=60),
        )
        fetched = 0
        async with aiohttp.ClientSession() as http:
            for _ in range(40):  # slots of 10 polls: 400 offered, 60 allowed
                crawl.new_slot()
                fetched += await _crawl(crawl, http, now=0.0, limit=10)
    finally:
        await site.stop()
    assert fetched == crawl.budget.pages == 60
    assert sum(site.served.values()) == fetched


async def test_trap_site_ends_by_the_scope_limits_alone() -> None:
    site = TrapSite()
    await site.start()
    try:
        scope = Scope.same_host(site.start_url, page_budget=5_000, template_budget=20)
        crawl = SourceCrawl(site.start_url, strategy="breadth_first", scope=scope)
        async with aiohttp.ClientSession() as http:
            fetched = await _crawl(crawl, http, now=0.0, limit=10_000)
    finally:
        await site.stop()
    refused = crawl.budget.refused
    assert fetched < 600  # finite: the calendar and the items stop at their template budget
    assert refused[Refusal.TEMPLATE_BUDGET] > 0 and refused[Refusal.TOO_MANY_ARGUMENTS] > 0
    assert site.served["calendar"] <= 20 and site.served["item"] <= 20
    # The session ids never made two URLs of one item.
    items = [u for u in crawl.budget.depth if "/item/" in u]
    assert all("sid" not in u for u in items)


async def test_discovery_over_http_finds_new_pages() -> None:
    graph = generate(
        pages=600, sections=10, active_sections=3, duration=86_400.0, new_per_hour=6, seed=8
    )
    site = GraphSite(graph, now=0.0)
    await site.start()
    try:
        known = {site.url(p) for p in range(graph.size) if graph.exists(p, 0.0)}
        crawl = SourceCrawl(
            site.url(0),
            strategy="weblog",
            known=known,
            seeds=[site.url(p) for p in range(10)],
            scope=Scope.same_host(site.url(0), page_budget=100_000, max_depth=50),
        )
        async with aiohttp.ClientSession() as http:
            for slot in range(48):  # a day in half-hour slots, 40 fetches each
                site.now = (slot + 1) * 1_800.0
                crawl.new_slot()
                await _crawl(crawl, http, now=site.now, limit=40)
    finally:
        await site.stop()
    new = {site.url(int(p)) for p in graph.new_pages() if graph.created[p] <= site.now - 3_600}
    found = {d.url for d in crawl.found}
    assert found <= {site.url(int(p)) for p in graph.new_pages()}  # nothing old reported new
    assert len(found & new) >= 0.5 * len(new)
