"""Per-source caps that keep a trap from growing the discovered table and the watch list,
and the share of the scheduler's polls the URLs discovery watched may take.

A trap (fresh session ids canonicalization does not recognise, an endless calendar, a site
that makes up pages) hands discovery a new page on every poll. Canonicalization folds the
session ids it knows (``crawler.discovery._sessions``); these caps hold whatever it does not
know, without recognising the trap:

- **New pages per source** (:class:`NewPageCaps`): at most ``discovery_max_new_per_slot``
  a slot and ``discovery_max_new_per_day`` a UTC day (by the discovery clock; the day's
  count is read back from the database at start, so a restart does not reopen it). Past a
  cap the source's finds are counted (``crawler_discovery_capped_total``), logged once per
  source and day, and dropped: not recorded, not watched, not remembered as known. A source
  with no room left gets no leads queued or polled either, so its share of discovery's polls
  goes to the other sources.
- **Auto-watched pages per source** (``discovery_max_auto_watched`` live on the watch list,
  ``discovery_max_auto_watched_per_slot`` added a slot): applied where the pages are added
  (``DiscoveryStore.record_slot``), since the count lives in the database. Past it a page is
  recorded but not watched.
- **The operator's URLs keep their share** (:func:`watched_ceilings`): every URL discovery
  put on the watch list (its sources' start pages and auto-watched pages, all sources
  together) gets an upper bound in the scheduler's guard, their budget
  ``discovery_watched_share x capacity``: each paced page the operator marked as a source
  first gets room for its floor's deadline (``floor_room``; the start pages taken from their
  links do not: a trap's dozens would crowd the operator's URLs out), the rest is split by
  weight ``1 / their number + its floor`` (an even part each, more for the start pages whose
  yield earned them a floor), so together
  they never take more than that share of the scheduler's polls, however many there are
  and however often they change; the rest is the operator's URLs' (and whatever of the
  share discovery's URLs leave unused). When the
  operator's URLs are fewer than the rest of the capacity (each takes at most one poll a
  slot), discovery's URLs may have what they cannot use: ``max(share x C, C - operator's
  URLs)``, so a service that watches little besides start pages reads them as before. The
  same guard already holds the operator's bounds and the start pages' floors
  (``crawler.service._bounds``); a floor never lifts a URL above its ceiling.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

log = logging.getLogger("crawler.service")

DAY_S = 86_400.0


@dataclass(slots=True)
class _Count:
    day: int = -1
    today: int = 0
    this_slot: int = 0
    warned_day: int = -1


class NewPageCaps:
    """How many new pages each source may still record, per slot and per UTC day."""

    def __init__(self, per_slot: int, per_day: int) -> None:
        self.per_slot = per_slot
        self.per_day = per_day
        self._counts: dict[int, _Count] = {}  # one per source (forgotten when it goes)

    def load(self, today: Mapping[int, int], now: float) -> None:
        """The pages each source recorded earlier today (read from the database)."""
        day = _day(now)
        for sid, n in today.items():
            count = self._count(sid, now)
            if count.day == day:
                count.today = max(count.today, n)

    def new_slot(self) -> None:
        for count in self._counts.values():
            count.this_slot = 0

    def room(self, sid: int, now: float) -> int:
        """How many more new pages ``sid`` may record now."""
        count = self._count(sid, now)
        return max(0, min(self.per_slot - count.this_slot, self.per_day - count.today))

    def take(self, sid: int, now: float, source: str = "") -> str | None:
        """Count one new page of ``sid``: None if it may be recorded, else the cap it hit
        (``new_per_slot`` or ``new_per_day``; logged once per source and day)."""
        count = self._count(sid, now)
        if count.today >= self.per_day:
            if count.warned_day != count.day:
                count.warned_day = count.day
                log.warning(
                    "source %s recorded %d new pages today (discovery_max_new_per_day): its "
                    "further finds are dropped until tomorrow (a trap? check its pages)",
                    source or sid,
                    count.today,
                )
            return "new_per_day"
        if count.this_slot >= self.per_slot:
            return "new_per_slot"
        count.today += 1
        count.this_slot += 1
        return None

    def forget(self, sids: Iterable[int]) -> None:
        for sid in sids:
            self._counts.pop(sid, None)

    def _count(self, sid: int, now: float) -> _Count:
        count = self._counts.setdefault(sid, _Count())
        day = _day(now)
        if count.day != day:
            count.day, count.today = day, 0
        return count


def day_start(now: float) -> float:
    """The start of ``now``'s UTC day (POSIX seconds)."""
    return _day(now) * DAY_S


def _day(now: float) -> int:
    return math.floor(now / DAY_S)


def watched_ceilings(
    ids: Iterable[int],
    share: float,
    capacity: float,
    others: int,
    floors: Mapping[int, float] | None = None,
    marked: Collection[int] = (),
) -> dict[int, float]:
    """The upper bound (polls per slot) of each URL discovery put on the watch list, so that
    together they take at most ``share`` of ``capacity``, or more when the ``others`` (the
    operator's URLs, one poll a slot each at most) could not use the rest; {} when that
    bounds nothing. A paced page the operator marked as a source (``marked``; ``floors``: the
    start pages' lower bounds) is not bounded below its floor's deadline (see
    :func:`floor_room`) while their rooms fit in the budget (past it they are scaled down to
    it together); the budget left after them
    is split by weight ``1 / n + floor``: an even part for every URL, and more for the start
    pages that pay, so a few paying sections among many may still be read every slot."""
    ids = sorted(set(ids))
    if not ids or share >= 1.0:
        return {}
    budget = max(share * capacity, capacity - others)
    floors = floors or {}
    rooms = {i: floor_room(floors.get(i, 0.0)) for i in set(marked) & set(ids)}
    if (roomy := sum(rooms.values())) > budget:  # never past the budget: scaled down
        rooms = {i: r * budget / roomy for i, r in rooms.items()}
    rest = max(0.0, budget - sum(rooms.values()))
    weights = [1.0 / len(ids) + max(0.0, floors.get(i, 0.0)) for i in ids]
    total = sum(weights)
    ceilings = {
        i: min(1.0, max(rooms.get(i, 0.0), rest * w / total))
        for i, w in zip(ids, weights, strict=True)
    }
    if all(c >= 1.0 for c in ceilings.values()):
        return {}
    return ceilings


def floor_room(floor: float) -> float:
    """The least ceiling a start page with lower bound ``floor`` gets: a little above the
    rate of its deadline (a poll every ``T = floor(1 / floor)`` slots), so the guard's
    minimum gap (``ceil(1 / ceiling)``) is never longer than the deadline, and the floor
    stays below its ceiling (a floor at its ceiling is halved: ``crawler.service._bounds``).
    Split with the others by weight alone, 50 marked sections each paced every 3 slots
    among ~900 start pages taken from their links got ceilings of 0.32 a slot: a gap of 4
    slots, the floor halved to a deadline of 6, and 17% of the new pages found later than 5
    slots (benchmarks/discovery_service.py --marked sections)."""
    if floor <= 0:
        return 0.0
    deadline = max(1.0, math.floor(1.0 / floor + 1e-9))
    return min(1.0, ROOM / deadline)


#: a paced start page's least ceiling, times the rate of its deadline (``floor_room``)
ROOM = 1.02
