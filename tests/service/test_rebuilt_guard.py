"""A scheduler rebuilt while the loop runs (a cluster worker merging the saved rows of a
site it gained), or URLs dropped from it and taken again (a site lost and regained), keep
their bounded URLs' last selections and their pauses.

The guard that enforces a minimum interval is not part of a scheduler's state. A rebuilt
scheduler's guard counted a bounded URL's gap from the last poll the scheduler had learned
from; a URL selected since without feedback (a first poll, whose outcome is a baseline; a
failure; a poll still in flight) was then allowed again at once. A URL dropped and taken
again without a rebuild lost its bound and its pause: the loop's constraints, compared by
id with what they had applied, saw nothing to apply again.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from crawler import schedulers
from crawler.metrics import CrawlerMetrics
from crawler.schedulers import FloatArray, IdArray, SchedulerState
from crawler.service._loop import CrawlLoop
from crawler.service._watch import WatchUpdate
from crawler.store import Fence, NewUrl, Store
from tests.service.conftest import service_settings

SLOT = 1.0
BOUND_SLOTS = 8
#: the loop polls nothing here: the slots are the scheduler's own
NO_POLLER: Any = object()


class Handing:
    """A watch-list source that hands the loop an update once: the store's URLs, with the
    saved rows of those the loop's scheduler does not watch yet (a site gained)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.update: WatchUpdate | None = None

    def saved_state(self, name: str) -> SchedulerState | None:
        return None

    def watch_list(self) -> tuple[object, IdArray, FloatArray]:
        return (self.store.watch_list_version(), *self.store.active_urls())

    async def sync(
        self, scheduler: schedulers.Scheduler, version: object, *, force: bool = False
    ) -> WatchUpdate | None:
        update, self.update = self.update, None
        return update

    def list_version(self, version: object) -> int:
        assert isinstance(version, int)
        return version

    def fence(self, slot: int) -> Fence | None:
        return None

    def committed(self, slot: int, fenced: int = 0) -> None:
        pass


def _loop(store: Store, database_url: str) -> tuple[CrawlLoop, Handing]:
    settings = service_settings(database_url, slot_seconds=SLOT, capacity=10.0)
    metrics = CrawlerMetrics(CollectorRegistry())
    loop = CrawlLoop(settings, store, poller=NO_POLLER, metrics=metrics)
    source = Handing(store)
    loop.source = source
    return loop, source


def _saved_rows(url_id: int) -> SchedulerState:
    """The saved learning rows of one URL another worker polled."""
    donor = schedulers.create("bayes", capacity=1.0, seed=3)
    donor.add(np.array([url_id]))
    donor.select()
    donor.feedback(np.array([url_id]), np.array([True]))
    return donor.state()


def _slots_until_selected(scheduler: schedulers.Scheduler, url_id: int, most: int) -> int | None:
    """Slots run until ``url_id`` is selected (None: not within ``most``); every other
    pick learns (a hit)."""
    for k in range(1, most + 1):
        chosen = scheduler.select()
        if url_id in chosen.tolist():
            return k
        scheduler.feedback(chosen, np.ones(chosen.size, dtype=bool))
    return None


async def _rebuilt_after_a_first_poll(
    store: Store, database_url: str, *, replaced: bool
) -> tuple[CrawlLoop, int]:
    store.add_urls([NewUrl(f"http://a.test/p{i}") for i in range(4)])
    ids = [i for i, _ in store.select_urls([f"http://a.test/p{i}" for i in range(4)])]
    bounded = ids[0]
    store.edit_urls([bounded], {"min_interval_s": BOUND_SLOTS * SLOT})
    loop, source = _loop(store, database_url)
    await loop.load()
    scheduler = loop.scheduler
    assert scheduler is not None
    chosen = scheduler.select()  # capacity 10, 4 URLs: every URL the guard allows
    assert bounded in chosen.tolist()
    # the bounded URL's poll is a first poll (a baseline): no feedback; the others learn
    others = chosen[chosen != bounded]
    scheduler.feedback(others, np.ones(others.size, dtype=bool))
    # a site gained, with the rows another worker saved: the scheduler is rebuilt
    store.add_urls([NewUrl("http://b.test/q")])
    ((gained, _),) = store.select_urls(["http://b.test/q"])
    now, importance = store.active_urls()
    # replaced: the bounded URL's site was lost and regained: it is dropped and taken again
    # (no saved row of it: its only poll gave no feedback, so it restarts); the scheduler
    # is not rebuilt (the URL gained has no saved rows either)
    saved = None if replaced else _saved_rows(gained)
    source.update = WatchUpdate(
        store.watch_list_version(),
        now,
        importance,
        saved,
        np.array([bounded], dtype=np.int64) if replaced else None,
    )
    assert await loop.sync_watch_list()
    assert (loop.scheduler is scheduler) == replaced
    return loop, bounded


@pytest.mark.parametrize(
    "replaced",
    [
        pytest.param(False, id="scheduler-rebuilt"),  # the saved rows of a site gained merged
        pytest.param(True, id="url-dropped-and-taken-again"),  # a site lost and regained
    ],
)
async def test_a_bounded_urls_last_selection_is_kept(
    store: Store, database_url: str, replaced: bool
) -> None:
    loop, bounded = await _rebuilt_after_a_first_poll(store, database_url, replaced=replaced)
    assert loop.scheduler is not None
    # selected in slot 1; its bound allows it again from slot 1 + 8 on, not before
    waited = _slots_until_selected(loop.scheduler, bounded, 3 * BOUND_SLOTS)
    what = "it was taken again" if replaced else "the rebuild"
    assert waited is not None and waited >= BOUND_SLOTS, (
        f"the bounded URL was selected again {waited} slot(s) after {what}, its first "
        f"poll one slot before: within its {BOUND_SLOTS}-slot bound"
    )


async def test_a_paused_url_dropped_and_taken_again_stays_paused(
    store: Store, database_url: str
) -> None:
    """Its site lost and regained with no saved rows to merge (the scheduler is not
    rebuilt): the URL is removed and added again, and its pause with it."""
    store.add_urls([NewUrl(f"http://a.test/p{i}") for i in range(4)])
    ids = [i for i, _ in store.select_urls([f"http://a.test/p{i}" for i in range(4)])]
    paused = ids[1]
    store.edit_urls([paused], {"paused": True})
    loop, source = _loop(store, database_url)
    await loop.load()
    scheduler = loop.scheduler
    assert scheduler is not None
    now, importance = store.active_urls()
    replaced = np.array([paused], dtype=np.int64)
    source.update = WatchUpdate(store.watch_list_version(), now, importance, None, replaced)
    assert await loop.sync_watch_list()
    assert loop.scheduler is scheduler
    assert _slots_until_selected(scheduler, paused, 3 * BOUND_SLOTS) is None, (
        "a paused URL taken again was polled"
    )
