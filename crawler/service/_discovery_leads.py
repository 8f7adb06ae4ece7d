"""The scheduler's reads of start pages feed discovery: their new links become leads.

With ``discovery_watch_starts`` (the default) a source's start pages (its page and the links
that became its start pages) are on the watch list: reading the section pages that list new
pages was most of discovery's downloads (61% of them were neither new pages nor anything else
that paid, docs/discovery.md), and telling which sections change is what the re-polling
scheduler does for any watched page. Its polls of them ask for the body too
(``PollJob.keep_body``: the body comes back only when the page changed or was polled for the
first time). The loop hands those answers to ``heard``, which admits the page's links through
the source's scope and trap rules and queues those nobody knows yet as *leads* (oldest first,
at most ``MAX_LEADS``). Each slot, discovery polls its leads first, and again once the
scheduler's polls of the slot are done (a link heard in a slot is polled in it, time
permitting), with its own share and each source's per-slot and per-run budgets; a lead is
recorded new by the driver's rule (depth and path length 1, via its start page).

A source's own page goes on the watch list at once, and the scheduler's first read of it
builds the crawl (``_first_by_scheduler``: discovery reads at most one a slot itself); the
links that were unknown then are judged new or not at their own first read (``_unjudged``).

*Paced by yield.* Left to its own objective (changes caught per poll, indifferent to when),
the scheduler read each of 50 section pages about once in 150 slots. Each watched start page
therefore gets a floor, a poll at least every ``discovery_start_interval_slots`` (3) while it
yields new pages, at growing intervals while it does not (``crawler.discovery.StartPacer``,
credited here when a lead heard from it is recorded new). The floors go to the scheduler's
guard as lower bounds, together at most ``PACED_SHARE`` of its polls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from crawler.discovery import (
    MAX_AGE,
    Refusal,
    canonical_url,
    extract_links,
    looks_like_listing,
    page_date,
)
from crawler.fetch import validate_url
from crawler.service._discovery_base import log
from crawler.service._discovery_fetch import PageReads
from crawler.service._discovery_parts import (
    FIRST_READ_SHARE,
    FIRST_READ_WAIT,
    MAX_LEADS,
    MAX_LINKED,
    OWN_FIRST_READS,
    PACED_SHARE,
    SlotWork,
    SourceRun,
    page_of,
)
from crawler.service._trap_caps import ROOM
from crawler.store import Found, NewUrl, StoreError
from crawler.workers import PollAnswer, PollJob


class LeadPolls(PageReads):
    """The links heard from the scheduler's reads of start pages, and discovery's polls of
    them."""

    def mark(self, jobs: list[PollJob]) -> list[PollJob]:
        """The re-polling side's jobs, those of start pages discovery reads asking for the
        body too (``keep_body``)."""
        fed = self._fed
        if not fed:
            return jobs
        return [j._replace(keep_body=True) if j.url in fed else j for j in jobs]

    def start_floors(self, capacity: float) -> dict[int, float]:
        """The watched start pages' lower bounds (URL id -> polls per slot) from their yield,
        together at most ``PACED_SHARE`` of the scheduler's ``capacity`` and within the
        ceiling budget of the URLs discovery watched, room included (``floor_room``: a floor
        never pushes the operator's URLs out); a page whose id is not known yet, not added to
        the watch list yet, has none."""
        if not self.pacer:
            return {}
        share = min(PACED_SHARE, self.settings.discovery_watched_share)
        cap = share * capacity / ROOM
        # the start pages to judge at their first read (``_unjudged``) are read at once, with
        # at most half the paced share between them; the pacer's floors share the rest
        first = [u for u in self._unjudged if u in self._fed_ids]
        each = min(1.0, FIRST_READ_SHARE * cap / max(len(first), 1))
        floors = self.pacer.floors(self._slot_no, cap - each * len(first))
        floors.update((url, each) for url in first)
        return {self._fed_ids[u]: f for u, f in floors.items() if u in self._fed_ids}

    def heard(self, answers: Sequence[PollAnswer], urls: Callable[[int], str | None]) -> int:
        """The re-polling side's answers: the links of a start page that changed (a body came
        back) become leads, when in the scope of a source that reads it and unknown. How
        many leads were added."""
        added = 0
        for a in answers:
            if a.body is None:
                continue
            url = urls(a.url_id)
            sids = self._fed.get(url) if url is not None else None
            if url is None or not sids:
                continue
            listing = looks_like_listing(a.body)
            html = "" if listing else page_of(a.body, a.content_type, a.last_modified)[0]
            self._first_read(url, sids, html, listing)
            if listing:
                continue
            if (unjudged := self._unjudged.pop(url, None)) is not None:
                self._judge_heard(url, unjudged, html, a.last_modified)
            base = a.final_url or url
            canonical = [c for href, _ in extract_links(html) if (c := canonical_url(href, base))]
            self.learner.observe(url, canonical)  # one-off values: fresh on every fetch
            links = list(dict.fromkeys(self.learner.clean(c) for c in canonical))
            now = self.clock()
            for sid in sorted(sids):
                source = self.sources.get(sid)
                crawl = source.crawl if source is not None else None
                if crawl is None:
                    continue
                depth = crawl.budget.depth.get(url, 0) + 1
                waiting = sum(1 for lead in self._leads.values() if lead[0] == sid)
                room = self.caps.room(sid, now) - waiting  # leads past its caps: not queued
                for href in links:
                    target = crawl.budget.admit(href, None, depth)
                    if isinstance(target, Refusal):
                        continue
                    if len(self._heard_linked) < MAX_LINKED:
                        self._heard_linked.add(target)
                    if target in self._leads or target in crawl.known or target in self._fed:
                        continue  # waiting, known, or a start page (the scheduler reads it)
                    if target in self._in_flight:
                        continue  # being polled now
                    if self.known is not None and target in self.known:
                        continue
                    if room <= 0:  # its new-page caps: no more leads than it may record
                        continue
                    self._leads[target] = (sid, url, depth)
                    room -= 1
                    added += 1
        while len(self._leads) > MAX_LEADS:
            self._leads.popitem(last=False)
        return added

    def _judge_heard(
        self, url: str, unjudged: tuple[int, str], html: str, last_modified: str | None
    ) -> None:
        """The scheduler's first read of a start page that was an unknown link when its
        source's page was first read: a new page by the driver's rule is recorded (and
        credited to that page), an older one stays a start page like the others."""
        sid, via = unjudged
        source = self.sources.get(sid)
        if source is None or source.crawl is None:
            return
        published = page_date(html, last_modified)
        depth = source.crawl.budget.depth.get(url, 1)
        found = self._judge(source, url, html, published, depth)
        if found is not None:
            self._heard_found.append((found, published))
            self.pacer.credit(via, self._slot_no)

    def _first_read(self, url: str, sids: set[int], html: str, listing: bool) -> None:
        """The re-polling side read a source's page for the first time: its body builds the
        crawl of each source waiting for it (a sitemap or feed: discovery reads it itself,
        its reader keeps the ``lastmod`` dates)."""
        for sid in sorted(sids):
            source = self.sources.get(sid)
            if source is None or source.crawl is not None or source.asked_at is None:
                continue
            if listing:  # discovery reads it from now on; the scheduler no more (paused)
                source.asked_at, source.fed = -1, False
                self._fed.pop(url, None)
                self.pacer.remove(url)
                if (uid := self._fed_ids.get(url)) is not None:
                    self._paused_ids.add(uid)
                continue
            self._start(source, html, judge=True)

    def _first_by_scheduler(self, source: SourceRun, slot: SlotWork) -> bool:
        """Whether the re-polling side makes the first read of ``source``'s page (True while
        it is waited for). With the start pages watched, a source's page is a start page the
        scheduler reads anyway: put on the watch list at once (its floor first, as a marked
        page), its first read comes back with the body and builds the crawl, so discovery's
        own polls are only the links that may be new. Read by discovery itself, 50 section
        indexes marked as sources were 50 of discovery's 78 downloads in 60 slots
        (benchmarks/discovery_service.py --marked sections). Discovery reads it itself when
        the start pages are not watched, when the page is known already (a watched page
        answers a conditional poll with no body), when it turns out a sitemap or feed, and
        after ``FIRST_READ_WAIT`` slots without an answer. It also reads the first source
        page waiting in a slot itself (``OWN_FIRST_READS``): through the scheduler a first
        read comes two slots later (on the watch list at the slot's end, its floor given
        after the next, a never-polled page with a floor due at once), and with the front
        page marked 86% of the new pages were found within 5 slots instead of 100% (a poll
        spent on a page that is not new, once)."""
        if not self.settings.discovery_watch_starts or source.asked_at == -1:
            return False
        url, sid = source.row.url, source.row.id
        if source.asked_at is None:
            if self.known is None or url in self.known or slot.own_first < OWN_FIRST_READS:
                slot.own_first += 1
                source.asked_at = -1
                return False
            source.asked_at, source.fed = self._slot_no, True
            self._fed.setdefault(url, set()).add(sid)
            self._to_watch[url] = sid
            self.pacer.add(url, self._slot_no, marked=True)
            return True
        if self._slot_no - source.asked_at < FIRST_READ_WAIT:
            return True
        source.asked_at, source.fed = -1, False
        return False

    async def _watch_starts(self) -> None:
        """Add the start pages waiting for it to the watch list (kept for the next slot if
        the database refuses; a URL it cannot take is not fed)."""
        if not self._to_watch:
            return
        entries: list[NewUrl] = []
        for url in list(self._to_watch):
            try:
                entries.append(NewUrl(validate_url(url)))
            except ValueError as exc:
                log.warning("start page %s not watched: %s", url, exc)
                self._fed.pop(url, None)
                del self._to_watch[url]
        try:
            ids = await asyncio.to_thread(self._add_starts, entries)
        except StoreError as exc:
            log.warning("start pages not added to the watch list yet: %s", exc)
            return
        self._fed_ids.update((u, i) for u, i in ids.items() if u in self._fed)
        log.info("discovery: %d start pages on the watch list", len(self._to_watch))
        if self.known is not None:
            self.known.update(self._to_watch)
        self._to_watch.clear()

    def _add_starts(self, entries: list[NewUrl]) -> dict[str, int]:
        """Watch the start pages; the URL id of each, watched before or not (the pacer's
        floors are given to the scheduler by id)."""
        report = self._store.add_urls(entries)
        ids = dict(report.added) | dict(report.reactivated)
        if rest := [u for u in report.already_watched if u not in ids]:
            ids.update((u, i) for i, u in self._store.select_urls(rest))
        return ids

    async def _poll_leads(self, slot: SlotWork, budget: int, stop: asyncio.Event | None) -> None:
        """Poll the leads, oldest first, with discovery's share and each source's budgets;
        record the new ones. A lead deferred (not polled by the slot's deadline) is queued
        again, first, its run budget given back: the start page that linked it answers 304
        from then on, so it would never be heard again."""
        left = {sid: s.row.spec.budget_per_slot for sid, s in self.sources.items()}
        while self._leads and budget - slot.polls > 0 and not slot.out_of_time:
            if stop is not None and stop.is_set():
                break
            room = budget - slot.polls
            batch: list[tuple[str, int, str, int]] = []
            for url, (sid, via, depth) in list(self._leads.items()):
                if len(batch) >= room:
                    break
                source = self.sources.get(sid)
                crawl = source.crawl if source is not None else None
                if crawl is None or url in slot.picked or url in crawl.known:
                    del self._leads[url]  # gone, polled by the scheduler now, or known
                    continue
                if url in slot.bodies or self._disallowed(url):
                    del self._leads[url]
                    continue
                if left.get(sid, 0) <= 0:
                    continue
                if self.caps.room(sid, self.clock()) <= 0:  # its new-page caps are reached
                    del self._leads[url]
                    continue
                if not crawl.budget.charge():  # its per-run budget is spent
                    del self._leads[url]
                    continue
                del self._leads[url]
                left[sid] -= 1
                batch.append((url, sid, via, depth))
            if not batch:
                break
            self._in_flight = {url for url, _, _, _ in batch}
            try:
                deferred = await self._fetch(slot, sorted(self._in_flight))
                for url, sid, via, depth in reversed(batch):  # not polled: first, next slot
                    if url in deferred and (crawl := self.sources[sid].crawl) is not None:
                        crawl.budget.refund()
                        self._leads[url] = (sid, via, depth)
                        self._leads.move_to_end(url, last=False)
                batch = [lead for lead in batch if lead[0] not in deferred]
                slot.lead_polls += len(batch)
                for url, sid, via, depth in batch:
                    slot.record.polls[sid] = slot.record.polls.get(sid, 0) + 1
                    if self._lead_fetched(self.sources[sid], url, depth, slot):
                        self.pacer.credit(via, self._slot_no)  # the start page paid
            finally:
                self._in_flight = set()

    def _lead_fetched(self, source: SourceRun, url: str, depth: int, slot: SlotWork) -> bool:
        """A lead polled: judged (``_judge``) and recorded with the slot when new. True when
        it was."""
        html = slot.bodies.get(url)
        if html is None:
            return False
        published = slot.dates.get(url)
        found = self._judge(source, url, html, published, depth)
        if found is not None:
            self._keep(slot, found, published)
        return found is not None

    def _judge(
        self, source: SourceRun, url: str, html: str, published: float | None, depth: int
    ) -> Found | None:
        """A page read for the first time through a start page of ``source``: new by the
        driver's rule (not known, no older than its max age), then recorded by the one path
        of a new page (``_new_page``); None when not new (known from then on)."""
        crawl = source.crawl
        assert crawl is not None
        now = self.clock()
        if now - (now if published is None else published) > MAX_AGE:
            crawl.known.add(url)  # an old page: known now, not new
            return None
        return self._new_page(source, url, html, published, depth, 1)

    def take_hinted(self, limit: int) -> list[str]:
        """Up to ``limit`` known URLs whose ``lastmod`` moved in a sitemap or feed, oldest
        hint first, for the re-polling side to poll in this slot."""
        taken: list[str] = []
        while self._hinted and len(taken) < limit:
            taken.append(self._hinted.popitem(last=False)[0])
        return taken

    def hint_polls(self, count: int) -> None:
        """``count`` of this slot's re-polls were hinted URLs: discovery's share pays them."""
        self._hint_polls = count

    def note_dead(self, urls: Sequence[str]) -> None:
        """URLs the scheduler's polls found gone (404/410): expired at the next record."""
        self._dead.update(urls)
