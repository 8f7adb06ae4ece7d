"""A receiver that refuses, fails, hangs and rate-limits: events are retried with back-off,
in order per URL, all arrive when it recovers; past the schedule they are dead-lettered
and ``crawler events replay --failed`` sends them. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import os
from collections import defaultdict

import pytest
from sqlalchemy import func, select

from crawler.service import CrawlService
from crawler.store import DestinationSpec, NewUrl, Store
from crawler.store.models import changes, deliveries
from crawler.testsite import ChangingSite, zipf_rates
from tests.delivery.conftest import Receiver
from tests.delivery.test_webhooks_e2e import wait_delivered
from tests.service.conftest import service_settings
from tests.service.test_restart import cli

pytestmark = pytest.mark.slow


def setup_watch(database_url: str, site: ChangingSite, receiver: Receiver) -> None:
    with Store(database_url) as store:
        store.add_urls([NewUrl(u) for u in site.urls()])
        store.outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))


def in_order_per_url(receiver: Receiver) -> dict[str, list[int]]:
    """Each URL's event ids in the order they first arrived."""
    seen: set[str] = set()
    order: dict[str, list[int]] = defaultdict(list)
    for r in receiver.received:
        if r.msg_id not in seen:
            seen.add(r.msg_id)
            order[r.body["data"]["url"]].append(int(r.msg_id.removeprefix("msg_")))
    return order


def committed_changes(database_url: str) -> int:
    with Store(database_url) as store, store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(changes)).scalar_one())


async def test_outage_then_recovery_delivers_everything_in_order(
    database_url: str, receiver: Receiver
) -> None:
    site = ChangingSite(zipf_rates(8, 0.9, 0.5), tick_seconds=0.05, page_size=1_000, seed=2)
    await site.start()
    await receiver.stop()  # refuses connections first
    try:
        setup_watch(database_url, site, receiver)
        settings = service_settings(
            database_url,
            delivery=True,
            delivery_retry_schedule=[0, 0.3, 0.6, 1.2, 2, 3, 5, 8],
            delivery_timeout_s=0.5,
            delivery_poll_s=0.1,
        )
        stop = asyncio.Event()
        async with CrawlService(settings) as service:
            crawl = asyncio.create_task(service.run(stop))
            await asyncio.sleep(1.5)
            per_mode: dict[str, int] = {}
            for mode in ("500", "hang", "429"):
                receiver.mode = mode
                if receiver._runner is None:
                    await receiver.start()
                before = receiver.attempts
                await asyncio.sleep(1.5)
                per_mode[mode] = receiver.attempts - before
            assert not receiver.received  # nothing got through the outage
            outage_attempts = receiver.attempts
            receiver.mode = "ok"
            await asyncio.sleep(1.0)
            stop.set()
            await crawl
            await wait_delivered(database_url, timeout=40)
        with Store(database_url) as store, store.engine.connect() as conn:
            tried = [int(a) for (a,) in conn.execute(select(deliveries.c.attempts))]
    finally:
        await site.stop()
    n = committed_changes(database_url)
    assert n > 10
    assert len(set(receiver.ids())) == n  # every change arrived (duplicates: same id)
    assert all(r.verified for r in receiver.received)
    # 429 with Retry-After: 1 pauses the destination: at most two rounds of its sends
    # (delivery_concurrency each: the destination is alone) in the 1.5 s, where 500s were
    # retried freely
    assert per_mode["429"] <= 2 * 32, per_mode
    # back-off: during the outage each event was tried a few times, not in a tight loop
    assert 0 < outage_attempts <= 8 * n
    assert max(tried) >= 3
    for url, numbers in in_order_per_url(receiver).items():
        assert numbers == sorted(numbers), url


async def test_dead_letters_wait_and_replay_sends_them(
    database_url: str, receiver: Receiver
) -> None:
    site = ChangingSite(zipf_rates(6, 0.9, 0.5), tick_seconds=0.05, page_size=1_000, seed=3)
    await site.start()
    receiver.mode = "500"
    try:
        setup_watch(database_url, site, receiver)
        settings = service_settings(
            database_url, delivery=True, delivery_retry_schedule=[0, 0.1, 0.1], delivery_poll_s=0.1
        )
        env = dict(os.environ) | {"CRAWLER_DATABASE_URL": database_url}
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 60)
            await wait_delivered(database_url, timeout=30)  # nothing pending: all dead
            n = committed_changes(database_url)
            failed = await asyncio.to_thread(
                cli, env, "events", "--failed", "--json", "--limit", "100000"
            )
            assert n > 5 and len(failed["deliveries"]) == n
            assert {d["attempts"] for d in failed["deliveries"]} == {3}
            assert {d["status"] for d in failed["deliveries"]} == {"dead"}
            assert receiver.attempts == 3 * n and not receiver.received
            await asyncio.sleep(1.0)
            assert receiver.attempts == 3 * n  # dead letters wait
            receiver.mode = "ok"
            await asyncio.to_thread(cli, env, "events", "replay", "--failed")
            await wait_delivered(database_url, timeout=30)
        after = await asyncio.to_thread(cli, env, "events", "--failed", "--json")
    finally:
        await site.stop()
    assert after["deliveries"] == []
    assert len(set(receiver.ids())) == n and all(r.verified for r in receiver.received)
    for url, numbers in in_order_per_url(receiver).items():
        assert numbers == sorted(numbers), url
