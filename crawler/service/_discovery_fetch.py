"""Discovery's own polls: through the service's poller, conditional, robots.txt remembered.

Discovery polls through the **same** ``Poller`` as the re-polling side: robots.txt, the
per-host concurrency, delay and back-off are shared with re-polling. The bodies come back (not
judged). A page discovery read is asked for again conditionally (``MAX_READ_PAGES`` kept, the
least recently read dropped first): a 304 costs a request but no download, and its links are
the ones read last time.

A URL refused by robots.txt is not polled again for the fetcher's robots.txt cache time
(``robots_ttl_s``). The memory is the service's own, not the fetcher's cache: the fetcher
runs in the crawl worker processes (``fetch_workers``) and the ``Poller`` protocol answers
polls, it does not expose what a worker's fetcher holds; asked again sooner, the fetcher
would only refuse it again, at the price of a poll of discovery's share.
"""

from __future__ import annotations

import time

from crawler.discovery import canonical_url, extract_links, looks_like_listing, page_date
from crawler.service._discovery_listings import ListingReads
from crawler.service._discovery_parts import (
    DEAD_STATUSES,
    MAX_LINKED,
    MAX_READ_PAGES,
    MAX_ROBOTS_MEMORY,
    SlotWork,
    page_of,
)
from crawler.service._inflight import GRACE_S, InFlight
from crawler.sites import site_of
from crawler.workers import PollAnswer, PollJob, deferred_answer


class PageReads(ListingReads):
    """Discovery's polls of pages, answered through the service's poller."""

    def _disallowed(self, url: str) -> bool:
        """Refused by robots.txt less than the fetcher's robots.txt cache time ago."""
        when = self._robots.get(url)
        return when is not None and time.monotonic() - when < self._robots_ttl

    async def _fetch(self, slot: SlotWork, urls: list[str]) -> set[str]:
        """Poll ``urls`` through the service's poller (bodies back, not judged); returns those
        deferred (not polled: the slot's deadline came first, say at a polite host's gate
        behind the scheduler's polls), for the caller to ask for again in a later slot."""
        jobs = []
        for url in urls:
            self._ids += 1
            etag, modified = None, None
            if (read := self._read.get(url)) is not None:
                etag, modified = read[0], read[1]
            jobs.append(
                PollJob(-self._ids, url, site_of(url), etag, modified, None, (), None, None, True)
            )
        by_id = {job.url_id: job.url for job in jobs}
        answers: list[PollAnswer] = []
        deferred: set[str] = set()
        # the loop's own wait: up to the deadline (plus the grace for a poller that overruns
        # it), cut at once by the slot's stop; what is then not answered is deferred
        flight = InFlight(self.poller, None, GRACE_S)
        stream = flight.start(jobs, {}, slot.deadline)
        async for _, chunk in flight.poll_until(stream, slot.deadline, slot.stop):
            answers.extend(stream.take(chunk))
        if not stream.settled:
            await flight.close(stream)
            reason = "shutdown" if slot.stop is not None and slot.stop.is_set() else "timeout"
            answers.extend(deferred_answer(job, reason) for job in stream.unanswered())
        for a in answers:
            url = by_id[a.url_id]
            if a.outcome == "deferred":
                deferred.add(url)
                slot.deferred += 1
                slot.out_of_time = True
                slot.bodies[url] = None
                slot.dates[url] = None
                continue
            slot.polls += 1
            if a.status in DEAD_STATUSES:
                slot.dead.add(url)
            if a.error_kind == "robots":  # not asked again for robots_ttl_s
                if len(self._robots) >= MAX_ROBOTS_MEMORY:
                    self._robots.clear()
                self._robots[url] = time.monotonic()
            cached = self._read.get(url)
            if a.outcome == "not_modified" and cached is not None:  # read before: the same
                slot.not_modified += 1
                slot.unchanged.add(url)  # the crawl replays its own links (listings)
                self._read.move_to_end(url)
                slot.bodies[url], slot.dates[url] = cached[2], cached[3]
                self._links(slot, cached[2], url)
                if url in self.relisting:
                    self.relisting.unchanged(url, self._slot_no)
                continue
            if a.outcome != "ok" or a.body is None:
                slot.errors += a.outcome == "error"
                slot.bodies[url] = None
                slot.dates[url] = None
                reason = a.error_kind or f"{a.outcome} {a.status or ''}".strip()
                self._listing_failed(url, reason, known=url in self.relisting)
                continue
            slot.downloaded.append(url)
            if looks_like_listing(a.body):  # a sitemap or feed: read off the event loop
                html, slot.dates[url] = "", page_date("", a.last_modified)
                await self._read_listing(slot, url, a.body, a.final_url or url)
            else:
                html, slot.dates[url] = page_of(a.body, a.content_type, a.last_modified)
                self._links(slot, html, a.final_url or url)
            slot.bodies[url] = html
            if a.etag or a.last_modified:
                self._read[url] = (a.etag, a.last_modified, html, slot.dates[url])
                self._read.move_to_end(url)
                while len(self._read) > MAX_READ_PAGES:
                    self._read.popitem(last=False)
        return deferred

    @staticmethod
    def _links(slot: SlotWork, html: str, base: str) -> None:
        """The pages ``html`` links (they stay alive: see the expiry rule)."""
        linked = slot.record.linked
        for href, _ in extract_links(html):
            if len(linked) >= MAX_LINKED:
                break
            link = canonical_url(href, base)
            if link is not None:
                linked.add(link)
