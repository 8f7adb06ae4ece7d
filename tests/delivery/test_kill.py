"""kill -9 of a real ``crawler run`` between its slots' commits and the delivery of their
events, then a restart: every committed change's event arrives (duplicates only with the
same id), and no event exists for a slot that did not commit. SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Callable

import pytest
from sqlalchemy import select

from crawler.store import DestinationSpec, NewUrl, Store
from crawler.store.models import changes, deliveries, events, slots
from crawler.testsite import ChangingSite, zipf_rates
from tests.delivery.conftest import Receiver
from tests.service.conftest import UNTHROTTLED_DELIVERY, as_env
from tests.service.test_restart import crawler_env

pytestmark = pytest.mark.slow


async def run_and_signal(
    env: dict[str, str], database_url: str, until: Callable[[], bool], sig: int
) -> None:
    """Start ``crawler run``; when ``until()`` is true (checked every 0.2 s), send ``sig``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "run", env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        for _ in range(1200):
            if proc.returncode is not None or await asyncio.to_thread(until):
                break
            await asyncio.sleep(0.2)
        assert proc.returncode is None, "crawler run ended early"
        proc.send_signal(sig)
        _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    expected = -signal.SIGKILL if sig == signal.SIGKILL else 0
    assert proc.returncode == expected, err.decode()[-2000:]


def facts(database_url: str) -> tuple[int, set[int], list[tuple[int, int, int]]]:
    """(committed slots, change-event ids, (event id, url id, slot) of each change event)."""
    with Store(database_url) as store, store.engine.connect() as conn:
        n_slots = len(conn.execute(select(slots.c.slot)).all())
        rows = conn.execute(
            select(events.c.id, events.c.url_id, events.c.slot).where(
                events.c.type == "page.changed"
            )
        ).all()
    return n_slots, {int(r[0]) for r in rows}, [(int(a), int(b), int(c)) for a, b, c in rows]


async def test_kill_9_between_commit_and_delivery_loses_no_event(
    database_url: str, receiver: Receiver
) -> None:
    site = ChangingSite(zipf_rates(12, 0.8, 0.7), tick_seconds=0.05, page_size=1_000, seed=8)
    await site.start()
    try:
        with Store(database_url) as store:
            store.add_urls([NewUrl(u) for u in site.urls()])
            store.outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))
        env = crawler_env(database_url, "bayes") | {
            "CRAWLER_DELIVERY_RETRY_SCHEDULE": "[0, 0.2, 0.5, 1, 1, 1, 1, 1, 1, 1]",
            "CRAWLER_DELIVERY_TIMEOUT_S": "30",
            "CRAWLER_DELIVERY_POLL_S": "0.1",
            # every change kept: each start prunes a URL's changes past the newest 100, and
            # on a loaded machine the three runs make more than that of the hottest page
            "CRAWLER_CHANGES_KEEP_PER_URL": "0",
            **as_env(UNTHROTTLED_DELIVERY),
        }
        # 1. the receiver hangs: every event is committed, none delivered, some in flight
        receiver.mode = "hang"
        await run_and_signal(
            env, database_url, lambda: facts(database_url)[0] >= 60 and receiver.attempts > 0,
            signal.SIGKILL,
        )  # fmt: skip
        slots_1, ids_1, _ = facts(database_url)
        assert ids_1 and not receiver.received
        # 2. it answers again; killed once more mid-delivery
        receiver.mode = "ok"
        await run_and_signal(
            env, database_url, lambda: len(receiver.received) >= len(ids_1) // 2, signal.SIGKILL
        )
        # 3. a clean run until everything committed before it has arrived, then SIGTERM
        # (once it has committed a slot of its own: everything may have arrived already,
        # and a SIGTERM before the service has started is no clean stop)
        slots_2, ids_2, _ = facts(database_url)
        await run_and_signal(
            env,
            database_url,
            lambda: facts(database_url)[0] > slots_2 and ids_2 <= set(_received_numbers(receiver)),
            signal.SIGTERM,
        )
        n_slots, ids, rows = facts(database_url)
        with Store(database_url) as store, store.engine.connect() as conn:
            delivered = {
                int(i)
                for (i,) in conn.execute(
                    select(deliveries.c.event_id).where(deliveries.c.status == "delivered")
                )
            }
            change_keys = {
                (int(u), int(s)) for u, s in conn.execute(select(changes.c.url_id, changes.c.slot))
            }
            slot_numbers = {int(s) for (s,) in conn.execute(select(slots.c.slot))}
    finally:
        await site.stop()
    assert n_slots > slots_1
    got = set(_received_numbers(receiver))
    assert ids_2 <= got  # every change committed before the last run arrived
    assert got <= ids  # and no event that was not committed
    # what the last run committed while stopping waits in the outbox for the next run
    assert delivered <= got and (ids - got).isdisjoint(delivered)
    assert all(r.verified for r in receiver.received)
    # duplicates only with the same id: the same id always carries the same change
    by_id: dict[str, set[tuple[object, object]]] = {}
    for r in receiver.received:
        data = r.body["data"]
        by_id.setdefault(r.msg_id, set()).add((data["url"], data["new_hash"]))
    assert all(len(v) == 1 for v in by_id.values())
    # one event per committed change, each of a committed slot
    assert len(rows) == len(change_keys) == len({(u, s) for _, u, s in rows})
    assert {(u, s) for _, u, s in rows} == change_keys
    assert {s for _, _, s in rows} <= slot_numbers


def _received_numbers(receiver: Receiver) -> list[int]:
    return [int(i.removeprefix("msg_")) for i in receiver.ids()]
