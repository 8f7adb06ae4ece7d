"""One source's discovery crawl driven by real fetches: the thin layer the service calls.

The caller owns all I/O and the clock::

    crawl = SourceCrawl("https://example.org/news/", strategy="weblog", known=known_urls)
    while (url := crawl.next_url()) is not None:          # None: budget spent or nothing left
        html, published = fetch(url)                      # the caller's HTTP, robots, host limits
        crawl.fetched(url, html, published=published, now=time.time())
    crawl.new_slot()                                      # at each slot boundary

Adaptation of *Selection in Scale-Free Small World* to a crawler that pays for every download:
the paper's foragers download every page a visited page links to, so the ordering knows the
linked pages' contents. Here a link's state vector is made from what is known without fetching
it (its anchor text and the words of its URL), and only the chosen page is fetched; a step's
reward is the agent's verdict on that page. *New* means: not in ``known`` (the URLs the caller
already watches or has seen) and, when the page carries a date (``published``: a
``Last-Modified`` header, a sitemap ``lastmod``, an ``article:published_time``), no older than
``max_age``. A URL fetched once in a slot is never fetched again in that slot: a forager that
steps onto it again replays the links seen at the first fetch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
from yarl import URL

from crawler.discovery._features import DIMENSIONS, text_state, words
from crawler.discovery._fleets import make_fleet
from crawler.discovery._forager import MAX_AGE, Fleet, Forager
from crawler.discovery._links import extract_links, page_text
from crawler.discovery._ordering import Vector
from crawler.discovery._urls import Refusal, Scope, SourceBudget, canonical_url


@dataclass(frozen=True)
class Discovery:
    """A new page found: where, when, and how far from the start of the path it was."""

    url: str
    found_at: float
    depth: int
    path_length: int


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
        slice_fetches: int = 10,
        max_age: float = MAX_AGE,
        dimensions: int = DIMENSIONS,
        seed: int = 0,
    ) -> None:
        source = canonical_url(source_url)
        if source is None:
            raise ValueError(f"not an http(s) URL: {source_url!r}")
        if slice_fetches < 1:
            raise ValueError("slice_fetches must be >= 1")
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
        self.fleet: Fleet = make_fleet(strategy, starts, dimensions, self.rng, max_age=max_age)
        self.known: set[str] = set(known or ())
        self.found: list[Discovery] = []
        self.fetches = 0
        self.slice_fetches = slice_fetches
        self._in_slice = 0
        self._slot: set[str] = set()
        self._cache: dict[str, tuple[Vector, list[tuple[str, Vector]]]] = {}
        self._pending: tuple[Forager, str] | None = None

    def new_slot(self) -> None:
        """A new slot begins: URLs fetched in the last one may be fetched again."""
        self._slot.clear()

    def next_url(self, max_replays: int = 1_000) -> str | None:
        """The next URL to fetch, or None when the budget is spent (or only URLs already
        fetched in this slot come up ``max_replays`` times in a row)."""
        if self._pending is not None:
            raise RuntimeError(f"{self._pending[1]} was handed out and not reported fetched")
        for _ in range(max_replays):
            if self.budget.exhausted:
                return None
            forager = self.fleet.active
            url = forager.next_url(self.rng)
            cached = self._cache.get(url)
            if url in self._slot and cached is not None:
                forager.observe(url, cached[0], cached[1])
                forager.step_done(0.0)
                self._end_step()
                continue
            if not self.budget.charge():
                return None
            self._pending = (forager, url)
            self._slot.add(url)
            return url
        return None

    def fetched(self, url: str, html: str | None, *, published: float | None, now: float) -> bool:
        """Report the fetch of the URL ``next_url`` returned (``html`` None: it failed).
        True when the page was new (and rewarded)."""
        if self._pending is None or self._pending[1] != url:
            raise ValueError(f"{url!r} is not the URL handed out by next_url")
        forager = self._pending[0]
        self._pending = None
        self.fetches += 1
        depth = self.budget.depth.get(url, 0)
        links: list[tuple[str, Vector]] = []
        state = np.zeros(self.dimensions)
        if html is not None:
            state = text_state(page_text(html), self.dimensions)
            for href, anchor in extract_links(html):
                target = self.budget.admit(href, url, depth + 1)
                if isinstance(target, Refusal):
                    continue
                hint = f"{anchor} {' '.join(words(URL(target).path))}"
                links.append((target, text_state(hint, self.dimensions)))
        self._cache[url] = (state, links)
        forager.observe(url, state, links)
        relevant = False
        reward = 0.0
        if html is not None and url not in self.known:
            date = now if published is None else published
            for sent in forager.select_to_send([(url, date)], now):
                verdict = self.fleet.agent.receive(forager, sent, date, now)
                reward += verdict
                relevant = relevant or verdict > 0
        if relevant:
            self.found.append(Discovery(url, now, depth, len(forager.path)))
        forager.step_done(reward, [state] if relevant else [])
        self.known.add(url)
        self._end_step()
        return relevant

    def _end_step(self) -> None:
        self._in_slice += 1
        if self._in_slice >= self.slice_fetches:
            self.fleet.end_slice(self.rng)
            self._in_slice = 0
