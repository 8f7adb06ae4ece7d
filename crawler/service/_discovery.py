"""Discovery in the service: a share of each slot's polls follows links from the sources.

Each slot, when sources exist, up to ``floor(discovery_share x capacity)`` polls go to
discovery (at least one from a capacity of 2) and the scheduler gets the rest of the capacity
(``reserved``; with every source's start pages watched, discovery keeps only what its waiting
links need, ``LEAD_WINDOW``). The discovery side runs alongside the scheduler's polls,
through the **same** ``Poller``. Its parts, one module each, stacked on its state
(``_discovery_base``: the crawls built from start pages, the start pages fed to the
scheduler, the one path of a page found new):

- ``_discovery_listings``: sitemaps and feeds, read off the event loop;
- ``_discovery_fetch``: discovery's own polls, conditional, robots.txt refusals remembered;
- ``_discovery_leads``: the scheduler's reads of start pages (``discovery_watch_starts``, the
  default) feed discovery their new links, paced by yield;
- ``_discovery_crawls``: the crawl over start pages nobody watches (the start-page bandit).

*New* is the driver's rule (not watched and not seen before; no older than 24 h by the page's
``article:published_time`` or ``Last-Modified`` when it has one). With a topic, a new page is
recorded only when at least ``TOPIC_MIN`` of the topic's keywords occur in its text (the
share is stored as ``on_topic``). New pages are recorded in ``discovered`` (URL, time found,
source, depth, path length, date) and, for a source with ``auto_watch``, added to the watch
list through the store's add path. The learned start lists are saved with each slot
(``sources.state``, ``crawler.discovery.SourceState``) and restored after a restart. Expiry
(see ``crawler.store._discovery``) runs each slot: pages not linked by any page fetched by
discovery for ``discovery_expire_days``, and pages answering 404 or 410 to either side,
expire.

*Traps* (a site that makes up new links on every fetch) are held in three places: the links
heard from a start page are canonicalized with the session rules and the one-off values the
``OneOffLearner`` learned from that page's fetches (``crawler.discovery._sessions``); each
source records at most ``discovery_max_new_per_slot`` / ``_per_day`` new pages and, with
``auto_watch``, has at most ``discovery_max_auto_watched`` on the watch list (a source past its
caps gets no leads queued or polled); and every URL discovery watched has a ceiling in the
scheduler's guard (``watched_ceilings``), so together they take at most
``discovery_watched_share`` of its polls (``crawler.service._trap_caps``). Every map here that
grows with what sites return is bounded (``MAX_*`` in ``_discovery_parts``).

The clock is injectable (``clock``): the verdict "no older than 24 h" compares page dates with
it, so a test serving a site in simulated time gives the matching clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from crawler.discovery import SourceState, discovery_polls, starved_reason, words
from crawler.service._discovery_crawls import SourceCrawls
from crawler.service._discovery_parts import (
    AGE_EXPIRY_EVERY_S,
    MIN_LEAD_RESERVE,
    DiscoverySummary,
    SlotWork,
    SourceRun,
    merge_slots,
    source_problem,
)
from crawler.service._trap_caps import day_start, watched_ceilings
from crawler.store import StoreError

log = logging.getLogger("crawler.service")

__all__ = ["DiscoverySide", "DiscoverySummary"]


class DiscoverySide(SourceCrawls):
    """The discovery share of the crawl loop's slots."""

    async def prepare(self) -> None:
        """With sources, start the listing worker and wait until it answers (a second or
        two, with the service's start rather than in its first slots)."""
        try:
            sources = await asyncio.to_thread(self.store.sources)
        except StoreError as exc:
            log.warning("discovery sources not read at start (read at the first slot): %s", exc)
            return
        if sources and self.settings.discovery_share > 0:
            await self.listings.ready()

    def close(self) -> None:
        """Stop the listing reads and their worker (the service is leaving)."""
        for task in self._reading.values():
            task.cancel()
        self._reading.clear()
        self.listings.close()

    @property
    def active(self) -> bool:
        """Discovery has a share: some source can still poll (its run budget not spent)."""
        if self.settings.discovery_share <= 0:
            return False
        return any(s.crawl is None or not s.crawl.budget.exhausted for s in self.sources.values())

    def reserved(self, capacity: float) -> int:
        """Discovery's polls per slot out of ``capacity`` when sources can poll (else 0):
        floor(share x capacity), at least one from a capacity of ``MIN_DISCOVERY_CAPACITY``
        (a small watch list's capacity gives a tenth of a poll: a source would never be
        read); with every active source's start pages watched, only what its waiting links
        need of that (see ``LEAD_WINDOW``). Below that capacity it gets none, and the
        service says so once (a WARNING) until the capacity gives one again."""
        if not self.active:
            return 0
        share = discovery_polls(self.settings.discovery_share, capacity)
        starved = share == 0
        if starved and not self._starved:
            reason = starved_reason(self.settings.discovery_share, capacity)
            log.warning("discovery gets no polls: %s", reason)
        self._starved = starved
        live = [s for s in self.sources.values() if s.crawl is None or not s.crawl.budget.exhausted]
        if not all(s.fed for s in live):
            return share
        return min(share, max(MIN_LEAD_RESERVE, 2 * max(self._waiting, default=0)))

    async def refresh(self) -> bool:
        """Read the sources (added, changed or removed since the last look); True when
        whether discovery is active changed (the scheduler's capacity must be set again)."""
        rows = await asyncio.to_thread(self.store.sources)
        owns = self.owns
        current = {r.id: r for r in rows if owns is None or owns(r.url)}
        for sid in list(self.sources):
            if sid not in current or current[sid].spec != self.sources[sid].row.spec:
                del self.sources[sid]
                self._unfeed(sid)
                if sid not in current:
                    self.caps.forget([sid])
        for sid in [sid for sid in self.unusable if sid not in current]:
            del self.unusable[sid]
        for sid, row in current.items():
            if sid in self.sources:
                self.sources[sid].row = row
            elif (problem := source_problem(row)) is not None:
                if self.unusable.get(sid, (None,))[0] != row.spec:  # said once per version
                    log.error("source %s skipped: %s (add it again with a fix)", row.url, problem)
                self.unusable[sid] = (row.spec, problem)
            else:
                self.unusable.pop(sid, None)
                topic = frozenset(words(row.spec.topic or ""))
                self.sources[sid] = SourceRun(row, topic=topic)
        if self.sources:
            await self.load_known()
        if self.sources and not self._caps_loaded:  # today's finds count against the caps
            now = self.clock()
            since = datetime.fromtimestamp(day_start(now), UTC)
            self.caps.load(await asyncio.to_thread(self.store.found_since, since), now)
            self._auto_ids = set(await asyncio.to_thread(self.store.auto_watched_ids))
            self._caps_loaded = True
        if self.sources:
            self.listings.start()  # the listing worker takes a second to start: now
        active = self.active
        changed, self._was_active = active != self._was_active, active
        self._waiting.append(len(self._leads) + len(self._hinted))
        return changed

    async def run_slot(
        self,
        picked: set[str],
        watched: int,
        deadline: float,
        stop: asyncio.Event | None = None,
        repolled: asyncio.Event | None = None,
    ) -> DiscoverySummary:
        """One slot's discovery: at most ``reserved(capacity)`` polls, none of a URL in
        ``picked`` (the scheduler's polls of this slot), none twice; then record and expire.
        ``repolled`` is set when the scheduler's polls of the slot are done: the links they
        heard are polled in the same slot, with what is left of the share."""
        budget = self.reserved(self.settings.effective_capacity(watched))
        budget, self._hint_polls = max(0, budget - self._hint_polls), 0  # hinted re-polls
        self._slot_no += 1
        slot = SlotWork(set(picked), deadline, stop)
        slot.dead, self._dead = self._dead, set()
        for source in self.sources.values():
            if source.crawl is not None:
                source.crawl.new_slot()
        self.caps.new_slot()
        if budget > 0:
            await self._poll_leads(slot, budget, stop)  # links the scheduler heard
            await self._polls(slot, budget, stop)
            if repolled is not None and self._fed:  # and those its reads hear in this slot
                timeout = deadline - time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(repolled.wait(), max(0.0, timeout))
                if repolled.is_set():
                    await self._poll_leads(slot, budget, stop)
        await self._watch_starts()  # start pages for the scheduler to read
        slot.record.linked |= self._heard_linked  # linked by a start page the scheduler read
        self._heard_linked = set()
        for found, published in self._heard_found:  # new pages the scheduler's reads found
            self._keep(slot, found, published)
        self._heard_found = []
        summary = await self._record(slot)
        self.last = summary
        return summary

    def _note_watched(self, added: Sequence[tuple[str, int]], capped: int) -> None:
        """Pages just auto-watched (their ids get the ceiling), and those a cap refused."""
        if self._auto_ids is not None:
            self._auto_ids.update(i for _, i in added)
        if capped:
            self.metrics.observe_capped("auto_watched", capped)
            if not self._watch_capped_logged:
                self._watch_capped_logged = True
                log.warning(
                    "%d new pages recorded but not watched: their source has "
                    "discovery_max_auto_watched pages watched, or added "
                    "discovery_max_auto_watched_per_slot this slot (logged once)",
                    capped,
                )

    def watched_ceilings(
        self, capacity: float, watched: int, floors: dict[int, float] | None = None
    ) -> dict[int, float]:
        """The upper bound of each URL discovery put on the watch list (start pages and
        auto-watched pages), so together they take at most ``discovery_watched_share`` of the
        scheduler's ``capacity`` (more if the operator's URLs, ``watched`` less these, cannot
        use the rest: crawler.service._trap_caps)."""
        ids = set(self._fed_ids.values()) | (self._auto_ids or set())
        others = max(0, watched - len(ids))
        share = self.settings.discovery_watched_share
        marked = {self._fed_ids[u] for u in self.pacer.marked if u in self._fed_ids}
        ceilings = watched_ceilings(ids, share, capacity, others, floors, marked)
        return ceilings | dict.fromkeys(self._paused_ids, 0.0)

    async def _record(self, slot: SlotWork) -> DiscoverySummary:
        """Write the slot's discovery (retried with the next slot if the database refuses),
        apply the expiry rule, count the metrics."""
        record = slot.record
        at = record.at = datetime.fromtimestamp(self.clock(), UTC)
        pace = self.pacer.state(self._slot_no) if self.pacer else {}
        for sid, source in self.sources.items():
            if source.crawl is not None and sid in record.polls:
                own = {u: f for u, f in pace.items() if sid in self._fed.get(u, ())}
                record.states[sid] = SourceState.of(source.crawl, own).dumps()
        if self._unsaved is not None:
            record = merge_slots(self._unsaved, record)
        watched = expired = 0
        reasons: list[str] = []
        try:
            if not record.empty:  # a service without sources writes nothing most slots
                result = await asyncio.to_thread(
                    functools.partial(
                        self.store.record_slot,
                        record,
                        max_watched=self.settings.discovery_max_auto_watched,
                        max_watched_per_slot=self.settings.discovery_max_auto_watched_per_slot,
                    )
                )
                self._unsaved = None
                watched = len(result.watched)
                self._note_watched(result.watched, result.watch_capped)
            days = 0.0  # expiry by age scans the table: once an hour (dead pages: each slot)
            if at.timestamp() - self._aged_at >= AGE_EXPIRY_EVERY_S:
                days, self._aged_at = self.settings.discovery_expire_days, at.timestamp()
            gone = []
            if days > 0 or slot.dead:
                gone = await asyncio.to_thread(self.store.expire, at, days, slot.dead)
            expired = len(gone)
            if gone:  # some left the watch list: the auto-watched ids again
                self._auto_ids = set(await asyncio.to_thread(self.store.auto_watched_ids))
            reasons = [r for _, r in gone]
        except StoreError as exc:
            log.warning("discovery of this slot not recorded yet (kept for retry): %s", exc)
            self._unsaved = record
            self._dead.update(slot.dead)
        found = len(slot.record.found)
        self.metrics.observe_discovery(
            slot.polls - slot.errors - slot.not_modified,
            slot.errors,
            slot.ages,
            reasons,
            not_modified=slot.not_modified,
        )
        if slot.polls or found:
            log.info(
                "discovery: polls=%d not_modified=%d errors=%d deferred=%d found=%d "
                "watched=%d expired=%d",
                slot.polls, slot.not_modified, slot.errors, slot.deferred, found, watched,
                expired,
            )  # fmt: skip
        return DiscoverySummary(
            slot.polls,
            slot.errors,
            slot.deferred,
            slot.not_modified,
            found,
            watched,
            expired,
            dict(slot.record.polls),
            tuple(slot.bodies),
            tuple(slot.downloaded),
            slot.lead_polls,
            tuple(sorted(slot.unchanged)),
        )
