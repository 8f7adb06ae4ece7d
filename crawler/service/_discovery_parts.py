"""The parts of discovery in the service: its limits, what a slot of it holds, the
scope of a source and what it reads of a page. (The behaviour: ``crawler.service._discovery``.)"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from yarl import URL

from crawler.detect import decode
from crawler.discovery import Listing, Scope, SitemapError, SourceCrawl, page_date
from crawler.store import SlotDiscovery, SourceRow

#: statuses that make a discovered page expire at once
DEAD_STATUSES = frozenset({404, 410})
#: a source's per-run budget when the operator set none
UNLIMITED = 10**9
#: URLs a source's crawl may hand out in one round without one needing a poll (already
#: polled this slot by the scheduler or by another source) before it waits for the next round
MAX_SKIPS = 50
MAX_ROBOTS_MEMORY = 10_000
#: pages whose validators and HTML are kept, to ask for them conditionally (least recently
#: read dropped first): a 304 costs a request but no download, and the links are the same
MAX_READ_PAGES = 2_000
#: how often the expiry by age runs (an UPDATE over every live discovered row)
AGE_EXPIRY_EVERY_S = 3600.0
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
    #: the URLs discovery downloaded this slot (a 200 with a body; 304s are not)
    downloaded: tuple[str, ...] = ()
    #: polls of leads (links heard from the scheduler's polls of start pages)
    lead_polls: int = 0
    #: the URLs discovery polled this slot that answered 304
    unmodified: tuple[str, ...] = ()


@dataclass
class SourceRun:
    row: SourceRow
    crawl: SourceCrawl | None = None
    topic: frozenset[str] = frozenset()
    #: where its start pages came from: "state" (saved), "page" (its links), "source" (itself)
    started_from: str = ""
    #: its start pages are on the watch list (the scheduler reads them)
    fed: bool = False
    #: the slot its page went on the watch list for the scheduler's first read (None: not
    #: asked; -1: discovery reads it itself, see ``_first_by_scheduler``)
    asked_at: int | None = None


@dataclass
class SlotWork:
    """One slot's discovery in progress."""

    picked: set[str]
    deadline: float
    #: the slot's stop (the service's, or a lapsed cluster permit): no poll goes on past it
    stop: asyncio.Event | None = None
    bodies: dict[str, str | None] = field(default_factory=dict)  # polled here: html or None
    # a sitemap or feed read (in the listing worker) or why it could not be, and
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


def source_problem(row: SourceRow) -> str | None:
    """Why a saved source cannot be crawled (its scope does not build: an include or exclude
    pattern RE2 refuses, saved before the check existed), None when it can."""
    try:
        scope_of(row)
    except ValueError as exc:
        return str(exc)
    return None


def scope_of(row: SourceRow) -> Scope:
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
    return html, page_date(html, last_modified)


def merge_slots(old: SlotDiscovery, new: SlotDiscovery) -> SlotDiscovery:
    """A slot's record not written yet, merged into the next one's."""
    polls = dict(old.polls)
    for sid, n in new.polls.items():
        polls[sid] = polls.get(sid, 0) + n
    return SlotDiscovery(
        polls, old.found + new.found, old.linked | new.linked, old.states | new.states, new.at
    )
