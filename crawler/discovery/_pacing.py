"""How often the re-polling scheduler must read a watched start page: paced by its yield.

With ``discovery_watch_starts`` the section pages (a source's start pages) are watched URLs:
the re-polling scheduler reads them, and discovery polls only the new links a changed one
lists. The scheduler's objective is changes caught per poll, which is indifferent to *when*
a change is seen; a section's change, though, is a new page waiting to be found, and it is
worth most when found soon. Left to itself, with 40 re-polls a slot over 5,000 watched pages,
the scheduler read each section page about once in 150 slots (docs/discovery.md), so it never
learned which sections pay. ``StartPacer`` closes that gap with the guard the scheduler
already has for operators: a *maximum interval* per start page (a lower bound on its polls per
slot), set from what the page yields.

- Each start page's yield (new pages found through its links, per slot) has a Gamma posterior:
  ``prior_found`` pages over ``prior_slots`` slots (0.2 over 2, the start-page bandit's prior
  in ``_seeds.py``), plus what was found over the slots it was watched, both discounted by
  ``forget`` per slot (a memory of about 1 / (1 - forget) slots) so a section that stops paying
  is read less again.
- A page the operator marked as a source has a prior of the same mean held more firmly,
  ``marked_prior_slots`` slots' worth (10): the operator said it lists new links, and a
  section that gains a new page every 30 slots shows none in 20 slots half the time. With the
  weak prior, such a section was read every 6 slots after 20 slots without a find, and with 50
  sections marked 19% of the new pages were found later than 5 slots
  (benchmarks/discovery_service.py --marked sections, seed 1); with the firm one a marked
  page that never pays is still read every 3 slots for about its first 40 slots, then less.
- A page expected to yield at least ``min_yield`` new pages per slot is read every
  ``target_slots`` slots (the time a new page may wait to be found, less the slot discovery
  takes to poll it). Below that its interval grows as its yield falls,
  ``target_slots x min_yield / yield``, up to ``max_interval_slots``: a page that never pays
  is read at about linearly growing intervals, so it is still seen if it starts to.
- The intervals are whole slots (the scheduler's guard reads a lower bound of 1/T as "a poll
  at least every T slots"), and past 8 slots they are rounded down to a quarter-octave grid
  (a factor of 2^(1/4)), so the bounds the scheduler is given move only when the yield
  does, not at every slot.
- ``floors(cap)`` gives the polls per slot (1 / interval), scaled down together when they
  would take more than ``cap`` polls per slot of the scheduler's capacity. The pages the
  operator marked as sources (``add(..., marked=True)``) come first: their floors are taken
  whole (scaled down only among themselves past ``cap``), and the start pages taken from their
  links share what is left. Scaled all together, a site whose 50 section indexes are each a
  source dilutes the 50 sections among the ~2,500 old articles they link to (each then read
  about once in 125 slots, whatever it yields); the marked pages are the level the operator
  said lists new links, and their own yield still sets how often they are read.

Pure: no I/O, no clock; the caller says which slot it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the interval grid: quarter octaves
_GRID = 2.0**0.25


@dataclass
class _Start:
    found: float  # discounted new pages found through it
    exposure: float  # discounted slots watched
    seen_at: int  # the slot its figures were last brought up to date
    weight: float = 1.0  # its prior's weight, times the pacer's (more for a marked page)


class StartPacer:
    """Maximum read intervals for watched start pages, from their yield of new pages."""

    def __init__(
        self,
        *,
        target_slots: int = 3,
        min_yield: float = 0.02,
        max_interval_slots: float = 100.0,
        prior_found: float = 0.2,
        prior_slots: float = 2.0,
        forget: float = 0.995,
        marked_prior_slots: float = 10.0,
    ) -> None:
        if target_slots < 1:
            raise ValueError("target_slots must be at least 1 slot")
        if max_interval_slots < target_slots:
            raise ValueError("max_interval_slots must be at least target_slots")
        if min_yield <= 0 or prior_found <= 0 or prior_slots <= 0:
            raise ValueError("min_yield and the prior must be positive")
        if not 0 < forget <= 1:
            raise ValueError("forget must be in (0, 1]")
        if marked_prior_slots < prior_slots:
            raise ValueError("marked_prior_slots must be at least prior_slots")
        self.marked_weight = marked_prior_slots / prior_slots
        self.target_slots = target_slots
        self.min_yield = min_yield
        self.max_interval_slots = max_interval_slots
        self.prior_found = prior_found
        self.prior_slots = prior_slots
        self.forget = forget
        self._starts: dict[str, _Start] = {}
        self._marked: set[str] = set()  # pages the operator marked as sources

    def __len__(self) -> int:
        return len(self._starts)

    def __contains__(self, url: object) -> bool:
        return url in self._starts

    def add(self, url: str, slot: int, *, marked: bool = False) -> None:
        """Start pacing ``url`` (watched from ``slot`` on); a page already paced is kept.
        ``marked``: the operator marked it as a source (its floor comes first)."""
        start = self._starts.setdefault(url, _Start(0.0, 0.0, slot))
        if marked:
            self._marked.add(url)
            start.weight = self.marked_weight

    @property
    def marked(self) -> frozenset[str]:
        """The pages paced as marked by the operator."""
        return frozenset(self._marked)

    def remove(self, url: str) -> None:
        self._starts.pop(url, None)
        self._marked.discard(url)

    def credit(self, url: str, slot: int, found: float = 1.0) -> None:
        """``found`` new pages were found through ``url``'s links in ``slot``."""
        start = self._starts.get(url)
        if start is None:
            return
        self._age(start, slot)
        start.found += found

    def yield_of(self, url: str, slot: int) -> float:
        """The posterior mean of ``url``'s new pages per slot."""
        start = self._starts[url]
        self._age(start, slot)
        prior_found, prior_slots = self.prior_found * start.weight, self.prior_slots * start.weight
        return (prior_found + start.found) / (prior_slots + start.exposure)

    def interval(self, url: str, slot: int) -> float:
        """The longest ``url`` should go unread, in whole slots (see the module docstring)."""
        raw = self.target_slots * self.min_yield / self.yield_of(url, slot)
        return self._snap(min(self.max_interval_slots, max(self.target_slots, raw)))

    def floors(self, slot: int, cap: float = math.inf) -> dict[str, float]:
        """Each start page's lower bound in polls per slot (1 / interval): the marked pages'
        first, scaled down together when their sum would pass ``cap``; the others' scaled
        down together into what is left of ``cap``."""
        marked = {u: 1.0 / self.interval(u, slot) for u in self._starts if u in self._marked}
        others = {u: 1.0 / self.interval(u, slot) for u in self._starts if u not in self._marked}
        if cap <= 0:  # no capacity to share: the floors as they are
            return marked | others
        marked = _within(marked, cap)
        return marked | _within(others, max(0.0, cap - sum(marked.values())))

    def state(self, slot: int) -> dict[str, list[float]]:
        """What was learned, for a restart: url -> [found, exposure]."""
        out: dict[str, list[float]] = {}
        for url, start in self._starts.items():
            self._age(start, slot)
            out[url] = [round(start.found, 4), round(start.exposure, 2)]
        return out

    def restore(self, saved: dict[str, object], slot: int) -> None:
        """Take back ``state()``'s figures for the pages paced now (bad entries ignored)."""
        for url, figures in saved.items():
            start = self._starts.get(url)
            if start is None or not isinstance(figures, list) or len(figures) != 2:
                continue
            found, exposure = figures
            numbers = isinstance(found, int | float) and isinstance(exposure, int | float)
            if numbers and found >= 0 and exposure >= 0:
                start.found, start.exposure, start.seen_at = float(found), float(exposure), slot

    def _age(self, start: _Start, slot: int) -> None:
        """Bring ``start``'s discounted figures to ``slot``."""
        elapsed = slot - start.seen_at
        if elapsed <= 0:
            return
        if self.forget == 1.0:
            start.exposure += elapsed
        else:
            decay = self.forget**elapsed
            start.found *= decay
            # sum of forget^k for k < elapsed: the slots watched, the older ones discounted
            start.exposure = start.exposure * decay + (1.0 - decay) / (1.0 - self.forget)
        start.seen_at = slot

    @staticmethod
    def _snap(interval: float) -> float:
        """Whole slots; past 8, down to the quarter-octave grid (never longer than asked)."""
        if interval >= 8.0:
            interval = _GRID ** math.floor(math.log(interval, _GRID) + 1e-9)
        return float(max(1, math.floor(interval + 1e-9)))


def _within(floors: dict[str, float], cap: float) -> dict[str, float]:
    """``floors`` scaled down together to sum to ``cap`` when they sum to more."""
    total = sum(floors.values())
    if total <= cap or total <= 0:
        return floors
    scale = cap / total
    return {url: f * scale for url, f in floors.items()}
