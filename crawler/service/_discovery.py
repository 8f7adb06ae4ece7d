"""Discovery in the service: a share of each slot's polls follows links from the sources.

Each slot, when sources exist, up to ``floor(discovery_share x capacity)`` polls go to
discovery and the scheduler gets the rest of the capacity (``reserved``; with every source's
start pages watched, discovery keeps only what its waiting links need, ``LEAD_WINDOW``). The
discovery side runs alongside the scheduler's polls, through the **same** ``Poller``:
robots.txt, the per-host concurrency, delay and back-off are shared with re-polling. A URL is
never polled twice in one slot: the scheduler's picks are never fetched by discovery, and a
URL two sources (or one forager twice) want is fetched once and its body reused.

One ``crawler.discovery.SourceCrawl`` per source, with the weblog-update foragers by default
(``discovery_strategy``). Start pages: a source's page is fetched once, and up to
``discovery_seed_links`` of its in-scope links become the foragers' start pages, with
``discovery_max_step`` = 1 by default: a path is a start page and its unknown links. This is
the set-up that found most new pages over HTTP in docs/discovery.md (section pages as seeds,
one-step paths: 78% within 5 slots against 5% from a front page with 100-step paths): the
weblog then learns which sections pay. The learned start lists are saved with each slot
(``sources.state``) and restored after a restart (values reset; the order kept).

*New* is the driver's rule (not watched and not seen before; no older than 24 h by the page's
``article:published_time`` or ``Last-Modified`` when it has one). With a topic, a new page is
recorded only when at least ``TOPIC_MIN`` of the topic's keywords occur in its text (the
share is stored as ``on_topic``). New pages are recorded in ``discovered`` (URL, time found,
source, depth, path length, date) and, for a source with ``auto_watch``, added to the watch
list through the store's add path. Expiry (see ``crawler.store._discovery``) runs each slot:
pages not linked by any page fetched by discovery for ``discovery_expire_days``, and pages
answering 404 or 410 to either side, expire.

**Start pages read by the re-polling scheduler** (``discovery_watch_starts``, the default).
Reading the section pages that list new pages was most of discovery's downloads (61% of them
were neither new pages nor anything else that paid, in docs/discovery.md), and telling which
sections change is what the re-polling scheduler does for any watched page. So a source's
start pages (its page and the links that became its start pages) are added to the watch list
once its crawl is built; a source's own page goes there at once, and the scheduler's first
read of it builds the crawl (``_first_by_scheduler``: discovery reads at most one a slot
itself), and the links that were unknown then are judged new or not at their own first read
(``_unjudged``). The scheduler's polls of them ask for the body too
(``PollJob.keep_body``: judged as usual; the body comes back only when the page changed or was
polled for the first time, so a few section pages a slot cross the worker pipe, not the
unchanged ones). The loop hands those answers to :meth:`DiscoverySide.heard`, which admits the
page's links through the source's scope and trap rules and queues those nobody knows yet as
*leads* (oldest first, at most ``MAX_LEADS``). Each slot, discovery polls its leads first, and
again once the scheduler's polls of the slot are done (``repolled``: a link heard in a slot
is polled in it, time permitting), with its own share and each source's per-slot and per-run
budgets; a lead is recorded new by the
same rule as above (depth and path length 1, via its start page). Whatever share is left goes
to the crawl over the start pages that are *not* watched (the bandit path; a watched start page
is never polled by discovery itself). Links are extracted in the service, not in the crawl
workers: a changed section page is a few tens of kB, a handful a slot, so shipping the body is
cheaper than a second parser contract. Sitemaps and feeds are not fed this way (their own
reader keeps their ``lastmod`` dates).

*Paced by yield.* Left to its own objective (changes caught per poll, indifferent to when), the
scheduler read each of 50 section pages about once in 150 slots with 40 re-polls a slot over
5,000 watched pages: 5% of the new pages were found within 5 slots. Each watched start page
therefore gets a floor, a poll at least every ``discovery_start_interval_slots`` (3) while it
yields new pages, at growing intervals while it does not (``crawler.discovery.StartPacer``,
credited here when a lead heard from it is recorded new). The floors go to the scheduler's
guard as lower bounds (``Constraints.set_floors``), merged with the operator's; together they
take at most ``PACED_SHARE`` of the scheduler's polls. Measured (docs/discovery.md): 99% of the
new pages found within 5 slots, 1% of discovery's downloads not new.

*Sitemaps and feeds* are hostile input read by the service, not by the crawl workers. A
listing body is hashed, then read in the listing worker process (``crawler.listings``: streamed,
capped, with a deadline; a slot waits a quarter of its length for it, then the read goes on in
the background and its links reach the crawl at its next turn). The same body is never parsed
twice, and a listing is asked for again at most as often as it changes
(``crawler.discovery.ListingPacer``: 1 slot after a change, doubling while unchanged or
failing); a failing or looping listing is warned about once, then logged at DEBUG. Before, a
49 MB sitemap was parsed on the event loop every slot (1 s slots lasted 6-9 s); measured
through the service now, the other hosts keep their polls (docs/discovery.md).

*Traps* (a site that makes up new links on every fetch) are held in three places: the links
heard from a start page are canonicalized with the session rules and the one-off values the
``OneOffLearner`` learned from that page's fetches (``crawler.discovery._sessions``); each
source records at most ``discovery_max_new_per_slot`` / ``_per_day`` new pages and, with
``auto_watch``, has at most ``discovery_max_auto_watched`` on the watch list (a source past its
caps gets no leads queued or polled); and every URL discovery watched has a ceiling in the
scheduler's guard (``watched_ceilings``), so together they take at most
``discovery_watched_share`` of its polls (``crawler.service._trap_caps``). Every map here that
grows with what sites return is bounded (``MAX_*`` above, ``MAX_LINKED`` per slot).

The clock is injectable (``clock``): the verdict "no older than 24 h" compares page dates with
it, so a test serving a site in simulated time gives the matching clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from selectolax.lexbor import LexborHTMLParser
from yarl import URL

from crawler.detect import decode
from crawler.discovery import (
    MAX_AGE,
    Listing,
    ListingPacer,
    OneOffLearner,
    Refusal,
    Scope,
    SeedBandit,
    SitemapError,
    SourceBudget,
    SourceCrawl,
    StartPacer,
    canonical_url,
    extract_links,
    looks_like_listing,
    page_text,
    words,
)
from crawler.fetch import validate_url
from crawler.listings import ListingLimits, ListingReader
from crawler.metrics import CrawlerMetrics
from crawler.service._trap_caps import NewPageCaps, day_start, watched_ceilings
from crawler.settings import Settings
from crawler.sites import site_of
from crawler.store import (
    DiscoveryStore,
    Found,
    NewUrl,
    SlotDiscovery,
    SourceRow,
    SourceSpec,
    Store,
    StoreError,
)
from crawler.workers import PollAnswer, Poller, PollJob

log = logging.getLogger("crawler.service")

#: share of a topic's keywords a new page must contain to be recorded (with a topic)
TOPIC_MIN = 0.5
#: statuses that make a discovered page expire at once
DEAD_STATUSES = frozenset({404, 410})
#: a source's per-run budget when the operator set none
UNLIMITED = 10**9
#: URLs a source's crawl may hand out in one round without one needing a poll (already
#: polled this slot by the scheduler or by another source) before it waits for the next round
MAX_SKIPS = 50
#: how long a URL refused by robots.txt is not polled again by discovery (the fetcher's
#: robots.txt cache time); at most this many such URLs are remembered
ROBOTS_MEMORY_S = 3600.0
MAX_ROBOTS_MEMORY = 10_000
#: pages whose validators and HTML are kept, to ask for them conditionally (least recently
#: read dropped first): a 304 costs a request but no download, and the links are the same
MAX_READ_PAGES = 2_000
#: how often the expiry by age runs (an UPDATE over every live discovered row)
AGE_EXPIRY_EVERY_S = 3600.0
#: start pages kept in a source's saved state
SAVED_SEEDS = 100
#: links heard from the scheduler's polls of start pages, waiting for a discovery poll (the
#: oldest dropped first)
MAX_LEADS = 10_000
#: the most of the scheduler's polls per slot the watched start pages' floors may take
#: together (crawler.discovery._pacing; scaled down together past it)
PACED_SHARE = 0.5
#: watched URLs whose sitemap or feed ``lastmod`` moved, waiting to be re-polled (oldest
#: dropped first)
MAX_HINTED = 10_000
#: with every active source's start pages watched, discovery's polls are only the links the
#: scheduler's reads heard (and lastmod hints): it keeps what they need of its share and the
#: rest goes back to the scheduler: twice the most of them waiting at a slot's start over
#: the last LEAD_WINDOW slots (the current slot's included), at least MIN_LEAD_RESERVE
LEAD_WINDOW = 20
MIN_LEAD_RESERVE = 2
#: the smallest capacity (polls per slot) that gives discovery a poll: one for it, one at
#: least for the re-polling side (below it discovery gets none: said at start and in
#: ``crawler sources list``)
MIN_DISCOVERY_CAPACITY = 2.0
#: the most of the paced share the first reads of start pages to judge may take
FIRST_READ_SHARE = 0.5
#: slots a source's page waits on the watch list for the re-polling side's first read
#: (its body builds the source's crawl) before discovery reads it itself
FIRST_READ_WAIT = 6
#: source pages a slot whose first read discovery makes itself (the others wait for the
#: scheduler's: ``_first_by_scheduler``)
OWN_FIRST_READS = 1
#: entries of a sitemap read at most to find its most recent ones (the protocol's limit)
LISTING_READ_ENTRIES = 50_000
#: listing failures that may not happen again with the same body (the rest are remembered
#: with its hash: the same bytes are not read again to fail the same way)
TRANSIENT_LISTING_FAILURES = frozenset({"timeout", "worker_lost"})
#: listings warned about (a loop, a cut at the size bound), once each (then forgotten past
#: this many)
MAX_WARNED = 10_000
#: listings read and waiting for their crawl to want them again (the oldest dropped first)
MAX_FRESH_LISTINGS = 1_000
#: share of a slot a listing read is waited for before it goes on in the background
LISTING_GRACE = 0.25
#: links remembered per slot as linked by a fetched page (they refresh ``last_linked_at``;
#: a page listing more has the rest left out this slot)
MAX_LINKED = 50_000


@dataclass(frozen=True, slots=True)
class DiscoverySummary:
    """What one slot's discovery did."""

    polls: int = 0
    errors: int = 0
    deferred: int = 0
    #: polls answered 304: the page had not changed since discovery last read it
    not_modified: int = 0
    found: int = 0
    watched: int = 0
    expired: int = 0
    #: polls per source id
    by_source: dict[int, int] = field(default_factory=dict)
    #: the URLs discovery polled this slot (for tests and logs)
    polled: tuple[str, ...] = ()
    #: disc-fix: the URLs discovery downloaded this slot (a 200 with a body; 304s are not)
    downloaded: tuple[str, ...] = ()
    #: disc-fix: polls of leads (links heard from the scheduler's polls of start pages)
    lead_polls: int = 0
    #: disc-fix: the URLs discovery polled this slot that answered 304
    unmodified: tuple[str, ...] = ()


@dataclass
class _Source:
    row: SourceRow
    crawl: SourceCrawl | None = None
    topic: frozenset[str] = frozenset()
    #: where its start pages came from: "state" (saved), "page" (its links), "source" (itself)
    started_from: str = ""
    #: disc-fix: its start pages are on the watch list (the scheduler reads them)
    fed: bool = False
    #: the slot its page went on the watch list for the scheduler's first read (None: not
    #: asked; -1: discovery reads it itself, see ``_first_by_scheduler``)
    asked_at: int | None = None


@dataclass
class _Slot:
    """One slot's discovery in progress."""

    picked: set[str]
    deadline: float
    bodies: dict[str, str | None] = field(default_factory=dict)  # polled here: html or None
    # disc-feeds: a sitemap or feed read (in the listing worker) or why it could not be, and
    # the URLs answered 304 to a conditional poll or with the same listing body as last time
    # (their links read last time stand)
    listings: dict[str, Listing | SitemapError] = field(default_factory=dict)
    unchanged: set[str] = field(default_factory=set)
    dates: dict[str, float | None] = field(default_factory=dict)
    record: SlotDiscovery = field(default_factory=SlotDiscovery)
    ages: list[float | None] = field(default_factory=list)
    polls: int = 0
    errors: int = 0
    deferred: int = 0
    not_modified: int = 0
    dead: set[str] = field(default_factory=set)
    out_of_time: bool = False
    downloaded: list[str] = field(default_factory=list)
    lead_polls: int = 0
    own_first: int = 0  # source pages discovery read itself for the first time


class DiscoverySide:
    """The discovery share of the crawl loop's slots."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        poller: Poller,
        metrics: CrawlerMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = DiscoveryStore(store)
        self._store = store
        self.poller = poller
        self.metrics = metrics
        self.clock = clock
        self.sources: dict[int, _Source] = {}
        self.known: set[str] | None = None
        self.last = DiscoverySummary()
        self._dead: set[str] = set()
        self._unsaved: SlotDiscovery | None = None
        self._ids = 0
        self._rotation = 0
        self._aged_at = -math.inf
        self._was_active = False
        self._robots: dict[str, float] = {}  # URL -> when robots.txt refused it
        #: sources saved with options this release cannot run (a pattern RE2 refuses): id ->
        #: (their options, why); skipped, not crawled, until added again
        self.unusable: dict[int, tuple[SourceSpec, str]] = {}
        #: which sources this process runs (a cluster worker: those of its leased sites)
        self.owns: Callable[[str], bool] | None = None
        # URL -> (ETag, Last-Modified, html, date) of pages read: asked again conditionally
        self._read: OrderedDict[str, tuple[str | None, str | None, str, float | None]] = (
            OrderedDict()
        )
        # disc-fix: start pages on the watch list -> the sources whose start pages they are;
        # links heard from the scheduler's polls of them -> (source id, the page, its depth);
        # start pages still to add to the watch list; pages those polls found linked
        self._fed: dict[str, set[int]] = {}
        self._leads: OrderedDict[str, tuple[int, str, int]] = OrderedDict()
        self._to_watch: dict[str, int] = {}
        self._heard_linked: set[str] = set()
        # start pages that were unknown links of a source page's first read (a new article
        # listed there, or a section the crawler never saw) -> (source id, that page): read
        # by the scheduler at once, and their first body judged new or not (``_unjudged``);
        # what the scheduler's reads found new, recorded with the slot
        self._unjudged: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._heard_found: list[tuple[Found, float | None]] = []
        self._in_flight: set[str] = set()  # leads being polled (heard again meanwhile: no)
        # watched start pages read at least every few slots while they yield new pages
        # (crawler.discovery._pacing): their floors go to the scheduler as lower bounds
        self.pacer = StartPacer(
            target_slots=settings.discovery_start_interval_slots,
            min_yield=settings.discovery_start_min_yield,
        )
        self._fed_ids: dict[str, int] = {}  # a watched start page's URL id (``_add_starts``)
        self._slot_no = 0  # discovery's own slot count (the pacer's clock)
        # watched URLs a sitemap or feed says changed ("lastmod moved"): the re-polling side
        # polls them in the next slot, out of discovery's share (``take_hinted``)
        self._hinted: OrderedDict[str, None] = OrderedDict()
        self._hint_polls = 0  # how many of this slot's re-polls were hinted
        self._waiting: deque[int] = deque(maxlen=LEAD_WINDOW)  # leads + hints at slot starts
        self._starved = False  # the capacity gives discovery no poll (warned once)
        # sitemaps and feeds: read in a worker process with a deadline (crawler.listings), and
        # again at most as often as they change (crawler.discovery._relisting)
        self.listings = ListingReader(
            ListingLimits(
                settings.discovery_listing_max_bytes,
                LISTING_READ_ENTRIES,
                settings.discovery_listing_entries,
            ),
            settings.discovery_listing_timeout_s,
        )
        self.relisting = ListingPacer(settings.discovery_listing_max_interval_slots)
        self._warned: set[tuple[str, str]] = set()
        # listings being read (never waited for by a slot), and those read and not yet handed
        # to the crawl that polled them: it gets them the next time it wants the listing
        self._reading: dict[str, asyncio.Task[None]] = {}
        self._fresh: OrderedDict[str, Listing | SitemapError] = OrderedDict()
        # traps (crawler.service._trap_caps): new pages per source per slot and day; one-off
        # link values learned from the start pages' fetches; the URL ids of the pages
        # discovery auto-watched (with the start pages: bounded share of the scheduler)
        self.caps = NewPageCaps(
            settings.discovery_max_new_per_slot, settings.discovery_max_new_per_day
        )
        self.learner = OneOffLearner()
        self._auto_ids: set[int] | None = None
        self._caps_loaded = False
        self._watch_capped_logged = False

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

    # ----- sources and capacity ----------------------------------------------------------

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
                self.sources[sid] = _Source(row, topic=topic)
        if self.sources and self.known is None:
            self.known = await asyncio.to_thread(self.store.known_urls)
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

    # ----- disc-fix: the scheduler's polls of start pages feed discovery ------------------

    def mark(self, jobs: list[PollJob]) -> list[PollJob]:
        """The re-polling side's jobs, those of start pages discovery reads asking for the
        body too (``keep_body``)."""
        fed = self._fed
        if not fed:
            return jobs
        return [j._replace(keep_body=True) if j.url in fed else j for j in jobs]

    def start_floors(self, capacity: float) -> dict[int, float]:
        """The watched start pages' lower bounds (URL id -> polls per slot) from their yield,
        together at most ``PACED_SHARE`` of the scheduler's ``capacity`` (a page whose id is
        not known yet, not added to the watch list yet, has none)."""
        if not self.pacer:
            return {}
        # the start pages to judge at their first read (``_unjudged``) are read at once, with
        # at most half the paced share between them; the pacer's floors share the rest
        first = [u for u in self._unjudged if u in self._fed_ids]
        each = min(1.0, FIRST_READ_SHARE * PACED_SHARE * capacity / max(len(first), 1))
        floors = self.pacer.floors(self._slot_no, PACED_SHARE * capacity - each * len(first))
        for url in first:
            floors[url] = max(each, floors.get(url, 0.0))
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
        published = _published(html, last_modified)
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
            if listing:
                source.asked_at, source.fed = -1, False
                continue
            self._start(source, html)

    def _first_by_scheduler(self, source: _Source, slot: _Slot) -> bool:
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
        after the next), and with the front page marked 86% of the new pages were found
        within 5 slots instead of 100% (a poll spent on a page that is not new, once)."""
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

    def _unfeed(self, sid: int) -> None:
        """A source removed or changed: its start pages no longer feed it."""
        for url in list(self._fed):
            self._fed[url].discard(sid)
            if not self._fed[url]:
                del self._fed[url]
                self.pacer.remove(url)
                self._fed_ids.pop(url, None)
        for url in [u for u, lead in self._leads.items() if lead[0] == sid]:
            del self._leads[url]
        for url in [u for u, (s, _) in self._unjudged.items() if s == sid]:
            del self._unjudged[url]

    def _feed(self, source: _Source, seeds: list[str], listing: bool) -> None:
        """Put a source's start pages on the watch list (at the next record), so the
        re-polling scheduler reads them and its hits feed this source."""
        if not self.settings.discovery_watch_starts or listing:
            source.fed = False
            return
        for url in seeds:
            self._fed.setdefault(url, set()).add(source.row.id)
            self._to_watch[url] = source.row.id
            self.pacer.add(url, self._slot_no, marked=url == source.row.url)
        self.pacer.restore(_saved_pace(source.row.state), self._slot_no)
        source.fed = True

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

    async def _poll_leads(self, slot: _Slot, budget: int, stop: asyncio.Event | None) -> None:
        """Poll the leads, oldest first, with discovery's share and each source's budgets;
        record the new ones."""
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
                await self._fetch(slot, sorted(self._in_flight))
                slot.lead_polls += len(batch)
                for url, sid, via, depth in batch:
                    slot.record.polls[sid] = slot.record.polls.get(sid, 0) + 1
                    if self._lead_fetched(self.sources[sid], url, depth, slot):
                        self.pacer.credit(via, self._slot_no)  # the start page paid
            finally:
                self._in_flight = set()

    def _lead_fetched(self, source: _Source, url: str, depth: int, slot: _Slot) -> bool:
        """A lead polled: judged (``_judge``) and recorded with the slot when new. True when
        it was."""
        html = slot.bodies.get(url)
        if html is None:
            return False
        published = slot.dates.get(url)
        found = self._judge(source, url, html, published, depth)
        if found is None:
            return False
        slot.record.found.append(found)
        slot.ages.append(None if published is None else found.found_at.timestamp() - published)
        return True

    def _judge(
        self, source: _Source, url: str, html: str, published: float | None, depth: int
    ) -> Found | None:
        """A page read for the first time through a start page of ``source``: new by the
        driver's rule (not known, no older than its max age) and, with a topic, on topic,
        within the source's caps: its record (None when not new; known from then on)."""
        crawl = source.crawl
        assert crawl is not None
        now = self.clock()
        if now - (now if published is None else published) > MAX_AGE:
            crawl.known.add(url)  # an old page: known now, not new
            return None
        score = _topic_score(source.topic, html) if source.topic else None
        on_topic = score is None or score >= TOPIC_MIN
        if on_topic and (cap := self.caps.take(source.row.id, now, source.row.url)) is not None:
            self.metrics.observe_capped(cap, 1)  # past its caps: dropped, not even known
            return None
        for other in self.sources.values():
            if other.crawl is not None:
                other.crawl.known.add(url)
        if self.known is not None:
            self.known.add(url)
        if not on_topic:
            return None
        when = datetime.fromtimestamp(now, UTC)
        lastmod = None if published is None else datetime.fromtimestamp(published, UTC)
        return Found(url, source.row.id, when, depth, 1, lastmod, score)

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

    # ----- a slot ----------------------------------------------------------------------

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
        slot = _Slot(set(picked), deadline)
        slot.dead, self._dead = self._dead, set()
        for source in self.sources.values():
            if source.crawl is not None:
                source.crawl.new_slot()
        self.caps.new_slot()
        if budget > 0:
            await self._poll_leads(slot, budget, stop)  # disc-fix: links the scheduler heard
            await self._polls(slot, budget, stop)
            if repolled is not None and self._fed:  # and those its reads hear in this slot
                timeout = deadline - time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(repolled.wait(), max(0.0, timeout))
                if repolled.is_set():
                    await self._poll_leads(slot, budget, stop)
        await self._watch_starts()  # disc-fix: start pages for the scheduler to read
        slot.record.linked |= self._heard_linked  # linked by a start page the scheduler read
        self._heard_linked = set()
        for found, published in self._heard_found:  # new pages the scheduler's reads found
            slot.record.found.append(found)
            at = found.found_at.timestamp()
            slot.ages.append(None if published is None else at - published)
        self._heard_found = []
        summary = await self._record(slot)
        self.last = summary
        return summary

    async def _polls(self, slot: _Slot, budget: int, stop: asyncio.Event | None) -> None:
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
            wanted: list[tuple[_Source, str]] = []
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
            await self._fetch(slot, sorted(urls_this_round))
            for source, url in wanted:
                left[source.row.id] -= 1
                sid = source.row.id
                slot.record.polls[sid] = slot.record.polls.get(sid, 0) + 1
                self._fetched(source, url, slot)

    def _next(self, source: _Source, slot: _Slot) -> str | None:
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
        if crawl is None or source.fed:  # disc-fix: its start pages are read by the scheduler
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

    def _disallowed(self, url: str) -> bool:
        """Refused by robots.txt less than ``ROBOTS_MEMORY_S`` ago."""
        when = self._robots.get(url)
        return when is not None and time.monotonic() - when < ROBOTS_MEMORY_S

    async def _fetch(self, slot: _Slot, urls: list[str]) -> None:
        """Poll ``urls`` through the service's poller (bodies back, not judged)."""
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
        async for chunk in self.poller.poll_chunks(jobs, slot.deadline):
            answers.extend(chunk)
        for a in answers:
            url = by_id[a.url_id]
            if a.outcome == "deferred":
                slot.deferred += 1
                slot.out_of_time = True
                slot.bodies[url] = None
                slot.dates[url] = None
                continue
            slot.polls += 1
            if a.status in DEAD_STATUSES:
                slot.dead.add(url)
            if a.error_kind == "robots":  # not asked again for ROBOTS_MEMORY_S
                if len(self._robots) >= MAX_ROBOTS_MEMORY:
                    self._robots.clear()
                self._robots[url] = time.monotonic()
            cached = self._read.get(url)
            if a.outcome == "not_modified" and cached is not None:  # read before: the same
                slot.not_modified += 1
                slot.unchanged.add(url)  # disc-feeds: the crawl replays its own links (listings)
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
                html, slot.dates[url] = "", _published("", a.last_modified)
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

    async def _read_listing(self, slot: _Slot, url: str, body: bytes, base: str) -> None:
        """A sitemap or feed: its body hashed first and read (in the listing worker, in the
        background: no slot waits for it) only when the hash differs from the last read's.
        Until the read is done the crawl keeps the links it read last time; a listing that
        failed with these very bytes fails again without being read."""
        digest = hashlib.blake2b(body, digest_size=16).digest()
        if self.relisting.same_body(url, digest):
            reason = self.relisting.failing(url)
            if reason is None:
                slot.unchanged.add(url)  # the crawl replays the links it read last time
                self.relisting.unchanged(url, self._slot_no)
            else:
                slot.listings[url] = SitemapError(reason, "the same body as last time")
                self._listing_failed(url, reason, known=True, digest=digest)
            return
        task = self._reading.get(url)
        if task is None:
            task = asyncio.create_task(self._read_off_loop(url, body, base, digest))
            self._reading[url] = task
        # an ordinary listing is read in milliseconds: waited for a little (then used in this
        # slot); a long read goes on in the background, and the slot does not wait for it
        grace = min(LISTING_GRACE * self.settings.slot_seconds, slot.deadline - time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), max(0.0, grace))
        if (read := self._fresh.pop(url, None)) is not None:
            slot.listings[url] = read
        else:
            slot.unchanged.add(url)  # being read: the links read last time stand meanwhile

    async def _read_off_loop(self, url: str, body: bytes, base: str, digest: bytes) -> None:
        """Read a listing in the worker; its result waits in ``_fresh`` for its crawl."""
        try:
            read = await self.listings.read(body, base)
        except Exception as exc:  # never the service's end: a failed read of this listing
            log.exception("listing %s not read", url)
            read = SitemapError("worker_lost", repr(exc))
        finally:
            self._reading.pop(url, None)
        self._fresh[url] = read
        self._fresh.move_to_end(url)
        while len(self._fresh) > MAX_FRESH_LISTINGS:
            self._fresh.popitem(last=False)
        if isinstance(read, SitemapError):
            kept = None if read.reason in TRANSIENT_LISTING_FAILURES else digest
            self._listing_failed(url, f"{read.reason} {read.detail}".strip(), True, kept)
        else:
            self.relisting.changed(url, self._slot_no, digest)
            if read.too_large:
                self._warn_once(
                    "too_large",
                    url,
                    f"discovery: sitemap {url} is larger than discovery_listing_max_bytes="
                    f"{self.settings.discovery_listing_max_bytes}: only its first "
                    f"{len(read.items)} entries were read (raise the setting to read more)",
                )

    def _warn_once(self, what: str, url: str, message: str) -> None:
        """A WARNING the first time ``what`` happens to ``url``, DEBUG afterwards."""
        key = (what, url)
        if len(self._warned) >= MAX_WARNED:
            self._warned.clear()
        log.log(logging.DEBUG if key in self._warned else logging.WARNING, "%s", message)
        self._warned.add(key)

    def _listing_failed(
        self, url: str, reason: str, known: bool, digest: bytes | None = None
    ) -> None:
        """A read failed: read again at doubling intervals; a listing (``known``) or a
        source's own page is warned about at the first failure of a run, then at DEBUG."""
        first = self.relisting.failed(url, self._slot_no, reason, digest)
        watched = known or any(s.row.url == url for s in self.sources.values())
        level = logging.WARNING if first and watched else logging.DEBUG
        log.log(
            level,
            "discovery: %s could not be read (%s); read again in %d slots",
            url,
            reason,
            self.relisting.interval(url),
        )

    @staticmethod
    def _links(slot: _Slot, html: str, base: str) -> None:
        """The pages ``html`` links (they stay alive: see the expiry rule)."""
        linked = slot.record.linked
        for href, _ in extract_links(html):
            if len(linked) >= MAX_LINKED:
                break
            link = canonical_url(href, base)
            if link is not None:
                linked.add(link)

    def _fetched(self, source: _Source, url: str, slot: _Slot) -> None:
        if source.crawl is None:
            self._start(source, slot.bodies.get(url), self._is_listing(url, slot))
            if isinstance(slot.listings.get(url), Listing):
                self.relisting.forget(url)  # its crawl has not read it yet: read it again
            return
        self._report(source, url, slot)

    def _is_listing(self, url: str, slot: _Slot) -> bool:
        if url in slot.listings or url in self._reading or url in self._fresh:
            return True
        return url in slot.unchanged and url in self.relisting

    def _start(self, source: _Source, html: str | None, listing: bool = False) -> None:
        """Build a source's crawl: its start pages from its saved state, else its page's
        in-scope links (its first poll)."""
        spec = source.row.spec
        scope = _scope(source.row)
        seeds = [source.row.url]
        saved = _saved_seeds(source.row.state)
        source.started_from = "source"
        unknown: list[str] = []
        if saved:
            seeds += [u for u in saved if u != source.row.url]
            source.started_from = "state"
        elif html is not None and self.settings.discovery_seed_links > 0:
            source.started_from = "page"
            probe = SourceBudget(scope)
            for href, _ in extract_links(html):
                admitted = probe.admit(href, source.row.url, 1)
                if isinstance(admitted, Refusal) or admitted in seeds:
                    continue
                seeds.append(admitted)
                if len(seeds) > self.settings.discovery_seed_links:
                    break
            unknown = [u for u in seeds[1:] if self.known is None or u not in self.known]
        checked = SourceBudget(scope)
        seeds = [s for s in seeds if not isinstance(checked.admit(s, None, 0), Refusal)]
        try:
            source.crawl = SourceCrawl(
                source.row.url,
                scope=scope,
                strategy=self.settings.discovery_strategy,
                seeds=seeds or None,
                known=self.known,
                max_step=self.settings.discovery_max_step,
                seed=source.row.id if self.settings.seed is None else self.settings.seed,
                start_choice=self.settings.discovery_start_choice,  # disc-feeds
            )
        except ValueError as exc:
            log.error("source %s cannot be crawled: %s", spec.url, exc)
            return
        source.crawl.restore_starts(_saved_starts(source.row.state))  # disc-feeds
        self._feed(source, seeds, listing)  # disc-fix: the scheduler reads the start pages
        if source.fed:  # judged new or not at the scheduler's first read of each
            for url in unknown:
                if url in self._fed:
                    self._unjudged[url] = (source.row.id, source.row.url)
            while len(self._unjudged) > MAX_LEADS:
                self._unjudged.popitem(last=False)
        log.info("source %s: %d start pages (%s)", spec.url, len(seeds), source.started_from)

    def _report(self, source: _Source, url: str, slot: _Slot) -> None:
        """Hand a polled page to the source's crawl; record it if it was new."""
        crawl = source.crawl
        assert crawl is not None
        html = slot.bodies.get(url)
        published = slot.dates.get(url)
        now = self.clock()
        before = len(crawl.found)
        listing = slot.listings.get(url)  # disc-feeds: sitemaps and feeds, read already
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
        hints = crawl.take_hints()  # disc-feeds: a sitemap's or feed's moved lastmod dates
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
        for d in found:
            score = _topic_score(source.topic, html) if source.topic else None
            if score is not None and score < TOPIC_MIN:
                continue
            if (cap := self.caps.take(source.row.id, now, source.row.url)) is not None:
                self.metrics.observe_capped(cap, 1)  # past its caps: dropped, not recorded
                continue
            when = datetime.fromtimestamp(now, UTC)
            lastmod = None if published is None else datetime.fromtimestamp(published, UTC)
            slot.record.found.append(
                Found(d.url, source.row.id, when, d.depth, d.path_length, lastmod, score)
            )
            slot.ages.append(None if published is None else now - published)
            for other in self.sources.values():
                if other.crawl is not None and other is not source:
                    other.crawl.known.add(d.url)
            if self.known is not None:
                self.known.add(d.url)

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
        return watched_ceilings(ids, share, capacity, others, floors)

    async def _record(self, slot: _Slot) -> DiscoverySummary:
        """Write the slot's discovery (retried with the next slot if the database refuses),
        apply the expiry rule, count the metrics."""
        record = slot.record
        at = record.at = datetime.fromtimestamp(self.clock(), UTC)
        pace = self.pacer.state(self._slot_no) if self.pacer else {}
        for sid, source in self.sources.items():
            if source.crawl is not None and sid in record.polls:
                own = {u: f for u, f in pace.items() if sid in self._fed.get(u, ())}
                record.states[sid] = _state(source.crawl, own)
        if self._unsaved is not None:
            record = _merge(self._unsaved, record)
        watched = expired = 0
        reasons: list[str] = []
        try:
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


def source_problem(row: SourceRow) -> str | None:
    """Why a saved source cannot be crawled (its scope does not build: an include or exclude
    pattern RE2 refuses, saved before the check existed), None when it can."""
    try:
        _scope(row)
    except ValueError as exc:
        return str(exc)
    return None


def _scope(row: SourceRow) -> Scope:
    spec = row.spec
    host = (URL(spec.url).host or "").lower()
    domains = spec.allowed_domains
    if spec.scope == "domain" and not domains:
        domains = (host,)
    return Scope(
        hosts=frozenset({host}),
        allowed_domains=tuple(d.lower() for d in domains),
        include=spec.include,
        exclude=spec.exclude,
        max_depth=spec.max_depth,
        page_budget=spec.budget_per_run or UNLIMITED,
    )


def page_of(
    body: bytes, content_type: str | None, last_modified: str | None
) -> tuple[str, float | None]:
    """What a source's crawl reads of a polled page: its HTML (its ``<a href>`` links are
    followed) and its date (a POSIX time, None if it has none). The one place to teach
    discovery another kind of page (a sitemap, a feed)."""
    html = decode(body, content_type)
    return html, _published(html, last_modified)


def _published(html: str, last_modified: str | None) -> float | None:
    """The page's date: ``article:published_time``, else its ``Last-Modified``; None."""
    try:
        node = LexborHTMLParser(html).css_first('meta[property="article:published_time"]')
        content = node.attributes.get("content") if node is not None else None
        if content:
            when = datetime.fromisoformat(content)
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    except (ValueError, TypeError):
        pass
    if last_modified:
        try:
            return parsedate_to_datetime(last_modified).timestamp()
        except (ValueError, TypeError):
            return None
    return None


def _topic_score(topic: frozenset[str], html: str | None) -> float:
    """The share of the topic's keywords that occur in the page's text."""
    if not topic or html is None:
        return 0.0
    present = set(words(page_text(html)))
    return len(topic & present) / len(topic)


def _state(crawl: SourceCrawl, pace: dict[str, list[float]] | None = None) -> str:
    """A source's learned state: its start pages, best first, over all its foragers, the
    start-page bandit's yields and, for watched start pages, the pacer's figures."""
    best: dict[str, float] = {}
    for forager in crawl.fleet.foragers:
        for url, value in forager.weblog.entries():
            best[url] = max(value, best.get(url, -math.inf))
    ranked = sorted(best.items(), key=lambda kv: -kv[1])[:SAVED_SEEDS]
    # disc-feeds: the start-page bandit's yields, so a restart keeps which sections pay
    state: dict[str, object] = {"seeds": [u for u, _ in ranked], "starts": crawl.start_state()}
    if pace:
        state["pace"] = pace
    return json.dumps(state)


def _saved_seeds(state: str | None) -> list[str]:
    if not state:
        return []
    try:
        seeds = json.loads(state).get("seeds", [])
    except (ValueError, AttributeError):
        return []
    return [s for s in seeds if isinstance(s, str)]


def _saved_starts(state: str | None) -> dict[str, object]:
    """The start-page bandit's saved learning (disc-feeds); {} when absent or unreadable."""
    try:
        starts = json.loads(state or "{}").get("starts", {})
    except (ValueError, AttributeError):
        return {}
    return starts if isinstance(starts, dict) else {}


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


def start_report(state: str | None, settings: Settings) -> list[StartFigures]:
    """A source's start pages from its saved state, the best yield first: which sections
    pay, as learned by the pacer (watched start pages) or the bandit (read by discovery)."""
    figures: list[StartFigures] = []
    pace = _saved_pace(state)
    if pace:
        pacer = StartPacer(
            target_slots=settings.discovery_start_interval_slots,
            min_yield=settings.discovery_start_min_yield,
        )
        for url in pace:
            pacer.add(url, 0)
        pacer.restore(pace, 0)
        for url in pace:
            if url in pacer:
                figures.append(
                    StartFigures(
                        url, "scheduler", pacer.yield_of(url, 0), None, pacer.interval(url, 0)
                    )
                )
    starts = {
        url: v
        for url, v in _saved_starts(state).items()
        if url not in pace and isinstance(v, list) and len(v) == 3
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


def _saved_pace(state: str | None) -> dict[str, object]:
    """The pacer's saved figures of a source's watched start pages; {} when absent."""
    try:
        pace = json.loads(state or "{}").get("pace", {})
    except (ValueError, AttributeError):
        return {}
    return pace if isinstance(pace, dict) else {}


def _merge(old: SlotDiscovery, new: SlotDiscovery) -> SlotDiscovery:
    polls = dict(old.polls)
    for sid, n in new.polls.items():
        polls[sid] = polls.get(sid, 0) + n
    return SlotDiscovery(
        polls, old.found + new.found, old.linked | new.linked, old.states | new.states, new.at
    )
