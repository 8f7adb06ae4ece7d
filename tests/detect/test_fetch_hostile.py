"""Hostile pages served over HTTP on loopback, fetched and judged as the crawl does it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest

from crawler.detect import ChangeDetector, DetectItem, WatchRules, snapshot_limit
from crawler.fetch import FetchConfig, Fetcher, FetchRequest
from crawler.metrics import CrawlerMetrics
from crawler.workers._process import PollJob, poll_answer

LOCAL = "127.0.0.1"
CONFIG = FetchConfig(
    user_agent="crawler-tests/0.1 (+https://example.org/bot)",
    timeout_s=5,
    connect_timeout_s=1,
    max_body_bytes=4 * 2**20,
    per_host_concurrency=0,
    per_host_min_delay_s=0,
    retries=0,
    allowed_networks=(f"{LOCAL}/32",),
)
TEXT = "caf\u00e9 na\u00efve"
HOSTILE = ["rot13", "hex", "base64", "zlib_codec", "uu", "idna", "punycode", "undefined"]
HOSTILE += ["unicode_internal", "utf-7", "bogus"]
#: path -> (Content-Type, body)
PAGES: dict[str, tuple[str, bytes]] = {
    **{
        f"/header/{label}": (f"text/html; charset={label}", f"<p>{TEXT}</p>".encode())
        for label in HOSTILE
    },
    **{
        f"/meta/{label}": ("text/html", f"<meta charset={label}><p>{TEXT}</p>".encode())
        for label in ("rot13", "idna", "undefined", "punycode")
    },
    "/xml-comments": ("application/xml", b"<!--" * 100_000),
    "/deep": ("text/html", b"<div>" * 5000 + b"deep"),
}


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()

    async def page(request: web.Request) -> web.Response:
        ctype, body = PAGES[request.path]
        return web.Response(body=body, headers={"Content-Type": ctype})

    for path in PAGES:
        app.router.add_get(path, page)
    srv = TestServer(app, host=LOCAL)
    await srv.start_server()
    yield srv
    await srv.close()


def url(server: TestServer, path: str) -> str:
    return f"http://{LOCAL}:{server.port}{path}"


async def test_hostile_pages_over_http_are_judged_inline_in_a_pool_and_by_a_crawl_worker(
    server: TestServer,
) -> None:
    paths = sorted(PAGES)
    async with Fetcher(CONFIG) as fetcher:
        results = [
            await fetcher.fetch(FetchRequest(i, url(server, p))) for i, p in enumerate(paths)
        ]
    assert all(r.outcome == "ok" for r in results), [r.error for r in results]
    items = [DetectItem(r.body, r.content_type, previous_hash="0" * 32) for r in results]
    with ChangeDetector(workers=0) as inline, ChangeDetector(workers=1, min_pool_batch=1) as pool:
        for verdicts in (await inline.judge_many(items), await pool.judge_many(items)):
            for path, verdict in zip(paths, verdicts, strict=True):
                assert verdict.error is None, (path, verdict.message)
                assert verdict.changed is True
                if path.startswith(("/header/", "/meta/")):
                    assert verdict.text is not None and TEXT.encode() in verdict.text, path
                assert verdict.truncated == (path == "/deep"), path
    limit = snapshot_limit(True, 1000)
    for i, (path, result) in enumerate(zip(paths, results, strict=True)):
        job = PollJob(i, result.final_url, LOCAL, None, None, None, (), "0" * 32, None)
        answer = poll_answer(result, job, limit)
        assert answer.outcome == "ok" and answer.changed is True, path
        assert answer.text is not None and len(answer.text) <= 1000


async def test_stored_rules_that_cannot_work_are_a_failed_poll(server: TestServer) -> None:
    async with Fetcher(CONFIG) as fetcher:
        result = await fetcher.fetch(FetchRequest(1, url(server, "/header/bogus")))
    # stored before the checks existed: a lookbehind (Python re, not RE2), a costly selector
    for selector, patterns in ((None, ("(?<=a)b",)), ("main article p", ())):
        job = PollJob(1, result.final_url, LOCAL, None, None, selector, patterns, None, None)
        answer = poll_answer(result, job, None)
        assert answer.outcome == "error" and answer.error_kind == "invalid_rules", answer
        assert answer.content_hash is None  # no hash recorded
        verdict = ChangeDetector(workers=0).judge_inline(
            [DetectItem(result.body, result.content_type, WatchRules.of(selector, patterns))]
        )[0]
        assert verdict.error == "invalid_rules"


async def test_a_failed_verdict_is_counted_under_its_own_kind(server: TestServer) -> None:
    async with Fetcher(CONFIG) as fetcher:
        result = await fetcher.fetch(FetchRequest(1, url(server, "/header/bogus")))
    job = PollJob(1, result.final_url, LOCAL, None, None, "x y z", (), None, None)
    answer = poll_answer(result, job, None)
    metrics = CrawlerMetrics(CollectorRegistry())
    a = answer
    metrics.observe_poll(a.outcome, a.duration_s, a.bytes_received, a.error_kind, LOCAL)
    text = generate_latest(metrics.registry).decode()
    assert 'crawler_poll_errors_total{kind="invalid_rules"} 1.0' in text
    assert 'crawler_poll_errors_total{kind="other"} 0.0' in text
