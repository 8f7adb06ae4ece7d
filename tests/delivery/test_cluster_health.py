"""page.stopped_changing in a cluster: two workers on PostgreSQL (real CrawlServices in one
process, real loopback sites). The worker that polls a changing page dies once the page
has stopped changing; the other, running since the start (its health state read when the
page had no change yet), gains the site and continues the test where the dead one left it:
it raises the alarm, counting the silence from the dead worker's last change on the global
slot clock, with the changes the dead worker saw."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select

from crawler.store import NewUrl, Store
from crawler.store.models import changes, events, urls
from crawler.testsite import ChangingSite
from tests.cluster.test_service_cluster import Worker, owners, until
from tests.delivery.test_health_e2e import HealthSite

ALPHA = 1e-3
MIN_CHANGES = 10
SLOT_S = 0.1


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


@pytest.fixture
async def sites() -> AsyncIterator[tuple[HealthSite, ChangingSite]]:
    """The page whose selected element disappears (127.0.0.1) and a filler site on a host
    of its own (127.0.0.2), so that each of two workers leases one."""
    price = HealthSite()
    filler = ChangingSite(
        np.full(3, 0.5), tick_seconds=0.1, page_size=500, seed=1, host="127.0.0.2"
    )
    await price.start()
    await filler.start()
    try:
        yield price, filler
    finally:
        await filler.stop()
        await price.stop()


def _worker(database_url: str, name: str) -> Worker:
    overrides: dict[str, Any] = {
        "scheduler": "bayes",
        "capacity": 4.0,
        "slot_seconds": SLOT_S,
        "delivery": False,  # the events are read from the table
        "health_stopped_alpha": ALPHA,
        "health_stopped_min_changes": MIN_CHANGES,
    }
    return Worker(database_url, name, **overrides)


def _stopped(database_url: str) -> list[dict[str, Any]]:
    with Store(database_url) as store, store.engine.connect() as conn:
        rows = conn.execute(
            select(events.c.payload).where(events.c.type == "page.stopped_changing")
        ).all()
    return [json.loads(p) for (p,) in rows]


def _changes_of(database_url: str, url: str) -> tuple[int, float]:
    """(changes stored, newest change's time) of ``url``."""
    with Store(database_url) as store, store.engine.connect() as conn:
        n, newest = conn.execute(
            select(func.count(), func.max(changes.c.detected_at))
            .join(urls, urls.c.id == changes.c.url_id)
            .where(urls.c.url == url)
        ).one()
    return int(n), 0.0 if newest is None else newest.timestamp()


@pytest.mark.slow
async def test_the_worker_that_gains_a_site_continues_its_silence_test(
    database_url: str, sites: tuple[HealthSite, ChangingSite]
) -> None:
    price, filler = sites
    page = price.url("price")
    with Store(database_url) as store:
        store.add_urls([NewUrl(page, selector="#price"), *(NewUrl(u) for u in filler.urls())])
    store = Store(database_url)
    workers = [await _worker(database_url, f"w{i}").start() for i in range(2)]
    try:
        price_site = f"127.0.0.1:{price.port}"

        async def spread() -> bool:
            got = await owners(store)
            held = {o for o in got.values() if o is not None}
            return len(got) == 2 and held == {w.id for w in workers}

        await until(spread, 40, "each worker leases one site")
        owner_id = (await owners(store))[price_site]
        owner = next(w for w in workers if w.id == owner_id)
        survivor = next(w for w in workers if w.id != owner_id)
        # the survivor read its health state at its start: the page had no change then
        await until(
            # enough changes that the learned rate, which falls as the silence grows, still
            # makes the silence improbable within the test's time
            lambda: _async(_changes_of(database_url, page)[0] >= 3 * MIN_CHANGES),
            60,
            "the owner sees the page change",
        )
        price.broken = True  # the selector matches nothing from now on: silence
        await asyncio.sleep(3 * SLOT_S)  # a poll or two of the silent page by its owner
        await owner.die()
        workers.remove(owner)
        # what the dead owner committed: the last change is the element's going
        seen, last_change_at = _changes_of(database_url, page)
        assert not _stopped(database_url), "no alarm while the page changed"

        async def taken() -> bool:
            return (await owners(store)).get(price_site) == survivor.id

        await until(taken, 40, "the survivor gains the silent page's site")
        await until(lambda: _async(bool(_stopped(database_url))), 90, "the survivor's alarm")
        (alarm,) = _stopped(database_url)
        # it continued the dead worker's test: the changes it saw, and the silence counted
        # from its last change (global slot clock: wall time over slot_seconds; the state
        # read puts a change one slot after its poll, the conservative side)
        assert alarm["changes_observed"] >= MIN_CHANGES, alarm
        assert alarm["changes_observed"] <= seen + 1  # urls.hits: also a hit whose row was cut
        assert alarm["last_change_slot"] * SLOT_S == pytest.approx(last_change_at + SLOT_S, abs=0.5)
        assert alarm["probability"] < ALPHA
        # about the test's bound: the silence exp(-λ' S) < α needs for the rate tested, or
        # the first poll of the page after its site was gained, whichever is later; only
        # polls test, and the scheduler spaces the polls of a silent page out (twice the
        # silence covers the poll that crosses the threshold)
        bound = math.ceil(math.log(1 / ALPHA) / alarm["cautious_rate_per_slot"]) + 1
        gained_silence = (await asyncio.to_thread(_gain_time, store, price_site)) - last_change_at
        assert alarm["silent_slots"] <= max(2 * bound, gained_silence / SLOT_S + 30), alarm
    finally:
        for w in workers:
            with contextlib.suppress(Exception):
                await w.leave()
        store.close()


def _gain_time(store: Store, site: str) -> float:
    """When the site's current lease was granted (wall clock, seconds)."""
    lease = next(x for x in store.cluster.leases() if x.site == site)
    assert lease.assigned_at is not None
    return lease.assigned_at.timestamp()


async def _async(value: bool) -> bool:
    return value
