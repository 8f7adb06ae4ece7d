"""The operator's bounds and pause, from the store into the scheduler.

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
The failure record is ``_failures.py``'s; a retired URL is probed every
``retired_probe_interval_s`` seconds (``probe_rate``), and the back-off of a URL that keeps
failing without retiring stops at one poll every ``failure_max_interval_s`` seconds
(``failure_floor``): in seconds, not slots, so the wait for a page that answers again does
not grow with the slot's length.

Discovery asks for *floors* too (``set_floors``): with ``discovery_watch_starts`` each watched
start page gets a lower bound from its yield of new pages (``crawler.discovery._pacing``).
A floor is merged with the operator's bounds: the larger lower bound wins, never above an
upper bound the operator gave the URL itself (its minimum interval still holds); the default
minimum interval (``default_min_interval_s``, a politeness default for URLs nobody bounded)
gives way to a floor, so start pages are read as often as their yield asks. And *ceilings*
(``set_ceilings``): the URLs discovery put on the watch list get an upper bound each so that
together they take at most ``discovery_watched_share`` of the scheduler's polls
(``crawler.service._trap_caps``); the smaller upper bound wins, never below the operator's
own lower bound, and a floor at or above it drops to half of it (``FLOOR_OF_CEILING``: a
floor at the ceiling made the start pages added together fall due together, every few slots,
ahead of every other pick); a floor below its ceiling stays.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from crawler import schedulers
from crawler.service._failures import FailureKeeper
from crawler.settings import Settings
from crawler.store import FailureRow, PollRecord, Store, UrlRules

FloatArray = NDArray[np.float64]
#: what a discovery floor at or above its ceiling drops to, times the ceiling (see
#: ``Constraints._with_discovery``)
FLOOR_OF_CEILING = 0.5
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


def probe_rate(settings: Settings) -> float:
    """A retired URL's polls per slot: one every ``retired_probe_interval_s`` seconds (at
    most one a slot)."""
    return min(1.0, settings.slot_seconds / settings.retired_probe_interval_s)


def failure_floor(settings: Settings) -> float:
    """The failure back-off's floor in polls per slot: one poll every
    ``failure_max_interval_s`` seconds (at most one a slot)."""
    return min(1.0, settings.slot_seconds / settings.failure_max_interval_s)


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
        #: URLs with a minimum interval of their own (not the default), per ``_ids``
        self._own_min: BoolArray = np.empty(0, dtype=bool)
        #: discovery's floors: URL id -> polls per slot
        self._floors: dict[int, float] = {}
        #: the operator's upper bounds alone (before discovery's ceilings), per ``_ids``
        self._rule_upper: FloatArray = np.empty(0)
        #: discovery's ceilings: URL id -> polls per slot
        self._ceilings: dict[int, float] = {}
        #: the sites whose rules to read (a cluster worker's leased sites); None: all.
        #: A cluster worker's rules, failures and revivals are then read from its own
        #: sites' URLs, not from every URL of the watch list
        self.scope: Callable[[], Sequence[str]] | None = None

    async def refresh(self, scheduler: schedulers.Scheduler, store: Store, version: int) -> None:
        """Apply the store's rules (at start: everything, the failure record included; on a
        watch-list change: what changed, the record of new URLs, operator revivals)."""
        since = self._version
        site_list = None if self.scope is None else list(self.scope())
        rules, failing, revived = await asyncio.to_thread(_read, store, since, site_list)
        scheduler.set_probe(probe_rate(self.settings))
        scheduler.set_failure_floor(failure_floor(self.settings))
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

    def forget(self, ids: IdArray) -> None:
        """Some URLs were dropped from the scheduler and taken again (a cluster worker's
        site lost and regained, without a rebuild): what was applied to them is gone with
        them, so the next ``refresh`` gives them their bounds, pause and failure record
        again. (Compared with what was applied, by id, they would otherwise look unchanged
        and a paused URL taken again would be polled.)"""
        if self._ids.size and ids.size:
            keep = ~np.isin(self._ids, ids)
            self._ids, self._lower = self._ids[keep], self._lower[keep]
            self._upper, self._paused = self._upper[keep], self._paused[keep]
            self._own_min = self._own_min[keep]
            self._rule_lower, self._rule_upper = self._rule_lower[keep], self._rule_upper[keep]
        self.failures.forget(ids)

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
        rule_lower, rule_upper = lower.copy(), upper.copy()  # not aliased by ``_reapply``
        own_min = ~np.isnan(min_s)
        lower, upper = self._with_discovery(ids, lower, upper, own_min)
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
        self._rule_lower, self._rule_upper, self._own_min = rule_lower, rule_upper, own_min

    def set_floors(self, scheduler: schedulers.Scheduler, floors: dict[int, float]) -> int:
        """Discovery's lower bounds (URL id -> polls per slot; an id left out has none),
        merged with the operator's; how many URLs' bounds the scheduler was given again."""
        if floors == self._floors:
            return 0
        touched = _changed(self._floors, floors)
        self._floors = dict(floors)
        return self._reapply(scheduler, touched)

    def set_ceilings(self, scheduler: schedulers.Scheduler, ceilings: dict[int, float]) -> int:
        """Discovery's upper bounds (URL id -> polls per slot; an id left out has none),
        merged with the operator's; how many URLs' bounds the scheduler was given again."""
        if ceilings == self._ceilings:
            return 0
        touched = _changed(self._ceilings, ceilings)
        self._ceilings = dict(ceilings)
        return self._reapply(scheduler, touched)

    def _reapply(self, scheduler: schedulers.Scheduler, touched: set[int]) -> int:
        """Give the scheduler the merged bounds of the ``touched`` URLs that moved."""
        if not touched or not self._ids.size:
            return 0
        wanted = np.array(sorted(touched), dtype=np.int64)
        pos = np.searchsorted(self._ids, wanted)
        known = self._ids[np.minimum(pos, self._ids.size - 1)] == wanted
        pos = pos[(pos < self._ids.size) & known]
        if not pos.size:
            return 0
        ids = self._ids[pos]
        lower, upper = self._with_discovery(
            ids, self._rule_lower[pos], self._rule_upper[pos], self._own_min[pos]
        )
        moved = (lower != self._lower[pos]) | (upper != self._upper[pos])
        if moved.any():
            scheduler.set_bounds(ids[moved], lower=lower[moved], upper=upper[moved])
            self._lower[pos[moved]] = lower[moved]
            self._upper[pos[moved]] = upper[moved]
        return int(moved.sum())

    def _with_discovery(
        self, ids: IdArray, lower: FloatArray, upper: FloatArray, own_min: BoolArray
    ) -> tuple[FloatArray, FloatArray]:
        """The operator's (lower, upper) with discovery's floors (the larger lower, never past
        an upper bound the operator gave the URL itself: the default minimum interval, a
        politeness default for URLs nobody bounded, gives way to a floor) and ceilings (the
        smaller upper bound, never below the operator's lower)."""
        floors = _lookup(self._floors, ids, 0.0) if self._floors else None
        if floors is not None:
            upper = np.where(own_min, upper, np.maximum(upper, floors))
        if self._ceilings:
            ceiling = _lookup(self._ceilings, ids, 1.0)
            upper = np.maximum(np.minimum(upper, ceiling), lower)
            if floors is not None:
                # a floor at its ceiling is a deadline every 1/ceiling slots: URLs added
                # together fall due together and go ahead of every other pick (a burst that
                # takes the operator's URLs' polls); at half of it the scheduler's own picks
                # come first. A floor below its ceiling stays as it is.
                floors = np.where(floors >= ceiling, FLOOR_OF_CEILING * ceiling, floors)
        if floors is not None:
            lower = np.maximum(lower, np.minimum(floors, upper))
        return lower, upper

    @property
    def records(self) -> dict[int, FailureRow]:
        """The failure record of the failing URLs (their streaks), as of the last slot."""
        return self.failures.records

    def after_slot(
        self, scheduler: schedulers.Scheduler, polls: list[PollRecord]
    ) -> tuple[FailureRow, ...]:
        """Report the slot's failed polls to the scheduler; the records to commit."""
        return self.failures.after_slot(scheduler, polls)


def _changed(old: dict[int, float], new: dict[int, float]) -> set[int]:
    """The ids whose value differs between ``old`` and ``new`` (present in one only too)."""
    return (set(old) ^ set(new)) | {i for i, v in new.items() if old.get(i) != v}


def _lookup(values: dict[int, float], ids: IdArray, default: float) -> FloatArray:
    """``values[id]`` for each of ``ids`` (``default`` where absent)."""
    keys = np.fromiter(values, dtype=np.int64, count=len(values))
    vals = np.fromiter(values.values(), dtype=np.float64, count=len(values))
    order = np.argsort(keys)
    keys, vals = keys[order], vals[order]
    at = np.minimum(np.searchsorted(keys, ids), keys.size - 1)
    return np.where(keys[at] == ids, vals[at], default)


def _read(
    store: Store, since: int | None, site_list: Sequence[str] | None
) -> tuple[UrlRules, list[tuple[str, FailureRow]], IdArray]:
    revived = store.revived_since(since, site_list) if since is not None else np.empty(0, np.int64)
    return store.url_rules(site_list), store.url_failures(site_list), revived
