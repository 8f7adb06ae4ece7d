"""The crawl loop's hook for health events: the judge (``crawler.delivery``'s, pure) fed
with each slot's polls, the failure streaks before the slot and the learned rates.

The judge's state is read from the store at the first slot (``Store.health_state``), so a
restart neither repeats an alarm nor forgets a URL's last change. The learned rate is the
scheduler's own estimate (a scheduler with a ``rates()`` method: ``bayes``), in changes
per slot; other schedulers learn no rate and raise no ``page.stopped_changing``.

Not in cluster mode yet: a worker reads the judge's state once, at its start, and counts
silence in its own slots, so a site that moves to it from another worker would be judged
on a stale last change (a false alarm). ``page.stopped_changing`` is therefore raised only
by a single service; ``page.failing`` and ``page.recovered`` are raised in both (their
streaks are the failure record's, which each worker restores for the sites it gains).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence

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

    async def after_slot(
        self,
        scheduler: schedulers.Scheduler,
        polls: Sequence[PollRecord],
        failing: Mapping[int, FailureRow],
    ) -> tuple[HealthEvent, ...]:
        """The slot's health events (``failing``: the failure record before the slot)."""
        if not self._loaded:
            try:
                state = await asyncio.to_thread(self.store.health_state, PAGE_STOPPED_CHANGING)
            except StoreError as exc:  # the database is away: no events this slot, read later
                log.warning("health state not read (no health events this slot): %s", exc)
                return ()
            self.judge.restore(
                {u: UrlHealth(last, n, alarmed) for u, (last, n, alarmed) in state.items()}
            )
            self._loaded = True
        streaks = {uid: row.streak for uid, row in failing.items()}
        rates = None if self.settings.cluster else _rates(scheduler)  # see the docstring
        return self.judge.after_slot(scheduler.slot, polls, streaks, rates)


def _rates(scheduler: schedulers.Scheduler) -> Callable[[list[int]], dict[int, float]] | None:
    """The learned rates (changes per slot) of the URLs asked, from the scheduler's change
    probabilities per slot; None when the scheduler learns none."""
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
                out[uid] = -math.log1p(-p) if 0 < p < 1 else math.nan
        return out

    return per_slot
