"""What a watch-list source hands the crawl loop, and how saved learning rows join it.

The loop owns its scheduler. A source of its watch list (the cluster's leases: a cluster
worker's ``ClusterMember``) never reaches into the loop: at a slot start it hands the loop
a ``WatchUpdate`` (the URLs to watch, and the saved learning rows of those it gained) and
the loop applies it, constraints included (``CrawlLoop.sync_watch_list``). Merging saved
rows rebuilds the scheduler (``merge_saved``): the loop then gives the new scheduler every
constraint its guard keeps (operator bounds, pauses, host groups and caps, the failure
back-off), not only those of the URLs just gained.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from crawler import schedulers
from crawler.schedulers import FloatArray, IdArray, SchedulerState

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
    """A source of the loop's watch list other than the whole store (the cluster)."""

    async def sync(
        self, scheduler: schedulers.Scheduler, version: object, *, force: bool = False
    ) -> WatchUpdate | None:
        """The update since ``version`` (None: nothing changed); ``scheduler`` is read, never
        changed."""
        ...


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
