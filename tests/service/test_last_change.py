"""Believed Last-Modified headers: real polls of a real server on loopback, judged by the
trust rule (crawler/service/_last_change.py, docs/detect.md)."""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from email.utils import formatdate

import pytest
from aiohttp import web

from crawler.detect import ChangeDetector
from crawler.fetch import FetchConfig
from crawler.service._last_change import LastChanges, http_time
from crawler.service._steps import LastChangeStep
from crawler.store import PollRecord, UrlRecord
from crawler.workers import InProcessPoller, PollAnswer, PollJob

CONFIG = FetchConfig(
    user_agent="crawler-tests/1.0",
    timeout_s=5.0,
    per_host_concurrency=4,
    per_host_min_delay_s=0.0,
    allow_private_addresses=True,
    retries=0,
)
SLOT_S = 2.0
PAGES = ("good", "now", "moving", "stuck", "future", "none")


class Server:
    """Pages whose text and Last-Modified the test sets: ``good`` sends its version's last
    change, ``now`` the response time (a page generated for every request), ``moving`` a
    Last-Modified that moves at every request while the text does not, ``stuck`` one that
    never moves while the text changes, ``future`` one after the response's Date, ``none``
    no header."""

    def __init__(self) -> None:
        start = time.time()
        self.version = dict.fromkeys(PAGES, 0)
        self.changed_at = {"good": start - 100.0, "stuck": start - 300.0}
        self.requests = 0

    async def page(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests += 1
        now = time.time()
        modified = {
            "good": self.changed_at["good"],
            "now": now,
            "moving": now - 500.0 + self.requests,
            "stuck": self.changed_at["stuck"],
            "future": now + 3600.0,
        }.get(name)
        headers = {} if modified is None else {"Last-Modified": formatdate(modified, usegmt=True)}
        body = f"<html><body><p>{name} version {self.version[name]}</p></body></html>"
        return web.Response(text=body, content_type="text/html", headers=headers)

    def change(self, name: str) -> None:
        self.version[name] += 1
        if name == "good":
            self.changed_at["good"] = time.time() - 10.0


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    pages = Server()
    app = web.Application()
    app.router.add_get("/page/{name}", pages.page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.7", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield pages, f"http://127.0.0.7:{port}"
    finally:
        await runner.cleanup()


async def poll(
    poller: InProcessPoller, base: str, records: dict[int, UrlRecord]
) -> dict[int, PollAnswer]:
    jobs = [
        PollJob(
            r.id, r.url, r.host, None, None, None, (), r.last_hash, r.last_raw_hash
        )  # no validators: the server answers 200 every time
        for r in records.values()
    ]
    got: dict[int, PollAnswer] = {}
    async for chunk in poller.poll_chunks(jobs):
        got.update((a.url_id, a) for a in chunk)
    return got


def after(record: UrlRecord, answer: PollAnswer) -> UrlRecord:
    return UrlRecord(
        record.id, record.url, record.host, answer.etag, answer.last_modified,
        answer.content_hash, answer.raw_hash, None, (),
    )  # fmt: skip


async def test_only_a_believable_last_modified_gives_an_age(
    server: tuple[Server, str],
) -> None:
    pages, base = server
    ids = {name: k for k, name in enumerate(PAGES, 1)}
    records = {
        k: UrlRecord(k, f"{base}/page/{name}", base.split("/")[2], None, None, None, None, None, ())
        for name, k in ids.items()
    }
    poller = InProcessPoller(CONFIG, None, ChangeDetector(workers=1))
    await poller.start()
    judge = LastChanges(SLOT_S)
    try:
        # first polls: a version's age where the header is plausible
        first = await poll(poller, base, records)
        assert all(a.outcome == "ok" and a.changed is None for a in first.values())
        assert all(a.date is not None for a in first.values())  # the response's Date
        ages = {name: judge.age(first[k], records[k]) for name, k in ids.items()}
        assert 99.0 / SLOT_S - 1.0 <= ages["good"] <= 101.0 / SLOT_S  # 100 s old, less 1 s
        assert math.isnan(ages["now"])  # "now" cannot be told from a page new just now
        assert ages["moving"] > 200.0  # looks plausible once
        assert math.isnan(ages["future"]) and math.isnan(ages["none"])
        assert judge.distrusted == {ids["future"]}  # modified after its own Date
        records = {k: after(records[k], first[k]) for k in records}

        # second polls: good and stuck changed, the rest did not
        pages.change("good")
        pages.change("stuck")
        second = await poll(poller, base, records)
        assert [n for n, k in ids.items() if second[k].changed] == ["good", "stuck"]
        ages = {name: judge.age(second[k], records[k]) for name, k in ids.items()}
        assert 9.0 / SLOT_S - 1.0 <= ages["good"] <= 11.0 / SLOT_S  # changed 10 s ago
        assert all(math.isnan(ages[n]) for n in PAGES if n != "good")
        # "now" on an unchanged page, a moving one and a change with no later header
        assert judge.distrusted == {ids[n] for n in ("now", "moving", "stuck", "future")}
        records = {k: after(records[k], second[k]) for k in records}

        # a distrusted URL stays so, whatever its header says later
        third = await poll(poller, base, records)
        assert all(math.isnan(judge.age(third[k], records[k])) for k in judge.distrusted)
        assert math.isnan(judge.age(third[ids["good"]], records[ids["good"]]))  # a miss
        assert ids["good"] not in judge.distrusted
    finally:
        await poller.aclose()


async def test_the_step_gives_the_ages_of_the_slots_polls(server: tuple[Server, str]) -> None:
    _, base = server
    record = UrlRecord(1, f"{base}/page/good", base.split("/")[2], None, None, None, None, None, ())
    poller = InProcessPoller(CONFIG, None, ChangeDetector(workers=1))
    await poller.start()
    try:
        answer = (await poll(poller, base, {1: record}))[1]
    finally:
        await poller.aclose()
    step = LastChangeStep(SLOT_S)
    step.observe([answer], {1: record})
    now = datetime.now(UTC)
    polls = [PollRecord(1, "baseline", now), PollRecord(2, "error", now)]
    ages = step.version_ages(polls)
    assert ages is not None and ages[0] == pytest.approx(99.0 / SLOT_S, abs=1.0)
    assert math.isnan(ages[1])
    assert step.version_ages(polls) is None  # each slot's answers once


def test_http_dates_in_every_form_and_nonsense() -> None:
    fixed = http_time("Sun, 06 Nov 1994 08:49:37 GMT")
    assert fixed == 784111777.0
    assert http_time("Sunday, 06-Nov-94 08:49:37 GMT") == fixed  # RFC 850
    assert http_time("Sun Nov  6 08:49:37 1994") == fixed  # asctime: UTC
    assert http_time("Sun, 06 Nov 1994 08:49:37 -0000") == fixed
    assert http_time("yesterday") is None and http_time("") is None
