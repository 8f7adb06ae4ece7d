"""Paper 001's comparison in simulated time: a fleet of foragers crawls a generated site.

The set-up follows *Selection in Scale-Free Small World* (§4.2): one computer runs the foragers
in turn, each for a time slice; a step downloads the chosen page and every page it links to;
each download takes the same simulated time; pages and links appear when the site says so.
Four kinds of fleet share everything but the ordering and the start lists:

- ``weblog``: weblog update (Algorithm 1), fixed random weights per forager (a child gets new
  random ones);
- ``rl``: TD(0) URL ordering, fixed start list (the seeds), children copy the weights;
- ``best_first``: frontier ranked by estimated relevance (cosine to the mean rewarded page);
- ``breadth_first``: frontier first in, first out.

Measures (the paper's Table 1): downloads, URLs sent, relevant found, distinct URLs found,
download efficiency = relevant / downloads, sent efficiency = relevant / sent; freshness and age
of the relevant pages found in each 3-hour window, measured at its end with the definitions of
Cho and Garcia-Molina (a copy is fresh while the page has not been edited since it was fetched;
the age of a stale copy is the time since its first unseen edit), averaged over the windows;
and, for a crawler, the delay from a page's appearance to its discovery and the share of all new
pages discovered (recall).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from crawler.discovery._fleets import STRATEGIES, make_fleet
from crawler.discovery._forager import MAX_AGE, MAX_STEP
from crawler.discovery._topical import FocusedCrawl

WINDOW = 3 * 3600.0


class LinkGraph(Protocol):
    """What the simulation needs of a site (``crawler.testsite._graph.LinkGraph`` has it; the
    discovery package does not depend on the test site)."""

    @property
    def created(self) -> NDArray[np.float64]: ...

    @property
    def topical(self) -> NDArray[np.bool_]: ...

    @property
    def states(self) -> NDArray[np.float64]: ...

    @property
    def edits(self) -> list[list[float]]: ...

    def exists(self, page: int, t: float) -> bool: ...

    def links_at(self, page: int, t: float) -> list[int]: ...


__all__ = [
    "STRATEGIES",
    "FocusedResult",
    "LinkGraph",
    "SimulationResult",
    "seeds_of",
    "simulate",
    "simulate_focused",
]


@dataclass
class SimulationResult:
    strategy: str
    downloads: int
    sent: int
    relevant: int
    found_urls: int
    download_efficiency: float
    sent_efficiency: float
    freshness: float
    age_hours: float
    delay_hours: float
    recall: float
    foragers: int
    births: int
    deaths: int
    steps: int

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def seeds_of(graph: LinkGraph, count: int = 10) -> list[int]:
    """The start page and the first pages a breadth-first crawl from it visits (the paper's
    RL foragers started from the first 10 URLs of its Web experiment)."""
    order: list[int] = []
    queue, seen = [0], {0}
    while queue and len(order) < count:
        page = queue.pop(0)
        order.append(page)
        for link in graph.links_at(page, 0.0):
            if link not in seen:
                seen.add(link)
                queue.append(link)
    return order


def simulate(
    graph: LinkGraph,
    strategy: str,
    *,
    duration: float,
    download_time: float = 3.0,
    slice_time: float = 180.0,
    seed: int = 0,
    max_step: int = MAX_STEP,
    progress: Callable[[float, int], None] | None = None,
) -> SimulationResult:
    """Run one fleet on ``graph`` for ``duration`` simulated seconds."""
    rng = random.Random(seed)
    dimensions = graph.states.shape[1]
    seeds = [str(p) for p in seeds_of(graph)]
    fleet = make_fleet(strategy, seeds, dimensions, rng, max_step=max_step)
    agent = fleet.agent
    states = graph.states
    created = graph.created
    t = 0.0
    slice_end = slice_time
    downloads = steps = 0
    found_urls: set[int] = set()
    found_at: dict[int, float] = {}
    next_report = 86_400.0
    while t < duration:
        forager = fleet.active
        page = int(forager.next_url(rng))
        links = graph.links_at(page, t) if graph.exists(page, t) else []
        downloads += 1 + len(links)
        t += download_time * (1 + len(links))
        steps += 1
        forager.observe(str(page), states[page], [(str(p), states[p]) for p in links])
        found_urls.add(page)
        found_urls.update(links)
        candidates = [(str(p), float(created[p])) for p in (page, *links)]
        total = 0.0
        relevant_states = []
        for url in forager.select_to_send(candidates, t):
            reward = agent.receive(forager, url, float(created[int(url)]), t)
            total += reward
            if reward > 0:
                found_at[int(url)] = t
                relevant_states.append(states[int(url)])
        forager.step_done(total, relevant_states)
        if t >= slice_end:
            fleet.end_slice(rng)
            slice_end = t + slice_time
        if progress is not None and t >= next_report:
            progress(t, len(found_at))
            next_report += 86_400.0
    freshness, age = _freshness_and_age(graph, found_at, duration)
    appeared = np.flatnonzero((created > 0.0) & (created <= duration - MAX_AGE / 24))
    delays = [found_at[p] - created[p] for p in found_at]
    return SimulationResult(
        strategy=strategy,
        downloads=downloads,
        sent=agent.sent,
        relevant=len(agent.relevants),
        found_urls=len(found_urls),
        download_efficiency=len(agent.relevants) / max(downloads, 1),
        sent_efficiency=len(agent.relevants) / max(agent.sent, 1),
        freshness=freshness,
        age_hours=age / 3600.0,
        delay_hours=float(np.mean(delays)) / 3600.0 if delays else float("nan"),
        recall=sum(1 for p in appeared.tolist() if p in found_at) / max(len(appeared), 1),
        foragers=len(fleet.foragers),
        births=fleet.births,
        deaths=fleet.deaths,
        steps=steps,
    )


def _freshness_and_age(
    graph: LinkGraph, found_at: dict[int, float], duration: float
) -> tuple[float, float]:
    """Mean over 3-hour windows of the freshness and age (seconds), at each window's end, of
    the relevant pages found in that window."""
    windows: dict[int, list[int]] = {}
    for page, t in found_at.items():
        windows.setdefault(int(t // WINDOW), []).append(page)
    fresh_means, age_means = [], []
    for w, pages in windows.items():
        end = min((w + 1) * WINDOW, duration)
        fresh, ages = [], []
        for page in pages:
            edits = graph.edits[page]
            i = bisect.bisect_right(edits, found_at[page])
            if i < len(edits) and edits[i] <= end:
                fresh.append(0.0)
                ages.append(end - edits[i])
            else:
                fresh.append(1.0)
                ages.append(0.0)
        fresh_means.append(float(np.mean(fresh)))
        age_means.append(float(np.mean(ages)))
    if not fresh_means:
        return float("nan"), float("nan")
    return float(np.mean(fresh_means)), float(np.mean(age_means))


@dataclass
class FocusedResult:
    ranking: str
    fetched: int
    on_topic: int
    harvest_rate: float
    target_recall: float


def simulate_focused(
    graph: LinkGraph,
    ranking: str,
    *,
    budget: int,
    hint_noise: float = 1.0,
    refresh: int = 100,
    seed: int = 0,
) -> FocusedResult:
    """A topical crawl of the site's initial pages with ``budget`` fetches. A link's hint (what
    its anchor text tells) is the target's state plus Gaussian noise of ``hint_noise`` per
    component (scaled like the states), made unit length. The topic vector is the mean state of
    the on-topic pages (as if the operator had given example pages)."""
    rng = np.random.default_rng(seed)
    pages = np.flatnonzero(graph.created <= 0.0)
    topical = graph.topical & (graph.created <= 0.0)
    topic = graph.states[topical].mean(axis=0)
    dims = graph.states.shape[1]
    noisy = graph.states + hint_noise * rng.normal(size=graph.states.shape) / np.sqrt(dims)
    hints = noisy / np.linalg.norm(noisy, axis=1, keepdims=True)
    crawl = FocusedCrawl([str(p) for p in seeds_of(graph)], topic, ranking, refresh=refresh)
    while len(crawl.fetched) < min(budget, len(pages)):
        url = crawl.next_url()
        if url is None:
            break
        page = int(url)
        links = [(str(p), hints[p]) for p in graph.links_at(page, 0.0)]
        crawl.fetched_page(url, graph.states[page], links)
    on_topic = sum(1 for url in crawl.fetched if graph.topical[int(url)])
    return FocusedResult(
        ranking=ranking,
        fetched=len(crawl.fetched),
        on_topic=on_topic,
        harvest_rate=on_topic / max(len(crawl.fetched), 1),
        target_recall=on_topic / max(int(topical.sum()), 1),
    )
