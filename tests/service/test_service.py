"""The crawl service end to end on loopback, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp import web

import crawler.workers._pool
from crawler import schedulers
from crawler.fetch import validate_url
from crawler.service import CrawlService, SlotSummary
from crawler.store import NewUrl, SlotRecord, Store, StoreUnavailable
from crawler.testsite import ChangingSite
from tests.service.conftest import service_settings


def watch(store: Store, urls: list[str]) -> None:
    store.add_urls([NewUrl(validate_url(u)) for u in urls])


async def run_service(
    database_url: str, slots: int, **overrides: object
) -> tuple[list[SlotSummary], CrawlService]:
    summaries: list[SlotSummary] = []
    settings = service_settings(database_url, **overrides)
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), slots, summaries.append)
    return summaries, service


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fetch_workers", "chunk"),
    [(1, 128), (1, 1), (0, 128)],
    ids=["crawl-workers", "one-poll-chunks", "in-process"],
)
async def test_learns_and_counts_exactly_the_true_changes(
    database_url: str,
    site: ChangingSite,
    fetch_workers: int,
    chunk: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(crawler.workers._pool, "ANSWER_CHUNK", chunk)  # a slot in many frames
    with Store(database_url) as store:
        watch(store, site.urls())
    summaries, service = await run_service(database_url, 300, fetch_workers=fetch_workers)
    hits = sum(s.hits for s in summaries)
    errors = sum(s.errors for s in summaries)
    assert errors == 0
    # Every page's first poll is its baseline; nonces never count as changes.
    assert sum(s.baselines for s in summaries) == site.n == site.truth.baselines
    assert hits == site.truth.true_changes_seen
    assert sum(s.polls for s in summaries) == site.truth.served
    with Store(database_url) as store:
        stats = store.stats()
        assert stats.hits == hits
        assert stats.slots == 300
        saved = store.load_scheduler_state("bayes")
    assert saved is not None
    live_ids, live_x = service.loop.scheduler.frequencies()  # type: ignore[union-attr]
    ids, x = schedulers.restore(saved).frequencies()
    assert np.array_equal(ids, live_ids)
    np.testing.assert_allclose(x, live_x, rtol=1e-6)


@pytest.mark.slow
async def test_urls_added_and_removed_while_running_are_picked_up(
    database_url: str, site: ChangingSite
) -> None:
    urls = site.urls()
    with Store(database_url) as store:
        watch(store, urls[:10])
    settings = service_settings(database_url)
    seen: list[int] = []
    async with CrawlService(settings) as service:
        stop = asyncio.Event()
        runner = asyncio.create_task(
            service.run(stop, 60, lambda s: seen.append(service.loop.scheduler.size))  # type: ignore[union-attr]
        )
        await asyncio.sleep(0.3)
        with Store(database_url) as store:
            watch(store, urls[10:15])
            store.remove_urls([validate_url(urls[0])])
        await runner
    assert seen[0] == 10
    assert seen[-1] == 14
    with Store(database_url) as store:
        rows = {r.url: r for r in store.list_urls(include_removed=True)}
    assert rows[validate_url(urls[0])].removed_at is not None
    assert any(rows[validate_url(u)].polls > 0 for u in urls[10:15])


@contextlib.asynccontextmanager
async def misbehaving_server() -> AsyncIterator[tuple[str, str]]:
    """A server whose pages fail in the ways the service must survive."""

    async def loop_redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    async def broken(request: web.Request) -> web.Response:
        return web.Response(status=503, headers={"Retry-After": "1"})

    async def reset(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        return web.Response()

    async def binary(request: web.Request) -> web.Response:
        return web.Response(body=bytes(range(256)) * 40, content_type="application/octet-stream")

    async def bad_html(request: web.Request) -> web.Response:
        return web.Response(
            body=b"<html><body><div><p>unclosed \xff\xfe tags <<<>>><script>",
            headers={"Content-Type": "text/html; charset=klingon"},
        )

    async def private_redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://169.254.169.254/latest/meta-data/")

    app = web.Application()
    app.router.add_get("/loop", loop_redirect)
    app.router.add_get("/reset", reset)
    app.router.add_get("/binary", binary)
    app.router.add_get("/bad-html", bad_html)
    app.router.add_get("/metadata", private_redirect)
    # The 503 + Retry-After page lives on another loopback host: it backs its host off.
    busy_app = web.Application()
    busy_app.router.add_get("/busy", broken)
    runners = [web.AppRunner(a, access_log=None) for a in (app, busy_app)]
    bases = []
    for runner, host in zip(runners, ("127.0.0.1", "127.0.0.2"), strict=True):
        await runner.setup()
        await web.TCPSite(runner, host, 0).start()
        bases.append(f"http://{host}:{runner.addresses[0][1]}")
    try:
        yield bases[0], bases[1]
    finally:
        for runner in runners:
            await runner.cleanup()


@pytest.mark.slow
async def test_bad_targets_are_recorded_failures_not_crashes(database_url: str) -> None:
    async with misbehaving_server() as (base, busy_base):
        urls = [
            f"{base}/loop",
            f"{busy_base}/busy",
            f"{base}/reset",
            f"{base}/binary",
            f"{base}/bad-html",
            f"{base}/metadata",
            f"{base}/missing",
            "http://127.0.0.1:9/closed-port",
            "http://no-such-host.invalid/",
        ]
        with Store(database_url) as store:
            watch(store, urls)
        summaries, _ = await run_service(database_url, 40, capacity=3.0)
    assert len(summaries) == 40
    with Store(database_url) as store:
        rows = {r.url: r for r in store.list_urls()}
        kinds = {
            url: {p.error_kind for p in store.url_detail(url).polls}  # type: ignore[union-attr]
            for url in rows
        }
    by_path = {u.rstrip("/").rsplit("/", 1)[-1]: k for u, k in kinds.items()}
    assert by_path["loop"] <= {"redirect_loop", "too_many_redirects"}
    assert by_path["busy"] == {"rate_limited"}  # 503 + Retry-After: the host is backed off
    assert by_path["reset"] <= {"reset", "other", "connect"}
    assert by_path["metadata"] == {"blocked_address"}
    assert by_path["missing"] == {"http_4xx"}
    assert by_path["closed-port"] == {"connect"}
    assert by_path["no-such-host.invalid"] == {"dns"}
    assert by_path["binary"] == {None}  # successful polls, hashed as bytes
    assert by_path["bad-html"] == {None}


@pytest.mark.slow
async def test_database_briefly_unavailable_loses_nothing(
    database_url: str, site: ChangingSite
) -> None:
    """Six slots in a row the database refuses the commit (the store raises
    StoreUnavailable, as it does for a refused or dropped connection: see tests/store);
    the service keeps crawling and commits every slot, in order, once it is back."""
    with Store(database_url) as store:
        watch(store, site.urls()[:20])
    settings = service_settings(database_url)
    committed: list[bool] = []
    async with CrawlService(settings) as service:
        original, loop = service.store.commit_slot, service.loop
        first: list[int] = []

        def flaky_commit(record: SlotRecord, *args: Any, **kwargs: Any) -> int:
            # the outage: every commit of slots 20-25 (counted from the first), until slot
            # 26 has started; by the record and the slots started, not by the summaries
            # reported, because an overrun slot's commit goes on to the next slot's record
            # before its own summary is reported
            first[:] = first or [record.slot]
            if 20 <= record.slot - first[0] < 26 and loop.slots_run <= 26:
                raise StoreUnavailable("committing the slot: database unavailable (outage)")
            return original(record, *args, **kwargs)

        service.store.commit_slot = flaky_commit  # type: ignore[method-assign]
        await service.run(asyncio.Event(), 40, lambda s: committed.append(s.committed))
    assert committed[20:26] == [False] * 6
    assert committed[26]
    with Store(database_url) as store:
        stats = store.stats()
    assert stats.slots == 40
    assert stats.polls == site.truth.served


async def test_a_rule_changed_while_running_applies_to_the_next_polls(database_url: str) -> None:
    """The loop remembers each URL's record between polls; an operator's edit (here: the URL
    re-watched with another CSS selector) must still reach the next polls."""
    served = 0

    async def page(request: web.Request) -> web.Response:
        nonlocal served
        served += 1
        body = f'<html><body><div id="a">A {served}</div><div id="b">same</div></body></html>'
        return web.Response(text=body, content_type="text/html")

    app = web.Application()
    app.router.add_get("/page", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = validate_url(f"http://127.0.0.1:{runner.addresses[0][1]}/page")
    try:
        with Store(database_url) as store:
            store.add_urls([NewUrl(url, selector="#a")])
        hits: list[int] = []

        def on_slot(s: SlotSummary) -> None:
            hits.append(s.hits)
            if len(hits) == 15:  # from now on, watch the part that never changes
                with Store(database_url) as store:
                    store.remove_urls([url])
                    store.add_urls([NewUrl(url, selector="#b")])

        settings = service_settings(database_url, capacity=1.0)
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 40, on_slot)
    finally:
        await runner.cleanup()
    assert sum(hits[:15]) >= 10  # "#a" changes at every poll
    assert sum(hits[-20:]) == 0  # "#b" never does


async def test_an_importance_edited_while_running_reaches_the_scheduler(
    database_url: str,
) -> None:
    """``crawler edit --importance`` of a URL the service already watches takes effect at
    the next slot, its learning kept (the loop compared only which URLs it watches)."""
    urls = [f"http://127.0.0.1:9/{k}" for k in range(3)]  # refused at once: nothing listens
    with Store(database_url) as store:
        store.add_urls([NewUrl(u) for u in urls])
    settings = service_settings(database_url, capacity=1.0)
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 2)
        scheduler = service.loop.scheduler
        assert scheduler is not None
        ids, before = scheduler.importances()
        assert before.tolist() == [1.0, 1.0, 1.0]
        with Store(database_url) as store:
            assert store.set_importance(urls[1], 0.25)
        await service.run(asyncio.Event(), 3)  # one slot more: it syncs the watch list
        assert service.loop.scheduler is scheduler  # changed in place, not rebuilt
        after_ids, after = scheduler.importances()
    assert after_ids.tolist() == ids.tolist()
    assert after.tolist() == [1.0, 0.25, 1.0]


@pytest.mark.parametrize("db_backend", ["sqlite"])  # PostgreSQL's: the delivery e2e tests
async def test_the_delivery_process_runs_beside_the_crawl_and_stops_with_it(
    database_url: str, site: ChangingSite
) -> None:
    """As deployed (delivery on, the default): the service starts its delivery process
    before the first slot, crawls with it running, and stops it when it stops. (The other
    service tests turn it off: tests/service/conftest.py says why; tests/delivery runs it
    with destinations on both databases.) At the service's own priority: at the default
    nice 19 its start and stop took 16.6 s of wall beside a busy test run, for 1.7 s of its
    CPU (2026-11-27), as for tests/delivery/test_process.py's stop."""
    with Store(database_url) as store:
        watch(store, site.urls())
    summaries, service = await run_service(database_url, 10, delivery=True, delivery_nice=0)
    assert len(summaries) == 10 and sum(s.polls for s in summaries) > 0
    assert service.deliverer is not None and service.deliverer.pid is not None
    assert service.deliverer.exitcode == 0  # asked to stop, and stopped
