"""The simulated comparison: every fleet runs, the measures add up, runs are repeatable."""

from __future__ import annotations

import math

import pytest

from crawler.discovery._simulate import STRATEGIES, seeds_of, simulate
from crawler.testsite._graph import generate, rewire

GRAPH = generate(pages=800, sections=10, duration=86_400.0, seed=3)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_each_fleet_finds_new_pages_and_its_measures_add_up(strategy: str) -> None:
    result = simulate(GRAPH, strategy, duration=86_400.0, seed=1)
    assert result.relevant > 0
    assert result.relevant <= result.sent <= result.downloads
    assert result.download_efficiency == pytest.approx(result.relevant / result.downloads)
    assert result.sent_efficiency == pytest.approx(result.relevant / result.sent)
    assert 0.0 <= result.freshness <= 1.0 and result.age_hours >= 0.0
    assert 0.0 < result.recall <= 1.0
    assert 2 <= result.foragers <= 16
    assert not math.isnan(result.delay_hours) and result.delay_hours >= 0.0
    # One download costs 3 simulated seconds: a day is 28,800 downloads (the last step overruns).
    assert 28_800 <= result.downloads < 28_800 + 400


def test_runs_are_repeatable_and_seeds_matter() -> None:
    a = simulate(GRAPH, "rl", duration=43_200.0, seed=4)
    b = simulate(GRAPH, "rl", duration=43_200.0, seed=4)
    c = simulate(GRAPH, "rl", duration=43_200.0, seed=5)
    assert a == b
    assert a != c


def test_seeds_are_the_front_page_and_its_neighbourhood() -> None:
    seeds = seeds_of(GRAPH)
    assert seeds[0] == 0 and len(seeds) == 10
    assert set(seeds[1:]) & set(GRAPH.links_at(0, 0.0))


def test_rewired_graph_runs() -> None:
    result = simulate(rewire(GRAPH), "weblog", duration=43_200.0, seed=1)
    assert result.downloads >= 14_400


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        simulate(GRAPH, "depth_first", duration=100.0)
