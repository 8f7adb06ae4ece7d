"""The topical score (relevance f/d times HITS hub score) and the focused crawl."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.discovery._simulate import simulate_focused
from crawler.discovery._topical import (
    MIN_DISTANCE,
    FocusedCrawl,
    hub_scores,
    link_relevance,
    topical_relevance,
)
from crawler.testsite._graph import generate


def test_relevance_arithmetic() -> None:
    topic = np.array([1.0, 0.0])
    assert topical_relevance(np.array([0.6, 0.8]), topic) == pytest.approx(0.6)
    assert topical_relevance(np.array([-1.0, 0.0]), topic) == 0.0
    parent = np.array([1.0, 0.0])
    assert link_relevance(0.6, parent, np.array([0.0, 1.0])) == pytest.approx(0.6 / np.sqrt(2))
    assert link_relevance(0.6, parent, parent) == pytest.approx(0.6 / MIN_DISTANCE)


def test_hub_scores_rank_the_page_that_links_to_authorities() -> None:
    # 0 links to 2, 3, 4; 1 links to 2; so 0 is the best hub and 1 the second.
    hubs = hub_scores([(0, 2), (0, 3), (0, 4), (1, 2)], 5)
    assert hubs[0] > hubs[1] > 0 and hubs[2] == hubs[3] == hubs[4] == 0
    assert np.linalg.norm(hubs) == pytest.approx(1.0)
    assert not hub_scores([], 3).any()


def test_focused_crawl_follows_the_best_link() -> None:
    topic = np.array([1.0, 0.0])
    crawl = FocusedCrawl(["s"], topic, ranking="best_first")
    assert crawl.next_url() == "s"
    crawl.fetched_page("s", np.array([1.0, 0.0]), [("a", topic), ("b", topic)])
    first = crawl.next_url()
    assert first == "a"  # equal scores: the first found
    crawl.fetched_page("a", np.array([0.0, 1.0]), [("c", topic)])  # an off-topic page
    crawl.fetched_page("b", np.array([0.8, 0.6]), [("d", topic)])
    assert crawl.next_url() == "d"  # found on the page with the higher f
    with pytest.raises(ValueError, match="unknown ranking"):
        FocusedCrawl([], topic, ranking="depth")


@pytest.mark.parametrize("ranking", ["acla", "best_first"])
def test_topical_rankings_harvest_more_than_breadth_first(ranking: str) -> None:
    graph = generate(pages=2_000, sections=20, duration=3_600.0, seed=11)
    focused = simulate_focused(graph, ranking, budget=400)
    breadth = simulate_focused(graph, "breadth_first", budget=400)
    assert focused.fetched == breadth.fetched == 400
    assert focused.harvest_rate > 1.5 * breadth.harvest_rate
    assert focused.target_recall == pytest.approx(
        focused.on_topic / int((graph.topical & (graph.created <= 0)).sum())
    )
