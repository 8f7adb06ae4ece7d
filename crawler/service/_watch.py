"""What a watch-list source hands the crawl loop, and how saved learning rows join it.

The loop owns its scheduler. A source of its watch list (the whole store: ``StoreWatch``;
the cluster's leases: a cluster worker's ``ClusterMember``) never reaches into the loop,
and the loop never asks which it has: at start-up the source gives the saved state and the
watch list; at a slot start it hands the loop
a ``WatchUpdate`` (the URLs to watch, and the saved learning rows of those it gained) and
the loop applies it, constraints included (``CrawlLoop.sync_watch_list``). Merging saved
rows rebuilds the scheduler (``merge_saved``): the loop then gives the new scheduler every
constraint its guard keeps (operator bounds, pauses, host groups and caps, the failure
back-off), not only those of the URLs just gained.
"""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from crawler import schedulers
from crawler.schedulers import FloatArray, IdArray, SchedulerState
from crawler.store import Fence, Store

URL_PREFIX = "url_"


@dataclass(frozen=True)
class WatchUpdate:
    """The watch list as a source has it now: ``version`` (the loop's last seen), the URLs
    to watch with their importances, and the saved learning rows of URLs the loop's
    scheduler does not watch yet, or of those it is to drop and take again (``replaced``)
    (None: none to restore)."""

    version: object
    ids: IdArray
    importance: FloatArray
    saved: SchedulerState | None = None
    #: watched URLs whose learning is to be replaced by ``saved`` (or restarted): their
    #: site was lost and regained since the last update, and learned elsewhere meanwhile
    replaced: IdArray | None = None


class WatchFollower(Protocol):
    """What follows a watch-list source (the crawl loop)."""

    async def sync_watch_list(self, *, force: bool = False) -> bool:
        """Take the source's update now; True if the watch list changed."""
        ...


class WatchSource(Protocol):
    """A source of the loop's watch list, and the fence its commits are made under."""

    def saved_state(self, name: str) -> SchedulerState | None:
        """The saved state of scheduler ``name`` to start from (None: none); blocking."""
        ...

    def watch_list(self) -> tuple[object, IdArray, FloatArray]:
        """(version, ids, importances) at start-up, the version read first; blocking."""
        ...

    async def sync(
        self, scheduler: schedulers.Scheduler, version: object, *, force: bool = False
    ) -> WatchUpdate | None:
        """The update since ``version`` (None: nothing changed); ``scheduler`` is read, never
        changed."""
        ...

    def list_version(self, version: object) -> int:
        """The watch-list edit counter within ``version`` (one this source gave): what
        the operator's rules are read since."""
        ...

    def fence(self, slot: int) -> Fence | None:
        """What the commit of scheduler slot ``slot`` is fenced by (None: nothing)."""
        ...

    def committed(self, slot: int, fenced: int = 0) -> None:
        """Scheduler slot ``slot`` was committed, ``fenced`` of its polls dropped."""
        ...


class StoreWatch:
    """A single service's watch list: every active URL of the store, followed by its
    version (an operator's edit, a page discovery added, bumps it)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def saved_state(self, name: str) -> SchedulerState | None:
        return self.store.load_scheduler_state(name)

    def watch_list(self) -> tuple[object, IdArray, FloatArray]:
        version = self.store.watch_list_version()  # first: an edit during the read is seen
        return (version, *self.store.active_urls())

    async def sync(
        self, scheduler: schedulers.Scheduler, version: object, *, force: bool = False
    ) -> WatchUpdate | None:
        now = await asyncio.to_thread(self.store.watch_list_version)
        if not force and now == version:
            return None
        ids, importance = await asyncio.to_thread(self.store.active_urls)
        return WatchUpdate(now, ids, importance)

    def list_version(self, version: object) -> int:
        assert isinstance(version, int)  # the store's watch-list version
        return version

    def fence(self, slot: int) -> Fence | None:
        return None

    def committed(self, slot: int, fenced: int = 0) -> None:
        pass


def merge_saved(
    scheduler: schedulers.Scheduler, saved: SchedulerState, seed: int | None = None
) -> schedulers.Scheduler | None:
    """``scheduler`` with the saved rows of URLs it does not watch yet added, learning
    and all (rebuilt through ``state()``/``restore``: the schedulers stay as they are).
    The new rows get fresh stride phases; derived caches are rebuilt by the scheduler.
    None when the saved rows lack a field the scheduler keeps (another release): then the
    caller adds those URLs afresh."""
    current = scheduler.state()
    fresh = ~np.isin(saved.ids, current.ids)
    if not fresh.any():
        return scheduler
    fields = [k.removeprefix(URL_PREFIX) for k in scheduler.persistent_fields()]
    if any(f not in saved.rows for f in fields):
        return None
    count = int(fresh.sum())
    rows: dict[str, np.ndarray] = {}
    for f in fields:
        mine = np.asarray(current.rows[f])
        rows[f] = np.concatenate([mine, np.asarray(saved.rows[f])[fresh].astype(mine.dtype)])
    if "credit" in current.rows:
        credit = np.asarray(current.rows["credit"])
        phase = np.random.default_rng(seed).random(count).astype(credit.dtype)
        rows["credit"] = np.concatenate([credit, phase])
    ids = np.concatenate([np.asarray(current.ids, np.int64), saved.ids[fresh]])
    order = np.argsort(ids, kind="stable")
    merged = dataclasses.replace(
        current, ids=ids[order], rows={k: v[order] for k, v in rows.items()}
    )
    return schedulers.restore(merged)
