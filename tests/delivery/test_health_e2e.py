"""Health events end to end: a real service crawling a loopback site, a signed webhook
receiver, SQLite and PostgreSQL. A page turned into a 404 raises page.failing after N
failed polls and page.recovered when it comes back; a page whose selected element
disappears (its text no longer changes) raises page.stopped_changing within the silence the
test's bound allows."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web
from sqlalchemy import select

from crawler.service import CrawlService, SlotSummary
from crawler.store import DestinationSpec, NewUrl, Store
from crawler.store.models import events
from tests.delivery.conftest import Receiver
from tests.delivery.test_webhooks_e2e import wait_delivered
from tests.service.conftest import service_settings

N_FAILING = 3
ALPHA = 1e-3
MIN_CHANGES = 10
BREAK_AT, MEND_AT, SLOTS = 40, 90, 140


@dataclass
class HealthSite:
    """``/flaky``: a new text at every request, or 404 while ``gone``; ``/price``: a
    ``#price`` element with a new number at every request, absent once ``broken`` (the
    selector then matches nothing and the text is constant)."""

    gone: bool = False
    broken: bool = False
    served: int = 0
    port: int = 0
    _runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    async def _flaky(self, request: web.Request) -> web.Response:
        self.served += 1
        if self.gone:
            raise web.HTTPNotFound()
        return web.Response(
            text=f"<main><p>edition {self.served}</p></main>", content_type="text/html"
        )

    async def _price(self, request: web.Request) -> web.Response:
        self.served += 1
        price = "" if self.broken else f'<div id="price">{self.served} EUR</div>'
        return web.Response(text=f"<main>{price}<p>the shop</p></main>", content_type="text/html")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/flaky", self._flaky)
        app.router.add_get("/price", self._price)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def health_site() -> AsyncIterator[HealthSite]:
    site = HealthSite()
    await site.start()
    try:
        yield site
    finally:
        await site.stop()


@pytest.mark.slow
async def test_failing_recovered_and_stopped_changing(
    database_url: str, receiver: Receiver, health_site: HealthSite
) -> None:
    site = health_site
    with Store(database_url) as store:
        store.add_urls([NewUrl(site.url("flaky")), NewUrl(site.url("price"), selector="#price")])
        store.outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))
    settings = service_settings(
        database_url,
        delivery=True,
        scheduler="bayes",
        delivery_retry_schedule=[0, 0.2, 0.5],
        health_failing_after=N_FAILING,
        health_stopped_alpha=ALPHA,
        health_stopped_min_changes=MIN_CHANGES,
        retired_probe_interval_s=0.2,
    )
    slots = 0

    def on_slot(_: SlotSummary) -> None:
        nonlocal slots
        slots += 1
        if slots == BREAK_AT:
            site.gone = site.broken = True
        if slots == MEND_AT:
            site.gone = False

    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), SLOTS, on_slot)
        await wait_delivered(database_url)
    # a restart: the judge's state comes back from the store, so the page still silent
    # raises no second alarm, and the recovered page nothing either
    site.gone = True  # and a new streak of failures after the restart raises a new failing
    async with CrawlService(settings) as service:
        await service.run(asyncio.Event(), 40)
        await wait_delivered(database_url)
    with Store(database_url) as store, store.engine.connect() as conn:
        stored = conn.execute(select(events.c.type, events.c.slot)).all()
    got = [(r.body["type"], r.body["data"]) for r in receiver.received]
    assert receiver.received and all(r.verified for r in receiver.received)
    health = [(t, d) for t, d in got if t != "page.changed"]
    flaky = [(t, d) for t, d in health if d["url"] == site.url("flaky")]
    price = [(t, d) for t, d in health if d["url"] == site.url("price")]
    # the 404: failing once (after N failed polls), recovered once, in that order
    assert [t for t, _ in flaky] == ["page.failing", "page.recovered", "page.failing"], flaky
    assert flaky[0][1]["consecutive_failures"] == N_FAILING and flaky[0][1]["status"] == 404
    assert flaky[1][1]["failed_polls"] >= N_FAILING
    # the selector that stopped matching: one stopped_changing, within the test's bound
    assert [t for t, _ in price] == ["page.stopped_changing"], price
    data = price[0][1]
    assert data["changes_observed"] >= MIN_CHANGES and data["probability"] < ALPHA
    # the bound: the silence that makes exp(-λ S) < α for the cautious rate tested, plus
    # the polls of one slot (the test runs at polls); the page changed at every poll before
    bound = math.ceil(math.log(1 / ALPHA) / data["cautious_rate_per_slot"]) + 1
    assert data["silent_slots"] <= bound, data
    # its last change is the break itself (the element vanishing), and the alarm came soon
    assert BREAK_AT - 1 <= data["last_change_slot"] <= BREAK_AT + 2, data
    assert data["silent_slots"] <= 20, data
    # every health event delivered is a row of the outbox, written with its slot
    assert sorted(t for t, _ in health) == sorted(t for t, _ in stored if t != "page.changed")
