"""The service delivers one signed event per true change of a live site, in order per
URL, on SQLite and PostgreSQL; pages that change only their nonces give none."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from itertools import pairwise
from typing import Any

import numpy as np
import pytest
from sqlalchemy import select

from crawler.delivery import message_id
from crawler.service import CrawlService
from crawler.store import DestinationSpec, NewUrl, Store, decompress_diff
from crawler.store.models import changes, deliveries
from crawler.testsite import ChangingSite, zipf_rates
from tests.delivery.conftest import Receiver
from tests.detect.test_diff import apply_unified_diff
from tests.service.conftest import service_settings


async def wait_delivered(database_url: str, timeout: float = 30.0) -> None:
    """Until no delivery is pending (and every event is fanned out)."""
    with Store(database_url) as store:
        outbox = store.outbox
        for _ in range(int(timeout / 0.1)):
            depth, _ = await asyncio.to_thread(outbox.backlog)
            if depth == 0:
                return
            await asyncio.sleep(0.1)
    raise AssertionError(f"still {depth} deliveries pending after {timeout} s")


@pytest.mark.slow
async def test_one_signed_event_per_true_change(database_url: str, receiver: Receiver) -> None:
    narrow = Receiver()
    await narrow.start()
    # 20 changing pages and 5 whose only difference between polls is the nonce
    rates = np.concatenate([zipf_rates(20, 0.6, 1.0), np.zeros(5)])
    site = ChangingSite(rates, tick_seconds=0.05, page_size=2_000, seed=5)
    await site.start()
    try:
        with Store(database_url) as store:
            ids = dict(store.add_urls([NewUrl(u) for u in site.urls()]).added)
            outbox = store.outbox
            outbox.add_destination(DestinationSpec(receiver.url, receiver.secret))
            # a second destination wants only pages 1 to 3, by an RE2 pattern on the URL
            outbox.add_destination(
                DestinationSpec(narrow.url, narrow.secret, url_pattern=r"/page/[1-3]$")
            )
        settings = service_settings(
            database_url, delivery=True, delivery_retry_schedule=[0, 0.2, 0.5]
        )
        async with CrawlService(settings) as service:
            await service.run(asyncio.Event(), 150)
            await wait_delivered(database_url)
            await asyncio.sleep(2.5)  # the outbox's gauges are refreshed every 2 s
            metrics = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for m in service.registry.collect()
                for s in m.samples
            }
        with Store(database_url) as store, store.engine.connect() as conn:
            n_changes = conn.execute(select(changes.c.id)).all()
            stored = {
                (int(u), int(sl)): decompress_diff(d)
                for u, sl, d in conn.execute(
                    select(changes.c.url_id, changes.c.slot, changes.c.diff)
                )
            }
            states = {s for (s,) in conn.execute(select(deliveries.c.status))}
    finally:
        await site.stop()
        await narrow.stop()
    changed = [r for r in receiver.received if r.body["type"] == "page.changed"]
    wanted = {site.url(k) for k in (1, 2, 3)}
    assert {r.msg_id for r in narrow.received} == {
        r.msg_id for r in changed if r.body["data"]["url"] in wanted
    }
    assert narrow.received and all(r.verified for r in narrow.received)
    assert metrics[("crawler_delivery_events_written_total", ())] == len(changed)
    labels = (("destination", "1"), ("outcome", "delivered"))
    delivered = ("crawler_delivery_attempts_total", labels)
    assert metrics[delivered] == len(changed)
    assert metrics[("crawler_delivery_outbox_depth", ())] == 0
    assert metrics[("crawler_delivery_oldest_pending_age_seconds", ())] == 0
    assert site.truth.true_changes_seen > 20
    assert len(changed) == len(n_changes) == site.truth.true_changes_seen
    assert len(set(receiver.ids())) == len(changed)  # one event per change, each its own id
    assert all(r.verified for r in receiver.received)
    assert states == {"delivered"}
    quiet = {site.url(k) for k in range(21, 26)}
    assert not [r for r in changed if r.body["data"]["url"] in quiet]
    # in order per URL: a URL's event ids grow, and its hashes chain old -> new
    by_url: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in changed:
        by_url[str(r.body["data"]["url"])].append(r.body["data"])
    for url, datas in by_url.items():
        numbers = [int(str(d["event_id"]).removeprefix("msg_")) for d in datas]
        assert numbers == sorted(numbers), url
        for earlier, later in pairwise(datas):
            assert later["old_hash"] == earlier["new_hash"], url
        assert url in {site.url(k) for k in range(1, 21)} and ids[url]
    # a diff for every change after a URL's first, and it turns the old text into the new
    some = [d for datas in by_url.values() for d in datas[1:]]
    # each made once, for its first send, and stored with the change: what the feed reads
    made = [v for v in stored.values() if v is not None]
    assert len(made) >= len(some) and {d["diff"] for d in some} <= set(made)
    assert some and all(d["diff"] for d in some)
    assert all(d["diff_truncated"] is False for d in some)
    assert all(d["change_rate"] is None or d["change_rate"] > 0 for d in some)
    assert any(d["expected_interval_s"] for d in some)
    # each diff turns the text before the change (the URL's previous snapshot) into the new
    with Store(database_url) as store:
        outbox = store.outbox
        for url, datas in by_url.items():
            for d in datas[1:]:
                before, after = outbox.change_texts(
                    ids[url], None, str(d["old_hash"]), str(d["new_hash"])
                )
                assert before is not None and after is not None
                assert apply_unified_diff(before, str(d["diff"])) == after
    assert message_id(1) == "msg_1"
