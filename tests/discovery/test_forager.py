"""Foragers (paths, Algorithm 5), the reinforcing agent's scores and the population rules."""

from __future__ import annotations

import random

import numpy as np
import pytest

from crawler.discovery import (
    BreadthFirstOrdering,
    Fleet,
    Forager,
    ReinforcingAgent,
    ValueOrdering,
    Weblog,
)
from crawler.discovery._forager import MAX_STEP

DIM = 4


def _forager(update_weblog: bool = True, seeds: tuple[str, ...] = ("s",)) -> Forager:
    return Forager(
        Weblog.from_seeds(list(seeds)),
        ValueOrdering(np.zeros(DIM), learning=False),
        update_weblog=update_weblog,
        dimensions=DIM,
    )


def _state(i: int) -> np.ndarray:
    v = np.zeros(DIM)
    v[i % DIM] = 1.0
    return v


def test_path_has_max_step_steps_then_restarts_from_the_start_list() -> None:
    rng = random.Random(0)
    forager = _forager()
    visits = []
    for _ in range(MAX_STEP + 2):
        url = forager.next_url(rng)
        visits.append(url)
        n = len(visits)
        forager.observe(url, _state(n), [(f"p{n}", _state(n + 1))])  # a chain s -> p1 -> p2
        forager.step_done(100.0 if n == 3 else 0.0)
    # Algorithm 11: the starting URL, then MAX_STEP steps chosen by the ordering.
    assert visits[0] == "s" and visits[1 : MAX_STEP + 1] == [f"p{i}" for i in range(1, 101)]
    # ... then a new path from the start list, which the weblog update has just reordered.
    assert forager.weblog.start_list()[:3] == ["p1", "p2", "s"]
    assert visits[MAX_STEP + 1] in forager.weblog.start_list()
    assert forager.paths == 2
    # The weblog was updated with the first path: s and p1, p2 earned the 100 of step 3.
    assert forager.weblog.value("s") == pytest.approx(0.7 * 0.0 + 0.3 * 100.0)
    assert forager.weblog.value("p2") == 100.0
    assert forager.weblog.value("p3") == 0.0


def test_frontier_is_cleared_and_dead_end_restarts() -> None:
    rng = random.Random(0)
    forager = _forager(update_weblog=False)
    assert forager.next_url(rng) == "s"
    forager.observe("s", _state(0), [])
    forager.step_done(0.0)
    assert forager.next_url(rng) == "s"  # empty frontier: a new path
    assert forager.paths == 2
    assert forager.weblog.value("s") == 0.0  # no weblog update for a fixed start list


def test_select_to_send_keeps_fresh_pages_not_sent_before() -> None:
    forager = _forager()
    now = 100_000.0
    pages = [("new", now - 3600), ("old", now - 25 * 3600), ("edge", now - 24 * 3600)]
    assert forager.select_to_send(pages, now) == ["new", "edge"]
    assert forager.select_to_send(pages, now) == []
    assert forager.sent == 2


def test_agent_rewards_first_fresh_report_and_keeps_scores() -> None:
    agent = ReinforcingAgent()
    a, b = _forager(), _forager()
    now = 100_000.0
    assert agent.receive(a, "x", now - 10, now) == 100.0
    assert agent.receive(b, "x", now - 10, now) == -1.0  # already rewarded to a
    assert agent.receive(a, "y", now - 90_000, now) == -1.0  # older than 24 h
    assert a.score == pytest.approx(100 - 2 * 0.05 + 1)
    assert b.score == pytest.approx(100 - 0.05)
    assert agent.sent == 3 and agent.relevants == {"x"}


def test_split_at_200_only_below_sixteen_foragers() -> None:
    rng = random.Random(0)
    first = _forager(seeds=tuple(f"s{i}" for i in range(20)))
    fleet = Fleet([first, _forager()])
    first.score = 199.99
    fleet.manage(first, rng)
    assert len(fleet.foragers) == 2
    first.score = 200.0
    fleet.manage(first, rng)
    assert len(fleet.foragers) == 3
    child = fleet.foragers[-1]
    assert first.score == 100.0 and child.score == 100.0
    assert len(first.weblog) == 10 and len(child.weblog) == 10  # the weblog halved
    assert isinstance(child.ordering, ValueOrdering)
    assert isinstance(first.ordering, ValueOrdering)
    assert not np.array_equal(child.ordering.weights, first.ordering.weights)  # new random
    full = Fleet([_forager() for _ in range(16)])
    full.foragers[0].score = 500.0
    full.manage(full.foragers[0], rng)
    assert len(full.foragers) == 16


def test_learning_child_copies_weights_and_fixed_start_list() -> None:
    parent = Forager(
        Weblog.from_seeds(["a", "b"]),
        ValueOrdering(np.ones(DIM), learning=True),
        update_weblog=False,
        dimensions=DIM,
    )
    child = parent.multiply(random.Random(0))
    assert isinstance(child.ordering, ValueOrdering)
    assert np.array_equal(child.ordering.weights, np.ones(DIM))
    assert child.weblog.start_list() == ["a", "b"] == parent.weblog.start_list()


def test_removed_at_zero_only_above_two_foragers() -> None:
    rng = random.Random(0)
    fleet = Fleet([_forager() for _ in range(3)])
    doomed = fleet.foragers[1]
    doomed.score = 0.01
    fleet.manage(doomed, rng)
    assert len(fleet.foragers) == 3
    doomed.score = 0.0
    fleet.manage(doomed, rng)
    assert len(fleet.foragers) == 2 and doomed not in fleet.foragers
    fleet.foragers[0].score = -5.0
    fleet.manage(fleet.foragers[0], rng)
    assert len(fleet.foragers) == 2


def test_slices_go_round_the_fleet_and_survive_a_removal() -> None:
    rng = random.Random(0)
    foragers = [_forager() for _ in range(3)]
    fleet = Fleet(foragers)
    assert fleet.active is foragers[0]
    foragers[0].score = -1.0
    assert fleet.end_slice(rng) is foragers[1]  # the removed one's successor runs next
    assert fleet.end_slice(rng) is foragers[2]
    assert fleet.end_slice(rng) is foragers[1]


def test_breadth_first_visits_in_insertion_order() -> None:
    rng = random.Random(0)
    forager = Forager(
        Weblog.from_seeds(["s"]), BreadthFirstOrdering(), update_weblog=False, dimensions=DIM
    )
    forager.next_url(rng)
    forager.observe("s", _state(0), [("a", _state(3)), ("b", _state(1)), ("c", _state(2))])
    forager.step_done(0.0)
    assert [forager.next_url(rng) for _ in range(3)] == ["a", "b", "c"]
