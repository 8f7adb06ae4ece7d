"""Discovery's state in the service, and what every part of it shares: a source's crawl
built from its start pages, its start pages fed to the re-polling scheduler, and the one path
of a page found new.

``DiscoverySide`` (``crawler.service._discovery``) is this state with its parts stacked on it,
one module each: the listings read off the event loop (``_discovery_listings``), discovery's
own polls with their conditional-GET cache (``_discovery_fetch``), the links heard from the
scheduler's reads of start pages (``_discovery_leads``), the crawl over start pages nobody
watches (``_discovery_crawls``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import UTC, datetime

from crawler.discovery import (
    TOPIC_MIN,
    Listing,
    ListingPacer,
    OneOffLearner,
    Refusal,
    Scope,
    SitemapError,
    SourceBudget,
    SourceCrawl,
    SourceState,
    StartPacer,
    extract_links,
    topic_score,
)
from crawler.listings import ListingLimits, ListingReader
from crawler.metrics import CrawlerMetrics
from crawler.service._discovery_parts import (
    LEAD_WINDOW,
    LISTING_READ_ENTRIES,
    MAX_LEADS,
    DiscoverySummary,
    SlotWork,
    SourceRun,
    scope_of,
)
from crawler.service._pollers import fetch_config
from crawler.service._trap_caps import NewPageCaps
from crawler.settings import Settings
from crawler.sites import url_host_key
from crawler.store import Found, SlotDiscovery, SourceSpec, Store
from crawler.workers import Poller

log = logging.getLogger("crawler.service")


class DiscoveryState:
    """What discovery keeps between slots, and the steps every part of it takes."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        poller: Poller,
        metrics: CrawlerMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.store = store.discovery
        self._store = store
        self.poller = poller
        self.metrics = metrics
        self.clock = clock
        self.sources: dict[int, SourceRun] = {}
        self.known: set[str] | None = None
        #: the (hosts, domains) scopes whose watched URLs ``known`` holds (read per scope:
        #: ``load_known``)
        self._known_scopes: set[tuple[frozenset[str], tuple[str, ...]]] = set()
        self.last = DiscoverySummary()
        self._dead: set[str] = set()
        self._unsaved: SlotDiscovery | None = None
        self._ids = 0
        self._rotation = 0
        self._aged_at = -math.inf
        self._was_active = False
        self._robots: dict[str, float] = {}  # URL -> when robots.txt refused it
        #: how long a URL refused by robots.txt is not polled again (the fetcher's own
        #: robots.txt cache time: asked again sooner, the fetcher would refuse it again)
        self._robots_ttl = fetch_config(settings).robots_ttl_s
        #: sources saved with options this release cannot run (a pattern RE2 refuses): id ->
        #: (their options, why); skipped, not crawled, until added again
        self.unusable: dict[int, tuple[SourceSpec, str]] = {}
        #: which sources this process runs (a cluster worker: those of its leased sites)
        self.owns: Callable[[str], bool] | None = None
        # URL -> (ETag, Last-Modified, html, date) of pages read: asked again conditionally
        self._read: OrderedDict[str, tuple[str | None, str | None, str, float | None]] = (
            OrderedDict()
        )
        # start pages on the watch list -> the sources whose start pages they are;
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
        # source pages put on the watch list for a first read that turned out a sitemap or
        # feed: discovery reads them itself, the scheduler never again (a ceiling of 0)
        self._paused_ids: set[int] = set()
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

    def _start(
        self, source: SourceRun, html: str | None, listing: bool = False, judge: bool = False
    ) -> None:
        """Build a source's crawl: its start pages from its saved state, else its page's
        in-scope links (its first poll). ``judge``: the page's first read was the
        scheduler's, which came slots after the source was marked; its links nobody knew then
        are judged new or not at their own first read (``_unjudged``)."""
        spec = source.row.spec
        scope = scope_of(source.row)
        seeds = [source.row.url]
        saved = SourceState.parse(source.row.state).seeds
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
                known=self._known_in(scope),
                max_step=self.settings.discovery_max_step,
                seed=source.row.id if self.settings.seed is None else self.settings.seed,
                start_choice=self.settings.discovery_start_choice,
            )
        except ValueError as exc:
            log.error("source %s cannot be crawled: %s", spec.url, exc)
            return
        source.crawl.restore_starts(SourceState.parse(source.row.state).starts)
        self._feed(source, seeds, listing)  # the scheduler reads the start pages
        if source.fed and judge:  # judged new or not at the scheduler's first read of each
            for url in unknown:
                if url in self._fed:
                    self._unjudged[url] = (source.row.id, source.row.url)
            while len(self._unjudged) > MAX_LEADS:
                self._unjudged.popitem(last=False)
        log.info("source %s: %d start pages (%s)", spec.url, len(seeds), source.started_from)

    async def load_known(self) -> None:
        """Read the known URLs of the sources' scopes not read yet: a source's crawl asks
        only about links in its scope, so the watched URLs of other sites stay unread (a
        million-URL watch list with a source on one site: that site's URLs)."""
        scopes = [scope_of(source.row) for source in self.sources.values()]
        wanted = {(scope.hosts, scope.allowed_domains) for scope in scopes}
        missing = wanted - self._known_scopes
        if not missing:
            return
        hosts = {h for hs, _ in missing for h in hs}
        domains = {d for _, ds in missing for d in ds}
        found = await asyncio.to_thread(self.store.known_urls, hosts, domains)
        if self.known is None:
            self.known = found
        else:  # the same set: the sources' crawls and the leads ask it
            self.known.update(found)
        self._known_scopes |= missing

    def _known_in(self, scope: Scope) -> set[str] | None:
        """The known URLs a source of ``scope`` may ask about (its crawl keeps its own copy,
        so only its scope's)."""
        if self.known is None:
            return None
        return {u for u in self.known if scope.host_allowed(url_host_key(u))}

    def _feed(self, source: SourceRun, seeds: list[str], listing: bool) -> None:
        """Put a source's start pages on the watch list (at the next record), so the
        re-polling scheduler reads them and its hits feed this source."""
        if not self.settings.discovery_watch_starts or listing:
            source.fed = False
            return
        for url in seeds:
            self._fed.setdefault(url, set()).add(source.row.id)
            self._to_watch[url] = source.row.id
            self.pacer.add(url, self._slot_no, marked=url == source.row.url)
        self.pacer.restore(SourceState.parse(source.row.state).pace, self._slot_no)
        source.fed = True

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

    def _new_page(
        self,
        source: SourceRun,
        url: str,
        html: str | None,
        published: float | None,
        depth: int,
        path_length: int,
    ) -> Found | None:
        """The one path of a page judged new (by the driver's rule, or by ``_judge``): with a
        topic, on topic (``TOPIC_MIN``), and within the source's caps, its record; known from
        then on to every source (even off topic: not new again). None when not recorded."""
        now = self.clock()
        score = topic_score(source.topic, html) if source.topic else None
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
        return Found(url, source.row.id, when, depth, path_length, lastmod, score)

    @staticmethod
    def _keep(slot: SlotWork, found: Found, published: float | None) -> None:
        """A new page's record goes with the slot's (and its age to the metrics)."""
        slot.record.found.append(found)
        at = found.found_at.timestamp()
        slot.ages.append(None if published is None else at - published)
