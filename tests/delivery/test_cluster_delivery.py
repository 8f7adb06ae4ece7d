"""Cluster: three real ``crawler run --cluster`` workers on PostgreSQL, the one delivering
killed with -9 mid-run: another takes the delivery lock over, and every committed change
is delivered at least once, in order per URL, duplicates only with the same id."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import select

from crawler.store import DestinationSpec, NewUrl, Store
from crawler.store.models import events
from crawler.testsite import ChangingSite, zipf_rates
from tests._until import until as wait_until
from tests.cluster._harness import Worker, worker_env
from tests.delivery.conftest import Receiver
from tests.delivery.test_retries import in_order_per_url
from tests.service.conftest import UNTHROTTLED_DELIVERY, as_env

pytestmark = pytest.mark.slow


@pytest.fixture
def db_backend() -> str:
    return "postgresql"


def change_event_ids(database_url: str) -> set[int]:
    with Store(database_url) as store, store.engine.connect() as conn:
        query = select(events.c.id).where(events.c.type == "page.changed")
        return {int(i) for (i,) in conn.execute(query)}


async def until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    """The workers' logs and the receiver, read off the event loop every 0.25 s."""
    await wait_until(predicate, timeout_s, what, every_s=0.25, in_thread=True)


async def test_a_killed_deliverer_is_replaced_and_nothing_is_lost(
    database_url: str, receiver: Receiver, tmp_path: Path
) -> None:
    sites = [
        ChangingSite(zipf_rates(6, 0.5, 0.5), tick_seconds=0.2, page_size=800, seed=k, host=h)
        for k, h in enumerate(("127.0.0.1", "127.0.0.2", "127.0.0.3", "127.0.0.4"))
    ]
    for site in sites:
        await site.start()
    workers: list[Worker] = []
    try:
        with Store(database_url) as store:
            store.upgrade()
            store.add_urls([NewUrl(u) for site in sites for u in site.urls()])
            store.outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))
        extra = {
            "CRAWLER_HEARTBEAT_S": "0.3",
            "CRAWLER_LOG_LEVEL": "INFO",
            "CRAWLER_DELIVERY_RETRY_SCHEDULE": "[0, 0.2, 0.5, 1, 1, 1, 1, 1]",
            "CRAWLER_DELIVERY_POLL_S": "0.1",
            **as_env(UNTHROTTLED_DELIVERY),
        }
        for name in ("w1", "w2", "w3"):
            env = worker_env(database_url, name, capacity=4, slot_seconds=0.2, extra=extra)
            workers.append(Worker(name, env, tmp_path / f"{name}.log").start())

        def delivering() -> list[Worker]:
            return [w for w in workers if "delivering the cluster's events" in w.output(10**6)]

        await until(lambda: len(delivering()) == 1 and len(receiver.received) >= 10, 90,
                    "one deliverer and the first events")  # fmt: skip
        first = delivering()[0]
        first.signal(signal.SIGKILL)
        first.proc.wait(10)  # type: ignore[union-attr]
        await until(lambda: len(delivering()) == 2, 60, "another worker to take delivery over")
        await asyncio.sleep(3.0)  # the two left crawl on (the dead one's sites move)
        committed = change_event_ids(database_url)
        await until(
            lambda: committed <= {int(i.removeprefix("msg_")) for i in receiver.ids()},
            60,
            "every committed change to arrive",
        )
    finally:
        for w in workers:
            w.stop()
        for site in sites:
            await site.stop()
    assert len(committed) > 20
    assert all(r.verified for r in receiver.received)
    by_id: dict[str, set[str]] = {}
    for r in receiver.received:
        by_id.setdefault(r.msg_id, set()).add(str(r.body["data"]["new_hash"]))
    assert all(len(v) == 1 for v in by_id.values())  # a duplicate is the same event
    for url, numbers in in_order_per_url(receiver).items():
        assert numbers == sorted(numbers), url
