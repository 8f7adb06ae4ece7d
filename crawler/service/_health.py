"""The crawl loop's hook for health events: the judge (``crawler.delivery``'s, pure) fed
with each slot's polls, the failure streaks before the slot and the learned rates.

The judge's state is read from the store at the first slot (``Store.health_state``), so a
restart neither repeats an alarm nor forgets a URL's last change. The learned rate is the
scheduler's own estimate (a scheduler with a ``rates()`` method: ``bayes``), in changes
per slot; other schedulers learn no rate and raise no ``page.stopped_changing``.

In a cluster each worker numbers its own slots, so silence is counted on a clock every
worker shares: the **global slot clock**, wall time over ``slot_seconds``. The state is
read by time (``Store.health_state_at``: the newest change's ``detected_at``, the alarm
flag by ``created_at``), at start and again for the URLs of each site the worker gains
(``stale``, called by the loop when its watch list changes), so a worker that gains a
site continues the site's tests where its last holder left them. The learned rate, in
changes per slot of this worker, is converted to changes per global slot with this
worker's measured seconds per slot (at least ``slot_seconds``: a slot that overruns makes
the rate per global slot smaller, never larger, which keeps the false-alarm bound).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from crawler import schedulers
from crawler.delivery import PAGE_STOPPED_CHANGING, HealthJudge, HealthPolicy, UrlHealth
from crawler.settings import Settings
from crawler.store import FailureRow, HealthEvent, PollRecord, Store, StoreError

log = logging.getLogger("crawler.service")


class HealthWatch:
    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.judge = HealthJudge(
            HealthPolicy(
                settings.health_failing_after,
                settings.health_stopped_alpha,
                settings.health_stopped_min_changes,
            )
        )
        self._loaded = False
        #: URLs whose state is to be read again before they are judged (sites gained)
        self._stale: set[int] = set()
        #: (monotonic time, slots judged) at the first slot: this worker's seconds per slot
        self._started: tuple[float, int] | None = None

    def stale(self, url_ids: Iterable[int]) -> None:
        """The loop gained these URLs (a cluster's sites): read their state again."""
        if self.settings.cluster:
            self._stale.update(int(u) for u in url_ids)

    async def after_slot(
        self,
        scheduler: schedulers.Scheduler,
        polls: Sequence[PollRecord],
        failing: Mapping[int, FailureRow],
    ) -> tuple[HealthEvent, ...]:
        """The slot's health events (``failing``: the failure record before the slot)."""
        if not await self._load():
            return ()
        streaks = {uid: row.streak for uid, row in failing.items()}
        if not self.settings.cluster:
            return self.judge.after_slot(scheduler.slot, polls, streaks, _rates(scheduler))
        per_slot = self._seconds_per_slot()
        rates = _rates(scheduler, self.settings.slot_seconds / per_slot)
        return self.judge.after_slot(self._clock(time.time()), polls, streaks, rates)

    async def _load(self) -> bool:
        """Read the judge's state (all at the first slot; then the stale URLs')."""
        if self._loaded and not self._stale:
            return True
        wanted = None if not self._loaded else sorted(self._stale)
        try:
            found = await asyncio.to_thread(self._read, wanted)
        except StoreError as exc:  # the database is away: no events this slot, read later
            log.warning("health state not read (no health events this slot): %s", exc)
            return False
        if wanted is None:
            self.judge.restore(found)
            self._loaded = True
            self._stale.clear()  # read with the rest
        else:
            self.judge.refresh(wanted, found)
            self._stale.difference_update(wanted)
        return True

    def _read(self, wanted: list[int] | None) -> dict[int, UrlHealth]:
        """The stored state of ``wanted`` (None: every URL), on this worker's clock."""
        if not self.settings.cluster:
            return {
                uid: UrlHealth(last, n, alarmed)
                for uid, (last, n, alarmed) in self.store.health_state(
                    PAGE_STOPPED_CHANGING, wanted
                ).items()
            }
        # a change is judged on the clock when its slot commits, after its poll: a slot on
        return {  # the clock later than its detected_at (a shorter silence: conservative)
            uid: UrlHealth(self._clock(at.timestamp()) + 1, n, alarmed)
            for uid, (at, n, alarmed) in self.store.health_state_at(
                PAGE_STOPPED_CHANGING, wanted
            ).items()
        }

    def _clock(self, wall: float) -> float:
        """The cluster's global slot clock at wall time ``wall``."""
        return wall / self.settings.slot_seconds

    def _seconds_per_slot(self) -> float:
        """This worker's mean seconds per slot since its first (at least slot_seconds)."""
        now = time.monotonic()
        if self._started is None:
            self._started = (now, 0)
        began, _ = self._started
        slots = self._started[1] + 1
        self._started = (began, slots)
        measured = (now - began) / max(1, slots - 1) if slots > 1 else 0.0
        return max(self.settings.slot_seconds, measured)


def _rates(
    scheduler: schedulers.Scheduler, scale: float = 1.0
) -> Callable[[list[int]], dict[int, float]] | None:
    """The learned rates (changes per slot, times ``scale``) of the URLs asked, from the
    scheduler's change probabilities per slot; None when the scheduler learns none."""
    rates = getattr(scheduler, "rates", None)
    if rates is None:
        return None

    def per_slot(ids: list[int]) -> dict[int, float]:
        all_ids, prob = rates()
        order = np.argsort(all_ids)
        at = np.searchsorted(all_ids, np.asarray(ids, dtype=np.int64), sorter=order)
        out: dict[int, float] = {}
        for uid, i in zip(ids, at.tolist(), strict=True):
            if i < all_ids.size and int(all_ids[order[i]]) == uid:
                p = float(prob[order[i]])
                out[uid] = -math.log1p(-p) * scale if 0 < p < 1 else math.nan
        return out

    return per_slot
