"""One source's discovery crawl driven by real fetches: the thin layer the service calls.

The caller owns all I/O and the clock::

    crawl = SourceCrawl("https://example.org/news/", strategy="weblog", known=known_urls)
    while (url := crawl.next_url()) is not None:          # None: budget spent or nothing left
        html, published = fetch(url)                      # the caller's HTTP, robots, host limits
        crawl.fetched(url, html, published=published, now=time.time())
    crawl.new_slot()                                      # at each slot boundary

Adaptation of *Selection in Scale-Free Small World* to a crawler that pays for every download:
the paper's foragers download, at each step, the chosen page and every page it links to, and
judge them all. Here a step fetches the chosen page and then only the linked pages that are not
``known`` (at most ``lookahead`` of them; a known page cannot be new, so downloading it again
would only cost); the step's reward is the sum of the agent's verdicts on all of them, as in the
paper. A link's state vector is made from its anchor text and URL words until its page is
downloaded. (Measured before the look-ahead, with one fetch per step from a front-page source
on one 5,000-page site: no fleet found a single new page in 200 slots of 10 fetches, because a
new page is two links from the front page and a 100-step path never got there.)

*New* means: not in ``known`` (the URLs the caller already watches or has seen) and, when the
page carries a date (``published``: a ``Last-Modified`` header, a sitemap ``lastmod``, an
``article:published_time``), no older than ``max_age``. A URL fetched once in a slot is never
fetched again in that slot: a forager that steps onto it again replays the links seen at the
first fetch.

Where paths start (``start_choice``): ``"weblog"`` is the paper's rule (each forager draws from the
10 best URLs of its weblog); ``"bandit"`` lets :class:`~crawler.discovery._seeds.SeedBandit`
choose among all the start pages by the new links expected to wait on each (Thompson sampling
over per-page yield rates; see that module for why and for the figures); ``"round_robin"``
takes them in turn, longest ago first (the breadth-first re-crawl baseline). ``min_yield`` > 0
makes ``next_url`` return None when no start page is expected to hold that many new links.

A fetched body may be a sitemap or a feed (``fetched`` takes bytes; sniffed by its root
element): its listed URLs are the page's links, most recent ``lastmod`` first; a sitemap
index's sitemaps become start pages; a listed URL whose ``lastmod`` moved since the last read
is a hint (``hints``; a start page hinted is polled first, see ``_lastmod``). A sitemap or
feed is never itself reported new.
"""

from __future__ import annotations

import random
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field

import numpy as np
from yarl import URL

from crawler.discovery._features import DIMENSIONS, text_state, words
from crawler.discovery._fleets import make_fleet
from crawler.discovery._forager import MAX_AGE, MAX_STEP, Fleet, Forager
from crawler.discovery._lastmod import (
    LastmodTracker,
    Listed,
    Listing,
    looks_like_listing,
    read_listing,
)
from crawler.discovery._links import extract_links, page_text
from crawler.discovery._ordering import Vector
from crawler.discovery._seeds import SeedBandit
from crawler.discovery._sitemaps import SitemapError
from crawler.discovery._urls import Refusal, Scope, SourceBudget, canonical_url

START_CHOICES = ("weblog", "bandit", "round_robin")
MAX_HINTS = 10_000  # "lastmod moved" hints kept for the caller until it takes them
MAX_LISTED_IN = 10_000  # sitemaps remembered with the index that listed them (then forgotten)
MAX_INDEX_DEPTH = 100  # sitemap indexes followed up when looking for a cycle
MAX_CACHED_PAGES = 5_000  # pages whose state and links are kept for a 304 (LRU)


@dataclass
class _Step:
    """A forager's step in progress: its page, then the linked pages fetched with it."""

    forager: Forager
    url: str
    reward: float = 0.0
    relevant_states: list[Vector] = field(default_factory=list)
    lookahead: list[str] | None = None  # None until the step's own page has been fetched


@dataclass(frozen=True)
class Discovery:
    """A new page found: where, when, and how far from the start of the path it was."""

    url: str
    found_at: float
    depth: int
    path_length: int
    via: str = ""  # the page whose link led here (the step's page)
    start: str = ""  # the start page of the path (with start_choice="bandit")


class SourceCrawl:
    """Discovery for one source: a fleet of foragers inside the source's scope and budget."""

    def __init__(
        self,
        source_url: str,
        *,
        scope: Scope | None = None,
        strategy: str = "weblog",
        seeds: list[str] | None = None,
        known: set[str] | None = None,
        slice_steps: int = 10,
        lookahead: int = 20,
        max_step: int = MAX_STEP,
        max_age: float = MAX_AGE,
        dimensions: int = DIMENSIONS,
        seed: int = 0,
        start_choice: str = "weblog",
        min_yield: float = 0.0,
    ) -> None:
        source = canonical_url(source_url)
        if source is None:
            raise ValueError(f"not an http(s) URL: {source_url!r}")
        if slice_steps < 1 or lookahead < 0:
            raise ValueError("slice_steps must be >= 1 and lookahead >= 0")
        if start_choice not in START_CHOICES:
            raise ValueError(f"start_choice must be one of {START_CHOICES}, not {start_choice!r}")
        self.source = source
        self.scope = scope if scope is not None else Scope.same_host(source)
        self.budget = SourceBudget(self.scope)
        starts: list[str] = []
        for raw in seeds or [source]:
            admitted = self.budget.admit(raw, None, 0)
            if isinstance(admitted, Refusal):
                raise ValueError(f"seed {raw!r} refused by the scope: {admitted.value}")
            starts.append(admitted)
        self.rng = random.Random(seed)
        self.dimensions = dimensions
        self.fleet: Fleet = make_fleet(
            strategy,
            starts,
            dimensions,
            self.rng,
            max_age=max_age,
            max_step=max_step,
            ties=self.rng,
        )
        self.known: set[str] = set(known or ())
        self.found: list[Discovery] = []
        self.fetches = 0
        self.slice_steps = slice_steps
        self._in_slice = 0
        self._slot: set[str] = set()
        # pages read (their state and links, replayed on a 304): the least recently read
        # dropped first past MAX_CACHED_PAGES, so memory is bounded whatever a site returns
        self._cache: OrderedDict[str, tuple[Vector, list[tuple[str, Vector]]]] = OrderedDict()
        self.lookahead = lookahead
        self._step: _Step | None = None
        self._pending: str | None = None
        self.slot = 0
        self.min_yield = min_yield
        self.bandit = (
            None
            if start_choice == "weblog"
            else SeedBandit(
                starts,
                rng=self.rng,
                policy="thompson" if start_choice == "bandit" else "round_robin",
            )
        )
        self._path_seed: dict[int, str] = {}
        self.lastmod = LastmodTracker()
        self.hints: deque[Listed] = deque(maxlen=MAX_HINTS)  # the newest kept
        self.listing_errors: Counter[str] = Counter()
        #: a sitemap listed by an index -> the index that listed it first (cycles are dropped)
        self._listed_in: dict[str, str] = {}
        self.not_modified = 0  # fetches answered 304 (no download)

    def new_slot(self) -> None:
        """A new slot begins: URLs fetched in the last one may be fetched again."""
        self._slot.clear()
        self.slot += 1

    def hint(self, url: str) -> None:
        """The caller learned that this start page changed (say, a sitemap read elsewhere):
        poll it first (only with ``start_choice="bandit"``)."""
        if self.bandit is not None:
            canonical = canonical_url(url)
            if canonical is not None:
                self.bandit.hint(canonical)

    def start_state(self) -> dict[str, list[float]]:
        """The start-page bandit's learning, to save (empty without one)."""
        return self.bandit.state() if self.bandit is not None else {}

    def restore_starts(self, state: dict[str, object]) -> int:
        """Take back a saved :meth:`start_state`; how many start pages it restored."""
        return self.bandit.restore(state, self.slot) if self.bandit is not None else 0

    def take_hints(self) -> list[Listed]:
        """The URLs whose ``lastmod`` moved since the caller last took them (oldest first)."""
        hints = list(self.hints)
        self.hints.clear()
        return hints

    def start_shares(self) -> dict[str, float]:
        """Each start page's share of the paths started so far (``start_choice="bandit"``)."""
        return self.bandit.shares() if self.bandit is not None else {}

    def next_url(self, max_replays: int = 1_000) -> str | None:
        """The next URL to fetch, or None when the budget is spent (or only URLs already
        fetched in this slot come up ``max_replays`` times in a row)."""
        if self._pending is not None:
            raise RuntimeError(f"{self._pending} was handed out and not reported fetched")
        for _ in range(max_replays):
            step = self._step
            if step is not None and step.lookahead is not None:
                while step.lookahead:
                    link = step.lookahead.pop(0)
                    if link in self._slot or link in self.known:
                        continue
                    if not self.budget.charge():
                        self._finish_step()
                        return None
                    return self._hand_out(link)
                self._finish_step()
            if self.budget.exhausted:
                return None
            forager = self.fleet.active
            start: str | None = None
            if self.bandit is not None and forager.path_due:
                start = self.bandit.choose(self.slot, self._slot)
                thompson = self.bandit.policy == "thompson"
                if start is None or (thompson and self.bandit.best_priority < self.min_yield):
                    return None
            url = forager.next_url(self.rng, start)
            if start is not None and self.bandit is not None:
                self._path_seed[forager.ident] = start
                self.bandit.polled(start, self.slot)
            self._step = _Step(forager, url)
            cached = self._cache.get(url)
            if url in self._slot and cached is not None:
                forager.observe(url, cached[0], cached[1])
                self._finish_step()
                continue
            if not self.budget.charge():
                return None
            return self._hand_out(url)
        return None

    def fetched(
        self,
        url: str,
        html: str | bytes | None,
        *,
        published: float | None,
        now: float,
        not_modified: bool = False,
        listing: Listing | SitemapError | None = None,
    ) -> bool:
        """Report the fetch of the URL ``next_url`` returned (``html`` None: it failed; bytes:
        the raw body, which may be a sitemap or a feed, plain or gzip; ``not_modified``: a
        conditional request answered 304, so the links read last time stand; ``listing``: the
        body was a sitemap or feed the caller read already, ``html`` is then ignored). True
        when the page was new (and rewarded)."""
        if self._pending is None or self._pending != url or self._step is None:
            raise ValueError(f"{url!r} is not the URL handed out by next_url")
        self._pending = None
        self.fetches += 1
        step = self._step
        depth = self.budget.depth.get(url, 0)
        links: list[tuple[str, Vector]] = []
        state = np.zeros(self.dimensions)
        cached = self._cache.get(url) if not_modified else None
        if not_modified:
            self.not_modified += 1
            html = None
            if cached is not None:
                state, links = cached
        elif listing is not None:
            links = self._read_listing(url, listing, depth, step)
            html = None
        elif isinstance(html, bytes):
            if looks_like_listing(html):
                links = self._read_listing(url, read_listing(html, url), depth, step)
                html = None
            else:
                html = html.decode("utf-8", "replace")
        if html is not None:
            state = text_state(page_text(html), self.dimensions)
            for href, anchor in extract_links(html):
                target = self.budget.admit(href, url, depth + 1)
                if isinstance(target, Refusal):
                    continue
                hint = f"{anchor} {' '.join(words(URL(target).path))}"
                links.append((target, text_state(hint, self.dimensions)))
        self._cache[url] = (state, links)
        self._cache.move_to_end(url)
        while len(self._cache) > MAX_CACHED_PAGES:
            self._cache.popitem(last=False)
        if step.lookahead is None:  # the step's own page
            step.forager.observe(url, state, links)
            unknown = [link for link, _ in links if link not in self.known]
            step.lookahead = unknown[: self.lookahead]
        else:  # a linked page downloaded at this step
            step.forager.frontier.update_state(url, state)
        relevant = False
        if html is not None and url not in self.known:
            date = now if published is None else published
            for sent in step.forager.select_to_send([(url, date)], now):
                verdict = self.fleet.agent.receive(step.forager, sent, date, now)
                step.reward += verdict
                relevant = relevant or verdict > 0
        start = self._path_seed.get(step.forager.ident, "")
        if relevant:
            self._credit(step.forager, 1.0)
            step.relevant_states.append(state)
            self.found.append(
                Discovery(url, now, depth, len(step.forager.path), via=step.url, start=start)
            )
        self.known.add(url)
        step.lookahead = [u for u in step.lookahead if u not in self._slot and u not in self.known]
        if not step.lookahead:
            self._finish_step()
        return relevant

    def _credit(self, forager: Forager, amount: float) -> None:
        seed = self._path_seed.get(forager.ident)
        if self.bandit is not None and seed is not None:
            self.bandit.credit(seed, amount)

    def _read_listing(
        self, url: str, listing: Listing | SitemapError, depth: int, step: _Step
    ) -> list[tuple[str, Vector]]:
        """A sitemap's or feed's URLs as links (most recent first); hints from moved dates.
        A sitemap index listing itself or one of the indexes that led to it (a cycle) has that
        entry dropped and counted as a ``loop`` error."""
        if isinstance(listing, SitemapError):
            self.listing_errors[listing.reason] += 1
            return []
        if listing.too_large:  # read to its size bound only: its first entries are used
            self.listing_errors["too_large"] += 1
        admitted: list[tuple[float, str]] = []
        dates: dict[str, float | None] = {}
        index = listing.kind == "sitemapindex"
        above = self._indexes_above(url) if index else set()
        loops = 0
        for item in listing.items:
            target = self.budget.admit(item.url, url, depth + 1)
            if isinstance(target, Refusal):
                continue
            if index:
                if target == url or target in above:
                    loops += 1
                    continue
                if len(self._listed_in) >= MAX_LISTED_IN:
                    self._listed_in.clear()
                self._listed_in.setdefault(target, url)
            dates[target] = item.lastmod
            admitted.append((-(item.lastmod or float("-inf")), target))
            if listing.kind == "sitemapindex" and self.bandit is not None:
                self.bandit.add(target, self.slot)
        moved = self.lastmod.moved([Listed(u, d) for u, d in dates.items()])
        for item in moved:
            self.hints.append(item)
            if self.bandit is not None:
                self.bandit.hint(item.url)
        self._credit(step.forager, float(len(moved)))
        if loops:
            self.listing_errors["loop"] += 1
        admitted.sort(key=lambda pair: pair[0])
        return [(u, text_state(" ".join(words(URL(u).path)), self.dimensions)) for _, u in admitted]

    def _indexes_above(self, url: str) -> set[str]:
        """The sitemap indexes that led to ``url`` (the one that listed it first, and so on)."""
        above: set[str] = set()
        parent = self._listed_in.get(url)
        while parent is not None and parent not in above and len(above) < MAX_INDEX_DEPTH:
            above.add(parent)
            parent = self._listed_in.get(parent)
        return above

    def _hand_out(self, url: str) -> str:
        self._pending = url
        self._slot.add(url)
        return url

    def _finish_step(self) -> None:
        step = self._step
        self._step = None
        if step is None:
            return
        step.forager.step_done(step.reward, step.relevant_states)
        self._end_step()

    def _end_step(self) -> None:
        self._in_slice += 1
        if self._in_slice >= self.slice_steps:
            self.fleet.end_slice(self.rng)
            self._in_slice = 0
