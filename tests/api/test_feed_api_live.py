"""The change feed and API end to end: the real service (its HTTP port, a token set) polls a
loopback test site whose page 2 changes three times; then, on that same running service,
the Atom feed parses with feedparser with one entry per change carrying its diff, the JSON
API pages through every change exactly once, each change's diff turns its before into its
after, the token is enforced (but not on /healthz and /metrics), bad parameters are 400s,
unknown ids 404s, and the OpenAPI document is valid and lists exactly the routes served.
"""

from __future__ import annotations

import asyncio

import feedparser
import httpx
import numpy as np
import pytest

from crawler.api import ChangeApi, openapi_document
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, Store
from crawler.testsite import ChangingSite
from tests._ports import free_port
from tests.detect.test_diff import apply_unified_diff
from tests.service.conftest import service_settings

TOKEN = "s3cret-token-for-the-test"
CHANGES = 3
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def walk(client: httpx.AsyncClient, limit: int, **filters: str) -> list[dict[str, object]]:
    """Every change the list returns, page by page, following next_cursor."""
    seen: list[dict[str, object]] = []
    params: dict[str, str] = {"limit": str(limit), **filters}
    for _ in range(100):
        page = await client.get("/api/v1/changes", params=params, headers=AUTH)
        assert page.status_code == 200, page.text
        doc = page.json()
        assert len(doc["changes"]) <= limit
        seen.extend(doc["changes"])
        if doc["next_cursor"] is None:
            return seen
        params["cursor"] = doc["next_cursor"]
    raise AssertionError("the cursor never ended")


@pytest.mark.slow
async def test_feed_and_api_of_a_live_service(database_url: str) -> None:
    site = ChangingSite(np.array([0.0, 1.0]), manual=True, page_size=4_000, seed=1)
    await site.start()
    page1, page2 = (validate_url(u) for u in site.urls())
    with Store(database_url) as store:
        report = store.add_urls([NewUrl(page1), NewUrl(page2)])
        ids = dict(report.added)
        store.edit_urls([ids[page2]], {}, add_tags=["news"])
    settings = service_settings(
        database_url, capacity=2.0, metrics_port=free_port(), api_token=TOKEN
    )
    stop = asyncio.Event()

    def on_slot(_: SlotSummary) -> None:
        seen = site.truth.last_served.get(2)
        if site.truth.true_changes_seen >= CHANGES:
            stop.set()
        elif seen is not None and seen == int(site.versions[1]):
            site.tick()

    try:
        async with CrawlService(settings) as service:
            await service.run(stop, 400, on_slot)
            assert site.truth.true_changes_seen == CHANGES
            server, api = service.http_server, service.change_api
            assert server is not None and api is not None
            assert server.host == "127.0.0.1"
            assert api.store is not service.store  # its own connection pool
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
                await check_token(client)
                entries = await check_feed(client, page1, page2)
                computed = api.diffs.computed
                again = await client.get("/feed/changes.atom", headers=AUTH)
                assert feedparser.parse(again.content).entries == entries
                assert api.diffs.computed == computed == CHANGES  # once per change
                many = await asyncio.gather(  # more readers than reads at once: they wait
                    *(client.get("/feed/changes.atom", headers=AUTH) for _ in range(20))
                )
                assert {r.status_code for r in many} == {200}
                assert {r.content for r in many} == {again.content}
                await check_api(client, page1, page2)
                await check_openapi(client, server.runner.app)
            await check_cache_bound(service.store, await walk_ids(server.url))
    finally:
        await site.stop()


async def walk_ids(base_url: str) -> list[int]:
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
        return [int(str(c["id"])) for c in await walk(client, 1000)]


async def check_cache_bound(store: Store, ids: list[int]) -> None:
    """A cache of one diff holds one: the last computed stays, the others are computed
    again when read again."""
    small = ChangeApi(store, cache_entries=1)
    assert set(await asyncio.to_thread(small.diffs.many, ids)) == set(ids)
    assert len(small.diffs) == 1 and small.diffs.computed == len(ids)
    await asyncio.to_thread(small.diffs.many, ids)  # the last id is a hit, the rest not
    assert len(small.diffs) == 1 and small.diffs.computed == 2 * len(ids) - 1
    await asyncio.to_thread(small.diffs.many, [ids[-2]])  # the one computed last: kept
    assert small.diffs.computed == 2 * len(ids) - 1


async def check_token(client: httpx.AsyncClient) -> None:
    for path in ("/feed/changes.atom", "/api/v1/changes", "/api/v1/changes/1",
                 "/api/v1/openapi.json"):  # fmt: skip
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
            refused = await client.get(path, headers=headers)
            assert refused.status_code == 401, (path, headers)
            assert refused.headers["Content-Type"].startswith("application/problem+json")
            assert refused.headers["WWW-Authenticate"].startswith("Bearer")
            assert TOKEN not in refused.text
    # no token wanted (the loop has stopped by now, so health says 503, not 401)
    assert (await client.get("/healthz")).text.startswith("unhealthy: the crawl loop")
    assert (await client.get("/metrics")).status_code == 200


async def check_feed(client: httpx.AsyncClient, page1: str, page2: str) -> list[object]:
    answer = await client.get("/feed/changes.atom", headers=AUTH)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("application/atom+xml")
    feed = feedparser.parse(answer.content)
    assert not feed.bozo, feed.get("bozo_exception")
    assert feed.version == "atom10"
    assert feed.feed.id and feed.feed.title and feed.feed.updated_parsed
    entries = feed.entries
    assert len(entries) == CHANGES
    assert len({e.id for e in entries}) == CHANGES
    assert all(e.id.startswith("urn:uuid:") for e in entries)
    assert [e.link for e in entries] == [page2] * CHANGES
    assert [t.term for e in entries for t in e.tags] == ["news"] * CHANGES
    # newest first: edition 3, 2, 1, each diff replacing the edition before
    for entry, version in zip(entries, range(CHANGES, 0, -1), strict=True):
        assert entry.updated_parsed is not None
        (content,) = entry.content
        assert content.type == "text/html"
        assert f"-Page 2 - edition {version - 1}" in content.value
        assert f"+Page 2 - edition {version}" in content.value

    # per URL and per tag
    async def feed_of(**params: str) -> feedparser.FeedParserDict:
        answer = await client.get("/feed/changes.atom", params=params, headers=AUTH)
        assert answer.status_code == 200
        parsed = feedparser.parse(answer.content)
        assert not parsed.bozo
        return parsed

    assert (await feed_of(url=page1)).entries == []
    tagged = await feed_of(tag="news")
    assert [e.id for e in tagged.entries] == [e.id for e in entries]
    assert tagged.feed.id != feed.feed.id
    one = await feed_of(url=page2, limit="1")
    assert [e.id for e in one.entries] == [entries[0].id]
    return list(entries)


async def check_api(client: httpx.AsyncClient, page1: str, page2: str) -> None:
    everything = await walk(client, 1000)
    assert len(everything) == CHANGES
    ids = [c["id"] for c in everything]
    assert ids == sorted(ids)
    for limit in (1, 2):
        assert [c["id"] for c in await walk(client, limit)] == ids  # each exactly once
    assert [c["id"] for c in await walk(client, 1, tag="news")] == ids
    assert await walk(client, 10, url=page1) == []
    assert await walk(client, 10, since="2999-01-01T00:00:00Z") == []
    assert [c["id"] for c in await walk(client, 10, since="2000-01-01")] == ids
    for change in everything:
        got = await client.get(f"/api/v1/changes/{change['id']}", headers=AUTH)
        assert got.status_code == 200
        doc = got.json()
        assert doc["url"] == page2 and doc["tags"] == ["news"]
        assert doc["diff_truncated"] is False
        assert apply_unified_diff(doc["before"], doc["diff"]) == doc["after"]
    missing = await client.get("/api/v1/changes/999999", headers=AUTH)
    assert missing.status_code == 404
    assert missing.headers["Content-Type"].startswith("application/problem+json")
    assert missing.json()["status"] == 404
    bad = [
        ("/api/v1/changes", {"limit": "0"}),
        ("/api/v1/changes", {"limit": "1001"}),
        ("/api/v1/changes", {"limit": "ten"}),
        ("/api/v1/changes", {"cursor": "not-a-cursor!"}),
        ("/api/v1/changes", {"since": "yesterday"}),
        ("/api/v1/changes", {"url": "ftp://example.com/"}),
        ("/api/v1/changes/abc", {}),
        ("/feed/changes.atom", {"limit": "501"}),
    ]
    for path, params in bad:
        refused = await client.get(path, params=params, headers=AUTH)
        assert refused.status_code == 400, (path, params, refused.text)
        assert refused.headers["Content-Type"].startswith("application/problem+json")
        assert refused.json()["detail"]


async def check_openapi(client: httpx.AsyncClient, app: object) -> None:
    from aiohttp import web

    assert isinstance(app, web.Application)
    served = await client.get("/api/v1/openapi.json", headers=AUTH)
    assert served.status_code == 200
    document = served.json()
    assert document == openapi_document()
    # imported here: 0.26-0.38 s that every fast-lane worker paid at collection for this
    # slow test alone
    from openapi_spec_validator import validate

    validate(document)  # OpenAPI 3.1 (raises on an invalid document)
    routes = {
        r.resource.canonical
        for r in app.router.routes()
        if r.method == "GET" and r.resource is not None
    }
    assert set(document["paths"]) == routes
