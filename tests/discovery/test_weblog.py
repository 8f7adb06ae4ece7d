"""Algorithm 1 (weblog update), the start list and the split, checked by hand arithmetic."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from crawler.discovery import Weblog


def test_new_urls_take_the_sum_of_the_rest_of_the_path() -> None:
    log = Weblog()
    log.update(["a", "b", "c"], [100.0, -1.0, 100.0])
    assert log.value("a") == 199.0
    assert log.value("b") == 99.0
    assert log.value("c") == 100.0
    assert log.start_list() == ["a", "c", "b"]


def test_revisited_urls_move_toward_the_new_sum() -> None:
    log = Weblog([("a", 10.0), ("b", 50.0)])
    log.update(["x", "a", "b"], [0.0, -1.0, 100.0])
    assert log.value("a") == pytest.approx(0.7 * 10.0 + 0.3 * 99.0)
    assert log.value("b") == pytest.approx(0.7 * 50.0 + 0.3 * 100.0)
    assert log.value("x") == 99.0


def test_weblog_is_truncated_to_its_best_and_restarts_from_its_ten_best() -> None:
    log = Weblog()
    urls = [f"u{i}" for i in range(150)]
    log.update(urls, [1.0] * 150)  # u0 has the largest tail sum, u149 the smallest
    assert len(log) == 100
    assert "u0" in log and "u99" in log and "u100" not in log
    assert log.start_list() == [f"u{i}" for i in range(10)]
    rng = random.Random(3)
    draws = Counter(log.choose_start(rng) for _ in range(5_000))
    assert set(draws) == {f"u{i}" for i in range(10)}
    assert min(draws.values()) > 400 and max(draws.values()) < 600  # uniform over the ten


def test_split_moves_a_random_half() -> None:
    log = Weblog((f"u{i}", float(i)) for i in range(100))
    child = log.split(random.Random(1))
    assert len(child) == 50 and len(log) == 50
    assert not set(dict(child.entries())) & set(dict(log.entries()))
    assert all(child.value(u) == float(u[1:]) for u, _ in child.entries())


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError):
        Weblog().update(["a"], [1.0, 2.0])
    with pytest.raises(ValueError):
        Weblog().choose_start(random.Random(0))
    with pytest.raises(ValueError):
        Weblog(size=0)


def test_random_ties_let_every_seed_start_a_path() -> None:
    seeds = [f"s{i}" for i in range(30)]
    stable = Weblog.from_seeds(seeds)
    shuffled = Weblog.from_seeds(seeds, ties=random.Random(1))
    rng = random.Random(2)
    tried_stable: set[str] = set()
    tried_shuffled: set[str] = set()
    for _ in range(100):
        for log, tried in ((stable, tried_stable), (shuffled, tried_shuffled)):
            start = log.choose_start(rng)
            tried.add(start)
            log.update([start], [0.0])  # a path that earned nothing
    assert tried_stable <= set(seeds[:10])
    assert len(tried_shuffled) >= 25
    shuffled.update(["s29"], [5.0])
    assert shuffled.start_list()[0] == "s29"  # values still rank first
