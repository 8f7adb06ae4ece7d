"""The operator's bounds and pause, from the store into the scheduler (issue 21).

The scheduler's guard takes bounds in polls per slot; the operator gives intervals in
seconds. With slots of ``s`` seconds a minimum interval of ``t`` seconds is an upper bound
of ``s / t`` polls per slot, and a maximum interval of ``t`` a lower bound of ``s / t``
(both clipped to [0, 1]: an interval shorter than a slot bounds nothing). A URL without an
interval of its own gets the setting's default (``default_min_interval_s``,
``default_max_interval_s``; None: no bound); an interval stored as 0 means "none" whatever
the default. When a URL's own bound and a default contradict each other (its own minimum
interval longer than the default maximum, say), its own wins.

The guard is not part of the scheduler's saved state, so ``Constraints.refresh`` applies
everything at the service's start and again on every watch-list change (``crawler edit``,
``pause``, ``resume`` and ``revive`` bump the version); only the URLs whose bounds or pause
changed are passed to the scheduler (a scheduler given no constraint stays unconstrained).
The failure record is ``_failures.py``'s.

Discovery asks for *floors* too (``set_floors``): with ``discovery_watch_starts`` each watched
start page gets a lower bound from its yield of new pages (``crawler.discovery._pacing``).
A floor is merged with the operator's bounds: the larger lower bound wins, never above the
URL's upper bound (an operator's minimum interval still holds).
"""

from __future__ import annotations

import asyncio

import numpy as np
from numpy.typing import NDArray

from crawler import schedulers
from crawler.service._failures import FailureKeeper
from crawler.settings import Settings
from crawler.store import FailureRow, PollRecord, Store, UrlRules

FloatArray = NDArray[np.float64]
IdArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


def interval_bounds(
    slot_seconds: float,
    min_interval_s: FloatArray,
    max_interval_s: FloatArray,
    default_min_s: float | None = None,
    default_max_s: float | None = None,
) -> tuple[FloatArray, FloatArray]:
    """(lower, upper) polls per slot from intervals in seconds (NaN: the default; 0: none)."""
    own_min = ~np.isnan(min_interval_s)
    own_max = ~np.isnan(max_interval_s)
    t_min = np.where(own_min, min_interval_s, default_min_s or 0.0)
    t_max = np.where(own_max, max_interval_s, default_max_s or 0.0)
    with np.errstate(divide="ignore"):
        upper = np.where(t_min > 0, np.minimum(1.0, slot_seconds / t_min), 1.0)
        lower = np.where(t_max > 0, np.minimum(1.0, slot_seconds / t_max), 0.0)
    clash = lower > upper
    if clash.any():  # a URL's own bound beats a default; two of its own are checked on edit
        raise_upper = clash & own_max & ~own_min
        upper = np.where(raise_upper, lower, upper)
        lower = np.where(clash & ~raise_upper, upper, lower)
    return lower.astype(np.float64), upper.astype(np.float64)


class Constraints:
    """Keeps a scheduler's bounds, pause and failure record in step with the store."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.failures = FailureKeeper()
        self._ids: IdArray = np.empty(0, dtype=np.int64)
        self._lower: FloatArray = np.empty(0)
        self._upper: FloatArray = np.empty(0)
        self._paused: BoolArray = np.empty(0, dtype=bool)
        self._version: int | None = None  # the watch-list version last applied
        #: the operator's lower bounds alone (before discovery's floors), per ``_ids``
        self._rule_lower: FloatArray = np.empty(0)
        #: discovery's floors: URL id -> polls per slot
        self._floors: dict[int, float] = {}

    async def refresh(self, scheduler: schedulers.Scheduler, store: Store, version: int) -> None:
        """Apply the store's rules (at start: everything, the failure record included; on a
        watch-list change: what changed, the record of new URLs, operator revivals)."""
        since = self._version
        rules, failing, revived = await asyncio.to_thread(_read, store, since)
        self.apply(scheduler, rules)
        ids, _ = scheduler.frequencies()
        self.failures.restore(scheduler, ids, [row for _, row in failing])
        if revived.size:
            self.failures.revive(scheduler, revived)
        self._version = version

    def forget_applied(self) -> None:
        """The scheduler was replaced (a cluster worker merged the saved rows of the URLs
        it gained): nothing applied so far is in it; the next ``refresh`` applies every
        URL's bounds, pause and failure record again."""
        self._ids = np.empty(0, dtype=np.int64)
        self._lower, self._upper, self._rule_lower = np.empty(0), np.empty(0), np.empty(0)
        self._paused = np.empty(0, dtype=bool)
        self._version = None
        self.failures.forget_applied()

    def apply(self, scheduler: schedulers.Scheduler, rules: UrlRules) -> None:
        """Give the scheduler the bounds and pause of every watched URL that changed."""
        ids, _ = scheduler.frequencies()
        n = ids.size
        min_s, max_s = np.full(n, np.nan), np.full(n, np.nan)
        paused = np.zeros(n, dtype=bool)
        at = np.searchsorted(ids, rules.ids)
        ok = (at < n) & (ids[np.minimum(at, max(n - 1, 0))] == rules.ids) if n else at < 0
        min_s[at[ok]] = rules.min_interval_s[ok]
        max_s[at[ok]] = rules.max_interval_s[ok]
        paused[at[ok]] = rules.paused[ok]
        lower, upper = interval_bounds(
            self.settings.slot_seconds,
            min_s,
            max_s,
            self.settings.default_min_interval_s,
            self.settings.default_max_interval_s,
        )
        rule_lower = lower
        lower = self._with_floors(ids, lower, upper)
        # what the scheduler has now: the last applied values (new URLs: no constraint)
        was_lower, was_upper = np.zeros(n), np.ones(n)
        was_paused = np.zeros(n, dtype=bool)
        if self._ids.size and n:
            pos = np.searchsorted(self._ids, ids)
            pos_c = np.minimum(pos, self._ids.size - 1)
            known = self._ids[pos_c] == ids
            was_lower[known] = self._lower[pos_c[known]]
            was_upper[known] = self._upper[pos_c[known]]
            was_paused[known] = self._paused[pos_c[known]]
        moved = (lower != was_lower) | (upper != was_upper)
        if moved.any():
            scheduler.set_bounds(ids[moved], lower=lower[moved], upper=upper[moved])
        stop = paused & ~was_paused
        go = ~paused & was_paused
        if stop.any():
            scheduler.pause(ids[stop])
        if go.any():
            scheduler.resume(ids[go])
        self._ids, self._lower, self._upper, self._paused = ids, lower, upper, paused
        self._rule_lower = rule_lower

    def set_floors(self, scheduler: schedulers.Scheduler, floors: dict[int, float]) -> int:
        """Discovery's lower bounds (URL id -> polls per slot; an id left out has none),
        merged with the operator's; how many URLs' bounds the scheduler was given again."""
        if floors == self._floors:
            return 0
        touched = set(self._floors) ^ set(floors)
        touched |= {i for i, f in floors.items() if self._floors.get(i) != f}
        self._floors = dict(floors)
        if not touched or not self._ids.size:
            return 0
        wanted = np.array(sorted(touched), dtype=np.int64)
        pos = np.searchsorted(self._ids, wanted)
        known = self._ids[np.minimum(pos, self._ids.size - 1)] == wanted
        pos = pos[(pos < self._ids.size) & known]
        if not pos.size:
            return 0
        ids = self._ids[pos]
        lower = self._with_floors(ids, self._rule_lower[pos], self._upper[pos])
        moved = lower != self._lower[pos]
        if moved.any():
            scheduler.set_bounds(ids[moved], lower=lower[moved], upper=self._upper[pos][moved])
            self._lower[pos[moved]] = lower[moved]
        return int(moved.sum())

    def _with_floors(self, ids: IdArray, lower: FloatArray, upper: FloatArray) -> FloatArray:
        """``lower`` raised to discovery's floors where they are higher (never past ``upper``)."""
        if not self._floors:
            return lower
        keys = np.fromiter(self._floors, dtype=np.int64, count=len(self._floors))
        values = np.fromiter(self._floors.values(), dtype=np.float64, count=len(self._floors))
        order = np.argsort(keys)
        keys, values = keys[order], values[order]
        at = np.minimum(np.searchsorted(keys, ids), keys.size - 1)
        floors = np.where(keys[at] == ids, values[at], 0.0)
        return np.maximum(lower, np.minimum(floors, upper))

    def after_slot(
        self, scheduler: schedulers.Scheduler, polls: list[PollRecord]
    ) -> tuple[FailureRow, ...]:
        """Report the slot's failed polls to the scheduler; the records to commit."""
        return self.failures.after_slot(scheduler, polls)


def _read(
    store: Store, since: int | None
) -> tuple[UrlRules, list[tuple[str, FailureRow]], IdArray]:
    revived = store.revived_since(since) if since is not None else np.empty(0, np.int64)
    return store.url_rules(), store.url_failures(), revived
