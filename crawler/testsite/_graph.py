"""A generated site for discovery: a growing scale-free small-world link graph.

Pure generation (NumPy in, arrays out); ``crawler.testsite._graphserver`` serves it over HTTP
and ``crawler.discovery._simulate`` crawls it in simulated time.

How it is built (all from one seed):

- Pages belong to ``sections``; page ``c < sections`` is section c's index page (page 0 is
  also the front page). The other initial pages arrive one by one and link to ``links`` older
  pages: the first chosen by preferential attachment (probability proportional to in-degree +
  1) within its own section (``locality``; otherwise anywhere), each further one with
  probability ``triads`` a page the previous target links to (triad formation, which gives
  the high clustering of a small world), else again by preferential attachment. A linked page
  links back with probability ``backlinks``, so hubs have many out-links too. The result has
  power-law degrees, a few large hubs, high clustering (about 0.6 with navigation links, 0.4
  without; 0.07 and 0.02 rewired) and a small diameter.
- With ``navigation`` (the default), as on a real site, the front page links to every section's
  index and every page links to its own section's index. Without it the front page links to 8
  sections only and a section's index is reached through its members' back-links; then a
  crawler whose ordering never changes (breadth-first, a weblog forager's fixed weights) can
  circle the same 10 start pages' neighbourhoods for weeks without reaching an active section
  (seen: 0 new pages in 18 days for weblog, Best-First and breadth-first on two of three sites).
- New pages appear over ``duration`` seconds (a Poisson process of ``new_per_hour``), in a few
  *active* sections (Zipf weights over ``active_sections`` of them). A new page is listed on its
  section's index page, which shows only its ``listing`` newest pages, and links to older pages
  of its section like the initial pages do. A new page is edited a few times in its first
  hours (``edits`` per page on average, exponential delays of mean ``edit_delay``): that is
  what the freshness and age measures see.
- Each page has a *state vector* (unit length, ``dimensions`` components): its section's
  centroid plus Gaussian noise (``state_noise``; the larger, the less a page's content says
  about where it is), with an extra direction for index pages and one for on-topic pages; it
  stands for what a text classifier makes of the page. ``topic_sections`` whole sections and a
  ``topic_share`` of other pages are on the topic.
- :func:`rewire` keeps every page's in- and out-degree but shuffles the origins and endpoints
  of the links independently (the procedure *Selection in Scale-Free Small World* uses to
  destroy the clustering): a scale-free graph that is no longer a small world. New pages are
  then listed by a random page instead of their section's index.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

OLD = -30 * 86_400.0  # creation time of the initial pages: long before the crawl


@dataclass
class LinkGraph:
    """Pages 0..n-1: static links, creation times, listings of new pages, states, edits."""

    created: NDArray[np.float64]
    section: NDArray[np.int64]
    topical: NDArray[np.bool_]
    states: NDArray[np.float64]
    out: list[list[int]]
    listings: dict[int, list[tuple[float, int]]]  # origin -> (created, page), by creation time
    edits: list[list[float]]  # per page, the times it was edited after creation
    listing: int
    sections: int
    _listing_times: dict[int, list[float]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._listing_times = {o: [t for t, _ in items] for o, items in self.listings.items()}

    @property
    def size(self) -> int:
        return len(self.created)

    def exists(self, page: int, t: float) -> bool:
        return 0 <= page < self.size and bool(self.created[page] <= t)

    def links_at(self, page: int, t: float) -> list[int]:
        """The pages ``page`` links to at time ``t``: its static links to existing pages, then
        the ``listing`` newest pages listed on it (newest first)."""
        created = self.created
        links = [p for p in self.out[page] if created[p] <= t]
        items = self.listings.get(page)
        if items:
            end = bisect.bisect_right(self._listing_times[page], t)
            recent = [p for _, p in items[max(0, end - self.listing) : end]]
            recent.reverse()
            listed = set(recent)
            links = recent + [p for p in links if p not in listed]
        return links

    def version_at(self, page: int, t: float) -> int:
        """How many times the page had been edited by time ``t``."""
        return bisect.bisect_right(self.edits[page], t)

    def new_pages(self) -> NDArray[np.int64]:
        return np.flatnonzero(self.created > 0.0)


def _unit(rows: NDArray[np.float64]) -> NDArray[np.float64]:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    result: NDArray[np.float64] = rows / np.maximum(norms, 1e-12)
    return result


def generate(
    *,
    pages: int = 5_000,
    sections: int = 40,
    links: int = 3,
    locality: float = 0.9,
    triads: float = 0.6,
    backlinks: float = 0.3,
    duration: float = 5 * 86_400.0,
    new_per_hour: float = 8.0,
    active_sections: int = 5,
    listing: int = 20,
    edits: float = 2.0,
    edit_delay: float = 3 * 3600.0,
    dimensions: int = 50,
    state_noise: float = 0.6,
    topic_sections: int = 3,
    topic_share: float = 0.05,
    navigation: bool = True,
    seed: int = 1,
) -> LinkGraph:
    """A growing scale-free small-world site (see the module docstring)."""
    if pages <= sections or sections < 1 or links < 1:
        raise ValueError("need pages > sections >= 1 and links >= 1")
    rng = np.random.default_rng(seed)
    n_new = int(rng.poisson(new_per_hour * duration / 3600.0))
    total = pages + n_new
    created = np.full(total, OLD)
    created[pages:] = np.sort(rng.uniform(0.0, duration, n_new))
    section = np.empty(total, dtype=np.int64)
    section[:sections] = np.arange(sections)
    section[sections:pages] = rng.integers(0, sections, pages - sections)
    active = rng.choice(
        np.arange(1, sections), size=min(active_sections, sections - 1), replace=False
    )
    weights = 1.0 / np.arange(1, len(active) + 1)
    section[pages:] = rng.choice(active, size=n_new, p=weights / weights.sum())

    out: list[list[int]] = [[] for _ in range(total)]
    indegree = np.ones(total)
    members: dict[int, list[int]] = {c: [c] for c in range(sections)}
    for c in range(1, sections):  # the front page links to sections; they link back
        if navigation or c <= 8:
            out[0].append(c)
            indegree[c] += 1
        out[c].append(0)
        indegree[0] += 1

    def attach(v: int) -> None:
        pool = members[int(section[v])] if rng.random() < locality else None
        chosen: list[int] = []
        previous = -1
        for _ in range(links):
            target = -1
            if previous >= 0 and out[previous] and rng.random() < triads:
                target = out[previous][int(rng.integers(len(out[previous])))]
            if target < 0 or target == v or target in chosen:
                candidates = np.asarray(pool if pool is not None else np.arange(v))
                w = indegree[candidates]
                target = int(candidates[rng.choice(len(candidates), p=w / w.sum())])
            if target == v or target in chosen:
                continue
            chosen.append(target)
            previous = target
        for target in chosen:
            out[v].append(target)
            indegree[target] += 1
            if rng.random() < backlinks and created[v] <= OLD:
                out[target].append(v)
                indegree[v] += 1

    for v in range(sections, total):
        attach(v)
        home = int(section[v])
        if navigation and home not in out[v]:
            out[v].append(home)  # the page's "up" link to its section's index
            indegree[home] += 1
        members[home].append(v)

    listings: dict[int, list[tuple[float, int]]] = {}
    for v in range(pages, total):
        listings.setdefault(int(section[v]), []).append((float(created[v]), v))

    topical = np.isin(section, rng.choice(np.arange(1, sections), topic_sections, replace=False))
    topical |= rng.random(total) < topic_share
    centroids = rng.normal(size=(sections, dimensions))
    index_direction = _unit(rng.normal(size=dimensions))
    topic_direction = _unit(rng.normal(size=dimensions))
    raw = centroids[section] + state_noise * rng.normal(size=(total, dimensions))
    raw[:sections] += 3.0 * index_direction
    raw[topical] += 2.0 * topic_direction
    states = _unit(np.tanh(raw))

    page_edits: list[list[float]] = [[] for _ in range(total)]
    for v in range(pages, total):
        count = int(rng.poisson(edits))
        page_edits[v] = sorted(float(created[v] + d) for d in rng.exponential(edit_delay, count))
    return LinkGraph(
        created=created,
        section=section,
        topical=topical,
        states=states,
        out=out,
        listings=listings,
        edits=page_edits,
        listing=listing,
        sections=sections,
    )


def rewire(graph: LinkGraph, seed: int = 2) -> LinkGraph:
    """The same degrees, links' origins and endpoints shuffled independently; new pages are
    listed by random pages (chosen like link origins, i.e. in proportion to out-degree)."""
    rng = np.random.default_rng(seed)
    origins = np.array([u for u, targets in enumerate(graph.out) for _ in targets], dtype=np.int64)
    ends = np.array([v for targets in graph.out for v in targets], dtype=np.int64)
    origins = origins[rng.permutation(len(origins))]
    ends = ends[rng.permutation(len(ends))]
    out: list[list[int]] = [[] for _ in range(graph.size)]
    for u, v in zip(origins.tolist(), ends.tolist(), strict=True):
        if u != v and v not in out[u]:
            out[u].append(v)
    listings: dict[int, list[tuple[float, int]]] = {}
    for items in graph.listings.values():
        for t, page in items:
            origin = int(origins[rng.integers(len(origins))])
            while graph.created[origin] > t:
                origin = int(origins[rng.integers(len(origins))])
            listings.setdefault(origin, []).append((t, page))
    for items in listings.values():
        items.sort()
    return LinkGraph(
        created=graph.created,
        section=graph.section,
        topical=graph.topical,
        states=graph.states,
        out=out,
        listings=listings,
        edits=graph.edits,
        listing=graph.listing,
        sections=graph.sections,
    )


def clustering(graph: LinkGraph, sample: int = 2_000, seed: int = 0) -> float:
    """Mean local clustering coefficient of the undirected initial graph (sampled pages)."""
    rng = np.random.default_rng(seed)
    neighbours: list[set[int]] = [set() for _ in range(graph.size)]
    for u, targets in enumerate(graph.out):
        for v in targets:
            neighbours[u].add(v)
            neighbours[v].add(u)
    chosen = rng.choice(graph.size, size=min(sample, graph.size), replace=False)
    total = 0.0
    for u in chosen.tolist():
        ns = list(neighbours[u])
        k = len(ns)
        if k < 2:
            continue
        closed = sum(1 for i, a in enumerate(ns) for b in ns[i + 1 :] if b in neighbours[a])
        total += 2.0 * closed / (k * (k - 1))
    return total / len(chosen)
