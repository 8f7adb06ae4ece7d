"""A source's learned state as saved with each slot (``sources.state``), read in one place.

The JSON holds the start pages best first over the source's foragers (``seeds``), the
start-page bandit's yields (``starts``) and, for start pages the re-polling scheduler reads,
the pacer's figures (``pace``). The service writes it with each slot and reads it back at a
restart; ``crawler sources list --starts`` reads it to say which sections pay. One parser
for all three readers: a state written by an older release, or damaged, reads as empty parts,
never as an error.

Also the arithmetic of discovery's share of a slot (``discovery_polls``, ``starved_reason``),
which the service applies and the CLI explains.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from crawler.discovery._driver import SourceCrawl
from crawler.discovery._pacing import StartPacer
from crawler.discovery._seeds import SeedBandit

#: start pages kept in a source's saved state
SAVED_SEEDS = 100
#: the smallest capacity (polls per slot) that gives discovery a poll: one for it, one at
#: least for the re-polling side (below it discovery gets none: said at start and in
#: ``crawler sources list``)
MIN_DISCOVERY_CAPACITY = 2.0


@dataclass(frozen=True, slots=True)
class SourceState:
    """A source's saved learning: its start pages, the bandit's and the pacer's figures."""

    seeds: list[str] = field(default_factory=list)
    starts: dict[str, object] = field(default_factory=dict)
    pace: dict[str, object] = field(default_factory=dict)

    @classmethod
    def parse(cls, state: str | None) -> SourceState:
        """The saved JSON; a part absent or of the wrong kind reads as empty."""
        try:
            data = json.loads(state or "{}")
        except ValueError:
            data = {}
        if not isinstance(data, dict):
            return cls()
        seeds, starts, pace = data.get("seeds"), data.get("starts"), data.get("pace")
        return cls(
            [s for s in seeds if isinstance(s, str)] if isinstance(seeds, list) else [],
            starts if isinstance(starts, dict) else {},
            pace if isinstance(pace, dict) else {},
        )

    @classmethod
    def of(cls, crawl: SourceCrawl, pace: dict[str, list[float]] | None = None) -> SourceState:
        """What ``crawl`` learned: its start pages best first over all its foragers, the
        start-page bandit's yields and, for watched start pages, the pacer's ``pace``."""
        best: dict[str, float] = {}
        for forager in crawl.fleet.foragers:
            for url, value in forager.weblog.entries():
                best[url] = max(value, best.get(url, -math.inf))
        ranked = sorted(best.items(), key=lambda kv: -kv[1])[:SAVED_SEEDS]
        starts: dict[str, object] = dict(crawl.start_state())
        return cls([u for u, _ in ranked], starts, dict(pace or {}))

    def dumps(self) -> str:
        state: dict[str, object] = {"seeds": self.seeds, "starts": self.starts}
        if self.pace:
            state["pace"] = self.pace
        return json.dumps(state)


@dataclass(frozen=True, slots=True)
class StartFigures:
    """What a source learned of one start page (``crawler sources list --starts``)."""

    url: str
    #: "scheduler" (a watched start page, paced by its yield) or "discovery" (the bandit's)
    read_by: str
    #: new pages per slot found through it (the learner's posterior mean)
    yield_per_slot: float
    #: its share of its source's start-page polls (the bandit), None when the scheduler reads it
    share_of_polls: float | None
    #: the longest it goes unread, in slots (the pacer), None when discovery reads it
    interval_slots: float | None


def start_report(state: str | None, *, target_slots: int, min_yield: float) -> list[StartFigures]:
    """A source's start pages from its saved state, the best yield first: which sections
    pay, as learned by the pacer (watched start pages, paced with ``target_slots`` and
    ``min_yield``) or the bandit (read by discovery)."""
    saved = SourceState.parse(state)
    figures: list[StartFigures] = []
    if saved.pace:
        pacer = StartPacer(target_slots=target_slots, min_yield=min_yield)
        for url in saved.pace:
            pacer.add(url, 0)
        pacer.restore(saved.pace, 0)
        for url in saved.pace:
            if url in pacer:
                figures.append(
                    StartFigures(
                        url, "scheduler", pacer.yield_of(url, 0), None, pacer.interval(url, 0)
                    )
                )
    starts = {
        url: v
        for url, v in saved.starts.items()
        if url not in saved.pace and isinstance(v, list) and len(v) == 3
        and all(isinstance(x, int | float) and x >= 0 for x in v)
    }  # fmt: skip
    bandit = SeedBandit(starts)
    bandit.restore(dict(starts), 0)
    polls = sum(bandit.polls[url] for url in starts)
    for url in starts:
        share = bandit.polls[url] / polls if polls else None
        figures.append(StartFigures(url, "discovery", bandit.rate(url), share, None))
    figures.sort(key=lambda f: (-f.yield_per_slot, f.url))
    return figures


def discovery_polls(share: float, capacity: float) -> int:
    """Discovery's polls a slot out of ``capacity`` with sources to read: floor(share x
    capacity), at least one from a capacity of ``MIN_DISCOVERY_CAPACITY``; 0 when the share
    is 0 (discovery off)."""
    if share <= 0:
        return 0
    polls = math.floor(share * capacity + 1e-9)
    return max(polls, 1) if capacity >= MIN_DISCOVERY_CAPACITY else polls


def starved_reason(share: float, capacity: float) -> str | None:
    """Why sources get no discovery poll at ``capacity`` polls a slot (None: they get
    some), in words for an operator, with what to change."""
    if share <= 0:
        return "the discovery share is 0 (CRAWLER_DISCOVERY_SHARE / --discovery-share)"
    if discovery_polls(share, capacity) > 0:
        return None
    return (
        f"the capacity, {capacity:g} polls a slot, leaves none for discovery (it needs at "
        f"least {MIN_DISCOVERY_CAPACITY:g}: one poll for discovery, one for the watched "
        "URLs); set CRAWLER_CAPACITY / --capacity to 2 or more"
    )
