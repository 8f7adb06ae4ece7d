"""The crawl over a source's start pages that nobody watches: discovery's own rounds.

One ``crawler.discovery.SourceCrawl`` per source, with the weblog-update foragers by default
(``discovery_strategy``). A source's page is read once, and up to ``discovery_seed_links`` of
its in-scope links become the start pages, with ``discovery_max_step`` = 1 by default: a path
is a start page and its unknown links (the set-up that found most new pages over HTTP in
docs/discovery.md). Start pages the re-polling scheduler reads (``discovery_watch_starts``)
are never polled here; what is left is the start-page bandit's (or a sitemap's or feed's).
Each slot, rounds of one URL per source until the share or every source's budget is spent; a
URL is never polled twice in one slot (the scheduler's picks are never fetched here, and a
URL two sources want is fetched once and its body reused).
"""

from __future__ import annotations

import asyncio

from crawler.discovery import Listing
from crawler.service._discovery_base import log
from crawler.service._discovery_leads import LeadPolls
from crawler.service._discovery_parts import MAX_HINTED, MAX_SKIPS, SlotWork, SourceRun


class SourceCrawls(LeadPolls):
    """Discovery's rounds over the start pages it reads itself."""

    async def _polls(self, slot: SlotWork, budget: int, stop: asyncio.Event | None) -> None:
        """Rounds of one URL per source until the budget (or every source's) is spent."""
        sources = sorted(self.sources.values(), key=lambda s: s.row.id)
        if not sources:
            return
        start = self._rotation % len(sources)
        self._rotation += 1
        sources = sources[start:] + sources[:start]
        left = {s.row.id: s.row.spec.budget_per_slot for s in sources}
        while budget - slot.polls > 0 and not slot.out_of_time:
            if stop is not None and stop.is_set():
                break
            wanted: list[tuple[SourceRun, str]] = []
            room = budget - slot.polls
            urls_this_round: set[str] = set()
            for source in sources:
                if left[source.row.id] <= 0 or len(urls_this_round) >= room:
                    continue
                url = self._next(source, slot)
                if url is None:
                    left[source.row.id] = 0
                    continue
                wanted.append((source, url))
                urls_this_round.add(url)
            if not wanted:
                break
            deferred = await self._fetch(slot, sorted(urls_this_round))
            for source, url in wanted:
                if source.crawl is None and url in deferred:  # its first read: next slot
                    continue
                left[source.row.id] -= 1
                sid = source.row.id
                slot.record.polls[sid] = slot.record.polls.get(sid, 0) + 1
                self._fetched(source, url, slot)

    def _next(self, source: SourceRun, slot: SlotWork) -> str | None:
        """The next URL ``source`` wants polled now (None: nothing this slot). URLs already
        polled in this slot are answered from their first poll without a new one."""
        if source.crawl is None:
            if self._first_by_scheduler(source, slot):
                return None  # the re-polling side reads it first
            first = source.row.url
            if first not in slot.picked and first not in slot.bodies:
                return first  # its first poll: its links become the start pages
            self._start(source, slot.bodies.get(first), self._is_listing(first, slot))  # once
        crawl = source.crawl
        if crawl is None or source.fed:  # its start pages are read by the scheduler
            return None
        if self.caps.room(source.row.id, self.clock()) <= 0:  # its new-page caps: done for now
            return None
        for _ in range(MAX_SKIPS):
            url = crawl.next_url()
            if url is None:
                break
            if url in slot.picked or self._disallowed(url):  # not again, or not allowed
                crawl.fetched(url, None, published=None, now=self.clock())
                continue
            if (fresh := self._fresh.pop(url, None)) is not None:  # read since: its links
                slot.listings[url], slot.bodies[url], slot.dates[url] = fresh, "", None
                self._report(source, url, slot)
                continue
            if url in self._reading or not self.relisting.due(url, self._slot_no):
                unchanged = self.relisting.failing(url) is None  # its links read last stand
                crawl.fetched(url, None, published=None, now=self.clock(), not_modified=unchanged)
                continue
            if url in slot.bodies:  # polled already in this slot: its body again
                self._report(source, url, slot)
                continue
            return url
        return None

    def _fetched(self, source: SourceRun, url: str, slot: SlotWork) -> None:
        if source.crawl is None:
            self._start(source, slot.bodies.get(url), self._is_listing(url, slot))
            if isinstance(slot.listings.get(url), Listing):
                self.relisting.forget(url)  # its crawl has not read it yet: read it again
            return
        self._report(source, url, slot)

    def _report(self, source: SourceRun, url: str, slot: SlotWork) -> None:
        """Hand a polled page to the source's crawl; record it if it was new."""
        crawl = source.crawl
        assert crawl is not None
        html = slot.bodies.get(url)
        published = slot.dates.get(url)
        now = self.clock()
        before = len(crawl.found)
        listing = slot.listings.get(url)  # sitemaps and feeds, read already
        loops = crawl.listing_errors["loop"]
        crawl.fetched(
            url,
            html if listing is None else None,
            published=published,
            now=now,
            not_modified=url in slot.unchanged,
            listing=listing,
        )
        if crawl.listing_errors["loop"] > loops:  # an index listing itself: warned once
            self._warn_once(
                "loop",
                url,
                f"source {source.row.url}: sitemap index {url} lists itself or an index above "
                "it (not followed)",
            )
        hints = crawl.take_hints()  # a sitemap's or feed's moved lastmod dates
        if hints and self.known is not None:
            known = [h.url for h in hints if h.url in self.known]
            for hinted in known:  # re-polled in the next slot if watched (``take_hinted``)
                self._hinted[hinted] = None
                self._hinted.move_to_end(hinted)
            while len(self._hinted) > MAX_HINTED:
                self._hinted.popitem(last=False)
            log.info(
                "source %s: %d lastmod hints (%d known)", source.row.url, len(hints), len(known)
            )
        found = crawl.found[before:]
        del crawl.found[:]  # read here once; the service keeps no history of it (memory)
        for d in found:  # the one path of a new page
            new = self._new_page(source, d.url, html, published, d.depth, d.path_length)
            if new is not None:
                self._keep(slot, new, published)
