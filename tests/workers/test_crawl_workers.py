"""Crawl workers: processes that fetch and judge a share of the hosts, on loopback."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiohttp import web

from crawler.fetch import FetchConfig
from crawler.sites import host_key
from crawler.testsite import ChangingSite
from crawler.workers import LOST, CrawlWorkers, PollAnswer, PollJob
from tests._until import until

CONFIG = FetchConfig(
    user_agent="crawler-tests/1.0",
    timeout_s=5.0,
    per_host_concurrency=4,
    per_host_min_delay_s=0.0,
    allow_private_addresses=True,
    retries=0,
)


def job(url_id: int, url: str, previous: PollAnswer | None = None) -> PollJob:
    host = url.split("/")[2]
    if previous is None:
        return PollJob(url_id, url, host, None, None, None, (), None, None)
    p = previous
    return PollJob(url_id, url, host, p.etag, p.last_modified, None, (), p.content_hash, p.raw_hash)


@pytest.fixture
async def site() -> AsyncIterator[ChangingSite]:
    async with ChangingSite(np.zeros(6), page_size=3_000, manual=True, seed=2) as changing:
        yield changing


@pytest.fixture
async def workers() -> AsyncIterator[CrawlWorkers]:
    pool = CrawlWorkers(2, CONFIG, text_bytes=200)
    try:
        yield pool
    finally:
        pool.close()


def test_each_host_has_one_worker_and_new_hosts_go_to_the_least_loaded() -> None:
    pool = CrawlWorkers(3, CONFIG, text_bytes=None)  # no process is started for owners()
    hosts = ["a.org"] * 5 + ["b.org:81"] * 3 + ["b.org:82"] * 2 + ["c.org", "d.org"]
    owners = pool.owners(hosts)
    by_host: dict[str, set[int]] = {}
    for host, k in zip(hosts, owners, strict=True):
        by_host.setdefault(host_key(host), set()).add(k)
    assert all(len(ks) == 1 for ks in by_host.values())  # ports of one host: one worker
    assert {k for ks in by_host.values() for k in ks} == {0, 1, 2}
    assert by_host["a.org"] != by_host["b.org"]  # the two busiest hosts are spread
    assert pool.owners(list(reversed(hosts))) == list(reversed(owners))  # sticky


async def test_baseline_miss_hit_and_errors_come_back_in_order(
    site: ChangingSite, workers: CrawlWorkers
) -> None:
    urls = site.urls()[:4]
    bad = [(90, "http://127.0.0.1:9/closed"), (91, "ftp://example.org/file")]
    jobs = [job(k + 1, u) for k, u in enumerate(urls)] + [job(i, u) for i, u in bad]
    first = await workers.poll(jobs)
    assert all(type(a) is PollAnswer for a in first)  # named again after the pipe
    assert [a.url_id for a in first] == [1, 2, 3, 4, 90, 91]
    assert [a.outcome for a in first] == ["ok"] * 4 + ["error", "error"]
    assert [a.changed for a in first[:4]] == [None] * 4  # baselines
    assert first[4].error_kind == "connect" and first[5].error_kind == "unsupported_scheme"

    site.versions[1] += 1  # page 2 changes; the others only rotate their nonces
    second = await workers.poll([job(k + 1, u, first[k]) for k, u in enumerate(urls)])
    assert [a.changed for a in second] == [False, True, False, False]
    assert [a.content_hash == p.content_hash for a, p in zip(second, first[:4], strict=True)] == [
        True, False, True, True,
    ]  # fmt: skip
    text = second[1].text
    assert text is not None and 0 < len(text) <= 200 and b"edition 1" in text
    assert all(a.text is None for k, a in enumerate(second) if k != 1)  # text of hits only

    assert [a.outcome for a in second] == ["ok"] * 4 and [a.url_id for a in second] == [1, 2, 3, 4]
    assert site.truth.served == 8 and site.truth.true_changes_seen == 1


async def test_conditional_get_answers_not_modified(workers: CrawlWorkers) -> None:
    async with ChangingSite(np.zeros(2), page_size=2_000, manual=True, etags=True) as site:
        first = await workers.poll([job(1, site.url(1))])
        assert first[0].outcome == "ok" and first[0].etag  # an ETag was kept
        second = await workers.poll([job(1, site.url(1), first[0])])
        assert second[0].outcome == "not_modified" and second[0].status == 304


async def test_answers_come_a_chunk_at_a_time_and_cover_every_poll_once(
    site: ChangingSite,
) -> None:
    pool = CrawlWorkers(2, CONFIG, text_bytes=None, chunk=2)
    try:
        urls = site.urls()
        jobs = [job(k + 1, u) for k, u in enumerate(urls)] + [job(99, "ftp://example.org/x")]
        chunks = [(indexes, answers) async for indexes, answers in pool.indexed_chunks(jobs)]
        assert all(1 <= len(indexes) <= 2 for indexes, _ in chunks) and len(chunks) >= 4
        seen = sorted(j for indexes, _ in chunks for j in indexes)
        assert seen == list(range(len(jobs)))  # every poll once
        for indexes, answers in chunks:
            assert [a.url_id for a in answers] == [jobs[j].url_id for j in indexes]
        by_id = {a.url_id: a for _, answers in chunks for a in answers}
        assert by_id[99].outcome == "error" and all(
            by_id[k + 1].outcome == "ok" for k in range(len(urls))
        )
        ordered = await pool.poll(jobs)
        assert [a.url_id for a in ordered] == [j.url_id for j in jobs]  # poll(): in the jobs' order
    finally:
        pool.close()


async def slow_site(
    release: asyncio.Event, arrived: list[str] | None = None
) -> tuple[web.AppRunner, int]:
    """A loopback site whose /slow answers once ``release`` is set, /fast at once; the
    requests for /slow are counted in ``arrived`` as they come."""

    async def slow(request: web.Request) -> web.Response:
        if arrived is not None:
            arrived.append(request.path_qs)
        await asyncio.wait_for(release.wait(), 30)
        return web.Response(text="late")

    async def fast(request: web.Request) -> web.Response:
        return web.Response(text="early")

    app = web.Application()
    app.router.add_get("/slow", slow)
    app.router.add_get("/fast", fast)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


async def test_a_finished_chunk_is_answered_while_later_ones_are_still_fetched() -> None:
    release = asyncio.Event()
    runner, port = await slow_site(release)
    pool = CrawlWorkers(1, CONFIG, text_bytes=None, chunk=2)
    try:
        base = f"http://127.0.0.1:{port}"
        jobs = [job(1, f"{base}/fast"), job(2, f"{base}/fast"), job(3, f"{base}/slow")]
        chunks = pool.indexed_chunks(jobs)
        indexes, answers = await asyncio.wait_for(anext(chunks), 10)  # not held by /slow
        assert indexes == [0, 1] and [a.outcome for a in answers] == ["ok", "ok"]
        assert not release.is_set()
        release.set()
        indexes, answers = await asyncio.wait_for(anext(chunks), 10)
        assert indexes == [2] and answers[0].outcome == "ok"
        with pytest.raises(StopAsyncIteration):
            await anext(chunks)
    finally:
        release.set()
        pool.close()
        await runner.cleanup()


async def test_a_killed_worker_fails_every_outstanding_chunk(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()
    arrived: list[str] = []
    runner, port = await slow_site(release, arrived)
    pool = CrawlWorkers(1, CONFIG, text_bytes=None, chunk=1)
    try:
        await pool.start()
        slow = f"http://127.0.0.1:{port}/slow"
        chunks = pool.indexed_chunks([job(k, slow) for k in (1, 2, 3)])
        first = asyncio.ensure_future(anext(chunks))
        await until(
            lambda: len(arrived) == 3, 10, "the three polls in the worker's hands", every_s=0.01
        )
        worker = pool._workers[0]
        assert worker is not None and worker.process.pid is not None
        os.kill(worker.process.pid, signal.SIGKILL)
        got = [await asyncio.wait_for(first, 10)] + [c async for c in chunks]
        assert sorted(i for indexes, _ in got for i in indexes) == [0, 1, 2]
        assert all(a.outcome == "error" and a.error == LOST for _, answers in got for a in answers)
        lost = [r for r in caplog.records if "exited with" in r.getMessage()]
        assert len(lost) == 1 and "3 polls outstanding" in lost[0].getMessage()
    finally:
        release.set()
        pool.close()
        await runner.cleanup()


async def test_a_killed_worker_fails_its_polls_and_is_replaced(site: ChangingSite) -> None:
    release = asyncio.Event()
    arrived: list[str] = []
    runner, port = await slow_site(release, arrived)
    pool = CrawlWorkers(1, CONFIG, text_bytes=None)
    try:
        await pool.start()
        pending = asyncio.ensure_future(pool.poll([job(7, f"http://127.0.0.1:{port}/slow", None)]))
        await until(lambda: len(arrived) == 1, 10, "the poll in the worker's hands", every_s=0.01)
        worker = pool._workers[0]
        assert worker is not None and worker.process.pid is not None
        os.kill(worker.process.pid, signal.SIGKILL)
        answers = await asyncio.wait_for(pending, 10)
        assert (
            answers[0].url_id == 7
            and answers[0].outcome == "error"
            and answers[0].error_kind == "other"
        )
        assert answers[0].error == LOST
        again = await pool.poll([job(1, site.url(1))])  # a new worker takes over
        assert again[0][1] == "ok" and pool.restarts == 1
    finally:
        release.set()
        pool.close()
        await runner.cleanup()
